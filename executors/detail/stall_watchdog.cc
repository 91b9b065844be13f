#include "weft/executors/detail/stall_watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "weft/executors/detail/symbolizer.h"
#include "weft/executors/stall_task_hook.h"

namespace weft::detail {

namespace {

// True when a debugger (or another ptrace tracer) is attached to the process: then the
// stall signal is not sent, since gdb stops the program on a real-time signal by default
// and the user would find it stopped there instead of at a breakpoint. Read from
// /proc/self/status at each stall (rare), so that attaching and detaching are followed.
bool tracedByDebugger() noexcept {
  std::FILE* status = std::fopen("/proc/self/status", "re");
  if (status == nullptr) return false;
  char line[256];
  long tracer = 0;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::sscanf(line, "TracerPid: %ld", &tracer) == 1) break;
  }
  std::fclose(status);
  return tracer != 0;
}

using Clock = std::chrono::steady_clock;

// How long the watchdog waits for a stalled worker to run the capture handler: long
// enough for a thread that is given no CPU for a while on a busy machine, short enough
// that the report is not held back much (the handler itself takes microseconds).
constexpr std::chrono::milliseconds kCaptureLimit{1000};

std::string threadName(const std::string& pool, std::size_t index) {
  std::string name = pool + "-" + std::to_string(index);
  name.resize(std::min<std::size_t>(name.size(), 15));  // as workerMain names it
  return name;
}

// The run-queue wait (the second of the three numbers) of a schedstat text: "<on-CPU ns>
// <run-queue wait ns> <timeslices>", then an optional newline. False for anything else.
bool runQueueWait(std::string_view text, std::uint64_t& wait) noexcept {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const char* at = text.data();
  const char* const end = text.data() + text.size();
  std::uint64_t values[3];
  for (int i = 0; i < 3; ++i) {
    if (i != 0) {
      if (at == end || *at != ' ') return false;
      ++at;
    }
    const auto [next, error] = std::from_chars(at, end, values[i]);
    if (error != std::errc{}) return false;
    at = next;
  }
  if (at != end) return false;
  wait = values[1];
  return true;
}

// Room for a schedstat text: three 20-digit numbers, two spaces and a newline.
constexpr std::size_t kSchedstatSize = 96;

// Reads the schedstat text of `worker`'s thread into `buffer`: empty when it cannot be
// read (the worker has not stored its thread id yet, or its thread has ended, or the
// kernel has no schedstat). noexcept: system calls only.
std::string_view readSchedstat(const ThreadPoolWorker& worker,
                               char (&buffer)[kSchedstatSize]) noexcept {
  // Relaxed: the id is the only thing read, and a zero (not stored yet) is handled.
  const pid_t tid = worker.tid.load(std::memory_order_relaxed);
  if (tid <= 0) return {};
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", static_cast<int>(tid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  ssize_t n;
  do {
    n = ::read(fd, buffer, sizeof buffer);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0 || static_cast<std::size_t>(n) == sizeof buffer) return {};
  return {buffer, static_cast<std::size_t>(n)};
}

}  // namespace

std::chrono::nanoseconds stallTime(std::chrono::nanoseconds wall, std::string_view atStart,
                                   std::string_view now) noexcept {
  if (wall <= std::chrono::nanoseconds::zero()) return std::chrono::nanoseconds::zero();
  std::uint64_t before = 0;
  std::uint64_t after = 0;
  if (!runQueueWait(atStart, before) || !runQueueWait(now, after) || after < before) {
    return wall;
  }
  const std::uint64_t waited = after - before;
  if (waited >= static_cast<std::uint64_t>(wall.count())) return std::chrono::nanoseconds::zero();
  return wall - std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(waited));
}

StallWatchdog::StallWatchdog(Options options, std::vector<ThreadPoolWorker*> workers,
                             const ThreadRunQueue* solo)
    : options_(std::move(options)),
      workers_(std::move(workers)),
      solo_(solo),
      views_(workers_.size()) {}

StallWatchdog::~StallWatchdog() { stop(); }

void StallWatchdog::start() {
  thread_ = std::thread([this] { run(); });  // may throw std::system_error
#if defined(__linux__)
  pthread_setname_np(thread_.native_handle(), (options_.pool + "-stall").substr(0, 15).c_str());
#endif
}

void StallWatchdog::stop() noexcept {
  if (!thread_.joinable()) return;
  if (onWatchdogThread()) {
    std::fprintf(stderr,
                 "weft: ThreadPool '%s': shutdown() or the destructor was called from the "
                 "pool's onStall callback (its stall watchdog thread), which it would wait "
                 "for forever. Report, and shut the pool down from another thread.\n",
                 options_.pool.c_str());
    std::abort();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

bool StallWatchdog::onWatchdogThread() const noexcept {
  // Relaxed: a thread only ever compares its own id, which it stored itself (run()) or
  // never.
  return threadId_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

void StallWatchdog::run() {
  threadId_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  const auto period =
      std::max<Clock::duration>(options_.threshold / 2, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(mutex_);
  auto next = Clock::now() + period;
  while (!stopping_) {
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) break;
    lock.unlock();
    look();
    // From when this look ended: a slow report (symbolizing) does not make the next
    // look come at once.
    next = std::max(next + period, Clock::now() + period / 2);
    lock.lock();
  }
}

void StallWatchdog::look() {
  bool allStalled = !workers_.empty();
  std::size_t latest = 0;  // the stalled worker that stalled last
  char buffer[kSchedstatSize];
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    const ThreadPoolWorker& worker = *workers_[i];
    View& view = views_[i];
    const std::uint64_t progress = progressOf(worker, solo_);
    // Read after the progress. A worker that moves on between the two loads is seen busy
    // with the old count for this look; its next look sees the new count. A stall takes
    // the same count over looks a threshold apart, so a moment's mix-up reports nothing.
    const bool idle = read(worker.counters.idleAt) == progress;
    if (progress != view.progress || idle) {
      view.progress = progress;
      view.watching = false;
      view.stalledFor = std::chrono::nanoseconds::zero();
      view.stalled = false;
      view.reported = false;
      allStalled = false;
      continue;
    }
    // Busy, without progress since the last look.
    if (!view.watching) {
      // Where the stall time starts: the schedstat text first, then the clock, so that
      // run-queue wait between the two reads is subtracted from wall time that is not
      // counted (a delay of this thread errs towards a shorter stall, never a longer).
      view.schedstat.assign(readSchedstat(worker, buffer));
      view.since = Clock::now();
      view.watching = true;
      allStalled = false;
      continue;
    }
    // The clock first, then the text (the same reason, the other way round).
    const Clock::time_point at = Clock::now();
    view.stalledFor = stallTime(at - view.since, view.schedstat, readSchedstat(worker, buffer));
    // Once stalled, stalled until the worker moves on (a later reading a little shorter
    // does not end the episode).
    if (!view.stalled && view.stalledFor < options_.threshold) {
      allStalled = false;
      continue;
    }
    view.stalled = true;
    if (views_[latest].since <= view.since || !views_[latest].stalled) latest = i;
    if (!view.reported) {
      view.reported = true;
      StallReport report = describe(i, /*native=*/true);
      bump(workerReports_);
      deliver(report);
    }
  }
  if (!allStalled) {
    poolReported_ = false;
    return;
  }
  if (poolReported_) return;
  poolReported_ = true;
  StallReport report = describe(latest, /*native=*/false);
  report.wholePool = true;
  for (std::size_t i = 0; i < workers_.size(); ++i) report.stalledWorkers.push_back(i);
  report.nativeBacktraceMissing = "see the worker's own report";
  bump(poolReports_);
  deliver(report);
}

StallReport StallWatchdog::describe(std::size_t index, bool native) {
  ThreadPoolWorker& worker = *workers_[index];
  const View& view = views_[index];
  StallReport report;
  report.pool = options_.pool;
  report.worker = index;
  report.thread = threadName(options_.pool, index);
  report.stalledFor = std::chrono::duration_cast<std::chrono::milliseconds>(view.stalledFor);
  report.progress = view.progress;
  std::vector<const void*> addresses;
  bool haveTask = false;
  std::uintptr_t task[StallTaskHook::kWords] = {};
  if (native && options_.signal > 0) {
    const int signal = options_.signal;
    const char* whyNot = nullptr;
    bool sent;
    {
      std::lock_guard<std::mutex> lock(worker.signalMutex);
      if (worker.exited) {
        sent = false;
        whyNot = "the worker thread has ended";
      } else if (tracedByDebugger()) {
        sent = false;
        whyNot =
            "a debugger is attached (it would stop the program on the signal; its own "
            "backtrace command shows the worker)";
      } else {
        sent = requestStallCapture(worker.thread.native_handle(), signal, worker.capture, whyNot);
      }
    }
    if (sent && awaitStallCapture(worker.capture, kCaptureLimit, whyNot)) {
      const StallCapture& capture = worker.capture;
      // The frames start in the handler and the signal trampoline: the interrupted
      // function is where the interrupted instruction is (its own address, not a return
      // address), else the third frame.
      int start = std::min(capture.count, 2);
      for (int i = 0; i < capture.count; ++i) {
        const auto address = reinterpret_cast<std::uintptr_t>(capture.frames[i]);
        if (capture.pc != 0 && address == capture.pc) {
          start = i;
          break;
        }
      }
      for (int i = start; i < capture.count; ++i) {
        report.nativeFrames.push_back(capture.frames[i]);
        // A return address minus one falls inside the call; the interrupted instruction
        // is itself.
        const auto address = reinterpret_cast<std::uintptr_t>(capture.frames[i]);
        addresses.push_back(reinterpret_cast<const void*>(
            i == start && address == capture.pc ? address : address - 1));
      }
      for (int i = 0; i < StallTaskHook::kWords; ++i) task[i] = capture.task[i];
      haveTask = true;
      releaseStallCapture(worker.capture);
    } else {
      report.nativeBacktraceMissing = whyNot != nullptr ? whyNot : "unknown";
    }
  } else if (native) {
    report.nativeBacktraceMissing = options_.nativeOff;
  }
  if (native) {
    const StallTaskHook* hook = stallTaskHook();
    if (!haveTask) {
      report.asyncBacktraceMissing =
          "no async backtrace: the task is read with the native backtrace, which is missing";
    } else if (hook == nullptr) {
      report.asyncBacktraceMissing =
          "no async backtrace: the program has no weft coroutines (weft::coro)";
    } else {
      // Read now, while the worker is most likely still in the item; the hook reads only
      // what it knows to be alive (for weft::coro: under the dump gate).
      try {
        hook->describe(task, report);
      } catch (...) {
        report.task.clear();
        report.asyncFunctions.clear();
        report.asyncBacktraceMissing = "no async backtrace: out of memory";
      }
    }
  }
  if (!addresses.empty()) {
    std::vector<SymbolInfo> names = symbolize(addresses, /*sourceLines=*/false);
    for (std::size_t i = 0; i < names.size(); ++i) {
      report.nativeFunctions.push_back(names[i].function.empty() ? "??" : names[i].function);
    }
  }
  return report;
}

void StallWatchdog::deliver(const StallReport& report) noexcept {
  try {
    if (options_.onStall) {
      options_.onStall(report);
    } else {
      const std::string text = report.toString();
      std::fputs(text.c_str(), stderr);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weft: ThreadPool '%s': the onStall callback threw: %s\n",
                 options_.pool.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "weft: ThreadPool '%s': the onStall callback threw\n",
                 options_.pool.c_str());
  }
}

}  // namespace weft::detail
