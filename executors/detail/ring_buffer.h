#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace weft::detail {

// A growable FIFO ring of trivially copyable values (ThreadPool's injection queue holds
// WorkItems in one). Not thread-safe: the owner guards it with a mutex.
//
// It exists instead of std::deque because a deque allocates and frees a block every few
// dozen elements as it moves through memory; this ring only allocates when it has to
// grow (doubling), so a steady stream of push/pop allocates nothing.
template <class T>
class RingBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "RingBuffer copies elements bytewise");

 public:
  RingBuffer() = default;
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;

  bool empty() const noexcept { return head_ == tail_; }
  std::size_t size() const noexcept { return tail_ - head_; }

  // Appends `value`. Errors: std::bad_alloc if growing fails (the ring is unchanged).
  // push, front and pop are forced inline: they are the executors' per-hop path, and
  // clang otherwise keeps push out of line.
  [[gnu::always_inline]] void push(T value) {
    if (size() == capacity_) grow(size() + 1);
    slots_[tail_ & (capacity_ - 1)] = value;
    ++tail_;
  }

  // Makes room so that the next `n` pushes cannot fail. Errors: std::bad_alloc (the ring
  // is unchanged).
  void reserveFor(std::size_t n) {
    if (capacity_ - size() < n) grow(size() + n);
  }

  // The oldest value, left in place. Precondition: !empty().
  [[gnu::always_inline]] const T& front() const noexcept { return slots_[head_ & (capacity_ - 1)]; }

  // Removes and returns the oldest value. Precondition: !empty().
  [[gnu::always_inline]] T pop() noexcept {
    T value = slots_[head_ & (capacity_ - 1)];
    ++head_;
    return value;
  }

  // Prepends `value`: it becomes the oldest (a value put back after a pop). Errors:
  // std::bad_alloc if growing fails (the ring is unchanged); it cannot fail right after
  // a pop with no push in between.
  void pushFront(T value) {
    if (size() == capacity_) grow(size() + 1);
    --head_;  // may wrap: indices are masked, and tail_ - head_ stays the size
    slots_[head_ & (capacity_ - 1)] = value;
  }

  // pop() then push(value) in one step, into the slot the pop frees (so it never grows).
  // Precondition: !empty().
  [[gnu::always_inline]] T rotate(T value) noexcept {
    const std::size_t mask = capacity_ - 1;
    T oldest = slots_[head_ & mask];
    slots_[tail_ & mask] = value;  // the same slot as the oldest's when the ring is full
    ++head_;
    ++tail_;
    return oldest;
  }

 private:
  // Out of line: it keeps push() small enough to inline on the executors' hot paths.
  [[gnu::noinline]] void grow(std::size_t needed) {
    std::size_t newCapacity = capacity_ == 0 ? kInitialCapacity : capacity_ * 2;
    while (newCapacity < needed) newCapacity *= 2;
    std::unique_ptr<T[]> slots(new T[newCapacity]);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) slots[i] = slots_[(head_ + i) & (capacity_ - 1)];
    slots_ = std::move(slots);
    capacity_ = newCapacity;
    head_ = 0;
    tail_ = n;
  }

  static constexpr std::size_t kInitialCapacity = 256;

  std::unique_ptr<T[]> slots_;
  std::size_t capacity_ = 0;  // 0 or a power of two
  std::size_t head_ = 0;      // index of the oldest value (monotonic, masked on access)
  std::size_t tail_ = 0;      // one past the newest value
};

}  // namespace weft::detail
