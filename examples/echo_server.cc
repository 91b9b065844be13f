// A TCP echo server: one Lazy per connection, on a ThreadPool whose workers run the I/O.
//   echo_server PORT          serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), then
//                             shuts the pool down, which cancels the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// READ_TIMEOUT_MS (close a connection idle that long; default: never).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include <weft/coro/cancellation.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/with_cancellation.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

using namespace std::chrono_literals;

std::atomic<int> openConnections{0};
const long readTimeoutMs =
    std::getenv("READ_TIMEOUT_MS") != nullptr ? std::atol(std::getenv("READ_TIMEOUT_MS")) : 0;

// The calling thread's buffer for a message between two suspensions. A function, not a
// thread_local named in the coroutine: a coroutine may resume on another thread, and
// compilers may keep a thread_local's address across co_await.
std::span<std::byte> threadBuffer() {
  thread_local std::array<std::byte, 65536> buffer;
  return buffer;
}

// An idle connection holds no buffer, only this frame: it waits until data arrives (as
// tokio's readable() + try_read), reads it into its thread's buffer and writes it back
// at once; only what the peer cannot take yet is copied and kept until it is written.
// A read that filled the buffer is followed by another at once (more is there), up to 16
// in a row, so that one fast peer cannot hold up the other connections of its thread.
weft::Lazy<void> echo(weft::TcpStream stream) {
  stream.setReadTimeout(std::chrono::milliseconds(readTimeoutMs));  // 0: no limit
  unsigned readsWithoutWaiting = 0;
  try {
    for (;;) {
      if (readsWithoutWaiting == 0) co_await stream.readable();
      const std::span<std::byte> buffer = threadBuffer();
      const std::optional<std::size_t> n = stream.tryRead(buffer);
      const bool full = n == buffer.size();
      readsWithoutWaiting = full && readsWithoutWaiting < 16 ? readsWithoutWaiting + 1 : 0;
      if (!n) continue;    // readiness is a hint: wait again
      if (*n == 0) break;  // the peer ended the stream
      const std::size_t sent = stream.tryWrite(buffer.first(*n)).value_or(0);
      if (sent < *n) {
        std::vector<std::byte> rest(buffer.begin() + sent, buffer.begin() + *n);
        co_await stream.writeAll(rest);
      }
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
