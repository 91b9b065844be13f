#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <string>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/executors/executor.h"

// The join point every collect shares (collectAll and its fail-fast and windowed forms,
// collectAny, withTimeout): the barrier, the awaiter a collect waits on it with, and the
// binding of a branch to it.

namespace weft::detail {

// The join point of a collect: counts the branches still running plus the collect itself,
// and hands the collect's coroutine to whoever arrives last. It lives in the collect's
// frame, which does not finish before every started branch has: nothing is left running,
// nothing dangles. Branches keep their results in their own frames until then (no
// allocation per branch).
//
// It is also a completion sink: a branch bound to the barrier itself (collectAll's) just
// arrives when it finishes, unless `onComplete` says otherwise (collectAllWindowed starts
// the next branch). Collects that must know which branch finished (collectAny,
// collectAllFailFast) give each branch a sink of its own that arrives here (bindBranch).
// As a sink it names the collect in async backtraces (`label`: "collectAll") and leads
// them from the branches to whoever awaits the collect (recordAlgorithm).
//
// Arrivals: each started branch once, from its sink (in its final suspend), and the
// collect once, after starting its branches (arriveAndSuspend). Branches are counted up
// front (`branches`) or one by one before each starts (addBranch).
// Thread safety: branches may arrive on any threads concurrently.
class CollectBarrier : public CompletionSink {
 public:
  CollectBarrier(const char* label, std::size_t branches,
                 OnComplete onComplete = &CollectBarrier::arriveFromSink) noexcept
      : CompletionSink(onComplete, label), pending_(branches + 1) {}
  CollectBarrier(const CollectBarrier&) = delete;
  CollectBarrier& operator=(const CollectBarrier&) = delete;

  // Counts one more branch, before it starts. Relaxed: the collect's own count keeps the
  // total above zero until the collect arrives, and that arrival (acq_rel) orders every
  // increment before it.
  void addBranch() noexcept { pending_.fetch_add(1, std::memory_order_relaxed); }

  // A branch has finished: the coroutine to transfer to, the collect's when this was the
  // last arrival (else std::noop_coroutine()). noexcept: runs in a final suspend.
  std::coroutine_handle<> arrive() noexcept {
    return countDown() ? awaiting_ : std::noop_coroutine();
  }

  // The collect's own arrival once it has started its branches: true when it must
  // suspend (some branch still runs; the last one resumes it).
  bool arriveAndSuspend(std::coroutine_handle<> awaiting) noexcept {
    awaiting_ = awaiting;
    return !countDown();
  }

  // The collect's coroutine, before any branch starts: the branches' async backtraces go
  // from the collect to whoever awaits it (the collect's own frame is not shown).
  template <class Promise>
  void recordAlgorithm(std::coroutine_handle<Promise> collect) noexcept {
    traceParent_ = asyncParentAbove(collect);
  }

 private:
  static std::coroutine_handle<> arriveFromSink(CompletionSink* sink) noexcept {
    return static_cast<CollectBarrier*>(sink)->arrive();
  }

  // acq_rel: each branch releases its result; whoever brings the count to zero acquires
  // all of them before the collect reads the results.
  bool countDown() noexcept { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  std::atomic<std::size_t> pending_;
  std::coroutine_handle<> awaiting_;
};

// The barrier of a collect whose branches can be cancelled together (collectAny,
// collectAllFailFast, withTimeout): it owns a CancellationSource whose token every branch
// carries, linked to the awaiter's token (cancelling the awaiter cancels every branch).
//
// Thread safety: branches may finish, and the awaiter's token may be cancelled, on any
// threads concurrently.
class CancellingBarrier : public CollectBarrier {
 public:
  // `parent`: the awaiting coroutine's token. If it can never be cancelled, linking costs
  // nothing; the barrier's own source is one allocation from the frame allocator.
  // Branches are counted with addBranch and have sinks of their own.
  CancellingBarrier(const char* label, const CancellationToken& parent)
      : CollectBarrier(label, 0), link_(parent, [this] { source_.requestCancellation(); }) {}

  // The token the branches carry. Lives as long as the barrier.
  const CancellationToken& token() const noexcept { return source_.token(); }
  bool branchesCancelled() const noexcept { return source_.isCancellationRequested(); }

  // A branch finished (from its sink). With `cancelOthers`, the other branches are
  // cancelled first (their cancellation callbacks run here); this branch's arrival comes
  // after, so the collect cannot complete (and free this barrier) while they run. Returns
  // the coroutine to transfer to. noexcept: see CancellationSource.
  std::coroutine_handle<> branchDone(bool cancelOthers) noexcept {
    if (cancelOthers) source_.requestCancellation();
    return arrive();
  }

 private:
  OwnedCancellationSource source_;
  CancellationCallback link_;
};

// Awaited inside the collect's own coroutine: records the collect for async backtraces,
// runs `startAll` (which starts the branches), then waits at the barrier. Executor-aware
// (coAwait), so the promise does not wrap it: the last branch finishes on the collect's
// executor already (branches inherit it). A named local of the collect's frame, after
// the barrier.
template <class StartAll>
class CollectAwaiter {
 public:
  // `branches`: how many the collect has (none: it completes at once).
  CollectAwaiter(CollectBarrier& barrier, std::size_t branches, StartAll startAll) noexcept
      : branches_(branches), barrier_(barrier), startAll_(std::move(startAll)) {}

  // What `co_await awaiter` really awaits: a pointer to it. (g++-12 copies an awaiter that
  // await_transform returns by reference; the barrier must stay where branches point.)
  struct Ref {
    CollectAwaiter* self;
    bool await_ready() const noexcept { return self->branches_ == 0; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> awaiting) {
      self->barrier_.recordAlgorithm(awaiting);
      self->startAll_();
      return self->barrier_.arriveAndSuspend(awaiting);
    }
    void await_resume() const noexcept {}
    // For task dumps (coro/detail/wait_note.h): "collectAll of 3 branches".
    void describeWait(std::string& out) const {
      out += self->barrier_.traceLabel_;
      out += " of " + std::to_string(self->branches_) + " branches";
    }
  };
  Ref coAwait(Executor*) & noexcept { return Ref{this}; }

 private:
  // The first two members, in this order: tools/gdb/weft.py reads them without the type
  // (whose lambda argument gdb cannot name).
  std::size_t branches_;
  CollectBarrier& barrier_;
  StartAll startAll_;
};

// Binds a branch to its collect, before it starts: it completes into `sink` (the barrier
// itself, or a sink of its own that arrives at the barrier, then named like the barrier
// in async backtraces and leading them where the barrier's do), runs on `executor` (the
// collect's) and carries `token`, which outlives it (the collect's frame keeps it).
// noexcept: plain stores; collectAllWindowed binds branches inside a final suspend.
// Forced inline, as startBranch: both are on every branch's path, and g++ stops inlining
// into a collect's loop past a size.
template <class T>
[[gnu::always_inline]] inline void bindBranch(std::coroutine_handle<LazyPromise<T>> branch,
                                              CompletionSink& sink,
                                              const CollectBarrier& barrier,
                                              Executor* executor,
                                              const CancellationToken* token) noexcept {
  if (&sink != &barrier) {
    // A sink of its own, not in use yet. (The barrier's own fields are never rewritten
    // here: a running branch may be reading them for a backtrace.)
    sink.traceLabel_ = barrier.traceLabel_;
    sink.traceParent_ = barrier.traceParent_;
  }
  LazyPromise<T>& promise = branch.promise();
  promise.setCompletionSink(&sink);
  promise.setExecutor(executor);
  promise.setCancellationToken(token);
}

// Schedules a bound branch on `executor`. Returns false when the executor refused it (shut
// down): the branch never ran and its Try holds the refusal. noexcept: every exception is
// caught here (collectAllWindowed schedules branches inside a final suspend).
template <class T>
bool scheduleBranch(std::coroutine_handle<LazyPromise<T>> branch, Executor* executor) noexcept {
  try {
    executor->schedule(branch);
    return true;
  } catch (...) {
    branch.promise().result_.setException(std::current_exception());
    return false;
  }
}

// Starts a bound branch: scheduled on `executor` when `parallel` and there is one
// (scheduleBranch), otherwise run right here until it first suspends or finishes.
// Returns false when the executor refused it: the branch never ran, its Try holds the
// refusal and it has not arrived; the caller arrives for it (its frame is freed with the
// collect's).
template <class T>
[[gnu::always_inline]] inline bool startBranch(std::coroutine_handle<LazyPromise<T>> branch,
                                               Executor* executor, bool parallel) {
  if (!parallel || executor == nullptr) {
    branch.resume();
    return true;
  }
  return scheduleBranch(branch, executor);
}

// `co_await CurrentCancellationTokenPointer{}`: the address of the token the current
// coroutine carries (no reference-count traffic), for collects, whose frame outlives the
// branches they hand it to.
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
