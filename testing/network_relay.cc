// The relay of a Network connection: its two pipes, each reading what one side writes,
// pacing it by the path's bandwidth and latency, applying the path's faults (stalls, a
// window, resets, half-closes) and delivering it to the other side (testing/network.h).
// The rest of the Network: testing/network.cc.
#include <poll.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <tuple>
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
#include "weft/testing/detail/network_state.h"
#include "weft/testing/network.h"

namespace weft::testing {

namespace {

using TimePoint = Simulation::TimePoint;
using Duration = Simulation::Duration;

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

void Network::State::receiverGone(Pipe& p) noexcept {
  Connection& c = *p.connection;
  (p.toServer ? c.resetClient : c.resetServer) = true;
  p.abort.requestCancellation();
}

Lazy<void> Network::State::pumpIn(Pipe& p) {
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

Lazy<void> Network::State::pumpOut(Pipe& p) {
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

Lazy<void> Network::State::runPipes(Connection& c) {
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

Lazy<void> Network::State::relay(std::shared_ptr<State> self, std::shared_ptr<Connection> c) {
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

}  // namespace weft::testing
