#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/detail/channel_core.h"
#include "weft/coro/detail/channel_waiter.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/via_awaiter.h"
#include "weft/executors/executor.h"

namespace weft {

namespace detail {

// What the send and receive awaiters share: the waiter node linked into the channel
// while the operation waits, and cancellation.
//
// The operation is tried in await_ready, so that one that can complete at once (a
// receiver waits, the buffer has room or a value) never suspends: for a fiber, that is
// an await with no switch at all. When it must wait, await_ready returns false with the
// channel lock still held, and await_suspend (which always follows) links the node and
// releases it: nothing can change in between, so the attempt is not repeated. (If the
// await is abandoned in between, as when a fiber being destroyed cannot park, the
// awaiter's destructor releases the lock.)
//
// Cancellation follows the protocol of every waiter (coro/detail/waiter_queue.h), the
// node's status deciding under the channel lock who completes the operation. Step 1
// happens in await_ready, before the channel lock is taken and before the operation is
// tried: cancellation requested before that marks the node kCancelled at once, and
// await_ready returns without performing the operation or suspending.
template <class T, bool kSender>
class ChannelOpAwaiter {
 public:
  ChannelOpAwaiter(ChannelCore<T>& channel, Executor* executor,
                   const CancellationToken* token) noexcept
      : channel_(&channel), token_(token) {
    node_.executor = executor;
  }
  // Made with an executor, a waiter is resumed only by scheduling it there (see
  // resumeWaiter), never by await_suspend: a fiber on ThreadPool(1) may act on
  // its park before it switches out (stackful/detail/fiber_park.h).
  static constexpr bool kResumesOnlyThroughExecutor = true;

  ChannelOpAwaiter(const ChannelOpAwaiter&) = delete;
  ChannelOpAwaiter& operator=(const ChannelOpAwaiter&) = delete;
  // Releases the channel lock if await_ready left it held and no await_suspend followed
  // (the await was abandoned, or trying the operation threw). Destroyed while suspended
  // (its coroutine destroyed, or its fiber unwound, while it waits): withdraws the wait,
  // so the channel never sees the node again and nothing was transferred (see
  // withdraw()). `node_.handle` is set by await_suspend and cleared by await_resume, so
  // it is non-null here only for an operation that suspended and was not resumed.
  [[gnu::always_inline]] ~ChannelOpAwaiter() {
    if (heldLock_ != nullptr) [[unlikely]]
      releaseHeldLock();
    if (node_.handle) [[unlikely]]
      withdraw();
  }

  // Links the node and suspends: the operation could not complete in await_ready, which
  // left the channel lock held. noexcept: two links and an unlock.
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> awaiting) noexcept {
    node_.setAwaiting(awaiting);
    if constexpr (kSender) {
      channel_->enqueueSenderLocked(&node_);
    } else {
      channel_->enqueueReceiverLocked(&node_);
    }
    // From the unlock on, the other side may resume us on another thread and the
    // awaiter may be gone: releaseHeldLock touches nothing of it after the unlock.
    releaseHeldLock();
  }

  // For task dumps (coro/detail/wait_note.h).
  void describeWait(std::string& out) const {
    appendWait(out, kSender ? "Channel::send" : "Channel::receive", channel_);
  }

 protected:
  // await_ready's work: tries the operation on its operand `slot` (a sender's T*, a
  // receiver's std::optional<T>*). True when it completed, found the channel closed, or
  // was cancelled before it started (await_resume tells which); false with the lock held
  // when it must wait. Throws std::bad_alloc (registering cancellation, growing an
  // unbounded channel; nothing happened then). Forced inline: it is the whole of
  // await_ready, on every channel operation's path.
  [[gnu::always_inline]] bool tryAtOnce(void* slot) {
    if (token_ != nullptr && !armCancellation()) return true;
    ChannelLock& lock = channel_->lock();
    lock.lock();
    heldLock_ = &lock;  // released by the destructor if the operation throws
    if (node_.status == WaiterStatus::kCancelled) [[unlikely]] {
      releaseHeldLock();
      return true;
    }
    ChannelWaiter* wake = nullptr;
    ChannelOpResult result;
    if constexpr (kSender) {
      result = channel_->trySendLocked(*static_cast<T*>(slot), wake);
    } else {
      result = channel_->tryReceiveLocked(*static_cast<std::optional<T>*>(slot), wake);
    }
    if (result == ChannelOpResult::kBlocked) {
      node_.slot = slot;
      return false;  // the lock stays held for await_suspend
    }
    // A cancellation callback running later leaves a kDone or kClosed node alone.
    node_.status = result == ChannelOpResult::kDone ? WaiterStatus::kDone : WaiterStatus::kClosed;
    releaseHeldLock();
    if (wake != nullptr) resumeWaiter(wake);
    return true;
  }

  // Takes the held channel lock out of the awaiter, then releases it: nothing of the
  // awaiter is touched after the unlock (once await_suspend has linked the node, the
  // awaiter may be gone by then).
  void releaseHeldLock() noexcept { std::exchange(heldLock_, nullptr)->unlock(); }

  // Step 1 (token_ is not null); false if cancellation was requested before the
  // operation started (the operation must then not run). Throws std::bad_alloc if the
  // registration's block cannot be allocated (before anything is linked).
  bool armCancellation() {
    if (token_->isCancellationRequested()) {
      node_.status = WaiterStatus::kCancelled;
      return false;
    }
    if (token_->canBeCancelled()) callback_.emplace(*token_, [this] { cancel(); });
    return true;
  }

  // Step 3, first half. noexcept: deregistration only unlinks (or waits). Also forgets
  // the handle: the operation has been resumed, nothing is left to withdraw.
  void disarmCancellation() noexcept {
    callback_.reset();
    node_.handle = {};
  }

  // The destructor of a suspended operation: deregisters cancellation (waiting for a
  // callback running on another thread), then, under the channel lock, unlinks the node
  // if it is still queued. A node that is no longer queued was claimed (a value moved,
  // the channel closed, a cancellation taken) and its resumption is under way: that
  // destruction is the caller's race, reported and fatal (abortDestroyedWhileResuming).
  // noexcept: unlinking and reporting only. Out of line: rare.
  WEFT_NOINLINE void withdraw() noexcept {
    callback_.reset();
    {
      ChannelLockGuard guard(channel_->lock());
      const bool unlinked = kSender ? channel_->removeSenderLocked(&node_)
                                    : channel_->removeReceiverLocked(&node_);
      if (unlinked) return;
    }
    abortDestroyedWhileResuming(kSender ? "Channel::send()" : "Channel::receive()");
  }

  // Step 2. Runs on the thread that requested cancellation; never throws.
  void cancel() noexcept {
    ChannelLockGuard guard(channel_->lock());
    const bool unlinked = kSender ? channel_->cancelSenderLocked(&node_)
                                  : channel_->cancelReceiverLocked(&node_);
    if (!unlinked) return;  // not queued yet (now marked), or already completed
    guard.unlock();
    resumeWaiter(&node_);  // `this` may be gone once this starts
  }

  void throwIfCancelled() const {
    if (node_.status == WaiterStatus::kCancelled) throw OperationCancelled();
  }

  ChannelCore<T>* channel_;
  const CancellationToken* token_;  // null: not cancellable
  ChannelWaiter node_;
  OutOfLineCancellationCallback callback_;
  // The channel lock while this awaiter holds it: from a blocked await_ready to
  // await_suspend. A raw pointer, not a std::unique_lock: nothing to test or call on
  // the paths where it is not held.
  ChannelLock* heldLock_ = nullptr;
};

// The awaiter of `co_await ch.send(v)`: sends at once when a receiver waits or the
// buffer has room, else links its node into the channel and suspends until a receiver
// takes the value, the channel is closed, or the send is cancelled.
template <class T>
class ChannelSendAwaiter : public ChannelOpAwaiter<T, true> {
  using Base = ChannelOpAwaiter<T, true>;

 public:
  ChannelSendAwaiter(ChannelCore<T>& channel, T* value, Executor* executor,
                     const CancellationToken* token) noexcept
      : Base(channel, executor, token), value_(value) {}

  // True (no suspension) when the send completed, failed or was cancelled at once; see
  // ChannelOpAwaiter. Throws std::bad_alloc if an unbounded channel cannot grow (nothing
  // sent). Forced inline, as tryAtOnce: an out-of-line call costs a full register save.
  [[gnu::always_inline]] bool await_ready() { return this->tryAtOnce(value_); }

  void await_resume() {
    this->disarmCancellation();
    this->throwIfCancelled();
    if (this->node_.status == WaiterStatus::kClosed) throwSendOnClosed();
  }

 private:
  T* value_;
};

// The awaiter of `co_await ch.receive()`.
template <class T>
class ChannelReceiveAwaiter : public ChannelOpAwaiter<T, false> {
  using Base = ChannelOpAwaiter<T, false>;

 public:
  ChannelReceiveAwaiter(ChannelCore<T>& channel, Executor* executor,
                        const CancellationToken* token) noexcept
      : Base(channel, executor, token) {}

  // See ChannelSendAwaiter::await_ready.
  [[gnu::always_inline]] bool await_ready() { return this->tryAtOnce(&value_); }

  std::optional<T> await_resume() {
    this->disarmCancellation();
    this->throwIfCancelled();
    return std::move(value_);
  }

 private:
  std::optional<T> value_;
};

// The token a cancellation-aware coAwait hands an awaiter: null when it can never be
// cancelled, so the awaiter skips every cancellation step.
inline const CancellationToken* cancellableOrNull(const CancellationToken& token) noexcept {
  return token.canBeCancelled() ? &token : nullptr;
}

// What ch.send(v) returns. An rvalue is borrowed (moved from only if it is delivered);
// an lvalue is copied when send() is called. Either lives until the end of the full
// expression `co_await ch.send(v)`, which is how long the awaiter uses it.
template <class T>
class [[nodiscard]] ChannelSendAwaitable {
 public:
  ChannelSendAwaitable(ChannelCore<T>& channel, T&& value) noexcept
      : channel_(&channel), borrowed_(&value) {}
  ChannelSendAwaitable(ChannelCore<T>& channel, const T& value)
      : channel_(&channel), borrowed_(nullptr), copy_(value) {}

  // Used by weft coroutines' await_transform and by fibers' await(): the awaiting
  // coroutine's executor and cancellation token.
  ChannelSendAwaiter<T> coAwait(Executor* executor, const CancellationToken& token) && noexcept {
    return ChannelSendAwaiter<T>(*channel_, value(), executor, cancellableOrNull(token));
  }
  ChannelSendAwaiter<T> coAwait(Executor* executor) && noexcept {
    return ChannelSendAwaiter<T>(*channel_, value(), executor, nullptr);
  }
  // For coroutines that are not weft's: resumed inline on the thread that completes it.
  ChannelSendAwaiter<T> operator co_await() && noexcept {
    return std::move(*this).coAwait(nullptr);
  }

 private:
  T* value() noexcept { return borrowed_ != nullptr ? borrowed_ : &*copy_; }

  ChannelCore<T>* channel_;
  T* borrowed_;
  std::optional<T> copy_;
};

template <class T>
class [[nodiscard]] ChannelReceiveAwaitable {
 public:
  explicit ChannelReceiveAwaitable(ChannelCore<T>& channel) noexcept : channel_(&channel) {}

  ChannelReceiveAwaiter<T> coAwait(Executor* executor, const CancellationToken& token) && noexcept {
    return ChannelReceiveAwaiter<T>(*channel_, executor, cancellableOrNull(token));
  }
  ChannelReceiveAwaiter<T> coAwait(Executor* executor) && noexcept {
    return ChannelReceiveAwaiter<T>(*channel_, executor, nullptr);
  }
  ChannelReceiveAwaiter<T> operator co_await() && noexcept {
    return std::move(*this).coAwait(nullptr);
  }

 private:
  ChannelCore<T>* channel_;
};

// select() cases made by Channel::receiveCase()/sendCase() (see coro/select.h).
// `.when(false)` disables a case for this select (Go's nil-channel idiom): it is never
// polled, linked or chosen. kSwitchable marks a case made by when(): only such cases pay
// for the check, a select of plain cases compiles as if when() did not exist.
// Whether a select case made by when() is on; empty (always on) for the other cases.
template <bool kSwitchable>
struct CaseSwitch {
  bool on = true;
};
template <>
struct CaseSwitch<false> {
  static constexpr bool on = true;
};

template <class T, bool kSwitchable = false>
struct ChannelReceiveCase {
  ChannelCore<T>* channel;
  [[no_unique_address]] CaseSwitch<kSwitchable> enabled{};

  ChannelReceiveCase<T, true> when(bool on) && noexcept { return {channel, {on}}; }
};
template <class T, bool kSwitchable = false>
struct ChannelSendCase {
  ChannelSendCase(ChannelCore<T>& c, T&& value) noexcept : channel(&c), borrowed(&value) {}
  ChannelSendCase(ChannelCore<T>& c, const T& value)
      : channel(&c), borrowed(nullptr), copy(value) {}
  T* value() noexcept { return borrowed != nullptr ? borrowed : &*copy; }

  ChannelSendCase<T, true> when(bool on) && noexcept(std::is_nothrow_move_constructible_v<T>) {
    ChannelSendCase<T, true> switchable(std::move(*this));
    switchable.enabled.on = on;
    return switchable;
  }

  ChannelCore<T>* channel;
  T* borrowed;
  std::optional<T> copy;
  [[no_unique_address]] CaseSwitch<kSwitchable> enabled{};

 private:
  friend struct ChannelSendCase<T, !kSwitchable>;
  explicit ChannelSendCase(ChannelSendCase<T, !kSwitchable>&& other) noexcept(
      std::is_nothrow_move_constructible_v<T>)
      : channel(other.channel), borrowed(other.borrowed), copy(std::move(other.copy)) {}
};

}  // namespace detail

// Channel<T>: a Go channel for weft: a queue through which coroutines and fibers hand
// each other values of type T, waiting when there is nothing to take or no room.
//
// Semantics (Go's, one for one):
//  - Channel<T>(0), the default, is unbuffered: a send completes only when a receiver
//    takes its value (rendezvous). Channel<T>(n) buffers up to n values: a send waits
//    only while the buffer is full. Channel<T>(Channel<T>::kUnbounded) never makes a
//    sender wait (its buffer grows as needed).
//  - `co_await ch.send(v)` delivers v; `co_await ch.receive()` returns the next value as
//    a std::optional<T>, or an empty optional once the channel is closed and every
//    buffered value has been received (Go's `v, ok := <-ch`). Values are received in
//    the order they were sent; waiting senders and receivers are served first come,
//    first served.
//  - close() marks the end of the stream: waiting receivers get an empty optional (after
//    the buffer drains), waiting senders throw ChannelClosed, as do later sends.
//  - trySend / tryReceive never wait (a select with a default case, for one channel).
//  - A waiter that belongs to an executor (a Task, a Lazy inside one, a fiber) is
//    resumed through that executor, never inline on the stack of the coroutine that
//    completed its operation; a Lazy with no executor is resumed inline on the thread
//    that completed it (through a per-thread trampoline, so chains of such wake-ups do
//    not grow the stack). A blocked operation allocates nothing: its queue node lives in
//    the awaiter.
//  - send and receive are cancellable through the awaiting coroutine's (or fiber's)
//    cancellation token: requested before the operation, or while it waits, it throws
//    OperationCancelled having transferred nothing; an operation that completed first
//    completes normally.
//  - select() (coro/select.h) waits on several channel operations and completes one.
//
// Preconditions: T is an object type whose move constructor and destructor do not throw
// (a channel moves values while holding its lock). The channel outlives every operation
// on it; destroying it while something waits on it prints a message and aborts.
// Destroying a coroutine suspended in send or receive (or unwinding a fiber parked there)
// withdraws the operation: nothing was transferred. Once the other side has completed
// the operation, its resumption is under way and cannot be withdrawn: destroying it then
// prints a message and aborts (docs/concurrency.md, "Destroying a suspended coroutine").
//
// Errors: ChannelClosed from a send on a closed channel (nothing was delivered; an rvalue
// passed to send() was not moved from) and from close() on a closed channel.
// OperationCancelled from a cancelled send or receive (as above). std::bad_alloc from a
// send on an unbounded channel whose buffer cannot grow, or from copying an lvalue into
// send().
//
// Thread safety: every member may be called concurrently from any thread; values and
// their side effects before a send happen-before the matching receive returns.
//
// Example (Go's `for v := range ch`):
//   weft::Channel<int> ch(16);
//   co_await ch.send(42);                              // producer
//   while (std::optional<int> v = co_await ch.receive()) use(*v);  // consumer
//   ch.close();                                        // ends the consumer's loop
template <class T>
class Channel {
  static_assert(std::is_object_v<T> && !std::is_array_v<T> && !std::is_const_v<T>,
                "weft::Channel<T>: T must be a non-const object type (not a reference or an "
                "array)");
  static_assert(std::is_nothrow_move_constructible_v<T> && std::is_nothrow_destructible_v<T>,
                "weft::Channel<T>: T's move constructor and destructor must be noexcept (wrap "
                "the value in a std::unique_ptr otherwise)");

 public:
  using ValueType = T;
  // Capacity of a channel whose sends never wait.
  static constexpr std::size_t kUnbounded = detail::ChannelCore<T>::kUnbounded;

  // An unbuffered channel (capacity 0), or one buffering `capacity` values, or
  // kUnbounded. Throws std::bad_alloc if the buffer cannot be allocated.
  explicit Channel(std::size_t capacity = 0) : core_(capacity) {}
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  // Precondition: nothing waits on the channel (else abort with a message). Buffered
  // values are destroyed.
  ~Channel() = default;

  // `co_await ch.send(value)`: delivers a copy of `value` (an lvalue) or `value` itself
  // (an rvalue, moved from only when delivered), waiting while no receiver is ready and
  // the buffer is full. Throws ChannelClosed if the channel is or gets closed first.
  detail::ChannelSendAwaitable<T> send(const T& value) {
    return detail::ChannelSendAwaitable<T>(core_, value);
  }
  detail::ChannelSendAwaitable<T> send(T&& value) noexcept {
    return detail::ChannelSendAwaitable<T>(core_, std::move(value));
  }

  // `co_await ch.receive()`: the next value, waiting until one is sent; an empty
  // optional once the channel is closed and drained. Never throws.
  detail::ChannelReceiveAwaitable<T> receive() noexcept {
    return detail::ChannelReceiveAwaitable<T>(core_);
  }

  // Sends without waiting: true if `value` was delivered to a waiting receiver or
  // buffered, false (value untouched) if the send would have to wait. Throws
  // ChannelClosed on a closed channel, std::bad_alloc as send().
  bool trySend(T&& value) {
    detail::ChannelWaiter* wake = nullptr;
    detail::ChannelLockGuard guard(core_.lock());
    switch (core_.trySendLocked(value, wake)) {
      case detail::ChannelOpResult::kDone:
        guard.unlock();
        if (wake != nullptr) detail::resumeWaiter(wake);
        return true;
      case detail::ChannelOpResult::kClosed:
        guard.unlock();
        detail::throwSendOnClosed();
      case detail::ChannelOpResult::kBlocked:
        break;
    }
    return false;
  }
  bool trySend(const T& value) {
    T copy(value);
    return trySend(std::move(copy));
  }

  // Receives without waiting: the next value if one is buffered or a sender waits;
  // otherwise an empty optional (nothing ready, or closed and drained: isClosed() tells
  // which). Never throws.
  std::optional<T> tryReceive() noexcept {
    std::optional<T> value;
    detail::ChannelWaiter* wake = nullptr;
    detail::ChannelLockGuard guard(core_.lock());
    if (core_.tryReceiveLocked(value, wake) == detail::ChannelOpResult::kDone) {
      guard.unlock();
      if (wake != nullptr) detail::resumeWaiter(wake);
    }
    return value;
  }

  // Closes the channel (see the class comment): wakes every waiter. Throws ChannelClosed
  // if it was already closed (Go's "close of closed channel").
  void close() {
    detail::WaiterList<detail::ChannelWaiter> woken;
    {
      detail::ChannelLockGuard guard(core_.lock());
      woken = core_.closeLocked();
    }
    detail::resumeAll(woken);
  }

  // True once close() was called (buffered values may still be waiting to be received).
  bool isClosed() const noexcept {
    detail::ChannelLockGuard guard(core_.lock());
    return core_.closedLocked();
  }

  // The number of values buffered right now (a snapshot).
  std::size_t size() const noexcept {
    detail::ChannelLockGuard guard(core_.lock());
    return core_.sizeLocked();
  }

  // The capacity given to the constructor (kUnbounded for an unbounded channel).
  std::size_t capacity() const noexcept { return core_.capacity(); }

  // select() cases (coro/select.h): `select(ch.receiveCase(), ...)` completes with an
  // std::optional<T> (empty: closed and drained) if this case is chosen;
  // `select(ch.sendCase(v), ...)` delivers v (copied if an lvalue, moved from an rvalue
  // only when chosen) and throws ChannelClosed from the select if the channel is closed.
  // Use them only inside the select(...) expression they are made for.
  detail::ChannelReceiveCase<T> receiveCase() noexcept { return {&core_}; }
  detail::ChannelSendCase<T> sendCase(const T& value) { return {core_, value}; }
  detail::ChannelSendCase<T> sendCase(T&& value) noexcept { return {core_, std::move(value)}; }

 private:
  // mutable: the const observers lock it.
  mutable detail::ChannelCore<T> core_;
};

}  // namespace weft
