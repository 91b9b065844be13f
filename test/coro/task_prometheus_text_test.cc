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

#include "weft/coro/task_metrics.h"

namespace weft {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses `text` strictly: every line a "# HELP name text" or "# TYPE name type" comment,
// or `name{labels} value`; each metric's TYPE comes once, before its samples. Returns the
// samples in `samples`, with `types` filled in (metric name -> type). Adds a failure for
// any breach (a void function: ASSERT_* returns from it).
void parsePrometheus(const std::string& text, std::map<std::string, std::string>& types,
                     std::vector<Sample>& samples) {
  std::set<std::string> helped;
  std::size_t start = 0;
  EXPECT_TRUE(!text.empty() && text.back() == '\n');
  auto isNameChar = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
  };
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    SCOPED_TRACE(line);
    if (line.rfind("# ", 0) == 0) {
      std::size_t space = line.find(' ', 2);
      ASSERT_NE(space, std::string::npos);
      const std::string keyword = line.substr(2, space - 2);
      std::size_t nameEnd = line.find(' ', space + 1);
      ASSERT_NE(nameEnd, std::string::npos);
      const std::string name = line.substr(space + 1, nameEnd - space - 1);
      const std::string rest = line.substr(nameEnd + 1);
      if (keyword == "HELP") {
        EXPECT_TRUE(helped.insert(name).second) << "HELP twice for " << name;
        EXPECT_FALSE(rest.empty());
      } else if (keyword == "TYPE") {
        EXPECT_TRUE(types.emplace(name, rest).second) << "TYPE twice for " << name;
        EXPECT_TRUE(rest == "counter" || rest == "gauge" || rest == "histogram") << rest;
      } else {
        ADD_FAILURE() << "unknown comment";
      }
      continue;
    }
    Sample sample;
    std::size_t i = 0;
    while (i < line.size() && isNameChar(line[i], i == 0)) ++i;
    sample.name = line.substr(0, i);
    ASSERT_FALSE(sample.name.empty());
    ASSERT_LT(i, line.size());
    ASSERT_EQ(line[i], '{');
    ++i;
    while (line[i] != '}') {
      std::size_t nameStart = i;
      while (isNameChar(line[i], i == nameStart)) ++i;
      const std::string label = line.substr(nameStart, i - nameStart);
      ASSERT_FALSE(label.empty());
      ASSERT_EQ(line.substr(i, 2), "=\"");
      i += 2;
      std::string value;
      while (line[i] != '"') {
        if (line[i] == '\\') {
          ++i;
          ASSERT_TRUE(line[i] == '\\' || line[i] == '"' || line[i] == 'n');
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
        ++i;
        ASSERT_LT(i, line.size());
      }
      ++i;
      EXPECT_TRUE(sample.labels.emplace(label, value).second) << "label twice: " << label;
      if (line[i] == ',') ++i;
    }
    ++i;
    ASSERT_EQ(line[i], ' ');
    const std::string value = line.substr(i + 1);
    char* parsedEnd = nullptr;
    sample.value = std::strtod(value.c_str(), &parsedEnd);
    EXPECT_TRUE(!value.empty() && *parsedEnd == '\0') << "value " << value;
    // Its metric's TYPE came first (a histogram's series are named after it).
    std::string family = sample.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          types.count(family.substr(0, family.size() - s.size())) != 0 &&
          types[family.substr(0, family.size() - s.size())] == "histogram") {
        family = family.substr(0, family.size() - s.size());
      }
    }
    EXPECT_EQ(types.count(family), 1u) << "sample before its TYPE: " << sample.name;
    if (types[family] == "counter") {
      EXPECT_TRUE(family.size() > 6 && family.compare(family.size() - 6, 6, "_total") == 0);
      EXPECT_GE(sample.value, 0);
    }
    samples.push_back(std::move(sample));
  }
}

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
