// The request path of a service: admission by a Semaphore, a fan-out to two backends,
// a legacy blocking-style library run in a fiber, a time limit per request, results sent
// to an aggregator over a Channel, every request in a TaskGroup, and a graceful stop on
// SIGINT or SIGTERM.
//   request_pipeline [REQUESTS]   handles REQUESTS synthetic requests (default 300), prints
//                                 a summary and exits 0 if every request is accounted for;
//                                 a signal stops it early: requests in flight are
//                                 cancelled (the legacy code's fibers too), then it exits 0.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include <weft/coro/cancellation.h>
#include <weft/coro/channel.h>
#include <weft/coro/collect.h>
#include <weft/coro/current_executor.h>
#include <weft/coro/semaphore.h>
#include <weft/coro/sleep.h>
#include <weft/coro/spawn.h>
#include <weft/coro/sync_await.h>
#include <weft/coro/task_group.h>
#include <weft/coro/with_cancellation.h>
#include <weft/coro/with_timeout.h>
#include <weft/executors/thread_pool.h>
#include <weft/io/signal_set.h>
#include <weft/stackful/await.h>
#include <weft/stackful/in_fiber.h>

using namespace std::chrono_literals;

struct Outcome {
  int id = 0;
  bool timedOut = false;
  int score = 0;
};

struct Summary {
  int ok = 0;
  int timedOut = 0;
};

// A backend call; every tenth request is slow, so that its time limit runs out.
weft::Lazy<int> backend(int id, int which) {
  co_await weft::sleep(id % 10 == 0 ? 200ms : 1ms);
  co_return id * which;
}

// A library with a blocking-style API: it waits inside ordinary calls, so it runs in a
// fiber. Its waits see the request's cancellation like any await.
int legacyScore(int id) {
  weft::await(weft::sleep(1ms));
  return id % 7;
}

weft::Lazy<Outcome> handle(int id) {
  auto [a, b] = co_await weft::collectAll(backend(id, 1), backend(id, 2));  // fan-out
  const int score = co_await weft::inFiber([id] { return legacyScore(id); });
  co_return Outcome{id, false, a.value() + b.value() + score};
}

// One request, holding its admission permit until its outcome is sent.
weft::Lazy<void> serve(int id, weft::SemaphorePermit permit,
                      weft::Channel<Outcome>& results) {
  (void)permit;  // returned when this frame ends
  Outcome outcome{id, true, 0};
  try {
    outcome = co_await weft::withTimeout(handle(id), 50ms);
  } catch (const weft::TimeoutError&) {
  }
  co_await results.send(outcome);
}

weft::Lazy<Summary> aggregate(weft::Channel<Outcome>& results) {
  Summary summary;
  while (std::optional<Outcome> outcome = co_await results.receive()) {
    ++(outcome->timedOut ? summary.timedOut : summary.ok);
  }
  co_return summary;
}

weft::Lazy<int> run(int requests, weft::SignalSet& signals) {
  weft::Executor* executor = co_await weft::currentExecutor();
  weft::Channel<Outcome> results(64);
  weft::Semaphore admission(16);
  weft::JoinHandle<Summary> aggregator = weft::spawn(executor, aggregate(results));
  weft::TaskGroup<> group(executor);
  auto stopOnSignal = [&]() -> weft::Lazy<void> {
    co_await signals.wait();
    group.requestCancellation();  // requests in flight end with OperationCancelled
  };
  weft::JoinHandle<void> watcher = weft::spawn(executor, stopOnSignal());
  // Admission: at most 16 requests in flight; a permit is taken before a request is
  // spawned, so a long run never holds more than 16 frames, and goes to the request.
  for (int id = 0; id < requests; ++id) {
    std::optional<weft::SemaphorePermit> permit;
    try {
      permit = co_await weft::withCancellation(group.token(), admission.scopedAcquire());
    } catch (const weft::OperationCancelled&) {
      break;  // stopped by a signal
    }
    group.spawn(serve(id, std::move(*permit), results));
  }
  bool stopped = false;
  try {
    co_await group.join();
  } catch (const weft::OperationCancelled&) {
    stopped = true;  // requests still waiting or in flight were cancelled
  }
  watcher.cancel();  // no signal came: stop waiting for one
  try {
    co_await std::move(watcher);
  } catch (const weft::OperationCancelled&) {
  }
  results.close();
  const Summary summary = co_await std::move(aggregator);
  std::printf("request_pipeline: %d requests: %d ok, %d timed out (50 ms limit), %d not handled%s\n",
              requests, summary.ok, summary.timedOut, requests - summary.ok - summary.timedOut,
              stopped ? " (stopped by a signal)" : "");
  co_return stopped || summary.ok + summary.timedOut == requests ? 0 : 1;
}

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 300;
  weft::SignalSet signals{SIGINT, SIGTERM};  // from here on they no longer end the process
  weft::ThreadPool pool(2, "pipeline");
  return weft::syncAwait(run(requests, signals), &pool);
}
