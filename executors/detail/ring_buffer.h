#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace weft::detail {

// A growable FIFO ring of trivially copyable values (ThreadPool's injection queue and
// ThreadPool(1)'s run queue hold WorkItems in one). Not thread-safe: one thread at a time
// uses it (its owner guards it with a mutex, or only its thread touches it), except for
// the statistics at the end, which any thread may read.
//
// It exists instead of std::deque because a deque allocates and frees a block every few
// dozen elements as it moves through memory; this ring only allocates when it has to
// grow (doubling), so a steady stream of push/pop allocates nothing.
//
// Statistics for free. The head and tail indices only ever grow (masked on access; a grow
// keeps them), so the head is the number of values taken out since the ring was made
// (minus those put back with pushFront), which ThreadPool counts as the items its worker
// ran. They are relaxed atomics, so that another thread may read them (on x86-64 and
// aarch64 a relaxed load or store is the plain instruction). The high-water mark costs
// no instruction on the fast path either: push compares the size with `limit_`, the
// smaller of the capacity and the high-water mark, where it would compare with the
// capacity anyway, so it leaves the fast path only to grow or to set a new mark.
template <class T>
class RingBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "RingBuffer copies elements bytewise");

 public:
  RingBuffer() = default;
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;

  bool empty() const noexcept { return head() == tail(); }
  std::size_t size() const noexcept { return tail() - head(); }

  // Appends `value`. Errors: std::bad_alloc if growing fails (the ring is unchanged).
  // push, front and pop are forced inline: they are the executors' per-hop path, and
  // clang otherwise keeps push out of line.
  [[gnu::always_inline]] void push(T value) {
    const std::size_t t = tail();
    if (t - head() >= limit_) [[unlikely]]
      return pushSlow(value);  // nothing live across it
    slots_[t & (capacity_ - 1)] = value;
    setTail(t + 1);
  }

  // Makes room so that the next `n` pushes cannot fail. Errors: std::bad_alloc (the ring
  // is unchanged).
  void reserveFor(std::size_t n) {
    if (capacity_ - size() < n) grow(size() + n);
  }

  // The oldest value, left in place. Precondition: !empty().
  [[gnu::always_inline]] const T& front() const noexcept {
    return slots_[head() & (capacity_ - 1)];
  }

  // Removes and returns the oldest value. Precondition: !empty().
  [[gnu::always_inline]] T pop() noexcept {
    const std::size_t h = head();
    T value = slots_[h & (capacity_ - 1)];
    setHead(h + 1);
    return value;
  }

  // pop() if the ring is not empty (true), in one read of each index. noexcept: loads and
  // a store.
  [[gnu::always_inline]] bool tryPop(T& value) noexcept {
    const std::size_t h = head();
    if (h == tail()) return false;
    value = slots_[h & (capacity_ - 1)];
    setHead(h + 1);
    return true;
  }

  // Pops the oldest value into `value` if there is one and `accept(oldest)` is true
  // (else false, nothing changed); with `requeue`, pushes that in the same step, into the
  // slot the pop frees (as rotate). One read of each index. noexcept: `accept` must not
  // throw.
  template <class Accept>
  [[gnu::always_inline]] bool popIf(Accept&& accept, T& value) noexcept {
    const std::size_t h = head();
    if (h == tail()) return false;
    const T oldest = slots_[h & (capacity_ - 1)];
    if (!accept(oldest)) return false;
    value = oldest;
    setHead(h + 1);
    return true;
  }
  template <class Accept>
  [[gnu::always_inline]] bool rotateIf(Accept&& accept, T requeue, T& value) noexcept {
    const std::size_t h = head();
    const std::size_t t = tail();
    if (h == t) return false;
    const std::size_t mask = capacity_ - 1;
    const T oldest = slots_[h & mask];
    if (!accept(oldest)) return false;
    value = oldest;
    slots_[t & mask] = requeue;  // the same slot as the oldest's when the ring is full
    setHead(h + 1);
    setTail(t + 1);
    return true;
  }

  // The i-th oldest value, left in place (at(0) is front()). Precondition: i < size().
  const T& at(std::size_t i) const noexcept { return slots_[(head() + i) & (capacity_ - 1)]; }
  // Removes the `n` oldest values. Precondition: n <= size(). noexcept: a store.
  void drop(std::size_t n) noexcept { setHead(head() + n); }

  // Appends `n` values produced in order by `next()`, moving the tail once (a batch moved
  // from another ring: at() then drop() there). Errors: std::bad_alloc if growing fails
  // (nothing appended, `next` not called).
  template <class Next>
  void pushBatch(std::size_t n, Next&& next) {
    if (n == 0) return;
    if (size() + n > limit_) makeRoom(size() + n);
    const std::size_t t = tail();
    const std::size_t mask = capacity_ - 1;
    for (std::size_t i = 0; i < n; ++i) slots_[(t + i) & mask] = next();
    setTail(t + n);
  }

  // Prepends `value`: it becomes the oldest (a value put back after a pop). Errors:
  // std::bad_alloc if growing fails (the ring is unchanged); it cannot fail right after
  // a pop with no push in between.
  void pushFront(T value) {
    if (size() >= limit_) makeRoom(size() + 1);
    const std::size_t h = head() - 1;  // may wrap: indices are masked, tail - head stays the size
    slots_[h & (capacity_ - 1)] = value;
    setHead(h);
  }

  // pop() then push(value) in one step, into the slot the pop frees (so it never grows).
  // Precondition: !empty().
  [[gnu::always_inline]] T rotate(T value) noexcept {
    const std::size_t mask = capacity_ - 1;
    const std::size_t h = head();
    const std::size_t t = tail();
    T oldest = slots_[h & mask];
    slots_[t & mask] = value;  // the same slot as the oldest's when the ring is full
    setHead(h + 1);
    setTail(t + 1);
    return oldest;
  }

  // --- statistics: any thread, relaxed loads (a value some recent instant had) ---------
  // The values taken out since the ring was made (pop, tryPop, rotate), minus those put
  // back (pushFront), modulo 2^64.
  std::uint64_t taken() const noexcept { return head(); }
  // The values in the ring. (Also for the owner, exact.)
  std::size_t sizeAnyThread() const noexcept {
    const std::size_t h = head();  // first: the size can only look larger, never negative
    return tail() - h;
  }
  // The most values the ring has held.
  std::size_t highWater() const noexcept { return highWater_.load(std::memory_order_relaxed); }

 private:
  // Relaxed: the indices are read by other threads only as statistics; the owner is the
  // only writer (see the class comment).
  std::size_t head() const noexcept { return head_.load(std::memory_order_relaxed); }
  std::size_t tail() const noexcept { return tail_.load(std::memory_order_relaxed); }
  void setHead(std::size_t h) noexcept { head_.store(h, std::memory_order_relaxed); }
  void setTail(std::size_t t) noexcept { tail_.store(t, std::memory_order_relaxed); }

  // push() past the fast path's limit. Out of line. Errors: std::bad_alloc (nothing
  // changed).
  [[gnu::noinline]] void pushSlow(T value) {
    makeRoom(size() + 1);
    const std::size_t t = tail();
    slots_[t & (capacity_ - 1)] = value;
    setTail(t + 1);
  }

  // The fast path's limit was reached: grow if `needed` values do not fit, and raise the
  // high-water mark to `needed`. Out of line, as grow. Errors: std::bad_alloc (nothing
  // changed).
  [[gnu::noinline]] void makeRoom(std::size_t needed) {
    if (needed > capacity_) grow(needed);
    if (needed > highWater()) highWater_.store(needed, std::memory_order_relaxed);
    limit_ = std::min(capacity_, highWater());
  }

  // Out of line: it keeps push() small enough to inline on the executors' hot paths.
  // Keeps the indices (the values move to the same indices in the larger ring).
  [[gnu::noinline]] void grow(std::size_t needed) {
    std::size_t newCapacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
    while (newCapacity < needed) newCapacity *= 2;
    std::unique_ptr<T[]> slots(new T[newCapacity]);
    const std::size_t h = head();
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) {
      slots[(h + i) & (newCapacity - 1)] = slots_[(h + i) & (capacity_ - 1)];
    }
    slots_ = std::move(slots);
    capacity_ = newCapacity;
    limit_ = std::min(capacity_, highWater());
  }

  static constexpr std::size_t kInitialCapacity = 256;

  std::unique_ptr<T[]> slots_;
  std::size_t capacity_ = 0;  // 0 or a power of two
  // min(capacity_, highWater()): push's fast path holds while the size is below it.
  std::size_t limit_ = 0;
  std::atomic<std::size_t> head_{0};  // index of the oldest value (only grows, masked on access)
  std::atomic<std::size_t> tail_{0};  // one past the newest value
  std::atomic<std::size_t> highWater_{0};
};

}  // namespace weft::detail
