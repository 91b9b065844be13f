// A minimal HTTPS/1.1 server answering every request with "hello", keeping connections
// alive (pipelined requests answered in order, with one write per batch), on
// weft::TlsStream. Its connections live in a TaskGroup: on SIGINT or SIGTERM it stops
// accepting, gives the open connections 5 s to finish, cancels the rest and exits 0.
//   https_hello PORT CHAIN.pem KEY.pem    serves 127.0.0.1:PORT with that certificate
//                                         chain (the leaf first) and its private key
// A client that stalls in the handshake or between requests is dropped after 10 s.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>

#include <weft/coro/cancellation.h>
#include <weft/coro/collect.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/task_group.h>
#include <weft/coro/with_cancellation.h>
#include <weft/coro/with_timeout.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tls_stream.h>

using namespace std::chrono_literals;

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";
constexpr std::size_t kMaxHeader = 65536;  // a longer request header: we close

// One connection: the handshake, then requests until the client closes (or a read time
// limit, a bad request, a TLS error, or the shutdown's cancellation ends it).
weft::Lazy<void> serve(weft::TcpStream tcp, weft::TlsContext context) {
  try {
    tcp.setReadTimeout(10s);  // the handshake's reads too
    weft::TlsStream tls = co_await weft::TlsStream::accept(std::move(tcp), std::move(context));
    std::string pending;  // bytes of requests not answered yet
    char buffer[2048];  // in the frame: an idle connection keeps it
    for (;;) {
      const std::size_t n = co_await tls.read(std::span<char>(buffer));
      if (n == 0) break;  // close_notify
      pending.append(buffer, n);
      std::size_t answered = 0;
      std::size_t end;
      while ((end = pending.find("\r\n\r\n")) != std::string::npos) {  // whole requests
        pending.erase(0, end + 4);
        ++answered;
      }
      if (pending.size() > kMaxHeader) break;
      if (answered == 1) {
        co_await tls.writeAll(kResponse);
      } else if (answered > 1) {
        std::string responses;
        responses.reserve(answered * kResponse.size());
        for (std::size_t i = 0; i < answered; ++i) responses += kResponse;
        co_await tls.writeAll(responses);
      }
    }
    co_await tls.shutdown();
  } catch (const std::exception&) {  // a failed handshake, a reset, a time limit, shutdown
  }
}

// Accepts until `stop` is cancelled; every connection goes into `connections`.
weft::Lazy<void> acceptLoop(weft::TcpListener& listener, const weft::TlsContext& context,
                            weft::TaskGroup<void>& connections) {
  for (;;) connections.spawn(serve(co_await listener.accept(), context));
}

weft::Lazy<void> server(weft::TcpListener& listener, weft::TlsContext context,
                        weft::CancellationToken stop) {
  weft::TaskGroup<void> connections(co_await weft::currentExecutor());
  try {
    co_await weft::withCancellation(stop, acceptLoop(listener, context, connections));
  } catch (const weft::OperationCancelled&) {  // the stop
  }
  try {
    // join() under a time limit: when it runs out, the group is cancelled, and join
    // returns once every connection has ended.
    co_await weft::withTimeout(connections.join(), 5s);
  } catch (const weft::TimeoutError&) {
  } catch (const weft::OperationCancelled&) {
  }
}

weft::Lazy<int> stopOnSignal(weft::SignalSet& signals, weft::CancellationSource& stop) {
  const int signal = co_await signals.wait();
  stop.requestCancellation();
  co_return signal;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PORT CHAIN.pem KEY.pem\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // first: the pool's threads inherit the mask
  weft::TlsContext context =
      weft::TlsContext::server(weft::TlsPem::file(argv[2]), weft::TlsPem::file(argv[3]));
  context.setAlpnProtocols({"http/1.1"});
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "https");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("https_hello: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  weft::CancellationSource stop;
  auto [served, signal] = weft::syncAwait(
      weft::collectAll(server(listener, context, stop.token()), stopOnSignal(signals, stop))
          .via(&pool));
  served.value();
  std::printf("https_hello: stopped by signal %d\n", signal.value());
  return 0;
}
