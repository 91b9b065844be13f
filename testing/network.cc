#include "weft/testing/network.h"

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
#include <functional>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/event.h"
#include "weft/executors/executor.h"
#include "weft/executors/executor_clock.h"
#include "weft/testing/detail/network_state.h"
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

}  // namespace

void Network::State::accepted(int fd) noexcept {
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

void Network::State::record(NetworkEvent::Kind kind, const Connection& c, bool toServer,
                            std::size_t bytes) noexcept {
  try {
    events.push_back(NetworkEvent{kind, c.index, toServer,
                                  ExecutorClock::now() - Simulation::kStartTime, bytes});
  } catch (...) {
    // Out of memory: the log misses an event; the connection goes on.
  }
}

void Network::State::leaveUnread(int own, int peerFd, ino_t peerInode) noexcept {
  int unread = 0;
  if (::ioctl(own, FIONREAD, &unread) == 0 && unread > 0) return;
  if (peerFd < 0 || peerInode == 0 || socketInode(peerFd) != peerInode) return;
  const char byte = 0;
  [[maybe_unused]] const ssize_t sent = ::send(peerFd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Network::State::resetClientSide(Connection& c) noexcept {
  leaveUnread(c.client.nativeHandle(), c.clientFd, c.clientInode);
  c.client.close();
  record(NetworkEvent::Kind::kReset, c, false, 0);
}

void Network::State::resetServerSide(Connection& c) noexcept {
  if (c.serverFd < 0) {  // not accepted yet: the reset waits for the accept
    c.serverResetPending = true;
    return;
  }
  leaveUnread(c.server.nativeHandle(), c.serverFd, c.serverInode);
  c.server.close();
  record(NetworkEvent::Kind::kReset, c, true, 0);
}

void Network::State::finish(Connection& c) noexcept {
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

Lazy<TcpStream> Network::State::connect(std::shared_ptr<State> self, std::string name,
                                        Faults faults) {
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
    p->pieces =
        detail::SplitMix64(detail::streamState(seed, kPieceStreams + 2 * c->index + (up ? 0 : 1)));
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
