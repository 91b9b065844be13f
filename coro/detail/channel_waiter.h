#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <mutex>

#include "weft/coro/detail/spin_lock.h"
#include "weft/coro/detail/waiter_queue.h"
#include "weft/executors/executor.h"

// The untyped machinery under Channel<T> and select(): the channel lock, the waiter node
// a blocked operation links into a channel, the queue of those nodes, and the state a
// select shares between its nodes. See coro/channel.h and coro/select.h for the API; the
// node, its queue, its cancellation and its resumption are those of every waiter
// (coro/detail/waiter_queue.h).

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
// fiber's stack): blocking allocates nothing. `handle` and `executor` (WaiterNode) are
// whom to resume: the operation's coroutine, or for a select's node the select's (copied
// from its SelectState when the node is linked).
struct ChannelWaiter : WaiterNode {
  // A sender's value (T*, moved from when taken) or a receiver's slot
  // (std::optional<T>*, emplaced into when a value is delivered).
  void* slot = nullptr;
  // Non-null when the node is one case of a select: the select is claimed through it.
  SelectState* select = nullptr;
  std::uint32_t caseIndex = 0;
  WaiterStatus status = WaiterStatus::kIdle;
};

// A FIFO of waiter nodes (a WaiterList that keeps each node's status: kQueued while
// linked, kIdle once unlinked). Not thread-safe: guarded by its channel's lock.
class ChannelWaiterQueue {
 public:
  bool empty() const noexcept { return list_.empty(); }
  ChannelWaiter* front() const noexcept { return list_.front(); }

  void pushBack(ChannelWaiter* node) noexcept {
    list_.pushBack(node);
    node->status = WaiterStatus::kQueued;
  }

  void remove(ChannelWaiter* node) noexcept {
    list_.remove(node);
    node->status = WaiterStatus::kIdle;
  }

  // Step 2 of the cancellation protocol (cancelWaitLocked): true if the node was queued
  // (it is unlinked, kCancelled, and the caller resumes it).
  bool cancelLocked(ChannelWaiter* node) noexcept {
    return cancelWaitLocked(list_, node, node->status);
  }

  // Unlinks and returns the first node whose operation may be completed now, or
  // nullptr. A plain operation always may; a select's node only if this claims the
  // select (the select may already have been completed through another channel, or
  // cancelled: such a node is dropped, left kIdle for the select's cleanup to skip).
  ChannelWaiter* popClaimable() noexcept {
    while (ChannelWaiter* node = list_.front()) {
      remove(node);
      if (node->select == nullptr || node->select->tryClaim(node->caseIndex)) return node;
    }
    return nullptr;
  }

 private:
  WaiterList<ChannelWaiter> list_;
};

// A select resumed by its cancellation callback, which has no free node to queue on the
// trampoline (its nodes are still linked in their channels): with no executor, it is
// resumed directly on the requesting thread (one level of nesting per cancellation
// request).
inline void resumeSelectWaiter(SelectState* select) noexcept {
  resumeWaiterOn(select->executor, select->handle);
}

}  // namespace weft::detail
