#pragma once

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "weft/coro/try.h"
#include "weft/stackful/detail/fiber_core.h"
#include "weft/stackful/protected_stack.h"
#include "weft/stackful/shared_stack.h"
#include "weft/stackful/stack_pool.h"
#include "weft/stackful/this_fiber.h"

namespace weft {

namespace detail {

// A fiber with a result slot: what Fiber<T> points to. (Fiber<void> needs none: done()
// without an exception is success.)
template <class T>
class ResultFiberCore : public FiberCore {
 public:
  Try<T> result_;
};
template <>
class ResultFiberCore<void> : public FiberCore {};

// The concrete fiber: the body `fn` and its result.
template <class T, class F>
class PlainFiberBox final : public ResultFiberCore<T> {
 public:
  template <class G>
  explicit PlainFiberBox(G&& fn) : fn_(std::forward<G>(fn)) {}

  void runBody() {
    if constexpr (std::is_void_v<T>) {
      std::invoke(std::move(fn_));
    } else {
      this->result_.emplace(std::invoke(std::move(fn_)));
    }
  }

 private:
  ContextEntry entryPoint() const noexcept override { return &FiberCore::entryFor<PlainFiberBox>; }

  F fn_;
};

// F is a body of a Fiber<T>: called once as an rvalue (decayed), returning T.
template <class F, class T>
concept FiberBody = std::invocable<std::decay_t<F>&&> &&
                    std::same_as<std::invoke_result_t<std::decay_t<F>&&>, T>;

// Where a Fiber's stack comes from, as its constructor takes it: a StackPool&, a
// ProtectedStack (moved in) or a SharedStack&.
template <class S>
concept FiberStackSource = std::same_as<S, StackPool&> || std::same_as<S, ProtectedStack> ||
                           std::same_as<S, SharedStack&>;

// Deletes a Fiber's core: unwinds a suspended fiber, then frees it.
struct DestroyFiberCore {
  void operator()(FiberCore* core) const noexcept { core->destroy(); }
};

[[noreturn]] inline void abortEmptyFiber(const char* operation) noexcept {
  std::fprintf(stderr, "weft: %s on an empty Fiber (default-constructed or moved-from)\n",
               operation);
  std::abort();
}

}  // namespace detail

// Fiber<T>: a stackful coroutine with its own stack, resumed explicitly (asymmetric, as
// in libaco and Boost.Coroutine2's pull side).
//
// Semantics: `Fiber f(fn, stack)` prepares the fiber; nothing runs until `f.resume()`,
// which runs `fn` on the fiber's stack, on the calling thread, until fn calls
// `this_fiber::yield()` (then resume() returns and a later resume() continues right
// after the yield) or returns (then done() is true and result() has fn's value). fn may
// suspend anywhere in its call tree, inside ordinary functions: that is what a fiber is
// for. fn's result or exception reaches whoever resumed it last: the final resume()
// rethrows an exception that escaped fn.
//
// Stacks: by default a stack of ProtectedStack::kDefaultSize (256 KiB) from
// StackPool::defaultPool(). Or pass a StackPool& (its stacks, given back when the fiber
// ends), a ProtectedStack (owned by the fiber), or a SharedStack& (copy stacks: many
// fibers, one stack; see shared_stack.h for the rule that comes with them). A fiber that
// overflows its stack hits the guard page and weft prints
//   weft: stack overflow in fiber <name or id> (stack <N> bytes)
// then aborts.
//
// Destruction: destroying a suspended fiber unwinds its stack: a ForcedUnwind exception
// is raised at the yield it is parked in, so the destructors of its locals run (on the
// destroying thread). Code in the fiber that catches everything must rethrow it (if it
// does not, the fiber's next yield throws it again). A destructor that the unwinding
// runs may call this_fiber::yield(), which then returns at once. Destroying a fiber that never ran
// or has finished just frees it. Destroying a running fiber aborts.
//
// Preconditions (aborting with a message otherwise): resume() only a fiber that is not
// running and not done; not on an empty (moved-from) Fiber.
// Errors: resume() rethrows fn's exception when fn ends with one; result() throws
// EmptyTry when there is no value (not done, or fn threw). Constructors throw what the
// stack source throws (std::system_error when no stack can be mapped; std::bad_alloc when
// the default pool cannot be created) and what copying fn throws.
// Thread safety: a Fiber is a single-owner value. It may be resumed on different threads
// at different times (one at a time): its thread_local view changes accordingly (see
// docs/stackful.md). Each fiber has its own C++ exception state, so it may yield inside
// a catch block.
//
// Example:
//   weft::Fiber<int> f([] {
//     weft::this_fiber::yield();
//     return 42;
//   });
//   f.resume();                // runs to the yield
//   f.resume();                // runs to the end
//   int v = f.result();        // 42
template <class T = void>
class Fiber {
 public:
  using ValueType = T;

  // An empty fiber (valid() == false).
  Fiber() noexcept = default;

  // A fiber on a stack of StackPool::defaultPool().
  template <class F>
    requires detail::FiberBody<F, T>
  explicit Fiber(F&& fn, const FiberOptions& options = {})
      : Fiber(std::forward<F>(fn), StackPool::defaultPool(), options) {}

  // A fiber on a stack from `stack`: a StackPool& (given back when the fiber ends), a
  // ProtectedStack (moved in, owned by the fiber) or a SharedStack& (see "Stacks" above).
  template <class F, class Stack>
    requires detail::FiberBody<F, T> && detail::FiberStackSource<Stack>
  Fiber(F&& fn, Stack&& stack, const FiberOptions& options = {})
      : core_(detail::FiberCore::create<detail::PlainFiberBox<T, std::decay_t<F>>>(
            std::forward<Stack>(stack), options, std::forward<F>(fn))) {}

  // Moves leave `other` empty; assigning takes `other`'s fiber, then destroys the one held
  // before, as ~Fiber does.
  Fiber(Fiber&& other) noexcept = default;
  Fiber& operator=(Fiber&& other) noexcept = default;
  // Unwinds a suspended fiber, then frees it (see the class comment).
  ~Fiber() = default;

  // Runs the fiber until it yields or finishes; rethrows the exception fn ended with.
  [[gnu::always_inline]] void resume() {
    if (core_ == nullptr) detail::abortEmptyFiber("resume()");
    core_->resume();
    if (core_->done() && core_->hasException()) std::rethrow_exception(core_->takeException());
  }

  // noexcept on the observers: they read the fiber's state.
  bool valid() const noexcept { return core_ != nullptr; }
  // True once fn has returned or thrown.
  bool done() const noexcept { return core_ != nullptr && core_->done(); }
  // True once the fiber has run (it may have finished since).
  bool started() const noexcept {
    return core_ != nullptr && core_->state() != detail::FiberCore::State::kCreated;
  }
  // A process-wide unique number (names the fiber in diagnostics when it has no name).
  std::uint64_t id() const noexcept { return core_ != nullptr ? core_->id() : 0; }

  // fn's value (moved out for object types). Throws EmptyTry unless the fiber finished
  // with a value that was not taken yet.
  T result()
    requires(!std::is_void_v<T>)
  {
    if (core_ == nullptr) detail::abortEmptyFiber("result()");
    if constexpr (std::is_reference_v<T>) {
      return core_->result_.value();
    } else {
      return std::move(core_->result_).value();
    }
  }

 private:
  std::unique_ptr<detail::ResultFiberCore<T>, detail::DestroyFiberCore> core_;
};

template <class F, class... Rest>
Fiber(F&&, Rest&&...) -> Fiber<std::invoke_result_t<std::decay_t<F>&&>>;

}  // namespace weft
