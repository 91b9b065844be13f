#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/spawn_fiber.h"
#include "test/support/thread_states.h"

namespace weft::test {

// Runs `wait` (a callable that awaits something that cannot complete yet) in a fiber on
// `pool` whose cancellation token is cancelled twice over: once before the fiber starts
// (the waiter must not queue; on ThreadPool(1) the fiber's own await_suspend declines),
// once while the fiber waits (it must leave the queue). Expects `wait` to throw
// OperationCancelled both times; a wait that completes or hangs fails the test (the
// caller's Watchdog catches a hang).
template <class Wait>
void expectFiberWaitCancelled(ThreadPool& pool, Wait wait) {
  for (bool cancelFirst : {true, false}) {
    CancellationSource source;
    if (cancelFirst) source.requestCancellation();
    std::atomic<bool> started{false};
    SpawnFiberOptions options;
    options.cancellationToken = source.token();
    auto fiber = spawnFiber(
        &pool,
        [&] {
          started.store(true);
          try {
            wait();
            return false;
          } catch (const OperationCancelled&) {
            return true;
          }
        },
        std::move(options));
    // Hand-shake: once the fiber has started and the pool's workers are asleep, the fiber
    // is parked in its wait (or, cancelled first, has ended), so the cancellation below
    // reaches a parked fiber.
    while (!started.load()) std::this_thread::yield();
    EXPECT_TRUE(waitUntilIdle(pool));
    source.requestCancellation();
    EXPECT_TRUE(syncAwait(std::move(fiber)))
        << (cancelFirst ? "cancelled before the wait" : "cancelled during the wait");
  }
}

}  // namespace weft::test
