#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string_view>
#include <vector>

#include "weft/coro/lazy.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_listener.h"
#include "weft/io/tcp_stream.h"
#include "weft/testing/faults.h"
#include "weft/testing/simulation.h"

namespace weft::testing {

// Options of a Network.
struct NetworkOptions {
  // SO_SNDBUF asked for on every socket of a connection: both ends of the client's
  // socketpair, the relay's socket to the server and the server's accepted socket. (On a
  // Unix stream socket the sender's buffer is the only one: it bounds what waits in the
  // receiver's queue.) Linux doubles the value and keeps at least 4608: the default 4096
  // gives 8 KiB, about 8000 bytes of data in large writes and fewer in small ones (each
  // write costs some hundreds of bytes of bookkeeping). Small, so that a receiver that
  // stops reading makes the writer wait after a few KiB. 0: the kernel's default.
  int sendBuffer = 4096;
};

// What a Network did, in the order it did it (Network::events()): for tests of what
// arrived when, and of determinism (the same seed gives the same events).
struct NetworkEvent {
  enum class Kind : std::uint8_t {
    kConnect,  // the client connected (Network::connect)
    kAccept,   // the server accepted the connection
    kDeliver,  // `bytes` bytes were written to the receiving side
    kEnd,      // the receiving side was given the end of the stream (shutdown(SHUT_WR))
    kReset,    // the receiving side was reset: it sees ECONNRESET
    kClose,    // the relay closed its sockets: the connection is over
  };
  Kind kind = Kind::kConnect;
  std::size_t connection = 0;  // 0, 1, ... in the order of Network::connect
  // The receiving side (kDeliver, kEnd, kReset): the server (true) or the client.
  // kConnect, kAccept, kClose: false.
  bool toServer = false;
  Simulation::Duration time{};  // virtual time since the simulation started
  std::size_t bytes = 0;        // kDeliver: how many

  bool operator==(const NetworkEvent&) const = default;
};

// "+0.020000000 s #0 to server: deliver 12 B". Errors: what the stream throws.
std::ostream& operator<<(std::ostream& out, const NetworkEvent& event);

// Network: in-memory connections with faults, for tests of servers written against
// TcpListener and TcpStream, unchanged, inside a Simulation.
//
// listen(name) gives the server a TcpListener (a Unix stream listener at an abstract
// address the kernel picks, unique on the machine); connect(name, faults) gives the
// test's client a TcpStream. The server accepts a TcpStream as from any listener. Between
// them, a relay task of the simulation (two per direction: one reads from the sender,
// one delivers) applies the Faults: latency, bandwidth, pieces of random sizes, resets,
// half-closes and a receiver that stops reading, in virtual time and with sizes drawn
// from the seed. Every socket is a Unix stream socket of the simulation's own event
// loop, so the simulation's durably-blocked rule holds (docs/testing.md, "The rules"):
// virtual time jumps while everything waits, and the streams' read and write time limits
// expire in virtual time.
//
// The client's stream is one end of a socketpair whose other end the relay reads; the
// relay connects its own socket to the listener. Resets: a Unix socket reports
// ECONNRESET to its peer when it is closed with unread data, so the relay resets a side
// by leaving a byte unread on its own end (written there from that side's socket, which
// is in this process: the server's is found when it is accepted) and closing it. A side
// that has ended its own direction (shutdownWrite) can no longer be given that byte: it
// sees a reset as the end of the stream.
//
// Errors: see each member.
// Preconditions: the Network is used on the simulation's thread and destroyed before the
// Simulation (declare it after). Server code must not call setNoDelay (EOPNOTSUPP on a
// Unix socket; weft's TcpListener does not for Unix listeners).
// Thread safety: none; the simulation's thread only.
//
// Example:
//   weft::testing::Network net(sim);
//   weft::TcpListener listener = net.listen("echo");
//   sim.spawn(serve(listener));                                 // the server, unchanged
//   sim.run([&]() -> weft::Lazy<void> {
//     weft::TcpStream client = co_await net.connect("echo", faults);
//     co_await client.writeAll("ping");  ...
//   }());
class Network {
 public:
  // Errors: std::bad_alloc.
  explicit Network(Simulation& sim, NetworkOptions options = {});
  // Connections still open keep running (their relays are tasks of the simulation, which
  // reports them if they outlive it): close the streams, or stop the servers, first.
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // A listener the server accepts `name`'s connections on. A name may be listened on
  // again once its listener is closed. Errors: std::invalid_argument for an empty name,
  // or one whose listener is still open; std::system_error from TcpListener::bind.
  TcpListener listen(std::string_view name, TcpListenerOptions options = {});

  // Connects to the listener `name` through a relay that applies `faults`; the connection
  // is made at once (no virtual time passes; latency applies to the bytes). The relay is
  // a task of the simulation: it ends, and closes its sockets, when both directions have
  // ended (each side ended its stream, closed, or the connection was reset).
  // Errors (from the co_await): std::system_error ECONNREFUSED when nothing listens on
  // `name` (never listened, or closed), EAGAIN when its backlog is full, and what
  // socket(2) fails with; std::invalid_argument for faults that break their
  // preconditions; std::bad_alloc.
  Lazy<TcpStream> connect(std::string_view name, Faults faults = {});

  // The address of `name`'s listener (an abstract Unix address). A TcpStream::connect to
  // it reaches the server without a relay, and without faults.
  // Errors: std::invalid_argument when `name` was never listened on.
  SocketAddress address(std::string_view name) const;

  // How many connections are open (their relays still run). noexcept.
  std::size_t openConnections() const noexcept;

  // Completes once no connection is open: every relay has ended (both sides ended their
  // streams or closed, or the connection was reset), which may take virtual time (the
  // ends travel with the latency). The end of a test awaits it to check that every
  // connection was closed: one that never is makes Simulation::run throw Deadlock, whose
  // task dump shows the relay and what it waits on.
  // Errors: OperationCancelled (its wait is cancellable).
  Lazy<void> allClosed();

  // Everything the Network did so far, in order. noexcept.
  const std::vector<NetworkEvent>& events() const noexcept;

 private:
  struct State;  // shared with the relays, which may outlive the Network by moments
  std::shared_ptr<State> state_;
};

}  // namespace weft::testing
