#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace weft {

class BufferPool;

// LentBuffer: bytes an event loop received into one of its own buffers and lends to the
// caller (what `co_await stream.receive()` returns). It owns the buffer: destroying it
// (or reset()) gives the buffer back to the loop's pool, from any thread.
//
// A connection that waits in receive() holds no buffer: the loop picks one only when
// data arrives (io_uring: from a ring of buffers the kernel picks from; epoll: from the
// loop's pool, once the socket is readable). So an idle connection costs its coroutine
// frame, not a read buffer.
//
// Lifetime: a LentBuffer may outlive the coroutine that received it, the stream, the
// event loop and the ThreadPool: the pool's memory is freed when the loop is gone and the
// last lent buffer has been given back. Holding buffers for long is allowed but takes
// them from the loop (a loop that runs out lends more, up to a limit, then receives into
// buffers outside its ring; see docs/io.md).
//
// Thread safety: one LentBuffer is used by one thread at a time (like a std::vector);
// distinct ones are independent; destroying one on any thread is safe.
//
// Example:
//   for (;;) {
//     weft::LentBuffer data = co_await stream.receive();
//     if (data.empty()) break;  // the peer ended the stream
//     co_await stream.writeAll(data);
//   }
class LentBuffer {
 public:
  // Empty: no bytes, no buffer (what receive() returns at the end of the stream).
  LentBuffer() noexcept = default;
  LentBuffer(LentBuffer&& other) noexcept
      : data_(other.data_),
        base_(other.base_),
        pool_(std::exchange(other.pool_, nullptr)),
        size_(other.size_),
        id_(other.id_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  LentBuffer& operator=(LentBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      base_ = other.base_;
      pool_ = std::exchange(other.pool_, nullptr);
      id_ = other.id_;
    }
    return *this;
  }
  ~LentBuffer() { reset(); }

  // The bytes (size() of them; writable: a parser may decode in place).
  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::span<std::byte> bytes() noexcept { return {data_, size_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  operator std::span<const std::byte>() const noexcept { return bytes(); }
  // The bytes as characters (a text protocol's view).
  std::string_view text() const noexcept {
    return {reinterpret_cast<const char*>(data_), size_};
  }

  // Drops the first `n` bytes (what a parser has consumed); the rest stay. n > size()
  // drops them all. noexcept: pointer arithmetic.
  void consume(std::size_t n) noexcept {
    if (n > size_) n = size_;
    data_ += n;
    size_ -= static_cast<std::uint32_t>(n);  // n <= size_
  }

  // Keeps the first `n` bytes and drops the rest (what an awaitable that filled a buffer
  // from IoLoop::lendBuffer did not fill); n >= size() changes nothing. The buffer is
  // still held, even at size 0, until reset() or destruction. noexcept: a store.
  void truncate(std::size_t n) noexcept {
    if (n < size_) size_ = static_cast<std::uint32_t>(n);
  }

  // Gives the buffer back now; the LentBuffer is then empty. Idempotent.
  // noexcept: a push onto a free list (another thread's: a lock-free stack).
  void reset() noexcept;

 private:
  friend class BufferPool;
  LentBuffer(std::byte* data, std::size_t size, BufferPool* pool, std::uint32_t id) noexcept
      : data_(data),
        base_(data),
        pool_(pool),
        size_(static_cast<std::uint32_t>(size)),  // <= the pool's buffer size (create)
        id_(id) {}

  // 32 bytes: a LentBuffer lives in the frame of every coroutine waiting in receive(),
  // beside the operation's own (what an idle connection costs:
  // docs/design/2026-11-idle-connection-memory.md).
  std::byte* data_ = nullptr;
  std::byte* base_ = nullptr;  // the buffer's start (consume() moves data_)
  BufferPool* pool_ = nullptr;
  std::uint32_t size_ = 0;
  std::uint32_t id_ = 0;
};

// BufferPool: the buffers one event loop lends (LentBuffer), for executor implementers
// whose own IoLoop serves IoOpcode::kReceiveLent (or kReceiveMessageLent); weft's loops
// each own one.
//
// Buffers are bufferSize() bytes each, numbered from 0, allocated in chunks when the pool
// grows and never moved. The loop's thread (the owner: the thread that created the pool)
// takes, lends and recycles them; a LentBuffer given back on the owner thread goes
// straight to the pool's recycle function (the loop's free list or its io_uring buffer
// ring), one given back on another thread is pushed onto a lock-free stack that the
// owner drains (drainReturned(), typically once per loop turn).
//
// The owner ends the pool with retire() (not delete): the memory is freed then, or, if
// buffers are still lent, when the last of them comes back.
//
// Thread safety: everything except LentBuffer::reset on the owner thread only.
class BufferPool {
 public:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  // Called on the owner thread for every buffer that comes back (given back by a
  // LentBuffer, or put back with recycle()): true when the loop kept it (put it where it
  // lends from, e.g. its io_uring buffer ring), false to leave it on the pool's free list.
  using RecycleFunction = bool (*)(void* context, std::uint32_t id) noexcept;

  // A pool of buffers of `bufferSize` bytes (> 0, < 4 GiB), owned by the calling thread; at
  // most `maxBuffers` of them ever exist (grow() fails beyond). Without a recycle function
  // (setRecycle), recycled buffers go to the pool's own free list (take()).
  // Errors: std::bad_alloc; std::invalid_argument for a zero size or one of 4 GiB or more.
  static BufferPool* create(std::size_t bufferSize, std::uint32_t maxBuffers);

  // The owner is done with the pool: frees it now if no buffer is lent, else when the
  // last one comes back. The pool must not be used by the owner afterwards (given-back
  // buffers no longer reach a recycle function). noexcept: frees memory.
  void retire() noexcept;

  void setRecycle(RecycleFunction function, void* context) noexcept {
    recycle_ = function;
    recycleContext_ = context;
  }

  std::size_t bufferSize() const noexcept { return bufferSize_; }
  // Buffers that exist (lent, on the free list, or wherever the loop keeps them).
  std::uint32_t count() const noexcept { return count_; }
  // Buffers lent out (LentBuffers not yet given back, including those given back on
  // other threads and not yet drained).
  std::uint32_t lentCount() const noexcept { return lent_; }
  std::byte* address(std::uint32_t id) const noexcept {
    return chunks_[id / kChunkBuffers] + static_cast<std::size_t>(id % kChunkBuffers) * bufferSize_;
  }

  // Adds up to `n` buffers (rounded up to a whole chunk); returns the first new id, or
  // kNone when the limit is reached or memory is short. The new buffers belong to the
  // caller (not on the free list). noexcept: allocation failure is kNone.
  std::uint32_t grow(std::uint32_t n) noexcept;
  // The last id grow() added plus one.
  std::uint32_t end() const noexcept { return count_; }

  // A buffer from the free list, growing the pool when it is empty; kNone when the pool
  // is at its limit (or out of memory). noexcept.
  std::uint32_t take() noexcept;
  // Puts a buffer the owner holds (not lent) back where it is lent from: the recycle
  // function, or the free list. noexcept.
  void recycle(std::uint32_t id) noexcept {
    if (recycle_ == nullptr || !recycle_(recycleContext_, id)) {
      free_.push_back(id);  // capacity reserved by grow(): never throws
    }
  }
  // Lends the first `size` bytes of buffer `id` (held by the owner). noexcept.
  LentBuffer lend(std::uint32_t id, std::size_t size) noexcept {
    ++lent_;
    return LentBuffer(address(id), size, this, id);
  }
  // Recycles the buffers given back on other threads. Returns how many. noexcept.
  std::size_t drainReturned() noexcept {
    if (returned_.load(std::memory_order_relaxed) == kEmpty) return 0;  // the common case
    return drainReturnedSlow();
  }

  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

 private:
  friend class LentBuffer;
  static constexpr std::uint32_t kChunkBuffers = 32;
  // returned_: a stack of ids (id + 1; each buffer's first 4 bytes hold the next), kEmpty
  // when empty, kRetired once the owner retired the pool.
  static constexpr std::uint64_t kEmpty = 0;
  static constexpr std::uint64_t kRetired = ~std::uint64_t{0};

  BufferPool(std::size_t bufferSize, std::uint32_t maxBuffers) noexcept;
  ~BufferPool();

  void giveBack(std::uint32_t id, std::byte* base) noexcept;
  std::size_t drainReturnedSlow() noexcept;

  std::size_t bufferSize_;
  std::uint32_t maxBuffers_;
  std::uint32_t count_ = 0;
  std::uint32_t lent_ = 0;  // owner thread
  std::vector<std::byte*> chunks_;
  std::vector<std::uint32_t> free_;
  RecycleFunction recycle_ = nullptr;
  void* recycleContext_ = nullptr;
  // The owner thread's marker (a thread_local's address), or nullptr once retired.
  std::atomic<const void*> owner_;
  std::atomic<std::uint64_t> returned_{kEmpty};
  // After retire(): buffers still lent, counted down by those coming back (see retire).
  std::atomic<std::int64_t> orphans_{0};
};

inline void LentBuffer::reset() noexcept {
  if (pool_ != nullptr) {
    BufferPool* pool = std::exchange(pool_, nullptr);
    pool->giveBack(id_, base_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace weft
