#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace weft::test {

// Turns a hang into a failure: if the Watchdog is still alive `limit` after its
// construction, it prints what hung and aborts the test binary (which ctest reports as a
// failure). Destroying it in time disarms it.
//
// Example:
//   weft::test::Watchdog watchdog(std::chrono::seconds(60), "MutexTest.Stress");
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, const char* what) : what_(what) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(mutex_);
      if (!disarmed_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: %s did not finish within %lld s; aborting\n", what_,
                     static_cast<long long>(limit.count()));
        std::abort();
      }
    });
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    disarmed_.notify_one();
    thread_.join();
  }

 private:
  const char* what_;
  std::mutex mutex_;
  std::condition_variable disarmed_;
  bool done_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace weft::test
