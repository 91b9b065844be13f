// What weft's example servers share: the accept loop with its graceful stop
// (serveConnections), and running a server until SIGINT or SIGTERM (runUntilSignal).
// Structured concurrency instead of bookkeeping: the connections are the tasks of a
// TaskGroup, the stop is a cancellation, and the drain is a join under withTimeout - no
// counter of open connections, no polling.
#pragma once

#include <chrono>
#include <cstdlib>
#include <exception>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/coro/collect.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/task_group.h>
#include <weft/coro/with_cancellation.h>
#include <weft/coro/with_timeout.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tcp_stream.h>

// Serves `listener` until `stop` is cancelled: every accepted connection becomes
// handler(std::move(stream)) - a Lazy<void>, or weft::inFiber(...) for blocking-style code -
// spawned into a TaskGroup, where it runs concurrently with the others. Then it stops
// accepting, gives the open connections `grace` to finish, cancels those still open at
// that deadline (their cancellable awaits throw OperationCancelled and they close), and
// returns once every connection has ended: nothing outlives the call.
// Errors: what accept throws (other than the cancellation by `stop`), after the graceful
// stop. A connection's own failure (a reset, a time limit, bad input) ends only that
// connection.
template <class Handler>
weft::Lazy<void> serveConnections(weft::TcpListener& listener, Handler handler,
                                  weft::CancellationToken stop, std::chrono::milliseconds grace) {
  weft::TaskGroup<> connections(co_await weft::currentExecutor());
  std::exception_ptr failure;
  try {
    for (;;) {
      weft::TcpStream stream = co_await weft::withCancellation(stop, listener.accept());
      connections.spawn(handler(std::move(stream)));
    }
  } catch (const weft::OperationCancelled&) {  // stopped: accept no more
  } catch (...) {
    failure = std::current_exception();
  }
  try {
    // At the deadline, withTimeout cancels the join, which cancels the group; join still
    // returns only once every connection has ended.
    co_await weft::withTimeout(connections.join(), grace);
  } catch (const std::exception&) {
    // The timeout, or the first connection that failed: neither is the server's failure.
  }
  if (failure) std::rethrow_exception(failure);
}

// The grace of a graceful stop: SHUTDOWN_GRACE_MS from the environment when set, else
// `fallback`. test/examples/server_example_test.sh shortens it: the connection it leaves
// open through the stop would otherwise hold every run for the whole grace.
inline std::chrono::milliseconds shutdownGrace(std::chrono::milliseconds fallback) {
  const char* grace = std::getenv("SHUTDOWN_GRACE_MS");
  return grace != nullptr ? std::chrono::milliseconds(std::atol(grace)) : fallback;
}

// Runs `server(stopToken)` (a Lazy<void>) on `pool` until it returns, and beside it waits
// for one of `signals`, which cancels stopToken: the server stops gracefully. Returns the
// signal (0 if the server returned by itself); rethrows what ended the server otherwise.
// Make the SignalSet early in main(): until it exists, SIGINT and SIGTERM end the process.
template <class Server>
int runUntilSignal(weft::ThreadPool& pool, weft::SignalSet& signals, Server server) {
  weft::CancellationSource stop;
  weft::CancellationSource serverEnded;  // ends the wait for a signal
  auto serve = [&]() -> weft::Lazy<void> {
    try {
      co_await server(stop.token());
    } catch (...) {
      serverEnded.requestCancellation();
      throw;
    }
    serverEnded.requestCancellation();
  };
  auto stopOnSignal = [&]() -> weft::Lazy<int> {
    int signal = 0;
    try {
      signal = co_await weft::withCancellation(serverEnded.token(), signals.wait());
    } catch (const weft::OperationCancelled&) {  // the server returned first
      co_return 0;
    }
    stop.requestCancellation();
    co_return signal;
  };
  auto [served, signal] = weft::syncAwait(weft::collectAll(serve(), stopOnSignal()), &pool);
  served.value();  // rethrows what stopped the server otherwise
  return signal.value();
}
