#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/registry_slot.h"
#include "weft/coro/detail/running_root.h"
#include "weft/executors/executor.h"

namespace weft::detail {

// What weft::dumpTasks() and gdb's `weft tasks` list: the registry of root tasks and
// fibers (coro/detail/registry_slot.h tells how it works). Root tasks are registered only
// with WEFT_TASK_TRACKING (coro/detail/config.h); fibers always.

// What a dump shows of one task or fiber.
struct TaskDumpEntry {
  std::string title;    // "task 12 (start())", "fiber 3 \"reader\""
  std::string state;    // "waiting on Mutex::lock", "parked on ...", "running or runnable"
  AsyncBacktrace trace;  // from what it waits on up to its root
  std::uint64_t order = 0;   // tasks by number, fibers by id, in the dump
  std::int64_t firstWaitMs = 0;  // a task that has waited: when it first did (its age)
};

// A task number, unique in the process, from the process-wide sequence itself (not a
// thread's block): for a stall signal's handler, which numbers a task in its first run
// (task_dump.cc). noexcept and async-signal-safe: a lock-free atomic add.
std::uint64_t takeTaskNumber() noexcept;

// CLOCK_MONOTONIC_COARSE in milliseconds: what ages are read with.
std::int64_t coarseMilliseconds() noexcept;

// Calls visitTask(slot, context) for every task slot and visitFiber(slot, context) for
// every fiber slot of every thread's rings that is not free, in a DumpSession; each makes
// its own DumpRead and reads the slot's subject again inside it (the slot may have been
// released, or claimed by something else, since).
void forEachRegistrySlot(void (*visitTask)(RegistrySlot& slot, void* context),
                         void (*visitFiber)(FiberSlot& slot, void* context), void* context);

// Set by weft::stackful: fills the entry of a fiber (a fiber slot's subject), inside the
// caller's DumpRead, which keeps it alive. noexcept: a diagnostic.
using DumpFiber = void (*)(const void* fiber, TaskDumpEntry& entry) noexcept;
void setFiberDumper(DumpFiber dumper) noexcept;
DumpFiber fiberDumper() noexcept;

// A root task's registration, from registerRootTask(), called once the root's completion
// sink is set (the sink's trace label names the task's origin: "syncAwait", "start()",
// "spawn()", "TaskGroup::spawn()"), to unregisterRootTask(), called once, before the
// root's frame and `record` (a member of its sink) are destroyed. Between the two, the
// task is started once, by runRootTask (on the calling thread) or scheduleRootTask (on
// an executor), never by a plain resume() or schedule() of its root: its first run
// starts there (below). All do nothing more than that without WEFT_TASK_TRACKING.
//
// Cost: registering writes one word of the record and points the root at it; starting
// writes one (the thread's running-root word, naming the root); the task is listed (a
// slot of the ring of the thread it runs on claimed, a number and the coarse clock read)
// only when it first waits (TaskRecord::publishWait), so a task that ends without
// waiting never touches the registry. Unregistering loads the record's wait word, and if
// the task was listed, clears its slot's subject and passes the dump gate. No lock, no
// atomic read-modify-write.
//
// What dumps do not list, then: a root task that has not waited yet (one queued that has
// never run, or one running its first stretch; stall reports name the latter, through
// the running-root word).
//
// A task that never ran (its executor refused it) was never listed: it may be dropped
// without unregisterRootTask.
//
// noexcept: stores. Precondition of unregisterRootTask: `root` was registered with
// `record` and is not unregistered yet.
// What a root's sink holds: a TaskRecord with WEFT_TASK_TRACKING, else nothing (a member
// [[no_unique_address]]).
struct NoTaskRecord {};
using RootTaskRecord = std::conditional_t<WEFT_TASK_TRACKING != 0, TaskRecord, NoTaskRecord>;

[[gnu::always_inline]] inline void registerRootTask(LazyPromiseBase& root,
                                                    RootTaskRecord& record) noexcept {
#if WEFT_TASK_TRACKING
  // A plain store: nothing reads the record before the task is listed (publishFirstWait's
  // release), and the task's own coroutines run after this.
  record.wait = kNeverWaited;
  root.setRootRecord(&record);
#else
  (void)root;
  (void)record;
#endif
}
//
// unregisterRootTask is called where the task ends, inside its run (its sink's
// completion): the run ends too. unregisterEndedRootTask is for a sink that ended the run
// where the task completed and unregisters it later, elsewhere (syncAwait's).
[[gnu::always_inline]] inline void unregisterEndedRootTask(RootTaskRecord& record) noexcept {
#if WEFT_TASK_TRACKING
  // Relaxed: written by the task's own threads, whose last write happens before this.
  // Odd: never waited, never listed (registry_slot.h).
  if ((record.loadWait(std::memory_order_relaxed) & 1) == 0) releaseSlot(*record.slot);
#else
  (void)record;
#endif
}
[[gnu::always_inline]] inline void unregisterRootTask(RootTaskRecord& record) noexcept {
#if WEFT_TASK_TRACKING
  endRootRun();  // for stall reports (running_root.h)
#endif
  unregisterEndedRootTask(record);
}

// The first run of a registered root task: where it starts, the thread's running-root
// word names the task by its root's promise (running_root.h, kFirstRun), so that a stall
// report names a task that spins before it ever waits (the record's root is stored at
// the task's first wait, TaskRecord::publishFirstWait). Only the starts of root tasks pay this:
// a Lazy's initial suspend is a plain std::suspend_always (a Lazy awaited by another is
// resumed by its awaiter's symmetric transfer and never needs it).

// Starts the root task of `root`, registered with `record`, on the calling thread: its
// first run, until it first suspends (or ends). For syncAwait, Lazy::start(), and
// Task::start(), spawn() and TaskGroup::spawn() on one of their executor's threads.
// noexcept: a weft coroutine's body catches what it throws (its promise keeps it).
template <class Promise>
[[gnu::always_inline]] inline void runRootTask(std::coroutine_handle<Promise> root,
                                               RootTaskRecord& record) noexcept {
  (void)record;
#if WEFT_TASK_TRACKING
  enterFirstRun(static_cast<const LazyPromiseBase*>(&root.promise()));
#endif
  root.resume();
}

// Room, in a root task's completion sink, for the Job that starts the task on another
// executor (scheduleRootTask): with WEFT_TASK_TRACKING the executor runs the job, whose
// run names the task in the running-root word of the thread that runs it, then resumes
// the root; without, the root's handle is scheduled and this is empty. Built only when
// the task is scheduled (a task started inline pays no store for it).
#if WEFT_TASK_TRACKING
class RootTaskJob {
 public:
  RootTaskJob() noexcept {}  // leaves the room unbuilt
  RootTaskJob(const RootTaskJob&) = delete;
  RootTaskJob& operator=(const RootTaskJob&) = delete;

  // Builds the job that starts the task whose root is `root` (`promise` its promise) by
  // resuming it. noexcept: stores.
  Job* make(const LazyPromiseBase* promise, std::coroutine_handle<> root) noexcept {
    auto* job = ::new (static_cast<void*>(room_)) Start;
    job->complete = &Start::run;
    job->promise = promise;
    job->root = root;
    return job;
  }

 private:
  struct Start final : Job {
    const LazyPromiseBase* promise;
    std::coroutine_handle<> root;

    // run false: the executor refused the job; scheduleRootTask's caller still owns the
    // task (and frees the sink this lives in). noexcept: see runRootTask. Trivially
    // destructible: nothing to destroy, and the job is not touched after the resume
    // (the task may have ended and freed its sink).
    static void run(Job* self, bool run) noexcept {
      if (!run) return;
      auto* job = static_cast<Start*>(self);
      const std::coroutine_handle<> root = job->root;
      enterFirstRun(job->promise);
      root.resume();
    }
  };
  static_assert(std::is_trivially_destructible_v<Start>);
  alignas(Start) std::byte room_[sizeof(Start)];
};
#else
struct RootTaskJob {};
#endif

// Starts the root task of `root`, registered with `record`, on `executor`, from a thread
// that is not one of its own: schedules `job` (with WEFT_TASK_TRACKING) or the root's
// handle. `job` lives in the task's sink.
// Errors: ExecutorShutDown if the executor refuses it (nothing ran: the caller still owns
// the frame, and frees the sink without unregistering the task); std::bad_alloc.
template <class Promise>
inline void scheduleRootTask(Executor* executor, std::coroutine_handle<Promise> root,
                             RootTaskRecord& record, RootTaskJob& job) {
  (void)record;
#if WEFT_TASK_TRACKING
  executor->scheduleJob(job.make(static_cast<const LazyPromiseBase*>(&root.promise()), root));
#else
  (void)job;
  executor->schedule(root);
#endif
}

}  // namespace weft::detail
