// The README's example: a Task on a thread pool awaiting two Lazys in parallel.
#include <cstdio>

#include <weft/coro/collect.h>
#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>

weft::Lazy<int> square(int x) { co_return x * x; }

weft::Lazy<int> sumOfSquares(int a, int b) {
  auto [x, y] = co_await weft::collectAllPara(square(a), square(b));  // runs in parallel
  co_return x.value() + y.value();  // value() rethrows a branch's exception
}

int main() {
  weft::ThreadPool pool(2);
  int result = weft::syncAwait(sumOfSquares(3, 4), &pool);  // a Task on the pool
  std::printf("3*3 + 4*4 = %d\n", result);
  return result == 25 ? 0 : 1;
}
