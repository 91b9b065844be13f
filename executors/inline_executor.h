#pragma once

#include <coroutine>

#include "weft/executors/detail/job.h"
#include "weft/executors/executor.h"

namespace weft {

// InlineExecutor: runs scheduled work immediately, on the thread that schedules it.
//
// Semantics: schedule(h) resumes `h` before returning; schedule(f) runs `f()` before
// returning. There is no queue and no trampoline, so work that schedules more work on an
// InlineExecutor nests on the native stack. It owns no threads, so
// currentThreadInExecutor() is always false, which is what makes blocking on it
// (syncAwait) legal from any thread. It never shuts down. Its name is "inline".
//
// Preconditions: a scheduled coroutine handle is non-null and suspended.
//
// Errors: schedule never throws ExecutorShutDown. As on every executor, a callable that
// throws has nobody to report to: weft prints the exception naming "inline" and aborts.
//
// Thread safety: stateless; any number of threads may schedule on one instance at once
// (each runs its own work).
//
// Example:
//   weft::InlineExecutor ex;
//   int x = 0;
//   ex.schedule([&] { x = 1; });  // x == 1 here
class InlineExecutor final : public Executor {
 public:
  InlineExecutor() : Executor("inline") {}

  using Executor::schedule;
  // Resumes `h` now, on the calling thread.
  void schedule(std::coroutine_handle<> h) override { run(detail::WorkItem::fromHandle(h)); }

  // Always false: an InlineExecutor owns no threads. noexcept: a constant.
  bool currentThreadInExecutor() const noexcept override { return false; }

 private:
  void scheduleJob(detail::Job* job) override { run(detail::WorkItem::fromJob(job)); }

  void run(detail::WorkItem item) {
    try {
      item.run();
    } catch (...) {
      detail::reportEscapedException(name());
    }
  }
};

}  // namespace weft
