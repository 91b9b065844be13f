#pragma once

#include <coroutine>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/coro/detail/lazy_promise.h"
#include "weft/executors/executor.h"

namespace weft {

// AsyncBacktrace: the logical call chain of a coroutine or fiber: the coroutine itself,
// the coroutine awaiting it, the one awaiting that, and so on up to the root that started
// the chain (syncAwait, start(), spawn, a TaskGroup, a fiber), innermost first. A native
// backtrace inside a Lazy shows only the frames since its last resumption (an executor's
// loop); this shows who is waiting for it. It crosses between the two worlds: a Lazy
// awaited by a fiber shows the fiber (and where in it the fiber waits) above it, and a
// fiber awaited by a Lazy shows that Lazy's chain above the fiber. A collect's branches
// show the collect, then the coroutine awaiting it.
//
// Each frame is a coroutine (named by its function), a native stack frame (a fiber's
// frames, or where a parked fiber waits), or a marker for what is not code ("syncAwait",
// "collectAll", "fiber 3 \"reader\""). toString()/print() name them with the symbolizer of
// executors/symbolizer.h: function names from the binary's symbol table (no debug
// information needed), file:line from `addr2line` when the binary has debug information.
// They leave out weft's own machinery (weft::detail coroutines such as the one syncAwait
// of a FiberFuture runs, a fiber's entry and trampoline), as Go leaves its runtime out of
// a traceback; frames() keeps everything.
//
// Errors: none; a frame that cannot be named prints its address. Thread safety: a value;
// capturing one reads the chain of the calling coroutine only.
//
// Example:
//   weft::Lazy<> handler() {
//     std::cerr << co_await weft::asyncBacktrace();  // handler(), its awaiter, ..., root
//   }
class AsyncBacktrace {
 public:
  struct Frame {
    enum class Kind : std::uint8_t {
      kCoroutine,  // a Lazy/Task/generator: `address` is its resume function
      kNative,     // a native stack frame: `address` is a return address
      kMarker,     // what is not code, in `label`: "syncAwait", "collectAll", "fiber 3"
    };
    Kind kind = Kind::kMarker;
    const void* address = nullptr;
    std::string label;
    // kCoroutine: where in its body it is suspended (the co_await), when known: its
    // file:line is shown, rather than the coroutine's definition.
    const void* suspendPoint = nullptr;
  };

  AsyncBacktrace() = default;

  const std::vector<Frame>& frames() const noexcept { return frames_; }
  bool empty() const noexcept { return frames_.empty(); }

  // One line per frame, innermost first:
  //   #0 coroutine leaf(int) at src/app.cc:12
  //   #1 coroutine handler() at src/app.cc:20
  //   #2 syncAwait
  // With `sourceLines` false, no file:line (and no addr2line child process).
  std::string toString(bool sourceLines = true) const;
  // toString() written to `out`.
  void print(std::ostream& out, bool sourceLines = true) const;
  friend std::ostream& operator<<(std::ostream& out, const AsyncBacktrace& trace);
  // Per frame, innermost first: the function's demangled name (with its parameters), or
  // a marker's label. An unknown function is "??".
  std::vector<std::string> functionNames() const;

  // Building a trace: what weft's completion sinks and fibers add when a chain passes
  // through them. noexcept: a diagnostic must not fail the code it describes; a frame
  // that cannot be stored (no memory) is dropped.
  void addCoroutine(const void* resumeFunction, const void* suspendPoint = nullptr) noexcept;
  void addNativeFrame(const void* returnAddress) noexcept;
  void addMarker(std::string label) noexcept;

  // `co_await weft::asyncBacktrace()` in a Lazy or Task: the awaiting coroutine's chain.
  // It never suspends.
  class Awaiter;
  Awaiter coAwait(Executor* executor) &&;

 private:
  std::vector<Frame> frames_;
};

namespace detail {

// Adds the chain from `from` up to its root to `trace` (at most kMaxAsyncDepth steps: a
// corrupt or cyclic chain cannot hang the caller). A suspended coroutine whose wait its
// root task publishes (the task's innermost one, with WEFT_TASK_TRACKING) is shown where
// it waits (its co_await); the others by their name (and definition). `fromSuspended`:
// whether the first coroutine is suspended (a task's innermost coroutine on its published
// wait, a coroutine in `co_await asyncBacktrace()`) or runs, or may (where an exception
// leaves it, a task's root that waits on nothing). noexcept: see addCoroutine.
// Precondition: the chain stays alive while it is read: it is the calling coroutine's
// (or fiber's), or a task dump reads it inside a DumpRead (coro/detail/dump_gate.h).
inline constexpr int kMaxAsyncDepth = 256;
void appendAsyncChain(AsyncBacktrace& trace, AsyncParent from, bool fromSuspended = true) noexcept;

// toString() of many traces with one symbolizer run for all of them; each line starts
// with `indent`.
std::vector<std::string> formatAsyncBacktraces(const std::vector<const AsyncBacktrace*>& traces,
                                               bool sourceLines, const std::string& indent);

// Records the calling thread's async backtrace (asyncBacktrace(): in a fiber, the fiber
// and who awaits it) as the origin of the exception being handled, unless one is known.
// For fibers, whose body's exception escapes in a catch block. noexcept: a diagnostic.
void noteExceptionOriginHere() noexcept;

// For an exception nobody can receive (a detached task's, a fiber's whose future was
// dropped): prints "weft: <message>: <what()><hint>", then the async backtrace of where
// it first left a coroutine when weft recorded it (noteExceptionOrigin), then aborts.
[[noreturn]] void abortOnLostException(const char* message, const std::exception_ptr& exception,
                                       const char* hint = "") noexcept;

// Set by weft::stackful: adds a fiber (a completion sink's traceFiber_, a FiberCore) to a
// trace: where it is parked, if it is, then "fiber <id> "<name>"".
using AppendFiber = void (*)(AsyncBacktrace& trace, const void* fiber) noexcept;
void setFiberTracer(AppendFiber tracer) noexcept;

// Set by weft::stackful: adds the calling thread's running fiber (a marker, then who
// awaits it) to a trace; null when no fiber runs here or stackful is not linked.
using AppendRunningFiber = void (*)(AsyncBacktrace& trace) noexcept;
void setRunningFiberTracer(AppendRunningFiber tracer) noexcept;

}  // namespace detail

class AsyncBacktrace::Awaiter {
 public:
  explicit Awaiter(AsyncBacktrace&& trace) noexcept : trace_(std::move(trace)) {}
  bool await_ready() const noexcept { return false; }
  // Reads the chain and declines to suspend. noexcept: appendAsyncChain is.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> self) noexcept {
    trace_.frames_.clear();
    detail::appendAsyncChain(trace_, detail::asyncParentOf(self));
    return false;
  }
  AsyncBacktrace await_resume() noexcept { return std::move(trace_); }

 private:
  AsyncBacktrace trace_;
};

inline AsyncBacktrace::Awaiter AsyncBacktrace::coAwait(Executor* /*executor*/) && {
  return Awaiter(std::move(*this));
}

// asyncBacktrace(): the async backtrace of the caller.
//  - In a Lazy or Task, await it: `co_await weft::asyncBacktrace()` gives the coroutine
//    and its awaiters up to the root.
//  - In a fiber, call it: the fiber's native frames (from the caller down to the fiber's
//    entry), then the fiber, then whatever awaits it (the Lazy that awaits its future...).
//  - Elsewhere: the calling thread's native frames.
// Cost: a native stack walk (microseconds); the awaited form walks only the chain's
// pointers. Not async-signal-safe. Thread safety: any thread.
//
// Example:
//   auto future = weft::spawnFiber(&pool, [] { std::cerr << weft::asyncBacktrace(); });
AsyncBacktrace asyncBacktrace();

}  // namespace weft
