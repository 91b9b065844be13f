// A TCP echo server: one Lazy per connection, on a ThreadPool whose workers run the I/O.
//   echo_server PORT          serves 127.0.0.1:PORT until SIGINT or SIGTERM, then stops
//                             accepting, lets connections finish (5 s at most), cancels
//                             the rest, and exits 0.
// Environment: WEFT_THREADS (workers, default 1), WEFT_IO_BACKEND (io_uring or epoll),
// READ_TIMEOUT_MS (close a connection idle that long; default: never), SHUTDOWN_GRACE_MS
// (what a stop leaves connections to finish; default 5000).
// The handler and the accept loop are in echo_server.h; echo_server_test.cc tests them in
// virtual time, over connections with faults (weft::testing).
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>

#include "echo_server.h"
#include "server.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
    return 2;
  }
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  const char* threads = std::getenv("WEFT_THREADS");
  weft::ThreadPool pool(threads != nullptr ? std::strtoul(threads, nullptr, 10) : 1, "echo");
  auto listener =
      weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1", std::atoi(argv[1])));
  EchoOptions options;
  if (const char* timeout = std::getenv("READ_TIMEOUT_MS")) {
    options.idleTimeout = std::chrono::milliseconds(std::atol(timeout));
  }
  options.shutdownGrace = shutdownGrace(options.shutdownGrace);
  std::printf("echo_server: 127.0.0.1:%d, %s, %zu thread(s)\n", listener.localAddress().port(),
              weft::ioBackendName(pool.ioBackend()).data(), pool.threadCount());
  std::fflush(stdout);

  const int signal = runUntilSignal(pool, signals, [&](weft::CancellationToken stop) {
    return serveEcho(listener, options, std::move(stop));
  });
  std::printf("echo_server: stopped by signal %d\n", signal);
  return 0;
}
