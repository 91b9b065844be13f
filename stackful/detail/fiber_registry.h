#pragma once

// The registry of live fibers, which task dumps (weft::dumpTasks) and gdb's `weft fibers`
// walk, and how they and async backtraces name a fiber.

#include <cstdint>
#include <string>

namespace weft::detail {

class FiberCore;

// The links of every live fiber in the registry (gFiberRegistry in fiber_registry.cc,
// read by name by tools/gdb/weft.py): two words, the whole cost of being listed (a parked
// fiber on a shared stack costs one heap block of 288 bytes). FiberCore's first base.
struct FiberListHook {
  FiberListHook* listPrev = nullptr;
  FiberListHook* listNext = nullptr;
};

// Lists `fiber` (at creation) / takes it off the list (at destruction, or earlier when
// its driver is destroyed while it is parked: a second call does nothing). noexcept: a
// spin lock and a few stores.
void registerFiber(FiberCore* fiber) noexcept;
void unregisterFiber(FiberCore* fiber) noexcept;

// How messages and async backtraces name a fiber: `fiber 3` or `fiber 3 "reader"`. Throws
// std::bad_alloc.
std::string fiberLabel(std::uint64_t id, const char* name);

}  // namespace weft::detail
