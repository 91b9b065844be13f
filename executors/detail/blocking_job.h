#pragma once

namespace weft::detail {

// One call of blocking(fn) as the pool sees it: a node of the pool's intrusive FIFO,
// embedded in the awaiter (so in the awaiting coroutine's frame, or on the fiber's stack).
// `prev`, `next` and `state` are guarded by the pool's mutex.
struct BlockingJob {
  enum class State : unsigned char {
    kNew,        // not submitted (or submit() failed)
    kQueued,     // in the pool's queue
    kTaken,      // a thread of the pool took it: fn runs, or ran
    kWithdrawn,  // taken back from the queue (cancellation, destruction, shutdown guard)
    kBarred,     // its ThreadPool's shutdown came before submit(): never queued
  };
  BlockingJob* prev = nullptr;
  BlockingJob* next = nullptr;
  State state = State::kNew;
  // Runs fn on the pool's thread, stores its outcome, and hands the coroutine on. The
  // job may be freed by its coroutine as soon as this returns (or earlier, from inside).
  // noexcept: fn's exception is stored for the co_await, not thrown here.
  void (*run)(BlockingJob* job) noexcept = nullptr;
};

}  // namespace weft::detail
