#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "weft/executors/timer_entry.h"

namespace weft::detail {

// IntrusiveHeap: a binary min-heap of pointers to elements that each keep their own
// position in it, so that any element leaves in O(log n) (a cancelled timer, an operation
// that completed before its deadline) without a search and without freeing anything but
// its slot. The one deadline heap of weft's executors: the pool's timer thread and every
// worker keep their timers in one (TimerHeap below), the epoll loop its operations' time
// limits (executors/epoll_loop.cc).
//
// `Policy` says how elements compare and where one keeps its position:
//   static bool before(const T& a, const T& b) noexcept;  // a leaves the heap first
//   static void setPosition(T& x, std::size_t i) noexcept; // i: a slot, or kNotInHeap
//   static std::size_t position(const T& x) noexcept;      // as last set
// A fresh element must answer kNotInHeap (contains() is false) before its first push.
//
// Errors: push() throws std::bad_alloc when the heap cannot grow, with nothing changed.
// Everything else is noexcept: slot moves in a vector that never reallocates there.
// Thread safety: none; the owner locks (or owns the thread).
template <class T, class Policy>
class IntrusiveHeap {
 public:
  static constexpr std::size_t kNotInHeap = std::numeric_limits<std::size_t>::max();

  bool empty() const noexcept { return slots_.empty(); }
  std::size_t size() const noexcept { return slots_.size(); }
  // The element that leaves first, or nullptr when empty.
  T* top() const noexcept { return slots_.empty() ? nullptr : slots_.front(); }
  static bool contains(const T& x) noexcept { return Policy::position(x) != kNotInHeap; }

  // Precondition: !contains(x).
  void push(T& x) {
    slots_.push_back(&x);  // may throw: nothing changed then
    siftUp(slots_.size() - 1);
  }

  // Precondition: contains(x), in this heap.
  void remove(T& x) noexcept { removeAt(Policy::position(x)); }

  // x's key changed (either way): it moves to its place. Precondition: contains(x), in
  // this heap.
  void update(T& x) noexcept {
    const std::size_t i = Policy::position(x);
    if (i > 0 && Policy::before(x, *slots_[(i - 1) / 2])) {
      siftUp(i);
    } else {
      siftDown(i);
    }
  }

  // Removes and returns top(). Precondition: !empty().
  T* pop() noexcept {
    T* first = slots_.front();
    removeAt(0);
    return first;
  }

  // Empties the heap and returns its elements in the order they would have left it
  // (each marked not in the heap). noexcept: the vector is moved out and sorted in place.
  std::vector<T*> takeAll() noexcept {
    std::vector<T*> all;
    all.swap(slots_);
    for (T* x : all) Policy::setPosition(*x, kNotInHeap);
    std::sort(all.begin(), all.end(),
              [](const T* a, const T* b) { return Policy::before(*a, *b); });
    return all;
  }

 private:
  void place(std::size_t i, T* x) noexcept {
    slots_[i] = x;
    Policy::setPosition(*x, i);
  }

  void siftUp(std::size_t i) noexcept {
    T* x = slots_[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!Policy::before(*x, *slots_[parent])) break;
      place(i, slots_[parent]);
      i = parent;
    }
    place(i, x);
  }

  void siftDown(std::size_t i) noexcept {
    T* x = slots_[i];
    const std::size_t n = slots_.size();
    for (;;) {
      std::size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && Policy::before(*slots_[child + 1], *slots_[child])) ++child;
      if (!Policy::before(*slots_[child], *x)) break;
      place(i, slots_[child]);
      i = child;
    }
    place(i, x);
  }

  void removeAt(std::size_t i) noexcept {
    T* removed = slots_[i];
    T* last = slots_.back();
    slots_.pop_back();
    Policy::setPosition(*removed, kNotInHeap);
    if (removed == last) return;
    place(i, last);
    // The moved element may belong above or below its new slot.
    if (i > 0 && Policy::before(*last, *slots_[(i - 1) / 2])) {
      siftUp(i);
    } else {
      siftDown(i);
    }
  }

  std::vector<T*> slots_;
};

// Timers by deadline; equal deadlines in arming order (TimerEntry::sequence, which each
// heap numbers itself). TimerEntry::heapIndex is the position (kNotQueued: none).
struct TimerOrder {
  static bool before(const TimerEntry& a, const TimerEntry& b) noexcept {
    if (a.deadline != b.deadline) return a.deadline < b.deadline;
    return a.sequence < b.sequence;
  }
  static void setPosition(TimerEntry& x, std::size_t i) noexcept { x.heapIndex = i; }
  static std::size_t position(const TimerEntry& x) noexcept { return x.heapIndex; }
};
static_assert(TimerEntry::kNotQueued == IntrusiveHeap<TimerEntry, TimerOrder>::kNotInHeap);

// TimerHeap: the heap of armed TimerEntries that TimerQueue and ThreadPool's workers
// keep. push() numbers the entry so that equal deadlines fire in arming order.
// Errors and thread safety: as IntrusiveHeap (the owner locks).
class TimerHeap : public IntrusiveHeap<TimerEntry, TimerOrder> {
 public:
  // Precondition: `entry` is in no heap. Throws std::bad_alloc with nothing changed.
  void push(TimerEntry& entry) {
    entry.sequence = nextSequence_;
    IntrusiveHeap::push(entry);
    ++nextSequence_;
  }

 private:
  std::uint64_t nextSequence_ = 0;
};

}  // namespace weft::detail
