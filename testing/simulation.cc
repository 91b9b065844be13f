#include "weft/testing/simulation.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "weft/coro/select.h"
#include "weft/coro/task_dump.h"
#include "weft/executors/io_loop.h"
#include "weft/executors/work_item.h"
#include "weft/testing/detail/split_mix64.h"
#include "weft/testing/detail/virtual_io_loop.h"
#include "weft/testing/failure_hooks.h"

namespace weft::testing {

namespace {

// The simulation running on this thread (inside Simulation::Scope), or nullptr.
constinit thread_local Simulation* tlCurrent = nullptr;

using detail::SplitMix64;
using detail::streamState;

// "+12.500000000 s" from the start of the simulation.
std::string formatElapsed(Simulation::Duration elapsed) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  char text[64];
  std::snprintf(text, sizeof(text), "+%lld.%09lld s", static_cast<long long>(ns / 1000000000),
                static_cast<long long>(ns % 1000000000));
  return text;
}

// weft::dumpTasks() as the simulation's tasks see time ("sleep, due in 2.000 s").
std::string taskDump(const Simulation::TimePoint& now) {
  ExecutorClock::VirtualTimeScope clock(&now);
  std::ostringstream out;
  dumpTasks(out);
  return out.str();
}

bool isCancellation(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const OperationCancelled&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string describeFailure(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

struct Simulation::State {
  State(Simulation& owner, std::uint64_t seedValue)
      : sim(owner),
        seed(seedValue),
        scheduler(streamState(seedValue, 1)),
        user(streamState(seedValue, 2)),
        selectState(streamState(seedValue, 3)),
        loop(std::make_unique<detail::VirtualIoLoop>(owner)) {}

  // Collects the armed timers whose deadline has come into `due`. Caller holds `mutex`.
  void collectDueLocked() {
    while (!timers.empty() && timers.begin()->first.first <= now) {
      TimerEntry* timer = timers.begin()->second;
      timers.erase(timers.begin());
      due.push_back(timer);  // reserved by scheduleTimer: does not throw
      timer->holder = &due;
    }
  }

  // One step: runs one runnable item chosen by the scheduler's generator, or the event
  // loop without waiting (when nothing is runnable, and otherwise one time in four, as
  // the generator says). False when nothing ran and the loop completed nothing: every
  // task is durably blocked, or finished.
  //
  // One lock when the loop has nothing in flight (the common case), two when it is polled
  // first; the generator's draws are the same either way (the seed's order does not
  // depend on it).
  bool step() {
    const bool ioInFlight = loop->hasWork();  // the loop is this thread's: no lock needed
    WorkItem item;
    TimerEntry* timer = nullptr;
    {
      std::unique_lock lock(mutex);
      collectDueLocked();
      std::size_t total = runnable.size() + due.size();
      if (ioInFlight && (total == 0 || scheduler.below(4) == 0)) {
        lock.unlock();
        if (loop->run(0) > 0) return true;
        if (total == 0) return false;
        lock.lock();
        total = runnable.size() + due.size();
        if (total == 0) return true;  // another thread cancelled the timer meanwhile
      } else if (total == 0) {
        return false;
      }
      const std::size_t index = static_cast<std::size_t>(scheduler.below(total));
      if (index < runnable.size()) {
        item = runnable[index];
        runnable[index] = runnable.back();
        runnable.pop_back();
      } else {
        const std::size_t at = index - runnable.size();
        timer = due[at];
        due[at] = due.back();
        due.pop_back();
        timer->holder = nullptr;
      }
      ++steps;
    }
    if (timer != nullptr) {
      timer->complete(timer, true);  // a fire function: noexcept by contract
    } else {
      try {
        item.run();
      } catch (...) {
        reportEscapedException(sim.name());
      }
    }
    return true;
  }

  // Moves the clock to the earliest armed timer (never backwards) and makes the timers
  // due then runnable. False when no timer is armed, or only timers that never expire
  // (a sleep of "forever" ends only by a cancellation).
  bool jumpToNextTimer() {
    std::lock_guard lock(mutex);
    if (timers.empty()) return false;
    const TimePoint first = timers.begin()->first.first;
    if (first == TimePoint::max()) return false;
    now = std::max(now, first);
    collectDueLocked();
    return true;
  }

  // Runs until `done` or until durably blocked with no timer to jump to.
  template <class Done>
  void runJumping(Done&& done) {
    for (;;) {
      if (done()) return;
      if (step()) continue;
      if (done()) return;
      if (!jumpToNextTimer()) return;
    }
  }

  std::size_t runnableCount() const {
    std::lock_guard lock(mutex);
    return runnable.size() + due.size();
  }
  std::size_t timerCount() const {
    std::lock_guard lock(mutex);
    return timers.size();
  }

  // One line on where the simulation stands, for reports.
  std::string describe() const {
    std::size_t items = 0;
    std::size_t armed = 0;
    {
      std::lock_guard lock(mutex);
      items = runnable.size() + due.size();
      armed = timers.size();
    }
    char text[320];
    std::snprintf(text, sizeof(text),
                  "seed %" PRIu64 ", virtual time %s, step %" PRIu64
                  "; %zu runnable, %zu timer%s armed, I/O in flight: %s, tasks from "
                  "spawn() not finished: %zu, buffers lent by its event loop: %zu; replay "
                  "with WEFT_TEST_SEED=%" PRIu64,
                  seed, formatElapsed(now - kStartTime).c_str(), steps, items, armed,
                  armed == 1 ? "" : "s", loop->hasWork() ? "yes" : "no", liveSpawned,
                  loop->lentBuffers(), seed);
    return text;
  }

  // Cancels every task of the simulation, lets them unwind, ends the armed timers early
  // and the I/O in flight, and refuses work from then on (Simulation::shutdown).
  void stop() {
    stopping = true;
    mainSource.requestCancellation();
    spawnSource.requestCancellation();
    while (step()) {
    }
    for (;;) {
      {
        std::lock_guard lock(mutex);
        refuseTimers = true;
        while (!timers.empty()) {
          TimerEntry* timer = timers.begin()->second;
          timers.erase(timers.begin());
          timer->shutDown = true;  // its sleep or timeout throws ExecutorShutDown
          due.push_back(timer);
          timer->holder = &due;
        }
      }
      loop->shutdown();
      while (step()) {
      }
      std::lock_guard lock(mutex);
      if (timers.empty() && runnable.empty() && due.empty() && !loop->hasWork()) break;
    }
    std::lock_guard lock(mutex);
    refuseWork = true;
    stopped = true;
  }

  Simulation& sim;
  const std::uint64_t seed;
  SplitMix64 scheduler;
  SplitMix64 user;
  std::uint64_t selectState;  // select()'s generator, while the simulation is not running
  TimePoint now = kStartTime;
  std::uint64_t steps = 0;

  // Guards what the Executor members touch (they may be called from any thread).
  mutable std::mutex mutex;
  std::vector<WorkItem> runnable;
  std::vector<TimerEntry*> due;  // fired timers waiting for their turn
  // Armed timers in deadline order, ties by arming order (TimerEntry::sequence).
  std::map<std::pair<TimePoint, std::uint64_t>, TimerEntry*> timers;
  std::uint64_t nextTimerSequence = 0;
  bool refuseTimers = false;  // shutdown has ended the timers
  bool refuseWork = false;    // shut down

  std::unique_ptr<detail::VirtualIoLoop> loop;
  CancellationSource spawnSource;  // the token of every task from spawn()
  CancellationSource mainSource;   // the token of the current run()'s main task
  std::size_t liveSpawned = 0;
  std::exception_ptr spawnFailure;  // the first, until a run() rethrows it
  bool stopping = false;
  bool stopped = false;
  bool deadlocked = false;
};

// What is current on the simulation's thread while it runs: the simulation itself
// (currentThreadInExecutor, Simulation::current), its virtual clock, its event loop and
// select()'s generator. Refuses to nest.
class Simulation::Scope {
 public:
  explicit Scope(Simulation& sim)
      : sim_(sim), clock_(&sim.state_->now), loop_(sim.state_->loop.get()) {
    if (tlCurrent == &sim) {
      throw std::logic_error(
          "weft::testing: a Simulation was driven from inside itself (a task of it called "
          "run(), advance(), runUntilBlocked() or shutdown()): co_await the work instead");
    }
    if (tlCurrent != nullptr) {
      throw std::logic_error(
          "weft::testing: a Simulation was driven on a thread where another one is running");
    }
    previousSelectState_ = exchangeSelectRandomState(sim.state_->selectState);
    tlCurrent = &sim;
  }
  ~Scope() {
    sim_.state_->selectState = exchangeSelectRandomState(previousSelectState_);
    tlCurrent = nullptr;
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Simulation& sim_;
  ExecutorClock::VirtualTimeScope clock_;
  IoLoop::CurrentScope loop_;
  std::uint64_t previousSelectState_ = 0;
};

Simulation::Simulation(std::uint64_t seed)
    : Executor("weft-simulation"), state_(std::make_unique<State>(*this, seed)) {}

Simulation::~Simulation() {
  State& s = *state_;
  if (tlCurrent == this) {
    std::fputs("weft: a weft::testing::Simulation was destroyed by a task running on it\n", stderr);
    std::abort();
  }
  if (!s.stopped) {
    // (Buffers its loop lent are only counted in the report: a LentBuffer may outlive
    // its loop, e.g. the last bytes a test keeps to check after the simulation.)
    const bool leaked =
        s.liveSpawned != 0 || runnableCount() != 0 || timerCount() != 0 || s.loop->hasWork();
    if (leaked && !s.deadlocked) {
      reportFailure("weft::testing: the simulation ends with work still alive (" + s.describe() +
                    "); stopping it. Tasks and fibers:\n" + taskDump(s.now));
    }
    try {
      shutdown();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "weft: a weft::testing::Simulation could not stop: %s\n", e.what());
      std::abort();
    }
  }
  if (s.spawnFailure) {
    reportFailure(
        "weft::testing: a task from Simulation::spawn() failed and no run() was "
        "there to rethrow it (seed " +
        std::to_string(s.seed) + "): " + describeFailure(s.spawnFailure));
  }
  // The loop first, while the timers it may still disarm are all there.
  s.loop.reset();
}

std::uint64_t Simulation::seed() const noexcept { return state_->seed; }
detail::VirtualIoLoop& Simulation::ioLoop() noexcept { return *state_->loop; }
Simulation::TimePoint Simulation::now() const noexcept { return state_->now; }
std::uint64_t Simulation::steps() const noexcept { return state_->steps; }
Simulation* Simulation::current() noexcept { return tlCurrent; }
std::uint64_t Simulation::random() noexcept { return state_->user.next(); }
std::uint64_t Simulation::randomBelow(std::uint64_t bound) noexcept {
  return state_->user.below(bound);
}

std::size_t Simulation::runnableCount() const noexcept { return state_->runnableCount(); }
std::size_t Simulation::timerCount() const noexcept { return state_->timerCount(); }

CancellationToken Simulation::beginRun() {
  State& s = *state_;
  if (tlCurrent == this) {
    throw std::logic_error(
        "weft::testing: Simulation::run() was called from inside the simulation: co_await the "
        "work instead");
  }
  if (tlCurrent != nullptr) {
    throw std::logic_error(
        "weft::testing: Simulation::run() on a thread where another simulation is running");
  }
  if (s.stopped) throw ExecutorShutDown(name());
  if (s.deadlocked) {
    throw std::logic_error(
        "weft::testing: this Simulation deadlocked in an earlier run() (its tasks were "
        "cancelled): use a new one");
  }
  s.mainSource = CancellationSource();
  return s.mainSource.token();
}

void Simulation::runMain(const detail::MainOutcome& main) {
  State& s = *state_;
  Scope scope(*this);
  s.runJumping([&] { return main.done; });
  if (main.done) return;

  // Durably blocked with no timer to jump to, and the main task waits: a deadlock.
  std::string dump = taskDump(s.now);
  std::string message =
      "weft::testing: deadlock: the main task waits, but nothing is "
      "runnable, the event loop completes nothing and no timer is armed (" +
      s.describe() + ")";
  if (s.spawnFailure) {
    message += "; earlier, a task from spawn() failed: " + describeFailure(s.spawnFailure);
  }
  const Duration elapsed = s.now - kStartTime;
  s.deadlocked = true;
  // Cancel everything so that the tasks unwind (their waits throw OperationCancelled) and
  // free what they hold; time may still jump for what they do on the way out.
  s.mainSource.requestCancellation();
  s.spawnSource.requestCancellation();
  s.runJumping([&] { return main.done; });
  if (!main.done) {
    message +=
        ". Cancelling the tasks did not end the main task: its coroutines stay "
        "suspended (leaked)";
  }
  message += ". Tasks and fibers when it deadlocked:\n" + dump;
  throw Deadlock(message, s.seed, elapsed, std::move(dump));
}

void Simulation::rethrowSpawnFailure() {
  if (state_->spawnFailure) std::rethrow_exception(std::exchange(state_->spawnFailure, nullptr));
}

CancellationToken Simulation::spawnToken() {
  if (state_->stopped) throw ExecutorShutDown(name());
  return state_->spawnSource.token();
}

void Simulation::spawnStarted() noexcept { ++state_->liveSpawned; }

void Simulation::spawnFinished(std::exception_ptr failure) noexcept {
  State& s = *state_;
  --s.liveSpawned;
  if (failure == nullptr || s.stopping || s.spawnFailure != nullptr) return;
  if (isCancellation(failure)) return;
  s.spawnFailure = std::move(failure);
}

void Simulation::runUntilBlocked() {
  State& s = *state_;
  Scope scope(*this);
  while (s.step()) {
  }
}

void Simulation::advance(Duration d) {
  if (d < Duration::zero()) {
    throw std::invalid_argument("weft::testing: Simulation::advance() of a negative duration");
  }
  State& s = *state_;
  Scope scope(*this);
  const TimePoint target = s.now > TimePoint::max() - d ? TimePoint::max() : s.now + d;
  for (;;) {
    while (s.step()) {
    }
    std::lock_guard lock(s.mutex);
    if (s.timers.empty() || s.timers.begin()->first.first > target) break;
    s.now = std::max(s.now, s.timers.begin()->first.first);
    s.collectDueLocked();
  }
  s.now = std::max(s.now, target);
}

void Simulation::shutdown() {
  if (state_->stopped) return;
  Scope scope(*this);
  state_->stop();
}

void Simulation::schedule(std::coroutine_handle<> handle) {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (s.refuseWork) throw ExecutorShutDown(name());
  s.runnable.push_back(WorkItem::fromHandle(handle));
}

void Simulation::scheduleJob(Job* job) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    if (!s.refuseWork) {
      s.runnable.push_back(WorkItem::fromJob(job));
      return;
    }
  }
  job->complete(job, false);
  throw ExecutorShutDown(name());
}

bool Simulation::currentThreadInExecutor() const noexcept { return tlCurrent == this; }

void Simulation::scheduleTimer(TimerEntry& timer) {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (s.refuseTimers) throw ExecutorShutDown(name());
  // Room for it among the due timers now, so that collecting it later cannot fail.
  s.due.reserve(s.due.size() + s.timers.size() + 1);
  timer.sequence = s.nextTimerSequence++;
  s.timers.emplace(std::make_pair(timer.deadline, timer.sequence), &timer);
  timer.holder = &s.timers;
}

bool Simulation::cancelTimer(TimerEntry& timer) noexcept {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  if (timer.holder == &s.timers) {
    s.timers.erase(std::make_pair(timer.deadline, timer.sequence));
    timer.holder = nullptr;
    return true;
  }
  if (timer.holder == &s.due) {
    // Due but not yet run: taken back, as the Executor contract asks.
    auto found = std::find(s.due.begin(), s.due.end(), &timer);
    *found = s.due.back();
    s.due.pop_back();
    timer.holder = nullptr;
    return true;
  }
  return false;
}

}  // namespace weft::testing
