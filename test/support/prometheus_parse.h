#pragma once

// The Prometheus text exposition format (0.0.4) parsed back strictly, for the tests of
// toPrometheusText (test/executors/prometheus_text_test.cc, test/coro/task_prometheus_text_test.cc).

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace weft::test {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses `text` strictly: every line a "# HELP name text" or "# TYPE name type" comment,
// or `name{labels} value` (or `name value`); each metric's TYPE comes once, before its samples. Returns the
// samples in `samples`, with `types` filled in (metric name -> type). Adds a failure for
// any breach (a void function: ASSERT_* returns from it).
inline void parsePrometheus(const std::string& text, std::map<std::string, std::string>& types,
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
    // `name value`, or `name{labels} value`.
    const bool labelled = line[i] == '{';
    ASSERT_TRUE(labelled || line[i] == ' ');
    ++i;
    while (labelled && line[i] != '}') {
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
    if (labelled) {
      ++i;
      ASSERT_EQ(line[i], ' ');
    } else {
      --i;  // back on the space
    }
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

}  // namespace weft::test
