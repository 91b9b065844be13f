#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <utility>

#include "coro/cancellation.h"
#include "coro/detail/lazy_promise.h"
#include "executors/executor.h"

namespace weft::detail {

// The join point of a collect whose branches can be cancelled together (collectAny,
// collectAllFailFast, withTimeout): it owns a CancellationSource whose token every branch
// carries, linked to the awaiter's token (cancelling the awaiter cancels every branch),
// and counts the branches still running. It lives in the collect's frame, which does not
// finish before every started branch has: nothing is left running, nothing dangles.
//
// Thread safety: branches may finish, and the awaiter's token may be cancelled, on any
// threads concurrently.
class CancellingBarrier {
 public:
  // `parent`: the awaiting coroutine's token. If it can never be cancelled, linking costs
  // nothing; the barrier's own source is one allocation.
  explicit CancellingBarrier(const CancellationToken& parent)
      : token_(source_.token()), link_(parent, [this] { source_.requestCancellation(); }) {}
  CancellingBarrier(const CancellingBarrier&) = delete;
  CancellingBarrier& operator=(const CancellingBarrier&) = delete;

  // The token the branches carry. Lives as long as the barrier.
  const CancellationToken& token() const noexcept { return token_; }

  // Requests cancellation of every branch. noexcept: see CancellationSource.
  void cancelBranches() noexcept { source_.requestCancellation(); }
  bool branchesCancelled() const noexcept { return source_.isCancellationRequested(); }

  // Counts one more branch, before it is started. Relaxed: the collect's own count (see
  // arriveAndSuspend) keeps the total above zero until the collect arrives, and that
  // arrival (acq_rel) orders every increment before it.
  void addBranch() noexcept { pending_.fetch_add(1, std::memory_order_relaxed); }

  // A branch finished (from its completion sink: noexcept, in its final suspend). With
  // `cancelOthers`, the other branches are cancelled first (their cancellation callbacks
  // run here); this branch's arrival comes after, so the collect cannot complete (and
  // free this barrier) while they run. Returns the coroutine to transfer to.
  std::coroutine_handle<> branchDone(bool cancelOthers) noexcept {
    if (cancelOthers) source_.requestCancellation();
    return arrive() ? awaiting_ : std::noop_coroutine();
  }

  // The collect's own arrival once it has started its branches: true when it must
  // suspend (some branch still runs; the last one resumes it).
  bool arriveAndSuspend(std::coroutine_handle<> awaiting) noexcept {
    awaiting_ = awaiting;
    return !arrive();
  }

  // The collect's coroutine, recorded before any branch starts: its branches' sinks lead
  // async backtraces from the collect to whoever awaits it (algorithmParent()).
  template <class Promise>
  void recordAlgorithm(std::coroutine_handle<Promise> collect) noexcept {
    algorithmParent_ = asyncParentAbove(collect);
  }
  AsyncParent algorithmParent() const noexcept { return algorithmParent_; }

 private:
  // acq_rel: each branch releases its result; whoever brings the count to zero acquires
  // all of them before the collect reads the results.
  bool arrive() noexcept { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  CancellationSource source_;
  CancellationToken token_;
  CancellationCallback link_;
  std::atomic<std::size_t> pending_{1};  // the collect itself, until it arrives
  std::coroutine_handle<> awaiting_;
  AsyncParent algorithmParent_;
};

// Awaited inside the collect's own coroutine: runs `startAll` (which starts the branches),
// then waits for the barrier. Executor-aware, so the promise does not wrap it: the last
// branch finishes on the collect's executor already (branches inherit it).
template <class Barrier, class StartAll>
class BarrierAwaiter {
 public:
  BarrierAwaiter(Barrier& barrier, StartAll startAll) noexcept
      : barrier_(barrier), startAll_(std::move(startAll)) {}

  // What `co_await awaiter` really awaits: a pointer to it (g++-12 copies an awaiter that
  // await_transform returns by reference).
  struct Ref {
    BarrierAwaiter* self;
    bool await_ready() const noexcept { return false; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> awaiting) {
      self->barrier_.recordAlgorithm(awaiting);
      self->startAll_();
      return self->barrier_.arriveAndSuspend(awaiting);
    }
    void await_resume() const noexcept {}
  };
  Ref coAwait(Executor*) & noexcept { return Ref{this}; }

 private:
  Barrier& barrier_;
  StartAll startAll_;
};

// `co_await CurrentCancellationTokenPointer{}`: the address of the token the current
// coroutine carries (no reference-count traffic), for algorithms whose frame outlives
// the Lazys they hand it to.
struct CurrentCancellationTokenPointer {
  struct Awaiter {
    const CancellationToken* token;
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    const CancellationToken* await_resume() const noexcept { return token; }
  };
  Awaiter coAwait(Executor*, const CancellationToken& token) const noexcept { return {&token}; }
  Awaiter operator co_await() const noexcept { return {&kNoCancellationToken}; }
};

}  // namespace weft::detail
