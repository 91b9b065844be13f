#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/channel.h"
#include "weft/coro/detail/channel_core.h"
#include "weft/coro/detail/channel_waiter.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/select_cases.h"
#include "weft/coro/sleep.h"
#include "weft/executors/executor.h"

// The awaiter behind weft::select() (coro/select.h) and its claim protocol.

namespace weft::detail {

// The awaiter of `co_await select(cases...)`. See select() in coro/select.h for the
// semantics. The protocol follows Go's runtime (selectgo):
//  1. Lock every channel involved, in address order (each once), so that polling and
//     linking are atomic with respect to every other operation on those channels, and
//     two selects can never deadlock.
//  2. Poll the channel cases in a random order; the first that can complete does so,
//     under the locks, and the select finishes without suspending.
//  3. Nothing ready: the default case if there is one; else link one node per case into
//     its channel and suspend. Every node points at the one SelectState; the channel
//     operation that later claims it (SelectState::tryClaim, under that channel's lock)
//     completes that case, and every other operation that finds a node of the finished
//     select drops it. So exactly one case completes, and no other case's value moves.
//  4. Resumed: lock each channel again to unlink the nodes still linked.
// Cancellation and the timeout's timer claim the select from outside the channels
// (SelectState::claimExternally): a suspended select is resumed by whoever claims it;
// a claim made while the select is still registering makes the registration's final
// compare-and-swap fail, and the select then withdraws its nodes and does not suspend.
// The unlock at the end of step 3 reads only a copy of the lock list on the native
// stack: after the first unlock, the select may already be claimed, resumed on another
// thread, and finished (its cleanup in step 4 waits for the remaining unlocks, and a
// ChannelLock is not touched after its release store, so even a channel destroyed right
// after the cleanup is safe).
template <class... Cases>
class SelectAwaiter {
  static constexpr std::size_t kCases = sizeof...(Cases);
  static constexpr std::size_t kDefaults =
      (std::size_t{0} + ... + std::size_t{std::is_same_v<Cases, SelectDefaultCase>});
  static constexpr std::size_t kTimeouts =
      (std::size_t{0} + ... + std::size_t{std::is_same_v<Cases, SelectTimeoutCase>});
  static constexpr std::size_t kChannelCases =
      (std::size_t{0} + ... + std::size_t{SelectCaseOp<Cases>::kHasChannel});
  // Some case was made with when(): the lists below may end early (nullptr / kNone).
  static constexpr bool kSwitchable = (false || ... || SelectCaseOp<Cases>::kCanBeDisabled);
  static_assert(kCases > 0, "weft::select() needs at least one case");
  static_assert(kDefaults <= 1, "weft::select(): at most one defaultCase()");
  static_assert(kTimeouts <= 1, "weft::select(): at most one timeoutCase()");
  static_assert(kCases < SelectState::kCancelled, "weft::select(): too many cases");

  static constexpr std::uint32_t kNone = SelectState::kRegistering;

 public:
  using Result = std::variant<typename SelectCaseOp<Cases>::Result...>;

  SelectAwaiter(Executor* executor, const CancellationToken* token, Cases&&... cases)
      : ops_(SelectCaseOp<Cases>(std::move(cases))...), executor_(executor), token_(token) {}
  SelectAwaiter(const SelectAwaiter&) = delete;
  SelectAwaiter& operator=(const SelectAwaiter&) = delete;
  // Also when await_suspend threw after arming the timer. Destroyed while suspended (its
  // coroutine destroyed, or its fiber unwound, while it waits): withdraws (abandon()).
  ~SelectAwaiter() {
    if (suspended_) [[unlikely]]
      abandon();
    disarmTimer();
  }

  bool await_ready() const noexcept { return false; }

  // Throws what a chosen send case's channel throws under its lock (std::bad_alloc from
  // an unbounded channel that cannot grow): nothing was sent then; and what arming the
  // timeout's timer throws (ExecutorShutDown, std::bad_alloc, std::system_error).
  bool await_suspend(std::coroutine_handle<> awaiting) {
    if (!armCancellation()) return false;
    std::array<ChannelLock*, kChannelCases> locks = channelLocks();
    std::array<std::uint32_t, kChannelCases> order;
    for (;;) {  // twice at most: again after arming the timeout's timer
      lockAll(locks);
      // relaxed: a cancellation that flipped the state is seen through the callback's
      // own synchronisation (it ran in armCancellation, or its CAS is ordered by the one
      // below).
      if (state_.winner.load(std::memory_order_relaxed) == SelectState::kCancelled) {
        chosen_ = SelectState::kCancelled;
        unlockAll(locks);
        return false;
      }
      order = shuffledChannelCases();
      for (std::uint32_t index : order) {
        if (kSwitchable && index == kNone) break;  // the rest are disabled
        ChannelWaiter* wake = nullptr;
        ChannelOpResult outcome;
        try {
          outcome = tryCase(index, wake);
        } catch (...) {
          unlockAll(locks);
          throw;
        }
        if (outcome != ChannelOpResult::kBlocked) {
          if (outcome == ChannelOpResult::kClosed) setClosed(index);
          chosen_ = index;
          unlockAll(locks);
          if (wake != nullptr) resumeWaiter(wake);
          return false;
        }
      }
      if constexpr (kDefaults != 0) {
        chosen_ = defaultIndex();
        unlockAll(locks);
        return false;
      }
      if constexpr (kTimeouts != 0) {
        // Nothing is ready: the timeout is, if its time is up. Otherwise its timer is
        // armed now (not under the channel locks: arming takes the timer queue's mutex,
        // and may start its thread), and the channels are polled again, since a case may
        // have become ready meanwhile. If the timer fires before the select is
        // registered, its claim makes the registration below fail. The clock is read
        // here only: a select with a ready case never reads it.
        if (!timerArmed_) {
          unlockAll(locks);
          const SleepClock::time_point now = SleepClock::now();
          const SleepClock::time_point deadline =
              deadlineAfter(std::get<timeoutIndex()>(ops_).after, now);
          if (deadline <= now) {
            chosen_ = timeoutIndex();
            return false;
          }
          armTimer(deadline);  // throws with nothing armed
          continue;
        }
      }
      break;
    }
    if constexpr (kDefaults == 0) {
      state_.handle = awaiting;
      state_.executor = executor_;
      enqueueAll(locks, order);
      suspended_ = true;
      // Registration done: from now on the select is claimable. acq_rel: publishes the
      // handle and suspended_ to a cancellation callback or timer that claims it (channel
      // operations see the nodes only through the locks released below). It fails only
      // if one of those claimed the select during the registration: then nothing waits,
      // and `expected` says which.
      std::uint32_t expected = SelectState::kRegistering;
      if (!state_.winner.compare_exchange_strong(expected, SelectState::kWaiting,
                                                 std::memory_order_acq_rel)) {
        suspended_ = false;
        removeAllLocked();
        chosen_ = expected;
        unlockAll(locks);
        return false;
      }
      unlockAll(locks);  // `locks` is on the native stack; `this` is not touched again
      return true;
    }
  }

  Result await_resume() {
    callback_.reset();  // waits for a callback running on another thread
    disarmTimer();      // likewise for a timer
    if (suspended_) {
      suspended_ = false;  // resumed: nothing is left for the destructor to withdraw
      cleanup();
      // acquire: pairs with the claim (acq_rel); the resumption already orders it.
      chosen_ = state_.winner.load(std::memory_order_acquire);
    }
    if (chosen_ == SelectState::kCancelled) throw OperationCancelled();
    if constexpr (kTimeouts != 0) {
      const SelectTimer& timer = timer_;
      if (chosen_ == timeoutIndex() && timer.shutDown) {
        throw ExecutorShutDown(executor_ != nullptr ? std::string(executor_->name())
                                                    : std::string("weft-timer"));
      }
    }
    return result(chosen_);
  }

 private:
  using Ops = std::tuple<SelectCaseOp<Cases>...>;
  using Indices = std::index_sequence_for<Cases...>;

  // Cancellation: registered before the channels are locked (a request made earlier
  // runs the callback right there). The callback claims the select like a channel
  // operation would, with kCancelled: a suspended select is resumed by it; one still
  // registering is only marked, and its registration (the CAS at the end of
  // await_suspend, or the check after locking) notices. A select that completes a case
  // at once ignores a concurrent request (the case completed first). False if
  // cancellation was already requested (the select must not run).
  bool armCancellation() {
    if (token_ == nullptr) return true;
    if (token_->isCancellationRequested()) {
      chosen_ = SelectState::kCancelled;
      return false;
    }
    if (token_->canBeCancelled()) callback_.emplace(*token_, [this] { cancel(); });
    return true;
  }
  void cancel() noexcept {
    if (state_.claimExternally(SelectState::kCancelled) ==
        SelectState::ExternalClaim::kWhileWaiting) {
      resumeSelectWaiter(&state_);  // `this` may be gone once this starts
    }
  }

  // The destructor of a select that suspended and was not resumed. It claims the select
  // itself, as cancellation would (after deregistering the callback, waiting for one
  // running on another thread): if that claim wins, nobody else can complete a case or
  // resume the coroutine, and every node still linked is unlinked (a channel operation
  // that meets one of the others drops it, as after any claim). If a case, the
  // cancellation or the timer claimed it first, its resumption is under way: reported
  // and fatal (abortDestroyedWhileResuming). noexcept: unlinking and reporting only.
  WEFT_NOINLINE void abandon() noexcept {
    suspended_ = false;
    callback_.reset();
    if (state_.claimExternally(SelectState::kCancelled) !=
        SelectState::ExternalClaim::kWhileWaiting) {
      abortDestroyedWhileResuming("select()");
    }
    disarmTimer();  // its fire function now loses every claim: it only finishes
    cleanup();
  }

  // The timeout case's timer: armed on the select's executor (or the process-wide timer
  // queue without one) before the channels are locked, only when a timeout case exists
  // and its deadline has not passed. When it fires it claims the select for the timeout
  // case like cancellation does. It is disarmed when the select finishes, however it
  // finishes; if it is firing right then, the select waits for its fire function to be
  // done with the awaiter (`timerFinished_`, set before it resumes anyone).
  struct SelectTimer : TimerEntry {
    SelectAwaiter* owner;
  };
  struct NoTimer {};

  void armTimer(SleepClock::time_point deadline) {
    SelectTimer& timer = timer_;
    timer.deadline = deadline;
    timer.complete = &SelectAwaiter::onTimer;
    timer.owner = this;
    detail::armTimer(executor_, timer);  // throws with nothing armed
    timerArmed_ = true;
  }
  // noexcept: a heap removal, then at most a short wait for a fire function in progress.
  void disarmTimer() noexcept {
    if constexpr (kTimeouts != 0) {
      if (!timerArmed_) return;
      timerArmed_ = false;
      SelectTimer& timer = timer_;
      if (!detail::disarmTimer(executor_, timer)) {
        // The timer fired. Its fire function may still be on its way to the executor's
        // queue of due timers, which only the executor's threads run -- and this thread may
        // be the only one free: keep trying to take it back (then it never runs) while
        // waiting for it to finish. acquire: pairs with the release in onTimer; after it,
        // the timer is done with us.
        while (!timerFinished_.load(std::memory_order_acquire)) {
          if (executor_ != nullptr && executor_->cancelTimer(timer)) break;
          std::this_thread::yield();
        }
      }
    }
  }
  // Runs on one of the executor's threads (ThreadPool) or on a timer thread; `run` is
  // false (and `shutDown` set) when the executor stops its timers early. noexcept:
  // resuming a weft coroutine does not throw.
  static void onTimer(Job* job, bool run) noexcept {
    auto* timer = static_cast<SelectTimer*>(job);
    SelectAwaiter* self = timer->owner;
    if (!run) timer->shutDown = true;
    const bool resume = self->state_.claimExternally(timeoutIndex()) ==
                        SelectState::ExternalClaim::kWhileWaiting;
    if (!resume) {
      // Not ours to resume: the select may still be registering (writing its handle), so
      // read nothing more of it. release: what this function wrote is visible to
      // disarmTimer() once it sees this; the select may be gone right after it.
      self->timerFinished_.store(true, std::memory_order_release);
      return;
    }
    // Claimed while waiting: the registration published the handle and executor.
    std::coroutine_handle<> handle = self->state_.handle;
    Executor* executor = self->state_.executor;
    // release: as above.
    self->timerFinished_.store(true, std::memory_order_release);
    // Like sleep(): inline when already on the executor (a ThreadPool runs expired timers
    // on its workers) or when there is none (on the timer thread); else scheduled. An
    // executor that refuses (shut down) has the select resume here, reporting
    // ExecutorShutDown.
    resumeAfterTimer(handle, executor, /*inlineOnExecutor=*/true, &timer->shutDown);
  }

  // Calls f(op) for the case at runtime index `index`.
  template <class F>
  decltype(auto) withCase(std::uint32_t index, F&& f) {
    return withCaseImpl(index, f, Indices{});
  }
  template <class F, std::size_t... I>
  void withCaseImpl(std::uint32_t index, F& f, std::index_sequence<I...>) {
    (void)((index == I ? (f(std::get<I>(ops_)), true) : false) || ...);
  }

  // f(op, index) for every channel case that is enabled (see ChannelReceiveCase::when).
  template <class F>
  void forEachChannelCase(F&& f) {
    forEachChannelCaseImpl(f, Indices{});
  }
  template <class F, std::size_t... I>
  void forEachChannelCaseImpl(F& f, std::index_sequence<I...>) {
    (
        [&] {
          using Op = std::tuple_element_t<I, Ops>;
          if constexpr (Op::kHasChannel) {
            if constexpr (Op::kCanBeDisabled) {
              if (!std::get<I>(ops_).enabled()) return;
            }
            f(std::get<I>(ops_), static_cast<std::uint32_t>(I));
          }
        }(),
        ...);
  }

  // The position of the case of type `Case` (called only when there is one).
  template <class Case>
  static constexpr std::uint32_t indexOf() noexcept {
    constexpr bool matches[] = {std::is_same_v<Cases, Case>...};
    std::uint32_t index = 0;
    while (!matches[index]) ++index;
    return index;
  }
  static constexpr std::uint32_t defaultIndex() noexcept { return indexOf<SelectDefaultCase>(); }
  static constexpr std::uint32_t timeoutIndex() noexcept { return indexOf<SelectTimeoutCase>(); }

  // The locks of the enabled channel cases, sorted by address (duplicates adjacent),
  // then nullptr for each disabled case.
  std::array<ChannelLock*, kChannelCases> channelLocks() {
    std::array<ChannelLock*, kChannelCases> locks{};
    std::size_t n = 0;
    forEachChannelCase([&](auto& op, std::uint32_t) {
      if (!kSwitchable || n < locks.size()) locks[n++] = op.lock();  // (see below)
    });
    for (std::size_t i = 1; i < n; ++i) {  // insertion sort: a handful of pointers
      for (std::size_t j = i; j > 0 && std::less<>()(locks[j], locks[j - 1]); --j) {
        std::swap(locks[j], locks[j - 1]);
      }
    }
    return locks;
  }
  static void lockAll(const std::array<ChannelLock*, kChannelCases>& locks) noexcept {
    for (std::size_t i = 0; i < kChannelCases && (!kSwitchable || locks[i] != nullptr); ++i) {
      if (i == 0 || locks[i] != locks[i - 1]) locks[i]->lock();
    }
  }
  static void unlockAll(const std::array<ChannelLock*, kChannelCases>& locks) noexcept {
    for (std::size_t i = 0; i < kChannelCases && (!kSwitchable || locks[i] != nullptr); ++i) {
      if (i == 0 || locks[i] != locks[i - 1]) locks[i]->unlock();
    }
  }

  // The indices of the enabled channel cases in a uniformly random order (Fisher-Yates),
  // then kNone for each disabled case.
  std::array<std::uint32_t, kChannelCases> shuffledChannelCases() {
    std::array<std::uint32_t, kChannelCases> order{};
    if constexpr (kSwitchable) order.fill(kNone);
    std::size_t n = 0;
    // (n < size() always holds; with switchable cases the test spares g++ a false
    // -Warray-bounds.)
    forEachChannelCase([&](auto&, std::uint32_t index) {
      if (!kSwitchable || n < order.size()) order[n++] = index;
    });
    if constexpr (kChannelCases > 1) {
      for (std::size_t i = n; i > 1; --i) {
        std::size_t j = static_cast<std::size_t>(selectRandom() % i);
        std::swap(order[i - 1], order[j]);
      }
    }
    return order;
  }

  ChannelOpResult tryCase(std::uint32_t index, ChannelWaiter*& wake) {
    ChannelOpResult outcome = ChannelOpResult::kBlocked;
    withCase(index, [&](auto& op) {
      if constexpr (std::remove_reference_t<decltype(op)>::kHasChannel) {
        outcome = op.tryLocked(wake);
      }
    });
    return outcome;
  }
  void setClosed(std::uint32_t index) noexcept {
    withCase(index, [](auto& op) {
      if constexpr (std::remove_reference_t<decltype(op)>::kHasChannel) op.setClosed();
    });
  }
  // Links one node per channel case. When several cases share a channel, in the random
  // order `order` (a permutation of the channel cases), so that they are queued on it in
  // a random order and a waiting select is completed through each of them equally often
  // (Go's selectgo links its cases in an order derived from its random poll order for
  // the same reason). Otherwise the order does not matter, and the cases are linked in
  // argument order, without dispatching on a run-time index.
  void enqueueAll(const std::array<ChannelLock*, kChannelCases>& locks,
                  const std::array<std::uint32_t, kChannelCases>& order) noexcept {
    bool sharedChannel = false;
    for (std::size_t i = 1; i < kChannelCases && (!kSwitchable || locks[i] != nullptr); ++i) {
      sharedChannel |= locks[i] == locks[i - 1];
    }
    if (sharedChannel) [[unlikely]] {
      enqueueInOrder(order);
      return;
    }
    forEachChannelCase([&](auto& op, std::uint32_t index) { op.enqueueLocked(&state_, index); });
  }
  // Out of line: the rare case, kept off the inlined registration.
  WEFT_NOINLINE void enqueueInOrder(
      const std::array<std::uint32_t, kChannelCases>& order) noexcept {
    for (std::uint32_t index : order) {
      if (kSwitchable && index == kNone) break;  // the rest are disabled
      withCase(index, [&](auto& op) {
        if constexpr (std::remove_reference_t<decltype(op)>::kHasChannel) {
          op.enqueueLocked(&state_, index);
        }
      });
    }
  }
  void removeAllLocked() noexcept {
    forEachChannelCase([](auto& op, std::uint32_t) { op.removeLocked(); });
  }
  // Unlinks every node still linked (all but the winner's, unless another channel
  // operation dropped them already), one channel lock at a time.
  void cleanup() noexcept {
    forEachChannelCase([](auto& op, std::uint32_t) {
      ChannelLockGuard guard(*op.lock());
      op.removeLocked();
    });
  }

  Result result(std::uint32_t index) {
    return resultImpl(index, Indices{});
  }
  template <std::size_t... I>
  Result resultImpl(std::uint32_t index, std::index_sequence<I...>) {
    std::optional<Result> out;
    (void)((index == I ? (out.emplace(std::in_place_index<I>, std::get<I>(ops_).result()), true)
                       : false) ||
           ...);
    return std::move(*out);
  }

  Ops ops_;
  SelectState state_;
  Executor* executor_;
  const CancellationToken* token_;  // null: not cancellable
  OutOfLineCancellationCallback callback_;
  [[no_unique_address]] std::conditional_t<kTimeouts != 0, SelectTimer, NoTimer> timer_;
  std::atomic<bool> timerFinished_{false};
  bool timerArmed_ = false;
  std::uint32_t chosen_ = kNone;
  bool suspended_ = false;
};

template <class... Cases>
class [[nodiscard]] SelectAwaitable {
 public:
  explicit SelectAwaitable(Cases&&... cases) : cases_(std::move(cases)...) {}

  // Used by weft coroutines' await_transform and by fibers' await().
  SelectAwaiter<Cases...> coAwait(Executor* executor, const CancellationToken& token) && {
    return make(executor, cancellableOrNull(token));
  }
  SelectAwaiter<Cases...> coAwait(Executor* executor) && { return make(executor, nullptr); }
  SelectAwaiter<Cases...> operator co_await() && { return make(nullptr, nullptr); }

 private:
  SelectAwaiter<Cases...> make(Executor* executor, const CancellationToken* token) {
    return std::apply(
        [&](Cases&... cases) {
          return SelectAwaiter<Cases...>(executor, token, std::move(cases)...);
        },
        cases_);
  }

  std::tuple<Cases...> cases_;
};


}  // namespace weft::detail
