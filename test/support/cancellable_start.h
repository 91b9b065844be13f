#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <utility>

#include "weft/coro/cancellation.h"
#include "weft/coro/lazy.h"
#include "weft/coro/try.h"
#include "weft/coro/with_cancellation.h"

namespace weft::test {

// How a Lazy started by startCancellable ended: whether it finished, and its exception.
struct CancellableOutcome {
  bool done = false;
  std::exception_ptr error;
};

// Starts `lazy` detached on the calling thread, bound to `token`; `outcome` (which must
// outlive the Lazy) records its end.
inline void startCancellable(const CancellationToken& token, Lazy<> lazy,
                             CancellableOutcome& outcome) {
  withCancellation(token, std::move(lazy)).start([&outcome](Try<void> result) {
    outcome.done = true;
    if (result.hasException()) outcome.error = result.exception();
  });
}

// Expects the Lazy behind `outcome` to be still waiting, and to end with
// OperationCancelled as soon as `source` (its token's source) requests cancellation.
inline void expectCancellationEndsTheWait(CancellationSource& source,
                                          const CancellableOutcome& outcome) {
  EXPECT_FALSE(outcome.done);
  source.requestCancellation();
  EXPECT_TRUE(outcome.done);
  ASSERT_TRUE(outcome.error);
  EXPECT_THROW(std::rethrow_exception(outcome.error), OperationCancelled);
}

}  // namespace weft::test
