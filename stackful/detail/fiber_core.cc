#include "weft/stackful/detail/fiber_core.h"

#include <cxxabi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <utility>

#include "weft/stackful/detail/fiber_registry.h"
#include "weft/stackful/detail/stack_guard.h"

namespace weft::detail {

// Set when fiber_registry.cc, which installs the fiber tracers and the task dump's
// fiber entries, is linked: referring to it here links it wherever fibers are used.
extern const bool gFiberHooksInstalled;
namespace {
[[gnu::used]] const bool* const gLinkFiberHooks = &gFiberHooksInstalled;
}  // namespace

FiberCore* FiberCore::current() noexcept { return running_; }

EhState* FiberCore::lookUpEhGlobals() noexcept {
  auto* eh = reinterpret_cast<EhState*>(abi::__cxa_get_globals());
  ehGlobals_ = eh;
  return eh;
}

FiberCore::~FiberCore() { delete extras_; }

void FiberCore::initCommon(const FiberOptions& options) {
  if (!options.name.empty()) {
    // On std::bad_alloc the fiber stays unnamed (its id is printed instead): better than
    // leaking the half-made fiber.
    try {
      extras_ = new FiberExtras();
      extras_->name.assign(options.name);
    } catch (...) {
    }
  }
  // After the name: a dump may read the fiber from now on.
  registrySlot_ = registerFiber(this, id_);
}

void FiberCore::abortMisuse(const char* what) const noexcept {
  if (const char* fiberName = name(); fiberName != nullptr) {
    std::fprintf(stderr, "weft: %s (fiber %s)\n", what, fiberName);
  } else {
    std::fprintf(stderr, "weft: %s (fiber %llu)\n", what, static_cast<unsigned long long>(id_));
  }
  std::abort();
}

void FiberCore::abortBadResume() const noexcept {
  if (state_ == State::kDone) abortMisuse("resume() of a fiber that has finished");
  abortMisuse(
      "resume() of a running fiber (a fiber cannot resume itself, nor a fiber that is "
      "resuming it)");
}

// --- switching -------------------------------------------------------------------------

void* FiberCore::enter(SwitchFrame& frame) {
  if (state_ == State::kDone || state_ == State::kRunning) [[unlikely]]
    abortBadResume();
  if (stack_.isShared()) [[unlikely]] {
    if (!stack_.claimShared()) {
      abortMisuse(
          "a fiber of a SharedStack was resumed or destroyed while another fiber runs on "
          "that stack (fibers of one SharedStack run one at a time, each resumed from "
          "outside it)");
    }
  }
  if (state_ == State::kCreated) [[unlikely]] {
    auto* top = static_cast<unsigned char*>(contextTop());
    context_ = makeContext(
        top, static_cast<std::size_t>(top - static_cast<const unsigned char*>(stack_.bottom())),
        entryPoint());
  }
  ensureSignalStack();
  frame.outer = running_;
  running_ = this;
  // The resuming side never changes threads between enter() and leave() (it is blocked in
  // the switch), so one lookup of the exception globals serves both swaps.
  EhState* const eh = ehGlobals();
  frame.eh = eh;
  // Field by field, not as one 16-byte struct copy: the fields were just stored
  // separately by the previous switch, and a wide load of narrower stores stalls (store
  // forwarding fails).
  frame.callerCaught = eh->caughtExceptions;
  frame.callerUncaught = eh->uncaughtExceptions;
  eh->caughtExceptions = ehCaught_;
  eh->uncaughtExceptions = ehUncaught_;
  markRunning();
  return context_;
}

// The sanitizers' fiber hooks must run immediately around the switch, in the same frame:
// TSan records function entries and exits per fiber, ASan tracks the current stack. So
// they are here, never in enter()/leave().
void FiberCore::sanitizerStartSwitchIn(SwitchFrame& frame) noexcept {
#if WEFT_ASAN
  const void* bottom = stack_.bottom();
  asanStartSwitch(&frame.fakeStack, bottom,
                  static_cast<std::size_t>(static_cast<const unsigned char*>(contextTop()) -
                                           static_cast<const unsigned char*>(bottom)));
#else
  (void)frame;
#endif
#if WEFT_TSAN
  tsanCaller_ = tsanCurrentFiber();
  if (tsanFiber_ == nullptr) tsanFiber_ = tsanCreateFiber();
#endif
}

void FiberCore::switchInWithHooks(ContextTransfer (*onTop)(ContextTransfer)) {
  SwitchFrame frame;
  void* to = enter(frame);
  sanitizerStartSwitchIn(frame);
#if WEFT_TSAN
  tsanSwitchTo(tsanFiber_);
#endif
  ContextTransfer back = onTop == nullptr ? jumpContext(to, this) : ontopContext(to, this, onTop);
#if WEFT_ASAN
  asanFinishSwitch(frame.fakeStack, nullptr, nullptr);
#endif
  leave(frame, back);
}

void FiberCore::resumeSanitized() { switchInWithHooks(nullptr); }

FiberCore* FiberCore::resumeUntilParked() {
  SwitchFrame frame;
  void* to = enter(frame);
  // The sanitizers' hooks in this frame, right around the switch (see
  // sanitizerStartSwitchIn). Whichever fiber switches back here switches to this stack
  // and this TSan fiber: a fiber handed the thread inherits them (handOffTo).
#if WEFT_ASAN || WEFT_TSAN
  sanitizerStartSwitchIn(frame);
#endif
#if WEFT_TSAN
  tsanSwitchTo(tsanFiber_);
#endif
  ContextTransfer back = jumpContext(to, this);
#if WEFT_ASAN
  asanFinishSwitch(frame.fakeStack, nullptr, nullptr);
#endif
  // Every switch out of a fiber passes the fiber itself: this one, or the last fiber of
  // a chain of hand-offs that started with it.
  auto* parked = static_cast<FiberCore*>(back.data);
  parked->leave(frame, back);
  return parked;
}

void FiberCore::leave(const SwitchFrame& frame, ContextTransfer back) noexcept {
  context_ = back.context;
  EhState* const eh = frame.eh;
  ehCaught_ = eh->caughtExceptions;
  ehUncaught_ = eh->uncaughtExceptions;
  eh->caughtExceptions = frame.callerCaught;
  eh->uncaughtExceptions = frame.callerUncaught;
  running_ = frame.outer;
  if (stack_.isShared()) [[unlikely]]
    stack_.leaveShared(state_ == State::kDone ? nullptr : context_);
#if WEFT_TSAN
  // A TSan fiber is as heavy as a thread's state: free it as soon as the fiber is done.
  if (state_ == State::kDone) tsanDestroyFiber(std::exchange(tsanFiber_, nullptr));
#endif
}

void FiberCore::unwindSuspended() { switchInWithHooks(&FiberCore::unwindOnTop); }

#if WEFT_ASAN
void FiberCore::arrivedSanitized(ContextTransfer transfer) noexcept {
  auto* const sender = static_cast<FiberCore*>(transfer.data);
  sender->context_ = transfer.context;
  if (sender == this) {
    // From our resumer: its stack is where our park or our end goes back to.
    asanFinishSwitch(asanFakeStack_, &asanCallerBottom_, &asanCallerSize_);
  } else {
    // Handed the thread by `sender`: we inherited its resumer's bounds (handOffTo).
    asanFinishSwitch(asanFakeStack_, nullptr, nullptr);
  }
}
#endif

void FiberCore::finish() noexcept {
  // Relaxed: read by dumps (stateForDump), which read nothing of a finished fiber's park.
  std::atomic_ref<State>(state_).store(State::kDone, std::memory_order_relaxed);
#if WEFT_ASAN
  // Leaving for good: ASan may free this fiber's fake stack.
  asanStartSwitch(nullptr, asanCallerBottom_, asanCallerSize_);
#endif
#if WEFT_TSAN
  tsanSwitchTo(tsanCaller_);
#endif
  jumpContext(context_, this);
  // Nobody resumes a finished fiber.
  std::abort();
}

ContextTransfer FiberCore::unwindOnTop(ContextTransfer transfer) {
  auto* self = static_cast<FiberCore*>(transfer.data);
  self->arrived(transfer);
  throw ForcedUnwind{};
}

// --- destruction -----------------------------------------------------------------------

// While the fiber is being destroyed (unwinding_), whether the code running is unwinding:
// a destructor run by ForcedUnwind, or one run by another exception thrown meanwhile (the
// fiber's own exception state is the thread's while it runs). Then nothing may be thrown
// out of it. If ForcedUnwind was caught and not rethrown, nothing is in flight.
bool FiberCore::unwoundByDestructor() const noexcept { return std::uncaught_exceptions() > 0; }

void FiberCore::refuseParkWhileUnwinding() const {
  if (unwoundByDestructor()) {
    abortMisuse(
        "weft::await() would suspend a fiber that is being destroyed, in a destructor run "
        "by the unwinding of its stack: a destroyed fiber is never resumed, so the await "
        "cannot complete, and no exception may leave that destructor. Only awaits that "
        "complete at once (await_ready) can run there; this_fiber::yield() returns at once");
  }
  // ForcedUnwind was caught and not rethrown: throw it again, so the stack still unwinds.
  throw ForcedUnwind{};
}

void FiberCore::destroy() noexcept {
  if (state_ == State::kRunning) abortMisuse("a running fiber was destroyed");
  if (state_ == State::kSuspended) {
    unwinding_ = true;
    unwindSuspended();
    if (state_ != State::kDone) abortMisuse("a fiber being destroyed did not finish unwinding");
  }
  freeStorage();
}

void FiberCore::freeStorage() noexcept {
  unregisterFiber(registrySlot_);
#if WEFT_TSAN
  tsanDestroyFiber(tsanFiber_);
#endif
  const bool shared = stack_.isShared();
  // A fiber of its own stack lives on it: the stack is moved out first, and given back
  // once the object is gone.
  FiberStack::OwnStack own = stack_.release();
  if (shared) {
    void* memory = dynamic_cast<void*>(this);  // the block create() allocated
    this->~FiberCore();
    ::operator delete(memory);
    return;
  }
  this->~FiberCore();
  own.giveBack();
}

}  // namespace weft::detail
