#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include "coro/cancellation.h"
#include "coro/current_executor.h"
#include "coro/detail/lazy_promise.h"
#include "coro/lazy.h"
#include "coro/try.h"
#include "executors/executor.h"

namespace weft {

namespace detail {

// Counts finished branches of a collect; the last one to finish (or the collect itself,
// if every branch finished while it was still starting them) resumes the collect.
// Branches keep their results in their own frames until then: no allocation per branch.
class CollectBarrier final : public CompletionSink {
 public:
  explicit CollectBarrier(std::size_t branches) noexcept
      : CompletionSink(&CollectBarrier::complete), pending_(branches + 1) {}

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
    bool await_suspend(std::coroutine_handle<> awaiting) {
      self->startAll_(self->barrier_);
      return self->barrier_.arriveAndSuspend(awaiting);
    }
    void await_resume() const noexcept {}
  };
  Ref coAwait(Executor*) & noexcept { return Ref{this}; }

 private:
  CollectBarrier barrier_;
  std::size_t branches_;
  StartAll startAll_;
};

// `co_await currentCancellationTokenPointer()`: the address of the token the current
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
  for (const Lazy<T>& branch : branches) {
    if (!branch.valid()) abortInvalidLazy("collectAll of a vector holding");
  }
  Executor* executor = co_await currentExecutor();
  const CancellationToken* token = co_await CurrentCancellationTokenPointer{};
  CollectAwaiter awaiter(branches.size(), [&](CollectBarrier& barrier) {
    for (Lazy<T>& branch : branches) {
      barrier.start(LazyAccess::handle(branch), executor, token, kParallel);
    }
  });
  co_await awaiter;
  std::vector<Try<T>> results;
  results.reserve(branches.size());
  for (Lazy<T>& branch : branches) {
    results.push_back(std::move(LazyAccess::handle(branch).promise().result_));
  }
  co_return results;
}

template <class... T>
void checkBranches(const Lazy<T>&... branches) {
  if (!(branches.valid() && ...)) abortInvalidLazy("collectAll of");
}

}  // namespace detail

// collectAll(a, b, ...) / collectAll(std::vector<Lazy<T>>): runs every branch and
// completes when all have finished, with one Try per branch (a tuple of Try<A>, Try<B>,
// ... or a vector of Try<T>, in branch order).
//
// Branches start one after another on the awaiting thread; a branch that suspends lets
// the next one start, so branches that wait on I/O or timers overlap. Each branch
// inherits the awaiting coroutine's executor and cancellation token. The collect never
// completes before every branch has finished, whatever any of them throws: nothing is
// left running.
//
// Errors: a branch's exception is stored in its Try, never thrown by the collect itself.
// Preconditions: every Lazy is valid (else abort with a message).
// Thread safety: branches may finish on different threads; results are published to the
// awaiter with acquire/release ordering.
//
// Example:
//   auto [a, b] = co_await weft::collectAll(fetch("a"), fetch("b"));
//   if (a.hasValue()) use(a.value());
//   std::vector<weft::Try<int>> all = co_await weft::collectAll(std::move(lazies));
template <class... T>
Lazy<std::tuple<Try<T>...>> collectAll(Lazy<T>... branches) {
  detail::checkBranches(branches...);
  return detail::collectTuple<false>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAll(std::vector<Lazy<T>> branches) {
  return detail::collectRange<false>(std::move(branches));
}

// collectAllPara: like collectAll, but every branch is scheduled on the awaiting
// coroutine's executor, so on a ThreadPool the branches run in parallel. In a coroutine
// without an executor it behaves exactly like collectAll.
//
// Errors: as collectAll; a branch the executor refuses (shut down) gets
// ExecutorShutDown in its Try.
//
// Example:
//   weft::ThreadPool pool(2);
//   auto results = weft::syncAwait(weft::collectAllPara(std::move(lazies)), &pool);
template <class... T>
Lazy<std::tuple<Try<T>...>> collectAllPara(Lazy<T>... branches) {
  detail::checkBranches(branches...);
  return detail::collectTuple<true>(std::move(branches)...);
}

template <class T>
Lazy<std::vector<Try<T>>> collectAllPara(std::vector<Lazy<T>> branches) {
  return detail::collectRange<true>(std::move(branches));
}

}  // namespace weft
