#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "weft/executors/detail/job.h"

namespace weft::detail {

// The local run queue of one ThreadPool worker: an unbounded FIFO of WorkItems with one
// producer (the owning worker) and any number of consumers (the owner itself and thieves).
//
// Why this shape. A Chase-Lev deque (Lê et al. 2013) gives the owner LIFO order, which
// starves: a coroutine that reschedules itself with `co_await yield()` would be taken
// straight back. ThreadPool promises FIFO per worker, so the owner takes from the same
// end as thieves. Once nobody takes from the tail, the owner/thief race on the last
// element that Chase-Lev resolves with a seq_cst fence disappears; what is left is the
// single-producer half of Chase-Lev:
//  - push (owner): write the slot, then publish it by advancing `tail_`;
//  - pop / steal (anyone): read `head_`, `tail_`, the slot(s), then claim them with one
//    CAS on `head_`. `head_` only grows (64-bit, never wraps in practice), so the CAS has
//    no ABA: if it succeeds, nobody else took those slots and the owner had not reused
//    them (it only reuses a slot once it has seen `head_` move past it).
//  - growth (owner): copy the live range into a buffer twice as large and publish it.
//    Consumers may still be reading the old buffer, so it is retired, not freed, until
//    the queue dies (the retired buffers sum to less than the live one).
// Compared with a mutex-protected ring per worker (also measured, see
// docs/design/2026-11-worker-queues.md): push is one store instead of a lock/unlock pair,
// pop is one CAS instead of two.
//
// Every slot is an atomic word so that a thief reading a slot the owner is rewriting
// (its CAS will then fail) is not a data race.
//
// Thread safety: push, pushBatch and the `dst` side of stealHalfInto only on the owning
// thread; pop, stealHalfInto (as victim) and sizeHint from any thread.
class WorkStealingQueue {
 public:
  // Errors: std::bad_alloc.
  explicit WorkStealingQueue(std::size_t initialCapacity = 256) {
    // Relaxed: the queue is not shared yet; publishing it to other threads (e.g. by
    // starting the worker thread) orders this store.
    buffer_.store(allocate(roundUpToPowerOfTwo(initialCapacity)), std::memory_order_relaxed);
  }
  WorkStealingQueue(const WorkStealingQueue&) = delete;
  WorkStealingQueue& operator=(const WorkStealingQueue&) = delete;

  // Owner only. Appends `item` (non-empty). Errors: std::bad_alloc if growing fails
  // (the queue is unchanged).
  void push(WorkItem item) {
    assert(!item.empty());
    // Relaxed: only this thread writes tail_ and buffer_.
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    Buffer* buffer = reserve(tail, 1);
    // Relaxed: the slot is published by the tail_ store below.
    buffer->at(tail).store(item.bits(), std::memory_order_relaxed);
    // seq_cst, not just release: ThreadPool's wake-up protocol needs this store ordered
    // before its later seq_cst load of the idle-worker counters (a store-load pair that
    // release/acquire does not order).
    tail_.store(tail + 1, std::memory_order_seq_cst);
  }

  // Owner only. Appends `n` items produced in order by `next()`, publishing them all at
  // once. Errors: std::bad_alloc if growing fails (nothing is appended; `next` has not
  // been called).
  template <class Next>
  void pushBatch(std::size_t n, Next&& next) {
    if (n == 0) return;
    // Relaxed: only this thread writes tail_.
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    Buffer* buffer = reserve(tail, n);
    for (std::size_t i = 0; i < n; ++i) {
      WorkItem item = next();
      assert(!item.empty());
      // Relaxed: published by the tail_ store below.
      buffer->at(tail + i).store(item.bits(), std::memory_order_relaxed);
    }
    // seq_cst: see push().
    tail_.store(tail + n, std::memory_order_seq_cst);
  }

  // Any thread. Removes and returns the oldest item, or an empty WorkItem if the queue
  // was empty at some instant during the call.
  WorkItem pop() noexcept {
    return popIf([](WorkItem) noexcept { return true; });
  }
  // Any thread. Like pop(), but only if `accept(oldest)` is true; otherwise (or if the
  // queue was empty) returns an empty WorkItem and leaves the queue as it is. `accept`
  // sees only the item's bits (it must not dereference them: a stale item may already be
  // running elsewhere), may be called more than once, and must not throw.
  template <class Accept>
  WorkItem popIf(Accept&& accept) noexcept {
    // Acquire: a stale head only makes the CAS below fail and retry.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      // seq_cst: ThreadPool re-checks queues after announcing it is going to sleep; this
      // load must not be reordered before that announcement (store-load pair).
      const std::uint64_t tail = tail_.load(std::memory_order_seq_cst);
      if (head >= tail) return WorkItem();
      // Acquire: pairs with the owner's release of a grown buffer, so its copied slots
      // are visible. Reading a retired buffer is fine: it still holds every index that
      // was live when it was retired, and an index that is no longer live fails the CAS.
      Buffer* buffer = buffer_.load(std::memory_order_acquire);
      // Relaxed: the acquire load of tail_ above made the slot's write visible.
      const std::uintptr_t bits = buffer->at(head).load(std::memory_order_relaxed);
      // `bits` may be stale (another consumer took the slot meanwhile): then a refusal
      // is re-checked against the new oldest item, and an acceptance fails the CAS.
      if (!accept(WorkItem::fromBits(bits))) {
        // Acquire: see the first load of head_.
        const std::uint64_t now = head_.load(std::memory_order_acquire);
        if (now == head) return WorkItem();
        head = now;
        continue;
      }
      // acq_rel on success: release so the owner, once it sees head_ move past this slot
      // (acquire in reserve()), overwrites it only after our read above. On failure
      // `head` is reloaded (acquire) and we retry.
      if (head_.compare_exchange_weak(head, head + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return WorkItem::fromBits(bits);
      }
    }
  }

  // Called by the owner of `dst` (a different queue). Steals the older half (rounded
  // up, at most kMaxSteal items) of this queue: returns the oldest stolen item and
  // appends the rest, in order, to `dst`. Returns an empty WorkItem if this queue was empty at some
  // instant during the call. With `stolen`, stores there how many items were taken (the
  // returned one included; untouched when none). With `count`, adds them to that counter
  // (the calling thread must be its only writer) before it claims them, taking them back
  // if the claim fails: a thread that sees head() moved past them (acquire) sees them
  // counted. Errors: std::bad_alloc if `dst` must grow and cannot (nothing is stolen).
  WorkItem stealHalfInto(WorkStealingQueue& dst, std::uint64_t* stolen = nullptr,
                         std::atomic<std::uint64_t>* count = nullptr) {
    assert(&dst != this);
    // Acquire: a stale head only makes the CAS fail and retry.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    // Copying the batch takes time during which the owner keeps popping; a failed CAS
    // halves the batch so that a thief cannot be starved by a busy owner.
    std::uint64_t maxTake = kMaxSteal;
    for (;; maxTake = maxTake > 1 ? maxTake / 2 : 1) {
      // seq_cst: see pop().
      const std::uint64_t tail = tail_.load(std::memory_order_seq_cst);
      if (head >= tail) return WorkItem();
      const std::uint64_t available = tail - head;
      const std::uint64_t take = std::min(available - available / 2, maxTake);
      // Acquire: see pop().
      Buffer* buffer = buffer_.load(std::memory_order_acquire);
      // Relaxed: see pop().
      const std::uintptr_t first = buffer->at(head).load(std::memory_order_relaxed);
      // Copy the rest into dst's unpublished slots before claiming them: if the CAS
      // fails, the copies are simply never published.
      // Relaxed: dst's tail_ is only written by this thread.
      const std::uint64_t dstTail = dst.tail_.load(std::memory_order_relaxed);
      Buffer* dstBuffer = take > 1 ? dst.reserve(dstTail, take - 1) : nullptr;
      for (std::uint64_t i = 1; i < take; ++i) {
        // Relaxed: the slots were made visible by the tail_ load; dst's copies are
        // published by the dst.tail_ store below.
        dstBuffer->at(dstTail + i - 1)
            .store(buffer->at(head + i).load(std::memory_order_relaxed), std::memory_order_relaxed);
      }
      // Relaxed: ordered before the claim by its release (acq_rel below).
      if (count != nullptr)
        count->store(count->load(std::memory_order_relaxed) + take, std::memory_order_relaxed);
      // acq_rel / acquire: see pop().
      if (head_.compare_exchange_weak(head, head + take, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        // seq_cst: see push().
        if (take > 1) dst.tail_.store(dstTail + take - 1, std::memory_order_seq_cst);
        if (stolen != nullptr) *stolen = take;
        return WorkItem::fromBits(first);
      }
      if (count != nullptr)
        count->store(count->load(std::memory_order_relaxed) - take, std::memory_order_relaxed);
    }
  }

  // The most items one steal takes: enough to amortize the steal, small enough that the
  // copy does not keep the CAS window open for long.
  static constexpr std::uint64_t kMaxSteal = 128;

  // Any thread. The number of items at some recent instant (exact on the owner thread
  // when no consumer runs concurrently).
  std::size_t sizeHint() const noexcept {
    // seq_cst loads: a plain snapshot; callers use it only as a hint.
    const std::uint64_t head = head_.load();
    const std::uint64_t tail = tail_.load();
    return tail > head ? static_cast<std::size_t>(tail - head) : 0;
  }

  // Any thread. The most items the queue has held (as its owner saw it when it appended:
  // thieves may have taken some meanwhile, so it may count a few more than were ever
  // there at one instant). For metrics. noexcept: a relaxed load.
  std::uint64_t highWater() const noexcept {
    // Relaxed: a statistic; written by the owner only.
    return highWater_.load(std::memory_order_relaxed);
  }

  // Any thread. The items taken from the queue since it was made (by pop and by steals:
  // the head index, which only grows). For metrics: with acquire, a thief's count of the
  // items it took (stealHalfInto's `count`) is seen for every steal this value includes.
  std::uint64_t taken(std::memory_order order = std::memory_order_relaxed) const noexcept {
    return head_.load(order);
  }

 private:
  struct Buffer {
    explicit Buffer(std::size_t capacity)
        : mask(capacity - 1), slots(new std::atomic<std::uintptr_t>[capacity]()) {}
    std::atomic<std::uintptr_t>& at(std::uint64_t index) const noexcept {
      return slots[static_cast<std::size_t>(index) & mask];
    }
    std::size_t capacity() const noexcept { return mask + 1; }

    const std::size_t mask;
    const std::unique_ptr<std::atomic<std::uintptr_t>[]> slots;
  };

  static std::size_t roundUpToPowerOfTwo(std::size_t n) noexcept {
    std::size_t capacity = 2;
    while (capacity < n) capacity *= 2;
    return capacity;
  }

  Buffer* allocate(std::size_t capacity) {
    buffers_.reserve(buffers_.size() + 1);  // so that push_back below cannot throw
    auto buffer = std::make_unique<Buffer>(capacity);
    Buffer* raw = buffer.get();
    buffers_.push_back(std::move(buffer));
    return raw;
  }

  // Owner only: returns a buffer with room for `n` more items after index `tail`,
  // growing it if needed.
  // Inline (the push path); the rest is out of line.
  [[gnu::always_inline]] Buffer* reserve(std::uint64_t tail, std::size_t n) {
    // Relaxed: only this thread writes buffer_.
    Buffer* buffer = buffer_.load(std::memory_order_relaxed);
    // Acquire: pairs with the consumers' acq_rel CAS, so their reads of the slots we are
    // about to reuse happened before we overwrite them. A stale (smaller) head only
    // makes us grow earlier than necessary.
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    // limit_ is min(capacity, high-water mark): compared where the capacity would be, so
    // the mark costs nothing until it rises.
    if (tail - head + n <= limit_) [[likely]]
      return buffer;
    return reserveSlow(buffer, head, tail, n);
  }

  // reserve() past limit_: raises the high-water mark, grows if needed.
  [[gnu::noinline]] Buffer* reserveSlow(Buffer* buffer, std::uint64_t head, std::uint64_t tail,
                                        std::size_t n) {
    const std::uint64_t live = tail - head;
    // Relaxed: only this thread writes it; readers take it as a statistic.
    if (live + n > highWater_.load(std::memory_order_relaxed)) {
      highWater_.store(live + n, std::memory_order_relaxed);
    }
    limit_ =
        std::min<std::uint64_t>(buffer->capacity(), highWater_.load(std::memory_order_relaxed));
    if (live + n <= buffer->capacity()) return buffer;
    std::size_t capacity = buffer->capacity() * 2;
    while (capacity < live + n) capacity *= 2;
    Buffer* grown = allocate(capacity);
    for (std::uint64_t i = head; i < tail; ++i) {
      // Relaxed: only this thread writes slots; the new buffer is published below.
      grown->at(i).store(buffer->at(i).load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    // Release: consumers that load the new buffer (acquire) see the copied slots.
    buffer_.store(grown, std::memory_order_release);
    limit_ = std::min<std::uint64_t>(grown->capacity(), highWater_.load(std::memory_order_relaxed));
    return grown;
  }

  // head_ is written by every consumer, tail_ only by the owner; both are read by
  // everyone. They share a cache line with buffer_: a pop needs all three.
  std::atomic<std::uint64_t> head_{0};
  std::atomic<std::uint64_t> tail_{0};
  std::atomic<Buffer*> buffer_{nullptr};
  // The current buffer and every retired one, freed with the queue (owner only).
  std::vector<std::unique_ptr<Buffer>> buffers_;
  // The most items the queue held after an append (highWater()); written by the owner.
  std::atomic<std::uint64_t> highWater_{0};
  // Owner only: min(current capacity, highWater_), the fast path's bound in reserve().
  std::uint64_t limit_ = 0;
};

}  // namespace weft::detail
