#include "stackful/fiber.h"

#include <cxxabi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "stackful/detail/await_link.h"
#include "stackful/detail/fiber_core.h"
#include "stackful/detail/fiber_local_storage.h"
#include "stackful/detail/stack_guard.h"
#include "stackful/fiber_local.h"
#include "stackful/shared_stack.h"

namespace weft {

SharedStack::~SharedStack() {
  if (users_ != 0) {
    std::fprintf(stderr,
                 "weft: SharedStack destroyed while %zu fiber(s) still use it (destroy the "
                 "fibers of a SharedStack before the stack)\n",
                 users_);
    std::abort();
  }
}

namespace detail {

namespace {

// The fiber running on this thread. constinit: the signal handler reads it.
constinit thread_local FiberCore* tCurrent = nullptr;

std::atomic<std::uint64_t> gNextFiberId{1};

// The C++ runtime's exception globals of the calling thread (Itanium ABI: a pointer to
// the caught-exception stack, then the uncaught count).
EhState* ehGlobals() noexcept { return reinterpret_cast<EhState*>(abi::__cxa_get_globals()); }

}  // namespace

bool describeRunningFiber(RunningStackInfo& info) noexcept {
  const FiberCore* fiber = tCurrent;
  if (fiber == nullptr) return false;
  info.guardBegin = fiber->guardBegin();
  info.stackBottom = fiber->stackBottom();
  info.stackSize = fiber->stackSize();
  info.id = fiber->id();
  info.name = fiber->name();
  return true;
}

void attachToSharedStack(FiberCore* /*core*/, SharedStack& stack) { ++stack.users_; }

FiberCore* FiberCore::current() noexcept { return tCurrent; }

FiberCore::~FiberCore() {
  delete locals_;
  delete[] name_;
}

void FiberCore::initCommon(const FiberOptions& options) {
  // relaxed: ids only need to be unique, not ordered with anything.
  id_ = gNextFiberId.fetch_add(1, std::memory_order_relaxed);
  if (!options.name.empty()) {
    // nothrow: an unnamed fiber is better than a leaked one; the id is printed instead.
    name_ = new (std::nothrow) char[options.name.size() + 1];
    if (name_ != nullptr) {
      std::memcpy(name_, options.name.data(), options.name.size());
      name_[options.name.size()] = '\0';
    }
  }
}

const void* FiberCore::guardBegin() const noexcept {
  return kind_ == StackKind::kShared ? shared_.stack->stack_.guardBegin()
                                     : protected_.stack.guardBegin();
}
const void* FiberCore::stackBottom() const noexcept {
  return kind_ == StackKind::kShared ? shared_.stack->stack_.bottom() : protected_.stack.bottom();
}
std::size_t FiberCore::stackSize() const noexcept {
  return kind_ == StackKind::kShared ? shared_.stack->stack_.size() : protected_.stack.size();
}
void* FiberCore::contextTop() const noexcept {
  // A protected stack holds the fiber's own object at its top; frames start below it.
  return kind_ == StackKind::kShared ? shared_.stack->stack_.top() : const_cast<FiberCore*>(this);
}

void FiberCore::abortMisuse(const char* what) const noexcept {
  if (name_ != nullptr) {
    std::fprintf(stderr, "weft: %s (fiber %s)\n", what, name_);
  } else {
    std::fprintf(stderr, "weft: %s (fiber %llu)\n", what, static_cast<unsigned long long>(id_));
  }
  std::abort();
}

void FiberCore::resume() {
  if (state_ == State::kDone) abortMisuse("resume() of a fiber that has finished");
  if (state_ == State::kRunning) {
    abortMisuse(
        "resume() of a running fiber (a fiber cannot resume itself, nor a fiber that "
        "is resuming it)");
  }
  switchIn(false);
}

// --- shared stacks ---------------------------------------------------------------------

// Makes the shared stack hold this fiber's frames: saves the frames of the fiber that
// occupies it (if another), then restores ours (if we have run before).
void FiberCore::claimSharedStack() {
  SharedStack& stack = *shared_.stack;
  if (stack.running_ != nullptr) {
    abortMisuse(
        "a fiber of a SharedStack was resumed or destroyed while another fiber runs on that "
        "stack (fibers of one SharedStack run one at a time, each resumed from outside it)");
  }
  auto* top = static_cast<unsigned char*>(stack.stack_.top());
  if (stack.owner_ != this) {
    if (FiberCore* other = stack.owner_; other != nullptr) {
      // The suspended context handle is the other fiber's stack pointer: everything live
      // is at or above it.
      auto* low = static_cast<unsigned char*>(other->context_);
      auto used = static_cast<std::size_t>(top - low);
      SharedSlot& slot = other->shared_;
      if (used > slot.capacity) {
        // Round up to 64 bytes: a fiber parked at slightly different depths reuses it.
        std::size_t capacity = (used + 63) & ~std::size_t{63};
        auto* save = static_cast<unsigned char*>(std::malloc(capacity));
        if (save == nullptr) throw std::bad_alloc();
        std::free(slot.save);
        slot.save = save;
        slot.capacity = static_cast<std::uint32_t>(capacity);
      }
      // The frames there may carry ASan poison (redzones of locals): copying them is
      // fine, the shadow is simply cleared (poisoning resumes as functions are entered).
      asanUnpoison(low, used);
      std::memcpy(slot.save, low, used);
      slot.saved = static_cast<std::uint32_t>(used);
      stack.owner_ = nullptr;
    }
    if (state_ == State::kSuspended) {
      unsigned char* low = top - shared_.saved;
      asanUnpoison(low, shared_.saved);
      valgrindMakeWritable(low, shared_.saved);
      std::memcpy(low, shared_.save, shared_.saved);
    }
    stack.owner_ = this;
  }
  stack.running_ = this;
}

void FiberCore::leaveSharedStack() noexcept {
  SharedStack& stack = *shared_.stack;
  stack.running_ = nullptr;
  if (state_ == State::kDone) {
    stack.owner_ = nullptr;
    // A finished fiber has nothing left to save.
    std::free(shared_.save);
    shared_.save = nullptr;
    shared_.saved = shared_.capacity = 0;
  }
}

// --- switching -------------------------------------------------------------------------

void FiberCore::switchIn(bool unwind) {
  if (kind_ == StackKind::kShared) claimSharedStack();
  if (state_ == State::kCreated) {
    auto* top = static_cast<unsigned char*>(contextTop());
    context_ = makeContext(
        top, static_cast<std::size_t>(top - static_cast<const unsigned char*>(stackBottom())),
        &FiberCore::entry);
    ensureSignalStack();
  }
  FiberCore* const outer = tCurrent;
  tCurrent = this;
  // The resuming side never changes threads during this call (it is blocked in it), so
  // one lookup of the exception globals serves both swaps.
  EhState* const eh = ehGlobals();
  const EhState callerEh = *eh;
  *eh = eh_;
  state_ = State::kRunning;

  void* fakeStack = nullptr;
  const void* bottom = stackBottom();
  asanStartSwitch(&fakeStack, bottom,
                  static_cast<std::size_t>(static_cast<const unsigned char*>(contextTop()) -
                                           static_cast<const unsigned char*>(bottom)));
#if WEFT_TSAN
  tsanCaller_ = tsanCurrentFiber();
  if (tsanFiber_ == nullptr) tsanFiber_ = tsanCreateFiber();
  tsanSwitchTo(tsanFiber_);
#endif
  ContextTransfer back =
      unwind ? ontopContext(context_, this, &FiberCore::unwindOnTop) : jumpContext(context_, this);
  asanFinishSwitch(fakeStack, nullptr, nullptr);

  context_ = back.context;
  eh_ = *eh;
  *eh = callerEh;
  tCurrent = outer;
  if (kind_ == StackKind::kShared) leaveSharedStack();
#if WEFT_TSAN
  // A TSan fiber is as heavy as a thread's state: free it as soon as the fiber is done.
  if (state_ == State::kDone) tsanDestroyFiber(std::exchange(tsanFiber_, nullptr));
#endif
}

void FiberCore::arrived(ContextTransfer transfer) noexcept {
  caller_ = transfer.context;
#if WEFT_ASAN
  asanFinishSwitch(asanFakeStack_, &asanCallerBottom_, &asanCallerSize_);
#endif
}

void FiberCore::suspend() {
  // A fiber being destroyed cannot park again: whoever caught ForcedUnwind gets it back.
  if (unwinding_) throw ForcedUnwind{};
  state_ = State::kSuspended;
#if WEFT_ASAN
  asanStartSwitch(&asanFakeStack_, asanCallerBottom_, asanCallerSize_);
#endif
#if WEFT_TSAN
  tsanSwitchTo(tsanCaller_);
#endif
  ContextTransfer transfer = jumpContext(caller_, nullptr);
  // Resumed: possibly on another thread, by another caller. (ForcedUnwind, when the fiber
  // is destroyed, comes out of the jumpContext call above, thrown by unwindOnTop.)
  arrived(transfer);
}

void FiberCore::entry(ContextTransfer transfer) noexcept {
  auto* self = static_cast<FiberCore*>(transfer.data);
  self->arrived(transfer);  // the first arrival (ASan: no fake stack to restore yet)
  try {
    self->run();
  } catch (const ForcedUnwind&) {
    // Destroyed while suspended: the stack is unwound; nothing to report.
  } catch (...) {
    self->exception_ = std::current_exception();
  }
  self->state_ = State::kDone;
#if WEFT_ASAN
  // Leaving for good: ASan may free this fiber's fake stack.
  asanStartSwitch(nullptr, self->asanCallerBottom_, self->asanCallerSize_);
#endif
#if WEFT_TSAN
  tsanSwitchTo(self->tsanCaller_);
#endif
  jumpContext(self->caller_, nullptr);
  // Nobody resumes a finished fiber.
  std::abort();
}

ContextTransfer FiberCore::unwindOnTop(ContextTransfer transfer) {
  auto* self = static_cast<FiberCore*>(transfer.data);
  self->arrived(transfer);
  throw ForcedUnwind{};
}

// --- destruction -----------------------------------------------------------------------

void FiberCore::destroy() noexcept {
  if (state_ == State::kRunning) abortMisuse("a running fiber was destroyed");
  if (state_ == State::kSuspended) {
    unwinding_ = true;
    switchIn(true);
    if (state_ != State::kDone) abortMisuse("a fiber being destroyed did not finish unwinding");
  }
  freeStorage();
}

void FiberCore::freeStorage() noexcept {
#if WEFT_TSAN
  tsanDestroyFiber(tsanFiber_);
#endif
  if (kind_ == StackKind::kShared) {
    SharedStack& stack = *shared_.stack;
    if (stack.owner_ == this) stack.owner_ = nullptr;
    --stack.users_;
    std::free(shared_.save);
    delete this;
    return;
  }
  // The object lives on the stack it gives back: move the stack out first.
  ProtectedStack stack = std::move(protected_.stack);
  StackPool* pool = protected_.pool;
  protected_.stack.~ProtectedStack();
  this->~FiberCore();
  if (pool != nullptr) pool->release(std::move(stack));
  // else: `stack` is unmapped as it goes out of scope.
}

}  // namespace detail
}  // namespace weft

namespace weft::this_fiber {

void yield() {
  detail::FiberCore* core = detail::FiberCore::current();
  if (core == nullptr) throw NotInFiber("weft::this_fiber::yield() called outside a fiber");
  if (detail::AwaitLink* link = core->awaitLink(); link != nullptr) link->yieldRequested = true;
  core->suspend();
}

bool inFiber() noexcept { return detail::FiberCore::current() != nullptr; }

std::uint64_t id() {
  detail::FiberCore* core = detail::FiberCore::current();
  if (core == nullptr) throw NotInFiber("weft::this_fiber::id() called outside a fiber");
  return core->id();
}

}  // namespace weft::this_fiber

namespace weft::detail {

FiberLocalStorage& currentFiberLocalStorage() {
  if (FiberCore* core = FiberCore::current()) {
    FiberLocalStorage*& storage = core->localStorage();
    if (storage == nullptr) storage = new FiberLocalStorage();
    return *storage;
  }
  static thread_local FiberLocalStorage threadStorage;
  return threadStorage;
}

std::uint64_t newFiberLocalKey() noexcept {
  static std::atomic<std::uint64_t> next{1};
  // relaxed: keys need only be unique.
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace weft::detail
