#pragma once

// The type-independent machinery of every fiber: its stack, its suspended context, the
// switches in and out of it (with the ASan/TSan annotations and the per-fiber C++
// exception state), and its forced unwinding. Fiber<T> (stackful/fiber.h) and the
// executor fibers of spawnFiber (stackful/spawn_fiber.h) derive from it.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

#include "stackful/detail/context.h"
#include "stackful/detail/tool_hooks.h"
#include "stackful/protected_stack.h"
#include "stackful/stack_pool.h"

namespace weft {

class SharedStack;

// Options of a new fiber.
struct FiberOptions {
  // Printed by the stack-overflow diagnostic and by misuse messages instead of the
  // fiber's numeric id. Copied; empty means unnamed.
  std::string_view name;
};

// Thrown by weft::await() and this_fiber functions called where they cannot work: on a
// thread's own stack (not inside a fiber), or, for await(), inside a plain Fiber that has
// no executor to be resumed by.
class NotInFiber : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {

// Thrown inside a suspended fiber that is being destroyed, out of the suspension point
// it is parked in, so that its stack unwinds and the destructors of its locals run. Not
// a std::exception: `catch (const std::exception&)` does not see it. Code that catches
// everything (`catch (...)`) must rethrow it; if it does not, the fiber's next attempt to
// suspend throws it again, so it unwinds all the same.
struct ForcedUnwind {};

class FiberLocalStorage;

// The C++ runtime's per-thread exception state (Itanium C++ ABI __cxa_eh_globals: the
// stack of caught exceptions and std::uncaught_exceptions()). Every fiber has its own,
// swapped in and out with the fiber, so that a fiber may suspend inside a catch block or
// a destructor running during unwinding, and resume on another thread.
struct EhState {
  void* caughtExceptions = nullptr;
  unsigned int uncaughtExceptions = 0;
};

// What an executor fiber's driver (spawn_fiber.h) and await() exchange across a switch.
struct AwaitLink;

class FiberCore {
 public:
  enum class State : std::uint8_t { kCreated, kSuspended, kRunning, kDone };

  FiberCore(const FiberCore&) = delete;
  FiberCore& operator=(const FiberCore&) = delete;

  // --- creation ------------------------------------------------------------------------
  // Each makes a `Box` (a FiberCore subclass) from `args` for a fiber on the given stack:
  // on a pooled or owned ProtectedStack the box lives at the top of that stack (no heap
  // allocation); on a SharedStack it is heap-allocated. Throw what the stack source or
  // Box's constructor throws, and std::invalid_argument if the stack is too small.
  template <class Box, class... Args>
  static Box* create(StackPool& pool, const FiberOptions& options, Args&&... args);
  template <class Box, class... Args>
  static Box* create(ProtectedStack&& stack, const FiberOptions& options, Args&&... args);
  template <class Box, class... Args>
  static Box* create(SharedStack& stack, const FiberOptions& options, Args&&... args);

  // --- from outside --------------------------------------------------------------------
  // Runs the fiber on the calling thread until it suspends or finishes. An exception
  // that escapes the body is kept (takeException()). Preconditions (aborting with a
  // message otherwise): the fiber is created or suspended. Throws std::bad_alloc only if
  // a shared stack's save buffer cannot grow (nothing has run then).
  void resume();
  // Unwinds the fiber if it is suspended (its locals' destructors run, on the calling
  // thread), then frees it and gives its stack back. Why noexcept: a destructor's work;
  // an exception that escapes the unwinding body is dropped.
  void destroy() noexcept;

  State state() const noexcept { return state_; }
  bool done() const noexcept { return state_ == State::kDone; }
  std::uint64_t id() const noexcept { return id_; }
  // nullptr when unnamed.
  const char* name() const noexcept { return name_; }
  std::exception_ptr takeException() noexcept { return std::move(exception_); }
  bool hasException() const noexcept { return static_cast<bool>(exception_); }

  // --- from inside ---------------------------------------------------------------------
  // The fiber running on the calling thread, nullptr on a thread's own stack. Not inline:
  // a fiber may continue on another thread, and a thread_local's address computed before
  // a switch must not be reused after it.
  static FiberCore* current() noexcept;
  // Suspends the running fiber (this one) until it is resumed; returns then, possibly on
  // another thread. Throws ForcedUnwind when the fiber is being destroyed.
  void suspend();

  AwaitLink* awaitLink() const noexcept { return awaitLink_; }
  void setAwaitLink(AwaitLink* link) noexcept { awaitLink_ = link; }
  FiberLocalStorage*& localStorage() noexcept { return locals_; }

  // For the SIGSEGV handler: the bounds of the stack this fiber runs on.
  const void* guardBegin() const noexcept;
  const void* stackBottom() const noexcept;
  std::size_t stackSize() const noexcept;

 protected:
  // The stack slot (a union member) is constructed by create().
  FiberCore() noexcept {}  // NOLINT(modernize-use-equals-default): the union needs it
  virtual ~FiberCore();
  // The body. An exception escaping it is stored (ForcedUnwind is not).
  virtual void run() = 0;

 private:
  enum class StackKind : std::uint8_t { kProtected, kShared };
  friend class weft::SharedStack;

  struct ProtectedSlot {
    ProtectedStack stack;
    StackPool* pool;  // where the stack goes back to; nullptr: unmapped
  };
  struct SharedSlot {
    SharedStack* stack;
    unsigned char* save;  // the fiber's live stack while another fiber runs on `stack`
    std::uint32_t saved;
    std::uint32_t capacity;
  };

  template <class Box, class... Args>
  static Box* placeOnStack(ProtectedStack&& stack, StackPool* pool, const FiberOptions& options,
                           Args&&... args);
  void initCommon(const FiberOptions& options);
  void* contextTop() const noexcept;

  // Switches into the fiber; with `unwind`, runs ForcedUnwind on top of it instead.
  void switchIn(bool unwind);
  // Called on the fiber's stack right after each switch into it.
  void arrived(ContextTransfer transfer) noexcept;
  static void entry(ContextTransfer transfer) noexcept;
  static ContextTransfer unwindOnTop(ContextTransfer transfer);
  void claimSharedStack();
  void leaveSharedStack() noexcept;
  void freeStorage() noexcept;
  [[noreturn]] void abortMisuse(const char* what) const noexcept;

  void* context_ = nullptr;  // the fiber's suspended context (kSuspended)
  void* caller_ = nullptr;   // while it runs: the context that switched to it
  std::exception_ptr exception_;
  EhState eh_;
  FiberLocalStorage* locals_ = nullptr;
  AwaitLink* awaitLink_ = nullptr;
  std::uint64_t id_ = 0;
  char* name_ = nullptr;
  State state_ = State::kCreated;
  StackKind kind_ = StackKind::kProtected;
  bool unwinding_ = false;
  union {
    ProtectedSlot protected_;
    SharedSlot shared_;
  };
#if WEFT_ASAN
  void* asanFakeStack_ = nullptr;
  const void* asanCallerBottom_ = nullptr;
  std::size_t asanCallerSize_ = 0;
#endif
#if WEFT_TSAN
  void* tsanFiber_ = nullptr;
  void* tsanCaller_ = nullptr;
#endif
};

template <class Box, class... Args>
Box* FiberCore::placeOnStack(ProtectedStack&& stack, StackPool* pool, const FiberOptions& options,
                             Args&&... args) {
  static_assert(std::is_base_of_v<FiberCore, Box>);
  static_assert(alignof(Box) <= 64);
  // The box sits at the top of the stack, 64-byte aligned; the fiber's frames grow down
  // from right below it.
  auto top = reinterpret_cast<std::uintptr_t>(stack.top());
  std::uintptr_t place = (top - sizeof(Box)) & ~std::uintptr_t{63};
  if (place < reinterpret_cast<std::uintptr_t>(stack.bottom()) + kMinContextStackSize) {
    if (pool != nullptr) pool->release(std::move(stack));
    throw std::invalid_argument("weft: fiber stack too small for its fiber");
  }
  Box* box;
  try {
    box = ::new (reinterpret_cast<void*>(place)) Box(std::forward<Args>(args)...);
  } catch (...) {
    if (pool != nullptr) pool->release(std::move(stack));
    throw;
  }
  box->kind_ = StackKind::kProtected;
  ::new (&box->protected_) ProtectedSlot{std::move(stack), pool};
  box->initCommon(options);
  return box;
}

template <class Box, class... Args>
Box* FiberCore::create(StackPool& pool, const FiberOptions& options, Args&&... args) {
  return placeOnStack<Box>(pool.acquire(), &pool, options, std::forward<Args>(args)...);
}

template <class Box, class... Args>
Box* FiberCore::create(ProtectedStack&& stack, const FiberOptions& options, Args&&... args) {
  if (!stack.valid()) throw std::invalid_argument("weft: fiber given an empty ProtectedStack");
  return placeOnStack<Box>(std::move(stack), nullptr, options, std::forward<Args>(args)...);
}

// Attaches a new heap-allocated fiber to a shared stack (shared_stack.h).
void attachToSharedStack(FiberCore* core, SharedStack& stack);

template <class Box, class... Args>
Box* FiberCore::create(SharedStack& stack, const FiberOptions& options, Args&&... args) {
  static_assert(std::is_base_of_v<FiberCore, Box>);
  Box* box = new Box(std::forward<Args>(args)...);
  box->kind_ = StackKind::kShared;
  ::new (&box->shared_) SharedSlot{&stack, nullptr, 0, 0};
  box->initCommon(options);
  attachToSharedStack(box, stack);
  return box;
}

}  // namespace detail
}  // namespace weft
