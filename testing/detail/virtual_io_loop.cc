#include "weft/testing/detail/virtual_io_loop.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "weft/executors/executor_clock.h"

namespace weft::testing::detail {

namespace {

// The loop whose run() is on the calling thread's stack: completion functions have only
// the operation, and find their loop here.
constinit thread_local VirtualIoLoop* tlRunning = nullptr;

// now + ns, saturating at time_point::max().
ExecutorClock::time_point deadlineAfter(std::int64_t ns) noexcept {
  const ExecutorClock::time_point now = ExecutorClock::now();
  const ExecutorClock::duration limit = std::chrono::nanoseconds(ns);
  if (now > ExecutorClock::time_point::max() - limit) return ExecutorClock::time_point::max();
  return now + limit;
}

}  // namespace

struct VirtualIoLoop::Limit {
  struct Timer : TimerEntry {
    Limit* owner = nullptr;
  };

  Timer timer;
  VirtualIoLoop* loop = nullptr;
  IoOperation* op = nullptr;
  void (*complete)(IoOperation& op) noexcept = nullptr;  // the operation's own
  std::int64_t timeoutNs = -1;                           // the operation's own
  bool armed = false;                                    // the timer is armed on the simulation
  bool expired = false;                // the timer fired and cancelled the operation
  bool observe = false;                // an accept whose result the AcceptObservers are told of
  const void* progressMark = nullptr;  // a whole operation's buffer when last looked at
};

VirtualIoLoop::VirtualIoLoop(Executor& timers)
    : inner_(IoLoop::create(IoBackendChoice::kEpoll)), timers_(timers) {}

VirtualIoLoop::~VirtualIoLoop() {
  // Operations still in flight (the simulation could not stop them): their timers must
  // not stay in the simulation's heap, which outlives this loop only by moments.
  for (auto& [op, limit] : limits_) {
    if (limit->armed) timers_.cancelTimer(limit->timer);
  }
}

bool VirtualIoLoop::submit(IoOperation& op) noexcept {
  const bool observe = op.opcode == IoOpcode::kAccept && !acceptObservers_.empty();
  if (op.timeoutNs < 0 && !observe && !op.whole) return inner_->submit(op);
  // Recorded before the inner loop sees the operation, so that nothing can fail once it
  // is in flight with limitedComplete as its completion function.
  Limit* limit = nullptr;
  try {
    auto record = std::make_unique<Limit>();
    limit = record.get();
    limits_.emplace(&op, std::move(record));
  } catch (...) {
    // No memory: the inner loop keeps the limit, in real time; an accept that does not
    // complete at once goes unobserved, and a whole operation's progress unreported.
    const bool done = inner_->submit(op);
    if (done && observe) notifyAccepted(op);
    return done;
  }
  limit->loop = this;
  limit->op = &op;
  limit->complete = op.complete;
  limit->timeoutNs = op.timeoutNs;
  limit->observe = observe;
  op.complete = &VirtualIoLoop::limitedComplete;
  op.timeoutNs = -1;
  if (inner_->submit(op)) {  // completed at once: no limit to keep
    op.complete = limit->complete;
    op.timeoutNs = limit->timeoutNs;
    limits_.erase(&op);
    if (observe) notifyAccepted(op);
    return true;
  }
  limit->progressMark = op.buffer;
  if (limit->timeoutNs < 0) return false;  // watched only (an accept, a whole operation)
  limit->timer.deadline = deadlineAfter(limit->timeoutNs);
  limit->timer.complete = &VirtualIoLoop::limitExpired;
  limit->timer.owner = limit;
  try {
    timers_.scheduleTimer(limit->timer);
    limit->armed = true;
  } catch (...) {
    // The simulation takes no more timers (it is stopping, and will cancel the operation
    // through shutdown()): the operation waits without a limit until then.
  }
  return false;
}

void VirtualIoLoop::addAcceptObserver(AcceptObserver* observer) {
  acceptObservers_.push_back(observer);
}

void VirtualIoLoop::removeAcceptObserver(AcceptObserver* observer) noexcept {
  std::erase(acceptObservers_, observer);
}

void VirtualIoLoop::notifyAccepted(const IoOperation& op) noexcept {
  if (op.result < 0) return;
  // By index, from the back: an observer may remove itself while it is told.
  for (std::size_t i = acceptObservers_.size(); i-- > 0;) {
    if (i < acceptObservers_.size()) acceptObservers_[i]->accepted(static_cast<int>(op.result));
  }
}

std::unique_ptr<VirtualIoLoop::Limit> VirtualIoLoop::release(IoOperation& op) noexcept {
  auto found = limits_.find(&op);
  if (found == limits_.end()) return nullptr;
  std::unique_ptr<Limit> limit = std::move(found->second);
  limits_.erase(found);
  // Single-threaded: a timer that cannot be disarmed has fired already (limitExpired ran).
  if (limit->armed && timers_.cancelTimer(limit->timer)) limit->armed = false;
  op.complete = limit->complete;
  op.timeoutNs = limit->timeoutNs;
  return limit;
}

bool VirtualIoLoop::withdraw(IoOperation& op) noexcept {
  release(op);
  return inner_->withdraw(op);
}

std::size_t VirtualIoLoop::run(int timeoutMs) noexcept {
  VirtualIoLoop* const previous = std::exchange(tlRunning, this);
  const std::size_t completed = inner_->run(timeoutMs);
  tlRunning = previous;
  return completed + progressedWholeOperations();
}

std::size_t VirtualIoLoop::runFor(std::int64_t timeoutNs) noexcept {
  VirtualIoLoop* const previous = std::exchange(tlRunning, this);
  const std::size_t completed = inner_->runFor(timeoutNs);
  tlRunning = previous;
  return completed + progressedWholeOperations();
}

std::size_t VirtualIoLoop::progressedWholeOperations() noexcept {
  std::size_t progressed = 0;
  for (auto& [op, limit] : limits_) {
    // The loop advances a whole operation's buffer past the bytes it moved.
    if (op->whole && op->buffer != limit->progressMark) {
      limit->progressMark = op->buffer;
      ++progressed;
    }
  }
  return progressed;
}

void VirtualIoLoop::shutdown() noexcept {
  // The operations complete with -ECANCELED and loopShutDown through limitedComplete,
  // which releases their limits.
  inner_->shutdown();
}

void VirtualIoLoop::limitedComplete(IoOperation& op) noexcept {
  VirtualIoLoop* self = tlRunning;
  std::unique_ptr<Limit> limit = self != nullptr ? self->release(op) : nullptr;
  if (limit == nullptr) {
    std::fputs(
        "weft: an operation with a virtual time limit completed outside its "
        "simulation's event loop\n",
        stderr);
    std::abort();
  }
  // The limit cancelled it (and nothing else completed it first): report what the
  // inner loop's own limit would have.
  if (limit->expired && op.result == -ECANCELED && !op.loopShutDown) op.result = -ETIMEDOUT;
  if (limit->observe) self->notifyAccepted(op);
  limit.reset();
  op.complete(op);
}

void VirtualIoLoop::limitExpired(Job* job, bool run) noexcept {
  auto* timer = static_cast<Limit::Timer*>(job);
  Limit* limit = timer->owner;
  limit->armed = false;
  // Ended by the simulation's shutdown: the loop's shutdown cancels the operation.
  if (!run || timer->shutDown) return;
  limit->expired = true;
  limit->loop->inner_->cancel(*limit->op);
}

}  // namespace weft::testing::detail
