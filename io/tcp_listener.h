#pragma once

#include <sys/socket.h>

#include "weft/coro/lazy.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_stream.h"

namespace weft {

struct TcpListenerOptions {
  bool reuseAddress = true;  // SO_REUSEADDR: rebind at once after a restart
  bool reusePort = false;    // SO_REUSEPORT: several listeners share the port
  int backlog = SOMAXCONN;   // listen(2)'s queue of connections not yet accepted
};

// TcpListener: a listening stream socket (TCP over IPv4/IPv6, or a Unix domain path);
// `co_await listener.accept()` yields each new connection as a TcpStream.
//
// Semantics:
//  - accept() waits on the calling thread's event loop (a ThreadPool worker's), like
//    TcpStream's operations, and honours cancellation the same way: the usual way to stop
//    an accept loop is to cancel it (a Task's token, withCancellation, withTimeout).
//  - Running out of file descriptors (EMFILE, ENFILE) or of socket memory (ENOBUFS,
//    ENOMEM) does not fail accept() and does not spin: it waits (10 ms, doubling up to
//    1 s) and tries again, so open connections keep being served and accepting resumes
//    once some close. The same holds when the first accept on a worker cannot create
//    that worker's event loop for lack of descriptors. A connection the peer aborted before it was accepted
//    (ECONNABORTED) is skipped.
//  - Unix domain stream sockets use these same types (there is no UnixListener or
//    UnixStream): bind to `SocketAddress::unixPath("/run/app.sock")` or an abstract
//    "@name", and TcpStream::connect to it. An accepted stream's peer is the unnamed
//    address ("unix:"). bind() does not remove an existing path; the destructor does not
//    unlink it.
//
// Errors: bind throws std::system_error (EADDRINUSE, EACCES...) naming the address, and
// std::invalid_argument for an empty address; accept throws std::system_error for other
// failures, EBADF when closed, OperationCancelled, ExecutorShutDown.
//
// Thread safety: distinct listeners are independent; several accepts on one listener
// may be in flight (each connection goes to one of them).
//
// Example:
//   auto listener = weft::TcpListener::bind(weft::SocketAddress::parse("127.0.0.1:8080"));
//   for (;;) serve(co_await listener.accept()).via(pool).start([](auto&&) {});
class TcpListener {
 public:
  TcpListener() noexcept = default;
  TcpListener(TcpListener&& other) noexcept : fd_(other.fd_), tcp_(other.tcp_) { other.fd_ = -1; }
  TcpListener& operator=(TcpListener&& other) noexcept;
  ~TcpListener();

  static TcpListener bind(const SocketAddress& address, TcpListenerOptions options = {});

  // The next connection. TCP streams come with TCP_NODELAY set.
  Lazy<TcpStream> accept();

  // The bound address (with the port the kernel chose for port 0).
  SocketAddress localAddress() const;

  // Closes the socket. Idempotent. An accept waiting on it (from any thread) ends with
  // std::system_error ECANCELED ("the socket was closed while the operation waited"),
  // and the descriptor is closed once it has ended: a server stops by closing its
  // listener. close() must not race with the start of an accept.
  void close() noexcept;
  bool isOpen() const noexcept { return fd_ >= 0; }
  int nativeHandle() const noexcept { return fd_; }

 private:
  explicit TcpListener(int fd, bool tcp) noexcept : fd_(fd), tcp_(tcp) {}
  int fd_ = -1;
  bool tcp_ = true;
};

}  // namespace weft
