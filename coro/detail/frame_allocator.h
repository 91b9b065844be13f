#pragma once

#include <cstddef>
#include <new>

#include "weft/coro/detail/config.h"

#if WEFT_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace weft::detail {

// The thread-local recycling allocator behind every weft coroutine frame.
//
// Coroutine frames are small, short-lived and allocated in bursts (a chain of awaits
// allocates one per level), so each thread keeps freed frames in per-size-class free
// lists and hands them out again without calling malloc. Design points:
//  - Size classes are 16 bytes apart up to 504 bytes, then 128 bytes apart up to 4600,
//    and sized 16k - 8 (24, 40, 56, ..., 504, 632, 760, ...): glibc's malloc adds an
//    8-byte header and rounds to 16, so a class block fills its malloc chunk exactly. A
//    small frame wastes at most 15 bytes, a large one at most 127 (under 3% from 4 KiB).
//    Large frames are what clang makes when it folds a whole chain of awaited Lazys into
//    their caller's frame; caching them matters when many are alive at once (a fan-out of
//    thousands of branches): handed back to malloc, the memory tends to go back to the
//    kernel at once (glibc trims the top of its heap) and is page-faulted in again by
//    the next burst, which costs more than the coroutines' own work.
//  - No header per frame: the compiler passes the frame size back to the sized
//    operator delete of the promise, which is enough to find the class.
//  - A frame freed on another thread simply joins that thread's lists: every block came
//    from the global heap, so any thread may reuse or release it.
//  - The cache is bounded: WEFT_FRAME_CACHE_BYTES per thread for small frames, and as
//    much again for large ones, counted apart so that a burst of large frames never
//    crowds the small ones (every ordinary await) out. Past the bound, frames go back to
//    the global heap. At thread exit the cache is released.
//  - Under AddressSanitizer the cached blocks are poisoned, so a use of a destroyed
//    coroutine frame is still reported.
//  - The cache is always reached through localFrameCache() (an asm thread-pointer read
//    or an opaque call), never by naming the thread_local in inline code: see there why.
// Thread safety: each thread touches only its own lists; no atomics.
inline constexpr std::size_t kSmallFrameClasses = 32;  // 16 bytes apart, up to 504 bytes
inline constexpr std::size_t kSmallFrameMax = 16 * kSmallFrameClasses - 8;
inline constexpr std::size_t kLargeFrameStep = 128;
inline constexpr std::size_t kFrameClassCount = 64;  // then 128 apart, up to 4600 bytes

// Frame sizes are compile-time constants at each allocation site, so the branch folds.
constexpr std::size_t frameClassOf(std::size_t size) noexcept {
  return size <= kSmallFrameMax ? (size + 7) / 16
                                : kSmallFrameClasses + (size - kSmallFrameMax - 1) / kLargeFrameStep;
}
constexpr std::size_t frameClassSize(std::size_t cls) noexcept {
  return cls < kSmallFrameClasses ? 16 * (cls + 1) - 8
                                  : kSmallFrameMax + kLargeFrameStep * (cls - kSmallFrameClasses + 1);
}
static_assert(frameClassSize(kFrameClassCount - 1) % 16 == 8);

struct FrameCache {
  void* freeLists[kFrameClassCount];
  // Bytes held in the small (cachedBytes) and the large (cachedLargeBytes) classes' lists,
  // or kFrameCacheClosed while the cache takes no frames: before the thread's first free
  // has registered the flush at thread exit, and after that flush. The free fast path
  // thus has a single check (the bound) for all three cases.
  std::size_t cachedBytes;
  std::size_t cachedLargeBytes;
  // Set once the thread registered the flush; then tells a closed cache (flushed: freed
  // frames go back to the heap) from one not opened yet. Read only on the slow path.
  bool opened;
};

// More than any bound: every free goes to the slow path, which tells the cases apart.
inline constexpr std::size_t kFrameCacheClosed = static_cast<std::size_t>(-1) / 2;

// The thread's cache. constinit: constant-initialised, so access needs no initialisation
// guard. WEFT_FIXED_TLS (detail/config.h): localFrameCache() reaches it by its assembler
// name.
WEFT_FIXED_TLS inline constinit thread_local FrameCache tFrameCache WEFT_TLS_SYMBOL(
    "weft_detail_frame_cache"){{}, kFrameCacheClosed, kFrameCacheClosed, false};

// The calling thread's cache, its address computed at each call on the calling thread: a
// coroutine that allocates frames may resume on another thread (see
// WEFT_THREAD_LOCAL_ACCESSOR, detail/config.h).
WEFT_THREAD_LOCAL_ACCESSOR(FrameCache, localFrameCache, tFrameCache, "weft_detail_frame_cache")

// Releases the thread's cached frames at thread exit. It has a destructor, so touching
// it costs a guard check: it is touched only once per thread, from the slow path.
struct FrameCacheFlusher {
  ~FrameCacheFlusher() {
    FrameCache& cache = localFrameCache();
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
    cache.cachedBytes = kFrameCacheClosed;
    cache.cachedLargeBytes = kFrameCacheClosed;
  }
};
inline thread_local FrameCacheFlusher tFrameCacheFlusher;

// The byte count of `cls`'s half of the cache. Folds: the class is a constant.
inline std::size_t& cachedBytesOf(FrameCache& cache, std::size_t cls) noexcept {
  return cls < kSmallFrameClasses ? cache.cachedBytes : cache.cachedLargeBytes;
}

// The free path when the cache is closed or full. Not inlined: rare, and it keeps the
// fast path short.
WEFT_NOINLINE inline void deallocateFrameSlow(void* block, std::size_t cls) noexcept {
  FrameCache& cache = localFrameCache();
  const std::size_t bytes = frameClassSize(cls);
  if (!cache.opened) {
    cache.opened = true;
    // Odr-using the flusher constructs it and registers its destructor for this thread.
    [[maybe_unused]] FrameCacheFlusher* volatile flusher = &tFrameCacheFlusher;
    cache.cachedBytes = 0;
    cache.cachedLargeBytes = 0;
    if (bytes <= WEFT_FRAME_CACHE_BYTES) {
      *static_cast<void**>(block) = cache.freeLists[cls];
      cache.freeLists[cls] = block;
      cachedBytesOf(cache, cls) = bytes;
#if WEFT_ASAN
      __asan_poison_memory_region(block, bytes);
#endif
      return;
    }
  }
  ::operator delete(block);
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
      cachedBytesOf(cache, cls) -= frameClassSize(cls);
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
    // One check: false when the cache is full, not opened yet or closed.
    std::size_t& cached = cachedBytesOf(cache, cls);
    if (const std::size_t after = cached + bytes; after <= WEFT_FRAME_CACHE_BYTES) [[likely]] {
      *static_cast<void**>(block) = cache.freeLists[cls];
      cache.freeLists[cls] = block;
      cached = after;
#if WEFT_ASAN
      __asan_poison_memory_region(block, bytes);
#endif
      return;
    }
    deallocateFrameSlow(block, cls);
    return;
  }
  ::operator delete(block);
}

// Mixed into every weft promise type: routes frame allocation through the cache.
struct FrameAllocated {
  static void* operator new(std::size_t size) { return allocateFrame(size); }
  static void operator delete(void* block, std::size_t size) noexcept {
    deallocateFrame(block, size);
  }
};

}  // namespace weft::detail
