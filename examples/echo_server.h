// The echo server of examples/echo_server.cc without its main(): the connection handler
// and the accept loop with its graceful stop, as functions that main() runs on a
// ThreadPool and examples/echo_server_test.cc runs in virtual time (weft::testing).
#pragma once

#include <chrono>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/coro/lazy.h>
#include <weft/executors/lent_buffer.h>
#include <weft/io/tcp_listener.h>
#include <weft/io/tcp_stream.h>

#include "server.h"

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

// Serves `listener` until `stop` is cancelled, each connection an echo(); then lets the
// open connections finish within options.shutdownGrace and cancels the rest (see
// serveConnections in server.h). Errors: what accept throws, after the graceful stop.
inline weft::Lazy<void> serveEcho(weft::TcpListener& listener, EchoOptions options,
                                  weft::CancellationToken stop) {
  const auto idleTimeout = options.idleTimeout;
  co_await serveConnections(
      listener, [idleTimeout](weft::TcpStream stream) { return echo(std::move(stream), idleTimeout); },
      std::move(stop), options.shutdownGrace);
}
