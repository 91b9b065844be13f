#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <utility>

#include "weft/executors/detail/ring_buffer.h"
#include "weft/executors/executor.h"
#include "weft/executors/work_item.h"

namespace weft {

// ThreadRunQueue: the run queue of an executor thread that is the only thread taking
// items from it, offered to code running on that thread that switches straight from
// one coroutine to the next without going back to the thread's loop (weft's fibers do,
// at a park: stackful/detail/fiber_park.h). The one optional seam between an executor
// and such schedulers: an executor that has no such queue offers nothing, and they then
// go back to the executor's loop at every switch.
//
// What an executor that offers it does (ThreadPool(1) does; see executors/thread_pool.cc):
//  - keeps one of its thread's queued items here (push/pop/empty/reserveFor), and calls
//    bind() on that thread before it runs anything and unbind() when it stops;
//  - counts, in two atomics it passes to the constructor, the work its loop runs before
//    the next queued item (`runsFirst`: e.g. expired timers) and the work queued by other
//    threads that it moves in front of the thread's next own push (`arrivesFirst`: an
//    injection queue). While either is non-zero, the operations below that would jump
//    that queue decline. Both are read relaxed: they are hints, as for the loop itself.
//
// What code on the thread may do (ThreadRunQueue::current() tells it whether the thread
// has one, and whose it is): take the next item when it is a coroutine handle (it then
// owns that one resumption and must do, on this thread, what resuming it would do), put
// it back, push a handle in place of the executor's schedule, and exchange the next item
// for one it queues, all in the order the loop itself would follow.
//
// Thread safety: current(), executor() and the operations documented "any thread" may be
// called anywhere (they decline off the owning thread); everything else on the owning
// thread only (and by the executor while no thread is bound).
class ThreadRunQueue {
 public:
  ThreadRunQueue(Executor& executor, const std::atomic<std::size_t>& runsFirst,
                 const std::atomic<std::size_t>& arrivesFirst) noexcept
      : executor_(&executor), runsFirst_(runsFirst), arrivesFirst_(arrivesFirst) {}
  ThreadRunQueue(const ThreadRunQueue&) = delete;
  ThreadRunQueue& operator=(const ThreadRunQueue&) = delete;

  // The queue bound to the calling thread, or nullptr. noexcept: one thread_local load
  // (constinit: no TLS wrapper call).
  static ThreadRunQueue* current() noexcept { return tlCurrent; }
  // current() when it belongs to `executor`, else nullptr. noexcept: a load and a compare.
  static ThreadRunQueue* currentFor(const Executor* executor) noexcept {
    ThreadRunQueue* queue = tlCurrent;
    return queue != nullptr && queue->executor_ == executor ? queue : nullptr;
  }
  // The executor whose queue this is. noexcept: reads a member.
  Executor* executor() const noexcept { return executor_; }

  // --- for the executor ----------------------------------------------------------------
  // bind(): the calling thread owns this queue from now on; unbind(): it owns none.
  // noexcept: a thread_local store.
  void bind() noexcept { tlCurrent = this; }
  static void unbind() noexcept { tlCurrent = nullptr; }
  bool empty() const noexcept { return items_.empty(); }
  std::size_t size() const noexcept { return items_.size(); }
  // Precondition: !empty(). noexcept: a ring pop.
  WorkItem pop() noexcept { return items_.pop(); }
  // Pops the next item into `item`; false (item untouched) when there is none. noexcept:
  // a ring pop.
  [[gnu::always_inline]] bool tryPop(WorkItem& item) noexcept { return items_.tryPop(item); }
  // Throw std::bad_alloc if the ring cannot grow (nothing queued then).
  void push(WorkItem item) { items_.push(item); }
  void reserveFor(std::size_t count) { items_.reserveFor(count); }
  // `count` items from `next()`, appended in order at once. Errors: std::bad_alloc
  // (nothing queued, `next` not called).
  template <class Next>
  void pushBatch(std::size_t count, Next&& next) {
    items_.pushBatch(count, std::forward<Next>(next));
  }
  // Statistics, read by any thread (relaxed: values of some recent instant), at no cost to
  // the queue's operations (detail::RingBuffer): the items taken from the queue so far,
  // by the executor or by code on the thread (takeNextIf, exchangeNextIf; minus those put
  // back), the items in it, and the most it has held. noexcept: loads.
  std::uint64_t takenCount() const noexcept { return items_.taken(); }
  std::size_t sizeAnyThread() const noexcept { return items_.sizeAnyThread(); }
  std::size_t highWater() const noexcept { return items_.highWater(); }

  // --- for code on the owning thread ---------------------------------------------------
  // executor()->schedule(h) done inline: on the owning thread, with no outside work
  // waiting to go first, queues `item` at the back and answers true, exactly as the
  // executor's schedule would; false, having done nothing, anywhere else. Any thread.
  // Throws std::bad_alloc if the ring cannot grow (nothing queued).
  [[gnu::always_inline]] bool tryPush(WorkItem item) {
    if (tlCurrent != this) return false;
    if (arrivesFirst_.load(std::memory_order_relaxed) != 0) return false;
    items_.push(item);
    return true;
  }

  // On the owning thread, with nothing the loop runs first: if the next item is a
  // coroutine handle for which `accept(item)` is true, removes it and
  // returns it; the caller owns its one resumption. Otherwise returns an empty item and
  // changes nothing. `accept`: any callable bool(WorkItem) noexcept, inlined. Any thread.
  // noexcept: loads and a pop.
  template <class Accept>
  [[gnu::always_inline]] WorkItem takeNextIf(Accept&& accept) noexcept {
    if (tlCurrent != this) return {};
    if (runsFirst_.load(std::memory_order_relaxed) != 0) return {};
    WorkItem next;
    (void)items_.popIf([&](WorkItem item) noexcept { return !item.isJob() && accept(item); }, next);
    return next;
  }

  // Puts `item`, just taken by takeNextIf, back at the front: it runs next, as if it had
  // not been taken. Precondition: on the owning thread. noexcept: it cannot fail unless
  // items were queued since the take and the ring must grow; if that fails the item
  // would be lost: the process aborts with a message.
  void putBack(WorkItem item) noexcept {
    try {
      items_.pushFront(item);
    } catch (const std::bad_alloc&) {
      std::fputs("weft: out of memory putting a work item back into a ThreadRunQueue\n", stderr);
      std::abort();
    }
  }

  // takeNextIf and a push of `requeue` in one step, for a coroutine that yields: on the
  // owning thread, with nothing the loop runs first and no outside work waiting (so that
  // `requeue` would not jump it), if the next item is a handle with accept(item), removes
  // it, queues `requeue` at the back and returns it; else returns an empty item and
  // changes nothing. Any thread. noexcept: loads and a rotation into the room the pop
  // made.
  template <class Accept>
  [[gnu::always_inline]] WorkItem exchangeNextIf(Accept&& accept, WorkItem requeue) noexcept {
    if (tlCurrent != this) return {};
    if (runsFirst_.load(std::memory_order_relaxed) != 0 ||
        arrivesFirst_.load(std::memory_order_relaxed) != 0) {
      return {};
    }
    WorkItem next;  // next out, requeue in
    (void)items_.rotateIf([&](WorkItem item) noexcept { return !item.isJob() && accept(item); },
                          requeue, next);
    return next;
  }

 private:
  static constinit inline thread_local ThreadRunQueue* tlCurrent = nullptr;

  Executor* const executor_;
  const std::atomic<std::size_t>& runsFirst_;
  const std::atomic<std::size_t>& arrivesFirst_;
  detail::RingBuffer<WorkItem> items_;
};

// executor->schedule(item.handle()), pushed straight into the calling thread's
// ThreadRunQueue when that queue is the executor's (no virtual call, no worker lookup); for the wake-ups on
// the hottest paths (a channel's hand-off). Errors: those of schedule.
// A tagged handle keeps its tag on that push (and loses it through schedule).
[[gnu::always_inline]] inline void scheduleLocalFirst(Executor* executor, WorkItem item) {
  if (ThreadRunQueue* queue = ThreadRunQueue::currentFor(executor);
      queue != nullptr && queue->tryPush(item)) {
    return;
  }
  executor->schedule(item.handle());
}

}  // namespace weft
