// The smallest program using weft, built against weft the three ways a user can
// (test/consumer/run.sh). Prints "consumer: ok" and exits 0 when weft works.
#include <cstdio>

#include "coro/lazy.h"
#include "coro/sync_await.h"
#include "executors/thread_pool.h"

namespace {

weft::Lazy<int> answer() { co_return 21; }

weft::Lazy<int> twice() { co_return 2 * co_await answer(); }

}  // namespace

int main() {
  weft::ThreadPool pool(2);
  int inline_result = weft::syncAwait(twice());
  int pool_result = weft::syncAwait(twice(), &pool);
  if (inline_result != 42 || pool_result != 42) {
    std::printf("consumer: wrong results %d %d\n", inline_result, pool_result);
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
