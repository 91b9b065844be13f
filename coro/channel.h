#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/channel_awaiters.h"
#include "weft/coro/detail/channel_core.h"
#include "weft/coro/detail/channel_waiter.h"
#include "weft/coro/detail/config.h"
#include "weft/executors/executor.h"

namespace weft {

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
  // The awaitables and select cases the operations return, named so that code can hold
  // one (co_await in a Lazy/Task, weft::await in a fiber; see each operation).
  using SendOperation = detail::ChannelSendAwaitable<T>;        // send(value)
  using ReceiveOperation = detail::ChannelReceiveAwaitable<T>;  // receive()
  using ReceiveCase = detail::ChannelReceiveCase<T>;            // receiveCase(), for select
  using SendCase = detail::ChannelSendCase<T>;                  // sendCase(value), for select

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
  SendOperation send(const T& value) {
    return detail::ChannelSendAwaitable<T>(core_, value);
  }
  SendOperation send(T&& value) noexcept {
    return detail::ChannelSendAwaitable<T>(core_, std::move(value));
  }

  // `co_await ch.receive()`: the next value, waiting until one is sent; an empty
  // optional once the channel is closed and drained. Never throws.
  ReceiveOperation receive() noexcept {
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
  ReceiveCase receiveCase() noexcept { return {&core_}; }
  SendCase sendCase(const T& value) { return {core_, value}; }
  SendCase sendCase(T&& value) noexcept { return {core_, std::move(value)}; }

 private:
  // mutable: the const observers lock it.
  mutable detail::ChannelCore<T> core_;
};

}  // namespace weft
