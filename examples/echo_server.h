// The echo server of examples/echo_server.cc without its main(): the connection handler
// and the accept loop with its graceful stop, as functions that main() runs on a
// ThreadPool and examples/echo_server_test.cc runs in virtual time (weft::testing).
#pragma once

#include <chrono>
#include <exception>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/lazy.h>
#include <weft/coro/task_group.h>
#include <weft/coro/with_cancellation.h>
#include <weft/coro/with_timeout.h>
#include <weft/executors/lent_buffer.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tcp_stream.h>

struct EchoOptions {
  std::chrono::milliseconds idleTimeout{0};       // close a connection idle that long; 0: never
  std::chrono::milliseconds shutdownGrace{5000};  // after a stop, what connections have left
};

// One connection, in the plain style: receive what arrived into a buffer the event loop
// lends, write it all back, give the buffer back (the LentBuffer's destructor). A
// connection waiting for data holds no buffer: the loop picks one only when bytes arrive.
// Returns when the client ends the stream; throws what ended it otherwise:
// std::system_error ETIMEDOUT after `idleTimeout` without a byte, ECONNRESET when the
// client reset it, OperationCancelled when the server stops. The stream closes either way.
inline weft::Lazy<void> echo(weft::TcpStream stream, std::chrono::milliseconds idleTimeout) {
  stream.setReadTimeout(idleTimeout);  // 0: no limit
  for (;;) {
    weft::LentBuffer data = co_await stream.receive();
    if (data.empty()) co_return;  // the client ended the stream
    co_await stream.writeAll(data);
  }
}

// Serves `listener` until `stop` is cancelled: each connection is an echo() in a
// TaskGroup. Then it stops accepting, gives the open connections options.shutdownGrace to
// finish, cancels those still open at that deadline, and returns once all have ended.
// Errors: what accept throws (other than the cancellation by `stop`), after the graceful
// stop. A connection's own failure (a reset, its idle timeout) only closes it.
inline weft::Lazy<void> serveEcho(weft::TcpListener& listener, EchoOptions options,
                                  weft::CancellationToken stop) {
  weft::TaskGroup<> connections(co_await weft::currentExecutor());
  std::exception_ptr failure;
  try {
    for (;;) {
      weft::TcpStream stream = co_await weft::withCancellation(stop, listener.accept());
      connections.spawn(echo(std::move(stream), options.idleTimeout));
    }
  } catch (const weft::OperationCancelled&) {  // stopped: accept no more
  } catch (...) {
    failure = std::current_exception();
  }
  try {
    // At the deadline, withTimeout cancels the join, which cancels the group: every
    // connection still open ends (its receive throws OperationCancelled) and closes.
    co_await weft::withTimeout(connections.join(), options.shutdownGrace);
  } catch (const std::exception&) {
    // The timeout, or the first connection that failed: neither stops the server.
  }
  if (failure) std::rethrow_exception(failure);
}
