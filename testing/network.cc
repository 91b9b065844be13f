#include "weft/testing/network.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/collect.h"
#include "weft/coro/event.h"
#include "weft/coro/sleep.h"
#include "weft/coro/with_cancellation.h"
#include "weft/coro/with_timeout.h"
#include "weft/executors/executor.h"
#include "weft/executors/executor_clock.h"
#include "weft/testing/detail/split_mix64.h"
#include "weft/testing/detail/virtual_io_loop.h"

namespace weft::testing {

namespace {

using TimePoint = Simulation::TimePoint;
using Duration = Simulation::Duration;

// The seed's streams of the connections' piece sizes: kPieceStreams + 2 * connection
// (+ 1 for the way to the client). Simulation's own streams are 1 to 3.
constexpr std::uint64_t kPieceStreams = 0x100;

[[noreturn]] void throwErrno(int error, const std::string& what) {
  throw std::system_error(error, std::system_category(), "weft::testing::Network: " + what);
}

// The inode of the socket `fd` is open on, or 0: a socket's identity, which its number is
// not (a closed descriptor's number is reused).
ino_t socketInode(int fd) noexcept {
  struct stat status {};
  if (fd < 0 || ::fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) return 0;
  return status.st_ino;
}

// Best effort: a kernel that refuses keeps its default size, and every fault still
// works, with more bytes buffered on the way.
void setSendBuffer(int fd, int size) noexcept {
  if (size > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

// The abstract name of a Unix socket's own address (peer == false) or its peer's, as
// raw bytes after the leading NUL; "" when it has none (a path, unnamed, not AF_UNIX).
std::string abstractName(int fd, bool peer) {
  sockaddr_un address{};
  socklen_t length = sizeof address;
  auto* native = reinterpret_cast<sockaddr*>(&address);
  const int rc = peer ? ::getpeername(fd, native, &length) : ::getsockname(fd, native, &length);
  constexpr socklen_t kOffset = offsetof(sockaddr_un, sun_path);
  if (rc != 0 || address.sun_family != AF_UNIX || length <= kOffset ||
      address.sun_path[0] != '\0') {
    return {};
  }
  return std::string(address.sun_path + 1, length - kOffset - 1);
}

// How long `bytes` occupy a link of `perSecond` bytes per second (rounded up to a whole
// nanosecond); zero without a limit.
Duration transmitTime(std::size_t bytes, std::uint64_t perSecond) noexcept {
  if (perSecond == 0) return Duration::zero();
  const unsigned __int128 ns =
      (static_cast<unsigned __int128>(bytes) * 1'000'000'000u + perSecond - 1) / perSecond;
  const auto most = static_cast<unsigned __int128>(Duration::max().count());
  return Duration(static_cast<Duration::rep>(std::min(ns, most)));
}

// t + d, saturating at TimePoint::max() (d >= 0).
TimePoint later(TimePoint t, Duration d) noexcept {
  return t > TimePoint::max() - d ? TimePoint::max() : t + d;
}

void checkPath(const Faults::Path& path, const char* name) {
  const auto reject = [name](const char* what) {
    throw std::invalid_argument(std::string("weft::testing::Network::connect: Faults::") + name +
                                "." + what);
  };
  if (path.latency < Duration::zero()) reject("latency is negative");
  if (path.maxChunk == 0) reject("maxChunk is 0");
  if (path.window == 0) reject("window is 0");
  if (path.stallAt && *path.stallAt < Duration::zero()) reject("stallAt is negative");
  if (path.stallFor < Duration::zero()) reject("stallFor is negative");
}

// True when the peer of the Unix stream socket `fd` has closed (both directions shut
// down: POLLHUP), not only ended its stream (shutdown(SHUT_WR): POLLRDHUP alone).
bool hungUp(int fd) noexcept {
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, 0) == 1 && (entry.revents & POLLHUP) != 0;
}

bool isCancellationOrShutdown(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const OperationCancelled&) {
    return true;
  } catch (const ExecutorShutDown&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

// The Network's state, shared with the relays (which hold it until they end), and the
// relays themselves. Everything runs on the simulation's thread.
struct Network::State final : detail::VirtualIoLoop::AcceptObserver {
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

  // noexcept: the loop calls it while it completes the accept.
  void accepted(int fd) noexcept override {
    std::string peer;
    try {
      peer = abstractName(fd, true);
    } catch (...) {  // std::bad_alloc: the connection's server side stays unknown
      return;
    }
    if (peer.empty()) return;  // not one of ours: a TCP, path or unnamed peer
    const auto found = connections.find(peer);
    if (found == connections.end() || found->second->serverFd >= 0) return;
    Connection& c = *found->second;
    c.serverFd = fd;
    c.serverInode = socketInode(fd);
    setSendBuffer(fd, options.sendBuffer);
    record(NetworkEvent::Kind::kAccept, c, false, 0);
    if (c.serverResetPending) {
      c.serverResetPending = false;
      resetServerSide(c);
      connections.erase(found);
    }
  }

  // noexcept: called where the relay must go on (delivering, closing); a log entry lost
  // for lack of memory is not worth stopping it.
  void record(NetworkEvent::Kind kind, const Connection& c, bool toServer,
              std::size_t bytes) noexcept {
    try {
      events.push_back(NetworkEvent{kind, c.index, toServer,
                                    ExecutorClock::now() - Simulation::kStartTime, bytes});
    } catch (...) {
      // Out of memory: the log misses an event; the connection goes on.
    }
  }

  // Makes `own` (a socket of the relay) have unread bytes, so that closing it resets its
  // peer: writes a byte from the peer's end (`peerFd`, if it is still the socket of
  // `peerInode`) unless some are there already. noexcept: system calls whose failure
  // only turns the reset into an end of stream (a peer that can no longer send).
  static void leaveUnread(int own, int peerFd, ino_t peerInode) noexcept {
    int unread = 0;
    if (::ioctl(own, FIONREAD, &unread) == 0 && unread > 0) return;
    if (peerFd < 0 || peerInode == 0 || socketInode(peerFd) != peerInode) return;
    const char byte = 0;
    [[maybe_unused]] const ssize_t sent = ::send(peerFd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void resetClientSide(Connection& c) noexcept {
    leaveUnread(c.client.nativeHandle(), c.clientFd, c.clientInode);
    c.client.close();
    record(NetworkEvent::Kind::kReset, c, false, 0);
  }

  void resetServerSide(Connection& c) noexcept {
    if (c.serverFd < 0) {  // not accepted yet: the reset waits for the accept
      c.serverResetPending = true;
      return;
    }
    leaveUnread(c.server.nativeHandle(), c.serverFd, c.serverInode);
    c.server.close();
    record(NetworkEvent::Kind::kReset, c, true, 0);
  }

  // The pipes have ended: reset or close both sides. noexcept: closing cannot fail.
  void finish(Connection& c) noexcept {
    if (c.resetClient) {
      resetClientSide(c);
    } else {
      c.client.close();
    }
    if (c.resetServer) {
      resetServerSide(c);
    } else {
      c.server.close();
    }
    record(NetworkEvent::Kind::kClose, c, false, 0);
    if (--open == 0) closed.set();
    if (!c.serverResetPending) connections.erase(c.key);
  }

  // The receiver of `p` is gone (a write to it failed: it closed): its kernel would answer
  // the sender with a reset. `p` stops; the sender's side is reset once the other pipe
  // has delivered what it carries (its source is the side that is gone: it ends soon).
  static void receiverGone(Pipe& p) noexcept {  // noexcept: flags and a cancellation
    Connection& c = *p.connection;
    (p.toServer ? c.resetClient : c.resetServer) = true;
    p.abort.requestCancellation();
  }

  static Lazy<void> pumpIn(Pipe& p) {
    using Kind = Pipe::Piece::Kind;
    Connection& c = *p.connection;
    const Faults::Path& f = *p.faults;
    try {
      for (;;) {
        TimePoint now = ExecutorClock::now();
        if (f.resetAfter && p.bytesIn >= *f.resetAfter) {
          p.push({Kind::kFaultReset, std::max(now, p.lastDeliverAt), {}});
          co_return;
        }
        if (f.shutdownAfter && p.bytesIn >= *f.shutdownAfter) {
          p.push({Kind::kEnd, std::max(now, p.lastDeliverAt), {}});
          // What the sender writes from now on is read and dropped.
          std::vector<std::byte> sink(65536);
          try {
            while (co_await p.source->read(sink) != 0) {
            }
          } catch (const std::system_error&) {
            // The sender's side was reset: its bytes were to be dropped anyway.
          }
          co_return;
        }
        std::optional<TimePoint> stallFrom;
        if (f.stallAt && !p.receiverClosed.isSet()) {
          stallFrom = later(c.start, *f.stallAt);
          const TimePoint stallUntil = later(*stallFrom, f.stallFor);
          if (now >= *stallFrom && now < stallUntil) {
            // Until the stall ends, or the receiver closes (then what the sender writes
            // reaches a closed socket, which resets the sender, as TCP's would).
            if (stallUntil == TimePoint::max()) {
              co_await p.receiverClosed.wait();
            } else {
              try {
                co_await withTimeout(p.receiverClosed.wait(), stallUntil - now);
              } catch (const TimeoutError&) {
              }
            }
            continue;
          }
          if (now >= stallUntil) stallFrom.reset();
        }
        if (p.inFlight >= f.window) {
          p.room.reset();
          co_await p.room.wait();
          continue;
        }
        if (p.linkFree > now) {
          co_await sleepUntil(p.linkFree);
          continue;
        }
        std::size_t size =
            f.randomChunks ? 1 + static_cast<std::size_t>(p.pieces.below(f.maxChunk)) : f.maxChunk;
        if (f.resetAfter)
          size = static_cast<std::size_t>(std::min<std::uint64_t>(size, *f.resetAfter - p.bytesIn));
        if (f.shutdownAfter)
          size =
              static_cast<std::size_t>(std::min<std::uint64_t>(size, *f.shutdownAfter - p.bytesIn));
        std::vector<std::byte> bytes(size);
        std::size_t n = 0;
        try {
          if (stallFrom) {
            // The stall begins while the read waits: it ends the read (a read that got
            // bytes first returns them).
            n = co_await withTimeout(p.source->read(bytes), *stallFrom - now);
          } else {
            n = co_await p.source->read(bytes);
          }
        } catch (const TimeoutError&) {
          continue;
        } catch (const std::system_error&) {
          // The sender's side was reset (closed with unread bytes), or failed: after what
          // is in flight, the receiver is reset.
          now = ExecutorClock::now();
          p.push({Kind::kReset, later(std::max(now, p.linkFree), f.latency), {}});
          co_return;
        }
        now = ExecutorClock::now();
        if (n == 0) {  // the sender ended its stream
          // Closed, not only ended (shutdownWrite): the other way has no receiver left,
          // which ends a stall there.
          Pipe& back = p.toServer ? c.down : c.up;
          if (back.faults->stallAt && hungUp(p.source->nativeHandle())) back.receiverClosed.set();
          p.push({Kind::kEnd, later(std::max(now, p.linkFree), f.latency), {}});
          co_return;
        }
        bytes.resize(n);
        p.linkFree = later(std::max(now, p.linkFree), transmitTime(n, f.bytesPerSecond));
        p.inFlight += n;
        p.bytesIn += n;
        p.push({Kind::kData, later(p.linkFree, f.latency), std::move(bytes)});
      }
    } catch (const OperationCancelled&) {
      // The pipe stopped.
    } catch (const ExecutorShutDown&) {
    }
  }

  static Lazy<void> pumpOut(Pipe& p) {
    using Kind = Pipe::Piece::Kind;
    Connection& c = *p.connection;
    State& network = *c.network;
    try {
      for (;;) {
        while (p.queue.empty()) {
          p.queued.reset();
          co_await p.queued.wait();
        }
        Pipe::Piece piece = std::move(p.queue.front());
        p.queue.pop_front();
        if (piece.deliverAt > ExecutorClock::now()) co_await sleepUntil(piece.deliverAt);
        switch (piece.kind) {
          case Kind::kData: {
            try {
              co_await p.dest->writeAll(std::span<const std::byte>(piece.bytes));
            } catch (const std::exception&) {
              if (p.abort.isCancellationRequested()) co_return;  // stopped meanwhile
              receiverGone(p);
              co_return;
            }
            p.inFlight -= piece.bytes.size();
            p.room.set();
            network.record(NetworkEvent::Kind::kDeliver, c, p.toServer, piece.bytes.size());
            break;
          }
          case Kind::kEnd:
            try {
              p.dest->shutdownWrite();
            } catch (const std::system_error&) {
              // The receiver is gone already: nothing to tell it.
            }
            network.record(NetworkEvent::Kind::kEnd, c, p.toServer, 0);
            co_return;
          case Kind::kReset:
            (p.toServer ? c.resetServer : c.resetClient) = true;
            (p.toServer ? c.down : c.up).abort.requestCancellation();
            co_return;
          case Kind::kFaultReset:
            c.resetClient = true;
            c.resetServer = true;
            (p.toServer ? c.down : c.up).abort.requestCancellation();
            co_return;
        }
      }
    } catch (const OperationCancelled&) {
      // The pipe stopped.
    } catch (const ExecutorShutDown&) {
    }
  }

  // Runs both pipes until they have ended. Throws OperationCancelled when the relay's
  // token stopped them (the simulation stops, or withTimeout's Faults::resetAt).
  static Lazy<void> runPipes(Connection& c) {
    bool stopped = false;
    CancellationCallback stop(co_await currentCancellationToken(), [&c, &stopped]() noexcept {
      stopped = true;
      c.up.abort.requestCancellation();
      c.down.abort.requestCancellation();
    });
    auto results = co_await collectAll(withCancellation(c.up.abort.token(), pumpIn(c.up)),
                                       withCancellation(c.up.abort.token(), pumpOut(c.up)),
                                       withCancellation(c.down.abort.token(), pumpIn(c.down)),
                                       withCancellation(c.down.abort.token(), pumpOut(c.down)));
    std::exception_ptr failure;
    const auto keepFirst = [&failure](const Try<void>& result) {
      if (!failure && result.hasException() && !isCancellationOrShutdown(result.exception())) {
        failure = result.exception();
      }
    };
    std::apply([&keepFirst](const auto&... result) { (keepFirst(result), ...); }, results);
    if (failure) std::rethrow_exception(failure);  // a bug of the relay, or no memory
    if (stopped) throw OperationCancelled();
  }

  static Lazy<void> relay(std::shared_ptr<State> self, std::shared_ptr<Connection> c) {
    try {
      if (c->faults.resetAt) {
        const TimePoint at = later(c->start, *c->faults.resetAt);
        try {
          co_await withTimeout(runPipes(*c), std::max(Duration::zero(), at - ExecutorClock::now()));
        } catch (const TimeoutError&) {
          c->resetClient = true;
          c->resetServer = true;
        }
      } else {
        co_await runPipes(*c);
      }
    } catch (const OperationCancelled&) {
      // The simulation stops: close the sockets.
    } catch (...) {
      self->finish(*c);
      throw;
    }
    self->finish(*c);
  }

  static Lazy<TcpStream> connect(std::shared_ptr<State> self, std::string name, Faults faults) {
    if (Simulation::current() != &self->sim) {
      throw std::logic_error(
          "weft::testing::Network::connect: awaited outside its simulation (a connection is "
          "made inside a task of the Simulation the Network was made for)");
    }
    checkPath(faults.toServer, "toServer");
    checkPath(faults.toClient, "toClient");
    if (faults.resetAt && *faults.resetAt < Duration::zero()) {
      throw std::invalid_argument("weft::testing::Network::connect: Faults::resetAt is negative");
    }
    const auto listener = self->listeners.find(name);
    if (listener == self->listeners.end()) {
      throwErrno(ECONNREFUSED, "connect to \"" + name + "\": nothing listens on that name");
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
      throwErrno(errno, "socketpair");
    }
    TcpStream client(pair[0]);
    auto c = std::make_shared<Connection>();
    c->client = TcpStream(pair[1]);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throwErrno(errno, "socket");
    c->server = TcpStream(fd);
    // Autobind (an address of the family alone): the kernel picks an abstract name that
    // no other socket has, which the server's end then reports as its peer (accepted()).
    const sa_family_t family = AF_UNIX;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&family), sizeof family) != 0) {
      throwErrno(errno, "bind (autobind)");
    }
    for (const int end : {pair[0], pair[1], fd}) setSendBuffer(end, self->options.sendBuffer);
    const SocketAddress& address = listener->second;
    if (::connect(fd, address.native(), address.nativeLength()) != 0) {
      throwErrno(errno, "connect to \"" + name + "\" (" + address.toString() + ")");
    }
    c->network = self.get();
    c->index = self->nextIndex++;
    c->faults = std::move(faults);
    c->start = ExecutorClock::now();
    c->clientFd = pair[0];
    c->clientInode = socketInode(pair[0]);
    c->key = abstractName(fd, false);
    if (c->key.empty()) throwErrno(EADDRNOTAVAIL, "autobind gave no abstract address");
    const std::uint64_t seed = self->sim.seed();
    for (Pipe* p : {&c->up, &c->down}) {
      const bool up = p == &c->up;
      p->connection = c.get();
      p->toServer = up;
      p->faults = up ? &c->faults.toServer : &c->faults.toClient;
      p->source = up ? &c->client : &c->server;
      p->dest = up ? &c->server : &c->client;
      p->pieces = detail::SplitMix64(
          detail::streamState(seed, kPieceStreams + 2 * c->index + (up ? 0 : 1)));
      p->linkFree = c->start;
      p->lastDeliverAt = c->start;
    }
    self->connections.emplace(c->key, c);
    ++self->open;
    self->closed.reset();
    self->record(NetworkEvent::Kind::kConnect, *c, false, 0);
    try {
      self->sim.spawn(relay(self, c));
    } catch (...) {
      if (--self->open == 0) self->closed.set();
      self->connections.erase(c->key);
      throw;
    }
    co_return client;
  }

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

std::ostream& operator<<(std::ostream& out, const NetworkEvent& event) {
  static constexpr const char* kNames[] = {"connect", "accept", "deliver", "end", "reset", "close"};
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(event.time).count();
  char text[160];
  const bool directed = event.kind == NetworkEvent::Kind::kDeliver ||
                        event.kind == NetworkEvent::Kind::kEnd ||
                        event.kind == NetworkEvent::Kind::kReset;
  std::snprintf(text, sizeof(text), "+%lld.%09lld s #%zu%s: %s",
                static_cast<long long>(ns / 1000000000), static_cast<long long>(ns % 1000000000),
                event.connection, directed ? (event.toServer ? " to server" : " to client") : "",
                kNames[static_cast<int>(event.kind)]);
  out << text;
  if (event.kind == NetworkEvent::Kind::kDeliver) out << ' ' << event.bytes << " B";
  return out;
}

Network::Network(Simulation& sim, NetworkOptions options)
    : state_(std::make_shared<State>(sim, options)) {
  sim.ioLoop().addAcceptObserver(state_.get());
}

Network::~Network() { state_->sim.ioLoop().removeAcceptObserver(state_.get()); }

TcpListener Network::listen(std::string_view name, TcpListenerOptions options) {
  if (name.empty()) throw std::invalid_argument("weft::testing::Network::listen: an empty name");
  // The family alone: bind() autobinds it to an abstract name the kernel picks, unique on
  // the machine (in the network namespace), whatever other tests run beside this one.
  sockaddr_un unnamed{};
  unnamed.sun_family = AF_UNIX;
  TcpListener listener = TcpListener::bind(
      SocketAddress::fromNative(reinterpret_cast<const sockaddr*>(&unnamed), sizeof(sa_family_t)),
      options);
  state_->listeners.insert_or_assign(std::string(name), listener.localAddress());
  return listener;
}

Lazy<TcpStream> Network::connect(std::string_view name, Faults faults) {
  return State::connect(state_, std::string(name), std::move(faults));
}

SocketAddress Network::address(std::string_view name) const {
  const auto found = state_->listeners.find(name);
  if (found == state_->listeners.end()) {
    throw std::invalid_argument("weft::testing::Network::address: nothing was listened on \"" +
                                std::string(name) + "\"");
  }
  return found->second;
}

std::size_t Network::openConnections() const noexcept { return state_->open; }

Lazy<void> Network::allClosed() {
  // The state, not `this`: the Network may go before the Lazy is awaited.
  std::shared_ptr<State> state = state_;
  while (state->open != 0) co_await state->closed.wait();
}

const std::vector<NetworkEvent>& Network::events() const noexcept { return state_->events; }

}  // namespace weft::testing
