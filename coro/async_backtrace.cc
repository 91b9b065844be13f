#include "weft/coro/async_backtrace.h"

#include <execinfo.h>

#include <atomic>
#include <iterator>
#include <mutex>
#include <cstdio>
#include <ostream>

#include "weft/coro/detail/snapshot_reads.h"
#include "weft/executors/symbolizer.h"

namespace weft {
namespace detail {
namespace {

std::atomic<AppendRunningFiber> runningFiberTracer{nullptr};
std::atomic<AppendFiber> fiberTracer{nullptr};

// A code address naming the coroutine whose frame is `frame`: its resume function (g++
// and clang++ lay out a frame as resume function, destroy function, promise), or, once
// that is cleared (g++ clears it when the body ends, before unhandled_exception runs),
// its destroy function, which the symbolizer names after the coroutine too.
const void* codeOfFrame(const void* frame) noexcept {
  const void* const* words = static_cast<const void* const*>(frame);
  return words[0] != nullptr ? words[0] : words[1];
}

const void* codeOfPromise(const LazyPromiseBase* promise) noexcept {
  return codeOfFrame(
      std::coroutine_handle<LazyPromiseBase>::from_promise(const_cast<LazyPromiseBase&>(*promise))
          .address());
}

// Where `promise`, a suspended coroutine, waits: the suspend point of its published wait
// when its root task's record publishes one of its (it is the task's innermost coroutine:
// the note holds while it waits), else unknown (null): a coroutine awaiting a Lazy does
// not record where.
const void* suspendPointOf(const LazyPromiseBase* promise) noexcept {
  if (const TaskRecord* record = promise->rootRecord()) {
    // acquire: pairs with publishWait's release.
    const std::uintptr_t wait = record->loadWait(std::memory_order_acquire);
    if (wait != 0 && (wait & 1) == 0) {  // odd: it has not waited
      const auto* note = reinterpret_cast<const LazyWaitNote*>(wait);
      if (note->waiter == promise) return note->suspendPoint;
    }
  }
  return nullptr;
}

}  // namespace

void appendAsyncChain(AsyncBacktrace& trace, AsyncParent from, bool fromSuspended) noexcept {
  SnapshotReads snapshot;  // the chain's coroutines may run on other threads meanwhile
  AsyncParent at = from;
  bool suspended = fromSuspended;
  for (int depth = 0; at; ++depth) {
    if (depth == kMaxAsyncDepth) {
      trace.addMarker("... (chain cut at " + std::to_string(kMaxAsyncDepth) + " frames)");
      return;
    }
    if (const LazyPromiseBase* promise = at.promise()) {
      // Suspended: where, if known; running: not known.
      trace.addCoroutine(codeOfPromise(promise), suspended ? suspendPointOf(promise) : nullptr);
      suspended = true;  // every coroutine above awaits the one below
      at = promise->asyncParent();
    } else if (const CompletionSink* sink = at.sink()) {
      suspended = true;  // whoever waits for the sink's coroutine is suspended on it
      if (sink->traceFiber_ != nullptr) {
        if (AppendFiber appendFiber = fiberTracer.load(std::memory_order_acquire)) {
          appendFiber(trace, sink->traceFiber_);
        }
      }
      if (sink->traceLabel_ != nullptr) trace.addMarker(sink->traceLabel_);
      at = sink->traceParent_;
    } else {
      // A coroutine weft knows nothing of: named, but its awaiter is unknown.
      trace.addCoroutine(codeOfFrame(at.foreignFrame()));
      return;
    }
  }
}

namespace {

// Where the last few exceptions first left a coroutine: a small ring, since an exception
// is usually received (and its origin never asked for) soon after it is thrown.
struct ExceptionOrigin {
  std::exception_ptr exception;
  AsyncBacktrace trace;
};
std::mutex gOriginsMutex;
ExceptionOrigin gOrigins[16];
std::size_t gNextOrigin = 0;

// True when `exception`'s origin is recorded; copies it to `trace` when given.
bool findOrigin(const std::exception_ptr& exception, AsyncBacktrace* trace) {
  std::lock_guard<std::mutex> lock(gOriginsMutex);
  for (const ExceptionOrigin& origin : gOrigins) {
    if (origin.exception == exception) {
      if (trace != nullptr) *trace = origin.trace;
      return true;
    }
  }
  return false;
}

void recordOrigin(std::exception_ptr exception, AsyncBacktrace&& trace) {
  ExceptionOrigin replaced;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(gOriginsMutex);
  ExceptionOrigin& slot = gOrigins[gNextOrigin++ % std::size(gOrigins)];
  replaced = std::move(slot);
  slot.exception = std::move(exception);
  slot.trace = std::move(trace);
}

}  // namespace

void noteExceptionOrigin(const LazyPromiseBase& promise) noexcept {
  try {
    std::exception_ptr current = std::current_exception();
    // Seen already: rethrown by an await from the coroutine it left first.
    if (!current || findOrigin(current, nullptr)) return;
    AsyncBacktrace trace;
    // The coroutine the exception leaves is running: its suspend point is an old one.
    appendAsyncChain(trace, AsyncParent::promise(&promise), false);
    recordOrigin(std::move(current), std::move(trace));
  } catch (...) {
    // No memory: the origin stays unknown.
  }
}

void noteExceptionOriginHere() noexcept {
  try {
    std::exception_ptr current = std::current_exception();
    if (!current || findOrigin(current, nullptr)) return;
    recordOrigin(std::move(current), asyncBacktrace());
  } catch (...) {
  }
}

void abortOnLostException(const char* message, const std::exception_ptr& exception,
                          const char* hint) noexcept {
  const char* what = "an exception not derived from std::exception";
  try {
    std::rethrow_exception(exception);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "weft: %s: %s%s\n", message, what, hint);
  try {
    AsyncBacktrace trace;
    if (findOrigin(exception, &trace) && !trace.empty()) {
      std::fprintf(stderr, "weft: where it was thrown (async backtrace, innermost first):\n%s",
                   formatAsyncBacktraces({&trace}, true, "  ")[0].c_str());
    }
  } catch (...) {
  }
  std::fflush(stderr);
  std::abort();
}

void setFiberTracer(AppendFiber tracer) noexcept {
  fiberTracer.store(tracer, std::memory_order_release);
}

void setRunningFiberTracer(AppendRunningFiber tracer) noexcept {
  runningFiberTracer.store(tracer, std::memory_order_release);
}

}  // namespace detail

void AsyncBacktrace::addCoroutine(const void* resumeFunction, const void* suspendPoint) noexcept {
  try {
    frames_.push_back(Frame{Frame::Kind::kCoroutine, resumeFunction, {}, suspendPoint});
  } catch (...) {
  }
}

void AsyncBacktrace::addNativeFrame(const void* returnAddress) noexcept {
  try {
    frames_.push_back(Frame{Frame::Kind::kNative, returnAddress, {}});
  } catch (...) {
  }
}

void AsyncBacktrace::addMarker(std::string label) noexcept {
  try {
    frames_.push_back(Frame{Frame::Kind::kMarker, nullptr, std::move(label)});
  } catch (...) {
  }
}

namespace {

// Names every frame's function; a coroutine suspended at a known point gets that point's
// file:line (one symbolizer run for both).
std::vector<SymbolInfo> symbolsOf(const std::vector<AsyncBacktrace::Frame>& frames,
                                          bool sourceLines) {
  std::vector<const void*> addresses;
  addresses.reserve(2 * frames.size());
  for (const AsyncBacktrace::Frame& frame : frames) {
    if (frame.kind == AsyncBacktrace::Frame::Kind::kNative && frame.address != nullptr) {
      // A return address: the call is the instruction before it.
      addresses.push_back(static_cast<const char*>(frame.address) - 1);
    } else {
      addresses.push_back(frame.address);
    }
  }
  for (const AsyncBacktrace::Frame& frame : frames) {
    addresses.push_back(sourceLines ? frame.suspendPoint : nullptr);
  }
  std::vector<SymbolInfo> symbols = symbolize(addresses, sourceLines);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const SymbolInfo& at = symbols[frames.size() + i];
    if (!at.file.empty()) {
      symbols[i].file = at.file;
      symbols[i].line = at.line;
    }
  }
  symbols.resize(frames.size());
  return symbols;
}

// weft's own machinery (its internal coroutines, a fiber's entry and trampoline) is
// left out of what is printed, as Go leaves its runtime's frames out of a traceback.
bool isInternal(const AsyncBacktrace::Frame& frame, const SymbolInfo& symbol) {
  if (frame.kind == AsyncBacktrace::Frame::Kind::kMarker) return false;
  const std::string& name = symbol.function;
  if (name.rfind("weft_context_", 0) == 0) return true;  // the switch core's trampoline
  // The qualified name: after a template's return type, up to the parameter list.
  int angles = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') {
      ++angles;
    } else if (c == '>') {
      --angles;
    } else if (angles == 0 && c == ' ') {
      start = i + 1;
    } else if (angles == 0 && c == '(') {
      return name.compare(start, 14, "weft::detail::") == 0;
    }
  }
  return false;
}

std::string formatFrames(const std::vector<AsyncBacktrace::Frame>& frames,
                         const SymbolInfo* symbols, const std::string& indent) {
  using Frame = AsyncBacktrace::Frame;
  std::string out;
  std::size_t number = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Frame& frame = frames[i];
    if (isInternal(frame, symbols[i])) continue;
    out += indent;
    out += '#';
    out += std::to_string(number++);
    out += ' ';
    if (frame.kind == Frame::Kind::kMarker) {
      out += frame.label;
    } else {
      out += frame.kind == Frame::Kind::kCoroutine ? "coroutine " : "native ";
      const SymbolInfo& symbol = symbols[i];
      if (!symbol.function.empty()) {
        out += symbol.function;
      } else {
        char address[32];
        std::snprintf(address, sizeof(address), "%p", frame.address);
        out += address;
        if (!symbol.object.empty()) out += " in " + symbol.object;
      }
      if (!symbol.file.empty()) {
        out += " at " + symbol.file + ':' + std::to_string(symbol.line);
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace

std::string AsyncBacktrace::toString(bool sourceLines) const {
  const std::vector<SymbolInfo> symbols = symbolsOf(frames_, sourceLines);
  return formatFrames(frames_, symbols.data(), "");
}

namespace detail {

std::vector<std::string> formatAsyncBacktraces(const std::vector<const AsyncBacktrace*>& traces,
                                               bool sourceLines, const std::string& indent) {
  std::vector<AsyncBacktrace::Frame> all;
  for (const AsyncBacktrace* trace : traces) {
    all.insert(all.end(), trace->frames().begin(), trace->frames().end());
  }
  const std::vector<SymbolInfo> symbols = symbolsOf(all, sourceLines);
  std::vector<std::string> texts;
  texts.reserve(traces.size());
  std::size_t at = 0;
  for (const AsyncBacktrace* trace : traces) {
    texts.push_back(formatFrames(trace->frames(), symbols.data() + at, indent));
    at += trace->frames().size();
  }
  return texts;
}

}  // namespace detail

void AsyncBacktrace::print(std::ostream& out, bool sourceLines) const {
  out << toString(sourceLines);
}

std::ostream& operator<<(std::ostream& out, const AsyncBacktrace& trace) {
  trace.print(out);
  return out;
}

std::vector<std::string> AsyncBacktrace::functionNames() const {
  const std::vector<SymbolInfo> symbols = symbolsOf(frames_, false);
  std::vector<std::string> names;
  names.reserve(frames_.size());
  for (std::size_t i = 0; i < frames_.size(); ++i) {
    if (isInternal(frames_[i], symbols[i])) continue;
    if (frames_[i].kind == Frame::Kind::kMarker) {
      names.push_back(frames_[i].label);
    } else {
      names.push_back(symbols[i].function.empty() ? "??" : symbols[i].function);
    }
  }
  return names;
}

// Not inline: the frames from the caller's on are those above our return address
// (backtrace() may report frames of its own, a sanitizer's interceptor, before ours).
[[gnu::noinline]] AsyncBacktrace asyncBacktrace() {
  AsyncBacktrace trace;
  void* addresses[128];
  const int count = ::backtrace(addresses, 128);
  const void* caller = __builtin_return_address(0);
  int first = 0;
  while (first < count && addresses[first] != caller) ++first;
  if (first == count) first = 1;  // not found (no frame info): skip ours only
  for (int i = first; i < count; ++i) trace.addNativeFrame(addresses[i]);
  if (auto tracer = detail::runningFiberTracer.load(std::memory_order_acquire)) tracer(trace);
  return trace;
}

}  // namespace weft
