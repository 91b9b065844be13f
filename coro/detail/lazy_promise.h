#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/detail/config.h"
#include "weft/coro/detail/dump_gate.h"
#include "weft/coro/detail/dump_signal_hook.h"
#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/monitored_task.h"
#include "weft/coro/detail/registry_slot.h"
#include "weft/coro/detail/running_root.h"
#include "weft/coro/detail/wait_note.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"

namespace weft {

template <class T>
class Lazy;

namespace detail {

class LazyPromiseBase;
struct CompletionSink;

// Who waits for a coroutine, one step up its async call chain (what asyncBacktrace()
// follows, coro/async_backtrace.h): a weft coroutine (its promise), a completion sink
// (syncAwait, a collect, start(), a fiber: each says what it is), or a coroutine weft
// knows nothing of (its frame). One tagged word: promises, sinks and coroutine frames are
// at least 8-byte aligned, so the low two bits say which. Null: nobody recorded (a root).
class AsyncParent {
 public:
  constexpr AsyncParent() noexcept = default;
  static AsyncParent promise(const LazyPromiseBase* promise) noexcept {
    return AsyncParent(reinterpret_cast<std::uintptr_t>(promise));
  }
  static AsyncParent sink(const CompletionSink* sink) noexcept {
    return AsyncParent(reinterpret_cast<std::uintptr_t>(sink) | kSink);
  }
  static AsyncParent foreignCoroutine(std::coroutine_handle<> handle) noexcept {
    return AsyncParent(reinterpret_cast<std::uintptr_t>(handle.address()) | kForeign);
  }
  // Not a parent: a TaskMonitor's record of a root task, kept in the root's parent word,
  // which nothing reads as a parent (LazyPromiseBase::setMonitorRecord).
  static AsyncParent monitorRecord(MonitoredTask* record) noexcept {
    return AsyncParent(reinterpret_cast<std::uintptr_t>(record) | kMonitorRecord);
  }

  // False also for a monitor record, which names no parent.
  explicit operator bool() const noexcept {
    return word_ != 0 && (word_ & kTagMask) != kMonitorRecord;
  }
  const LazyPromiseBase* promise() const noexcept {
    return (word_ & kTagMask) == 0 ? reinterpret_cast<const LazyPromiseBase*>(word_) : nullptr;
  }
  const CompletionSink* sink() const noexcept {
    return (word_ & kTagMask) == kSink ? reinterpret_cast<const CompletionSink*>(word_ & ~kTagMask)
                                       : nullptr;
  }
  // The frame of a coroutine that is not weft's: its first word is its resume function
  // (the layout g++ and clang++ share).
  const void* foreignFrame() const noexcept {
    return (word_ & kTagMask) == kForeign ? reinterpret_cast<const void*>(word_ & ~kTagMask)
                                          : nullptr;
  }

 private:
  static constexpr std::uintptr_t kSink = 1;
  static constexpr std::uintptr_t kForeign = 2;
  static constexpr std::uintptr_t kMonitorRecord = 3;
  static constexpr std::uintptr_t kTagMask = 3;
  friend class LazyPromiseBase;  // reads a monitor record
  explicit AsyncParent(std::uintptr_t word) noexcept : word_(word) {}
  std::uintptr_t word_ = 0;
};

// Where a finished Lazy goes next when that is not simply "resume the coroutine that
// awaited it": syncAwait's wake-up, collectAll's counter, start()'s callback, a Task's
// hop back to its awaiter's executor. A plain function pointer, not a virtual, so a sink
// is a direct call.
struct CompletionSink {
  // Runs on the thread that finished the Lazy, inside its final suspend (so it must not
  // throw); returns the coroutine to transfer to (std::noop_coroutine() for none).
  using OnComplete = std::coroutine_handle<> (*)(CompletionSink* self) noexcept;
  explicit CompletionSink(OnComplete onComplete, const char* traceLabel = nullptr) noexcept
      : onComplete_(onComplete), traceLabel_(traceLabel) {}
  OnComplete onComplete_;
  // How an async backtrace passes through the sink, as plain data so that gdb reads it
  // from memory (a core file) exactly as asyncBacktrace() does:
  //  - traceLabel_: what the sink stands for, shown as a marker ("syncAwait",
  //    "collectAll"); null: nothing (a hop back to an executor);
  //  - traceFiber_: the fiber it completes (spawnFiber's state), shown as the fiber and,
  //    when it is parked, where;
  //  - traceParent_: who waits for the coroutine this sink continues; null: nobody (a
  //    root, or a fiber's future nobody awaits yet).
  const char* traceLabel_;
  const void* traceFiber_ = nullptr;
  AsyncParent traceParent_;
};

template <class T>
inline constexpr bool kIsLazy = false;
template <class T>
inline constexpr bool kIsLazy<Lazy<T>> = true;

// Awaitables that know about executors expose `coAwait(Executor*)`: the promise hands
// them its executor instead of wrapping them in a ViaAwaiter.
template <class A>
concept ExecutorAwareAwaitable = requires(A&& a, Executor* executor) {
  std::forward<A>(a).coAwait(executor);
};

// Awaitables that can be cancelled expose `coAwait(Executor*, const CancellationToken&)`:
// the promise hands them its executor and its token (preferred to coAwait(Executor*)).
// The token reference stays valid until the await completes.
template <class A>
concept CancellationAwareAwaitable =
    requires(A&& a, Executor* executor, const CancellationToken& token) {
      std::forward<A>(a).coAwait(executor, token);
    };

// What `co_await a` awaits in a weft coroutine (or `await(a)` in a fiber) bound to
// `executor` and `token`: the one dispatch both use.
//  - a Lazy: itself (its own awaiter makes it inherit the executor and token);
//  - a cancellation-aware awaitable: coAwait(executor, token);
//  - an executor-aware awaitable: coAwait(executor);
//  - anything else: wrapped so that the awaiting coroutine resumes through `executor`.
// A Lazy is returned as the reference it was given; the others by value.
template <class A>
decltype(auto) bindAwaitable(A&& awaitable, Executor* executor, const CancellationToken& token) {
  if constexpr (kIsLazy<std::remove_cvref_t<A>>) {
    return std::forward<A>(awaitable);
  } else if constexpr (CancellationAwareAwaitable<A>) {
    return std::forward<A>(awaitable).coAwait(executor, token);
  } else if constexpr (ExecutorAwareAwaitable<A>) {
    return std::forward<A>(awaitable).coAwait(executor);
  } else {
    return ViaAwaiter<AwaiterOf<A>>(getAwaiter(std::forward<A>(awaitable)), executor);
  }
}
template <class A>
using BoundAwaitable = decltype(bindAwaitable(std::declval<A>(), std::declval<Executor*>(),
                                              std::declval<const CancellationToken&>()));

// What a suspended coroutine of a root task waits on, as the task's record publishes it
// (TaskRecord::wait, coro/detail/registry_slot.h): the awaiter and how to
// describe it, the coroutine that waits (where a dump starts its async backtrace) and
// where (its co_await, WEFT_CODE_ADDRESS, which async backtraces show as file:line).
// Lives beside the awaiter, in the waiting coroutine's frame. No member initializers: a
// NotedAwaiter fills one in only when it publishes it.
struct LazyWaitNote {
  DescribeWait describe;  // as WaitNote's
  const void* awaiter;
  const LazyPromiseBase* waiter;
  const void* suspendPoint;
};

// An awaiter as a Lazy awaits it with WEFT_TASK_TRACKING: when the coroutine belongs to a
// root task (its promise has the task's record) and suspends, the wait is published in
// the task's record, and withdrawn when the co_await is over. `Awaiter` may be
// a reference type.
//
// Cost: an await that does not suspend (await_ready) pays one store (`record` cleared,
// after the awaiter's own await_ready, which lets the compiler drop the test in
// await_resume on that path). One that suspends outside a root task (a collect's
// branches, a fiber's driver) tests the promise's record and `record`; inside one,
// writes the note (four words), publishes it, ends the task's run on the thread
// (running_root.h, monitored_task.h), and when resumed withdraws it (a store, and the
// dump gate's load and branch) and enters the run again.
template <class Awaiter>
struct NotedAwaiter {
  using Plain = std::remove_cvref_t<Awaiter>;
  // The awaiter is made in place by `make` (it may be neither movable nor copyable). A
  // constructor rather than aggregate initialisation: g++ zero-fills a whole aggregate
  // (awaiter included) before initialising it, which an uncontended Mutex::lock felt.
  template <class Make>
  [[gnu::always_inline]] explicit NotedAwaiter(Make&& make)
      : awaiter(std::forward<Make>(make)()) {}
  NotedAwaiter(const NotedAwaiter&) = delete;
  NotedAwaiter& operator=(const NotedAwaiter&) = delete;

  Awaiter awaiter;
  // The record the wait is published in (marked kMonitoredWait when the wait ended a
  // monitored poll: monitored_task.h); null: not published. Set on every path before
  // await_resume reads it: null by await_ready, the task's record by await_suspend when
  // it publishes.
  TaskRecord* record;
  LazyWaitNote note;  // filled in only when published

  // All forced inline: g++ stops inlining into a coroutine's body past a size, and the
  // wrapper must not be what pushes the awaiter's own members out of line. The suspend
  // point noted is then in the coroutine's body, too.
  [[gnu::always_inline]] bool await_ready() {
    const bool ready = awaiter.await_ready();
    // On both paths: a store only where the awaiter is ready costs a jump back
    // (BM_Mutex_Uncontended 44 -> 45 instructions per lock), more than the store it
    // saves on the path that publishes.
    record = nullptr;
    return ready;
  }
  template <class Promise>
  [[gnu::always_inline]] decltype(auto) await_suspend(std::coroutine_handle<Promise> self);
  // The wait is withdrawn before the awaiter's own await_resume and destruction. A
  // coroutine destroyed while suspended here never gets here: its root task is
  // unregistered first (unregisterRootTask), so no dump reads the record any more.
  [[gnu::always_inline]] decltype(auto) await_resume() {
    if (record != nullptr) [[unlikely]] {
      if (monitoredWait(record)) [[unlikely]] {
        resumeMonitored(record);  // for TaskMonitor (monitored_task.h): all three steps
      } else {
        record->withdrawWait();
        enterRootRun(record);  // for stall reports (running_root.h)
      }
    }
    return awaiter.await_resume();
  }
};

// What every Lazy promise shares: the lazy start, the continuation word, the executor
// the coroutine is bound to (nullptr for a plain Lazy), its cancellation token, and the
// propagation of both to awaited Lazys.
//
// The token is held by pointer, not by value: a CancellationToken copy is a reference
// count (an atomic), and a Lazy that never touches cancellation must not pay one per
// await (DESIGN.md, invariant 2). The pointee is owned by whoever bound the token
// (withCancellation's frame, a collect's frame, a fiber), which outlives every Lazy that
// inherits it: an awaited Lazy finishes (or is destroyed) before its awaiter resumes.
class LazyPromiseBase : public FrameAllocated {
 public:
  // Lazily started: nothing runs until the Lazy is awaited, started or synchronously
  // awaited. (A root task's first run, for stall reports, starts where the task is
  // started: runRootTask and scheduleRootTask, coro/detail/task_registry.h; a Lazy pays
  // nothing for it.)
  std::suspend_always initial_suspend() noexcept { return {}; }

  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    // Symmetric transfer to whoever waits: this is what keeps chains of awaits from
    // growing the native stack. noexcept: nothing here can fail.
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> self) noexcept {
      return self.promise().completionTarget();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }

  // Every co_await in a Lazy goes through here: bindAwaitable (above) gives it our
  // executor and token.
  //
  // With WEFT_TASK_TRACKING, the awaiter of anything but a Lazy (whose awaiter passes the
  // root task's record on to the awaited Lazy) is wrapped in a NotedAwaiter, which publishes
  // what this coroutine waits on while it is suspended.
  template <class A>
  decltype(auto) await_transform(A&& awaitable) {
    if constexpr (kIsLazy<std::remove_cvref_t<A>> || !WEFT_TASK_TRACKING) {
      return bindAwaitable(std::forward<A>(awaitable), executor_, *token_);
    } else if constexpr (kHeldByValue<BoundAwaitable<A>>) {
      return NotedAwaiter<BoundAwaitable<A>>([&]() -> decltype(auto) {
        return bindAwaitable(std::forward<A>(awaitable), executor_, *token_);
      });
    } else {
      return NotedAwaiter<AwaiterOf<BoundAwaitable<A>>>([&]() -> decltype(auto) {
        return getAwaiter(bindAwaitable(std::forward<A>(awaitable), executor_, *token_));
      });
    }
  }

  Executor* executor() const noexcept { return executor_; }
  void setExecutor(Executor* executor) noexcept { executor_ = executor; }

  // The token this coroutine carries (kNoCancellationToken unless one was bound or
  // inherited). Precondition of setCancellationToken: `token` is not null and outlives
  // this coroutine's run.
  const CancellationToken& cancellationToken() const noexcept { return *token_; }
  const CancellationToken* cancellationTokenPointer() const noexcept { return token_; }
  void setCancellationToken(const CancellationToken* token) noexcept { token_ = token; }

  void setContinuation(std::coroutine_handle<> awaiting) noexcept {
    continuation_ = reinterpret_cast<std::uintptr_t>(awaiting.address());
  }
  // Who waits for this coroutine, for async backtraces: the completion sink when one is
  // set, else what the awaiter recorded with setAsyncParent (null if nothing).
  AsyncParent asyncParent() const noexcept {
    if ((continuation_ & 1u) != 0) return AsyncParent::sink(completionSink());
    return asyncParent_;
  }
  void setAsyncParent(AsyncParent parent) noexcept { asyncParent_ = parent; }

  // The record of the root task this coroutine runs in (coro/detail/registry_slot.h),
  // where its NotedAwaiters publish what it waits on: set on the root by
  // registerRootTask, passed on to each Lazy it awaits (LazyAwaiter). Null outside a root
  // task (a collect's branches, a Task awaited by another coroutine, a fiber's driver):
  // nothing is published then. Only with WEFT_TASK_TRACKING.
  TaskRecord* rootRecord() const noexcept {
#if WEFT_TASK_TRACKING
    return rootRecord_;
#else
    return nullptr;
#endif
  }
  void setRootRecord(TaskRecord* record) noexcept {
#if WEFT_TASK_TRACKING
    rootRecord_ = record;
#else
    (void)record;
#endif
  }
  // A root task started under a TaskMonitor (coro/task_monitor.h) keeps the monitor's
  // record of it in its parent word, which asyncParent() never answers for a root (a root
  // has a completion sink). Set by TaskMonitor::instrument() on the Lazy it returns; read
  // only while that Lazy runs as a root task (an await of it overwrites the word, and the
  // Lazy then measures no polls). monitorRecord(): null if the word holds no record.
  void setMonitorRecord(MonitoredTask* record) noexcept {
    asyncParent_ = AsyncParent::monitorRecord(record);
  }
  MonitoredTask* monitorRecord() const noexcept {
    const std::uintptr_t word = asyncParent_.word_;
    return (word & AsyncParent::kTagMask) == AsyncParent::kMonitorRecord
               ? reinterpret_cast<MonitoredTask*>(word & ~AsyncParent::kTagMask)
               : nullptr;
  }
  // What a coroutine awaited by this one records as its parent: this coroutine.
  // (FiberDriverPromise answers its fiber instead.)
  AsyncParent asAsyncParent() const noexcept { return AsyncParent::promise(this); }
  // Sinks are at least pointer-aligned, so the low bit marks the word as a sink.
  void setCompletionSink(CompletionSink* sink) noexcept {
    continuation_ = reinterpret_cast<std::uintptr_t>(sink) | 1u;
  }

  // The completion sink set with setCompletionSink, or nullptr when the continuation is a
  // plain coroutine (or none). For wrappers that take over a coroutine's completion.
  CompletionSink* completionSink() const noexcept {
    return (continuation_ & 1u) != 0
               ? reinterpret_cast<CompletionSink*>(continuation_ & ~std::uintptr_t{1})
               : nullptr;
  }
  // The coroutine set with setContinuation (null if none, or a sink is set instead).
  std::coroutine_handle<> continuation() const noexcept {
    return (continuation_ & 1u) != 0
               ? std::coroutine_handle<>()
               : std::coroutine_handle<>::from_address(reinterpret_cast<void*>(continuation_));
  }

  std::coroutine_handle<> completionTarget() noexcept {
    if (continuation_ & 1u) [[unlikely]] {
      auto* sink = reinterpret_cast<CompletionSink*>(continuation_ & ~std::uintptr_t{1});
      return sink->onComplete_(sink);
    }
    return std::coroutine_handle<>::from_address(reinterpret_cast<void*>(continuation_));
  }

 private:
  // What coAwait returns is a temporary: when it is its own awaiter, the NotedAwaiter holds
  // it by value (made in place from the call), not a reference to the temporary.
  template <class Transformed>
  static constexpr bool kHeldByValue =
      !std::is_reference_v<Transformed> && std::is_reference_v<AwaiterOf<Transformed>>;

  std::uintptr_t continuation_ = 0;
  AsyncParent asyncParent_;
  // What an awaited Lazy inherits (LazyAwaiter): its executor, its root task (whose
  // record its waits are published in), its cancellation token. The executor and
  // the root side by side: both null in a new frame, one 16-byte store.
  Executor* executor_ = nullptr;
#if WEFT_TASK_TRACKING
  TaskRecord* rootRecord_ = nullptr;
#endif
  const CancellationToken* token_ = &kNoCancellationToken;
};

template <class Awaiter>
template <class Promise>
[[gnu::always_inline]] inline decltype(auto) NotedAwaiter<Awaiter>::await_suspend(
    std::coroutine_handle<Promise> self) {
  LazyPromiseBase& promise = self.promise();
  if (TaskRecord* const root = promise.rootRecord(); root != nullptr) {
    record = root;
    note = LazyWaitNote{&describeAwaiter<Plain>, std::addressof(awaiter), &promise,
                        WEFT_CODE_ADDRESS()};
    // Published, and for stall reports (running_root.h) and TaskMonitor
    // (monitored_task.h) the task's run on this thread ended: may mark `record`.
    publishWaitAndLeaveRun(root, &note, record);
  }
  // If await_suspend throws, the coroutine goes on (to its handler) without await_resume:
  // the wait is withdrawn here.
  try {
    return awaiter.await_suspend(self);
  } catch (...) {
    if (record != nullptr) {
      if (monitoredWait(record)) {
        resumeMonitored(record);
      } else {
        record->withdrawWait();
        enterRootRun(record);
      }
    }
    throw;
  }
}

// The parent a coroutine awaited from `awaiting` records: the awaiting weft coroutine
// (through its promise, which may name something else: a fiber's driver names its fiber),
// or a foreign coroutine.
template <class Promise>
AsyncParent asyncParentOf(std::coroutine_handle<Promise> awaiting) noexcept {
  if constexpr (std::is_base_of_v<LazyPromiseBase, Promise>) {
    return awaiting.promise().asAsyncParent();
  } else {
    return AsyncParent::foreignCoroutine(awaiting);
  }
}

// The parent an algorithm's branches record (a collect's, whose own coroutine `algorithm`
// runs them): whoever awaits the algorithm, so that its own frame is not shown.
template <class Promise>
AsyncParent asyncParentAbove(std::coroutine_handle<Promise> algorithm) noexcept {
  const AsyncParent parent = asyncParentOf(algorithm);
  const LazyPromiseBase* promise = parent.promise();
  return promise != nullptr ? promise->asyncParent() : parent;
}

// Called as an exception leaves a coroutine body (unhandled_exception): the first time
// weft sees that exception, it records the async backtrace from `promise`, so that if
// nobody receives the exception (a detached task's), the report says where it came from
// (abortOnLostException, coro/async_backtrace.h). Costs nothing unless an exception is
// thrown. noexcept: a diagnostic.
void noteExceptionOrigin(const LazyPromiseBase& promise) noexcept;

template <class T>
class LazyPromise final : public LazyPromiseBase {
 public:
  Lazy<T> get_return_object() noexcept;

  template <class U = T>
    requires std::convertible_to<U&&, T>
  void return_value(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    if constexpr (std::is_nothrow_constructible_v<T, U&&>) {
      // result_ is still empty here (co_return runs once, and unhandled_exception only
      // after it), so a new Try simply takes its place: an empty Try's destructor does
      // nothing, and this skips the emptiness check emplace() would make. Only for a
      // value that cannot throw on construction, which would leave a half-built Try.
      std::construct_at(&result_, std::forward<U>(value));
    } else {
      result_.emplace(std::forward<U>(value));
    }
  }
  // noexcept: storing an exception_ptr cannot fail (and the note is a diagnostic).
  void unhandled_exception() noexcept {
    noteExceptionOrigin(*this);
    result_.setException(std::current_exception());
  }

  Try<T> result_;
};

template <class T>
class LazyPromise<T&> final : public LazyPromiseBase {
 public:
  Lazy<T&> get_return_object() noexcept;
  void return_value(T& value) noexcept { result_.emplace(value); }
  void unhandled_exception() noexcept {
    noteExceptionOrigin(*this);
    result_.setException(std::current_exception());
  }

  Try<T&> result_;
};

template <>
class LazyPromise<void> final : public LazyPromiseBase {
 public:
  Lazy<void> get_return_object() noexcept;
  void return_void() noexcept { result_.emplace(); }
  void unhandled_exception() noexcept {
    noteExceptionOrigin(*this);
    result_.setException(std::current_exception());
  }

  Try<void> result_;
};

}  // namespace detail
}  // namespace weft
