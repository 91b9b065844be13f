#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace weft::testing {

// Deadlock: what Simulation::run throws when its main task can never finish: nothing is
// runnable, the event loop completes nothing and no timer is armed (so virtual time has
// nowhere to jump to), yet the main task waits. Instead of hanging, the simulation
// reports where everything waits.
//
// what() says so, with the seed, the virtual time and the task dump taken at that moment
// (weft::dumpTasks: every task and fiber, and what it waits on; root tasks are listed
// when weft is built with WEFT_TASK_TRACKING, the default in every build type). Before
// throwing, the simulation cancelled its tasks so that they could unwind (see
// Simulation::run).
//
// Thread safety: an immutable value.
//
// Example:
//   try { sim.run(server.serveOne()); } catch (const weft::testing::Deadlock& d) {
//     std::fputs(d.what(), stderr);  // "weft::testing: deadlock ... waiting on Channel::receive"
//   }
class Deadlock : public std::runtime_error {
 public:
  Deadlock(const std::string& what, std::uint64_t seed, std::chrono::nanoseconds elapsed,
           std::string taskDump)
      : std::runtime_error(what), seed_(seed), elapsed_(elapsed), taskDump_(std::move(taskDump)) {}

  // The seed of the simulation that deadlocked (Simulation::seed()).
  std::uint64_t seed() const noexcept { return seed_; }
  // Its virtual time when it found the deadlock, from its start (Simulation::elapsed()).
  std::chrono::nanoseconds elapsed() const noexcept { return elapsed_; }
  // weft::dumpTasks() at that moment (also part of what()).
  const std::string& taskDump() const noexcept { return taskDump_; }

 private:
  std::uint64_t seed_;
  std::chrono::nanoseconds elapsed_;
  std::string taskDump_;
};

}  // namespace weft::testing
