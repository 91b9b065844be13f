#pragma once

#include <coroutine>
#include <cstdint>
#include <new>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/frame_allocator.h"
#include "weft/executors/executor.h"
#include "weft/executors/thread_run_queue.h"

// What every suspended waiter of weft's awaitables that others complete shares: the sync
// primitives' waiters (coro/detail/sync_waiter.h: Mutex, SharedMutex, Semaphore, Event,
// Latch, ConditionVariable) and the channel operations and select cases
// (coro/detail/channel_waiter.h). One node layout, one intrusive queue, one status
// machine for cancellation, one cancellation registration, one way to resume.
//
// The cancellation protocol (one status per wait, read and written only under the lock
// of the queue the waiter is in; the code of each step is below):
//  1. The awaiter registers a cancellation callback (OutOfLineCancellationCallback, only
//     when the token can be cancelled: no cost otherwise) before it queues. A request
//     made earlier runs the callback right there.
//  2. The callback, under the queue's lock (cancelWaitLocked): a waiter not queued yet
//     (kIdle) is only marked kCancelled, and the queueing step, under the same lock,
//     sees the mark and neither queues nor suspends; a queued waiter (kQueued) is
//     unlinked and marked kCancelled, and the callback resumes it; a waiter whose wait
//     already completed (kDone, kClosed) is left alone: cancellation never undoes a
//     grant or a transfer.
//  3. await_resume first deregisters the callback (waiting for it if it runs on another
//     thread), so the status is final when it is read, then throws OperationCancelled if
//     it is kCancelled.
// Whoever takes a waiter out of its queue (a granter, the other side of a transfer,
// close(), or the callback) owns its single resumption (resumeWaiter): no lost wake-up,
// no double resume.
//
// What stays with each family, because it really differs:
//  - When step 1 happens. A sync primitive registers in await_suspend, after the
//    lock-free fast path, because only waiting is cancellable: a free lock, permit or set
//    event is taken even when cancellation was already requested. A channel operation
//    registers in await_ready, before it tries the transfer, and does not run at all
//    when cancellation was requested first (a cancelled send or receive transfers
//    nothing); it also keeps its channel's lock from await_ready to await_suspend, so
//    the attempt is not repeated (coro/channel.h).
//  - ConditionVariable's wait (coro/condition_variable.h) waits in two queues in turn,
//    the condition variable's, then its mutex's: it keeps a second status for the first.
//  - select() (coro/detail/select_awaiter.h): one wait with a node in several channels'
//    queues. Its nodes' statuses belong to their channels; which case completes is
//    decided by a claim on the select's shared state (SelectState), which channel
//    operations, cancellation and the timeout's timer race for. A cancelled select is
//    resumed by its callback directly (resumeSelectWaiter): its nodes are still linked,
//    so none is free for the trampoline below.
//  - The queues' locks and what a primitive updates when a waiter leaves (a mutex's
//    waiters bit, the readers a cancelled writer was blocking...).

namespace weft::detail {

// Where a waiter is in its wait. Read and written only under the lock of the queue (the
// primitive's or the channel's) it waits in.
enum class WaiterStatus : std::uint8_t {
  kIdle,       // not linked (not queued yet, or dropped from a queue: see popClaimable)
  kQueued,     // linked in its queue
  kDone,       // its wait completed: the lock, permit or value was handed over
  kClosed,     // (channels) the channel was closed while it waited
  kCancelled,  // its cancellation callback took it, queued or not yet queued
};

// The links and the resumption target of one suspended waiter. It lives in the awaiter
// (in the waiting coroutine's frame, or on the waiting fiber's stack): waiting never
// allocates.
struct WaiterNode {
  WaiterNode* prev = nullptr;
  WaiterNode* next = nullptr;
  // What to resume, and the executor to resume it through (nullptr: resumed inline).
  std::coroutine_handle<> handle;
  Executor* executor = nullptr;
  // The handle's promise type asks for tagged work items (kTagsWorkItems): its
  // resumption is queued tagged.
  bool tagged = false;

  // Sets `handle` and `tagged` from the awaiting coroutine's typed handle. noexcept: two
  // stores.
  template <class Promise>
  void setAwaiting(std::coroutine_handle<Promise> awaiting) noexcept {
    handle = awaiting;
    tagged = kTagsWorkItems<Promise>;
  }
};

// An intrusive FIFO of waiters of type Node (a WaiterNode): doubly linked, so a cancelled
// waiter leaves from the middle in O(1). Not thread-safe: guarded by its owner's lock.
// Every member is noexcept: pointer writes only.
template <class Node>
class WaiterList {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  Node* front() const noexcept { return static_cast<Node*>(head_); }

  void pushBack(Node* node) noexcept {
    node->next = nullptr;
    node->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
  }

  Node* popFront() noexcept {
    Node* node = front();
    if (node != nullptr) remove(node);
    return node;
  }

  // Precondition: `node` is in this list.
  void remove(Node* node) noexcept {
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
  }

  // Calls f(node) for every node, front to back; f must not unlink any.
  template <class F>
  void forEach(F&& f) const {
    for (WaiterNode* node = head_; node != nullptr; node = node->next) f(static_cast<Node*>(node));
  }

  // Moves every node of `other` to the back of this list, in order.
  void append(WaiterList&& other) noexcept {
    if (other.head_ == nullptr) return;
    if (tail_ != nullptr) {
      tail_->next = other.head_;
      other.head_->prev = tail_;
    } else {
      head_ = other.head_;
    }
    tail_ = other.tail_;
    other.head_ = other.tail_ = nullptr;
  }

 private:
  WaiterNode* head_ = nullptr;
  WaiterNode* tail_ = nullptr;
};

// Step 2 of the protocol, under the lock guarding `list`: `status` is the waiter's status
// with respect to `list`. True if the waiter was queued: it is unlinked and the caller
// owns its resumption. A waiter not queued yet is only marked kCancelled; a completed
// one is left alone (false). noexcept: a status write and an unlink.
template <class Node>
bool cancelWaitLocked(WaiterList<Node>& list, Node* node, WaiterStatus& status) noexcept {
  switch (status) {
    case WaiterStatus::kIdle:
      status = WaiterStatus::kCancelled;
      return false;
    case WaiterStatus::kQueued:
      list.remove(node);
      status = WaiterStatus::kCancelled;
      return true;
    default:
      return false;
  }
}

// Step 1's registration. A CancellationCallback is 80 bytes; kept inside the awaiter it
// would grow every coroutine frame that awaits a lock, a permit or a channel, cancellable
// or not (twice over for a loop that sends and receives). So the awaiter holds a pointer,
// and the callback lives in a block of the frame allocator (a thread-local free list: no
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

  // Step 3's first half: deregisters (waiting for the callback if it runs on another
  // thread right now). noexcept: ~CancellationCallback only unlinks or waits. Inline
  // test, out-of-line work: every wait calls this, nearly always with nothing registered.
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

// The per-thread trampoline for waiters resumed inline (they have no executor).
//
// A waker (unlock, set, release, a send...) resumes an executor-less waiter on its own
// thread. Done naively this recurses: the resumed coroutine unlocks or sends, which
// resumes the next waiter inside that call, and so on; a queue of 100,000 waiters (or a
// pipeline of 100,000 executor-less stages) would need 100,000 nested frames of native
// stack. Instead, a resumption requested while this thread is already running one is
// queued here, and the outermost one runs them in turn: the stack stays one resumption
// deep, and FIFO order is kept. One trampoline serves every kind of waiter, so a
// resumption never nests inside another, whatever each waited on.
struct InlineResumer {
  WaiterNode* head = nullptr;
  WaiterNode* tail = nullptr;
  bool running = false;
};
// constinit: zero-initialised, so access needs no TLS initialisation guard.
inline constinit thread_local InlineResumer tInlineResumer{};

// noexcept: a resumed coroutine reports its exceptions through its own promise; one that
// lets an exception escape resume() (no weft coroutine does) ends the process, as an
// exception escaping a thread would. Out of line: the rare case, kept off resumeWaiter's
// inlined path.
WEFT_NOINLINE inline void resumeWaiterInline(WaiterNode* node) noexcept {
  InlineResumer& resumer = tInlineResumer;
  node->next = nullptr;  // it has left its queue: the link is ours now
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
  node->handle.resume();  // the node lives in the resumed frame: not touched after
  while (WaiterNode* next = resumer.head) {
    resumer.head = next->next;
    if (resumer.head == nullptr) resumer.tail = nullptr;
    next->handle.resume();
  }
  resumer.running = false;
}

// Resumes a waiter that was taken out of its queue (granted, completed, closed or
// cancelled), after that queue's lock was released. A waiter with an executor is resumed
// through it, never inline, even when the waker runs on that executor: the waker's stack
// never grows, and it never runs the waiter's code inside unlock() or a send. One with
// no executor (a Lazy outside any Task, a foreign coroutine) is resumed on the calling
// thread, through the trampoline above. The node may be gone as soon as this starts:
// callers must not touch it again. noexcept: a waker has nobody to report to (unlock(),
// set(), release() cannot fail half-way); an executor that refuses the waiter (shut down
// while coroutines still wait on it) is reported and the process aborts. Forced inline:
// every completed channel operation that woke somebody runs it.
[[gnu::always_inline]] inline void resumeWaiter(WaiterNode* node) noexcept {
  Executor* executor = node->executor;
  if (executor == nullptr) {
    resumeWaiterInline(node);
    return;
  }
  try {
    scheduleLocalFirst(executor, node->tagged ? WorkItem::fromTaggedHandle(node->handle)
                                              : WorkItem::fromHandle(node->handle));
  } catch (...) {
    abortExecutorGone(executor);
  }
}

// Resumes every waiter of `list`, in order (the list is consumed). Each node is unlinked
// before it is resumed: a resumed waiter may destroy its node at once. noexcept: as
// resumeWaiter.
template <class Node>
void resumeAll(WaiterList<Node>& list) noexcept {
  while (Node* node = list.popFront()) resumeWaiter(node);
}

}  // namespace weft::detail
