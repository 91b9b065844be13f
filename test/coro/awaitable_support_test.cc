#include "weft/coro/awaitable_support.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <coroutine>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "weft/coro/lazy.h"
#include "weft/coro/sync_await.h"
#include "weft/executors/thread_pool.h"
#include "weft/stackful/await.h"
#include "weft/stackful/spawn_fiber.h"

// The example of docs/coro.md ("Writing your own awaitable"): an awaitable over a
// callback API, written with the public kit only. The code between the BEGIN and END
// lines is the document's, word for word (keep them alike).

namespace {

// A stand-in for a third-party library that answers on a thread of its own: one thread
// that runs the callbacks in the order they were asked for.
class CallbackLibrary {
 public:
  CallbackLibrary() : thread_([this] { run(); }) {}
  ~CallbackLibrary() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void post(std::function<void()> callback) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(callback));
    }
    wake_.notify_one();
  }
  std::thread::id threadId() const { return thread_.get_id(); }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> callback = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      callback();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is constructed
};

CallbackLibrary& library() {
  static CallbackLibrary instance;
  return instance;
}

// The user's callback API: `done` runs once, later, on the library's thread.
void fetchValue(int key, std::function<void(std::string)> done) {
  library().post([key, done = std::move(done)] { done("value " + std::to_string(key)); });
}

// BEGIN docs/coro.md
// fetch(key): `co_await fetch(7)` in a Lazy or Task, `weft::await(fetch(7))` in a fiber.
class Fetch {
 public:
  explicit Fetch(int key) : key_(key) {}

  class Awaiter {
   public:
    Awaiter(int key, weft::Executor* executor) : key_(key), executor_(executor) {}
    Awaiter(const Awaiter&) = delete;
    Awaiter& operator=(const Awaiter&) = delete;
    // The library cannot take a request back, and its callback writes here: a coroutine
    // destroyed while it waits is a use-after-free on its way. Say so, and stop.
    ~Awaiter() {
      if (pending_) weft::abortDestroyedWhileResuming("Fetch", "the library's callback");
    }

    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> waiter) {
      pending_ = true;
      try {
        fetchValue(key_, [this, waiter](std::string value) {
          value_ = std::move(value);
          // Back to the awaiting coroutine's executor (inline when it has none).
          weft::resumeWaiterOn(executor_, waiter);
        });
      } catch (...) {
        pending_ = false;  // nothing was asked: the co_await throws
        throw;
      }
    }
    std::string await_resume() {
      pending_ = false;
      return std::move(value_);
    }

   private:
    int key_;
    weft::Executor* executor_;
    bool pending_ = false;
    std::string value_;
  };

  // weft calls this with the awaiting coroutine's executor (null when it has none), in a
  // Lazy or Task and in a fiber alike.
  Awaiter coAwait(weft::Executor* executor) const { return Awaiter(key_, executor); }

 private:
  int key_;
};
// END docs/coro.md

}  // namespace

namespace weft {
namespace {

TEST(AwaitableSupportTest, CallbackAwaitableResumesOnTheAwaitingExecutor) {
  ThreadPool pool(2);
  auto body = [&]() -> Lazy<std::string> {
    std::string a = co_await Fetch(1);
    EXPECT_TRUE(pool.currentThreadInExecutor());  // not the library's thread
    std::string b = co_await Fetch(2);
    EXPECT_TRUE(pool.currentThreadInExecutor());
    co_return a + ", " + b;
  };
  EXPECT_EQ(syncAwait(body(), &pool), "value 1, value 2");
}

TEST(AwaitableSupportTest, CallbackAwaitableResumesInlineWithoutAnExecutor) {
  auto body = []() -> Lazy<std::thread::id> {
    std::string value = co_await Fetch(3);
    EXPECT_EQ(value, "value 3");
    co_return std::this_thread::get_id();  // the callback resumed us where it ran
  };
  EXPECT_EQ(syncAwait(body()), library().threadId());
}

TEST(AwaitableSupportTest, CallbackAwaitableWorksInAFiber) {
  ThreadPool pool(2);
  auto future = spawnFiber(&pool, [&] {
    std::string value = await(Fetch(4));
    EXPECT_TRUE(pool.currentThreadInExecutor());
    return value;
  });
  EXPECT_EQ(syncAwait(std::move(future)), "value 4");
}

// A foreign awaiter that knows nothing of executors: resumes its waiter on the library's
// thread.
struct ForeignAwaiter {
  int result = 0;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> waiter) {
    library().post([this, waiter] {
      result = 42;
      waiter.resume();
    });
  }
  int await_resume() const noexcept { return result; }
};

TEST(AwaitableSupportTest, ViaAwaiterBringsAForeignAwaiterToTheExecutor) {
  ThreadPool pool(1);
  auto body = [&]() -> Lazy<int> {  // no executor of its own (syncAwait without one)
    int value = co_await ViaAwaiter<ForeignAwaiter>(ForeignAwaiter{}, &pool);
    EXPECT_TRUE(pool.currentThreadInExecutor());
    co_return value;
  };
  EXPECT_EQ(syncAwait(body()), 42);
}

TEST(AwaitableSupportTest, ViaAwaiterWithoutAnExecutorPassesThrough) {
  auto body = []() -> Lazy<std::thread::id> {
    EXPECT_EQ(co_await ViaAwaiter<ForeignAwaiter>(ForeignAwaiter{}, nullptr), 42);
    co_return std::this_thread::get_id();
  };
  EXPECT_EQ(syncAwait(body()), library().threadId());
}

TEST(AwaitableSupportTest, GetAwaiterFindsOperatorCoAwait) {
  struct Awaitable {
    ForeignAwaiter operator co_await() const { return ForeignAwaiter{7}; }
  };
  static_assert(std::is_same_v<AwaiterOf<Awaitable>, ForeignAwaiter>);
  static_assert(std::is_same_v<AwaiterOf<ForeignAwaiter&>, ForeignAwaiter&>);
  EXPECT_EQ(getAwaiter(Awaitable{}).await_resume(), 7);
}

TEST(AwaitableSupportTest, ResumeWaiterOnRunsOnTheExecutor) {
  ThreadPool pool(1);
  auto body = [&]() -> Lazy<bool> {
    struct Hop {
      Executor* target;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> waiter) { resumeWaiterOn(target, waiter); }
      void await_resume() const noexcept {}
    };
    co_await Hop{&pool};  // a bare Lazy: nothing else brings it to the pool
    co_return pool.currentThreadInExecutor();
  };
  EXPECT_TRUE(syncAwait(body()));
}

}  // namespace
}  // namespace weft
