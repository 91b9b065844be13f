// toPrometheusText of a TaskMonitor's metrics (coro/task_prometheus_text.h), parsed back
// strictly as test/executors/prometheus_text_test.cc does: every line a comment or
// `name{labels} value`, each metric's TYPE once and before its samples, counters named
// *_total, label values escaped and unescaped back; and every value as the struct has it.

#include "weft/coro/task_prometheus_text.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test/support/prometheus_parse.h"
#include "weft/coro/task_metrics.h"

namespace weft {
namespace {

using test::parsePrometheus;
using test::Sample;

TaskMetrics distinctValues() {
  TaskMetrics m;
  m.instrumentedCount = 11;
  m.droppedCount = 7;
  m.firstPollCount = 9;
  m.totalFirstPollDelayNanos = 1000000250;  // 1.000000250 s
  m.maxFirstPollDelayNanos = 500000000;
  m.totalPollCount = 40;
  m.totalPollDurationNanos = 2000;
  m.totalSlowPollCount = 3;
  m.totalSlowPollDurationNanos = 1500;
  m.slowPollThresholdNanos = 50000;
  m.totalScheduledCount = 9;
  m.totalScheduledDurationNanos = 1000000250;
  m.totalIdledCount = 31;
  m.totalIdleDurationNanos = 3000000000;
  return m;
}

TEST(TaskPrometheusTextTest, ParsesBackWithEveryValue) {
  const std::string label = "api \"v2\"\\\nx";
  const std::string text = toPrometheusText(distinctValues(), label);
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;
  parsePrometheus(text, types, samples);
  ASSERT_FALSE(HasFailure()) << text;

  std::map<std::string, double> values;
  for (const Sample& s : samples) {
    EXPECT_EQ(s.labels.size(), 1u) << s.name;
    EXPECT_EQ(s.labels.at("monitor"), label);
    EXPECT_TRUE(values.emplace(s.name, s.value).second) << "twice: " << s.name;
  }
  const std::map<std::string, double> expected = {
      {"weft_task_instrumented_total", 11},
      {"weft_task_dropped_total", 7},
      {"weft_task_first_polls_total", 9},
      {"weft_task_first_poll_delay_seconds_total", 1.00000025},
      {"weft_task_first_poll_delay_max_seconds", 0.5},
      {"weft_task_polls_total", 40},
      {"weft_task_poll_duration_seconds_total", 0.000002},
      {"weft_task_slow_polls_total", 3},
      {"weft_task_slow_poll_duration_seconds_total", 0.0000015},
      {"weft_task_slow_poll_threshold_seconds", 0.00005},
      {"weft_task_scheduled_total", 9},
      {"weft_task_scheduled_duration_seconds_total", 1.00000025},
      {"weft_task_idled_total", 31},
      {"weft_task_idle_duration_seconds_total", 3},
  };
  EXPECT_EQ(values.size(), expected.size());
  for (const auto& [name, value] : expected) {
    SCOPED_TRACE(name);
    ASSERT_EQ(values.count(name), 1u);
    EXPECT_DOUBLE_EQ(values[name], value);
  }
  EXPECT_EQ(types.at("weft_task_first_poll_delay_max_seconds"), "gauge");
  EXPECT_EQ(types.at("weft_task_polls_total"), "counter");
  // Exact to the nanosecond, as text.
  EXPECT_NE(
      text.find("weft_task_first_poll_delay_seconds_total{monitor=\"api \\\"v2\\\"\\\\\\nx\"} "
                "1.000000250\n"),
      std::string::npos)
      << text;
}

TEST(TaskPrometheusTextTest, SeveralMonitorsShareEachMetricsHeader) {
  TaskMetrics a = distinctValues();
  TaskMetrics b;
  b.totalPollCount = 5;
  const std::string text = toPrometheusText({a, b}, {"a", "b"});
  std::map<std::string, std::string> types;
  std::vector<Sample> samples;
  parsePrometheus(text, types, samples);
  ASSERT_FALSE(HasFailure()) << text;
  EXPECT_EQ(types.size(), 14u);
  EXPECT_EQ(samples.size(), 28u);
  int polls = 0;
  for (const Sample& s : samples) {
    if (s.name != "weft_task_polls_total") continue;
    ++polls;
    EXPECT_EQ(s.value, s.labels.at("monitor") == "a" ? 40 : 5);
  }
  EXPECT_EQ(polls, 2);
}

TEST(TaskPrometheusTextTest, RejectsMismatchedLabels) {
  EXPECT_THROW(
      toPrometheusText(std::vector<TaskMetrics>{TaskMetrics{}}, std::vector<std::string>{}),
      std::invalid_argument);
}

}  // namespace
}  // namespace weft
