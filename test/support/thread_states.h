#pragma once

#include <dirent.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "weft/executors/thread_pool.h"

namespace weft::test {

// Hand-shakes with threads that are about to block, read from /proc/self/task (Linux):
// a thread's state letter is 'R' while it runs or waits for a CPU, 'S' (or 'D') once it
// sleeps in the kernel: a futex wait, epoll_wait, io_uring_enter. So "thread T is
// blocked" is a fact the kernel reports, not a guess that enough time has passed.
//
// The waits below poll with std::this_thread::yield() and give up after a minute (a
// bound for a hang, not a timing claim): they return false then, for an ASSERT_TRUE.

// The kernel's id of the calling thread (for threadState / waitUntilBlocked).
inline pid_t currentThreadId() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// The state letter of thread `tid` of this process, or 0 if it cannot be read (the thread
// has ended).
inline char threadState(pid_t tid) {
  std::string stat;
  std::getline(std::ifstream("/proc/self/task/" + std::to_string(tid) + "/stat"), stat);
  const auto paren = stat.rfind(')');  // the name, in parentheses, may hold anything
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '\0';
}

inline bool blockedState(char state) { return state == 'S' || state == 'D'; }

// The states ('R', 'S', ...) of this process's threads whose name starts with `prefix`.
inline std::vector<char> threadStates(const std::string& prefix) {
  std::vector<char> states;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return states;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + entry->d_name;
    std::string comm;
    std::getline(std::ifstream(base + "/comm"), comm);
    if (comm.rfind(prefix, 0) != 0) continue;
    std::string stat;
    std::getline(std::ifstream(base + "/stat"), stat);
    const auto paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size()) states.push_back(stat[paren + 2]);
  }
  closedir(dir);
  return states;
}

// Yields until `done()`; false after a minute.
template <class Done>
bool yieldUntil(Done done) {
  const auto giveUp = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!done()) {
    if (std::chrono::steady_clock::now() > giveUp) return false;
    std::this_thread::yield();
  }
  return true;
}

// Returns once thread `tid` sleeps in the kernel. For a thread that is about to wait
// (in a destructor, in shutdown(), in syncAwait): call it after that thread has said,
// with an atomic flag, that it goes there; then the thread is in that wait, or in a lock
// on its way (a brief wait the caller's claims must tolerate, as any such hand-shake).
inline bool waitUntilBlocked(pid_t tid) {
  return yieldUntil([tid] { return blockedState(threadState(tid)); });
}

// Returns once every worker of `pool` sleeps in its event loop: whatever had been
// scheduled on it has run until it finished or waits (a coroutine or fiber is suspended,
// its I/O handed to the kernel: the loop submits before it sleeps). A worker with work
// never sleeps; one idle spins a little first. (A job that blocks its worker, on a
// mutex or a latch, looks the same: use it where the pool's jobs do not block.) The
// workers are found by their names, "<pool name>-<index>" (truncated to 15 characters,
// as Linux does); if other live pools have the same name, their workers must sleep too.
inline bool waitUntilIdle(const ThreadPool& pool) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < pool.threadCount(); ++i) {
    names.push_back((std::string(pool.name()) + "-" + std::to_string(i)).substr(0, 15));
  }
  return yieldUntil([&] {
    std::size_t asleep = 0;
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return false;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string base = std::string("/proc/self/task/") + entry->d_name;
      std::string comm;
      std::getline(std::ifstream(base + "/comm"), comm);
      if (std::find(names.begin(), names.end(), comm) == names.end()) continue;
      if (!blockedState(threadState(static_cast<pid_t>(std::stol(entry->d_name))))) break;
      ++asleep;
    }
    closedir(dir);
    return asleep >= names.size();  // more: pools sharing the name, all asleep
  });
}

}  // namespace weft::test
