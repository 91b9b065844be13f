#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <utility>

#include "weft/coro/lazy.h"
#include "weft/coro/try.h"

namespace weft::test {

// Starts `lazy` detached on the calling thread; `done` counts its completion, and the
// test fails if it finished with an exception.
inline void startDetached(Lazy<> lazy, std::atomic<int>& done) {
  std::move(lazy).start([&done](Try<void> result) {
    EXPECT_TRUE(result.hasValue());
    done.fetch_add(1);
  });
}

}  // namespace weft::test
