#pragma once

// The type-independent machinery of every fiber: its suspended context, the switches in
// and out of it (with the ASan/TSan annotations and the per-fiber C++ exception state),
// and its forced unwinding. Its stack is a FiberStack (fiber_stack.h). Fiber<T>
// (stackful/fiber.h) and the executor fibers of spawnFiber (stackful/spawn_fiber.h)
// derive from it.

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weft/coro/runtime_hooks.h"
#include "weft/stackful/detail/context.h"
#include "weft/stackful/detail/fiber_local_storage.h"
#include "weft/stackful/detail/fiber_registry.h"
#include "weft/stackful/detail/fiber_stack.h"
#include "weft/stackful/detail/tool_hooks.h"
#include "weft/stackful/fiber_options.h"
#include "weft/stackful/not_in_fiber.h"
#include "weft/stackful/protected_stack.h"
#include "weft/stackful/stack_pool.h"

namespace weft {

class SharedStack;

namespace detail {

// Thrown inside a suspended fiber that is being destroyed, out of the suspension point
// it is parked in, so that its stack unwinds and the destructors of its locals run. Not
// a std::exception: `catch (const std::exception&)` does not see it. Code that catches
// everything (`catch (...)`) must rethrow it; if it does not, the fiber's next attempt to
// suspend throws it again, so it unwinds all the same.
struct ForcedUnwind {};

// What few fibers need, allocated on first use: a name, FiberLocal values.
struct FiberExtras {
  std::string name;
  FiberLocalStorage locals;
};

// The C++ runtime's per-thread exception state (Itanium C++ ABI __cxa_eh_globals: the
// stack of caught exceptions and std::uncaught_exceptions()). Every fiber has its own,
// swapped in and out with the fiber, so that a fiber may suspend inside a catch block or
// a destructor running during unwinding, and resume on another thread.
struct EhState {
  void* caughtExceptions = nullptr;
  unsigned int uncaughtExceptions = 0;
};

// What a fiber of spawnFiber and its driver exchange across a switch (fiber_park.h).
struct ParkLink;

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
  //
  // The switch itself is made right here, in the caller's frame, between two out-of-line
  // halves: a switch breaks the CPU's return-address prediction for every frame between
  // the two switch calls, so each extra level costs a misprediction per switch. Hence
  // forced inline here and in Fiber::resume() (clang++ calls it out of line otherwise;
  // docs/stackful.md, "Where the switch is made").
  // (Under ASan and TSan this switch is made out of line, in one frame with the
  // sanitizers' fiber hooks, which must run immediately around it.)
  [[gnu::always_inline]] void resume() {
#if WEFT_ASAN || WEFT_TSAN
    resumeSanitized();
#else
    SwitchFrame frame;
    void* to = enter(frame);
    leave(frame, jumpContext(to, this));
#endif
  }
  // resume() for the fibers of spawnFiber, which may hand the thread straight to another
  // such fiber when they park (handOffTo()): runs this fiber, and returns the fiber that
  // switched back to this point (this one, or the last of a chain of hand-offs), parked
  // or finished, with the resuming side restored. After the switch nothing of `this` is
  // touched: once a fiber handed the thread on, another thread may already run it.
  // Preconditions and errors as resume().
  FiberCore* resumeUntilParked();
  // Unwinds the fiber if it is suspended (its locals' destructors run, on the calling
  // thread), then frees it and gives its stack back. Why noexcept: a destructor's work;
  // an exception that escapes the unwinding body is dropped.
  void destroy() noexcept;

  // noexcept on the accessors below: they read or move a member.
  State state() const noexcept { return state_; }
  // The state, read by a task dump on another thread (stackful/detail/fiber_registry.cc),
  // inside a DumpRead (coro/detail/dump_gate.h): while it reads kSuspended there, the
  // fiber stays parked, and what its park noted (ParkLink) is what it parked on.
  // acquire: pairs with the release of publishSuspended.
  State stateForDump() const noexcept {
    return std::atomic_ref<State>(const_cast<State&>(state_)).load(std::memory_order_acquire);
  }
  bool done() const noexcept { return state_ == State::kDone; }
  std::uint64_t id() const noexcept { return id_; }
  // nullptr when unnamed.
  const char* name() const noexcept {
    return extras_ != nullptr && !extras_->name.empty() ? extras_->name.c_str() : nullptr;
  }
  std::exception_ptr takeException() noexcept { return std::move(exception_); }
  bool hasException() const noexcept { return static_cast<bool>(exception_); }

  // --- from inside ---------------------------------------------------------------------
  // The fiber running on the calling thread, nullptr on a thread's own stack. Not inline:
  // a fiber may continue on another thread, and a thread_local's address computed before
  // a switch must not be reused after it.
  static FiberCore* current() noexcept;
  // Suspending the running fiber (this one): a park (stackful/detail/fiber_park.h) is
  // done in two halves, so that its callers (await(), this_fiber::yield()) make the
  // switch in their own frame, as resume() does. First the park decides where the fiber
  // goes, marks it suspended and answers that switch as a ParkSwitch (two words, so that
  // it comes back in registers): prepareSuspend(), back to whoever resumed it, or
  // handOffTo(next), straight into another suspended fiber. Then switchOut() makes the
  // switch and, once the fiber is resumed, records its new resumer. Under ASan and TSan,
  // the first half also records the switch's target, for switchOut() to tell them in the
  // frame that makes it.
  struct ParkSwitch {
    FiberCore* fiber;  // the fiber switching out; null: no switch to make
    void* target;      // the context to switch to
  };
  // The switch back to the resumer. When the fiber is being destroyed it cannot park
  // again: refuseParkWhileUnwinding(). Forced inline: a few stores.
  [[gnu::always_inline]] ParkSwitch prepareSuspend() {
    throwIfUnwinding();
    publishSuspended();
    sanitizerTargetIsResumer();
    return ParkSwitch{this, context_};
  }
  // The hand-off to `next` (suspended, its driver just taken from this thread's run
  // queue, its park acted on): `next` takes over this fiber's resumer and the thread's
  // fiber state, as if this fiber had switched back and the resumer had resumed `next`.
  // Where this fiber stopped is recorded by next's arrived(). Precondition: this fiber is
  // running on this thread and not being destroyed. noexcept: loads and stores.
  [[gnu::always_inline]] ParkSwitch handOffTo(FiberCore* next) noexcept;
  // When the fiber is being destroyed it cannot park again: refuseParkWhileUnwinding().
  // For await(), before it acts on a park itself.
  void throwIfUnwinding() const {
    if (unwinding_) [[unlikely]]
      refuseParkWhileUnwinding();
  }
  // An await that would suspend a fiber being destroyed (unwinding_): a destroyed fiber is
  // never resumed, so the await cannot complete. Inside a destructor run by the forced
  // unwind (the fiber's std::uncaught_exceptions() > 0), throwing would call
  // std::terminate: aborts with a weft message saying so. Otherwise (code caught
  // ForcedUnwind and went on) throws ForcedUnwind again, so the unwind goes on.
  [[noreturn]] void refuseParkWhileUnwinding() const;
  // While the fiber is being destroyed: true when a destructor run by an exception in
  // flight (the forced unwind) is running, where nothing may be thrown. noexcept: reads
  // the exception state.
  bool unwoundByDestructor() const noexcept;
  // Throws ForcedUnwind when the fiber is destroyed while parked here (unwindOnTop).
  // Forced inline, so that the switch is made in the frame of await() or yield(), which
  // are inline in the fiber's own code (see resume(); g++ calls it otherwise).
  [[gnu::always_inline]] static void switchOut(const ParkSwitch& park) {
    FiberCore* fiber = park.fiber;
    // The sanitizers' hooks, right before the switch, in the frame that makes it (see
    // tool_hooks.h), with the target the park recorded: the resumer, or the fiber handed
    // the thread. (ASan's finish hook runs on the other side: arrived().)
#if WEFT_ASAN
    asanStartSwitch(&fiber->asanFakeStack_, fiber->asanSwitchBottom_, fiber->asanSwitchSize_);
#endif
#if WEFT_TSAN
    tsanSwitchTo(fiber->tsanSwitchTarget_);
#endif
    fiber->arrived(jumpContext(park.target, fiber));
  }

  // True while the fiber is being destroyed (its stack unwinds). noexcept: a load.
  bool unwinding() const noexcept { return unwinding_; }
  // Called on the fiber's stack right after each switch into it: records the context
  // that switched here in the fiber that sent it (transfer.data). A resumer passes the
  // fiber it resumes, so that is this fiber's resuming context, where its next suspension
  // goes back to; a fiber that hands the thread over passes itself, so its own context
  // is recorded before it can be resumed (this fiber inherited its resumer, handOffTo).
  // noexcept: a store (and ASan's finish hook), on a path that cannot report failure.
  void arrived(ContextTransfer transfer) noexcept {
#if WEFT_ASAN
    arrivedSanitized(transfer);  // the same, and ASan's finish hook
#else
    static_cast<FiberCore*>(transfer.data)->context_ = transfer.context;
#endif
  }

  // Takes the fiber off the registry of tasks and fibers now, before it is freed (a
  // fiber whose driver is destroyed while it is parked); freeing it does it otherwise.
  // noexcept: see unregisterFiber.
  void unregister() noexcept { unregisterFiber(registrySlot_); }

  ParkLink* parkLink() const noexcept { return parkLink_; }
  void setParkLink(ParkLink* link) noexcept { parkLink_ = link; }
  // While suspended: its context (its stack pointer). noexcept: reads a member.
  const void* suspendedContext() const noexcept { return context_; }
  // This fiber's FiberLocal values. Throws std::bad_alloc on the first use if memory is
  // exhausted.
  FiberLocalStorage& localStorage() {
    if (extras_ == nullptr) extras_ = new FiberExtras();
    return extras_->locals;
  }

  // The stack this fiber runs on (its bounds, for the SIGSEGV handler).
  const FiberStack& stack() const noexcept { return stack_; }
  bool onSharedStack() const noexcept { return stack_.isShared(); }
  // While suspended on a stack of its own: how many bytes of it are in use (0 otherwise).
  std::size_t stackInUse() const noexcept {
    return state_ == State::kSuspended ? stack_.bytesInUse(context_) : 0;
  }

 protected:
  // The stack is given by create().
  FiberCore() noexcept = default;
  virtual ~FiberCore();
  // The entry of the fiber's context: entryFor<Box> of the most derived class, which
  // calls Box::runBody() (the body; an exception escaping it is stored, ForcedUnwind is
  // not). A template rather than a virtual run(): one frame less on every fiber's stack,
  // which is what a parked shared-stack fiber costs. noexcept: returns a constant.
  virtual ContextEntry entryPoint() const noexcept = 0;
  template <class Box>
  // noexcept: it catches everything the body throws; nothing may unwind into the
  // switch core's trampoline.
  static void entryFor(ContextTransfer transfer) noexcept;

 private:
  template <class Box, class... Args>
  static Box* placeOnStack(ProtectedStack&& stack, StackPool* pool, const FiberOptions& options,
                           Args&&... args);
  void initCommon(const FiberOptions& options);
  // Where the fiber's frames start on its stack. noexcept: reads members.
  void* contextTop() const noexcept { return stack_.framesTop(this); }
  // Marks the fiber done and leaves its stack for good. noexcept: it never returns.
  [[noreturn]] void finish() noexcept;

  // What enter() saves of the resuming side, for leave().
  struct SwitchFrame {
    FiberCore* outer;
    EhState* eh;
    void* callerCaught;
    unsigned int callerUncaught;
#if WEFT_ASAN
    void* fakeStack = nullptr;
#endif
  };
  // A park is published with a release store, after what the park noted (its ParkLink's
  // note and site): a dump that reads kSuspended reads them too (on x86-64 no
  // instruction, only the compiler's ordering). noexcept: a store.
  void publishSuspended() noexcept {
    std::atomic_ref<State>(state_).store(State::kSuspended, std::memory_order_release);
  }
  // As the fiber is resumed: marks it running, then passes the dump gate, so that a dump
  // reading its park (the awaiter on its stack) is done before the fiber goes on and
  // ends that await. noexcept: a store and passDumpGate's bounded wait.
  void markRunning() noexcept {
    // Relaxed: passDumpGate orders it (coro/detail/dump_gate.h).
    std::atomic_ref<State>(state_).store(State::kRunning, std::memory_order_relaxed);
    runtime::passDumpGate(state_);
  }

  // The halves of a switch into the fiber (resume()): enter() prepares it and returns the
  // context to jump to (aborting on a bad resume; throws std::bad_alloc only when a shared
  // stack's save buffer cannot grow, before anything changed); leave() records where the
  // fiber stopped and restores the resuming side.
  void* enter(SwitchFrame& frame);
#if WEFT_ASAN
  void arrivedSanitized(ContextTransfer transfer) noexcept;
#endif
  // noexcept on leave() and the sanitizer hook: stores and hook calls after (before) a
  // switch that has already happened (is committed); there is no failure to report.
  void leave(const SwitchFrame& frame, ContextTransfer back) noexcept;
  void sanitizerStartSwitchIn(SwitchFrame& frame) noexcept;
  // A whole switch into the fiber out of line, with the sanitizer hooks around it: a plain
  // jump, or, with `onTop`, running onTop on the fiber's stack first (ontopContext).
  void switchInWithHooks(ContextTransfer (*onTop)(ContextTransfer));
  void resumeSanitized();
  // Records, for switchOut's sanitizer hooks, that the switch goes back to the resumer.
  // noexcept: stores (nothing at all outside ASan and TSan).
  [[gnu::always_inline]] void sanitizerTargetIsResumer() noexcept {
#if WEFT_ASAN
    asanSwitchBottom_ = asanCallerBottom_;
    asanSwitchSize_ = asanCallerSize_;
#endif
#if WEFT_TSAN
    tsanSwitchTarget_ = tsanCaller_;
#endif
  }
  // Runs ForcedUnwind on top of the suspended fiber, until it finishes.
  void unwindSuspended();
  static ContextTransfer unwindOnTop(ContextTransfer transfer);
  // noexcept: bookkeeping and freeing, called from destroy().
  void freeStorage() noexcept;
  [[noreturn]] void abortMisuse(const char* what) const noexcept;
  [[noreturn]] void abortBadResume() const noexcept;

  // The fiber running on each thread (nullptr on a thread's own stack), and the address
  // of each thread's C++ exception globals (looked up on first use: ehGlobals()).
  // Visible here for handOffTo, inline in the parks.
  // Read only in functions that make no switch themselves: a fiber may continue on
  // another thread, and a thread_local's address computed before a switch must not be
  // reused after it. constinit (zero-initialized): no TLS wrapper call; the signal
  // handler reads `running_`.
  static constinit inline thread_local FiberCore* running_ = nullptr;
  static constinit inline thread_local EhState* ehGlobals_ = nullptr;
  [[gnu::always_inline]] static EhState* ehGlobals() noexcept {
    EhState* eh = ehGlobals_;
    if (eh == nullptr) [[unlikely]]
      eh = lookUpEhGlobals();
    return eh;
  }
  // The C++ runtime's exception globals of the calling thread (Itanium ABI: a pointer to
  // the caught-exception stack, then the uncaught count), stored in ehGlobals_: their
  // address is fixed for the thread's lifetime, and the lookup is a call into the C++
  // runtime and a __tls_get_addr. noexcept: the runtime's lookup cannot fail.
  static EhState* lookUpEhGlobals() noexcept;

  // Its slot in the registry of tasks and fibers (fiber_registry.h), from creation until
  // it is freed or unregister()ed.
  runtime::FiberSlot* registrySlot_ = nullptr;
  // While the fiber is suspended: its own context (what resume() jumps to). While it
  // runs: the context that resumed it (what it jumps back to). Each side stores the
  // other's handle as it gains control, so one word serves both.
  void* context_ = nullptr;
  std::exception_ptr exception_;
  // This fiber's C++ exception state (EhState) while it does not run, as two fields
  // placed where they pack the object.
  void* ehCaught_ = nullptr;
  FiberExtras* extras_ = nullptr;
  ParkLink* parkLink_ = nullptr;
  std::uint64_t id_ = 0;
  // The layout is packed on purpose: on a shared stack a parked fiber costs this object
  // plus its saved frames, in one heap block (<= 288 bytes on x86-64). The fields after
  // stack_ go into its tail padding ([[no_unique_address]]).
  [[no_unique_address]] FiberStack stack_;
  State state_ = State::kCreated;
  bool unwinding_ = false;
  std::uint32_t ehUncaught_ = 0;  // (see ehCaught_)
#if WEFT_ASAN
  void* asanFakeStack_ = nullptr;
  // The bounds of this fiber's resumer's stack, what its park or its end switches back
  // to. A fiber handed the thread inherits them with the resumer (handOffTo).
  const void* asanCallerBottom_ = nullptr;
  std::size_t asanCallerSize_ = 0;
  // The bounds of the stack switchOut() tells ASan it switches to, set by the park's
  // preparation: the resumer's, or those of the fiber handed the thread.
  const void* asanSwitchBottom_ = nullptr;
  std::size_t asanSwitchSize_ = 0;
#endif
#if WEFT_TSAN
  void* tsanFiber_ = nullptr;
  // The TSan fiber of this fiber's resumer: where its park or its end switches back to.
  // A fiber handed the thread inherits it with the resumer (handOffTo).
  void* tsanCaller_ = nullptr;
  // The TSan fiber that switchOut() tells TSan it switches to, set by the park's
  // preparation: tsanCaller_, or the TSan fiber of the fiber handed the thread.
  void* tsanSwitchTarget_ = nullptr;
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
  box->stack_.holdOwn(std::move(stack), pool);
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

template <class Box>
void FiberCore::entryFor(ContextTransfer transfer) noexcept {
  auto* self = static_cast<FiberCore*>(transfer.data);
  self->arrived(transfer);  // the first arrival
  try {
    static_cast<Box*>(self)->runBody();
  } catch (const ForcedUnwind&) {
    // Destroyed while suspended: the stack is unwound; nothing to report.
  } catch (...) {
    self->exception_ = std::current_exception();
  }
  self->finish();
}

template <class Box, class... Args>
Box* FiberCore::create(SharedStack& stack, const FiberOptions& options, Args&&... args) {
  static_assert(std::is_base_of_v<FiberCore, Box>);
  static_assert(alignof(Box) <= alignof(std::max_align_t));
  // glibc's chunks hold a request r in r + 8 bytes rounded up to 16: pick r = 8 (mod 16).
  constexpr std::size_t kRequest = (sizeof(Box) + kSharedInlineSave + 8 + 15) / 16 * 16 - 8;
  void* memory = ::operator new(kRequest);
  Box* box;
  try {
    box = ::new (memory) Box(std::forward<Args>(args)...);
  } catch (...) {
    ::operator delete(memory);
    throw;
  }
  box->stack_.holdShared(stack, static_cast<unsigned char*>(memory) + sizeof(Box),
                        static_cast<std::uint32_t>(kRequest - sizeof(Box)));
  box->initCommon(options);
  return box;
}

inline FiberCore::ParkSwitch FiberCore::handOffTo(FiberCore* next) noexcept {
  // What a switch back to the resumer and the resumer's resume() of `next` would do, at
  // once: the exception state goes from this fiber to next, next becomes the running
  // fiber and inherits our resumer (its own suspended context is read first). The two
  // states are stored last: g++ reloads after an atomic store what it loaded before it.
  EhState* const eh = ehGlobals();
  ehCaught_ = eh->caughtExceptions;
  ehUncaught_ = eh->uncaughtExceptions;
  eh->caughtExceptions = next->ehCaught_;
  eh->uncaughtExceptions = next->ehUncaught_;
  void* const to = next->context_;
  next->context_ = context_;
  running_ = next;
  publishSuspended();
  next->markRunning();
  // The sanitizers: next inherits what they know of our resumer too (its stack's bounds,
  // its TSan fiber), and the switch goes to next (its stack, its TSan fiber).
#if WEFT_ASAN
  next->asanCallerBottom_ = asanCallerBottom_;
  next->asanCallerSize_ = asanCallerSize_;
  asanSwitchBottom_ = next->stack_.bottom();
  asanSwitchSize_ = static_cast<std::size_t>(static_cast<const char*>(next->contextTop()) -
                                             static_cast<const char*>(asanSwitchBottom_));
#endif
#if WEFT_TSAN
  next->tsanCaller_ = tsanCaller_;
  tsanSwitchTarget_ = next->tsanFiber_;
#endif
  return ParkSwitch{this, to};
}

}  // namespace detail
}  // namespace weft
