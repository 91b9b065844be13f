#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "coro/cancellation.h"
#include "coro/channel.h"
#include "coro/detail/channel_core.h"
#include "coro/detail/channel_waiter.h"
#include "executors/executor.h"

namespace weft {

namespace detail {

// The `default:` of a Go select: chosen when no other case is ready.
struct SelectDefaultCase {};

// One case of a select while it runs: how to try it under its channel's lock, how to
// link and unlink its node, and what it produces. Specialised per case kind.
template <class Case>
class SelectCaseOp;

template <class T>
class SelectCaseOp<ChannelReceiveCase<T>> {
 public:
  using Result = std::optional<T>;  // empty: the channel is closed and drained
  static constexpr bool kHasChannel = true;

  explicit SelectCaseOp(ChannelReceiveCase<T>&& c) noexcept : channel_(c.channel) {}

  ChannelLock* lock() const noexcept { return &channel_->lock(); }
  ChannelOpResult tryLocked(ChannelWaiter*& wake) noexcept {
    return channel_->tryReceiveLocked(value_, wake);
  }
  void enqueueLocked(SelectState* select, std::uint32_t index) noexcept {
    node_.slot = &value_;
    node_.select = select;
    node_.caseIndex = index;
    channel_->enqueueReceiverLocked(&node_);
  }
  void removeLocked() noexcept { channel_->removeReceiverLocked(&node_); }
  void setClosed() noexcept {}
  Result result() noexcept { return std::move(value_); }

 private:
  ChannelCore<T>* channel_;
  ChannelWaiter node_;
  std::optional<T> value_;
};

template <class T>
class SelectCaseOp<ChannelSendCase<T>> {
 public:
  using Result = std::monostate;
  static constexpr bool kHasChannel = true;

  explicit SelectCaseOp(ChannelSendCase<T>&& c) noexcept(std::is_nothrow_move_constructible_v<T>)
      : case_(std::move(c)) {}

  ChannelLock* lock() const noexcept { return &case_.channel->lock(); }
  ChannelOpResult tryLocked(ChannelWaiter*& wake) {
    return case_.channel->trySendLocked(*case_.value(), wake);
  }
  void enqueueLocked(SelectState* select, std::uint32_t index) noexcept {
    node_.slot = case_.value();
    node_.select = select;
    node_.caseIndex = index;
    case_.channel->enqueueSenderLocked(&node_);
  }
  void removeLocked() noexcept { case_.channel->removeSenderLocked(&node_); }
  void setClosed() noexcept { node_.status = WaiterStatus::kClosed; }
  // Go panics when a select sends on a closed channel; weft throws.
  Result result() const {
    if (node_.status == WaiterStatus::kClosed) throwSendOnClosed();
    return {};
  }

 private:
  ChannelSendCase<T> case_;
  ChannelWaiter node_;
};

template <>
class SelectCaseOp<SelectDefaultCase> {
 public:
  using Result = std::monostate;
  static constexpr bool kHasChannel = false;
  explicit SelectCaseOp(SelectDefaultCase) noexcept {}
  Result result() const noexcept { return {}; }
};

// A per-thread xorshift64* generator: select's fair choice among ready cases needs
// cheap randomness, not quality.
inline std::uint64_t selectRandom() noexcept {
  static constinit thread_local std::uint64_t state = 0;
  if (state == 0) [[unlikely]] {
    state = (reinterpret_cast<std::uintptr_t>(&state) * 0x9E3779B97F4A7C15ull) ^
            static_cast<std::uint64_t>(
                std::chrono::steady_clock::now().time_since_epoch().count()) ^
            1u;
  }
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

// The awaiter of `co_await select(cases...)`. See select() below for the semantics and
// this protocol, which follows Go's runtime (selectgo):
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
  static constexpr std::size_t kChannelCases =
      (std::size_t{0} + ... + std::size_t{SelectCaseOp<Cases>::kHasChannel});
  static_assert(kCases > 0, "weft::select() needs at least one case");
  static_assert(kDefaults <= 1, "weft::select(): at most one defaultCase()");
  static_assert(kCases < SelectState::kCancelled, "weft::select(): too many cases");

  static constexpr std::uint32_t kNone = SelectState::kRegistering;

 public:
  using Result = std::variant<typename SelectCaseOp<Cases>::Result...>;

  SelectAwaiter(Executor* executor, const CancellationToken* token, Cases&&... cases)
      : ops_(SelectCaseOp<Cases>(std::move(cases))...), executor_(executor), token_(token) {}
  SelectAwaiter(const SelectAwaiter&) = delete;
  SelectAwaiter& operator=(const SelectAwaiter&) = delete;

  bool await_ready() const noexcept { return false; }

  // Throws what a chosen send case's channel throws under its lock (std::bad_alloc from
  // an unbounded channel that cannot grow): nothing was sent then.
  bool await_suspend(std::coroutine_handle<> awaiting) {
    if (!armCancellation()) return false;
    std::array<ChannelLock*, kChannelCases> locks = channelLocks();
    lockAll(locks);
    // relaxed: a cancellation that flipped the state is seen through the callback's own
    // synchronisation (it ran in armCancellation, or its CAS is ordered by the one below).
    if (state_.winner.load(std::memory_order_relaxed) == SelectState::kCancelled) {
      chosen_ = SelectState::kCancelled;
      unlockAll(locks);
      return false;
    }
    std::array<std::uint32_t, kChannelCases> order = shuffledChannelCases();
    for (std::uint32_t index : order) {
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
        if (wake != nullptr) resumeChannelWaiter(wake);
        return false;
      }
    }
    if constexpr (kDefaults != 0) {
      chosen_ = defaultIndex();
      unlockAll(locks);
      return false;
    } else {
      state_.handle = awaiting;
      state_.executor = executor_;
      enqueueAll();
      suspended_ = true;
      // Registration done: from now on the select is claimable. acq_rel: publishes the
      // handle and suspended_ to a cancellation callback that claims it (channel
      // operations see the nodes only through the locks released below). It fails only
      // if cancellation was requested during the registration: then nothing waits.
      std::uint32_t expected = SelectState::kRegistering;
      if (!state_.winner.compare_exchange_strong(expected, SelectState::kWaiting,
                                                 std::memory_order_acq_rel)) {
        suspended_ = false;
        removeAllLocked();
        chosen_ = SelectState::kCancelled;
        unlockAll(locks);
        return false;
      }
      unlockAll(locks);  // `locks` is on the native stack; `this` is not touched again
      return true;
    }
  }

  Result await_resume() {
    callback_.reset();  // waits for a callback running on another thread
    if (suspended_) {
      cleanup();
      // acquire: pairs with the claim (acq_rel); the resumption already orders it.
      chosen_ = state_.winner.load(std::memory_order_acquire);
    }
    if (chosen_ == SelectState::kCancelled) throw OperationCancelled();
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
    std::uint32_t state = state_.winner.load(std::memory_order_acquire);
    for (;;) {
      if (state == SelectState::kWaiting) {
        if (state_.winner.compare_exchange_weak(state, SelectState::kCancelled,
                                                std::memory_order_acq_rel)) {
          resumeSelectWaiter(&state_);  // `this` may be gone once this starts
          return;
        }
      } else if (state == SelectState::kRegistering) {
        if (state_.winner.compare_exchange_weak(state, SelectState::kCancelled,
                                                std::memory_order_acq_rel)) {
          return;
        }
      } else {
        return;  // a case completed first (or cancelled already)
      }
    }
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

  // f(op, index) for every case that has a channel.
  template <class F>
  void forEachChannelCase(F&& f) {
    forEachChannelCaseImpl(f, Indices{});
  }
  template <class F, std::size_t... I>
  void forEachChannelCaseImpl(F& f, std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (std::tuple_element_t<I, Ops>::kHasChannel) {
            f(std::get<I>(ops_), static_cast<std::uint32_t>(I));
          }
        }(),
        ...);
  }

  static constexpr std::uint32_t defaultIndex() noexcept {
    constexpr bool isDefault[] = {std::is_same_v<Cases, SelectDefaultCase>...};
    std::uint32_t index = 0;
    while (!isDefault[index]) ++index;
    return index;
  }

  // The channel locks, sorted by address (duplicates adjacent).
  std::array<ChannelLock*, kChannelCases> channelLocks() {
    std::array<ChannelLock*, kChannelCases> locks{};
    std::size_t n = 0;
    forEachChannelCase([&](auto& op, std::uint32_t) { locks[n++] = op.lock(); });
    for (std::size_t i = 1; i < n; ++i) {  // insertion sort: a handful of pointers
      for (std::size_t j = i; j > 0 && std::less<>()(locks[j], locks[j - 1]); --j) {
        std::swap(locks[j], locks[j - 1]);
      }
    }
    return locks;
  }
  static void lockAll(const std::array<ChannelLock*, kChannelCases>& locks) noexcept {
    for (std::size_t i = 0; i < kChannelCases; ++i) {
      if (i == 0 || locks[i] != locks[i - 1]) locks[i]->lock();
    }
  }
  static void unlockAll(const std::array<ChannelLock*, kChannelCases>& locks) noexcept {
    for (std::size_t i = 0; i < kChannelCases; ++i) {
      if (i == 0 || locks[i] != locks[i - 1]) locks[i]->unlock();
    }
  }

  // The indices of the channel cases in a uniformly random order (Fisher-Yates).
  std::array<std::uint32_t, kChannelCases> shuffledChannelCases() {
    std::array<std::uint32_t, kChannelCases> order{};
    std::size_t n = 0;
    forEachChannelCase([&](auto&, std::uint32_t index) { order[n++] = index; });
    for (std::size_t i = n; i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(selectRandom() % i);
      std::swap(order[i - 1], order[j]);
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
  void enqueueAll() noexcept {
    forEachChannelCase([&](auto& op, std::uint32_t index) { op.enqueueLocked(&state_, index); });
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

template <class Case>
inline constexpr bool kIsSelectCase = false;
template <class T>
inline constexpr bool kIsSelectCase<ChannelReceiveCase<T>> = true;
template <class T>
inline constexpr bool kIsSelectCase<ChannelSendCase<T>> = true;
template <>
inline constexpr bool kIsSelectCase<SelectDefaultCase> = true;

}  // namespace detail

// defaultCase(): the `default:` of a Go select, making it a non-blocking poll: chosen
// (its result is std::monostate) when no other case can complete at once.
inline detail::SelectDefaultCase defaultCase() noexcept { return {}; }

// select(cases...): waits until one of several channel operations can complete,
// completes exactly that one, and returns which it was, like Go's `select`.
//
//   auto r = co_await weft::select(in.receiveCase(), out.sendCase(v), weft::defaultCase());
//   switch (r.index()) {
//     case 0: if (std::optional<int>& v = std::get<0>(r)) use(*v); else /* in closed */;
//             break;
//     case 1: /* v was sent on out */ break;
//     case 2: /* nothing was ready */ break;
//   }
//
// Cases: ch.receiveCase() (Go `case v, ok := <-ch`), ch.sendCase(v) (Go `case ch <- v`)
// and defaultCase() (Go `default`), in any order and mix of element types; the result
// is a std::variant whose index() is the position of the chosen case and whose
// alternative holds its result: std::optional<T> for a receive (empty when the channel
// is closed and drained), std::monostate for a send or the default.
//
// Semantics (Go's):
//  - If one or more cases can complete at once, one of them is chosen uniformly at
//    random (so no channel starves another), and the select does not suspend.
//  - Otherwise, with a default case, the default is chosen at once. Without, the select
//    waits until some case can complete, completes that one, and abandons the others.
//  - Exactly one case completes. A receive case that is not chosen takes no value from
//    its channel; a send case that is not chosen sends nothing (an rvalue given to
//    sendCase() is then not moved from).
//  - A receive case on a closed, drained channel is always ready (with an empty
//    optional), as in Go. A chosen send case on a closed channel throws ChannelClosed
//    (Go panics).
//  - The same channel may appear in several cases, in either direction. A select never
//    pairs with itself (its own send and receive on one unbuffered channel do not meet).
//  - A waiting select that belongs to an executor is resumed through it, like every
//    channel operation (coro/channel.h).
//
// Preconditions: every channel outlives the co_await; the cases are made inside the
// select(...) expression (they refer to the values given to sendCase()). At most one
// defaultCase().
// Errors: ChannelClosed as above; std::bad_alloc if a chosen send case's unbounded
// channel cannot grow. When the select throws, no case completed.
// Thread safety: channels in a select may be used by any number of other threads and
// selects at the same time.
template <class... Cases>
  requires(detail::kIsSelectCase<std::remove_cvref_t<Cases>> && ...)
detail::SelectAwaitable<std::remove_cvref_t<Cases>...> select(Cases&&... cases) {
  return detail::SelectAwaitable<std::remove_cvref_t<Cases>...>(
      std::remove_cvref_t<Cases>(std::forward<Cases>(cases))...);
}

}  // namespace weft
