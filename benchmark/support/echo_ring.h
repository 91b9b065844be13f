#pragma once

// The 30,000-task echo ring of issue #4, shared by the benchmark that times it
// (benchmark/coro/channel_benchmark.cc) and the program that weighs it
// (benchmark/coro/channel_memory.cc), so that both measure the same ring: one channel of
// capacity 1 per echo task, each task sending every value it receives back on a shared
// replies channel (capacity 1), and a driver that sends one value to every task and sums
// the replies (the shape of benchmark/go/channel_echo_ring). Echo tasks are Lazys or
// fibers; the ring does not care which. Benchmark support only, not part of weft.

#include <cstdint>
#include <deque>
#include <optional>

#include "weft/coro/channel.h"
#include "weft/coro/lazy.h"
#include "weft/stackful/await.h"

namespace weft::bench {

class EchoRing {
 public:
  explicit EchoRing(int tasks) : tasks_(tasks) {
    for (int i = 0; i < tasks; ++i) inputs_.emplace_back(1);
  }

  int tasks() const noexcept { return tasks_; }

  // Echo task `i`, as a Lazy: echoes until its channel is closed.
  Lazy<void> lazyEcho(int i) {
    Channel<std::int64_t>& in = inputs_[i];
    while (std::optional<std::int64_t> v = co_await in.receive()) co_await replies_.send(*v);
  }
  // Echo task `i`, as the body of a fiber (spawnFiber(&pool, [&ring, i] { ... })).
  void fiberEcho(int i) {
    Channel<std::int64_t>& in = inputs_[i];
    while (std::optional<std::int64_t> v = await(in.receive())) await(replies_.send(*v));
  }

  // One round from a Lazy driver: sends i to task i, sums the replies; true when the sum
  // is right (each value came back exactly once).
  Lazy<bool> lazyRound() {
    for (int i = 0; i < tasks_; ++i) co_await inputs_[i].send(i);
    std::int64_t sum = 0;
    for (int i = 0; i < tasks_; ++i) sum += *co_await replies_.receive();
    co_return sum == expectedSum();
  }
  // The same from a fiber driver.
  bool fiberRound() {
    for (int i = 0; i < tasks_; ++i) await(inputs_[i].send(i));
    std::int64_t sum = 0;
    for (int i = 0; i < tasks_; ++i) sum += *await(replies_.receive());
    return sum == expectedSum();
  }

  // Closes every task's channel: each echo task finishes.
  void close() {
    for (auto& in : inputs_) in.close();
  }

 private:
  std::int64_t expectedSum() const noexcept { return std::int64_t{tasks_} * (tasks_ - 1) / 2; }

  int tasks_;
  std::deque<Channel<std::int64_t>> inputs_;  // a deque: channels do not move
  Channel<std::int64_t> replies_{1};
};

}  // namespace weft::bench
