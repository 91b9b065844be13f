// A TCP echo server written as blocking-style code: one fiber per connection, each
// calling weft::await(stream.receive()); the fibers share the pool's event loops.
//   fiber_echo_server PORT    serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), cancels
//                             the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// SHUTDOWN_GRACE_MS (what a stop leaves connections to finish; default 5000).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/executors/lent_buffer.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/stackful/await.h>
#include <weft/stackful/in_fiber.h>

#include "server.h"

using namespace std::chrono_literals;

// The plain style, as blocking code: what arrived comes in a buffer the event loop lends
// (held only from the receive to the end of the write), so a fiber waiting for data holds
// no buffer beyond its stack. Each weft::await is cancellable: at the server's stop
// deadline, the one this fiber waits in throws OperationCancelled.
void echo(weft::TcpStream stream) {
  try {
    for (;;) {
      weft::LentBuffer data = weft::await(stream.receive());
      if (data.empty()) break;  // the peer ended the stream
      weft::await(stream.writeAll(data));
    }
  } catch (const std::exception&) {  // reset by the peer, or cancelled at the stop: close it
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "fiber-echo");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  std::printf("fiber_echo_server: 127.0.0.1:%d, %s, %zu thread(s)\n",
              listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  // Each connection a fiber (weft::inFiber), a task of serveConnections' group like any
  // Lazy: the group's cancellation reaches the fiber's awaits.
  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    auto inFiber = [](weft::TcpStream stream) {
      return weft::inFiber([s = std::move(stream)]() mutable { echo(std::move(s)); });
    };
    return serveConnections(listener, inFiber, std::move(stop), shutdownGrace(5s));
  });
  std::printf("fiber_echo_server: stopped by signal %d\n", signal);
  return 0;
}
