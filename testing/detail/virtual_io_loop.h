#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "weft/executors/executor.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/timer_entry.h"

namespace weft::testing::detail {

// VirtualIoLoop: the event loop of a Simulation. An epoll loop (IoLoop::create, whose
// completions are deterministic for sockets that are all inside the simulation) behind a
// decorator that keeps operations' time limits (IoOperation::timeoutNs: TcpStream's read
// and write time limits) in virtual time: an operation with a limit is handed to the inner
// loop without one, and a TimerEntry armed on the simulation (`timers`) at submit time +
// the limit cancels it when it fires; its -ECANCELED then becomes -ETIMEDOUT, as the
// inner loop's own limit would report it. An operation that completes first keeps its
// result, and its timer is disarmed.
//
// It also tells AcceptObservers (Network) of every connection an accept on it returns,
// before the accepting coroutine resumes: an accept is then tracked like an operation with
// a limit (its completion function wrapped), with or without one.
//
// And it reports progress that completes nothing: run() and runFor() count, beside the
// operations completed, the `whole` operations (readExactly, writeAll) that moved bytes
// and wait on. Such a move can make another operation ready (a read that empties a
// socket makes room for the writer on its peer), but its edge comes only in the next
// epoll_wait; a Simulation that took "nothing completed" for "durably blocked" would jump
// virtual time over it. Whole operations are tracked as those with a limit are.
//
// Everything else is the inner loop's. Only the simulation's thread uses it (submit,
// withdraw, run, shutdown); cancel and wake from any thread, as the inner loop allows.
// noexcept members as IoLoop's; an operation whose limit cannot be tracked (no memory,
// or the simulation refuses timers while it stops) keeps its limit in the inner loop,
// in real time.
class VirtualIoLoop final : public IoLoop {
 public:
  // Told of each descriptor an accept on the loop returned, on the loop's thread, before
  // the coroutine that accepted it resumes. noexcept: it runs inside the loop.
  class AcceptObserver {
   public:
    virtual void accepted(int fd) noexcept = 0;

   protected:
    ~AcceptObserver() = default;
  };

  // Errors: std::system_error from IoLoop::create.
  explicit VirtualIoLoop(Executor& timers);
  ~VirtualIoLoop() override;

  IoBackend backend() const noexcept override { return inner_->backend(); }
  bool submit(IoOperation& op) noexcept override;
  void cancel(IoOperation& op) noexcept override { inner_->cancel(op); }
  [[nodiscard]] bool withdraw(IoOperation& op) noexcept override;
  std::size_t run(int timeoutMs) noexcept override;
  std::size_t runFor(std::int64_t timeoutNs) noexcept override;
  void wake() noexcept override { inner_->wake(); }
  bool hasWork() const noexcept override { return inner_->hasWork(); }
  std::size_t lentBuffers() const noexcept override { return inner_->lentBuffers(); }
  void shutdown() noexcept override;

  // How many operations wait with a virtual time limit (or are accepts being watched for
  // an AcceptObserver, or whole operations being watched for progress). noexcept.
  std::size_t limitedOperations() const noexcept { return limits_.size(); }

  // Adds or removes an observer (the simulation's thread only). An observer added while an
  // accept is in flight sees the accepts submitted after it. add: std::bad_alloc;
  // remove: noexcept, and nothing happens for one that is not there.
  void addAcceptObserver(AcceptObserver* observer);
  void removeAcceptObserver(AcceptObserver* observer) noexcept;

 private:
  struct Limit;

  // The completion function put in place of the operation's own while its limit runs.
  static void limitedComplete(IoOperation& op) noexcept;
  // The limit's timer fired (run) or was ended by the simulation's shutdown (!run).
  static void limitExpired(Job* job, bool run) noexcept;
  // Tells the observers of the descriptor a completed accept returned (if it succeeded).
  void notifyAccepted(const IoOperation& op) noexcept;
  // How many whole operations moved bytes since the last call (and did not complete).
  std::size_t progressedWholeOperations() noexcept;
  // Takes `op`'s limit away: disarms its timer and gives the operation back its own
  // completion function and time limit. Returns the record (for limitedComplete).
  std::unique_ptr<Limit> release(IoOperation& op) noexcept;

  std::unique_ptr<IoLoop> inner_;
  Executor& timers_;
  std::unordered_map<IoOperation*, std::unique_ptr<Limit>> limits_;
  std::vector<AcceptObserver*> acceptObservers_;
};

}  // namespace weft::testing::detail
