#pragma once

#include "weft/io/socket_address.h"

namespace weft::detail {

// socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC). Errors: std::system_error naming
// `what` (EMFILE, EAFNOSUPPORT...).
int openSocket(int family, int type, const char* what);
// setsockopt(fd, level, name, int(on)). Errors: std::system_error naming `what`; EBADF
// for a closed socket.
void setSocketOption(int fd, int level, int name, bool on, const char* what);
void setSocketOption(int fd, int level, int name, int value, const char* what);
// getsockname (peer == false) or getpeername. Errors: std::system_error.
SocketAddress socketName(int fd, bool peer);

}  // namespace weft::detail
