#pragma once

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/awaitable_support.h"
#include "weft/coro/cancellation.h"
#include "weft/coro/runtime_hooks.h"
#include "weft/coro/try.h"
#include "weft/executors/executor.h"
#include "weft/stackful/detail/fiber_core.h"
#include "weft/stackful/detail/fiber_park.h"
#include "weft/stackful/stack_pool.h"

namespace weft {

// Options of spawnFiber.
struct SpawnFiberOptions {
  // Names the fiber in diagnostics (stack overflow, misuse). Copied; empty: unnamed.
  std::string_view name;
  // Where the fiber's stack comes from; nullptr: StackPool::defaultPool().
  StackPool* stackPool = nullptr;
  // The fiber's cancellation token: await() hands it to cancellation-aware awaitables,
  // and Lazys awaited from the fiber inherit it. Default: never cancelled.
  CancellationToken cancellationToken;
};
// The name SpawnFiberOptions had before 1.0 (it configures spawnFiber, not spawn).
using SpawnOptions [[deprecated("weft: SpawnOptions is now SpawnFiberOptions")]] = SpawnFiberOptions;

// What awaiting a FiberFuture throws when its fiber will never finish: its driver was
// destroyed while the fiber was parked (an awaitable destroyed the handle it was given
// instead of resuming it), which unwound the fiber's stack.
class FiberDestroyed : public std::runtime_error {
 public:
  explicit FiberDestroyed(std::uint64_t fiberId)
      : std::runtime_error("weft: fiber " + std::to_string(fiberId) +
                           " was destroyed before it finished (its driver was destroyed while "
                           "it was parked)") {}
};

template <class T>
class FiberFuture;

namespace detail {

struct FiberFutureAccess;


// What a spawned fiber and its FiberFuture share: the one-shot result
// (weft::runtime::OneShotResult, coro/runtime_hooks.h) and what drives the fiber. Freed
// by whichever side is done with it last.
template <class T>
class SpawnState final : public runtime::OneShotResult<T, SpawnState<T>> {
 public:
  static constexpr const char* kHandleName = "FiberFuture";
  static constexpr const char* kAwaitName = "co_await of a FiberFuture";
  static constexpr const char* kClaimedBy = nullptr;

  SpawnState(Executor* executor, CancellationToken token) noexcept
      : runtime::OneShotResult<T, SpawnState>(&SpawnState::complete),
        executor_(executor),
        token_(std::move(token)) {
    link_.executor = executor;
    link_.token = &token_;
  }

  Executor* executor_;
  CancellationToken token_;  // the driver's promise and the link point at it
  std::uint64_t fiberId_ = 0;
  ParkLink link_;  // link_.driver: the driver, until it completes

  // Done and detached: nobody will see the result, so an exception there would be lost
  // silently; it is reported, as one escaping a std::thread (or a Go goroutine) is.
  void onLostResult() noexcept {
    if (this->result_.hasException()) reportDetachedException();
  }

  // The driver's frame is being destroyed before the fiber finished (see
  // FiberDriverPromise's destructor); the fiber's stack has been unwound. Completes the
  // state with FiberDestroyed, as complete() would with a result: the awaiter, if any, is
  // resumed (through its executor, never inline: this runs inside someone's destroy());
  // a detached fiber's end is reported like any exception nobody awaited. noexcept: a
  // destructor's path.
  static void abandoned(void* arg) noexcept {
    auto* self = static_cast<SpawnState*>(arg);
    self->link_.driver = nullptr;  // being destroyed by our caller
    try {
      self->result_.setException(std::make_exception_ptr(FiberDestroyed(self->fiberId_)));
    } catch (...) {
      self->result_.setException(std::current_exception());  // std::bad_alloc
    }
    self->publishAndResume();  // may free the state
  }

 private:
  [[noreturn]] void reportDetachedException() noexcept {
    char message[160];
    std::snprintf(message, sizeof(message),
                  "detached fiber %llu (spawnFiber on executor '%.*s') ended with an exception "
                  "nobody awaited",
                  static_cast<unsigned long long>(fiberId_),
                  static_cast<int>(executor_->name().size()), executor_->name().data());
    abortOnLostException(message, this->result_.exception());
  }

  // The driver finished (runs in its final suspend, on whatever thread ran the fiber's
  // last step). noexcept: a final-suspend path.
  static std::coroutine_handle<> complete(runtime::CompletionSink* sink) noexcept {
    auto* self = static_cast<SpawnState*>(sink);
    std::exchange(self->link_.driver, nullptr).destroy();  // suspended at its final point
    return self->publish();  // may free the state
  }
};

// The fiber's body on an executor fiber: stores fn's value or exception into the shared
// state.
template <class T, class F>
class ExecutorFiberBox final : public FiberCore {
 public:
  template <class G>
  ExecutorFiberBox(G&& fn, Try<T>* out) : fn_(std::forward<G>(fn)), out_(out) {}

  void runBody() {
    try {
      if constexpr (std::is_void_v<T>) {
        std::invoke(std::move(fn_));
        out_->emplace();
      } else {
        out_->emplace(std::invoke(std::move(fn_)));
      }
    } catch (const ForcedUnwind&) {
      throw;  // the fiber is being destroyed: nobody waits for a result
    } catch (...) {
      noteExceptionOriginHere();  // where it came from, if nobody awaits the fiber
      out_->setException(std::current_exception());
    }
  }

 private:
  ContextEntry entryPoint() const noexcept override {
    return &FiberCore::entryFor<ExecutorFiberBox>;
  }

  F fn_;
  Try<T>* out_;
};

}  // namespace detail

// FiberFuture<T>: the result of a fiber started by spawnFiber; await it once.
//
// Semantics: `co_await std::move(future)` in a Lazy/Task (or `syncAwait(std::move(future))`
// on a plain thread, or `weft::await(std::move(future))` in another fiber) waits for the
// fiber and returns fn's value or rethrows its exception. Awaited from a coroutine bound to
// an executor, the coroutine resumes on its own executor. Dropping the future without
// awaiting it detaches the fiber: it runs to the end regardless, and an exception it ends
// with is reported on stderr and aborts the process (as one escaping a std::thread does).
// Awaiting consumes the future: from the co_await on, it is empty (valid() is false).
//
// Preconditions: awaited at most once. Awaiting an empty (moved-from or already awaited)
// future prints "weft: co_await on an empty FiberFuture" and aborts.
// Errors: fn's exception, rethrown by the await. syncAwait(std::move(future)) on a thread
// of the executor the fiber runs on throws SyncAwaitDeadlock (as it does for a Task), and
// leaves the future untouched: that thread would block waiting for work it may have to
// run itself.
// Thread safety: a single-owner value; the fiber may finish on any thread.
template <class T>
class [[nodiscard]] FiberFuture {
 public:
  using ValueType = T;

  FiberFuture(FiberFuture&& other) noexcept = default;
  FiberFuture& operator=(FiberFuture&& other) noexcept = default;
  ~FiberFuture() = default;

  // Lets the fiber run on without anyone waiting for it (what the destructor does).
  void detach() && { state_.reset(); }

  // False once awaited, detached or moved from. noexcept: reads a member.
  bool valid() const noexcept { return state_.valid(); }

  // True once the fiber has finished. noexcept: one atomic load.
  bool ready() const noexcept { return state_.ready(); }

  // The executor the fiber runs on (nullptr for an empty future): syncAwait refuses, with
  // SyncAwaitDeadlock, to block one of its threads on this future (coro/sync_await.h).
  // noexcept: reads a member.
  Executor* syncAwaitExecutor() const noexcept {
    return state_.valid() ? state_.get()->executor_ : nullptr;
  }

  // The one-shot await (runtime::OneShotAwaiter), which owns the shared state from the
  // co_await on: the future is empty by then, so a second await finds it empty and aborts
  // instead of reading a result already moved out. Adds the fiber's async backtrace link.
  class Awaiter : public runtime::OneShotAwaiter<detail::SpawnState<T>> {
    using Base = runtime::OneShotAwaiter<detail::SpawnState<T>>;

    friend class FiberFuture;  // makes it: the constructor is not API
    Awaiter(detail::SpawnState<T>* state, Executor* executor) noexcept : Base(state, executor) {}

   public:
    Awaiter(Awaiter&&) noexcept = default;  // only before the await starts
    Awaiter& operator=(Awaiter&&) = delete;
    // Destroyed while waiting: the state's note of who awaits the fiber goes first, and
    // the dump gate is passed (coro/detail/dump_gate.h): a task dump reaches the state
    // through the fiber, which runs on, and must not follow the note into the awaiting
    // coroutine's frames once they are freed. Then the base detaches.
    ~Awaiter() {
      if (this->suspended()) [[unlikely]] {
        this->state()->traceParent_ = {};
        runtime::passDumpGate(this->state()->traceParent_);
      }
    }

    // noexcept: four stores and a compare-exchange.
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> awaiting) noexcept {
      // Async backtraces of the fiber go on to the awaiter (the sink's traceFiber_ is the
      // fiber, set by spawnFiber).
      this->state()->traceParent_ = runtime::asyncParentOf(awaiting);
      return Base::await_suspend(awaiting);
    }

    // For task dumps (coro/detail/wait_note.h).
    void describeWait(std::string& out) const {
      out += "FiberFuture of fiber " + std::to_string(this->state()->fiberId_);
    }
  };

  // Used by weft coroutines' await_transform: resumes the awaiter on `awaitingExecutor`.
  Awaiter coAwait(Executor* awaitingExecutor) && noexcept {
    return Awaiter(state_.takeForAwait(), awaitingExecutor);
  }
  // For other coroutines: resumes the awaiter on the thread that finishes the fiber.
  Awaiter operator co_await() && noexcept { return std::move(*this).coAwait(nullptr); }
  void operator co_await() & = delete;
  void operator co_await() const& = delete;

 private:
  friend struct detail::FiberFutureAccess;

  explicit FiberFuture(detail::SpawnState<T>* state) noexcept : state_(state) {}

  runtime::OneShotRef<detail::SpawnState<T>> state_;
};

namespace detail {
struct FiberFutureAccess {
  template <class T>
  static FiberFuture<T> make(SpawnState<T>* state) noexcept {
    return FiberFuture<T>(state);
  }
};
}  // namespace detail

// spawnFiber(executor, fn): starts `fn` in a new fiber on `executor` and returns a
// FiberFuture for its result.
//
// Semantics: the fiber is scheduled on the executor at once (it does not wait to be
// awaited; drop the future to let it run detached). Inside, fn may call weft::await(x)
// on any awaitable (the fiber parks, the thread runs other work) and
// this_fiber::yield() (the fiber goes to the back of the executor's queue). The fiber
// always runs on the executor's threads, and may move between them at each await or
// yield. Its stack comes from options.stackPool (default: StackPool::defaultPool(), 256
// KiB stacks, returned when the fiber ends).
//
// Preconditions: `executor` is not null (else abort).
// Errors: fn's exception reaches the awaiter of the future; FiberDestroyed does if the
// fiber is destroyed before it finished (an awaitable destroyed the handle of the
// fiber's driver instead of resuming it: the fiber's stack was unwound, and its waits
// were withdrawn). spawnFiber throws ExecutorShutDown if the executor refuses the fiber
// (nothing ran), and what the stack pool throws (std::system_error; std::bad_alloc when
// the default pool cannot be created, as for every allocation here) or copying fn
// throws. Destroying a coroutine while it awaits the future detaches the fiber (it runs
// on); once the fiber has finished and resumption is under way, that is reported and
// fatal (docs/concurrency.md, "Destroying a suspended coroutine").
// Thread safety: may be called from any thread, including from inside fibers and
// coroutines.
//
// Example:
//   weft::ThreadPool pool(2);
//   auto future = weft::spawnFiber(&pool, [] {
//     return weft::await(computeAsync()) + 1;  // computeAsync() returns a Lazy<int>
//   });
//   int v = weft::syncAwait(std::move(future));
template <class F>
  requires std::invocable<std::decay_t<F>&&>
FiberFuture<std::invoke_result_t<std::decay_t<F>&&>> spawnFiber(Executor* executor, F&& fn,
                                                                SpawnFiberOptions options = {}) {
  using T = std::invoke_result_t<std::decay_t<F>&&>;
  if (executor == nullptr) {
    std::fprintf(stderr, "weft: spawnFiber(nullptr, ...): a fiber needs an executor\n");
    std::abort();
  }
  auto* state = new detail::SpawnState<T>(executor, std::move(options.cancellationToken));
  detail::FiberCore* core;
  try {
    StackPool& pool = options.stackPool != nullptr ? *options.stackPool : StackPool::defaultPool();
    core = detail::FiberCore::create<detail::ExecutorFiberBox<T, std::decay_t<F>>>(
        pool, FiberOptions{options.name}, std::forward<F>(fn), &state->result_);
  } catch (...) {
    delete state;
    throw;
  }
  state->fiberId_ = core->id();
  state->traceFiber_ = core;
  core->setParkLink(&state->link_);
  detail::FiberDriverHandle handle;
  try {
    handle = detail::driveFiber(detail::FiberPtr(core)).handle;  // frees core if it throws
  } catch (...) {
    delete state;
    throw;
  }
  handle.promise().setExecutor(executor);
  handle.promise().setCancellationToken(&state->token_);
  handle.promise().setCompletionSink(state);
  handle.promise().setFiber(core);
  handle.promise().setOnAbandoned(&detail::SpawnState<T>::abandoned, state);
  state->link_.driver = handle;
  try {
    executor->schedule(std::coroutine_handle<>(handle));
  } catch (...) {
    handle.promise().setOnAbandoned(nullptr, nullptr);  // nobody holds the future yet
    handle.destroy();  // destroys the never-started fiber with the frame
    delete state;
    throw;
  }
  return detail::FiberFutureAccess::make(state);
}

}  // namespace weft
