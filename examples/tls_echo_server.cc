// A TLS echo server: one Lazy per connection reads what the client sent and writes it all
// back, over weft::TlsStream. Its connections live in a TaskGroup: on SIGINT or SIGTERM it
// stops accepting, gives the open connections 5 s to finish, cancels the rest and exits 0.
//   tls_echo_server PORT CHAIN.pem KEY.pem   serves 127.0.0.1:PORT with that certificate
//                                            chain (the leaf first) and its private key
// A client that stalls in the handshake is dropped after 10 s.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// READ_TIMEOUT_MS (close a connection idle that long after its handshake; default: never),
// SHUTDOWN_GRACE_MS (what a stop leaves connections to finish; default 5000).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tls_stream.h>

#include "server.h"

using namespace std::chrono_literals;

const std::chrono::milliseconds readTimeout(std::getenv("READ_TIMEOUT_MS") != nullptr
                                                ? std::atol(std::getenv("READ_TIMEOUT_MS"))
                                                : 0);

// One connection: the handshake, then echo until the client ends it (close_notify), or
// a TLS or transport error, the read time limit or the shutdown's cancellation does.
// The decrypted bytes come in buffers the event loop lends: a connection waiting for
// data holds none.
weft::Lazy<void> echo(weft::TcpStream tcp, weft::TlsContext context) {
  try {
    tcp.setReadTimeout(10s);  // the handshake's reads
    weft::TlsStream tls = co_await weft::TlsStream::accept(std::move(tcp), std::move(context));
    tls.transport().setReadTimeout(readTimeout);  // 0: no limit
    for (;;) {
      weft::LentBuffer data = co_await tls.receive();
      if (data.empty()) break;  // the client's close_notify
      co_await tls.writeAll(data);
    }
    co_await tls.shutdown();  // answer with ours
  } catch (const std::exception&) {  // a failed handshake, a reset, a truncation, shutdown
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PORT CHAIN.pem KEY.pem\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  const weft::TlsContext context =
      weft::TlsContext::server(weft::TlsPem::file(argv[2]), weft::TlsPem::file(argv[3]));
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "tls-echo");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("tls_echo_server: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    auto handler = [&context](weft::TcpStream stream) { return echo(std::move(stream), context); };
    return serveConnections(listener, handler, std::move(stop), shutdownGrace(5s));
  });
  std::printf("tls_echo_server: stopped by signal %d\n", signal);
  return 0;
}
