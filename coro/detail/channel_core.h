#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "weft/coro/channel_closed.h"
#include "weft/coro/detail/channel_waiter.h"

namespace weft {

namespace detail {

[[noreturn]] inline void throwSendOnClosed() {
  throw ChannelClosed("weft: send on a closed channel");
}

// What a channel operation attempted under the lock came to.
enum class ChannelOpResult : std::uint8_t {
  kDone,     // completed (a value was sent or received)
  kClosed,   // the channel is closed (a receive: and drained)
  kBlocked,  // it would have to wait
};

// The values buffered in a channel: a ring of slots, fixed for a bounded channel,
// doubled on demand for an unbounded one. Not thread-safe (guarded by the channel lock).
template <class T>
class ChannelBuffer {
 public:
  explicit ChannelBuffer(std::size_t slots) : capacity_(slots) {
    if (slots != 0) slots_ = std::allocator<T>().allocate(slots);
  }
  ChannelBuffer(const ChannelBuffer&) = delete;
  ChannelBuffer& operator=(const ChannelBuffer&) = delete;
  ~ChannelBuffer() {
    while (size_ != 0) pop();
    if (slots_ != nullptr) std::allocator<T>().deallocate(slots_, capacity_);
  }

  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return size_ == capacity_; }
  std::size_t size() const noexcept { return size_; }

  // Precondition: !full(). noexcept: T's move constructor is (Channel requires it).
  void push(T&& value) noexcept {
    std::size_t tail = head_ + size_;
    if (tail >= capacity_) tail -= capacity_;
    ::new (static_cast<void*>(slots_ + tail)) T(std::move(value));
    ++size_;
  }

  // Precondition: !empty(). Moves the oldest value into `out`.
  void popInto(std::optional<T>& out) noexcept {
    out.emplace(std::move(slots_[head_]));
    pop();
  }

  // Doubles the ring (at least 1 slot). Throws std::bad_alloc (the buffer is unchanged).
  // Out of line: rare, and kept off the inlined send path.
  [[gnu::noinline]] void grow() {
    const std::size_t capacity = capacity_ == 0 ? 1 : 2 * capacity_;
    T* slots = std::allocator<T>().allocate(capacity);
    for (std::size_t i = 0; i < size_; ++i) {
      std::size_t from = head_ + i;
      if (from >= capacity_) from -= capacity_;
      ::new (static_cast<void*>(slots + i)) T(std::move(slots_[from]));
      slots_[from].~T();
    }
    if (slots_ != nullptr) std::allocator<T>().deallocate(slots_, capacity_);
    slots_ = slots;
    capacity_ = capacity;
    head_ = 0;
  }

 private:
  void pop() noexcept {
    slots_[head_].~T();
    if (++head_ == capacity_) head_ = 0;
    --size_;
  }

  T* slots_ = nullptr;
  std::size_t capacity_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

[[noreturn]] inline void abortChannelDestroyedWithWaiters() noexcept {
  std::fprintf(stderr,
               "weft: a Channel was destroyed while coroutines or fibers were still waiting "
               "on it (close it and let every waiter finish first)\n");
  std::abort();
}

// The state of one Channel<T> and its operations under the lock. Channel<T> (the API)
// and select() (which completes operations on several channels at once) are built on
// these. Every *Locked function requires lock() to be held by the caller; none resumes
// anybody: it hands back, in `wake`, the waiter it completed, which the caller resumes
// (resumeWaiter) after releasing the lock.
//
// Invariants (under the lock): waiting receivers imply an empty buffer; waiting senders
// imply a full buffer (an unbuffered channel is always full); once closed, no sender
// waits.
template <class T>
class ChannelCore {
 public:
  static constexpr std::size_t kUnbounded = static_cast<std::size_t>(-1);

  explicit ChannelCore(std::size_t capacity)
      : capacity_(capacity), buffer_(capacity == kUnbounded ? 0 : capacity) {}
  ChannelCore(const ChannelCore&) = delete;
  ChannelCore& operator=(const ChannelCore&) = delete;
  ~ChannelCore() {
    if (!senders_.empty() || !receivers_.empty()) abortChannelDestroyedWithWaiters();
  }

  ChannelLock& lock() noexcept { return lock_; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool closedLocked() const noexcept { return closed_; }
  std::size_t sizeLocked() const noexcept { return buffer_.size(); }

  // Sends `value` if that needs no waiting: to a waiting receiver, or into the buffer.
  // `value` is moved from only on kDone. Throws std::bad_alloc if an unbounded buffer
  // cannot grow (nothing sent). Forced inline (as tryReceiveLocked): the channel
  // operations' path; the buffer's growth stays out of line.
  [[gnu::always_inline]] ChannelOpResult trySendLocked(T& value, ChannelWaiter*& wake) {
    if (closed_) return ChannelOpResult::kClosed;
    if (ChannelWaiter* receiver = receivers_.popClaimable()) {
      static_cast<std::optional<T>*>(receiver->slot)->emplace(std::move(value));
      receiver->status = WaiterStatus::kDone;
      wake = receiver;
      return ChannelOpResult::kDone;
    }
    if (buffer_.full()) {
      if (capacity_ != kUnbounded) return ChannelOpResult::kBlocked;
      buffer_.grow();
    }
    buffer_.push(std::move(value));
    return ChannelOpResult::kDone;
  }

  // Receives into `out` if that needs no waiting: from the buffer (refilled from the
  // first waiting sender), or straight from a waiting sender. kClosed once the channel
  // is closed and drained (`out` untouched).
  [[gnu::always_inline]] ChannelOpResult tryReceiveLocked(std::optional<T>& out,
                                                          ChannelWaiter*& wake) noexcept {
    if (!buffer_.empty()) {
      buffer_.popInto(out);
      if (ChannelWaiter* sender = senders_.popClaimable()) {
        buffer_.push(std::move(*static_cast<T*>(sender->slot)));
        sender->status = WaiterStatus::kDone;
        wake = sender;
      }
      return ChannelOpResult::kDone;
    }
    if (ChannelWaiter* sender = senders_.popClaimable()) {
      out.emplace(std::move(*static_cast<T*>(sender->slot)));
      sender->status = WaiterStatus::kDone;
      wake = sender;
      return ChannelOpResult::kDone;
    }
    return closed_ ? ChannelOpResult::kClosed : ChannelOpResult::kBlocked;
  }

  // Links a blocked sender (node->slot: the T* to move from) or receiver (node->slot:
  // the std::optional<T>* to fill). Its handle/executor or select must be set.
  void enqueueSenderLocked(ChannelWaiter* node) noexcept { senders_.pushBack(node); }
  void enqueueReceiverLocked(ChannelWaiter* node) noexcept { receivers_.pushBack(node); }

  // Unlinks a node if it is still queued (a select's cleanup, a withdrawn operation);
  // true if it was.
  bool removeSenderLocked(ChannelWaiter* node) noexcept {
    if (node->status != WaiterStatus::kQueued) return false;
    senders_.remove(node);
    return true;
  }
  bool removeReceiverLocked(ChannelWaiter* node) noexcept {
    if (node->status != WaiterStatus::kQueued) return false;
    receivers_.remove(node);
    return true;
  }

  // Cancels a node's wait (step 2 of the cancellation protocol, cancelWaitLocked): true
  // if it was queued (now unlinked and kCancelled: the caller resumes it).
  bool cancelSenderLocked(ChannelWaiter* node) noexcept { return senders_.cancelLocked(node); }
  bool cancelReceiverLocked(ChannelWaiter* node) noexcept {
    return receivers_.cancelLocked(node);
  }

  // Closes the channel: every waiting receiver and sender is unlinked, marked kClosed and
  // returned (oldest receiver first, then senders) for the caller to resume after
  // unlocking (resumeAll). Throws ChannelClosed if already closed.
  WaiterList<ChannelWaiter> closeLocked() {
    if (closed_) throw ChannelClosed("weft: close of a closed channel");
    closed_ = true;
    WaiterList<ChannelWaiter> woken;
    for (ChannelWaiterQueue* queue : {&receivers_, &senders_}) {
      while (ChannelWaiter* node = queue->popClaimable()) {
        node->status = WaiterStatus::kClosed;
        woken.pushBack(node);
      }
    }
    return woken;
  }

 private:
  ChannelLock lock_;
  bool closed_ = false;  // guarded by lock_
  const std::size_t capacity_;
  ChannelWaiterQueue senders_;    // guarded by lock_
  ChannelWaiterQueue receivers_;  // guarded by lock_
  ChannelBuffer<T> buffer_;       // guarded by lock_
};

}  // namespace detail
}  // namespace weft
