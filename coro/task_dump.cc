#include "weft/coro/task_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/coro/async_backtrace.h"
#include "weft/coro/detail/dump_gate.h"
#include "weft/coro/detail/dump_signal_hook.h"
#include "weft/coro/detail/running_root.h"
#include "weft/coro/detail/snapshot_reads.h"
#include "weft/coro/detail/task_registry.h"
#include "weft/executors/stall_task_hook.h"

namespace weft {
namespace detail {
namespace {

// What the dump collects, slot by slot.
struct Collected {
  std::vector<TaskDumpEntry> tasks;
  std::vector<TaskDumpEntry> fibers;
};

// A root task: what its innermost coroutine waits on (the wait its record publishes) and
// the chain from that coroutine up; or, when nothing is published (it runs, or is queued
// to run), the root alone. The DumpRead keeps the record (its slot's subject), the root's
// frame, and what the published note leads to (the awaiter, the chain above it) alive and
// unchanged (coro/detail/dump_gate.h).
void dumpTask(const TaskRecord& record, TaskDumpEntry& entry) {
  const auto& root = *static_cast<const LazyPromiseBase*>(record.root);
  // Relaxed: written before the slot's subject, which the caller read (acquire).
  entry.order = record.loadId();
  entry.firstWaitMs = record.loadFirstWaitMs();
  entry.title = "task " + std::to_string(entry.order);
  const CompletionSink* sink = root.completionSink();
  if (sink != nullptr && sink->traceLabel_ != nullptr) {
    entry.title += " (";
    entry.title += sink->traceLabel_;
    entry.title += ')';
  }
  // acquire: pairs with publishWait's release (the note as written for this wait).
  const std::uintptr_t wait = record.loadWait(std::memory_order_acquire);
  if (wait != 0) {
    const auto* note = reinterpret_cast<const LazyWaitNote*>(wait);
    entry.state = "waiting on ";
    note->describe(note->awaiter, entry.state);
    appendAsyncChain(entry.trace, AsyncParent::promise(note->waiter));
  } else {
    entry.state = "running or runnable";
    appendAsyncChain(entry.trace, AsyncParent::promise(&root), false);
  }
}

// One slot of the registry into `entries`: its subject (a task's record, a fiber) as
// `describe(subject, entries)` reads it inside a DumpRead. Without membarrier the subject
// may be freed under the dump: it is not read at all, only listed as `title`, not read.
template <class Slot, class Describe>
void collectSlot(Slot& slot, std::vector<TaskDumpEntry>& entries, const char* title,
                 Describe describe) {
  try {
    if (!DumpSession::canRead()) {
      const std::uintptr_t subject = slot.subject.load(std::memory_order_acquire);
      if (subject == 0 || subject == kSlotEnd) return;
      TaskDumpEntry& entry = entries.emplace_back();
      entry.title = title;
      entry.state = kWaitNotRead;
      return;
    }
    DumpRead read;
    // acquire: pairs with the release that published the subject (a task's record:
    // publishFirstWait, as written for it; a fiber: registerFiber, as constructed).
    const std::uintptr_t subject = slot.subject.load(std::memory_order_acquire);
    if (subject == 0 || subject == kSlotEnd) return;  // released since the first look
    describe(subject, entries);
  } catch (...) {
    // No memory: the entry stays as far as it got.
  }
}

void collectTask(RegistrySlot& slot, void* context) {
  collectSlot(slot, static_cast<Collected*>(context)->tasks, "task",
              [](std::uintptr_t subject, std::vector<TaskDumpEntry>& entries) {
                dumpTask(*reinterpret_cast<const TaskRecord*>(subject), entries.emplace_back());
              });
}

void collectFiber(FiberSlot& slot, void* context) {
  collectSlot(slot, static_cast<Collected*>(context)->fibers, "fiber",
              [](std::uintptr_t subject, std::vector<TaskDumpEntry>& entries) {
                if (DumpFiber dumpFiber = fiberDumper()) {
                  dumpFiber(reinterpret_cast<const void*>(subject), entries.emplace_back());
                }
              });
}

// ThreadPool's stall reports name the task a stalled worker runs (executors/
// stall_task_hook.h): the task whose run the thread is in (running_root.h), whose record
// is alive while the thread runs it, so the signal's handler may read it:
//  - a task that has waited is listed: the handler records its ring slot and the slot's
//    subject (the record). The watchdog reads the slot again inside a DumpRead (slots
//    are never freed; a task still listed there keeps its record and frames alive,
//    dump_gate.h) and names the task if the slot still leads to that record and no wait is
//    published (it has not waited since, or it would have left its run);
//  - a task in its first run (it has not waited: not listed, nothing the watchdog could
//    read safely later) is described by the handler itself from what is alive then: a
//    number (the task keeps it when it is listed), its origin's label (a string literal)
//    and its root coroutine's code address, which the watchdog only symbolizes.
// Words: listed: 0 the slot, 1 its subject; first run: 1 the number, 2 the root's code
// address, 3 the label (0: none).
enum StallWord { kRunningSlot = 0, kRunningSubject = 1, kFirstRunNumber = 1, kFirstRunCode = 2,
                 kFirstRunLabel = 3 };

void captureStalledTask(std::uintptr_t item,
                        std::uintptr_t (&words)[StallTaskHook::kWords]) noexcept {
  (void)item;
#if WEFT_TASK_TRACKING
  // Relaxed: this thread's own stores (the signal interrupted it).
  // Marked (kMonitoredRun) while the run is a monitored poll; in the task's first run, its
  // root's promise tagged kFirstRun (running_root.h).
  const std::uintptr_t running = tRunningRoot.load(std::memory_order_relaxed);
  const LazyPromiseBase* root = nullptr;
  TaskRecord* record;
  if ((running & kFirstRun) != 0) {
    root = reinterpret_cast<const LazyPromiseBase*>(running & ~kRunTags);
    record = root->rootRecord();
  } else {
    record = reinterpret_cast<TaskRecord*>(running & ~kRunTags);
  }
  if (record == nullptr) return;
  std::atomic_ref<std::uintptr_t> wait(record->wait);
  const std::uintptr_t word = wait.load(std::memory_order_relaxed);
  // Pairs with publishFirstWait's signal fence: `slot` is set once `wait` is even.
  std::atomic_signal_fence(std::memory_order_acquire);
  if ((word & 1) == 0) {
    RegistrySlot* slot = record->slot;
    words[kRunningSlot] = reinterpret_cast<std::uintptr_t>(slot);
    words[kRunningSubject] = slot->subject.load(std::memory_order_relaxed);
    return;
  }
  // Its first run (the word names its root: only a resumption from a wait names the
  // record): numbered now if no report has numbered it (it keeps the number).
  if (root == nullptr) return;
  std::uint64_t number = word >> 1;
  if (number == 0) {
    number = takeTaskNumber();
    wait.store((static_cast<std::uintptr_t>(number) << 1) | 1, std::memory_order_relaxed);
  }
  const void* const* frame = static_cast<const void* const*>(
      std::coroutine_handle<LazyPromiseBase>::from_promise(const_cast<LazyPromiseBase&>(*root))
          .address());
  const CompletionSink* sink = root->completionSink();
  words[kFirstRunNumber] = number;
  words[kFirstRunCode] = reinterpret_cast<std::uintptr_t>(frame[0] != nullptr ? frame[0] : frame[1]);
  words[kFirstRunLabel] =
      sink != nullptr ? reinterpret_cast<std::uintptr_t>(sink->traceLabel_) : 0;
#else
  (void)words;
#endif
}

void describeStalledTask(const std::uintptr_t (&words)[StallTaskHook::kWords],
                         StallReport& report) {
#if WEFT_TASK_TRACKING
  if (words[kRunningSlot] == 0 && words[kFirstRunCode] != 0) {
    // Its first run: from the words alone (nothing they point to is read but the label, a
    // string literal).
    std::string title = "task " + std::to_string(words[kFirstRunNumber]);
    AsyncBacktrace trace;
    trace.addCoroutine(reinterpret_cast<const void*>(words[kFirstRunCode]));
    if (const auto* label = reinterpret_cast<const char*>(words[kFirstRunLabel])) {
      title += " (";
      title += label;
      title += ')';
      trace.addMarker(label);
    }
    report.task = std::move(title);
    report.asyncFunctions = trace.functionNames();
    return;
  }
  TaskDumpEntry entry;
  bool found = false;
  {
    DumpSession session;
    if (!DumpSession::canRead()) {
      report.asyncBacktraceMissing =
          "no async backtrace: the kernel offers no membarrier, which reading another "
          "thread's task safely needs";
      return;
    }
    SnapshotReads snapshot;
    if (auto* slot = reinterpret_cast<RegistrySlot*>(words[kRunningSlot])) {
      DumpRead read;
      // acquire: pairs with publishFirstWait's release (the record as written for it).
      const std::uintptr_t subject = slot->subject.load(std::memory_order_acquire);
      // The same task, and no wait published since (then it would have left its run).
      if (subject != 0 && subject != kSlotEnd && subject == words[kRunningSubject]) {
        const auto& record = *reinterpret_cast<const TaskRecord*>(subject);
        if (record.loadWait(std::memory_order_acquire) == 0) {
          dumpTask(record, entry);
          found = true;
        }
      }
    }
  }
  if (!found) {
    report.asyncBacktraceMissing =
        words[kRunningSlot] != 0
            ? "no async backtrace: the task the worker ran had moved on when it was read"
            : "no async backtrace: the worker runs no root task that can be named (a "
              "callable, a collect's branch, a Task awaited by another coroutine, as "
              "syncAwait(lazy, executor) runs one, a fiber, or a task resumed inside "
              "another's run)";
    return;
  }
  report.task = entry.title;
  report.asyncFunctions = entry.trace.functionNames();
#else
  (void)words;
  report.asyncBacktraceMissing =
      "no async backtrace: task tracking is off (build with WEFT_TASK_TRACKING=1 to name "
      "the task)";
#endif
}

constinit const StallTaskHook kStallTaskHook{&captureStalledTask, &describeStalledTask};

std::string formatAge(std::int64_t milliseconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%lld.%03lld s", static_cast<long long>(milliseconds / 1000),
                static_cast<long long>(milliseconds % 1000));
  return text;
}

}  // namespace
}  // namespace detail

void dumpTasks(std::ostream& out) {
  detail::Collected collected;
  bool readWaits;
  {
    // Reads tasks and fibers that other threads run: each while their owners wait at the
    // dump gate.
    detail::DumpSession session;
    detail::SnapshotReads snapshot;
    readWaits = detail::DumpSession::canRead();
    detail::forEachRegistrySlot(&detail::collectTask, &detail::collectFiber, &collected);
  }
  const std::int64_t now = detail::coarseMilliseconds();
  auto byOrder = [](const detail::TaskDumpEntry& a, const detail::TaskDumpEntry& b) {
    return a.order < b.order;
  };
  std::sort(collected.tasks.begin(), collected.tasks.end(), byOrder);
  std::sort(collected.fibers.begin(), collected.fibers.end(), byOrder);
  std::vector<const AsyncBacktrace*> traces;
  traces.reserve(collected.tasks.size() + collected.fibers.size());
  for (const detail::TaskDumpEntry& entry : collected.tasks) traces.push_back(&entry.trace);
  for (const detail::TaskDumpEntry& entry : collected.fibers) traces.push_back(&entry.trace);
  const std::vector<std::string> texts = detail::formatAsyncBacktraces(traces, true, "  ");
  const std::size_t tasks = collected.tasks.size();
  const std::size_t fibers = collected.fibers.size();
  std::string text = "weft: " + std::to_string(tasks) + (tasks == 1 ? " task, " : " tasks, ") +
                     std::to_string(fibers) + (fibers == 1 ? " fiber" : " fibers") +
                     (WEFT_TASK_TRACKING ? ""
                                         : " (root tasks are listed in builds with "
                                           "WEFT_TASK_TRACKING=1)") +
                     (readWaits ? "\n"
                                : " (what they wait on is not read: the kernel offers no "
                                  "membarrier, which a dump needs to read other threads' "
                                  "tasks safely)\n");
  std::size_t i = 0;
  for (const auto* list : {&collected.tasks, &collected.fibers}) {
    for (const detail::TaskDumpEntry& entry : *list) {
      text += '\n';
      text += entry.title;
      if (entry.firstWaitMs != 0) text += ", age " + detail::formatAge(now - entry.firstWaitMs);
      text += ": " + entry.state + '\n';
      text += texts[i++];
    }
  }
  out << text;
  out.flush();
}

namespace {

// The dump thread's pipe: the handler writes one byte per signal.
std::mutex gDumpMutex;
int gDumpPipe[2] = {-1, -1};

void onDumpSignal(int) {
  const int saved = errno;
  const char byte = 0;
  // Async-signal-safe; a full pipe (dumps already pending) drops this one.
  [[maybe_unused]] const ssize_t n = ::write(gDumpPipe[1], &byte, 1);
  errno = saved;
}

void dumpThread(int readFd) {
  for (;;) {
    char byte;
    const ssize_t n = ::read(readFd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    try {
      dumpTasks(std::cerr);
    } catch (...) {
      std::fputs("weft: the task dump failed (out of memory?)\n", stderr);
    }
  }
}

int signalNumber(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long number = std::strtol(text, &end, 10);
  if (end != text && *end == '\0') return static_cast<int>(number);
  std::string name = text;
  if (name.rfind("SIG", 0) == 0) name.erase(0, 3);
  static const struct {
    const char* name;
    int number;
  } kNames[] = {{"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},
                {"INT", SIGINT},   {"TERM", SIGTERM}, {"PWR", SIGPWR},   {"URG", SIGURG}};
  for (const auto& entry : kNames) {
    if (name == entry.name) return entry.number;
  }
  return -1;
}

}  // namespace

void installDumpOnSignal(int signal) {
  if (signal <= 0 || signal >= NSIG || signal == SIGKILL || signal == SIGSTOP) {
    throw std::invalid_argument("weft: installDumpOnSignal: " + std::to_string(signal) +
                                " is not a signal that can be caught");
  }
  std::lock_guard<std::mutex> lock(gDumpMutex);
  if (gDumpPipe[0] < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw std::system_error(errno, std::generic_category(), "weft: installDumpOnSignal: pipe");
    }
    // The reading end blocks; the handler's end must not.
    ::fcntl(fds[0], F_SETFL, 0);
    try {
      std::thread(&dumpThread, fds[0]).detach();
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw;
    }
    gDumpPipe[0] = fds[0];
    gDumpPipe[1] = fds[1];
  }
  struct sigaction action {};
  action.sa_handler = &onDumpSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(signal, &action, nullptr) != 0) {
    throw std::system_error(errno, std::generic_category(), "weft: installDumpOnSignal: sigaction");
  }
}

namespace detail {

// Called before main() by every translation unit that includes the Lazy machinery
// (coro/detail/dump_signal_hook.h says why): the first call does the work.
bool installStallTaskHook() noexcept {
  setStallTaskHook(&kStallTaskHook);
  return true;
}

bool dumpSignalFromEnvironment() noexcept {
  static const bool installed = []() noexcept {
    const char* value = std::getenv("WEFT_DUMP_SIGNAL");
    try {
      const int signal = signalNumber(value);
      if (signal == 0) return false;
      if (signal < 0) {
        std::fprintf(stderr,
                     "weft: WEFT_DUMP_SIGNAL=%s names no signal (a number, or QUIT, USR1, USR2, "
                     "HUP, INT, TERM, PWR or URG): no task dump on a signal\n",
                     value);
        return false;
      }
      installDumpOnSignal(signal);
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "weft: WEFT_DUMP_SIGNAL=%s: no task dump on a signal: %s\n", value,
                   e.what());
    } catch (...) {
      std::fprintf(stderr, "weft: WEFT_DUMP_SIGNAL=%s: no task dump on a signal\n", value);
    }
    return false;
  }();
  return installed;
}

}  // namespace detail

}  // namespace weft
