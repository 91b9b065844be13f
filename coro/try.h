#pragma once

#include <exception>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace weft {

// Thrown by Try<T>::value() on a Try that holds neither a value nor an exception.
class EmptyTry : public std::logic_error {
 public:
  EmptyTry() : std::logic_error("weft: Try is empty (holds neither a value nor an exception)") {}
};

// Try<T>: the outcome of a computation: a value, an exception, or empty (not finished).
//
// collectAll returns one Try per branch so that every branch's result or exception
// reaches the caller; Lazy::start and Task::start hand one to their callback. T may be
// an object type, a reference (Try<T&> holds a pointer) or void.
//
// Errors: value() rethrows the stored exception, or throws EmptyTry when empty.
// Thread safety: like any value type; no internal synchronisation.
//
// Example:
//   weft::Try<int> t = 42;
//   if (t.hasValue()) use(t.value());
//   weft::Try<int> e{std::make_exception_ptr(std::runtime_error("x"))};  // e.value() throws
template <class T>
class Try {
  static_assert(!std::is_same_v<std::remove_cvref_t<T>, std::exception_ptr>,
                "Try<std::exception_ptr> is ambiguous");

 public:
  using ValueType = T;

  Try() noexcept {}
  template <class U = T>
    requires std::is_constructible_v<T, U&&> &&
             (!std::is_same_v<std::remove_cvref_t<U>, Try>) &&
             (!std::is_same_v<std::remove_cvref_t<U>, std::exception_ptr>)
  Try(U&& value) noexcept(std::is_nothrow_constructible_v<T, U&&>)  // NOLINT: implicit
      : state_(State::kValue) {
    std::construct_at(&value_, std::forward<U>(value));
  }
  explicit Try(std::exception_ptr error) noexcept : state_(State::kException) {
    std::construct_at(&exception_, std::move(error));
  }

  Try(const Try& other) requires std::is_copy_constructible_v<T> { constructFrom(other); }
  Try(Try&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    constructFrom(std::move(other));
  }
  Try& operator=(const Try& other) requires std::is_copy_constructible_v<T> {
    if (this != &other) {
      reset();
      constructFrom(other);
    }
    return *this;
  }
  Try& operator=(Try&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &other) {
      reset();
      constructFrom(std::move(other));
    }
    return *this;
  }
  ~Try() { reset(); }

  bool available() const noexcept { return state_ != State::kEmpty; }
  bool hasValue() const noexcept { return state_ == State::kValue; }
  bool hasException() const noexcept { return state_ == State::kException; }
  explicit operator bool() const noexcept { return hasValue(); }

  // The value; rethrows the stored exception, or throws EmptyTry.
  T& value() & {
    checkValue();
    return value_;
  }
  const T& value() const& {
    checkValue();
    return value_;
  }
  T&& value() && {
    checkValue();
    return std::move(value_);
  }

  // The stored exception, or a null exception_ptr when there is none.
  std::exception_ptr exception() const noexcept {
    return state_ == State::kException ? exception_ : std::exception_ptr();
  }

  template <class... Args>
  T& emplace(Args&&... args) {
    reset();
    std::construct_at(&value_, std::forward<Args>(args)...);
    state_ = State::kValue;
    return value_;
  }
  void setException(std::exception_ptr error) noexcept {
    reset();
    std::construct_at(&exception_, std::move(error));
    state_ = State::kException;
  }
  void reset() noexcept {
    if (state_ == State::kValue) {
      std::destroy_at(&value_);
    } else if (state_ == State::kException) {
      std::destroy_at(&exception_);
    }
    state_ = State::kEmpty;
  }

 private:
  enum class State : unsigned char { kEmpty, kValue, kException };

  template <class Other>
  void constructFrom(Other&& other) {
    if (other.state_ == State::kValue) {
      std::construct_at(&value_, std::forward<Other>(other).value_);
    } else if (other.state_ == State::kException) {
      std::construct_at(&exception_, std::forward<Other>(other).exception_);
    }
    state_ = other.state_;
  }

  [[noreturn]] void throwNoValue() const {
    if (state_ == State::kException) std::rethrow_exception(exception_);
    throw EmptyTry();
  }
  void checkValue() const {
    if (state_ != State::kValue) [[unlikely]] throwNoValue();
  }

  union {
    T value_;
    std::exception_ptr exception_;
  };
  State state_ = State::kEmpty;
};

// Try<T&>: holds a reference (as a pointer) or an exception.
template <class T>
class Try<T&> {
 public:
  using ValueType = T&;

  Try() noexcept = default;
  Try(T& value) noexcept : value_(std::addressof(value)), state_(State::kValue) {}  // NOLINT
  explicit Try(std::exception_ptr error) noexcept
      : exception_(std::move(error)), state_(State::kException) {}

  bool available() const noexcept { return state_ != State::kEmpty; }
  bool hasValue() const noexcept { return state_ == State::kValue; }
  bool hasException() const noexcept { return state_ == State::kException; }
  explicit operator bool() const noexcept { return hasValue(); }

  T& value() const {
    if (state_ != State::kValue) [[unlikely]] {
      if (state_ == State::kException) std::rethrow_exception(exception_);
      throw EmptyTry();
    }
    return *value_;
  }
  std::exception_ptr exception() const noexcept { return exception_; }

  T& emplace(T& value) noexcept {
    exception_ = nullptr;
    value_ = std::addressof(value);
    state_ = State::kValue;
    return value;
  }
  void setException(std::exception_ptr error) noexcept {
    exception_ = std::move(error);
    value_ = nullptr;
    state_ = State::kException;
  }
  void reset() noexcept {
    exception_ = nullptr;
    value_ = nullptr;
    state_ = State::kEmpty;
  }

 private:
  enum class State : unsigned char { kEmpty, kValue, kException };
  T* value_ = nullptr;
  std::exception_ptr exception_;
  State state_ = State::kEmpty;
};

// Try<void>: success, an exception, or empty.
template <>
class Try<void> {
 public:
  using ValueType = void;

  Try() noexcept = default;
  explicit Try(std::exception_ptr error) noexcept
      : exception_(std::move(error)), state_(State::kException) {}
  // A successful Try<void>.
  static Try success() noexcept {
    Try t;
    t.state_ = State::kValue;
    return t;
  }

  bool available() const noexcept { return state_ != State::kEmpty; }
  bool hasValue() const noexcept { return state_ == State::kValue; }
  bool hasException() const noexcept { return state_ == State::kException; }
  explicit operator bool() const noexcept { return hasValue(); }

  // Returns if successful; rethrows the stored exception, or throws EmptyTry.
  void value() const {
    if (state_ != State::kValue) [[unlikely]] {
      if (state_ == State::kException) std::rethrow_exception(exception_);
      throw EmptyTry();
    }
  }
  std::exception_ptr exception() const noexcept { return exception_; }

  void emplace() noexcept {
    exception_ = nullptr;
    state_ = State::kValue;
  }
  void setException(std::exception_ptr error) noexcept {
    exception_ = std::move(error);
    state_ = State::kException;
  }
  void reset() noexcept {
    exception_ = nullptr;
    state_ = State::kEmpty;
  }

 private:
  enum class State : unsigned char { kEmpty, kValue, kException };
  std::exception_ptr exception_;
  State state_ = State::kEmpty;
};

}  // namespace weft
