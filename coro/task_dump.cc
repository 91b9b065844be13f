#include "weft/coro/task_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

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
#include "weft/coro/detail/snapshot_reads.h"
#include "weft/coro/detail/task_registry.h"


namespace weft {
namespace detail {
namespace {

// A root Lazy: what it waits on is found by going down the Lazys it awaits to the one
// that waits on something else (or on nothing: it runs, or is queued to run). The record
// (its shard is locked) keeps the root's frame alive; the DumpRead keeps the frames below
// it and the awaiter it waits on (coro/detail/dump_gate.h).
void dumpLazyRoot(const TaskRecord& record, TaskDumpEntry& entry) noexcept {
  try {
    entry.title = "task " + std::to_string(record.id) + " (" + record.type->origin + ")";
    if (!DumpSession::canRead()) {
      entry.state = kWaitNotRead;
      return;
    }
    DumpRead read;
    const auto* leaf = static_cast<const LazyPromiseBase*>(record.subject);
    LazyPromiseBase::Wait wait = leaf->currentWait();
    for (int depth = 0; wait.awaitedLazy != nullptr && depth < kMaxAsyncDepth; ++depth) {
      leaf = wait.awaitedLazy;
      wait = leaf->currentWait();
    }
    if (wait.note != nullptr) {
      entry.state = "waiting on ";
      wait.note->describe(wait.note->awaiter, entry.state);
    } else {
      entry.state = "running or runnable";
    }
    appendAsyncChain(entry.trace, AsyncParent::promise(leaf));
  } catch (...) {
    // No memory: the entry stays as far as it got.
  }
}

struct Collected {
  std::vector<TaskDumpEntry> entries;
  std::vector<std::int64_t> created;  // per task (the fibers follow the tasks)
};

void collect(const TaskRecord& record, void* context) {
  auto& out = *static_cast<Collected*>(context);
  out.entries.emplace_back();
  out.created.push_back(record.createdMs);
  record.type->dump(record, out.entries.back());
}

std::string formatAge(std::int64_t milliseconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%lld.%03lld s", static_cast<long long>(milliseconds / 1000),
                static_cast<long long>(milliseconds % 1000));
  return text;
}

}  // namespace

const TaskRecordType kSyncAwaitRoot{"syncAwait", &dumpLazyRoot};
const TaskRecordType kStartRoot{"start()", &dumpLazyRoot};
const TaskRecordType kSpawnRoot{"spawn()", &dumpLazyRoot};
const TaskRecordType kTaskGroupRoot{"TaskGroup::spawn()", &dumpLazyRoot};

}  // namespace detail

void dumpTasks(std::ostream& out) {
  detail::Collected collected;
  bool readWaits;
  {
    // Reads tasks that other threads run: each while their owners wait at the dump gate.
    detail::DumpSession session;
    detail::SnapshotReads snapshot;
    readWaits = detail::DumpSession::canRead();
    detail::forEachTask(&detail::collect, &collected);
    if (detail::ListFibers listFibers = detail::fiberLister()) listFibers(collected.entries);
  }
  const std::int64_t now = detail::coarseMilliseconds();
  std::vector<const AsyncBacktrace*> traces;
  traces.reserve(collected.entries.size());
  for (const detail::TaskDumpEntry& entry : collected.entries) traces.push_back(&entry.trace);
  const std::vector<std::string> texts = detail::formatAsyncBacktraces(traces, true, "  ");
  const std::size_t tasks = collected.created.size();
  const std::size_t fibers = collected.entries.size() - tasks;
  std::string text = "weft: " + std::to_string(tasks) + (tasks == 1 ? " task, " : " tasks, ") +
                     std::to_string(fibers) + (fibers == 1 ? " fiber" : " fibers") +
                     (WEFT_TASK_TRACKING ? ""
                                         : " (root tasks are listed in builds with "
                                           "WEFT_TASK_TRACKING=1)") +
                     (readWaits ? "\n"
                                : " (what they wait on is not read: the kernel offers no "
                                  "membarrier, which a dump needs to read other threads' "
                                  "tasks safely)\n");
  for (std::size_t i = 0; i < collected.entries.size(); ++i) {
    const detail::TaskDumpEntry& entry = collected.entries[i];
    text += '\n';
    text += entry.title;
    if (i < tasks) text += ", age " + detail::formatAge(now - collected.created[i]);
    text += ": " + entry.state + '\n';
    text += texts[i];
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
