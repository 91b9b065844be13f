#include "weft/io/detail/socket_util.h"

#include <sys/socket.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "weft/io/detail/socket_ops.h"

namespace weft::detail {

int openSocket(int family, int type, const char* what) {
  if (family == AF_UNSPEC) {
    throw std::system_error(EAFNOSUPPORT, std::system_category(),
                            std::string("weft: ") + what + ": the address is empty");
  }
  const int fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw std::system_error(errno, std::system_category(),
                            std::string("weft: ") + what + ": cannot create a socket");
  }
  return fd;
}

void setSocketOption(int fd, int level, int name, int value, const char* what) {
  if (fd < 0) throwClosed(what);
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
    throw std::system_error(errno, std::system_category(), std::string("weft: setting ") + what);
  }
}

void setSocketOption(int fd, int level, int name, bool on, const char* what) {
  setSocketOption(fd, level, name, on ? 1 : 0, what);
}

SocketAddress socketName(int fd, bool peer) {
  if (fd < 0) throwClosed(peer ? "peerAddress" : "localAddress");
  SocketAddress address;
  socklen_t length = SocketAddress::kNativeCapacity;
  const int r = peer ? ::getpeername(fd, address.nativeBuffer(), &length)
                     : ::getsockname(fd, address.nativeBuffer(), &length);
  if (r != 0) {
    throw std::system_error(errno, std::system_category(),
                            peer ? "weft: getpeername" : "weft: getsockname");
  }
  address.setNativeLength(length);
  return address;
}

}  // namespace weft::detail
