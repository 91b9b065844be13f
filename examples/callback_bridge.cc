// Turning a callback-style API into something a Lazy can co_await, and getting back
// onto the caller's executor afterwards without writing any executor code.
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <functional>
#include <thread>

#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>

// A stand-in for a third-party library: it answers on a thread of its own.
void legacyLookup(int key, std::function<void(int)> callback) {
  std::thread([key, callback = std::move(callback)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    callback(key * 10);
  }).detach();
}

// The bridge: an ordinary C++20 awaitable. weft needs nothing more from it.
struct Lookup {
  int key;
  int result = 0;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    legacyLookup(key, [this, waiter](int value) {
      result = value;
      waiter.resume();  // on the library's thread...
    });
  }
  int await_resume() const noexcept { return result; }
};

weft::Lazy<bool> lookupTwice(weft::ThreadPool& pool) {
  int a = co_await Lookup{1};
  int b = co_await Lookup{2};
  // ...yet a Task continues on its own executor after each await.
  co_return a + b == 30 && pool.currentThreadInExecutor();
}

int main() {
  weft::ThreadPool pool(2);
  const bool ok = weft::syncAwait(lookupTwice(pool), &pool);
  std::printf("looked up on the library's thread, continued on the pool: %s\n",
              ok ? "yes" : "no");
  return ok ? 0 : 1;
}
