#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "weft/stackful/protected_stack.h"

namespace weft {

// StackPool: recycles ProtectedStacks of one size; the default stack source of fibers.
//
// Semantics: acquire() hands out a cached stack if there is one, else maps a new one;
// release() puts a stack back into the cache, or unmaps it when the cache already holds
// maxCached stacks (or the stack has another size). Creating a fiber thus costs no system
// call in the steady state, while the cache stays bounded: every cached stack is two
// kernel memory mappings (the guard page splits it), and vm.max_map_count (65530 by
// default) caps the mappings of a process. A recycled stack keeps the pages its previous
// fiber touched (no madvise: that would be a system call per fiber), so the cache's
// resident memory is at most maxCached stacks' worth of touched pages.
//
// defaultPool(): the process-wide pool fibers use when given no stack: stacks of
// ProtectedStack::kDefaultSize bytes, at most kDefaultMaxCached (64) cached. It is never
// destroyed, so fibers may be destroyed during static destruction.
//
// Preconditions: the pool outlives every fiber whose stack comes from it (the fiber
// gives its stack back when it finishes or is destroyed).
// Errors: acquire() throws what ProtectedStack's constructor throws (std::system_error).
// Thread safety: acquire() and release() may be called from any thread concurrently (a
// mutex guards the cache; it is held for a few instructions).
//
// Example:
//   weft::StackPool pool(64 * 1024, 16);
//   weft::Fiber<> f([] { /* ... */ }, pool);  // its stack returns to `pool`
class StackPool {
 public:
  static constexpr std::size_t kDefaultMaxCached = 64;

  explicit StackPool(std::size_t stackSize = ProtectedStack::kDefaultSize,
                     std::size_t maxCached = kDefaultMaxCached);
  // Unmaps the cached stacks.
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  // A stack of stackSize() usable bytes: a cached one, or a newly mapped one.
  ProtectedStack acquire();
  // Takes `stack` back. Why noexcept: called from fiber destructors; the cache's storage
  // is reserved up front, so caching never allocates.
  void release(ProtectedStack&& stack) noexcept;

  // Usable bytes of each stack (the requested size rounded up to whole pages).
  // noexcept: a constant.
  std::size_t stackSize() const noexcept { return stackSize_; }
  std::size_t maxCached() const noexcept { return maxCached_; }
  // How many stacks are cached right now.
  std::size_t cached() const;

  // The process-wide pool (see the class comment), created by the first call.
  // Errors: throws std::bad_alloc when the pool cannot be created (the object and its
  // cache's storage are allocated then); the next call tries again. Not noexcept for that
  // reason: the first Fiber or spawnFiber under memory exhaustion gets the exception
  // instead of std::terminate. Every later call only reads a pointer.
  static StackPool& defaultPool();

 private:
  const std::size_t stackSize_;
  const std::size_t maxCached_;
  mutable std::mutex mutex_;
  std::vector<ProtectedStack> cache_;  // guarded by mutex_
};

}  // namespace weft
