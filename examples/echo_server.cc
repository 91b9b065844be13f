// A TCP echo server: one Lazy per connection, on a ThreadPool whose workers run the I/O.
//   echo_server PORT          serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), then
//                             shuts the pool down, which cancels the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// READ_TIMEOUT_MS (close a connection idle that long; default: never).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <weft/coro/cancellation.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/with_cancellation.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

using namespace std::chrono_literals;

std::atomic<int> openConnections{0};
const long readTimeoutMs =
    std::getenv("READ_TIMEOUT_MS") != nullptr ? std::atol(std::getenv("READ_TIMEOUT_MS")) : 0;

// The plain style: receive what arrived into a buffer the event loop lends, write it all
// back, give the buffer back (the LentBuffer's destructor). A connection waiting for data
// holds no buffer: the loop picks one only when bytes arrive.
weft::Lazy<void> echo(weft::TcpStream stream) {
  stream.setReadTimeout(std::chrono::milliseconds(readTimeoutMs));  // 0: no limit
  try {
    for (;;) {
      weft::LentBuffer data = co_await stream.receive();
      if (data.empty()) break;  // the peer ended the stream
      co_await stream.writeAll(data);
    }
  } catch (const std::exception&) {  // reset by the peer, timed out, or cancelled: close it
  }
  openConnections.fetch_sub(1);
}

weft::Lazy<void> acceptLoop(weft::TcpListener& listener) {
  weft::Executor* executor = co_await weft::currentExecutor();
  for (;;) {
    weft::TcpStream stream = co_await listener.accept();  // throws OperationCancelled at shutdown
    openConnections.fetch_add(1);
    echo(std::move(stream)).via(executor).start([](weft::Try<void>) {});
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // first: the pool's threads inherit the mask
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "echo");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  weft::CancellationSource stopAccepting;
  std::atomic<bool> acceptStopped{false};
  weft::withCancellation(stopAccepting.token(), acceptLoop(listener))
      .via(&pool)
      .start([&](weft::Try<void>) { acceptStopped = true; });
  std::printf("echo_server: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
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
  std::printf("echo_server: stopped by signal %d\n", signal);
  return 0;
}
