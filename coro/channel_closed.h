#pragma once

#include <stdexcept>

namespace weft {

// Thrown by a send (co_await ch.send(v), trySend, or a chosen select send case) on a
// closed channel, by a send that was waiting when the channel was closed, and by
// close() on a closed channel: Go's "send on closed channel" and "close of closed
// channel" panics, as an exception the sender can catch. A send that throws it did not
// deliver its value.
class ChannelClosed : public std::runtime_error {
 public:
  explicit ChannelClosed(const char* what) : std::runtime_error(what) {}
};

}  // namespace weft
