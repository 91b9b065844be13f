#pragma once

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/task.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"
#include "weft/executors/executor.h"
#include "weft/executors/executor_clock.h"
#include "weft/testing/deadlock.h"

namespace weft::testing {

class Network;

namespace detail {

class VirtualIoLoop;

// What Simulation::run watches: set by the main task's completion callback. Shared with
// that callback, so that a main task that could not be unwound after a deadlock (and
// finishes, if ever, after run() returned) writes into memory that is still there.
struct MainOutcome {
  bool done = false;
};
template <class T>
struct MainResult : MainOutcome {
  std::optional<Try<T>> result;
};

[[noreturn]] inline void abortEmptyLazy(const char* where) noexcept {
  std::fprintf(stderr, "weft: %s of an empty (moved-from or default-constructed) Lazy\n", where);
  std::abort();
}

}  // namespace detail

// Simulation: a seeded, single-threaded executor with virtual time, for deterministic
// tests of code written on weft (timeouts, retries, races, shutdown).
//
// Everything bound to it runs on the thread that calls run() (or advance(),
// runUntilBlocked()): Lazys and Tasks, TaskGroups and spawn(), channels, mutexes, select,
// withTimeout, fibers (spawnFiber(&sim, fn)), and I/O on its own event loop (epoll).
//
// Scheduling: at every step the simulation picks the next item among ALL runnable ones
// (resumed coroutines, scheduled callables, timers that are due) with a pseudo-random
// generator seeded by `seed`, not in FIFO order: a test can run one scenario under many
// interleavings (forEachSeed), and the same seed replays the same interleaving, step for
// step. Work resumed inline (symmetric transfer; a wake-up on this executor's own
// thread) runs at once, as on any executor.
//
// Virtual time: while the simulation runs, ExecutorClock::now() on its thread is its
// virtual clock, which is what sleep, sleepUntil, withTimeout, select's timeoutCase and
// a TcpStream's read and write time limits measure from. Time does not pass while
// anything can run. When nothing is runnable and the event loop completes nothing, every
// task is durably blocked: the clock jumps at once to the earliest armed timer, whose
// items become runnable. Equal deadlines fire in an order the seed picks, never before a
// deadline that is earlier. The clock starts at kStartTime in every simulation, so a
// seed gives the same virtual times every run; a 30-second timeout takes microseconds.
//
// I/O: the simulation owns an epoll event loop, current on its thread while it runs.
// When nothing is runnable it polls the loop without waiting (and now and then between
// items, as the seed decides); if that completes nothing, the I/O in flight counts as
// durably blocked and time may jump over it. That is right when both ends of every
// socket are in the simulation (socketpair(), a listener and its clients inside the
// test): then nothing arrives until a task of the simulation sends it. A socket whose
// peer is outside (a real server) is outside the simulation: its data may arrive after
// time has jumped. (Go's testing/synctest never counts I/O as durably blocked, because
// it cannot know where the peer is; weft lets tests put both ends inside and get
// virtual-time read timeouts on them. docs/testing.md says more.)
//
// Outside the simulation: work on other threads (weft::blocking, resolve(), a ThreadPool,
// a std::thread). It runs in real time, the simulation cannot see it, and may jump time
// or report a deadlock while it runs; its results re-enter the simulation when they are
// scheduled onto it (that is thread-safe). Give the code under test a fake for it.
//
// Deadlock: when run()'s main task waits but nothing is runnable, the loop completes
// nothing and no timer is armed, run() throws Deadlock with the task dump instead of
// hanging (see run()). Leaks: when the simulation is destroyed with work still alive
// (runnable items, armed timers, I/O in flight, tasks from spawn() that have not
// finished), it reports it (stderr, and a test failure through FailureHooks; the report
// also counts the receive buffers its loop lent that are not back), then cancels and
// unwinds that work as shutdown() does.
//
// Preconditions: run, advance, runUntilBlocked and shutdown are called on one thread at
// a time, never from inside the simulation (a task of it), nor while another simulation
// runs on that thread. Coroutines bound to it must not outlive it.
// Errors: see each member; misuse of the thread rules throws std::logic_error.
// Thread safety: the Executor members (schedule, scheduleTimer, cancelTimer,
// currentThreadInExecutor) may be called from any thread; the rest from the test's
// thread.
//
// Example:
//   weft::testing::Simulation sim(/*seed=*/7);
//   const auto start = sim.now();
//   EXPECT_THROW(sim.run(weft::withTimeout(fetch(), 30s)), weft::TimeoutError);
//   EXPECT_EQ(sim.now() - start, 30s);  // exactly; no real time passed
class Simulation final : public Executor {
 public:
  using Duration = ExecutorClock::duration;
  using TimePoint = ExecutorClock::time_point;

  // Where every simulation's virtual time starts: a fixed time point (a day after
  // steady_clock's epoch, so that a default-constructed time_point is long past).
  static constexpr TimePoint kStartTime{std::chrono::hours(24)};

  // A simulation whose choices all derive from `seed`. Creates its epoll event loop.
  // Errors: std::system_error if the loop cannot be created; std::bad_alloc.
  explicit Simulation(std::uint64_t seed = 0);
  // Reports work still alive (a leak: see above) and stops it as shutdown() does.
  // Precondition: not called from inside the simulation (weft prints a message and aborts).
  ~Simulation() override;
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  std::uint64_t seed() const noexcept;
  // Virtual time: kStartTime plus the time that has passed in the simulation.
  TimePoint now() const noexcept;
  Duration elapsed() const noexcept { return now() - kStartTime; }
  // How many items (resumed coroutines, callables, fired timers) have run. noexcept.
  std::uint64_t steps() const noexcept;

  // The simulation running on the calling thread (inside one of its tasks), or nullptr.
  // noexcept: a thread_local load.
  static Simulation* current() noexcept;

  // A pseudo-random number from the simulation's own stream for tests (random sleeps,
  // random inputs), derived from the seed and separate from the scheduler's choices.
  // noexcept: arithmetic. randomBelow: uniform in [0, bound); bound 0 gives 0.
  std::uint64_t random() noexcept;
  std::uint64_t randomBelow(std::uint64_t bound) noexcept;

  // run(main): runs `main` as the simulation's main task, on the calling thread, until it
  // finishes; returns its value or rethrows its exception. Everything else bound to the
  // simulation runs meanwhile in the seeded order, and virtual time jumps as described
  // above. It returns as soon as the main task has finished: tasks still running stay
  // as they are (a later run() or advance() continues them; the destructor reports them).
  // The main task carries a cancellation token of the simulation's.
  // Errors: what `main` throws. Then, if a task from spawn() failed meanwhile (not with
  // OperationCancelled), its exception. Deadlock when the main task can never finish
  // (above): the simulation first cancels every task of it (the main task's token and
  // spawn()'s) and runs them so that they unwind; if the main task still cannot finish,
  // its frames are left as they are (leaked) and what() says so. Use a new Simulation
  // after a Deadlock (run() refuses with std::logic_error). std::logic_error when called
  // from inside the simulation, or on a thread where another one runs. ExecutorShutDown
  // after shutdown().
  template <class T>
  T run(Lazy<T> main);

  // spawn(task): starts `task` in the background, as a root task of the simulation (it
  // first runs when the seed picks it). Its cancellation token is the simulation's: the
  // destructor and shutdown() cancel it. A failure it ends with (other than
  // OperationCancelled) is rethrown by run() (the one in progress, or the next) once its
  // main task has finished, or reported when the simulation ends if no run() comes.
  // Errors: ExecutorShutDown after shutdown(); std::bad_alloc.
  template <class T>
  void spawn(Lazy<T> task);

  // Runs everything runnable, in the seeded order and without moving time, until every
  // task is durably blocked (on a timer, a channel, a lock, I/O...): Go's synctest.Wait
  // for the whole simulation. Errors: std::logic_error as for run().
  void runUntilBlocked();

  // advance(d): moves virtual time forward by `d`, by hand: runs what is runnable, then
  // fires the timers due within `d` in deadline order (running what each makes runnable,
  // before time moves on), and leaves the clock at exactly now() + d. For tests that
  // step time themselves between runs (tokio's time::advance); inside a task, sleep(d) is
  // the same. Errors: std::invalid_argument for d < 0; std::logic_error as for run().
  void advance(Duration d);

  // Stops the simulation without calling what is left a leak: cancels its tasks' tokens
  // (the main task's and spawn()'s), runs them until they unwind, then ends every armed
  // timer early (its sleep or timeout throws ExecutorShutDown, as on a ThreadPool that
  // shuts down), cancels the I/O in flight and runs what that resumes. Afterwards the
  // simulation accepts no more work (ExecutorShutDown). Coroutines waiting on something
  // that nothing will ever complete (a channel nobody sends to, without a cancellation
  // token) stay suspended. Idempotent. Errors: std::logic_error as for run().
  void shutdown();

  // How many items are runnable now (queued, or timers that are due), and how many
  // timers are armed and not yet due. noexcept after a lock.
  std::size_t runnableCount() const noexcept;
  std::size_t timerCount() const noexcept;

  // Executor: thread-safe; see executors/executor.h. Work and timers scheduled from other
  // threads join the runnable set (the order in which they arrive is outside the seed's
  // control). currentThreadInExecutor() is true only on the thread running the
  // simulation, while it runs.
  using Executor::schedule;
  void schedule(std::coroutine_handle<> handle) override;
  bool currentThreadInExecutor() const noexcept override;
  void scheduleTimer(TimerEntry& timer) override;
  bool cancelTimer(TimerEntry& timer) noexcept override;

 protected:
  void scheduleJob(Job* job) override;

 private:
  struct State;
  class Scope;
  friend class Network;  // watches the accepts on the loop (VirtualIoLoop::AcceptObserver)

  detail::VirtualIoLoop& ioLoop() noexcept;

  // For the templates: begins a run (checks the thread, makes the main task's token).
  CancellationToken beginRun();
  // Runs until `main` is done; throws Deadlock (after unwinding) when it cannot be.
  void runMain(const detail::MainOutcome& main);
  // After the main task's result was taken: rethrows the first failure of a spawned task.
  void rethrowSpawnFailure();
  CancellationToken spawnToken();
  void spawnStarted() noexcept;
  void spawnFinished(std::exception_ptr failure) noexcept;

  std::unique_ptr<State> state_;
};

template <class T>
T Simulation::run(Lazy<T> main) {
  if (!main.valid()) detail::abortEmptyLazy("Simulation::run");
  CancellationToken token = beginRun();
  auto outcome = std::make_shared<detail::MainResult<T>>();
  // Not on the simulation's thread yet (run() refuses to be called from inside), so the
  // task is scheduled rather than started inline: the seed decides when it first runs.
  withCancellation(std::move(token), std::move(main)).via(this).start([outcome](Try<T>&& result) {
    outcome->result.emplace(std::move(result));
    outcome->done = true;
  });
  runMain(*outcome);
  Try<T> result = std::move(*outcome->result);
  if (result.hasException()) std::rethrow_exception(result.exception());
  rethrowSpawnFailure();
  if constexpr (!std::is_void_v<T>) return std::move(result).value();
}

template <class T>
void Simulation::spawn(Lazy<T> task) {
  if (!task.valid()) detail::abortEmptyLazy("Simulation::spawn");
  auto bound = withCancellation(spawnToken(), std::move(task)).via(this);
  spawnStarted();
  try {
    std::move(bound).start([this](Try<T>&& result) {
      spawnFinished(result.hasException() ? result.exception() : std::exception_ptr());
    });
  } catch (...) {
    spawnFinished(nullptr);
    throw;
  }
}

}  // namespace weft::testing
