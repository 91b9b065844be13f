#pragma once

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

namespace weft {

// What an executor queues and runs: the vocabulary for implementing an Executor (this
// header, executors/timer_entry.h and executors/io_loop.h, all included by
// executors/executor.h). An implementer needs nothing from weft::detail.
//
// Job: a type-erased, heap-allocated, move-only unit of work: what Executor::schedule(F&&)
// turns a callable into, and what a fired TimerEntry is. `next` is an intrusive link so
// queues need no node allocation.
struct Job {
  Job* next = nullptr;
  // run == true: invoke the callable, then free the job (also when it throws: the
  // exception propagates to the executor, which reports it with reportEscapedException).
  // run == false: only free it (used when an executor refuses a job).
  void (*complete)(Job* self, bool run) = nullptr;
};

// What an executor does with an exception escaping a scheduled callable (run items in
// `try { item.run(); } catch (...) { reportEscapedException(name()); }`): there is no
// awaiter to hand it to, so it is reported (naming the executor) and the process aborts,
// as std::thread does.
// Precondition: called from a catch handler. noexcept: it never returns, and an
// exception leaving it would escape the executor's worker loop.
[[noreturn]] inline void reportEscapedException(std::string_view executorName) noexcept {
  const char* what = "unknown exception";
  try {
    throw;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "weft: a callable scheduled on executor '%.*s' threw: %s\n",
               static_cast<int>(executorName.size()), executorName.data(), what);
  std::abort();
}

// The Job that Executor::schedule(F&&) allocates for a callable.
template <class F>
struct CallableJob final : Job {
  explicit CallableJob(F&& f) : fn(std::move(f)) { complete = &CallableJob::completeImpl; }
  explicit CallableJob(const F& f) : fn(f) { complete = &CallableJob::completeImpl; }

  static void completeImpl(Job* self, bool run) {
    auto* job = static_cast<CallableJob*>(self);
    struct Free {
      CallableJob* j;
      ~Free() { delete j; }
    } free{job};
    if (run) job->fn();
  }

  F fn;
};

// A promise type may ask for the work items of its coroutines to be tagged, by declaring
// `static constexpr bool kTagWorkItems = true`. The tag changes nothing about how an item
// runs; a scheduler that takes items straight from a ThreadRunQueue
// (executors/thread_run_queue.h) reads it back to recognise its own coroutines (weft's
// fibers tag their drivers). Only items made from a typed handle by WorkItem::forHandle
// carry it: Executor::schedule(std::coroutine_handle<>) knows no promise type.
template <class Promise>
inline constexpr bool kTagsWorkItems = requires { requires bool(Promise::kTagWorkItems); };

// One entry of an executor queue: either a coroutine handle (the fast path: no
// allocation) or a Job*. Frames and Jobs are at least 4-byte aligned, so the low bit
// tells them apart and, for a handle, the next bit is its tag (kTagsWorkItems). The
// all-zero item is "empty" (no work), so a null handle must never be scheduled. The
// accessors are noexcept: they only reinterpret one word.
class WorkItem {
 public:
  WorkItem() = default;
  static WorkItem fromHandle(std::coroutine_handle<> h) noexcept {
    return WorkItem(reinterpret_cast<std::uintptr_t>(h.address()));
  }
  // `h`, tagged when its promise type asks for it (kTagsWorkItems). A frame that is not
  // 4-byte aligned (no compiler makes one) is reported and the process aborts.
  template <class Promise>
  static WorkItem forHandle(std::coroutine_handle<Promise> h) noexcept {
    if constexpr (kTagsWorkItems<Promise>) {
      return fromTaggedHandle(h);
    } else {
      return fromHandle(h);
    }
  }
  static WorkItem fromTaggedHandle(std::coroutine_handle<> h) noexcept {
    const auto bits = reinterpret_cast<std::uintptr_t>(h.address());
    if ((bits & kLowBits) != 0) [[unlikely]] {
      std::fputs("weft: a coroutine frame that is not 4-byte aligned cannot be tagged\n", stderr);
      std::abort();
    }
    return WorkItem(bits | kTagBit);
  }
  static WorkItem fromJob(Job* job) noexcept {
    return WorkItem(reinterpret_cast<std::uintptr_t>(job) | 1u);
  }

  bool empty() const noexcept { return bits_ == 0; }
  bool isJob() const noexcept { return (bits_ & kJobBit) != 0; }
  // A handle with its tag (fromTaggedHandle).
  bool isTaggedHandle() const noexcept { return (bits_ & kLowBits) == kTagBit; }
  Job* job() const noexcept { return reinterpret_cast<Job*>(bits_ & ~kJobBit); }
  std::coroutine_handle<> handle() const noexcept {
    return std::coroutine_handle<>::from_address(reinterpret_cast<void*>(bits_ & ~kTagBit));
  }

  // Runs the item: resumes the coroutine or runs (then frees) the job. Only a job's
  // callable can throw (weft's coroutines catch in their promise); the executor catches
  // and calls reportEscapedException(name()).
  void run() const {
    if (isJob()) {
      Job* j = job();
      j->complete(j, true);
    } else {
      handle().resume();
    }
  }

  constexpr std::uintptr_t bits() const noexcept { return bits_; }
  static constexpr WorkItem fromBits(std::uintptr_t bits) noexcept { return WorkItem(bits); }

 private:
  static constexpr std::uintptr_t kJobBit = 1;
  static constexpr std::uintptr_t kTagBit = 2;
  static constexpr std::uintptr_t kLowBits = kJobBit | kTagBit;
  explicit constexpr WorkItem(std::uintptr_t bits) : bits_(bits) {}
  std::uintptr_t bits_ = 0;
};

}  // namespace weft
