#pragma once

#include <cstddef>

#include "weft/io/socket_address.h"

namespace weft {

// Datagram: what UdpSocket::receiveFrom(buffer) (and receive(buffer)) report about one
// datagram. (receiveFrom() without a buffer returns a LentDatagram: io/lent_datagram.h.)
//
// Semantics: `size` bytes of the datagram were stored at the start of the buffer (0 is a
// valid, empty datagram, not an end of stream: datagram sockets have none). `truncated`
// says the datagram was longer than the buffer and its rest is lost (the kernel's
// MSG_TRUNC). `from` is the sender: an IPv4 or IPv6 address, a Unix path or abstract
// name, "unix:" (unnamed) or empty for a Unix sender that was not bound to a name.
//
// Thread safety: a plain value.
//
// Example:
//   weft::Datagram d = co_await socket.receiveFrom(buffer);
//   if (!d.truncated) co_await socket.sendTo(std::span(buffer).first(d.size), d.from);
struct Datagram {
  std::size_t size = 0;
  SocketAddress from;
  bool truncated = false;
};

}  // namespace weft
