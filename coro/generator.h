#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/coro/detail/frame_allocator.h"
#include "weft/coro/detail/misuse.h"
#include "weft/coro/detail/unique_coroutine.h"

namespace weft {

template <class T>
class Generator;

namespace detail {

template <class T>
class GeneratorPromise : public FrameAllocated {
 public:
  using Value = std::remove_cvref_t<T>;
  using Reference = std::conditional_t<std::is_reference_v<T>, T, T&>;

  Generator<T> get_return_object() noexcept;

  // Lazily started: nothing runs until begin().
  std::suspend_always initial_suspend() const noexcept { return {}; }
  // Suspends at the end so the consumer can observe done() and the frame is freed by
  // the Generator, never by itself. noexcept: required of final_suspend.
  std::suspend_always final_suspend() const noexcept { return {}; }

  // `co_yield x` hands the consumer a reference to x, which stays alive while the
  // generator is suspended: an lvalue is the generator's own object; a temporary lives
  // until the end of the co_yield full expression, which includes the suspension. No
  // copy is made (a value convertible to T is converted into such a temporary).
  std::suspend_always yield_value(std::remove_reference_t<T>& value) noexcept
    requires(!std::is_rvalue_reference_v<T>)
  {
    value_ = std::addressof(value);
    return {};
  }
  std::suspend_always yield_value(std::remove_reference_t<T>&& value) noexcept {
    value_ = std::addressof(value);
    return {};
  }

  void return_void() const noexcept {}
  // noexcept: storing an exception_ptr cannot fail.
  void unhandled_exception() noexcept { exception_ = std::current_exception(); }

  // A Generator is synchronous: it cannot suspend on anything but co_yield. (Use
  // AsyncGenerator, coro/async_generator.h, to await inside.)
  template <class U>
  std::suspend_never await_transform(U&&) = delete;

  Reference value() const noexcept { return static_cast<Reference>(*value_); }

  void rethrowIfFailed() {
    if (exception_) std::rethrow_exception(std::exchange(exception_, nullptr));
  }

 private:
  std::add_pointer_t<Reference> value_ = nullptr;
  std::exception_ptr exception_;
};

}  // namespace detail

// Generator<T>: a synchronous coroutine producing a sequence of T with `co_yield`,
// consumed with a range-for (an input range).
//
// Semantics:
//  - Lazy: the body runs only when the range is iterated. begin() runs it to its first
//    co_yield; each ++ runs it to the next; reaching the end of the body (or co_return)
//    ends the range.
//  - `*it` is a reference to the yielded object itself (no copy): T& for Generator<T>
//    (the consumer may move from it), T for Generator<T&>/Generator<const T&>. It is
//    valid until the iterator is advanced.
//  - Destroying the Generator destroys the coroutine frame wherever it is suspended,
//    running the destructors of its locals: stopping a range-for early is fine.
//  - The body may not co_await (a compile error): see AsyncGenerator for that.
//
// Preconditions: begin() is called at most once (the range is single-pass; a second
// call prints a message and aborts); an iterator at end() is neither incremented nor
// dereferenced (a message and abort); an iterator is not used after its Generator is
// destroyed or moved from.
// Errors: an exception escaping the body is rethrown from the begin() or ++ that ran it;
// the range is then over (the iterator equals end()).
// Thread safety: a Generator is a single-owner value; it may be iterated on a thread
// other than the one that created it, by one thread at a time.
//
// Example:
//   weft::Generator<int> iota(int n) { for (int i = 0; i < n; ++i) co_yield i; }
//   for (int i : iota(3)) std::printf("%d ", i);  // 0 1 2
template <class T>
class [[nodiscard]] Generator {
 public:
  using promise_type = detail::GeneratorPromise<T>;
  using value_type = std::remove_cvref_t<T>;
  using reference = typename promise_type::Reference;

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using iterator_concept = std::input_iterator_tag;
    using value_type = Generator::value_type;
    using reference = Generator::reference;
    using difference_type = std::ptrdiff_t;

    iterator() noexcept = default;

    // Precondition: not at end() (else a message and abort: the last yielded object is
    // gone). noexcept: reads a pointer, or aborts.
    reference operator*() const noexcept {
      checkNotAtEnd("Generator: dereferencing an iterator at end()");
      return handle_.promise().value();
    }
    std::add_pointer_t<reference> operator->() const noexcept {
      checkNotAtEnd("Generator: dereferencing an iterator at end()");
      return std::addressof(handle_.promise().value());
    }

    // Runs the body to its next co_yield (or its end). Rethrows what the body threw.
    // Precondition: not at end(): ++ there would resume a finished coroutine, so it prints
    // "weft: Generator: ++ on an iterator at end()" and aborts.
    iterator& operator++() {
      checkNotAtEnd("Generator: ++ on an iterator at end()");
      handle_.resume();
      if (handle_.done()) handle_.promise().rethrowIfFailed();
      return *this;
    }
    void operator++(int) { ++*this; }

    friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept {
      return it.handle_ == nullptr || it.handle_.done();
    }

   private:
    friend class Generator;
    explicit iterator(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}

    // One load of the frame's resume word, already in cache: cheap beside a resume.
    void checkNotAtEnd(const char* misuse) const noexcept {
      if (handle_ == nullptr || handle_.done()) [[unlikely]] {
        detail::abortMisuse(misuse);
      }
    }

    std::coroutine_handle<promise_type> handle_;
  };

  Generator() noexcept = default;

  // Runs the body to its first co_yield. Rethrows what the body threw before it.
  iterator begin() {
    if (!handle_) return iterator();  // an empty Generator is an empty range
    if (started_) detail::abortMisuse("Generator: begin() called twice (it is single-pass)");
    started_ = true;
    iterator it(handle_.get());
    ++it;
    return it;
  }
  std::default_sentinel_t end() const noexcept { return {}; }

 private:
  friend promise_type;
  explicit Generator(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}

  detail::UniqueCoroutine<promise_type> handle_;
  bool started_ = false;
};

namespace detail {
template <class T>
Generator<T> GeneratorPromise<T>::get_return_object() noexcept {
  return Generator<T>(std::coroutine_handle<GeneratorPromise<T>>::from_promise(*this));
}
}  // namespace detail

}  // namespace weft
