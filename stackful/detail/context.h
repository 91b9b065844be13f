#pragma once

// The switch core of weft's fibers: create a suspended execution context on a stack,
// switch between contexts, and run a function on top of a context as it resumes.
//
// Two interchangeable backends, chosen when weft is built (never mixed in one program):
//  - WEFT_FIBER_BACKEND_ASM=1: weft's own assembly, stackful/asm/*.S (x86-64 SysV and
//    aarch64 AAPCS ELF; see stackful/asm/README.md and stackful/detail/context_layout.h);
//  - WEFT_FIBER_BACKEND_BOOST=1: Boost.Context's fcontext (make/jump/ontop_fcontext).
// The build defines exactly one of them for everything that links weft::stackful (CMake
// option WEFT_FIBER_BACKEND=asm|boost, Bazel --config=boost); without a definition, the
// assembly is the default where it exists.
//
// This is the bottom layer: it knows nothing about fibers, stacks or sanitizers. Fiber
// (stackful/fiber.h) adds stack ownership, ASan/TSan/valgrind annotations and the
// unwinding of suspended fibers on top of it.
//
// A context handle (`void*`) names a SUSPENDED context: the value makeContext returns, or
// the `context` of a ContextTransfer (the context that just switched away). Each handle
// is resumed at most once: resuming it consumes it, and the context hands out a new
// handle the next time it suspends. Resuming a stale handle, or the running context's
// own handle, is undefined behaviour (the core does not check: a switch is a handful of
// instructions).

#include <cstddef>
#include <cstdint>

// An installed weft records its backend in build_config.h (see coro/detail/config.h).
#if __has_include("../../build_config.h")
#include "../../build_config.h"
#endif

// Without a definition from the build (a build that is not CMake's or Bazel's): weft's
// own assembly where weft has it (x86-64 and aarch64 ELF). Both macros are then defined,
// to 0 or 1, so that `#if WEFT_FIBER_BACKEND_ASM` is clean under -Wundef.
#if !defined(WEFT_FIBER_BACKEND_ASM) && !defined(WEFT_FIBER_BACKEND_BOOST) && \
    (defined(__x86_64__) || defined(__aarch64__)) && defined(__ELF__)
#define WEFT_FIBER_BACKEND_ASM 1
#endif
#ifndef WEFT_FIBER_BACKEND_ASM
#define WEFT_FIBER_BACKEND_ASM 0
#endif
#ifndef WEFT_FIBER_BACKEND_BOOST
#define WEFT_FIBER_BACKEND_BOOST 0
#endif

#if WEFT_FIBER_BACKEND_ASM && WEFT_FIBER_BACKEND_BOOST
#error "weft: define only one of WEFT_FIBER_BACKEND_ASM and WEFT_FIBER_BACKEND_BOOST"
#elif WEFT_FIBER_BACKEND_BOOST
#include <boost/context/detail/fcontext.hpp>
#elif !WEFT_FIBER_BACKEND_ASM
#error \
    "weft: no weft assembly for this target: build weft (and what links it) with WEFT_FIBER_BACKEND_BOOST=1 (CMake -DWEFT_FIBER_BACKEND=boost)"
#endif

namespace weft::detail {

// The result of a switch: `context` is the context that just suspended itself to get
// here (pass it to jumpContext to go back), `data` what it passed along.
struct ContextTransfer {
  void* context;
  void* data;
};

// The entry of a new context: receives the first transfer; must never return (the
// trampoline traps with a message if it does). It leaves its context only by switching
// away for good (e.g. a last jumpContext to whoever destroys its stack).
using ContextEntry = void (*)(ContextTransfer);

// The smallest stackSize makeContext accepts. The core itself needs a few hundred bytes
// at most (the saved registers, the trampoline frame); the rest is the entry's own use.
inline constexpr std::size_t kMinContextStackSize = 2048;

// Called (by the trampoline) when a ContextEntry returns: prints what happened and
// aborts. Defined in stackful/detail/context.cc. Why noexcept: it never returns.
[[noreturn]] void contextEntryReturned() noexcept;

}  // namespace weft::detail

#if WEFT_FIBER_BACKEND_ASM
// The assembly entry points (stackful/asm/{make,jump,ontop}_<arch>_<abi>_elf_gas.S),
// hidden: they are not part of weft's ABI. ContextTransfer is two pointers, returned in
// rax:rdx (x86-64) / x0:x1 (aarch64), exactly as the .S files produce it.
extern "C" {
void* weft_make_context(void* stackTop, std::size_t stackSize,
                        weft::detail::ContextEntry entry) noexcept;
// Neither is noexcept: an exception thrown by an ontop fn leaves through the target's
// pending jump or ontop call.
weft::detail::ContextTransfer weft_jump_context(void* to, void* data);
weft::detail::ContextTransfer weft_ontop_context(
    void* to, void* data, weft::detail::ContextTransfer (*fn)(weft::detail::ContextTransfer));
}
#endif

namespace weft::detail {

#if WEFT_FIBER_BACKEND_BOOST
// The Boost backend hands Boost's trampoline a wrapper (boostContextEntry, context.cc) so
// that a returning entry traps with weft's message instead of Boost's silent _exit(0).
// makeContext writes this header at a kBoostStackHeaderAlign-aligned address at the top
// of the stack and builds Boost's context right below it; the wrapper's frame lies less
// than kBoostStackHeaderAlign below the header (Boost's context record is 64 bytes on
// x86-64, 176 on aarch64), so rounding its frame address up finds the header. `magic`
// turns a Boost version with a different layout into a clear abort, not a wild jump.
struct BoostStackHeader {
  std::uintptr_t magic;
  ContextEntry entry;
};
inline constexpr std::uintptr_t kBoostStackHeaderMagic = 0x77656674'63747831u;  // "weftctx1"
inline constexpr std::size_t kBoostStackHeaderAlign = 512;
// Why noexcept: Boost's trampoline has no frame to unwind into; an exception escaping an
// entry (which must not return at all) terminates, with the message of std::terminate.
void boostContextEntry(boost::context::detail::transfer_t transfer) noexcept;
static_assert(sizeof(ContextTransfer) == sizeof(boost::context::detail::transfer_t));
#endif

// Prepares a suspended context on the stack whose HIGHEST address is `stackTop` (stack
// grows down), `stackSize` usable bytes below it. Nothing runs until jumped to; the
// first jumpContext/ontopContext to the returned handle calls `entry` with that
// transfer, on this stack, 16-byte aligned as for any call.
//
// Preconditions: [stackTop - stackSize, stackTop) is writable memory that outlives the
// context; stackSize >= kMinContextStackSize; entry != nullptr and never returns.
// Errors: none (the context is built in place; nothing is allocated). A returning entry
// is caught at run time: the trampoline prints a message and aborts.
// Thread safety: touches only the given stack. The context may later run on any thread.
// Why noexcept: only stores to the given stack.
//
// Example:
//   void* ctx = weft::detail::makeContext(stack + size, size, &entry);
//   weft::detail::ContextTransfer t = weft::detail::jumpContext(ctx, &arg);
inline void* makeContext(void* stackTop, std::size_t stackSize, ContextEntry entry) noexcept {
#if WEFT_FIBER_BACKEND_ASM
  return weft_make_context(stackTop, stackSize, entry);
#else
  // The header sits at the highest kBoostStackHeaderAlign-aligned address that leaves
  // room for it below stackTop; Boost's context record goes right below it.
  std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(stackTop) - sizeof(BoostStackHeader)) &
                        ~std::uintptr_t{kBoostStackHeaderAlign - 1};
  auto* header = reinterpret_cast<BoostStackHeader*>(base);
  header->magic = kBoostStackHeaderMagic;
  header->entry = entry;
  std::size_t used = reinterpret_cast<std::uintptr_t>(stackTop) - base;
  return boost::context::detail::make_fcontext(reinterpret_cast<void*>(base), stackSize - used,
                                               &boostContextEntry);
#endif
}

// Suspends the calling context and resumes `to`; returns when someone jumps back, with
// the handle of the context that did so and the data it passed.
//
// Preconditions: `to` is a suspended context (see the handle rules at the top), not the
// caller's own.
// Errors: the switch never fails; it throws only what an ontopContext fn run on this
// context while it waits here throws (see ontopContext).
// Thread safety: a context may be resumed on another thread than the one it suspended
// on; the caller must ensure the hand-over happens-before the jump (the switch itself is
// not a synchronisation point).
// Why NOT noexcept, although a switch itself cannot fail: this call is where an
// exception thrown by an ontopContext fn surfaces in the suspended context (forced
// unwinding); a noexcept here would turn that into std::terminate.
//
// Example:
//   ContextTransfer t = jumpContext(fiber, nullptr);  // runs fiber until it jumps back
//   fiber = t.context;                                // its new handle
inline ContextTransfer jumpContext(void* to, void* data) {
#if WEFT_FIBER_BACKEND_ASM
  return weft_jump_context(to, data);
#else
  boost::context::detail::transfer_t t = boost::context::detail::jump_fcontext(to, data);
  return ContextTransfer{t.fctx, t.data};
#endif
}

// Resumes `to`, but first runs `fn(ContextTransfer{from, data})` ON `to`'s STACK; what fn
// returns is what `to`'s pending jumpContext call returns. If fn throws, the exception
// propagates out of that pending jumpContext call inside `to` (this is how a suspended
// fiber is force-unwound). Hence NOT noexcept.
//
// Preconditions: as jumpContext, and `to` has STARTED (it is suspended inside a
// jumpContext/ontopContext call; a never-started context has no pending call for fn to
// return or throw through, and Boost's backend cannot run fn there either: destroy a
// never-started context by simply freeing its stack); fn != nullptr.
// Errors: whatever fn throws, raised inside `to` (the caller of ontopContext sees it only
// if `to` later jumps back and reports it).
// Thread safety: as jumpContext.
//
// Example (force-unwind a suspended fiber):
//   ontopContext(fiber, nullptr, [](ContextTransfer t) -> ContextTransfer {
//     throw ForcedUnwind{t.context};  // fiber's locals are destroyed as this unwinds
//   });
inline ContextTransfer ontopContext(void* to, void* data, ContextTransfer (*fn)(ContextTransfer)) {
#if WEFT_FIBER_BACKEND_ASM
  return weft_ontop_context(to, data, fn);
#else
  // Boost's ontop_fcontext calls fn from its assembly with the same register convention
  // (two-pointer structs, identical layout: see the static_assert above); no C++ code
  // calls through the converted pointer. The detour through void (*)() is the sanctioned
  // way to say so to -Wcast-function-type.
  auto* boostFn = reinterpret_cast<boost::context::detail::transfer_t (*)(
      boost::context::detail::transfer_t)>(reinterpret_cast<void (*)()>(fn));
  boost::context::detail::transfer_t t = boost::context::detail::ontop_fcontext(to, data, boostFn);
  return ContextTransfer{t.fctx, t.data};
#endif
}

}  // namespace weft::detail
