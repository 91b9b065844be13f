#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "weft/coro/detail/config.h"
#include "weft/coro/detail/dump_gate.h"

namespace weft::detail {

// The registry of live work that weft::dumpTasks() (coro/task_dump.h) and gdb's
// `weft tasks` / `weft fibers` (tools/gdb/weft.py) list: every root task (a Lazy started
// by syncAwait, start(), spawn() or TaskGroup::spawn(), with WEFT_TASK_TRACKING) and
// every fiber. Each thread that registers something owns rings of slots
// (task_registry.cc), one kind for tasks (RegistrySlot) and one for fibers (FiberSlot),
// 8 bytes each, and claims the next free slot with no lock and no atomic
// read-modify-write: a fiber is registered where it is created, a root task where it
// first waits (its TaskRecord until then is in its completion sink, unlisted), and a slot
// may be released from any thread.
//
//  - Claiming (the owner thread only): the slot under the thread's cursor, if free, is
//    taken and the cursor moves on: a load, a test, a few stores, all in the thread's own
//    ring. An occupied slot (a long-lived task) or the end of the ring sends the claim to
//    the slow path, which looks further, wraps around, or gives the thread a ring twice
//    as large when half of it is taken.
//  - Releasing (any thread): the slot's subject is set to 0, then the dump gate is passed
//    (coro/detail/dump_gate.h), so that no dump still reads what the slot led to once
//    the caller frees it. The owner reuses the slot when its cursor comes back to it.
//  - Dumps read every slot of every ring, each inside a DumpRead: a slot they find
//    taken stays taken, and what its subject points to alive, until the read ends.
//
// Rings are never freed (they are the registry's memory); a thread that exits leaves its
// rings to the next thread that registers something, slots still taken included.

// TaskRecord::wait of a task that has not waited yet, and no number given. (Odd: it has
// not waited; the rest is the number a stall report gave it, 0: none.)
inline constexpr std::uintptr_t kNeverWaited = 1;

// A root task's slot in a ring: its subject only (0: free; kSlotEnd: the word after a
// ring's last slot; else the task's TaskRecord*). Taken at the task's first wait, not when
// it starts (TaskRecord::publishWait): a task that ends without ever waiting never touches
// the ring.
struct RegistrySlot {
  std::atomic<std::uintptr_t> subject{0};
};
static_assert(sizeof(RegistrySlot) == 8);

// What the registry knows of a root task, in the task's completion sink (syncAwait's,
// start()'s, spawn()'s, a TaskGroup child's), from registerRootTask() to
// unregisterRootTask() (coro/detail/task_registry.h). Every coroutine of the task points
// at it (LazyPromiseBase::rootRecord()), and the one that waits on something other than a
// Lazy publishes its wait here. The task is listed in the ring of the thread where it first
// waits, from then until it ends; dumps on other threads read the record once the ring
// slot leads them here.
//
// The fields are plain words, read and written atomically through std::atomic_ref where
// a dump may read them concurrently (wait, id, firstWaitMs): a std::atomic member would
// be zeroed when the sink is built, stores a task that never waits does not need. Nothing
// is initialised until registerRootTask.
struct TaskRecord {
  //  - odd: it has not waited: not listed, the fields below unset; the rest is the
  //    number a stall report that named it in
  //    its first run gave it (0: none; kNeverWaited when registered), which it keeps;
  //  - 0: it runs, or is queued to run, and has waited before;
  //  - else: what its innermost coroutine waits on (a LazyWaitNote*,
  //    coro/detail/lazy_promise.h) while it is suspended.
  std::uintptr_t wait;
  // From its first wait: its number, and CLOCK_MONOTONIC_COARSE in milliseconds then (its
  // age in dumps). Written before the ring slot's subject (release).
  std::uint64_t id;
  std::int64_t firstWaitMs;
  // From its first wait (publishFirstWait finds it, up the waiting coroutine's chain): the
  // root task's promise (a LazyPromiseBase*), what dumps start from when it runs. In its
  // first run the running-root word names the root instead (running_root.h).
  const void* root;
  // Its ring slot, from its first wait (the task's own threads only).
  RegistrySlot* slot;

  // The wait word, read by a dump or async backtrace on any thread.
  std::uintptr_t loadWait(std::memory_order order) const noexcept {
    return std::atomic_ref<std::uintptr_t>(const_cast<std::uintptr_t&>(wait)).load(order);
  }
  // The number and the time of the first wait, read by a dump once the slot led it here
  // (the subject's acquire orders them): relaxed.
  std::uint64_t loadId() const noexcept {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(id))
        .load(std::memory_order_relaxed);
  }
  std::int64_t loadFirstWaitMs() const noexcept {
    return std::atomic_ref<std::int64_t>(const_cast<std::int64_t&>(firstWaitMs))
        .load(std::memory_order_relaxed);
  }

  // The task's innermost coroutine suspends on `note` (a LazyWaitNote*). release: a dump
  // that reads the word (acquire) reads the note as written for this wait. noexcept:
  // a load and a store; on the task's first wait also a number, a clock read and the
  // claim of a ring slot. The path of a task known to have waited before is
  // publishNextWait.
  [[gnu::always_inline]] void publishWait(const void* note) noexcept {
    std::atomic_ref<std::uintptr_t> word(wait);
    // Relaxed: only the task's own threads (and a stall signal's handler on the thread
    // that runs it) write the word.
    if ((word.load(std::memory_order_relaxed) & 1) != 0) [[unlikely]] {
      publishFirstWait(note);
      return;
    }
    word.store(reinterpret_cast<std::uintptr_t>(note), std::memory_order_release);
  }
  // publishWait for a task that has waited before (its run on this thread was entered
  // from a published wait: publishWaitAndLeaveRun, monitored_task.h, tells): the store
  // alone.
  [[gnu::always_inline]] void publishNextWait(const void* note) noexcept {
    std::atomic_ref<std::uintptr_t>(wait).store(reinterpret_cast<std::uintptr_t>(note),
                                                std::memory_order_release);
  }
  // That coroutine resumed: the note is withdrawn, then the dump gate passed, before the
  // awaiter it describes goes. noexcept: a store and passDumpGate's bounded wait.
  [[gnu::always_inline]] void withdrawWait() noexcept {
    // Relaxed: passDumpGate orders it before its load (dump_gate.h).
    std::atomic_ref<std::uintptr_t>(wait).store(0, std::memory_order_relaxed);
    passDumpGate(wait);
  }

 private:
  [[gnu::cold]] WEFT_NOINLINE void publishFirstWait(const void* note) noexcept;
};
static_assert(std::is_trivially_default_constructible_v<TaskRecord>);
static_assert(std::atomic_ref<std::uintptr_t>::required_alignment <= alignof(std::uintptr_t));

// A fiber's slot: its subject only (0: free; kSlotEnd: the end of a ring; else the
// FiberCore*), written when the fiber is created, cleared when it is freed.
struct FiberSlot {
  std::atomic<std::uintptr_t> subject{0};
};
static_assert(sizeof(FiberSlot) == 8);

inline constexpr std::uintptr_t kSlotEnd = 1;

// A thread's position in its rings, and the ids it hands out. Thread-local; only its
// thread reads or writes it.
struct RegistryCursor {
  // The slots the next claims try first, of each kind. Until the thread's first claim of
  // a kind: a slot that reads as taken (gNoRegistrySlot, gNoFiberSlot), so that the claim
  // takes the slow path.
  RegistrySlot* next;
  FiberSlot* nextFiber;
  // Task numbers and fiber ids: blocks of the process-wide sequences, refilled when used
  // up.
  std::uint64_t nextTaskId;
  std::uint64_t taskIdEnd;
  std::uint64_t nextFiberId;
  std::uint64_t fiberIdEnd;
};

extern constinit RegistrySlot gNoRegistrySlot;
extern constinit FiberSlot gNoFiberSlot;

WEFT_FIXED_TLS inline constinit thread_local RegistryCursor tRegistryCursor WEFT_TLS_SYMBOL(
    "weft_detail_registry_cursor"){&gNoRegistrySlot, &gNoFiberSlot, 0, 0, 0, 0};

// The calling thread's cursor. A task's registration may be inlined into a coroutine's
// body, which can continue on another thread after a co_await: the address is computed
// afresh at each call, as localFrameCache()'s is (WEFT_THREAD_LOCAL_ACCESSOR).
WEFT_THREAD_LOCAL_ACCESSOR(RegistryCursor, localRegistryCursor, tRegistryCursor,
                           "weft_detail_registry_cursor")

// The claim's slow path (task_registry.cc), for `Slot` RegistrySlot or FiberSlot: sets
// the thread up on its first claim, skips taken slots, wraps around, grows the ring.
// Returns a free slot of the thread's ring; the caller moves the cursor past it. Aborts
// with a message if no memory is left for a ring. noexcept: see that.
template <class Slot>
Slot* claimSlotSlow(RegistryCursor& cursor) noexcept;

// Where the cursor of `Slot`s is.
template <class Slot>
[[gnu::always_inline]] inline Slot*& cursorOf(RegistryCursor& cursor) noexcept {
  if constexpr (std::is_same_v<Slot, FiberSlot>) {
    return cursor.nextFiber;
  } else {
    return cursor.next;
  }
}

// A free slot of the calling thread's ring of `Slot`s, taken by the caller: it fills the
// slot's other fields, then stores its subject (release). noexcept: loads and stores (the
// slow path aborts when out of memory).
template <class Slot>
[[gnu::always_inline]] inline Slot* claimSlot(RegistryCursor& cursor) noexcept {
  Slot*& next = cursorOf<Slot>(cursor);
  Slot* slot = next;
  // acquire: a slot released by another thread is reused after everything that thread
  // did with it (releaseSlot's release).
  if (slot->subject.load(std::memory_order_acquire) != 0) [[unlikely]]
    slot = claimSlotSlow<Slot>(cursor);
  next = slot + 1;
  return slot;
}

// Gives a claimed slot back, from any thread: its subject leaves the registry, and once
// this returns no dump reads it (passDumpGate). noexcept: a store and the gate's bounded
// wait.
template <class Slot>
inline void releaseSlot(Slot& slot) noexcept {
  // release: the owner's next claim of the slot (acquire) follows what we did.
  slot.subject.store(0, std::memory_order_release);
  passDumpGate(slot.subject);
}

// A fiber id, unique in the process, when the calling thread's block is used up: takes a
// new block (an atomic add) and returns its first id. noexcept: that add.
std::uint64_t refillFiberIds(RegistryCursor& cursor) noexcept;

}  // namespace weft::detail
