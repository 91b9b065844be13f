#pragma once

#include <coroutine>
#include <exception>

namespace weft::test {

// The return type of a bare eager coroutine that destroys itself at its end: it starts
// at once and runs until its first suspension, with no executor and no result. Enough to
// drive a coroutine handle by hand in tests of executors and waiter queues.
struct EagerCoroutine {
  struct promise_type {
    EagerCoroutine get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

}  // namespace weft::test
