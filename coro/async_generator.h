#pragma once

#include <coroutine>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/detail/lazy_promise.h"
#include "weft/coro/detail/misuse.h"
#include "weft/coro/detail/unique_coroutine.h"
#include "weft/executors/executor.h"

namespace weft {

template <class T>
class AsyncGenerator;

namespace detail {

// The promise of an AsyncGenerator. A Lazy promise underneath (LazyPromiseBase): the
// body may co_await anything a Lazy can, and the Lazys it awaits inherit the executor
// and cancellation token of the coroutine that asked for the element; every `next()`
// hands them over anew, so the body always runs with its current consumer's.
template <class T>
class AsyncGeneratorPromise final : public LazyPromiseBase {
 public:
  AsyncGenerator<T> get_return_object() noexcept;

  // `co_yield x`: suspends the body and transfers to the consumer (symmetric transfer),
  // which takes the value: moved from if x is an rvalue, copied if it is an lvalue. x
  // stays alive until then (a temporary lives until the end of the co_yield expression).
  struct YieldAwaiter {
    bool await_ready() const noexcept { return false; }
    // noexcept: only reads the continuation word.
    std::coroutine_handle<> await_suspend(
        std::coroutine_handle<AsyncGeneratorPromise> self) const noexcept {
      return self.promise().completionTarget();
    }
    void await_resume() const noexcept {}
  };
  YieldAwaiter yield_value(T&& value) noexcept {
    value_ = std::addressof(value);
    copy_ = false;
    inNext_ = false;
    return {};
  }
  YieldAwaiter yield_value(const T& value) noexcept {
    value_ = const_cast<T*>(std::addressof(value));  // only ever copied from
    copy_ = true;
    inNext_ = false;
    return {};
  }

  // Marks a next() as in progress, from its await_suspend until the body's next co_yield
  // (or its end, after which no next() suspends). A second next() arriving meanwhile (the
  // first one's body is suspended in an await of its own) aborts here, before it could
  // overwrite the first consumer's continuation. A plain bool, not an atomic: next() is
  // single-consumer (invariant 2: no atomics on this path); calls racing on two threads
  // are a data race that TSan reports.
  void enterNext() noexcept {
    if (inNext_) [[unlikely]] {
      abortMisuse(
          "AsyncGenerator: next() awaited while another next() is still in progress (one at "
          "a time)");
    }
    inNext_ = true;
  }

  void return_void() const noexcept {}
  // noexcept: storing an exception_ptr cannot fail.
  void unhandled_exception() noexcept { exception_ = std::current_exception(); }

  // For the consumer, once the body has suspended at a co_yield or finished.
  std::optional<T> take(std::coroutine_handle<AsyncGeneratorPromise> self) {
    if (exception_) std::rethrow_exception(std::exchange(exception_, nullptr));
    if (self.done()) return std::nullopt;
    if (copy_) return std::optional<T>(std::in_place, static_cast<const T&>(*value_));
    return std::optional<T>(std::in_place, std::move(*value_));
  }

 private:
  T* value_ = nullptr;
  bool copy_ = false;
  bool inNext_ = false;
  std::exception_ptr exception_;
};

// The awaiter of `co_await gen.next()`: runs the body (symmetric transfer) until its next
// co_yield or its end, then takes the element.
template <class T>
class AsyncGeneratorNextAwaiter {
 public:
  using Handle = std::coroutine_handle<AsyncGeneratorPromise<T>>;

  AsyncGeneratorNextAwaiter(Handle generator, Executor* executor,
                            const CancellationToken* token) noexcept
      : generator_(generator), executor_(executor), token_(token) {}

  // An empty or finished generator has nothing more: no suspension.
  bool await_ready() const noexcept { return !generator_ || generator_.done(); }

  // noexcept: only stores three words (or aborts on a second next() in progress), then
  // transfers to the body.
  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> consumer) noexcept {
    AsyncGeneratorPromise<T>& promise = generator_.promise();
    promise.enterNext();
    promise.setContinuation(consumer);
    promise.setAsyncParent(asyncParentOf(consumer));
    promise.setExecutor(executor_);
    promise.setCancellationToken(token_);
    return generator_;
  }

  std::optional<T> await_resume() {
    if (!generator_) return std::nullopt;
    return generator_.promise().take(generator_);
  }

 private:
  Handle generator_;
  Executor* executor_;
  const CancellationToken* token_;
};

template <class T>
class [[nodiscard]] AsyncGeneratorNext {
 public:
  explicit AsyncGeneratorNext(std::coroutine_handle<AsyncGeneratorPromise<T>> generator) noexcept
      : generator_(generator) {}

  // Used by weft coroutines' await_transform and by fibers' await(): the body runs with
  // the consumer's executor and cancellation token.
  AsyncGeneratorNextAwaiter<T> coAwait(Executor* executor,
                                       const CancellationToken& token) && noexcept {
    return AsyncGeneratorNextAwaiter<T>(generator_, executor, &token);
  }
  AsyncGeneratorNextAwaiter<T> coAwait(Executor* executor) && noexcept {
    return AsyncGeneratorNextAwaiter<T>(generator_, executor, &kNoCancellationToken);
  }
  AsyncGeneratorNextAwaiter<T> operator co_await() && noexcept {
    return AsyncGeneratorNextAwaiter<T>(generator_, nullptr, &kNoCancellationToken);
  }

 private:
  std::coroutine_handle<AsyncGeneratorPromise<T>> generator_;
};

}  // namespace detail

// AsyncGenerator<T>: a coroutine producing a sequence of T with `co_yield`, which may
// co_await between elements (read a channel, a socket, sleep...); the consumer awaits
// each element with `co_await gen.next()`.
//
// Semantics:
//  - Lazy: the body runs only inside next(). `co_await gen.next()` runs it until its
//    next co_yield (the element, as std::optional<T>: moved from an rvalue, copied from
//    an lvalue) or its end (an empty optional; every later next() too).
//  - The body runs on behalf of the coroutine that called next(): on its thread, with
//    its executor and cancellation token (a Task consumer's awaits inside the body
//    resume on the Task's executor; cancelling the consumer cancels the body's awaits).
//    Control passes between consumer and body by symmetric transfer: a loop over a
//    million elements that are ready at once does not grow the native stack.
//  - Destroying the AsyncGenerator while the body is suspended at a co_yield (or before
//    it started) destroys its frame, running the destructors of its locals.
//
// Preconditions: T is a non-const object type. One next() at a time (each after the
// previous one completed): a next() awaited while another is in progress prints
// "weft: AsyncGenerator: next() awaited while another next() is still in progress" and
// aborts. The AsyncGenerator is neither destroyed nor moved while a next() is in progress
// (the body is running or suspended in one of its own awaits).
// Errors: an exception escaping the body is rethrown from the next() that ran it; the
// sequence is then over.
// Thread safety: a single-owner value; successive next() calls may come from different
// threads (one at a time).
//
// Example (streaming a channel):
//   weft::AsyncGenerator<int> evens(weft::Channel<int>& ch) {
//     while (std::optional<int> v = co_await ch.receive()) if (*v % 2 == 0) co_yield *v;
//   }
//   auto gen = evens(ch);
//   while (std::optional<int> v = co_await gen.next()) use(*v);
template <class T>
class [[nodiscard]] AsyncGenerator {
  static_assert(std::is_object_v<T> && !std::is_array_v<T> && !std::is_const_v<T>,
                "weft::AsyncGenerator<T>: T must be a non-const object type");

 public:
  using promise_type = detail::AsyncGeneratorPromise<T>;
  using ValueType = T;
  // What next() returns: an awaitable that resumes with std::optional<T>.
  using NextOperation = detail::AsyncGeneratorNext<T>;

  AsyncGenerator() noexcept = default;

  // False for a default-constructed or moved-from AsyncGenerator (whose next() returns
  // an empty optional at once).
  bool valid() const noexcept { return handle_ != nullptr; }

  // `co_await gen.next()`: the next element, or an empty optional at the end.
  NextOperation next() noexcept { return NextOperation(handle_.get()); }

 private:
  friend promise_type;
  explicit AsyncGenerator(std::coroutine_handle<promise_type> handle) noexcept
      : handle_(handle) {}

  detail::UniqueCoroutine<promise_type> handle_;
};

namespace detail {
template <class T>
AsyncGenerator<T> AsyncGeneratorPromise<T>::get_return_object() noexcept {
  return AsyncGenerator<T>(std::coroutine_handle<AsyncGeneratorPromise<T>>::from_promise(*this));
}
}  // namespace detail

}  // namespace weft
