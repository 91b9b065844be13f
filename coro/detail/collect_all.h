#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/detail/collect_barrier.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

// The coroutines behind coro/collect.h: collectAll and collectAllPara (kParallel), their
// fail-fast and windowed forms. Each runs its branches against a CollectBarrier in its
// own frame (coro/detail/collect_barrier.h) and returns their results, in order.

namespace weft::detail {

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

// --- collectAll, collectAllPara -----------------------------------------------------------

inline constexpr char kCollectAllLabel[] = "collectAll";

// Starts one branch of a collectAll, bound to the barrier itself. A branch the executor
// refused has finished (its Try holds the refusal): never the last arrival (the
// collect's own is pending), so nothing to resume. Forced inline, as startBranch.
template <class T>
[[gnu::always_inline]] inline void startCollectAllBranch(Lazy<T>& branch, CollectBarrier& barrier,
                                                         Executor* executor,
                                                         const CancellationToken* token,
                                                         bool parallel) {
  auto handle = LazyAccess::handle(branch);
  bindBranch(handle, barrier, barrier, executor, token);
  if (!startBranch(handle, executor, parallel)) (void)barrier.arrive();
}

template <bool kParallel, class... T>
Lazy<std::tuple<Try<T>...>> collectTuple(Lazy<T>... branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  CollectBarrier barrier(kCollectAllLabel, sizeof...(T));
  // A named local in the frame, as the barrier the branches point at.
  CollectAwaiter awaiter(barrier, sizeof...(T), [&] {
    (startCollectAllBranch(branches, barrier, executor, token, kParallel), ...);
  });
  co_await awaiter;
  co_return std::tuple<Try<T>...>(std::move(LazyAccess::handle(branches).promise().result_)...);
}

template <bool kParallel, class T>
Lazy<std::vector<Try<T>>> collectRange(std::vector<Lazy<T>> branches) {
  checkBranchRange("collectAll of a vector holding", branches);
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  CollectBarrier barrier(kCollectAllLabel, branches.size());
  CollectAwaiter awaiter(barrier, branches.size(), [&] {
    for (Lazy<T>& branch : branches) {
      startCollectAllBranch(branch, barrier, executor, token, kParallel);
    }
  });
  co_await awaiter;
  co_return takeResults(branches);
}

// --- collectAllFailFast -------------------------------------------------------------------

inline constexpr char kCollectAllFailFastLabel[] = "collectAllFailFast";

// One per branch: a branch that finishes with an exception cancels the others.
template <class T>
class FailFastSink final : public CompletionSink {
 public:
  FailFastSink() noexcept : CompletionSink(&FailFastSink::complete) {}
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
  if (barrier.branchesCancelled()) {
    handle.promise().result_.setException(std::make_exception_ptr(
        OperationCancelled("weft: collectAllFailFast: not started, another branch failed")));
    return;
  }
  sink.barrier = &barrier;
  sink.promise = &handle.promise();
  barrier.addBranch();
  bindBranch(handle, sink, barrier, executor, &barrier.token());
  if (!startBranch(handle, executor, parallel)) {
    // Not started: the refusal is the branch's failure. Not the last arrival (the
    // collect's own is still pending), so nothing to resume.
    (void)barrier.branchDone(/*cancelOthers=*/true);
  }
}

template <bool kParallel, class... T>
Lazy<std::tuple<Try<T>...>> collectFailFastTuple(Lazy<T>... branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* parent = co_await CurrentCancellationTokenPointer{};
  CancellingBarrier barrier(kCollectAllFailFastLabel, *parent);
  std::tuple<FailFastSink<T>...> sinks;
  std::tuple<Lazy<T>&...> refs(branches...);
  CollectAwaiter awaiter(barrier, sizeof...(T), [&] {
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
  CancellingBarrier barrier(kCollectAllFailFastLabel, *parent);
  std::vector<FailFastSink<T>> sinks(branches.size());
  CollectAwaiter awaiter(barrier, branches.size(), [&] {
    for (std::size_t i = 0; i < branches.size(); ++i) {
      startFailFastBranch(branches[i], sinks[i], barrier, executor, kParallel);
    }
  });
  co_await awaiter;
  co_return takeResults(branches);
}

// --- collectAllWindowed -------------------------------------------------------------------

// Runs a vector of branches at most `window` at a time. The barrier is every branch's
// sink: when one finishes, it starts the next unstarted one in its place, by symmetric
// transfer (sequential mode: no stack growth however many finish synchronously) or by
// scheduling it (parallel mode).
template <class T>
class WindowBarrier final : public CollectBarrier {
 public:
  WindowBarrier(std::vector<Lazy<T>>& branches, std::size_t window, Executor* executor,
                const CancellationToken* token, bool parallel) noexcept
      : CollectBarrier("collectAllWindowed", branches.size(), &WindowBarrier::complete),
        branches_(branches),
        executor_(executor),
        token_(token),
        parallel_(parallel && executor != nullptr),
        window_(window < branches.size() ? window : branches.size()),
        next_(window_) {}

  // Starts the first `window` branches (the collect's own part of await_suspend).
  void startFirst() {
    for (std::size_t i = 0; i < window_; ++i) {
      bindBranch(handle(i), *this, *this, executor_, token_);
      if (!startBranch(handle(i), executor_, parallel_)) {
        // Starts a later branch in its place, or arrives for it: never the last arrival
        // (ours is pending) and, in parallel mode, never a branch to transfer to.
        (void)finishOne();
      }
    }
  }

 private:
  std::coroutine_handle<LazyPromise<T>> handle(std::size_t i) const noexcept {
    return LazyAccess::handle(branches_[i]);
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
      if (i >= branches_.size()) return arrive();
      bindBranch(handle(i), *this, *this, executor_, token_);
      if (!parallel_) {
        (void)arrive();
        return handle(i);
      }
      const bool started = scheduleBranch(handle(i), executor_);
      (void)arrive();  // for the branch that finished; a refused branch i finishes next round
      if (started) return std::noop_coroutine();
    }
  }

  std::vector<Lazy<T>>& branches_;
  Executor* const executor_;
  const CancellationToken* const token_;
  const bool parallel_;
  const std::size_t window_;
  std::atomic<std::size_t> next_;
};

template <bool kParallel, class T>
Lazy<std::vector<Try<T>>> collectWindowed(std::size_t window, std::vector<Lazy<T>> branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  WindowBarrier<T> barrier(branches, window, executor, token, kParallel);
  CollectAwaiter awaiter(barrier, branches.size(), [&] { barrier.startFirst(); });
  co_await awaiter;
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
