#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/spin_lock.h"

namespace weft::detail {

// The registry of live work that weft::dumpTasks() (coro/task_dump.h) and gdb's
// `weft tasks` / `weft fibers` (tools/gdb/weft.py) list: every root task (a Lazy started
// by syncAwait, start(), spawn() or TaskGroup::spawn()) and every fiber. A record is
// embedded in what it describes (the root's completion sink, the fiber) and linked while
// that lives. Lazys awaited by others are not roots: a dump reaches them from their root.
//
// Cost: registering and unregistering lock one of kTaskRegistryShards spin locks (the
// calling thread's shard, so threads rarely meet) and read the coarse monotonic clock.
// Nothing is done per await or per switch. Root tasks are registered only with
// WEFT_TASK_TRACKING (coro/detail/config.h); fibers always.

struct TaskRecord;

// What a dump shows of one record.
struct TaskDumpEntry {
  std::string title;    // "task 12 (start())", "fiber 3 \"reader\""
  std::string state;    // "waiting on Mutex::lock", "parked on ...", "running or runnable"
  AsyncBacktrace trace;  // from what it waits on up to its root
};

// The kind of a record: where it comes from ("start()", "fiber") and how to dump it. One
// static instance per kind.
struct TaskRecordType {
  const char* origin;
  // Fills `entry` (title, state, trace) from the record. Runs with the record's shard
  // locked, so the record's subject is alive, inside a DumpSession; what it reaches from
  // there it reads inside a DumpRead (coro/detail/dump_gate.h), which keeps it from being
  // freed or reused meanwhile. noexcept: a diagnostic.
  void (*dump)(const TaskRecord& record, TaskDumpEntry& entry) noexcept;
};

struct TaskRecord {
  TaskRecord* prev = nullptr;
  TaskRecord* next = nullptr;
  const TaskRecordType* type = nullptr;
  const void* subject = nullptr;  // a root coroutine's LazyPromiseBase, a FiberCore...
  std::uint64_t id = 0;           // task number (fibers use their fiber id)
  std::int64_t createdMs = 0;     // CLOCK_MONOTONIC_COARSE, milliseconds
  std::uint32_t shard = 0;
};

// Links `record` (of `type`, describing `subject`) into the registry and gives it an id
// and its creation time. unregisterTask unlinks it and clears its type. noexcept: a lock, pointer stores and a clock read.
// Thread safety: any thread; a record is unregistered at most once, after registering.
void registerTask(TaskRecord& record, const TaskRecordType& type, const void* subject) noexcept;
void unregisterTask(TaskRecord& record) noexcept;

// CLOCK_MONOTONIC_COARSE in milliseconds: what records' creation times are read with.
std::int64_t coarseMilliseconds() noexcept;

// Calls visit(record, context) for every registered record, one shard at a time with its
// lock held: `visit` must not register, unregister or block.
void forEachTask(void (*visit)(const TaskRecord& record, void* context), void* context);

// Set by weft::stackful: adds an entry per live fiber (fibers have a registry of their
// own, stackful/detail/fiber_registry.cc, two words per fiber). May throw std::bad_alloc.
using ListFibers = void (*)(std::vector<TaskDumpEntry>& entries);
void setFiberLister(ListFibers lister) noexcept;
ListFibers fiberLister() noexcept;

// A record for a root Lazy (the subject is its promise): its dump follows what the root
// waits on down to the coroutine that waits on something else, and shows that
// coroutine's chain. One per origin ("syncAwait", "start()", "spawn()",
// "TaskGroup::spawn()").
extern const TaskRecordType kSyncAwaitRoot;
extern const TaskRecordType kStartRoot;
extern const TaskRecordType kSpawnRoot;
extern const TaskRecordType kTaskGroupRoot;

// A root task's record (a completion sink holds one): registered from construction until
// finish(), which its owner calls before the root's frame is destroyed, or destruction.
class RootTaskRecord {
 public:
  // Registered only with WEFT_TASK_TRACKING (coro/detail/config.h).
  RootTaskRecord(const TaskRecordType& type, const LazyPromiseBase& root) noexcept {
    if constexpr (WEFT_TASK_TRACKING) registerTask(record_, type, &root);
  }
  RootTaskRecord(const RootTaskRecord&) = delete;
  RootTaskRecord& operator=(const RootTaskRecord&) = delete;
  ~RootTaskRecord() { finish(); }

  void finish() noexcept {
    if (record_.type != nullptr) unregisterTask(record_);
  }

 private:
  TaskRecord record_;
};

}  // namespace weft::detail
