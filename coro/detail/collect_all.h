#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "coro/cancellation.h"
#include "coro/current_executor.h"
#include "coro/detail/cancelling_barrier.h"
#include "coro/detail/lazy_promise.h"
#include "coro/lazy.h"
#include "coro/try.h"
#include "executors/executor.h"

// The coroutines behind coro/collect.h: collectAll and collectAllPara (kParallel), their
// fail-fast and windowed forms, and the barriers they wait on.

namespace weft::detail {

// Counts finished branches of a collect; the last one to finish (or the collect itself,
// if every branch finished while it was still starting them) resumes the collect.
// Branches keep their results in their own frames until then: no allocation per branch.
class CollectBarrier final : public CompletionSink {
 public:
  explicit CollectBarrier(std::size_t branches) noexcept
      : CompletionSink(&CollectBarrier::complete, "collectAll"), pending_(branches + 1) {}

  // The collect's coroutine, before any branch starts: the branches' async backtraces go
  // from the collect to whoever awaits it (the collect's own frame is not shown).
  template <class Promise>
  void recordAlgorithm(std::coroutine_handle<Promise> collect) noexcept {
    traceParent_ = asyncParentAbove(collect);
  }

  // Starts one branch: scheduled on `executor` when `parallel` and there is one,
  // otherwise run right here until it first suspends or finishes. Either way it inherits
  // `executor` and `token` (which the collect's frame keeps alive until every branch is
  // done).
  template <class T>
  void start(std::coroutine_handle<LazyPromise<T>> branch, Executor* executor,
             const CancellationToken* token, bool parallel) {
    LazyPromise<T>& promise = branch.promise();
    promise.setCompletionSink(this);
    promise.setExecutor(executor);
    promise.setCancellationToken(token);
    if (parallel && executor != nullptr) {
      try {
        executor->schedule(branch);
      } catch (...) {
        // Not started: the branch's Try carries the refusal; the branch frame is freed
        // with the collect.
        promise.result_.setException(std::current_exception());
        complete(this);
      }
    } else {
      branch.resume();
    }
  }

  // The collect's own arrival after starting every branch: true when it must suspend.
  bool arriveAndSuspend(std::coroutine_handle<> awaiting) noexcept {
    awaiting_ = awaiting;
    return !arrive();
  }

 private:
  // acq_rel: each branch releases its result; whoever brings the count to zero acquires
  // all of them before the collect reads the results.
  bool arrive() noexcept { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<CollectBarrier*>(sink);
    return self->arrive() ? self->awaiting_ : std::noop_coroutine();
  }

  std::atomic<std::size_t> pending_;
  std::coroutine_handle<> awaiting_;
};

// Awaited inside the collect's own coroutine: starts every branch, then waits for all.
// Executor-aware (coAwait) so the promise does not wrap it: the last branch finishes on
// the collect's executor already.
template <class StartAll>
class CollectAwaiter {
 public:
  CollectAwaiter(std::size_t branches, StartAll startAll) noexcept
      : barrier_(branches), branches_(branches), startAll_(std::move(startAll)) {}

  // What `co_await awaiter` really awaits: a pointer to it. (g++-12 copies an awaiter that
  // await_transform returns by reference; the barrier must stay where branches point.)
  struct Ref {
    CollectAwaiter* self;
    bool await_ready() const noexcept { return self->branches_ == 0; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> awaiting) {
      self->barrier_.recordAlgorithm(awaiting);
      self->startAll_(self->barrier_);
      return self->barrier_.arriveAndSuspend(awaiting);
    }
    void await_resume() const noexcept {}
    // For task dumps (coro/detail/wait_note.h).
    void describeWait(std::string& out) const {
      out += "collectAll of " + std::to_string(self->branches_) + " branches";
    }
  };
  Ref coAwait(Executor*) & noexcept { return Ref{this}; }

 private:
  CollectBarrier barrier_;
  std::size_t branches_;
  StartAll startAll_;
};

// The result of every finished branch, in order.
template <class T>
std::vector<Try<T>> takeResults(std::vector<Lazy<T>>& branches) {
  std::vector<Try<T>> results;
  results.reserve(branches.size());
  for (Lazy<T>& branch : branches) {
    results.push_back(std::move(LazyAccess::handle(branch).promise().result_));
  }
  return results;
}

template <bool kParallel, class... T>
Lazy<std::tuple<Try<T>...>> collectTuple(Lazy<T>... branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  // A named local in the frame: it holds the barrier the branches point at.
  CollectAwaiter awaiter(sizeof...(T), [&](CollectBarrier& barrier) {
    (barrier.start(LazyAccess::handle(branches), executor, token, kParallel), ...);
  });
  co_await awaiter;
  co_return std::tuple<Try<T>...>(std::move(LazyAccess::handle(branches).promise().result_)...);
}

template <bool kParallel, class T>
Lazy<std::vector<Try<T>>> collectRange(std::vector<Lazy<T>> branches) {
  checkBranchRange("collectAll of a vector holding", branches);
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  CollectAwaiter awaiter(branches.size(), [&](CollectBarrier& barrier) {
    for (Lazy<T>& branch : branches) {
      barrier.start(LazyAccess::handle(branch), executor, token, kParallel);
    }
  });
  co_await awaiter;
  co_return takeResults(branches);
}

// --- collectAllFailFast -------------------------------------------------------------------

// One per branch: a branch that finishes with an exception cancels the others.
template <class T>
class FailFastSink final : public CompletionSink {
 public:
  FailFastSink() noexcept : CompletionSink(&FailFastSink::complete, "collectAllFailFast") {}
  CancellingBarrier* barrier = nullptr;
  LazyPromise<T>* promise = nullptr;

 private:
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<FailFastSink*>(sink);
    return self->barrier->branchDone(/*cancelOthers=*/self->promise->result_.hasException());
  }
};

// Starts one fail-fast branch (scheduled on `executor` when `parallel`), or, once the
// branches are cancelled, records OperationCancelled in it without running it.
template <class T>
void startFailFastBranch(Lazy<T>& branch, FailFastSink<T>& sink, CancellingBarrier& barrier,
                         Executor* executor, bool parallel) {
  auto handle = LazyAccess::handle(branch);
  LazyPromise<T>& promise = handle.promise();
  if (barrier.branchesCancelled()) {
    promise.result_.setException(std::make_exception_ptr(
        OperationCancelled("weft: collectAllFailFast: not started, another branch failed")));
    return;
  }
  sink.barrier = &barrier;
  sink.promise = &promise;
  sink.traceParent_ = barrier.algorithmParent();
  promise.setCompletionSink(&sink);
  promise.setExecutor(executor);
  promise.setCancellationToken(&barrier.token());
  barrier.addBranch();
  if (parallel && executor != nullptr) {
    try {
      executor->schedule(handle);
    } catch (...) {
      // Not started: the refusal is the branch's failure. Not the last arrival (the
      // collect's own is still pending), so nothing to resume.
      promise.result_.setException(std::current_exception());
      (void)barrier.branchDone(/*cancelOthers=*/true);
    }
  } else {
    handle.resume();
  }
}

template <bool kParallel, class... T>
Lazy<std::tuple<Try<T>...>> collectFailFastTuple(Lazy<T>... branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* parent = co_await CurrentCancellationTokenPointer{};
  CancellingBarrier barrier(*parent);
  std::tuple<FailFastSink<T>...> sinks;
  std::tuple<Lazy<T>&...> refs(branches...);
  BarrierAwaiter awaiter(barrier, [&] {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (startFailFastBranch(std::get<I>(refs), std::get<I>(sinks), barrier, executor, kParallel),
       ...);
    }(std::index_sequence_for<T...>{});
  });
  co_await awaiter;
  co_return std::tuple<Try<T>...>(std::move(LazyAccess::handle(branches).promise().result_)...);
}

template <bool kParallel, class T>
Lazy<std::vector<Try<T>>> collectFailFastRange(std::vector<Lazy<T>> branches) {
  checkBranchRange("collectAllFailFast of a vector holding", branches);
  Executor* executor = co_await currentExecutor();
  const CancellationToken* parent = co_await CurrentCancellationTokenPointer{};
  CancellingBarrier barrier(*parent);
  std::vector<FailFastSink<T>> sinks(branches.size());
  BarrierAwaiter awaiter(barrier, [&] {
    for (std::size_t i = 0; i < branches.size(); ++i) {
      startFailFastBranch(branches[i], sinks[i], barrier, executor, kParallel);
    }
  });
  co_await awaiter;
  co_return takeResults(branches);
}

// --- collectAllWindowed -------------------------------------------------------------------

// Runs a vector of branches at most `window` at a time. One sink for all branches: when
// one finishes, it starts the next unstarted one in its place, by symmetric transfer
// (sequential mode: no stack growth however many finish synchronously) or by scheduling
// it (parallel mode).
template <class T>
class WindowBarrier final : public CompletionSink {
 public:
  WindowBarrier(std::vector<Lazy<T>>& branches, std::size_t window, Executor* executor,
                const CancellationToken* token, bool parallel) noexcept
      : CompletionSink(&WindowBarrier::complete, "collectAllWindowed"),
        branches_(branches),
        executor_(executor),
        token_(token),
        parallel_(parallel && executor != nullptr),
        window_(window < branches.size() ? window : branches.size()),
        next_(window_),
        pending_(branches.size() + 1) {}

  // Starts the first `window` branches (the collect's own part of await_suspend).
  void startFirst() {
    for (std::size_t i = 0; i < window_; ++i) {
      std::coroutine_handle<> branch = prepare(i);
      if (!parallel_) {
        branch.resume();
        continue;
      }
      try {
        executor_->schedule(branch);
      } catch (...) {
        handle(i).promise().result_.setException(std::current_exception());
        // Starts a later branch in its place, or arrives for it: never the last arrival
        // (ours is pending) and, in parallel mode, never a branch to transfer to.
        (void)finishOne();
      }
    }
  }

  // As CollectBarrier::recordAlgorithm.
  template <class Promise>
  void recordAlgorithm(std::coroutine_handle<Promise> collect) noexcept {
    traceParent_ = asyncParentAbove(collect);
  }

  bool arriveAndSuspend(std::coroutine_handle<> awaiting) noexcept {
    awaiting_ = awaiting;
    return !arrive();
  }

 private:
  std::coroutine_handle<LazyPromise<T>> handle(std::size_t i) const noexcept {
    return LazyAccess::handle(branches_[i]);
  }

  std::coroutine_handle<> prepare(std::size_t i) noexcept {
    auto branch = handle(i);
    LazyPromise<T>& promise = branch.promise();
    promise.setCompletionSink(this);
    promise.setExecutor(executor_);
    promise.setCancellationToken(token_);
    return branch;
  }

  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    return static_cast<WindowBarrier*>(sink)->finishOne();
  }

  // One branch has finished: give its slot to the next unstarted branch, if any, then
  // arrive for it. An arrival that hands its slot on is never the last (the next branch
  // is pending). noexcept: runs in a final suspend; a refused schedule is recorded in the
  // refused branch, which then counts as finished in turn.
  std::coroutine_handle<> finishOne() noexcept {
    for (;;) {
      // Relaxed: only hands out distinct indices; results are published by arrive().
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= branches_.size()) return arrive() ? awaiting_ : std::noop_coroutine();
      std::coroutine_handle<> branch = prepare(i);
      if (!parallel_) {
        (void)arrive();
        return branch;
      }
      try {
        executor_->schedule(branch);
        (void)arrive();
        return std::noop_coroutine();
      } catch (...) {
        handle(i).promise().result_.setException(std::current_exception());
        (void)arrive();  // for the branch that finished; branch i finishes next round
      }
    }
  }

  // acq_rel: as CollectBarrier.
  bool arrive() noexcept { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  std::vector<Lazy<T>>& branches_;
  Executor* const executor_;
  const CancellationToken* const token_;
  const bool parallel_;
  const std::size_t window_;
  std::atomic<std::size_t> next_;
  std::atomic<std::size_t> pending_;
  std::coroutine_handle<> awaiting_;
};

template <bool kParallel, class T>
Lazy<std::vector<Try<T>>> collectWindowed(std::size_t window, std::vector<Lazy<T>> branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  if (!branches.empty()) {
    WindowBarrier<T> barrier(branches, window, executor, token, kParallel);
    BarrierAwaiter awaiter(barrier, [&] { barrier.startFirst(); });
    co_await awaiter;
  }
  co_return takeResults(branches);
}

template <class T>
void checkWindowed(std::size_t maxInFlight, const std::vector<Lazy<T>>& branches) {
  if (maxInFlight == 0) {
    throw std::invalid_argument("weft: collectAllWindowed with maxInFlight == 0 never runs");
  }
  checkBranchRange("collectAllWindowed of a vector holding", branches);
}

}  // namespace weft::detail
