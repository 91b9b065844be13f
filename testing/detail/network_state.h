#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/event.h"
#include "weft/coro/lazy.h"
#include "weft/io/socket_address.h"
#include "weft/io/tcp_stream.h"
#include "weft/testing/detail/split_mix64.h"
#include "weft/testing/detail/virtual_io_loop.h"
#include "weft/testing/faults.h"
#include "weft/testing/network.h"
#include "weft/testing/simulation.h"

namespace weft::testing {

// The Network's state, shared with the relays (which hold it until they end), and the
// relays themselves. Everything runs on the simulation's thread.
struct Network::State final : detail::VirtualIoLoop::AcceptObserver {
  using TimePoint = Simulation::TimePoint;
  using Duration = Simulation::Duration;

  struct Connection;

  // One direction of a connection: pumpIn reads from the sender's side (`source`) into
  // `queue`, paced by the bandwidth; pumpOut delivers each piece to the receiver's side
  // (`dest`) when its time has come.
  struct Pipe {
    struct Piece {
      enum class Kind : std::uint8_t {
        kData,        // bytes
        kEnd,         // the sender ended its stream: end the receiver's (shutdown(SHUT_WR))
        kReset,       // the sender's side was reset: reset the receiver's
        kFaultReset,  // Faults::Path::resetAfter was reached: reset both sides
      };
      Kind kind = Kind::kData;
      TimePoint deliverAt{};
      std::vector<std::byte> bytes;
    };

    void push(Piece piece) {
      lastDeliverAt = piece.deliverAt;
      queue.push_back(std::move(piece));
      queued.set();
    }

    Connection* connection = nullptr;
    bool toServer = false;
    const Faults::Path* faults = nullptr;
    TcpStream* source = nullptr;
    TcpStream* dest = nullptr;
    detail::SplitMix64 pieces{1};
    std::deque<Piece> queue;
    Event queued;               // set while `queue` may hold pieces
    Event room;                 // set when bytes in flight were delivered
    Event receiverClosed;       // the receiver's side closed: a stall ends
    std::size_t inFlight = 0;   // read from the source, not yet delivered
    TimePoint linkFree{};       // when the link has sent what was read so far
    TimePoint lastDeliverAt{};  // the delivery time of the last piece queued
    std::uint64_t bytesIn = 0;  // read from the source
    CancellationSource abort;   // stops both pumps
  };

  struct Connection {
    State* network = nullptr;
    std::size_t index = 0;
    Faults faults;
    TimePoint start{};
    TcpStream client;   // the relay's end of the client's socketpair
    TcpStream server;   // the relay's socket, connected to the listener
    int clientFd = -1;  // the client's end (the test's stream) and its identity
    ino_t clientInode = 0;
    int serverFd = -1;  // the server's end, once accepted, and its identity
    ino_t serverInode = 0;
    std::string key;           // `server`'s abstract address: the peer the server's end sees
    bool resetClient = false;  // reset the client's side when the pipes have ended
    bool resetServer = false;
    bool serverResetPending = false;  // a reset of the server's side waits for its accept
    Pipe up;                          // to the server
    Pipe down;                        // to the client
  };

  State(Simulation& s, NetworkOptions o) : sim(s), options(o) {}

  // ---- the connections (testing/network.cc) ----------------------------------------------

  // noexcept: the loop calls it while it completes the accept.
  void accepted(int fd) noexcept override;

  // noexcept: called where the relay must go on (delivering, closing); a log entry lost
  // for lack of memory is not worth stopping it.
  void record(NetworkEvent::Kind kind, const Connection& c, bool toServer,
              std::size_t bytes) noexcept;

  // Makes `own` (a socket of the relay) have unread bytes, so that closing it resets its
  // peer: writes a byte from the peer's end (`peerFd`, if it is still the socket of
  // `peerInode`) unless some are there already. noexcept: system calls whose failure
  // only turns the reset into an end of stream (a peer that can no longer send).
  static void leaveUnread(int own, int peerFd, ino_t peerInode) noexcept;

  void resetClientSide(Connection& c) noexcept;

  void resetServerSide(Connection& c) noexcept;

  // The pipes have ended: reset or close both sides. noexcept: closing cannot fail.
  void finish(Connection& c) noexcept;

  // ---- the relay: each connection's two pipes (testing/network_relay.cc) -----------------

  // The receiver of `p` is gone (a write to it failed: it closed): its kernel would answer
  // the sender with a reset. `p` stops; the sender's side is reset once the other pipe
  // has delivered what it carries (its source is the side that is gone: it ends soon).
  static void receiverGone(Pipe& p) noexcept;  // noexcept: flags and a cancellation

  static Lazy<void> pumpIn(Pipe& p);

  static Lazy<void> pumpOut(Pipe& p);

  // Runs both pipes until they have ended. Throws OperationCancelled when the relay's
  // token stopped them (the simulation stops, or withTimeout's Faults::resetAt).
  static Lazy<void> runPipes(Connection& c);

  static Lazy<void> relay(std::shared_ptr<State> self, std::shared_ptr<Connection> c);

  // The client's side of a new connection to the listener `name` (testing/network.cc).
  static Lazy<TcpStream> connect(std::shared_ptr<State> self, std::string name, Faults faults);

  Simulation& sim;
  NetworkOptions options;
  std::map<std::string, SocketAddress, std::less<>> listeners;  // name -> address
  // The connections by their `key`, while their relay runs or a reset of their server's
  // side waits for its accept.
  std::unordered_map<std::string, std::shared_ptr<Connection>> connections;
  std::vector<NetworkEvent> events;
  std::size_t nextIndex = 0;
  std::size_t open = 0;
  Event closed{true};  // set while no connection is open
};

}  // namespace weft::testing
