#pragma once

#include <cstddef>
#include <new>

#include "coro/detail/config.h"

#if WEFT_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace weft::detail {

// The thread-local recycling allocator behind every weft coroutine frame.
//
// Coroutine frames are small, short-lived and allocated in bursts (a chain of awaits
// allocates one per level), so each thread keeps freed frames in per-size-class free
// lists and hands them out again without calling malloc. Design points:
//  - Size classes are 16 bytes apart and sized 16k - 8 (24, 40, 56, ...): glibc's malloc
//    adds an 8-byte header and rounds to 16, so a class block fills its malloc chunk
//    exactly and a parked frame wastes no more than 15 bytes.
//  - No header per frame: the compiler passes the frame size back to the sized
//    operator delete of the promise, which is enough to find the class.
//  - A frame freed on another thread simply joins that thread's lists: every block came
//    from the global heap, so any thread may reuse or release it.
//  - The cache is bounded (WEFT_FRAME_CACHE_BYTES per thread); past it, frames go back
//    to the global heap. At thread exit the cache is released.
//  - Under AddressSanitizer the cached blocks are poisoned, so a use of a destroyed
//    coroutine frame is still reported.
//  - The cache is always reached through localFrameCache(), an opaque call, never by
//    naming the thread_local in inline code: see there why.
// Thread safety: each thread touches only its own lists; no atomics.
inline constexpr std::size_t kFrameClassCount = 32;  // classes up to 504 bytes

constexpr std::size_t frameClassOf(std::size_t size) noexcept { return (size + 7) / 16; }
constexpr std::size_t frameClassSize(std::size_t cls) noexcept { return 16 * (cls + 1) - 8; }

struct FrameCache {
  void* freeLists[kFrameClassCount];
  // Bytes held in the lists. Set to a huge value once the thread's cache is torn down,
  // which makes every later free bypass the cache without an extra branch.
  std::size_t cachedBytes;
  bool flushRegistered;
};

// constinit: a zero-initialised thread_local needs no initialisation guard on access,
// which keeps the allocation fast path free of TLS wrapper calls.
inline constinit thread_local FrameCache tFrameCache{};

// The calling thread's cache.
//
// HACK(clang-16, https://github.com/llvm/llvm-project/issues/47179 and /63022): compilers
// treat the address of a thread_local as constant within a function, and a coroutine's
// resume function may keep it in the frame across a suspension point. allocateFrame and
// deallocateFrame are inlined into coroutine bodies (frames of callees are allocated
// there), so a coroutine that resumed on another thread would use the free lists of the
// thread it ran on before -- a data race on plain pointers. Seen with clang++-16 -O1
// (FrameAllocatorTest.CoroutineMovedToAnotherThreadAllocatesFromThatThreadsCache, and
// TSan). The same holds for fibers, which migrate between threads in the middle of
// ordinary functions. An opaque call computes the address on the thread that runs it;
// it costs a call and a return per allocation and per free.
WEFT_OPAQUE_CALL inline FrameCache& localFrameCache() noexcept { return tFrameCache; }

// Releases the thread's cached frames at thread exit. It has a destructor, so touching
// it costs a guard check: it is touched only once per thread, from the slow path.
struct FrameCacheFlusher {
  ~FrameCacheFlusher() {
    FrameCache& cache = tFrameCache;
    for (std::size_t cls = 0; cls < kFrameClassCount; ++cls) {
      void* block = cache.freeLists[cls];
      while (block != nullptr) {
#if WEFT_ASAN
        __asan_unpoison_memory_region(block, frameClassSize(cls));
#endif
        void* next = *static_cast<void**>(block);
        ::operator delete(block);
        block = next;
      }
      cache.freeLists[cls] = nullptr;
    }
    cache.cachedBytes = static_cast<std::size_t>(-1) / 2;
  }
};
inline thread_local FrameCacheFlusher tFrameCacheFlusher;

WEFT_NOINLINE inline void registerFrameCacheFlush() noexcept {
  localFrameCache().flushRegistered = true;
  // Odr-using the flusher constructs it and registers its destructor for this thread.
  [[maybe_unused]] FrameCacheFlusher* volatile flusher = &tFrameCacheFlusher;
}

inline void* allocateFrame(std::size_t size) {
  const std::size_t cls = frameClassOf(size);
  if (cls < kFrameClassCount) {
    FrameCache& cache = localFrameCache();
    if (void* block = cache.freeLists[cls]; block != nullptr) [[likely]] {
#if WEFT_ASAN
      __asan_unpoison_memory_region(block, frameClassSize(cls));
#endif
      cache.freeLists[cls] = *static_cast<void**>(block);
      cache.cachedBytes -= frameClassSize(cls);
      return block;
    }
    return ::operator new(frameClassSize(cls));
  }
  return ::operator new(size);
}

inline void deallocateFrame(void* block, std::size_t size) noexcept {
  const std::size_t cls = frameClassOf(size);
  if (cls < kFrameClassCount) {
    FrameCache& cache = localFrameCache();
    const std::size_t bytes = frameClassSize(cls);
    if (cache.cachedBytes + bytes <= WEFT_FRAME_CACHE_BYTES) [[likely]] {
      if (!cache.flushRegistered) [[unlikely]] registerFrameCacheFlush();
      *static_cast<void**>(block) = cache.freeLists[cls];
      cache.freeLists[cls] = block;
      cache.cachedBytes += bytes;
#if WEFT_ASAN
      __asan_poison_memory_region(block, bytes);
#endif
      return;
    }
  }
  ::operator delete(block);
}

// The bytes of freed frames the calling thread's cache holds (for tests and diagnostics).
inline std::size_t frameCacheBytes() noexcept { return localFrameCache().cachedBytes; }

// Mixed into every weft promise type: routes frame allocation through the cache.
struct FrameAllocated {
  static void* operator new(std::size_t size) { return allocateFrame(size); }
  static void operator delete(void* block, std::size_t size) noexcept {
    deallocateFrame(block, size);
  }
};

}  // namespace weft::detail
