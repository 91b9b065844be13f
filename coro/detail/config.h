#pragma once

// Compiler and build feature checks for weft, in one place (STYLE.md: never two copies
// of a body behind #ifs).

// An installed weft (cmake --install) has build_config.h beside its headers: the
// settings it was built with (WEFT_TASK_TRACKING, ...), so that a program compiled
// without weft's -D flags still agrees with the libraries. Found relative to this file,
// so only the header tree this file belongs to counts (not another weft on the include
// path); a source tree and Bazel have none and take the definitions from the build.
#if __has_include("../../build_config.h")
#include "../../build_config.h"
#endif

// WEFT_TAIL_CALLS_GUARANTEED: 1 when the compiler turns symmetric transfer (an
// await_suspend returning a coroutine_handle) into a tail call, so arbitrarily long
// chains of synchronously completing awaits do not grow the native stack. clang does at
// every optimisation level; g++-12 only at -O2 and above, which the preprocessor cannot
// tell from -O1 (both define __OPTIMIZE__): builds at -O1/-Og with g++ define this to 0
// on the command line. Tests that need tail calls are skipped when this is 0.
#ifndef WEFT_TAIL_CALLS_GUARANTEED
#if defined(__clang__) || (defined(__GNUC__) && defined(__OPTIMIZE__))
#define WEFT_TAIL_CALLS_GUARANTEED 1
#else
#define WEFT_TAIL_CALLS_GUARANTEED 0
#endif
#endif

// WEFT_ASAN: 1 when compiled with AddressSanitizer. The frame allocator then poisons the
// frames it keeps for reuse, so a use after free of a coroutine frame is still reported.
#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif
#ifndef WEFT_ASAN
#define WEFT_ASAN 0
#endif

// WEFT_TSAN: 1 when compiled with ThreadSanitizer.
#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif
#ifndef WEFT_TSAN
#define WEFT_TSAN 0
#endif

// WEFT_CODE_ADDRESS(): an address in the code of the function it is written in (inlined
// into): one instruction. Awaiters forced inline into a coroutine's body record it as the
// coroutine's suspend point, which async backtraces name by file:line. Null on targets
// without an implementation (the coroutine's definition line is shown then).
#if defined(__x86_64__)
#define WEFT_CODE_ADDRESS_ASM "lea 0(%%rip), %0"
#elif defined(__aarch64__)
#define WEFT_CODE_ADDRESS_ASM "adr %0, ."
#endif
#ifdef WEFT_CODE_ADDRESS_ASM
#define WEFT_CODE_ADDRESS()                                  \
  ([]() __attribute__((always_inline)) {                    \
    const void* weft_pc;                                    \
    asm volatile(WEFT_CODE_ADDRESS_ASM : "=r"(weft_pc));    \
    return weft_pc;                                         \
  }())
#else
#define WEFT_CODE_ADDRESS() (static_cast<const void*>(nullptr))
#endif

// WEFT_TASK_TRACKING: 1 to keep, for task dumps (coro/task_dump.h, gdb's `weft tasks`),
// the registry of root tasks and a note of what each suspended Lazy waits on. It costs a
// few stores per suspension, two stores per root task and a registry slot per root task
// that waits (docs/debugging.md, "Cost"); async
// backtraces, the fiber registry and fibers' wait notes are kept either way. On by
// default in every build type, Release (NDEBUG) included; 0 leaves it out. CMake sets it
// for weft and everything that links it (option WEFT_TASK_TRACKING, ON by default), an
// installed weft's build_config.h for builds without its -D flags, Bazel's //:coro (off
// with --define=weft_task_tracking=off); with none of them it is 1. It must be the same
// in every file of a program (it changes what inline coroutines keep in their frames).
#ifndef WEFT_TASK_TRACKING
#define WEFT_TASK_TRACKING 1
#endif

// WEFT_FRAME_CACHE_BYTES: how many bytes of freed coroutine frames each thread keeps for
// reuse (see coro/detail/frame_allocator.h). 0 disables the cache.
#ifndef WEFT_FRAME_CACHE_BYTES
#define WEFT_FRAME_CACHE_BYTES (4u << 20)
#endif

#if defined(__GNUC__)
#define WEFT_NOINLINE __attribute__((noinline))
#else
#define WEFT_NOINLINE
#endif

// WEFT_INLINE_TLS_ADDRESS: 1 when detail::localFrameCache() computes the address of the
// frame cache inline, from the thread pointer read by an asm volatile statement and the
// cache's initial-exec TLS offset (x86-64 and aarch64 ELF with g++ or clang); 0 to reach
// it through an opaque call instead (every other target; or -DWEFT_INLINE_TLS_ADDRESS=0).
#ifndef WEFT_INLINE_TLS_ADDRESS
#if defined(__GNUC__) && defined(__ELF__) && defined(__LP64__) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define WEFT_INLINE_TLS_ADDRESS 1
#else
#define WEFT_INLINE_TLS_ADDRESS 0
#endif
#endif

// WEFT_OPAQUE_CALL: a function the optimiser must call every time, learning nothing of it
// across the call (not inlined; with g++ also no interprocedural propagation: noipa).
// Used where a function's result depends on the calling thread: see
// detail::localFrameCache().
#ifndef WEFT_OPAQUE_CALL  // overridable only to show what happens without it
#if defined(__clang__)
#define WEFT_OPAQUE_CALL __attribute__((noinline))
#elif defined(__GNUC__)
#define WEFT_OPAQUE_CALL __attribute__((noinline, noipa))
#else
#define WEFT_OPAQUE_CALL
#endif
#endif

// A thread_local that weft's inline code reaches by a fixed assembler name (and gdb by
// name): WEFT_FIXED_TLS before its declaration, WEFT_TLS_SYMBOL("symbol") after its
// declarator. With WEFT_INLINE_TLS_ADDRESS it gets the initial-exec TLS model (one fixed
// offset from the thread pointer in every thread; a library that uses weft and is
// dlopen'ed needs room in the static TLS block: the dynamic loader refuses to load it
// otherwise, it does not misbehave), the assembler name `symbol`, and `used`, so that
// every translation unit that includes its header emits it. Otherwise both are empty.
// Example:
//   WEFT_FIXED_TLS inline constinit thread_local int tCount WEFT_TLS_SYMBOL("weft_count"){0};
#if WEFT_INLINE_TLS_ADDRESS
#define WEFT_FIXED_TLS [[gnu::used, gnu::tls_model("initial-exec")]]
#define WEFT_TLS_SYMBOL(symbol) asm(symbol)
#else
#define WEFT_FIXED_TLS
#define WEFT_TLS_SYMBOL(symbol)
#endif

// WEFT_THREAD_LOCAL_ACCESSOR(Type, accessor, variable, "symbol"): defines
// `Type& accessor() noexcept`, the calling thread's `variable` (declared with
// WEFT_FIXED_TLS and WEFT_TLS_SYMBOL("symbol")), its address computed afresh at each call
// on the thread that makes it.
//
// HACK(clang-16, https://github.com/llvm/llvm-project/issues/47179 and /63022): compilers
// treat the address of a thread_local as constant within a function, and a coroutine's
// resume function may keep it in the frame across a suspension point. The accessors are
// inlined into coroutine bodies (frames of callees are allocated there, tasks register
// and enter their runs there), so a coroutine that resumed on another thread would use
// the variable of the thread it ran on before -- a data race on plain pointers. Seen with
// clang++-16 -O1 (FrameAllocatorTest.CoroutineMovingBetweenThreadsUsesEachThreadsOwnCache,
// and TSan). The same holds for fibers, which migrate between threads in the middle of
// ordinary functions. So the address is never computed by the compiler in inline code:
//  - WEFT_INLINE_TLS_ADDRESS: an asm volatile statement reads the thread pointer and adds
//    the variable's initial-exec offset (a GOT entry the linker fills or folds). Volatile
//    asm is neither merged with another nor moved across a suspension point or a call,
//    so it runs on the thread that uses its result; two instructions, no call.
//  - otherwise an opaque call computes the address on the thread that runs it.
#if WEFT_INLINE_TLS_ADDRESS && defined(__x86_64__)
#define WEFT_THREAD_LOCAL_ACCESSOR(Type, accessor, variable, symbol) \
  inline Type& accessor() noexcept {                                 \
    Type* weft_address;                                              \
    asm volatile(                                                    \
        "movq %%fs:0, %0\n\t"                                        \
        "addq " symbol "@gottpoff(%%rip), %0"                        \
        : "=r"(weft_address));                                       \
    return *weft_address;                                            \
  }
#elif WEFT_INLINE_TLS_ADDRESS  // aarch64
#define WEFT_THREAD_LOCAL_ACCESSOR(Type, accessor, variable, symbol) \
  inline Type& accessor() noexcept {                                 \
    Type* weft_address;                                              \
    void* weft_offset;                                               \
    asm volatile(                                                    \
        "mrs %0, tpidr_el0\n\t"                                      \
        "adrp %1, :gottprel:" symbol "\n\t"                           \
        "ldr %1, [%1, #:gottprel_lo12:" symbol "]\n\t"                \
        "add %0, %0, %1"                                             \
        : "=r"(weft_address), "=r"(weft_offset));                    \
    return *weft_address;                                            \
  }
#else
#define WEFT_THREAD_LOCAL_ACCESSOR(Type, accessor, variable, symbol) \
  WEFT_OPAQUE_CALL inline Type& accessor() noexcept { return variable; }
#endif

// WEFT_FLAG_AFTER_STORE(flag, stored): whether `flag`, a std::atomic<std::uint32_t>, is
// nonzero, loaded by one asm statement that also takes `stored`, an object the caller
// has just written, as an input. The compiler then emits that store before the load, and
// needs no compiler barrier, which would make it reload what it holds from memory (one
// instruction more per await on the dump gate's path, coro/detail/dump_gate.h). No
// hardware ordering: the dump gate gets that from membarrier. On other targets: a
// compiler barrier and a relaxed load.
#if defined(__x86_64__)
#define WEFT_FLAG_AFTER_STORE(flag, stored)                                          \
  ([&]() __attribute__((always_inline)) {                                            \
    bool weft_set;                                                                   \
    asm volatile("cmpl $0, %1" : "=@ccnz"(weft_set) : "m"(flag), "m"(stored));       \
    return weft_set;                                                                 \
  }())
#elif defined(__aarch64__)
#define WEFT_FLAG_AFTER_STORE(flag, stored)                                          \
  ([&]() __attribute__((always_inline)) {                                            \
    unsigned weft_value;                                                             \
    asm volatile("ldr %w0, %1" : "=r"(weft_value) : "m"(flag), "m"(stored));         \
    return weft_value != 0;                                                          \
  }())
#else
#define WEFT_FLAG_AFTER_STORE(flag, stored)                                          \
  (std::atomic_signal_fence(std::memory_order_seq_cst),                              \
   (flag).load(std::memory_order_relaxed) != 0)
#endif
