#include "weft/coro/detail/task_registry.h"

#include <time.h>

#include <atomic>
#include <mutex>

namespace weft::detail {

// The registry's shards, each a circular list around its `head`. Not in an anonymous
// namespace: gdb's `weft tasks` reads it (tools/gdb/weft.py) by this name.
struct TaskRegistryShard {
  SpinLock lock;
  std::uint64_t nextId = 0;
  TaskRecord head;
};
inline constexpr std::uint32_t kTaskRegistryShards = 16;
alignas(64) TaskRegistryShard gTaskRegistry[kTaskRegistryShards];

namespace {

// The calling thread's shard: threads take shards in turn, so that two threads rarely
// share one lock.
std::uint32_t shardOfThisThread() noexcept {
  static std::atomic<std::uint32_t> nextShard{0};
  // Relaxed: only hands out distinct numbers.
  thread_local const std::uint32_t shard =
      nextShard.fetch_add(1, std::memory_order_relaxed) % kTaskRegistryShards;
  return shard;
}

}  // namespace

std::int64_t coarseMilliseconds() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

namespace {
std::atomic<ListFibers> gFiberLister{nullptr};
}  // namespace

void setFiberLister(ListFibers lister) noexcept {
  gFiberLister.store(lister, std::memory_order_release);
}
ListFibers fiberLister() noexcept { return gFiberLister.load(std::memory_order_acquire); }

void registerTask(TaskRecord& record, const TaskRecordType& type, const void* subject) noexcept {
  const std::uint32_t index = shardOfThisThread();
  TaskRegistryShard& shard = gTaskRegistry[index];
  record.type = &type;
  record.subject = subject;
  record.shard = index;
  record.createdMs = coarseMilliseconds();
  std::lock_guard<SpinLock> lock(shard.lock);
  if (shard.head.next == nullptr) shard.head.next = shard.head.prev = &shard.head;
  // Ids: the shard's count times the shard count, plus the shard: unique, no shared atomic.
  record.id = ++shard.nextId * kTaskRegistryShards + index;
  record.prev = &shard.head;
  record.next = shard.head.next;
  shard.head.next->prev = &record;
  shard.head.next = &record;
}

void unregisterTask(TaskRecord& record) noexcept {
  TaskRegistryShard& shard = gTaskRegistry[record.shard];
  {
    std::lock_guard<SpinLock> lock(shard.lock);
    record.prev->next = record.next;
    record.next->prev = record.prev;
  }
  record.prev = record.next = nullptr;
  record.type = nullptr;
}

void forEachTask(void (*visit)(const TaskRecord& record, void* context), void* context) {
  for (TaskRegistryShard& shard : gTaskRegistry) {
    std::lock_guard<SpinLock> lock(shard.lock);
    if (shard.head.next == nullptr) continue;
    // Oldest first: records are pushed at the head.
    for (const TaskRecord* r = shard.head.prev; r != &shard.head; r = r->prev) visit(*r, context);
  }
}

}  // namespace weft::detail
