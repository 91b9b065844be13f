#pragma once

// How fibers are listed in the registry of tasks and fibers (coro/detail/registry_slot.h),
// which task dumps (weft::dumpTasks) and gdb's `weft fibers` read, and how they and async
// backtraces name a fiber.

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "weft/coro/runtime_hooks.h"

namespace weft::detail {

class FiberCore;

// Lists `fiber` (at its creation, on the creating thread) under a new id, which it
// stores in `id`: claims a fiber slot of the thread's ring, whose subject is the fiber.
// Returns the slot: with the word the fiber keeps it in, the whole cost of being listed
// (two words, as a list of fibers' links took). noexcept: loads and stores (an atomic add
// per block of ids; the claim's slow path aborts when out of memory).
inline runtime::FiberSlot* registerFiber(const FiberCore* fiber, std::uint64_t& id) noexcept {
  runtime::RegistryCursor& cursor = runtime::localRegistryCursor();
  id = cursor.nextFiberId != cursor.fiberIdEnd ? cursor.nextFiberId++
                                               : runtime::refillFiberIds(cursor);
  runtime::FiberSlot* slot = runtime::claimSlot<runtime::FiberSlot>(cursor);
  // release: a dump that reads the subject (acquire) reads the fiber as constructed.
  slot->subject.store(reinterpret_cast<std::uintptr_t>(fiber), std::memory_order_release);
  return slot;
}

// Takes the fiber off the registry (at its destruction, or earlier when its driver is
// destroyed while it is parked: a second call does nothing): once this returns, no dump
// reads the fiber. From any thread. noexcept: a store and the dump gate's bounded wait.
inline void unregisterFiber(runtime::FiberSlot*& slot) noexcept {
  if (slot != nullptr) runtime::releaseSlot(*std::exchange(slot, nullptr));
}

// How messages and async backtraces name a fiber: `fiber 3` or `fiber 3 "reader"`. Throws
// std::bad_alloc.
std::string fiberLabel(std::uint64_t id, const char* name);

}  // namespace weft::detail
