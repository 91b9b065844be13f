#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "executors/detail/job.h"
#include "executors/detail/ring_buffer.h"
#include "executors/executor.h"

namespace weft::detail {

class SoloRunQueue;

// The SoloRunQueue whose worker is the calling thread, or nullptr. constinit and a plain
// pointer: reading it is one thread-pointer-relative load, no TLS wrapper call.
inline constinit thread_local SoloRunQueue* tlOwnedSoloRunQueue = nullptr;

// The run queue of ThreadPool(1)'s only worker, and the two rules that decide whether
// that worker may take its next item straight from it instead of going back to its loop.
//
// Why it is visible outside the pool: the fibers' hand-off (stackful/fiber.cc) takes the
// next coroutine of its executor's queue at every park and every yield. Through the
// virtual Executor::takeNextHandle/exchangeNextHandle that is a virtual call, a call
// through the filter and their register saves (about a quarter of a fiber yield's
// instructions); with the queue in reach (Executor::soloRunQueue()) it is a few inline
// loads. ThreadPool's own overrides call the same functions, so both paths follow the
// same rules. Likewise a channel's wake-up on that worker pushes inline
// (scheduleInlineWhenSolo), by the rule ThreadPool::schedule follows there.
//
// Nobody steals from ThreadPool(1)'s worker, so `items` needs no atomics: only the worker
// touches it. Every other thread pushes to the pool's injection queue. The two counters it
// reads belong to the pool: expired timers waiting (which the loop runs first), and
// outside work waiting (which the pool orders before the worker's next local push).
//
// Thread safety: takeNextHandle and exchangeNextHandle may be called from any thread;
// they answer null everywhere but on the owning worker. Everything else: the owning
// worker only (and the pool while no worker runs).
class SoloRunQueue {
 public:
  SoloRunQueue(const std::atomic<std::size_t>& timerDueSize,
               const std::atomic<std::size_t>& injectionSize) noexcept
      : timerDueSize_(timerDueSize), injectionSize_(injectionSize) {}
  SoloRunQueue(const SoloRunQueue&) = delete;
  SoloRunQueue& operator=(const SoloRunQueue&) = delete;

  // The worker's queue. Owner only.
  RingBuffer<WorkItem> items;

  // The worker calls bind() when it starts and unbind() when it exits. noexcept: a
  // thread_local store.
  void bind() noexcept { tlOwnedSoloRunQueue = this; }
  static void unbind() noexcept { tlOwnedSoloRunQueue = nullptr; }
  // True on the owning worker. noexcept: a thread_local load.
  bool ownedByCallingThread() const noexcept { return tlOwnedSoloRunQueue == this; }

  // Executor::takeNextHandle: on the worker, with no due timer waiting, pops the oldest
  // item if it is a coroutine handle. noexcept: loads and a pop.
  [[gnu::always_inline]] std::coroutine_handle<> takeNextHandle() noexcept {
    if (!ownedByCallingThread()) return {};
    // Relaxed: as the worker's loop, which would run a due timer before its next item.
    if (timerDueSize_.load(std::memory_order_relaxed) != 0) return {};
    if (items.empty() || items.front().isJob()) return {};
    return items.pop().handle();
  }

  // Executor::schedule(h) on the owning worker, inline: with no outside work waiting
  // (which the pool orders before the worker's next local push), queues `h` and answers
  // true, exactly as ThreadPool::schedule would. False, having done nothing, anywhere
  // else (the caller then schedules through the executor). Throws std::bad_alloc if the
  // ring cannot grow (nothing queued).
  [[gnu::always_inline]] bool tryPushLocal(std::coroutine_handle<> h) {
    if (!ownedByCallingThread()) return false;
    // Relaxed: as ThreadPool's own push (see there).
    if (injectionSize_.load(std::memory_order_relaxed) != 0) return false;
    items.push(WorkItem::fromHandle(h));
    return true;
  }

  // Puts `h`, just taken by takeNextHandle(), back at the front of the queue: it runs
  // next, as if it had not been taken. Precondition: called by the owning thread.
  // noexcept: it cannot fail unless coroutines were queued since the take and the ring
  // must grow; if that fails, the coroutine would be lost: the process aborts with a
  // message.
  void putBack(std::coroutine_handle<> h) noexcept;

  // Executor::exchangeNextHandle: on the worker, with no due timer and no outside work
  // waiting (so that `requeue` goes behind them, through a normal schedule), if the
  // oldest item is a coroutine handle `h` with accept(h), replaces it by `requeue` at the
  // back and returns h. `accept` is any callable bool(std::coroutine_handle<>) noexcept,
  // inlined. noexcept: loads and a rotation.
  template <class Accept>
  [[gnu::always_inline]] std::coroutine_handle<> exchangeNextHandle(
      Accept&& accept, std::coroutine_handle<> requeue) noexcept {
    if (!ownedByCallingThread()) return {};
    // Relaxed: as the worker's loop and the pool's push, which take these counters as
    // hints; what happens-before this call is seen (coherence).
    if (timerDueSize_.load(std::memory_order_relaxed) != 0 ||
        injectionSize_.load(std::memory_order_relaxed) != 0) {
      return {};
    }
    if (items.empty()) return {};
    const WorkItem next = items.front();
    if (next.isJob() || !accept(next.handle())) return {};
    items.rotate(WorkItem::fromHandle(requeue));  // next out, requeue in
    return next.handle();
  }

 private:
  const std::atomic<std::size_t>& timerDueSize_;
  const std::atomic<std::size_t>& injectionSize_;
};

// executor->schedule(h), with the push made inline when the calling thread is
// ThreadPool(1)'s worker (SoloRunQueue::tryPushLocal): no virtual call, no worker lookup.
// For the wake-up on the hottest path, a channel's hand-off (resumeChannelWaiter). Errors:
// those of schedule.
[[gnu::always_inline]] inline void scheduleInlineWhenSolo(Executor* executor,
                                                          std::coroutine_handle<> h) {
  if (SoloRunQueue* solo = executor->soloRunQueue(); solo != nullptr && solo->tryPushLocal(h)) {
    return;
  }
  executor->schedule(h);
}

inline void SoloRunQueue::putBack(std::coroutine_handle<> h) noexcept {
  try {
    items.pushFront(WorkItem::fromHandle(h));
  } catch (const std::bad_alloc&) {
    std::fputs("weft: out of memory putting a coroutine back into ThreadPool(1)'s queue\n", stderr);
    std::abort();
  }
}

}  // namespace weft::detail
