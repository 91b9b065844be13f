#pragma once

// What fibers tell ASan, TSan and valgrind, in one place. Every hook is an inline
// function that compiles to nothing when its tool is absent, so the switch path carries
// no #ifs and costs nothing in a normal build.
//
//  - ASan must know which stack is current, or it reports false stack-buffer overflows
//    and loses track of fake stacks: __sanitizer_start_switch_fiber before a switch (with
//    the bounds of the stack being switched to), __sanitizer_finish_switch_fiber after
//    it (which returns the bounds of the stack that was left).
//  - TSan keeps a happens-before history per thread of execution: every fiber is a TSan
//    fiber (__tsan_create_fiber), and __tsan_switch_to_fiber runs right before every
//    switch.
//  - valgrind treats a big jump of the stack pointer as a new stack only if the target is
//    registered: VALGRIND_STACK_REGISTER for every stack we map, DEREGISTER before
//    unmapping it.

#include <cstddef>

#include "weft/coro/runtime_hooks.h"

// WEFT_VALGRIND: 1 when <valgrind/valgrind.h> is available (Debian package valgrind);
// its client requests are a few no-op instructions outside valgrind. -DWEFT_VALGRIND=0
// leaves them out.
#ifndef WEFT_VALGRIND
#if __has_include(<valgrind/valgrind.h>)
#define WEFT_VALGRIND 1
#else
#define WEFT_VALGRIND 0
#endif
#endif

#if WEFT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#if WEFT_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#endif

namespace weft::detail {

// Why noexcept everywhere below: these wrap C functions and client-request macros that
// cannot throw.

// ASan: about to switch to the stack [bottom, bottom + size). `fakeStackSave` keeps the
// leaving context's fake stack; nullptr when the leaving context is finished for good.
inline void asanStartSwitch(void** fakeStackSave, const void* bottom, std::size_t size) noexcept {
#if WEFT_ASAN
  __sanitizer_start_switch_fiber(fakeStackSave, bottom, size);
#else
  (void)fakeStackSave, (void)bottom, (void)size;
#endif
}

// ASan: arrived on a stack. `fakeStack` is what this context saved when it left (nullptr
// the first time); the bounds of the stack that was left are stored in *oldBottom /
// *oldSize when those are not null.
inline void asanFinishSwitch(void* fakeStack, const void** oldBottom,
                             std::size_t* oldSize) noexcept {
#if WEFT_ASAN
  __sanitizer_finish_switch_fiber(fakeStack, oldBottom, oldSize);
#else
  (void)fakeStack, (void)oldBottom, (void)oldSize;
#endif
}

// ASan: [begin, begin + size) holds no live objects any more (a copied-out shared stack).
inline void asanUnpoison(const void* begin, std::size_t size) noexcept {
#if WEFT_ASAN
  __asan_unpoison_memory_region(begin, size);
#else
  (void)begin, (void)size;
#endif
}

// TSan: the current thread of execution (thread or fiber).
inline void* tsanCurrentFiber() noexcept {
#if WEFT_TSAN
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}
inline void* tsanCreateFiber() noexcept {
#if WEFT_TSAN
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}
inline void tsanDestroyFiber(void* fiber) noexcept {
#if WEFT_TSAN
  if (fiber != nullptr) __tsan_destroy_fiber(fiber);
#else
  (void)fiber;
#endif
}
// Right before a switch to `fiber`. The switch synchronizes (happens-before) the two,
// as it does in the real program: everything the leaving side did is visible to the
// side that runs next.
inline void tsanSwitchTo(void* fiber) noexcept {
#if WEFT_TSAN
  __tsan_switch_to_fiber(fiber, 0);
#else
  (void)fiber;
#endif
}

// valgrind: registers [begin, end) as a stack; returns the id for valgrindDeregister.
inline unsigned valgrindRegisterStack(void* begin, void* end) noexcept {
#if WEFT_VALGRIND
  return VALGRIND_STACK_REGISTER(begin, end);
#else
  (void)begin, (void)end;
  return 0;
#endif
}
// memcheck: [begin, begin + size) may be written (memory below a stack pointer, which
// memcheck marks inaccessible, about to receive a shared-stack fiber's saved frames).
inline void valgrindMakeWritable(void* begin, std::size_t size) noexcept {
#if WEFT_VALGRIND
  VALGRIND_MAKE_MEM_UNDEFINED(begin, size);
#else
  (void)begin, (void)size;
#endif
}
inline void valgrindDeregisterStack(unsigned id) noexcept {
#if WEFT_VALGRIND
  VALGRIND_STACK_DEREGISTER(id);
#else
  (void)id;
#endif
}

}  // namespace weft::detail
