#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <new>
#include <utility>

#include "coro/cancellation.h"
#include "coro/detail/config.h"
#include "coro/detail/frame_allocator.h"
#include "coro/detail/spin_lock.h"
#include "coro/detail/via_awaiter.h"
#include "executors/thread_run_queue.h"
#include "executors/executor.h"

// The untyped machinery under Channel<T> and select(): the channel lock, the waiter node
// a blocked operation links into a channel, the queue of those nodes, and the state a
// select shares between its nodes. See coro/channel.h and coro/select.h for the API.

namespace weft::detail {

// ChannelLock: the lock guarding a channel's buffer, queues and closed flag, held for a
// few dozen instructions at a time (plus the move of one value). A SpinLock rather than
// std::mutex: its unlock() is one release store that touches the lock no more
// afterwards, so the channel may be destroyed by another thread the instant it is
// released, which select's registration depends on (coro/select.h: after its first
// unlock, the select may be resumed and finish while it still releases the other
// channels); and an uncontended lock/unlock pair is one exchange and one plain store.
using ChannelLock = SpinLock;

// Holds a ChannelLock and can release it early (before resuming waiters, which is never
// done under the lock).
using ChannelLockGuard = std::unique_lock<ChannelLock>;

// The cancellation registration of a channel operation or select, made only when the
// operation can be cancelled. A CancellationCallback is 80 bytes; kept inside the
// awaiter it would grow every coroutine frame that awaits a channel (twice over for a
// loop that sends and receives), cancellable or not. So the awaiter holds a pointer, and
// the callback lives in a block of the frame allocator (a thread-local free list: no
// malloc in the steady state), taken only for a cancellable token.
class OutOfLineCancellationCallback {
 public:
  OutOfLineCancellationCallback() noexcept = default;
  OutOfLineCancellationCallback(const OutOfLineCancellationCallback&) = delete;
  OutOfLineCancellationCallback& operator=(const OutOfLineCancellationCallback&) = delete;
  ~OutOfLineCancellationCallback() { reset(); }

  // Registers `onCancel` on `token` (which runs it at once if cancellation was already
  // requested). Throws std::bad_alloc (nothing registered).
  template <class F>
  void emplace(const CancellationToken& token, F&& onCancel) {
    void* block = allocateFrame(sizeof(CancellationCallback));
    try {
      callback_ = ::new (block) CancellationCallback(token, std::forward<F>(onCancel));
    } catch (...) {
      deallocateFrame(block, sizeof(CancellationCallback));
      throw;
    }
  }

  // Deregisters (waiting for the callback if it runs on another thread right now).
  // noexcept: ~CancellationCallback only unlinks or waits. Inline test, out-of-line
  // work: every channel operation calls this, nearly always with nothing registered.
  void reset() noexcept {
    if (callback_ != nullptr) [[unlikely]]
      destroy();
  }

 private:
  WEFT_NOINLINE void destroy() noexcept {
    callback_->~CancellationCallback();
    deallocateFrame(callback_, sizeof(CancellationCallback));
    callback_ = nullptr;
  }

  CancellationCallback* callback_ = nullptr;
};

// Where a waiter node stands. Read and written only under the lock of the channel the
// node belongs to.
enum class WaiterStatus : std::uint8_t {
  kIdle,       // not linked (not yet queued, or dropped from a queue: see popClaimable)
  kQueued,     // linked in one of its channel's queues
  kDone,       // its operation completed: the value was taken or delivered
  kClosed,     // the channel was closed while it waited
  kCancelled,  // its cancellation callback unlinked it
};

// The shared state of one select (coro/select.h): the select's nodes in several
// channels race to claim it, and exactly one claim wins.
struct SelectState {
  // `winner` values other than a case index.
  static constexpr std::uint32_t kRegistering = 0xffffffffu;  // nodes being linked
  static constexpr std::uint32_t kWaiting = 0xfffffffeu;      // suspended, claimable
  static constexpr std::uint32_t kCancelled = 0xfffffffdu;    // claimed by cancellation

  // Claims a suspended select for case `index`. acq_rel: the claim orders the claimer's
  // later writes (the value it delivers) after every earlier claim attempt; the value
  // itself reaches the select through its resumption (the executor's queue or the same
  // thread), which synchronises on its own.
  bool tryClaim(std::uint32_t index) noexcept {
    std::uint32_t expected = kWaiting;
    return winner.compare_exchange_strong(expected, index, std::memory_order_acq_rel,
                                          std::memory_order_acquire);
  }

  // How a claim from outside the channels (cancellation, the timeout's timer) went.
  enum class ExternalClaim : std::uint8_t {
    kLost,              // a case (or another outside claim) won first
    kWhileRegistering,  // won while await_suspend still runs: it sees it and continues
    kWhileWaiting,      // won a suspended select: the claimer must resume it
  };
  // Claims the select with `value` (kCancelled, or the timeout case's index), whether it
  // is suspended or still registering. acq_rel: as tryClaim; acquiring kWaiting also
  // makes the handle and executor stored before it visible to the claimer.
  ExternalClaim claimExternally(std::uint32_t value) noexcept {
    std::uint32_t state = winner.load(std::memory_order_acquire);
    for (;;) {
      if (state != kWaiting && state != kRegistering) return ExternalClaim::kLost;
      const bool waiting = state == kWaiting;
      if (winner.compare_exchange_weak(state, value, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return waiting ? ExternalClaim::kWhileWaiting : ExternalClaim::kWhileRegistering;
      }
    }
  }

  std::atomic<std::uint32_t> winner{kRegistering};
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
};

// A blocked channel operation: linked into its channel's queue of senders or receivers
// while it waits. It lives in the awaiter (so in the waiting coroutine's frame or the
// fiber's stack): blocking allocates nothing.
struct ChannelWaiter {
  ChannelWaiter* prev = nullptr;
  ChannelWaiter* next = nullptr;
  // A sender's value (T*, moved from when taken) or a receiver's slot
  // (std::optional<T>*, emplaced into when a value is delivered).
  void* slot = nullptr;
  // Non-null when the node is one case of a select: the select is claimed through it,
  // and resumed through it.
  SelectState* select = nullptr;
  // Whom to resume, when not part of a select.
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  std::uint32_t caseIndex = 0;
  WaiterStatus status = WaiterStatus::kIdle;
};

// A FIFO of waiter nodes, intrusive (the nodes are the links), O(1) removal from the
// middle. Not thread-safe: guarded by its channel's lock.
class ChannelWaiterQueue {
 public:
  bool empty() const noexcept { return head_ == nullptr; }

  void pushBack(ChannelWaiter* node) noexcept {
    node->next = nullptr;
    node->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
    node->status = WaiterStatus::kQueued;
  }

  void remove(ChannelWaiter* node) noexcept {
    if (node->prev != nullptr) {
      node->prev->next = node->next;
    } else {
      head_ = node->next;
    }
    if (node->next != nullptr) {
      node->next->prev = node->prev;
    } else {
      tail_ = node->prev;
    }
    node->prev = node->next = nullptr;
    node->status = WaiterStatus::kIdle;
  }

  // Unlinks and returns the first node whose operation may be completed now, or
  // nullptr. A plain operation always may; a select's node only if this claims the
  // select (the select may already have been completed through another channel, or
  // cancelled: such a node is dropped, left kIdle for the select's cleanup to skip).
  ChannelWaiter* popClaimable() noexcept {
    while (ChannelWaiter* node = head_) {
      remove(node);
      if (node->select == nullptr || node->select->tryClaim(node->caseIndex)) return node;
    }
    return nullptr;
  }

  ChannelWaiter* front() const noexcept { return head_; }

 private:
  ChannelWaiter* head_ = nullptr;
  ChannelWaiter* tail_ = nullptr;
};

// The per-thread trampoline for channel waiters resumed inline (they have no executor).
// Done naively, resuming inline recurses: the resumed coroutine sends on another channel,
// which resumes the next waiter inside that call, and so on (a pipeline of 100,000
// executor-less stages would need 100,000 nested frames of native stack). Instead, a
// resumption requested while this thread is already running one is queued here, and the
// outermost one runs them in turn: the stack stays one resumption deep, in FIFO order.
struct ChannelInlineResumer {
  ChannelWaiter* head = nullptr;
  ChannelWaiter* tail = nullptr;
  bool running = false;
};
// constinit: zero-initialised, so access needs no TLS initialisation guard.
inline constinit thread_local ChannelInlineResumer tChannelInlineResumer{};

inline std::coroutine_handle<> handleOf(const ChannelWaiter* node) noexcept {
  return node->select != nullptr ? node->select->handle : node->handle;
}

// noexcept: a resumed coroutine reports its exceptions through its own promise. Out of
// line: the rare case, kept off resumeChannelWaiter's inlined path.
WEFT_NOINLINE inline void resumeChannelWaiterInline(ChannelWaiter* node) noexcept {
  ChannelInlineResumer& resumer = tChannelInlineResumer;
  node->next = nullptr;  // it has left its channel's queue: the link is ours now
  if (resumer.running) {
    if (resumer.tail != nullptr) {
      resumer.tail->next = node;
    } else {
      resumer.head = node;
    }
    resumer.tail = node;
    return;
  }
  resumer.running = true;
  handleOf(node).resume();  // the node lives in the resumed frame: not touched after
  while (ChannelWaiter* next = resumer.head) {
    resumer.head = next->next;
    if (resumer.head == nullptr) resumer.tail = nullptr;
    handleOf(next).resume();
  }
  resumer.running = false;
}

// Resumes the waiter behind `node`, a node that was claimed (popped from its queue and,
// for a select, the select claimed) or cancelled under its channel's lock, after that
// lock was released. A waiter with an executor is resumed through it, so it never runs
// on the waker's stack or on a thread that is not its executor's (even when the waker
// runs on that executor: the waker's stack never grows, and it never runs the waiter's
// code inside a send); one with no executor (a Lazy outside any Task) is resumed on the
// calling thread, through the trampoline above. The node may be gone as soon as this
// starts. noexcept: a waker has nobody to report to; an executor that refuses the waiter
// (shut down while coroutines still wait on it) is reported and the process aborts.
// Forced inline: every completed channel operation that woke somebody runs it.
[[gnu::always_inline]] inline void resumeChannelWaiter(ChannelWaiter* node) noexcept {
  Executor* executor = node->select != nullptr ? node->select->executor : node->executor;
  if (executor == nullptr) {
    resumeChannelWaiterInline(node);
    return;
  }
  std::coroutine_handle<> handle = handleOf(node);
  try {
    scheduleLocalFirst(executor, handle);
  } catch (...) {
    abortExecutorGone(executor);
  }
}

// The same for a select resumed by its cancellation callback, which has no free node to
// queue on the trampoline (its nodes are still linked in their channels): with no
// executor, it is resumed directly on the requesting thread (one level of nesting per
// cancellation request).
inline void resumeSelectWaiter(SelectState* select) noexcept {
  resumeWaiterOn(select->executor, select->handle);
}

}  // namespace weft::detail
