// toPrometheusText (executors/prometheus_text.h), parsed back strictly: every line a
// comment or `name{labels} value`, each metric's TYPE once and before its samples,
// counters named *_total, histogram buckets cumulative and ending with le="+Inf" equal to
// _count, label values escaped and unescaped back.

#include "weft/executors/prometheus_text.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test/support/prometheus_parse.h"
#include "test/support/wait_until.h"
#include "test/support/watchdog.h"
#include "weft/executors/pool_metrics.h"
#include "weft/executors/thread_pool.h"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = TimerEntry::Clock;

constexpr auto kLimit = 120s;

// A timer that counts its fires in `fired`.
struct CountingTimer : TimerEntry {
  std::atomic<int>* fired = nullptr;
  CountingTimer() {
    complete = [](Job* self, bool run) {
      auto* timer = static_cast<CountingTimer*>(self);
      if (run && !timer->shutDown) timer->fired->fetch_add(1);
    };
  }
};

using test::parsePrometheus;
using test::Sample;

// Checks every histogram of `samples`: per label set, buckets in increasing `le`, counts
// cumulative, the last le="+Inf" equal to _count, and a _sum.
void checkHistograms(const std::vector<Sample>& samples,
                     const std::map<std::string, std::string>& types) {
  for (const auto& [family, type] : types) {
    if (type != "histogram") continue;
    std::map<std::string, std::vector<const Sample*>> buckets;  // labels without le -> buckets
    std::map<std::string, double> counts;
    std::map<std::string, int> sums;
    auto key = [](const Sample& s) {
      std::string k;
      for (const auto& [name, value] : s.labels) {
        if (name != "le") k += name + "=" + value + ";";
      }
      return k;
    };
    for (const Sample& s : samples) {
      if (s.name == family + "_bucket") buckets[key(s)].push_back(&s);
      if (s.name == family + "_count") counts[key(s)] = s.value;
      if (s.name == family + "_sum") ++sums[key(s)];
    }
    EXPECT_FALSE(buckets.empty()) << family;
    for (const auto& [labels, series] : buckets) {
      SCOPED_TRACE(family + " " + labels);
      ASSERT_FALSE(series.empty());
      double previousLe = -1;
      double previousCount = 0;
      for (std::size_t i = 0; i < series.size(); ++i) {
        const std::string& le = series[i]->labels.at("le");
        const double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
        EXPECT_GT(bound, previousLe) << le;
        EXPECT_GE(series[i]->value, previousCount) << "not cumulative at le=" << le;
        previousLe = bound;
        previousCount = series[i]->value;
      }
      EXPECT_EQ(series.back()->labels.at("le"), "+Inf");
      ASSERT_EQ(counts.count(labels), 1u);
      EXPECT_EQ(series.back()->value, counts[labels]);
      EXPECT_EQ(sums[labels], 1);
    }
  }
}

TEST(PrometheusTextTest, ParsesBack) {
  test::Watchdog watchdog(kLimit, "PrometheusTextTest.ParsesBack");
  ThreadPool pool(2, "prom");
  // Items, and timers fired on a worker (their lateness histogram).
  std::atomic<int> fired{0};
  std::vector<CountingTimer> timers(10);
  pool.schedule([&] {
    for (CountingTimer& t : timers) {
      t.fired = &fired;
      t.deadline = Clock::now();
      pool.scheduleTimer(t);
    }
  });
  test::waitUntil([&] { return fired.load() == 10; });
  const PoolMetrics m = pool.metrics();
  const std::string text = toPrometheusText(m, "api \"v2\"\\x\n");
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;
  parsePrometheus(text, types, samples);
  ASSERT_FALSE(HasFailure()) << text;
  checkHistograms(samples, types);
  EXPECT_EQ(types["weft_pool_items_run_total"], "counter");
  EXPECT_EQ(types["weft_pool_queue_depth"], "gauge");
  EXPECT_EQ(types["weft_pool_timer_lateness_seconds"], "histogram");
  // The label came back unescaped, and the values are the snapshot's.
  double itemsRun = 0;
  double latenessCount = 0;
  for (const Sample& s : samples) {
    EXPECT_EQ(s.labels.at("pool"), "api \"v2\"\\x\n");
    if (s.name == "weft_pool_items_run_total") itemsRun += s.value;
    if (s.name == "weft_pool_timer_lateness_seconds_count") latenessCount += s.value;
  }
  EXPECT_EQ(itemsRun, static_cast<double>(m.total.itemsRun));
  EXPECT_EQ(latenessCount, 10.0);
}

TEST(PrometheusTextTest, SeveralPoolsInOneExposition) {
  ThreadPool a(1, "a");
  ThreadPool b(2, "b");
  const std::string text = toPrometheusText(std::vector<PoolMetrics>{a.metrics(), b.metrics()},
                                            std::vector<std::string>{"a", "b"});
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;
  parsePrometheus(text, types, samples);
  ASSERT_FALSE(HasFailure()) << text;
  checkHistograms(samples, types);
  std::set<std::string> workersOf[2];
  for (const Sample& s : samples) {
    if (s.name != "weft_pool_items_run_total") continue;
    workersOf[s.labels.at("pool") == "a" ? 0 : 1].insert(s.labels.at("worker"));
  }
  EXPECT_EQ(workersOf[0], (std::set<std::string>{"0"}));
  EXPECT_EQ(workersOf[1], (std::set<std::string>{"0", "1"}));
  EXPECT_THROW(toPrometheusText(std::vector<PoolMetrics>{a.metrics()}, std::vector<std::string>{}),
               std::invalid_argument);
}

}  // namespace
}  // namespace weft
