#include "weft/io/tcp_listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/coro/sleep.h"
#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/socket_util.h"

namespace weft {

TcpListener& TcpListener::operator=(TcpListener&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    tcp_ = other.tcp_;
    other.fd_ = -1;
  }
  return *this;
}

TcpListener::~TcpListener() { close(); }

void TcpListener::close() noexcept {
  // Operations still waiting on the descriptor end (see detail::closeDescriptor).
  detail::closeDescriptor(std::exchange(fd_, -1));
}

TcpListener TcpListener::bind(const SocketAddress& address, TcpListenerOptions options) {
  if (address.family() == AF_UNSPEC) {
    throw std::invalid_argument("weft: TcpListener::bind: the address is empty");
  }
  const bool tcp = address.isIpv4() || address.isIpv6();
  TcpListener listener(detail::openSocket(address.family(), SOCK_STREAM, "TcpListener::bind"), tcp);
  if (tcp) {
    if (options.reuseAddress) {
      detail::setSocketOption(listener.fd_, SOL_SOCKET, SO_REUSEADDR, true, "SO_REUSEADDR");
    }
    if (options.reusePort) {
      detail::setSocketOption(listener.fd_, SOL_SOCKET, SO_REUSEPORT, true, "SO_REUSEPORT");
    }
  }
  if (::bind(listener.fd_, address.native(), address.nativeLength()) != 0) {
    throw std::system_error(errno, std::system_category(), "weft: bind to " + address.toString());
  }
  if (::listen(listener.fd_, options.backlog) != 0) {
    throw std::system_error(errno, std::system_category(), "weft: listen on " + address.toString());
  }
  return listener;
}

Lazy<TcpStream> TcpListener::accept() {
  using namespace std::chrono_literals;
  std::chrono::milliseconds backoff = 10ms;
  for (;;) {
    try {
      const std::size_t fd =
          co_await IoOperationAwaitable("accept on a TcpListener", IoOpcode::kAccept, fd_);
      TcpStream stream(static_cast<int>(fd));
      if (tcp_) stream.setNoDelay(true);
      co_return stream;
    } catch (const std::system_error& e) {
      // Compared as std::errc: the failure may come from the accept itself
      // (system_category) or from setting up this worker's event loop on its first I/O
      // (IoLoop::create, generic_category), which needs descriptors too.
      const std::error_code& code = e.code();
      if (code == std::errc::connection_aborted || code == std::errc::interrupted ||
          code == std::errc::protocol_error) {
        continue;
      }
      if (code != std::errc::too_many_files_open &&
          code != std::errc::too_many_files_open_in_system &&
          code != std::errc::no_buffer_space && code != std::errc::not_enough_memory) {
        throw;
      }
    }
    // Out of descriptors or memory: the pending connection stays in the backlog; wait
    // for some to close rather than spin on the same failure.
    co_await sleep(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1s);
  }
}

SocketAddress TcpListener::localAddress() const { return detail::socketName(fd_, false); }

}  // namespace weft
