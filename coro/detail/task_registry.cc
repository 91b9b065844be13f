#include "weft/coro/detail/task_registry.h"

#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <type_traits>

namespace weft::detail {

// A ring of slots (RegistrySlots or FiberSlots): this header, then `capacity` slots, then
// one whose subject is kSlotEnd. Not in an anonymous namespace, like what follows: gdb's
// `weft tasks` and `weft fibers` read them by name (tools/gdb/weft.py).
struct RegistryRing {
  RegistryRing* next;      // the thread's older rings of the same kind (never freed)
  std::uint64_t capacity;  // slots, the end marker not counted
  std::uint64_t padding[2];  // the header is 32 bytes (gdb's `weft tasks` reads past it)

  template <class Slot>
  Slot* slots() noexcept {
    return reinterpret_cast<Slot*>(this + 1);
  }
};
static_assert(sizeof(RegistryRing) == 32);

// A thread's rings of one kind, and where its claims are (its owner's only).
struct RegistryRings {
  std::atomic<RegistryRing*> rings{nullptr};  // newest first
  RegistryRing* current = nullptr;  // the ring claims come from
  void* savedNext = nullptr;        // the cursor, while no thread owns the rings
  std::uint64_t takenThisLap = 0;   // taken slots the claims of this lap stepped over
};

// The rings of one thread, from its first claim to its end; then of the next thread that
// adopts them (`owned` false in between). Never freed.
struct RegistryThread {
  RegistryThread* nextThread = nullptr;  // every RegistryThread: gRegistryThreads
  RegistryRings tasks;   // of RegistrySlots
  RegistryRings fibers;  // of FiberSlots
  std::atomic<bool> owned{true};
};

constinit RegistrySlot gNoRegistrySlot{kSlotEnd};
constinit FiberSlot gNoFiberSlot{kSlotEnd};
// Every RegistryThread, newest first (release when one is added).
constinit std::atomic<RegistryThread*> gRegistryThreads{nullptr};

namespace {

constexpr std::uint64_t kFirstTaskSlots = 128;   // 4 KiB
constexpr std::uint64_t kFirstFiberSlots = 128;  // 1 KiB
constexpr std::uint64_t kFiberIdBlock = 64;
constexpr std::uint64_t kTaskIdBlock = 64;

std::mutex gThreadsMutex;  // adds to gRegistryThreads, adopts released ones
constinit std::atomic<std::uint64_t> gNextTaskId{1};
constinit std::atomic<std::uint64_t> gNextFiberId{1};
constinit std::atomic<DumpFiber> gFiberDumper{nullptr};

constinit thread_local RegistryThread* tRegistryThread = nullptr;

[[noreturn]] void abortOutOfMemory() noexcept {
  std::fputs("weft: out of memory for the registry of tasks and fibers\n", stderr);
  std::abort();
}

template <class Slot>
RegistryRing* newRing(std::uint64_t capacity) noexcept {
  const std::size_t bytes = sizeof(RegistryRing) + (capacity + 1) * sizeof(Slot);
  void* memory = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
  if (memory == nullptr) abortOutOfMemory();
  auto* ring = ::new (memory) RegistryRing{nullptr, capacity, {0, 0}};
  Slot* slots = ring->slots<Slot>();
  for (std::uint64_t i = 0; i < capacity; ++i) ::new (&slots[i]) Slot();
  ::new (&slots[capacity]) Slot();
  slots[capacity].subject.store(kSlotEnd, std::memory_order_relaxed);
  return ring;
}

// Adds `ring` to `rings` and claims from it from now on.
void useRing(RegistryRings& rings, RegistryRing* ring) noexcept {
  ring->next = rings.current;
  rings.current = ring;
  // release: a dump that finds the ring (acquire) finds its slots initialised.
  rings.rings.store(ring, std::memory_order_release);
}

template <class Slot>
RegistryRings& ringsOf(RegistryThread& thread) noexcept {
  if constexpr (std::is_same_v<Slot, FiberSlot>) {
    return thread.fibers;
  } else {
    return thread.tasks;
  }
}

// The cursor at the start of a lap of a ring: a larger ring when the last lap found half
// of it taken.
template <class Slot>
Slot* startLap(RegistryRings& rings) noexcept {
  if (rings.takenThisLap * 2 > rings.current->capacity) {
    useRing(rings, newRing<Slot>(rings.current->capacity * 2));
  }
  rings.takenThisLap = 0;
  return rings.current->slots<Slot>();
}

// A task number, unique in the process, from the calling thread's block.
std::uint64_t nextTaskId() noexcept {
  RegistryCursor& cursor = localRegistryCursor();
  if (cursor.nextTaskId == cursor.taskIdEnd) {
    // Relaxed: numbers need only be unique.
    cursor.nextTaskId = gNextTaskId.fetch_add(kTaskIdBlock, std::memory_order_relaxed);
    cursor.taskIdEnd = cursor.nextTaskId + kTaskIdBlock;
  }
  return cursor.nextTaskId++;
}

// Gives the thread's rings to the next thread that registers something, when the thread
// exits. Constructed on the thread's first claim.
struct ThreadReleaser {
  ~ThreadReleaser() {
    RegistryThread* thread = tRegistryThread;
    if (thread == nullptr) return;
    RegistryCursor& cursor = localRegistryCursor();
    thread->tasks.savedNext = cursor.next;
    thread->fibers.savedNext = cursor.nextFiber;
    cursor.next = &gNoRegistrySlot;
    cursor.nextFiber = &gNoFiberSlot;
    tRegistryThread = nullptr;
    // release: the adopter (acquire) continues from where this thread left.
    thread->owned.store(false, std::memory_order_release);
  }
};
thread_local ThreadReleaser tThreadReleaser;

// The calling thread's first claim: a RegistryThread that another thread left, or a new
// one. Sets the cursor.
RegistryThread& attachThread(RegistryCursor& cursor) noexcept {
  [[maybe_unused]] ThreadReleaser* volatile releaser = &tThreadReleaser;  // constructs it
  RegistryThread* thread = nullptr;
  {
    std::lock_guard<std::mutex> lock(gThreadsMutex);
    for (RegistryThread* t = gRegistryThreads.load(std::memory_order_relaxed); t != nullptr;
         t = t->nextThread) {
      bool expected = false;
      // acquire: pairs with ThreadReleaser's release.
      if (t->owned.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
        thread = t;
        break;
      }
    }
    if (thread == nullptr) {
      thread = new (std::nothrow) RegistryThread();
      if (thread == nullptr) abortOutOfMemory();
      useRing(thread->tasks, newRing<RegistrySlot>(kFirstTaskSlots));
      thread->tasks.savedNext = thread->tasks.current->slots<RegistrySlot>();
      useRing(thread->fibers, newRing<FiberSlot>(kFirstFiberSlots));
      thread->fibers.savedNext = thread->fibers.current->slots<FiberSlot>();
      thread->nextThread = gRegistryThreads.load(std::memory_order_relaxed);
      // release: a dump that finds the thread (acquire) finds its first ring.
      gRegistryThreads.store(thread, std::memory_order_release);
    }
  }
  tRegistryThread = thread;
  cursor.next = static_cast<RegistrySlot*>(thread->tasks.savedNext);
  cursor.nextFiber = static_cast<FiberSlot*>(thread->fibers.savedNext);
  return *thread;
}

}  // namespace

template <class Slot>
Slot* claimSlotSlow(RegistryCursor& cursor) noexcept {
  RegistryThread* thread = tRegistryThread;
  if (thread == nullptr) thread = &attachThread(cursor);
  RegistryRings& rings = ringsOf<Slot>(*thread);
  Slot* slot = cursorOf<Slot>(cursor);
  for (;;) {
    // acquire: as in claimSlot().
    const std::uintptr_t subject = slot->subject.load(std::memory_order_acquire);
    if (subject == 0) return slot;
    if (subject == kSlotEnd) {
      slot = startLap<Slot>(rings);
    } else {
      ++rings.takenThisLap;
      ++slot;
    }
  }
}
template RegistrySlot* claimSlotSlow<RegistrySlot>(RegistryCursor& cursor) noexcept;
template FiberSlot* claimSlotSlow<FiberSlot>(RegistryCursor& cursor) noexcept;

std::uint64_t refillFiberIds(RegistryCursor& cursor) noexcept {
  // Relaxed: ids need only be unique.
  const std::uint64_t first = gNextFiberId.fetch_add(kFiberIdBlock, std::memory_order_relaxed);
  cursor.nextFiberId = first + 1;
  cursor.fiberIdEnd = first + kFiberIdBlock;
  return first;
}

std::int64_t coarseMilliseconds() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

void TaskRecord::publishFirstWait(const void* note) noexcept {
  // The number a stall report gave it in its first run, if one did (registry_slot.h).
  const std::uint64_t given =
      std::atomic_ref<std::uintptr_t>(wait).load(std::memory_order_relaxed) >> 1;
  RegistrySlot* claimed = claimSlot<RegistrySlot>(localRegistryCursor());
  slot = claimed;
  // Relaxed, all of them: published by the subject's release below (a dump finds the
  // record only through the slot).
  std::atomic_ref<std::int64_t>(firstWaitMs).store(coarseMilliseconds(), std::memory_order_relaxed);
  std::atomic_ref<std::uint64_t>(id).store(given != 0 ? given : nextTaskId(),
                                           std::memory_order_relaxed);
  // `slot` before `wait` turns even, for a stall signal's handler on this thread, which
  // reads `slot` once it sees `wait` even (task_dump.cc): a signal fence keeps the order.
  std::atomic_signal_fence(std::memory_order_release);
  std::atomic_ref<std::uintptr_t>(wait).store(reinterpret_cast<std::uintptr_t>(note),
                                              std::memory_order_relaxed);
  // The root: the outermost coroutine of the waiting one's chain that belongs to this task
  // (the chain is suspended on this thread: it holds still while we read it). Not stored
  // where the task was started, which names it in the running-root word instead
  // (running_root.h).
  const LazyPromiseBase* promise = static_cast<const LazyWaitNote*>(note)->waiter;
  for (;;) {
    const LazyPromiseBase* parent = promise->asyncParent().promise();
    if (parent == nullptr || parent->rootRecord() != this) break;
    promise = parent;
  }
  root = promise;
  // release: a dump that reads the subject (acquire) reads the record and the note as
  // written here.
  claimed->subject.store(reinterpret_cast<std::uintptr_t>(this), std::memory_order_release);
}

std::uint64_t takeTaskNumber() noexcept {
  // Relaxed: numbers need only be unique. A lock-free add: async-signal-safe.
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  return gNextTaskId.fetch_add(1, std::memory_order_relaxed);
}

namespace {

template <class Slot>
void forEachSlot(const RegistryRings& rings, void (*visit)(Slot& slot, void* context),
                 void* context) {
  // acquire: each ring is read as it was initialised (useRing).
  for (RegistryRing* ring = rings.rings.load(std::memory_order_acquire); ring != nullptr;
       ring = ring->next) {
    Slot* slots = ring->slots<Slot>();
    for (std::uint64_t i = 0; i < ring->capacity; ++i) {
      // Relaxed: a first look; `visit` reads it again inside its DumpRead.
      if (slots[i].subject.load(std::memory_order_relaxed) != 0) visit(slots[i], context);
    }
  }
}

}  // namespace

void forEachRegistrySlot(void (*visitTask)(RegistrySlot& slot, void* context),
                         void (*visitFiber)(FiberSlot& slot, void* context), void* context) {
  // acquire: each thread is read as it was initialised (attachThread).
  for (RegistryThread* thread = gRegistryThreads.load(std::memory_order_acquire);
       thread != nullptr; thread = thread->nextThread) {
    forEachSlot(thread->tasks, visitTask, context);
    forEachSlot(thread->fibers, visitFiber, context);
  }
}

void setFiberDumper(DumpFiber dumper) noexcept {
  gFiberDumper.store(dumper, std::memory_order_release);
}
DumpFiber fiberDumper() noexcept { return gFiberDumper.load(std::memory_order_acquire); }

}  // namespace weft::detail
