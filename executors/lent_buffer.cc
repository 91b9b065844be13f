#include "weft/executors/lent_buffer.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

namespace weft {

namespace {

// Its address marks the owner thread of a pool (BufferPool::owner_).
constinit thread_local char tlThreadMarker = 0;

// Chunks are page-aligned: buffers of a page multiple then start on pages, and a small
// message touches one page.
constexpr std::align_val_t kChunkAlignment{4096};

}  // namespace

BufferPool* BufferPool::create(std::size_t bufferSize, std::uint32_t maxBuffers) {
  if (bufferSize == 0) throw std::invalid_argument("weft: a BufferPool's buffers need a size");
  if (bufferSize > std::numeric_limits<std::uint32_t>::max()) {  // LentBuffer's size_
    throw std::invalid_argument("weft: a BufferPool's buffers must be smaller than 4 GiB");
  }
  return new BufferPool(bufferSize, maxBuffers);
}

BufferPool::BufferPool(std::size_t bufferSize, std::uint32_t maxBuffers) noexcept
    : bufferSize_(bufferSize),
      maxBuffers_(maxBuffers < kNone ? maxBuffers : kNone - 1),
      owner_(&tlThreadMarker) {}

BufferPool::~BufferPool() {
  for (std::byte* chunk : chunks_) ::operator delete(chunk, kChunkAlignment);
}

void BufferPool::retire() noexcept {
  owner_.store(nullptr, std::memory_order_relaxed);  // compared, never dereferenced
  // From now on a buffer coming back finds kRetired and counts down orphans_ instead.
  // acquire: the buffers pushed before are read below (their next links).
  std::uint64_t head = returned_.exchange(kRetired, std::memory_order_acq_rel);
  while (head != kEmpty) {
    const auto id = static_cast<std::uint32_t>(head - 1);
    std::uint32_t next;
    std::memcpy(&next, address(id), sizeof next);
    --lent_;
    head = next;
  }
  if (lent_ == 0) {
    delete this;
    return;
  }
  // Those that came back after the exchange have counted orphans_ below zero already:
  // whoever brings it to zero frees the pool. acq_rel: the freeing thread sees every
  // other one's last use.
  const std::int64_t pending = lent_;
  if (orphans_.fetch_add(pending, std::memory_order_acq_rel) + pending == 0) delete this;
}

std::uint32_t BufferPool::grow(std::uint32_t n) noexcept {
  const std::uint32_t chunks = n == 0 ? 1 : (n + kChunkBuffers - 1) / kChunkBuffers;
  const std::uint32_t first = count_;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    if (maxBuffers_ - count_ < kChunkBuffers) break;
    try {
      free_.reserve(std::size_t{count_} + kChunkBuffers);  // recycle() never allocates
      chunks_.reserve(chunks_.size() + 1);
    } catch (const std::bad_alloc&) {
      break;
    }
    void* chunk = ::operator new(bufferSize_ * kChunkBuffers, kChunkAlignment, std::nothrow);
    if (chunk == nullptr) break;
    chunks_.push_back(static_cast<std::byte*>(chunk));
    count_ += kChunkBuffers;
  }
  return count_ == first ? kNone : first;
}

std::uint32_t BufferPool::take() noexcept {
  if (free_.empty()) drainReturned();  // buffers given back on other threads first
  if (free_.empty()) {
    const std::uint32_t first = grow(kChunkBuffers);
    if (first == kNone) return kNone;
    for (std::uint32_t id = count_ - 1; id > first; --id) free_.push_back(id);
    return first;
  }
  const std::uint32_t id = free_.back();
  free_.pop_back();
  return id;
}

void BufferPool::giveBack(std::uint32_t id, std::byte* base) noexcept {
  // relaxed: only the owner thread can find its own marker here, and it wrote it itself.
  if (owner_.load(std::memory_order_relaxed) == &tlThreadMarker) {
    --lent_;
    recycle(id);
    return;
  }
  // Another thread (or the owner after retire()): push onto returned_.
  std::uint64_t head = returned_.load(std::memory_order_relaxed);
  for (;;) {
    if (head == kRetired) {
      // acq_rel: the one that frees the pool sees every use of it before.
      if (orphans_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
      return;
    }
    const auto next = static_cast<std::uint32_t>(head);
    std::memcpy(base, &next, sizeof next);
    // release: the owner, draining, reads the link written above (and the buffer is the
    // owner's again only after every use of it here).
    if (returned_.compare_exchange_weak(head, std::uint64_t{id} + 1, std::memory_order_release,
                                        std::memory_order_relaxed)) {
      return;
    }
  }
}

std::size_t BufferPool::drainReturnedSlow() noexcept {
  // acquire: pairs with giveBack's release, so the links and the buffers are ours.
  std::uint64_t head = returned_.exchange(kEmpty, std::memory_order_acquire);
  std::size_t n = 0;
  while (head != kEmpty) {
    const auto id = static_cast<std::uint32_t>(head - 1);
    std::uint32_t next;
    std::memcpy(&next, address(id), sizeof next);
    --lent_;
    recycle(id);
    head = next;
    ++n;
  }
  return n;
}

}  // namespace weft
