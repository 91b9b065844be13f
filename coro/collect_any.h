#pragma once

#include <array>
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "weft/coro/cancellation.h"
#include "weft/coro/current_executor.h"
#include "weft/coro/detail/await_in_lazy.h"
#include "weft/coro/detail/collect_barrier.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

// What collectAny over a range returns: which branch finished first (its index in the
// range) and its outcome.
template <class T>
struct CollectAnyResult {
  std::size_t index;
  Try<T> result;
};

// What collectAnyNoDiscard(a, b, ...) returns: which branch finished first, and how every
// branch finished (a Try per branch, in argument order; an empty Try for a branch that
// was never started because the race was decided before its turn).
template <class... T>
struct CollectAnyNoDiscardResult {
  std::size_t index;
  std::tuple<Try<T>...> results;
};

// What collectAnyNoDiscard over a range returns (as above, one Try per element).
template <class T>
struct CollectAnyNoDiscardRangeResult {
  std::size_t index;
  std::vector<Try<T>> results;
};

namespace detail {

// collectAny's join point: the first branch to finish claims the win and cancels the
// others; the collect still waits for all of them (CancellingBarrier).
class AnyBarrier : public CancellingBarrier {
 public:
  static constexpr std::size_t kNoWinner = std::numeric_limits<std::size_t>::max();
  explicit AnyBarrier(const CancellationToken& parent) : CancellingBarrier("collectAny", parent) {}

  // From a branch's completion sink. acq_rel: the winner's result is published to the
  // collect by the barrier's count; the CAS only has to pick one winner.
  std::coroutine_handle<> branchFinished(std::size_t index) noexcept {
    std::size_t none = kNoWinner;
    const bool won = winner_.compare_exchange_strong(none, index, std::memory_order_acq_rel);
    return branchDone(/*cancelOthers=*/won);
  }
  // Acquire: pairs with the winner's CAS (a hint only: used to stop starting branches).
  bool decided() const noexcept { return winner_.load(std::memory_order_acquire) != kNoWinner; }
  std::size_t winner() const noexcept { return winner_.load(std::memory_order_acquire); }

 private:
  std::atomic<std::size_t> winner_{kNoWinner};
};

// One per branch: tells the barrier which branch finished.
class AnyBranchSink final : public CompletionSink {
 public:
  AnyBranchSink() noexcept : CompletionSink(&AnyBranchSink::complete) {}
  AnyBarrier* barrier = nullptr;
  std::size_t index = 0;

 private:
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<AnyBranchSink*>(sink);
    return self->barrier->branchFinished(self->index);
  }
};

// Starts one branch of a collectAny unless the race is already decided (a branch that
// finished while the earlier ones were being started): a branch never started is simply
// destroyed with the collect. Returns true when it stopped starting branches.
template <class T>
bool startAnyBranch(Lazy<T>& branch, AnyBranchSink& sink, AnyBarrier& barrier, Executor* executor) {
  if (barrier.decided()) return true;
  sink.barrier = &barrier;
  barrier.addBranch();
  auto handle = LazyAccess::handle(branch);
  bindBranch(handle, sink, barrier, executor, &barrier.token());
  handle.resume();
  return false;
}

// Declared after the barrier in a collect's frame, so destroyed before it: when the
// collect is destroyed while suspended (its awaiter destroyed it), its branches are
// destroyed first (each withdraws its own wait: a sleep disarms its timer, a lock wait
// leaves its queue), while the barrier, the token they carry and their sinks still exist.
// After a normal completion it frees the finished branches' frames a little earlier.
template <class Destroy>
class DestroyBranchesFirst {
 public:
  explicit DestroyBranchesFirst(Destroy destroy) noexcept : destroy_(std::move(destroy)) {}
  DestroyBranchesFirst(const DestroyBranchesFirst&) = delete;
  DestroyBranchesFirst& operator=(const DestroyBranchesFirst&) = delete;
  ~DestroyBranchesFirst() { destroy_(); }

 private:
  Destroy destroy_;
};

// kKeepAll: collectAnyNoDiscard (every branch's outcome) rather than collectAny (the
// winner's).
template <bool kKeepAll, class... T>
Lazy<std::conditional_t<kKeepAll, CollectAnyNoDiscardResult<T...>, std::variant<Try<T>...>>>
collectAnyTuple(Lazy<T>... branches) {
  Executor* executor = co_await currentExecutor();
  const CancellationToken* parent = co_await CurrentCancellationTokenPointer{};
  AnyBarrier barrier(*parent);
  std::array<AnyBranchSink, sizeof...(T)> sinks;
  std::tuple<Lazy<T>&...> refs(branches...);
  DestroyBranchesFirst destroyFirst([&] { ((branches = Lazy<T>()), ...); });
  CollectAwaiter awaiter(barrier, sizeof...(T), [&] {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((sinks[I].index = I), ...);
      (void)(startAnyBranch(std::get<I>(refs), sinks[I], barrier, executor) || ...);
    }(std::index_sequence_for<T...>{});
  });
  co_await awaiter;
  const std::size_t winner = barrier.winner();
  if constexpr (kKeepAll) {
    co_return CollectAnyNoDiscardResult<T...>{
        winner,
        std::tuple<Try<T>...>(std::move(LazyAccess::handle(branches).promise().result_)...)};
  } else {
    std::variant<Try<T>...> result;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (void)((winner == I &&
              (result.template emplace<I>(
                   std::move(LazyAccess::handle(std::get<I>(refs)).promise().result_)),
               true)) ||
             ...);
    }(std::index_sequence_for<T...>{});
    co_return result;
  }
}

template <bool kKeepAll, class T>
Lazy<std::conditional_t<kKeepAll, CollectAnyNoDiscardRangeResult<T>, CollectAnyResult<T>>>
collectAnyRange(std::vector<Lazy<T>> branches) {
  if (branches.empty()) {
    throw std::invalid_argument(
        kKeepAll ? "weft: collectAnyNoDiscard of an empty range (no branch can win)"
                 : "weft: collectAny of an empty range (no branch can win)");
  }
  Executor* executor = co_await currentExecutor();
  const CancellationToken* parent = co_await CurrentCancellationTokenPointer{};
  AnyBarrier barrier(*parent);
  std::vector<AnyBranchSink> sinks(branches.size());
  DestroyBranchesFirst destroyFirst([&] { branches.clear(); });
  CollectAwaiter awaiter(barrier, branches.size(), [&] {
    for (std::size_t i = 0; i < branches.size(); ++i) {
      sinks[i].index = i;
      if (startAnyBranch(branches[i], sinks[i], barrier, executor)) break;
    }
  });
  co_await awaiter;
  const std::size_t winner = barrier.winner();
  if constexpr (kKeepAll) {
    CollectAnyNoDiscardRangeResult<T> result{winner, {}};
    result.results.reserve(branches.size());
    for (Lazy<T>& branch : branches) {
      result.results.push_back(std::move(LazyAccess::handle(branch).promise().result_));
    }
    co_return result;
  } else {
    co_return CollectAnyResult<T>{
        winner, std::move(LazyAccess::handle(branches[winner]).promise().result_)};
  }
}

}  // namespace detail

// collectAny(a, b, ...) / collectAny(std::vector<Lazy<T>>): runs the branches as a race.
// The first branch to finish (with a value or an exception) wins; every other branch is
// cancelled and awaited; the result says which won and how it finished:
//  - variadic: a std::variant<Try<A>, Try<B>, ...> whose index() is the winner's position;
//  - range: a CollectAnyResult<T>{index, Try<T>}.
//
// Semantics: branches start one after another on the awaiting thread, like collectAll,
// inheriting the awaiting coroutine's executor; once one has finished, the remaining ones
// are not started at all (their frames are freed with the collect). Every branch carries
// a token of the collect's own, which is cancelled when the winner finishes and whenever
// the awaiting coroutine's token is cancelled. The collect completes only after every
// started branch has finished: no work is left running and no frame dangles.
//
// Losers' results: cancellation never undoes work that is done, so a loser may still
// finish with a value (a receive that got its value as the cancellation arrived, a lock
// granted, a permit taken). collectAny destroys the losers' results, whatever they are.
// When a branch's value must not be lost (it consumed something: a channel value, a
// permit, a lock), use collectAnyNoDiscard, which hands over every branch's outcome.
//
// Destruction: destroying the collect while it waits (destroying the coroutine that
// awaits it) destroys its branches first, each withdrawing its own wait (a sleep disarms
// its timer, a lock wait leaves the queue), then the collect's state.
//
// Preconditions: every Lazy is valid (else abort with a message). The losers must react
// to cancellation (through cancellable awaits or by polling their token), or the collect
// waits for them to finish normally.
// Errors: the winner's exception is in its Try, never thrown by the collect. The range
// form throws std::invalid_argument from the co_await when the range is empty.
// Thread safety: branches may finish on different threads; exactly one wins.
//
// Example:
//   auto first = co_await weft::collectAny(fetch(primary), fetch(replica));
//   std::string page = first.index() == 0 ? std::get<0>(first).value()
//                                         : std::get<1>(first).value();
//   auto r = co_await weft::collectAny(std::move(requests));  // r.index, r.result
template <class... T>
  requires(sizeof...(T) > 0)
Lazy<std::variant<Try<T>...>> collectAny(Lazy<T>... branches) {
  detail::checkBranches("collectAny of", branches...);
  return detail::collectAnyTuple<false>(std::move(branches)...);
}

template <class T>
Lazy<CollectAnyResult<T>> collectAny(std::vector<Lazy<T>> branches) {
  detail::checkBranchRange("collectAny of a vector holding", branches);
  return detail::collectAnyRange<false>(std::move(branches));
}

// collectAnyNoDiscard(a, b, ...) / collectAnyNoDiscard(std::vector<Lazy<T>>): the race of
// collectAny, returning the winner's index and every branch's outcome, so that a loser
// that finished with a value despite its cancellation is not lost (as folly's
// collectAnyNoDiscard).
//  - variadic: CollectAnyNoDiscardResult<A, B, ...>{index, std::tuple<Try<A>, Try<B>...>};
//  - range: CollectAnyNoDiscardRangeResult<T>{index, std::vector<Try<T>>}.
// A loser's Try holds its value, or its exception (typically OperationCancelled); a
// branch never started (the race was decided before its turn) has an empty Try
// (available() is false). Everything else is exactly as collectAny.
//
// Preconditions, Errors, Thread safety: as collectAny (the empty-range error names
// collectAnyNoDiscard).
//
// Example:
//   // receiveOne(ch): a Lazy<std::optional<int>>; tick(1s): a Lazy<void> that sleeps
//   auto [winner, results] = co_await weft::collectAnyNoDiscard(receiveOne(ch), tick(1s));
//   if (std::get<0>(results).hasValue()) use(std::get<0>(results).value());  // even if late
template <class... T>
  requires(sizeof...(T) > 0)
Lazy<CollectAnyNoDiscardResult<T...>> collectAnyNoDiscard(Lazy<T>... branches) {
  detail::checkBranches("collectAnyNoDiscard of", branches...);
  return detail::collectAnyTuple<true>(std::move(branches)...);
}

template <class T>
Lazy<CollectAnyNoDiscardRangeResult<T>> collectAnyNoDiscard(std::vector<Lazy<T>> branches) {
  detail::checkBranchRange("collectAnyNoDiscard of a vector holding", branches);
  return detail::collectAnyRange<true>(std::move(branches));
}

// collectAny and collectAnyNoDiscard also take other awaitables, as the collects of
// coro/collect.h do: mixed with Lazys in the variadic forms, or a vector of one type.
template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAny(A&&... branches) {
  return collectAny(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAny(std::vector<A> branches) {
  return collectAny(detail::asLazies(std::move(branches)));
}

template <class... A>
  requires(sizeof...(A) > 0 && detail::NotAllLazys<A...>)
auto collectAnyNoDiscard(A&&... branches) {
  return collectAnyNoDiscard(detail::asLazy(std::forward<A>(branches))...);
}

template <class A>
  requires(!detail::kIsLazy<A>)
auto collectAnyNoDiscard(std::vector<A> branches) {
  return collectAnyNoDiscard(detail::asLazies(std::move(branches)));
}

}  // namespace weft
