#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace weft {

// ProtectedStack: one fiber stack, mmap'd, with an inaccessible guard page below it.
//
// Semantics: the constructor maps `guard + size` bytes (both rounded up to whole pages)
// with MAP_NORESERVE and turns the lowest page(s) into a PROT_NONE guard. Memory is
// committed by the kernel only when touched, so a large stack costs address space, not
// RAM: a fiber that uses 3 KiB of a 256 KiB stack has one or two resident pages. A fiber
// that runs past the bottom hits the guard page and weft prints
//   weft: stack overflow in fiber <name or id> (stack <N> bytes)
// from its SIGSEGV handler, then aborts (never silent corruption). The handler is
// installed the first time a ProtectedStack is made; see stackful/detail/stack_guard.h.
//
// Default size: kDefaultSize (256 KiB) usable bytes. That is 2x Boost.Context's and 16x
// folly::fibers' default, chosen so that ordinary library code (a regex, a recursive
// parser, an iostream) runs in a fiber as it does on a thread, while 100,000 live fibers
// still reserve only 25 GiB of address space (of 128 TiB) and commit only what they touch.
//
// Each stack is two kernel memory mappings (the guard and the stack). Linux limits a
// process to vm.max_map_count mappings (65530 by default): about 32,000 live protected
// stacks. For more parked fibers use shared stacks (stackful/shared_stack.h) or raise
// vm.max_map_count.
//
// Preconditions: none (size 0 means the smallest stack, one page).
// Errors: the constructor throws std::system_error when the kernel refuses the mapping
// (ENOMEM: out of address space or of vm.max_map_count mappings; the message says which
// limit to look at).
// Thread safety: a value type; distinct stacks may be used on distinct threads.
//
// Example:
//   weft::ProtectedStack stack(64 * 1024);
//   weft::Fiber<> fiber([] { /* ... */ }, std::move(stack));
class ProtectedStack {
 public:
  static constexpr std::size_t kDefaultSize = 256 * 1024;

  // An empty stack (valid() == false): what a moved-from stack is.
  ProtectedStack() noexcept = default;
  // Maps a stack of at least `size` usable bytes (rounded up to whole pages) with
  // `guardPages` inaccessible pages below it (at least 1).
  explicit ProtectedStack(std::size_t size, std::size_t guardPages = 1);

  ProtectedStack(ProtectedStack&& other) noexcept
      : mapping_(std::exchange(other.mapping_, nullptr)),
        mappingSize_(std::exchange(other.mappingSize_, 0)),
        guardSize_(std::exchange(other.guardSize_, 0u)),
        valgrindId_(std::exchange(other.valgrindId_, 0)) {}
  ProtectedStack& operator=(ProtectedStack&& other) noexcept {
    if (this != &other) {
      release();
      mapping_ = std::exchange(other.mapping_, nullptr);
      mappingSize_ = std::exchange(other.mappingSize_, 0);
      guardSize_ = std::exchange(other.guardSize_, 0u);
      valgrindId_ = std::exchange(other.valgrindId_, 0);
    }
    return *this;
  }
  // Unmaps the stack. Precondition: no fiber is running or suspended on it. (The test
  // inline: moved-from stacks are destroyed on every fiber's exit.)
  ~ProtectedStack() {
    if (mapping_ != nullptr) release();
  }

  // noexcept on the accessors: they read members.
  bool valid() const noexcept { return mapping_ != nullptr; }
  // One past the highest usable byte (stacks grow down from here).
  void* top() const noexcept { return static_cast<char*>(mapping_) + mappingSize_; }
  // The lowest usable byte, right above the guard.
  void* bottom() const noexcept { return static_cast<char*>(mapping_) + guardSize_; }
  // Usable bytes, [bottom(), top()).
  std::size_t size() const noexcept { return mappingSize_ - guardSize_; }
  // The lowest address of the guard, which spans [guardBegin(), bottom()).
  void* guardBegin() const noexcept { return mapping_; }

  // The size of a page (sysconf(_SC_PAGESIZE), read once). noexcept: a cached value.
  static std::size_t pageSize() noexcept;

 private:
  void release() noexcept;

  void* mapping_ = nullptr;
  std::size_t mappingSize_ = 0;
  std::uint32_t guardSize_ = 0;   // 32 bits: keeps a fiber's control block small
  std::uint32_t valgrindId_ = 0;  // VALGRIND_STACK_REGISTER's id (0 outside valgrind)
};

namespace detail {

// Under ASan: clears the poison that a fiber's frames left in the stack [bottom, top)
// (a finished fiber never returns from its outermost frames, and a destroyed one is
// unwound without ASan seeing every frame leave), so that the next fiber on the stack,
// or a later mapping at its address, does not inherit it. The shadow is not written but
// given back to the kernel (whole pages; the partial pages at both ends are written):
// unpoisoning the whole reservation with __asan_unpoison_memory_region wrote its whole
// shadow, an eighth of its size, committed for good (seconds and gigabytes for huge
// stacks or 100,000 fibers). The cost is now that of what the fiber touched. Nothing
// outside ASan. noexcept: a system call whose failure falls back to writing the shadow.
void asanUnpoisonStack(void* bottom, void* top) noexcept;

}  // namespace detail

}  // namespace weft
