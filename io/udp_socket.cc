#include "weft/io/udp_socket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "weft/io/detail/fd_waits.h"
#include "weft/io/detail/socket_util.h"

namespace weft {

UdpSocket& UdpSocket::operator=(UdpSocket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UdpSocket::~UdpSocket() { close(); }

void UdpSocket::close() noexcept {
  // Operations still waiting on the descriptor end (see detail::closeDescriptor).
  detail::closeDescriptor(std::exchange(fd_, -1));
}

UdpSocket UdpSocket::bind(const SocketAddress& address, UdpSocketOptions options) {
  if (address.family() == AF_UNSPEC) {
    throw std::invalid_argument("weft: UdpSocket::bind: the address is empty");
  }
  UdpSocket socket(detail::openSocket(address.family(), SOCK_DGRAM, "UdpSocket::bind"));
  if (address.isIpv4() || address.isIpv6()) {
    if (options.reuseAddress) {
      detail::setSocketOption(socket.fd_, SOL_SOCKET, SO_REUSEADDR, true, "SO_REUSEADDR");
    }
    if (options.reusePort) {
      detail::setSocketOption(socket.fd_, SOL_SOCKET, SO_REUSEPORT, true, "SO_REUSEPORT");
    }
    if (options.broadcast) socket.setBroadcast(true);
  }
  if (::bind(socket.fd_, address.native(), address.nativeLength()) != 0) {
    throw std::system_error(errno, std::system_category(), "weft: bind to " + address.toString());
  }
  return socket;
}

UdpSocket UdpSocket::open(int family) {
  UdpSocket socket(detail::openSocket(family, SOCK_DGRAM, "UdpSocket::open"));
  if (family == AF_UNIX) {
    // Autobind: a length of just the family asks Linux for a unique abstract name, so
    // that a peer can reply (an unbound Unix datagram socket has no address to reply to).
    sockaddr_storage storage{};
    storage.ss_family = AF_UNIX;
    if (::bind(socket.fd_, reinterpret_cast<const sockaddr*>(&storage), sizeof(sa_family_t)) != 0) {
      throw std::system_error(errno, std::system_category(),
                              "weft: UdpSocket::open: binding a Unix socket to an abstract name");
    }
  }
  return socket;
}

void UdpSocket::connect(const SocketAddress& address) {
  if (address.family() == AF_UNSPEC) {
    throw std::invalid_argument("weft: UdpSocket::connect: the address is empty");
  }
  if (fd_ < 0) detail::throwClosed("connect");
  // A datagram socket's connect(2) only records the peer: it does not block.
  if (::connect(fd_, address.native(), address.nativeLength()) != 0) {
    throw std::system_error(errno, std::system_category(),
                            "weft: connect to " + address.toString());
  }
}

void UdpSocket::setBroadcast(bool on) {
  detail::setSocketOption(fd_, SOL_SOCKET, SO_BROADCAST, on, "SO_BROADCAST");
}

SocketAddress UdpSocket::localAddress() const { return detail::socketName(fd_, false); }

SocketAddress UdpSocket::peerAddress() const { return detail::socketName(fd_, true); }

}  // namespace weft
