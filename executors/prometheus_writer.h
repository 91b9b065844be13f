#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace weft {

// PrometheusWriter: builds text in the Prometheus text exposition format (version 0.0.4),
// a metric at a time: its HELP and TYPE lines, then its samples. What weft's
// toPrometheusText functions (executors/prometheus_text.h, coro/task_prometheus_text.h)
// write with, and what a service may use to append metrics of its own to their text.
//
// Semantics: the writer appends exactly what it is given; the caller keeps the format's
// rules (a metric's TYPE once, before its samples; counters named *_total; metric and
// label names of [a-zA-Z_:][a-zA-Z0-9_:]*). labelValue() escapes a label's value as the
// format requires.
// Errors: std::bad_alloc. Thread safety: a single-owner value.
//
// Example:
//   weft::PrometheusWriter out;
//   out.header("app_requests_total", "counter", "Requests served.");
//   out.sample("app_requests_total", weft::PrometheusWriter::label("route", "/"), "42");
//   std::string text = weft::toPrometheusText(pool.metrics(), "api") + out.take();
class PrometheusWriter {
 public:
  // `# HELP name help` and `# TYPE name type` (type: counter, gauge, histogram...).
  void header(std::string_view name, std::string_view type, std::string_view help);
  // `name{labels} value`, or `name value` when `labels` is empty. `labels`: label pairs
  // as label() makes them, joined by commas.
  void sample(std::string_view name, std::string_view labels, std::string_view value);
  // The text so far; the writer is left empty.
  std::string take() noexcept;

  // `name="value"`, the value escaped (backslash, double quote and line feed).
  static std::string label(std::string_view name, std::string_view value);
  // `value` escaped as a label value.
  static std::string labelValue(std::string_view value);
  // `nanos` as seconds, exact to the nanosecond ("1.000000250").
  static std::string seconds(std::uint64_t nanos);
  // `value` in decimal.
  static std::string integer(std::uint64_t value);

 private:
  std::string out_;
};

}  // namespace weft
