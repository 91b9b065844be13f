#pragma once

#include <concepts>
#include <coroutine>
#include <stdexcept>
#include <type_traits>

#include "weft/coro/awaitable_support.h"
#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/executors/executor.h"

namespace weft {

// RefusesResumeOn<Promise>: the promise type declares
// `static constexpr const char* kRefusesResumeOn = "<why, and what to do instead>"`, for
// coroutines that cannot be moved to another executor (weft's fibers stay on the executor
// they were spawned on): `co_await resumeOn(executor)` in one then throws
// std::logic_error with that message, and the coroutine stays where it is.
// Example:
//   struct promise_type { static constexpr const char* kRefusesResumeOn = "weft: ..."; };
template <class Promise>
concept RefusesResumeOn = requires {
  { Promise::kRefusesResumeOn } -> std::convertible_to<const char*>;
};

namespace detail {

// Takes over the completion of a coroutine that resumeOn moved away from the executor its
// awaiter expects it on: the awaiter is resumed on that executor (inline when the
// coroutine finishes on one of its threads), as after any await. Frees itself.
class ResumeOnHomeSink final : public CompletionSink, public FrameAllocated {
 public:
  ResumeOnHomeSink(Executor* home, std::coroutine_handle<> awaiter, AsyncParent parent) noexcept
      : CompletionSink(&ResumeOnHomeSink::complete), home_(home), awaiter_(awaiter) {
    traceParent_ = parent;  // the hop is not shown
  }

  static bool isOne(const CompletionSink* sink) noexcept {
    return sink != nullptr && sink->onComplete_ == &ResumeOnHomeSink::complete;
  }

 private:
  // noexcept: runs in the coroutine's final suspend.
  static std::coroutine_handle<> complete(CompletionSink* sink) noexcept {
    auto* self = static_cast<ResumeOnHomeSink*>(sink);
    Executor* home = self->home_;
    std::coroutine_handle<> awaiter = self->awaiter_;
    delete self;
    return resumeOnExecutor(home, awaiter);
  }

  Executor* home_;
  std::coroutine_handle<> awaiter_;
};

// The awaiter of `co_await resumeOn(target)`.
class ResumeOnAwaiter {
 public:
  ResumeOnAwaiter(Executor* target, Executor* current) noexcept
      : target_(target), current_(current) {}

  // Already there: a coroutine bound to `target`, running on one of its threads.
  bool await_ready() const noexcept {
    return target_ == current_ && target_->currentThreadInExecutor();
  }
  // Rebinds the coroutine to `target` (later awaits resume there too), then schedules it
  // there. On failure the coroutine keeps its executor and the co_await throws.
  template <class Promise>
  void await_suspend(std::coroutine_handle<Promise> self) {
    if constexpr (RefusesResumeOn<Promise>) {
      throw std::logic_error(Promise::kRefusesResumeOn);
    } else if constexpr (std::is_base_of_v<LazyPromiseBase, Promise>) {
      LazyPromiseBase& promise = self.promise();
      Executor* previous = promise.executor();
      // An awaiter that resumes us by symmetric transfer expects us back on `previous`
      // (a Lazy awaited in a Task, a Task awaited from its own executor): from now on our
      // completion hops it there. Other sinks (a Task awaited from elsewhere, syncAwait,
      // start, the collects) bring their awaiters back themselves.
      const std::coroutine_handle<> awaiter = promise.continuation();
      ResumeOnHomeSink* home = nullptr;
      if (previous != nullptr && previous != target_ && awaiter) {
        home = new ResumeOnHomeSink(previous, awaiter, promise.asyncParent());
        promise.setCompletionSink(home);
      }
      promise.setExecutor(target_);
      try {
        target_->schedule(self);
      } catch (...) {
        // Not scheduled: nothing runs concurrently; undo.
        promise.setExecutor(previous);
        if (home != nullptr) {
          promise.setContinuation(awaiter);
          delete home;
        }
        throw;
      }
    } else {
      target_->schedule(self);
    }
  }
  void await_resume() const noexcept {}

 private:
  Executor* target_;
  Executor* current_;
};

struct ResumeOnAwaitable {
  Executor* target;
  // Weft coroutines hand over their executor (and skip the hop back to it that other
  // awaitables get).
  ResumeOnAwaiter coAwait(Executor* current) const noexcept { return {target, current}; }
  ResumeOnAwaiter operator co_await() const noexcept { return {target, nullptr}; }
};

}  // namespace detail

// What resumeOn() returns: an awaitable that moves the coroutine, resuming with void.
using ResumeOnOperation = detail::ResumeOnAwaitable;

// `co_await weft::resumeOn(executor)`: moves the running coroutine to `executor`: it
// continues on one of the executor's threads, and from then on is bound to it (the
// awaits that follow resume there, and the Lazys it awaits inherit it), as cppcoro's
// resume_on / schedule_on and folly's co_withExecutor do for one coroutine. Awaited on
// one of `executor`'s threads by a coroutine already bound to it, it does nothing.
//
// Semantics: the awaiting Lazy/Task is rebound, not its awaiter: when it finishes, its
// awaiter resumes on the executor it expects (its own), as after any await; a Lazy with
// no executor (one run by syncAwait on a plain thread) resumes its awaiter on the
// thread it finishes on.
//
// Preconditions: `executor` is not null and outlives the coroutine's run on it.
// Errors: ExecutorShutDown if `executor` refuses the coroutine (it then stays where it
// was, bound to its executor); std::logic_error where the coroutine's promise refuses to
// move (RefusesResumeOn: from await() in a fiber, which stays on its executor).
// Thread safety: as any await.
//
// Example:
//   co_await weft::resumeOn(&cpuPool);   // parse on the CPU pool
//   Document doc = parse(bytes);
//   co_await weft::resumeOn(&ioPool);    // back to the I/O pool
inline ResumeOnOperation resumeOn(Executor* executor) {
  if (executor == nullptr) throw std::invalid_argument("weft: resumeOn(nullptr)");
  return ResumeOnOperation{executor};
}

}  // namespace weft
