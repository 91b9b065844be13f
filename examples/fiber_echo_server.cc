// A TCP echo server written as blocking-style code: one fiber per connection, each
// calling weft::await(stream.receive()); the fibers share the pool's event loops.
//   fiber_echo_server PORT    serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), then
//                             shuts the pool down, which cancels the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <weft/coro/cancellation.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/stackful/await.h>
#include <weft/stackful/spawn_fiber.h>

using namespace std::chrono_literals;

std::atomic<int> openConnections{0};

// The plain style, as blocking code: what arrived comes in a buffer the event loop lends
// (held only from the receive to the end of the write), so a fiber waiting for data holds
// no buffer beyond its stack.
void echo(weft::TcpStream stream) {
  try {
    for (;;) {
      weft::LentBuffer data = weft::await(stream.receive());
      if (data.empty()) break;  // the peer ended the stream
      weft::await(stream.writeAll(data));
    }
  } catch (const std::exception&) {  // reset by the peer, or cancelled at shutdown: close it
  }
  openConnections.fetch_sub(1);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // first: the pool's threads inherit the mask
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "fiber-echo");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  weft::CancellationSource stopAccepting;
  weft::SpawnOptions acceptorOptions;
  acceptorOptions.cancellationToken = stopAccepting.token();
  auto acceptor = weft::spawnFiber(&pool, [&] {
    try {
      for (;;) {
        weft::TcpStream stream = weft::await(listener.accept());  // cancelled at shutdown
        openConnections.fetch_add(1);
        (void)weft::spawnFiber(&pool, [s = std::move(stream)]() mutable { echo(std::move(s)); });
      }
    } catch (const weft::OperationCancelled&) {
    }
  }, acceptorOptions);
  std::printf("fiber_echo_server: 127.0.0.1:%d, %s, %zu thread(s)\n",
              listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = weft::syncAwait(signals.wait().via(&pool));
  stopAccepting.requestCancellation();
  weft::syncAwait(std::move(acceptor));
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (openConnections > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  pool.shutdown();  // cancels the I/O of what is still open: those connections close
  std::printf("fiber_echo_server: stopped by signal %d\n", signal);
  return 0;
}
