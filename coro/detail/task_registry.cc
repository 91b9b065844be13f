#include "weft/coro/detail/task_registry.h"

#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>

namespace weft::detail {

// A ring of slots: this header, then `capacity` slots, then one whose subject is kSlotEnd.
// Not in an anonymous namespace, like what follows: gdb's `weft tasks` and `weft fibers`
// read them by name (tools/gdb/weft.py).
struct RegistryRing {
  RegistryRing* next;      // the thread's older rings (a ring is never freed)
  std::uint64_t capacity;  // slots, the end marker not counted
  std::uint64_t padding[2];  // the slots start at a 32-byte boundary, two per cache line

  RegistrySlot* slots() noexcept { return reinterpret_cast<RegistrySlot*>(this + 1); }
};
static_assert(sizeof(RegistryRing) == 32);

// The rings of one thread, from its first claim to its end; then of the next thread that
// adopts them (`owned` false in between). Never freed.
struct RegistryThread {
  RegistryThread* nextThread = nullptr;    // every RegistryThread: gRegistryThreads
  std::atomic<RegistryRing*> rings{nullptr};  // newest first
  // Below: its owner's only.
  RegistryRing* current = nullptr;  // the ring claims come from
  RegistrySlot* savedNext = nullptr;  // the cursor, while no thread owns it
  std::uint64_t takenThisLap = 0;   // taken slots the claims of this lap stepped over
  std::atomic<bool> owned{true};
};

constinit RegistrySlot gNoRegistrySlot{kSlotEnd, 0, 0, 0};
// Every RegistryThread, newest first (release when one is added).
constinit std::atomic<RegistryThread*> gRegistryThreads{nullptr};

namespace {

constexpr std::uint64_t kFirstRingSlots = 128;  // 4 KiB
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

RegistryRing* newRing(std::uint64_t capacity) noexcept {
  const std::size_t bytes = sizeof(RegistryRing) + (capacity + 1) * sizeof(RegistrySlot);
  void* memory = ::operator new(bytes, std::align_val_t{64}, std::nothrow);
  if (memory == nullptr) abortOutOfMemory();
  auto* ring = ::new (memory) RegistryRing{nullptr, capacity, {0, 0}};
  RegistrySlot* slots = ring->slots();
  for (std::uint64_t i = 0; i < capacity; ++i) ::new (&slots[i]) RegistrySlot();
  ::new (&slots[capacity]) RegistrySlot{kSlotEnd, 0, 0, 0};
  return ring;
}

// Adds `ring` to `thread`'s rings and claims from it from now on.
void useRing(RegistryThread& thread, RegistryRing* ring) noexcept {
  ring->next = thread.current;
  thread.current = ring;
  // release: a dump that finds the ring (acquire) finds its slots initialised.
  thread.rings.store(ring, std::memory_order_release);
}

// The cursor at the start of a lap of the thread's ring: a larger ring when the last lap
// found half of it taken.
RegistrySlot* startLap(RegistryThread& thread) noexcept {
  if (thread.takenThisLap * 2 > thread.current->capacity) {
    useRing(thread, newRing(thread.current->capacity * 2));
  }
  thread.takenThisLap = 0;
  return thread.current->slots();
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
    thread->savedNext = cursor.next;
    cursor.next = &gNoRegistrySlot;
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
      useRing(*thread, newRing(kFirstRingSlots));
      thread->savedNext = thread->current->slots();
      thread->nextThread = gRegistryThreads.load(std::memory_order_relaxed);
      // release: a dump that finds the thread (acquire) finds its first ring.
      gRegistryThreads.store(thread, std::memory_order_release);
    }
  }
  tRegistryThread = thread;
  cursor.next = thread->savedNext;
  return *thread;
}

}  // namespace

RegistrySlot* claimSlotSlow(RegistryCursor& cursor) noexcept {
  RegistryThread* thread = tRegistryThread;
  if (thread == nullptr) thread = &attachThread(cursor);
  RegistrySlot* slot = cursor.next;
  for (;;) {
    // acquire: as in claimSlot().
    const std::uintptr_t subject = slot->subject.load(std::memory_order_acquire);
    if (subject == 0) return slot;
    if (subject == kSlotEnd) {
      slot = startLap(*thread);
    } else {
      ++thread->takenThisLap;
      ++slot;
    }
  }
}

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

void RegistrySlot::publishFirstWait(const void* note, std::uintptr_t previous) noexcept {
  // Relaxed: published by the release below.
  firstWaitMs.store(coarseMilliseconds(), std::memory_order_relaxed);
  std::uint64_t own = 0;
  for (;;) {
    // A dump's number if one gave it one (the word's upper bits), else one of its own.
    std::uint64_t number = previous >> 1;
    if (number == 0) {
      if (own == 0) own = nextTaskId();
      number = own;
    }
    id.store(number, std::memory_order_relaxed);
    // release: a dump that reads the note (acquire) reads the number and the time. The
    // word changes meanwhile only if a dump numbers the task: then again, with its number.
    if (wait.compare_exchange_weak(previous, reinterpret_cast<std::uintptr_t>(note),
                                   std::memory_order_release, std::memory_order_relaxed)) {
      return;
    }
  }
}

std::uint64_t numberTask(RegistrySlot& slot, std::uintptr_t subject) noexcept {
  // acquire: an even word was published after the number (publishFirstWait).
  std::uintptr_t word = slot.wait.load(std::memory_order_acquire);
  if ((word & 1) == 0) return slot.id.load(std::memory_order_relaxed);
  if (word != kNeverWaited) return word >> 1;
  const std::uint64_t number = nextTaskId();
  if (!slot.wait.compare_exchange_strong(word, (number << 1) | 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
    // The task first waited meanwhile: its own number.
    return (word & 1) == 0 ? slot.id.load(std::memory_order_relaxed) : word >> 1;
  }
  // The slot may have been released and claimed for another task before the exchange
  // (its owner does not wait for this read to reuse it): the number is then that task's,
  // taken back if it has not waited since.
  if (slot.subject.load(std::memory_order_acquire) != subject) {
    std::uintptr_t given = (number << 1) | 1;
    slot.wait.compare_exchange_strong(given, kNeverWaited, std::memory_order_relaxed);
  }
  return number;
}

void forEachRegistrySlot(void (*visit)(RegistrySlot& slot, void* context), void* context) {
  // acquire: each thread and ring is read as it was initialised (useRing, attachThread).
  for (RegistryThread* thread = gRegistryThreads.load(std::memory_order_acquire);
       thread != nullptr; thread = thread->nextThread) {
    for (RegistryRing* ring = thread->rings.load(std::memory_order_acquire); ring != nullptr;
         ring = ring->next) {
      RegistrySlot* slots = ring->slots();
      for (std::uint64_t i = 0; i < ring->capacity; ++i) {
        // Relaxed: a first look; `visit` reads it again inside its DumpRead.
        if (slots[i].subject.load(std::memory_order_relaxed) != 0) visit(slots[i], context);
      }
    }
  }
}

void setFiberDumper(DumpFiber dumper) noexcept {
  gFiberDumper.store(dumper, std::memory_order_release);
}
DumpFiber fiberDumper() noexcept { return gFiberDumper.load(std::memory_order_acquire); }

}  // namespace weft::detail
