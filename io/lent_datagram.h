#pragma once

#include "weft/executors/lent_buffer.h"
#include "weft/io/socket_address.h"

namespace weft {

// LentDatagram: one datagram that UdpSocket::receiveFrom() (and receive()) received into a
// buffer the event loop lends, with its sender.
//
// Semantics: `data` holds the datagram's bytes (the LentBuffer owns the loop's buffer and
// gives it back when destroyed, on any thread; see executors/lent_buffer.h). An empty
// `data` with `truncated` false is an empty datagram, which is valid: a datagram socket has
// no end of stream. `truncated` says the datagram was longer than 16 KiB (what a datagram receive uses of a
// lent buffer):
// `data` holds its first 16 KiB and the rest is lost, as the kernel drops it (MSG_TRUNC),
// exactly as for receiveFrom(buffer) into a 16 KiB buffer; receive larger datagrams into a
// buffer of one's own. `from` is the sender, as in Datagram (an IPv4 or IPv6 address, a
// Unix path or abstract name, or empty for an unbound Unix sender).
//
// Thread safety: as a LentBuffer (a value used by one thread at a time; destroying it on
// any thread is safe).
//
// Example:
//   weft::LentDatagram d = co_await socket.receiveFrom();
//   if (!d.truncated) co_await socket.sendTo(d.data, d.from);  // echo it back
struct LentDatagram {
  LentBuffer data;
  SocketAddress from;
  bool truncated = false;
};

}  // namespace weft
