// A minimal HTTP/1.1 server answering every request with "hello", keeping connections
// alive (pipelined requests are answered in order, with one write per batch).
//   http_hello PORT           serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), then
//                             shuts the pool down, which cancels the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include <weft/coro/cancellation.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/with_cancellation.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

using namespace std::chrono_literals;

std::atomic<int> openConnections{0};
constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello";

// The calling thread's buffer for what arrived, between two suspensions (a function: a
// coroutine may resume on another thread, and a thread_local named in it may not follow).
std::span<char> threadBuffer() {
  thread_local std::array<char, 16384> buffer;
  return buffer;
}

// An idle connection holds no buffer: it waits until a request arrives, reads it into its
// thread's buffer and answers every whole request in it with one write. Only a request
// cut in two by the network is kept (`partial`) until the rest arrives.
weft::Lazy<void> serve(weft::TcpStream stream) {
  std::string partial, response;
  try {
    for (;;) {
      co_await stream.readable();
      const std::span<char> buffer = threadBuffer();
      const std::optional<std::size_t> n = stream.tryRead(std::as_writable_bytes(buffer));
      if (!n) continue;    // readiness is a hint: wait again
      if (*n == 0) break;  // the peer closed the connection
      std::string_view data(buffer.data(), *n);
      if (!partial.empty()) data = partial.append(data);
      std::size_t end;
      while ((end = data.find("\r\n\r\n")) != std::string_view::npos) {  // a whole request
        data.remove_prefix(end + 4);
        response += kResponse;
      }
      partial = std::string(data);  // usually empty (no allocation)
      if (partial.size() > 65536) break;  // a header that never ends
      if (response.empty()) continue;
      const std::size_t sent = stream.tryWrite(std::as_bytes(std::span(response))).value_or(0);
      if (sent < response.size()) co_await stream.writeAll(std::string_view(response).substr(sent));
      response.clear();
    }
  } catch (const std::exception&) {  // reset by the peer, or cancelled at shutdown
  }
  openConnections.fetch_sub(1);
}

weft::Lazy<void> acceptLoop(weft::TcpListener& listener) {
  weft::Executor* executor = co_await weft::currentExecutor();
  for (;;) {
    weft::TcpStream stream = co_await listener.accept();  // throws OperationCancelled at shutdown
    openConnections.fetch_add(1);
    serve(std::move(stream)).via(executor).start([](weft::Try<void>) {});
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // first: the pool's threads inherit the mask
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "http");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  weft::CancellationSource stopAccepting;
  std::atomic<bool> acceptStopped{false};
  weft::withCancellation(stopAccepting.token(), acceptLoop(listener))
      .via(&pool)
      .start([&](weft::Try<void>) { acceptStopped = true; });
  std::printf("http_hello: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = weft::syncAwait(signals.wait().via(&pool));
  stopAccepting.requestCancellation();
  while (!acceptStopped) std::this_thread::sleep_for(1ms);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (openConnections > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  pool.shutdown();  // cancels the I/O of what is still open: those connections close
  std::printf("http_hello: stopped by signal %d\n", signal);
  return 0;
}
