#pragma once

#include <thread>

namespace weft::test {

// Spins (yielding) until `predicate()` holds: a hand-shake with another thread or the
// kernel, never a timing. It has no time limit of its own: the test's Watchdog, or
// ctest's timeout, turns a predicate that never holds into a failure.
//
// Example:
//   test::waitUntil([&] { return event.waiting() == 1; });  // the waiter is queued
template <class Predicate>
void waitUntil(Predicate predicate) {
  while (!predicate()) std::this_thread::yield();
}

}  // namespace weft::test
