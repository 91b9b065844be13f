// PrometheusWriter (executors/prometheus_writer.h): what it writes, parsed back strictly.

#include "weft/executors/prometheus_writer.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "test/support/prometheus_parse.h"

namespace weft {
namespace {

TEST(PrometheusWriterTest, WritesHeadersAndSamplesWithAndWithoutLabels) {
  PrometheusWriter out;
  out.header("app_requests_total", "counter", "Requests served.");
  out.sample("app_requests_total",
             PrometheusWriter::label("route", "/a \"b\"\\\n") + "," +
                 PrometheusWriter::label("code", "200"),
             PrometheusWriter::integer(18446744073709551615ull));
  out.header("app_uptime_seconds", "gauge", "Seconds since start.");
  out.sample("app_uptime_seconds", "", PrometheusWriter::seconds(1000000250));
  const std::string text = out.take();
  EXPECT_EQ(text,
            "# HELP app_requests_total Requests served.\n"
            "# TYPE app_requests_total counter\n"
            "app_requests_total{route=\"/a \\\"b\\\"\\\\\\n\",code=\"200\"} 18446744073709551615\n"
            "# HELP app_uptime_seconds Seconds since start.\n"
            "# TYPE app_uptime_seconds gauge\n"
            "app_uptime_seconds 1.000000250\n");
  EXPECT_EQ(out.take(), "");  // take() left it empty

  std::map<std::string, std::string> types;
  std::vector<test::Sample> samples;
  test::parsePrometheus(text, types, samples);
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].labels.at("route"), "/a \"b\"\\\n");  // unescaped back
  EXPECT_EQ(samples[0].labels.at("code"), "200");
  EXPECT_TRUE(samples[1].labels.empty());
  EXPECT_DOUBLE_EQ(samples[1].value, 1.00000025);
}

}  // namespace
}  // namespace weft
