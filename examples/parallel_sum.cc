// Splits a sum over a vector into chunks that run in parallel on a ThreadPool, and
// shows how an exception in one chunk reaches the caller through its Try.
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <weft/coro/collect.h>
#include <weft/coro/lazy.h>
#include <weft/coro/sync_await.h>
#include <weft/executors/thread_pool.h>

weft::Lazy<long> sumChunk(const std::vector<int>& data, std::size_t begin, std::size_t end) {
  if (begin > end) throw std::invalid_argument("bad chunk");
  co_return std::accumulate(data.begin() + begin, data.begin() + end, 0L);
}

weft::Lazy<long> parallelSum(const std::vector<int>& data, std::size_t chunks) {
  std::vector<weft::Lazy<long>> parts;
  const std::size_t step = (data.size() + chunks - 1) / chunks;
  for (std::size_t begin = 0; begin < data.size(); begin += step) {
    parts.push_back(sumChunk(data, begin, std::min(begin + step, data.size())));
  }
  long total = 0;
  for (weft::Try<long>& part : co_await weft::collectAllPara(std::move(parts))) {
    total += part.value();  // rethrows if that chunk failed
  }
  co_return total;
}

int main() {
  std::vector<int> data(1'000'000);
  std::iota(data.begin(), data.end(), 1);
  weft::ThreadPool pool(2);
  const long total = weft::syncAwait(parallelSum(data, 16), &pool);
  std::printf("sum of 1..%zu = %ld\n", data.size(), total);
  return total == 500'000'500'000L ? 0 : 1;
}
