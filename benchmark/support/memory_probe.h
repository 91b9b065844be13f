#pragma once

// What the *_memory programs (benchmark/*/*_memory.cc) share: reading the process's
// resident set, failing with the program's name, and running each measurement in a
// child process of its own, so that one measurement's heap and mappings are not counted
// in the next. Benchmark support only, not part of weft.

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace weft::bench {

// Prints "<program>: <what>" on stderr and exits with status 1.
[[noreturn]] inline void failMeasurement(const char* program, const char* what) {
  std::fprintf(stderr, "%s: %s\n", program, what);
  std::exit(1);
}

// The resident set size of this process, in bytes (/proc/self/statm). Fails the program
// if it cannot be read.
inline long residentBytes(const char* program) {
  long pages = 0, resident = 0;
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr || std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) {
    failMeasurement(program, "cannot read /proc/self/statm");
  }
  std::fclose(statm);
  return resident * sysconf(_SC_PAGESIZE);
}

// Runs `body()` (which prints its results on stdout) in a forked child and waits for it;
// fails the program if the child does not exit with status 0.
template <class Body>
void runInChild(const char* program, Body body) {
  std::fflush(stdout);
  pid_t child = fork();
  if (child < 0) failMeasurement(program, "fork failed");
  if (child == 0) {
    body();
    std::fflush(stdout);
    std::_Exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    failMeasurement(program, "a measurement failed");
  }
}

}  // namespace weft::bench
