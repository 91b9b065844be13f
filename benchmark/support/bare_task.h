#pragma once

// The floor weft's coroutine benchmarks are read against: a bare, featureless task.
//
// BareTask<T> is what any C++20 lazy task must do and nothing more: a promise holding
// the continuation and the result (a value and an exception_ptr), a lazy start, and
// symmetric transfer back to the awaiter in final_suspend. No executor, no atomics, no
// Try, no completion sinks; frames come from the global operator new. PooledBareTask<T>
// is the same task with frames recycled through a minimal thread-local free list, the
// floor for code that, like weft, never calls malloc in the steady state.
//
// syncWait and collectAll below are the matching floors: syncWait runs the task on the
// calling thread and requires that it finished (nothing here can resume it later), and
// collectAll counts finished branches with a plain counter, each branch's continuation
// pointing at one join coroutine per collect. Single-threaded by design: nothing here
// may be resumed on another thread.
//
// Benchmark support only, not part of weft: benchmark/coro/lazy_benchmark.cc and
// benchmark/coro/lazy_memory.cc use it as their baseline.

#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace weft::bench {

// Frame allocation policy of BareTask: the global operator new (no members at all).
struct HeapFrames {};

// Frame allocation policy of PooledBareTask: one free list per 16-byte size class, in a
// thread-local array; blocks are never given back to the heap (they are reused until
// the process exits, which is all a benchmark needs). No header, no byte accounting.
struct FreeListFrames {
  static constexpr std::size_t kClasses = 64;  // frames up to 1008 bytes are recycled

  static void* operator new(std::size_t size) {
    const std::size_t cls = (size + 15) / 16;
    if (cls < kClasses) {
      if (void* block = freeLists_[cls]; block != nullptr) {
        freeLists_[cls] = *static_cast<void**>(block);
        return block;
      }
      return ::operator new(cls * 16);
    }
    return ::operator new(size);
  }
  static void operator delete(void* block, std::size_t size) noexcept {
    const std::size_t cls = (size + 15) / 16;
    if (cls < kClasses) {
      *static_cast<void**>(block) = freeLists_[cls];
      freeLists_[cls] = block;
      return;
    }
    ::operator delete(block);
  }

  // constinit: constant-initialised, so reaching it needs no TLS guard (as weft's cache).
  static inline constinit thread_local void* freeLists_[kClasses] = {};
};

// The result half of a promise: a value and an exception_ptr side by side.
template <class T>
struct BareResult {
  void return_value(T value) noexcept(std::is_nothrow_move_assignable_v<T>) {
    value_ = std::move(value);
  }
  T take() {
    if (error_) std::rethrow_exception(error_);
    return std::move(value_);
  }
  T value_{};
  std::exception_ptr error_;
};

template <>
struct BareResult<void> {
  void return_void() noexcept {}
  void take() const {
    if (error_) std::rethrow_exception(error_);
  }
  std::exception_ptr error_;
};

template <class T, class Frames>
class [[nodiscard]] BasicBareTask {
 public:
  struct promise_type : BareResult<T>, Frames {
    BasicBareTask get_return_object() noexcept {
      return BasicBareTask(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      // Symmetric transfer to the awaiter: constant native stack for any chain depth.
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        return self.promise().continuation_;
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void unhandled_exception() noexcept { this->error_ = std::current_exception(); }

    std::coroutine_handle<> continuation_;
  };
  using Handle = std::coroutine_handle<promise_type>;

  BasicBareTask() noexcept = default;  // empty: owns no frame
  BasicBareTask(BasicBareTask&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  BasicBareTask& operator=(BasicBareTask&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~BasicBareTask() {
    if (handle_) handle_.destroy();
  }

  struct Awaiter {
    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
      handle_.promise().continuation_ = awaiting;
      return handle_;
    }
    T await_resume() { return handle_.promise().take(); }
    Handle handle_;
  };
  Awaiter operator co_await() && noexcept { return Awaiter{handle_}; }

  // Runs the task on this thread until it first suspends or finishes; when it finishes,
  // `continuation` is resumed (by default nothing is).
  void start(std::coroutine_handle<> continuation = std::noop_coroutine()) {
    handle_.promise().continuation_ = continuation;
    handle_.resume();
  }
  bool done() const noexcept { return handle_.done(); }
  T result() { return handle_.promise().take(); }

 private:
  explicit BasicBareTask(Handle handle) noexcept : handle_(handle) {}
  Handle handle_{};
};

template <class T>
using BareTask = BasicBareTask<T, HeapFrames>;
template <class T>
using PooledBareTask = BasicBareTask<T, FreeListFrames>;

// Runs `task` to completion on the calling thread and returns its result. The bare task
// has no executor to wait on, so a task that suspends is a bug of the benchmark: abort.
template <class T, class Frames>
T syncWait(BasicBareTask<T, Frames> task) {
  task.start();
  if (!task.done()) {
    std::fputs("weft::bench::syncWait: the bare task suspended; nothing can resume it\n", stderr);
    std::abort();
  }
  return task.result();
}

namespace detail {

// What a collect and its join share: branches still running (+1 for the collect itself
// while it starts them) and the collect's coroutine, resumed when the count hits zero.
struct JoinState {
  std::size_t pending;
  std::coroutine_handle<> collect;
};

// The join: a coroutine every branch's final_suspend transfers to. Each resumption
// counts one finished branch; the last one transfers to the collect.
class Join {
 public:
  struct promise_type {
    Join get_return_object() noexcept {
      return Join(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // the body cannot throw
  };
  struct Arrive {
    bool await_ready() const noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<>) const noexcept {
      return --state->pending == 0 ? state->collect : std::noop_coroutine();
    }
    void await_resume() const noexcept {}
    JoinState* state;
  };

  Join(Join&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  ~Join() {
    if (handle_) handle_.destroy();
  }
  std::coroutine_handle<> handle() const noexcept { return handle_; }

 private:
  explicit Join(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

inline Join joinLoop(JoinState* state) {
  for (;;) co_await Join::Arrive{state};
}

// Awaited by the collect: starts every branch, then waits for the join unless they all
// finished already.
template <class Task>
struct StartAll {
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> collect) {
    state->collect = collect;
    for (Task& task : *tasks) task.start(join->handle());
    return --state->pending != 0;
  }
  void await_resume() const noexcept {}
  std::vector<Task>* tasks;
  Join* join;
  JoinState* state;
};

template <class T>
using CollectResult = std::conditional_t<std::is_void_v<T>, void, std::vector<T>>;

}  // namespace detail

// Runs every task (one after another on this thread; a task that suspends lets the next
// one start) and completes when all have finished, with their results in order. A
// branch's exception is rethrown (the first one, in branch order) after all finished.
template <class T, class Frames>
BasicBareTask<detail::CollectResult<T>, Frames> collectAll(
    std::vector<BasicBareTask<T, Frames>> tasks) {
  detail::JoinState state{tasks.size() + 1, {}};
  detail::Join join = detail::joinLoop(&state);
  co_await detail::StartAll<BasicBareTask<T, Frames>>{&tasks, &join, &state};
  if constexpr (std::is_void_v<T>) {
    for (auto& task : tasks) task.result();
  } else {
    std::vector<T> results;
    results.reserve(tasks.size());
    for (auto& task : tasks) results.push_back(task.result());
    co_return results;
  }
}

}  // namespace weft::bench
