#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/channel_core.h"
#include "weft/coro/detail/channel_waiter.h"
#include "weft/coro/detail/config.h"
#include "weft/executors/executor.h"

// The awaitables of Channel<T>'s send and receive (coro/channel.h) and the cases that
// select() takes (coro/select.h): what `co_await channel.send(v)`, `co_await
// channel.receive()` and `weft::select(...)` are made of.

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
  // resumeWaiter), never by await_suspend (ResumesOnlyThroughExecutor,
  // coro/awaitable_support.h).
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

}  // namespace weft
