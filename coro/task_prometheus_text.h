#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weft/coro/task_metrics.h"

namespace weft {

// The Prometheus text exposition format (version 0.0.4) of a TaskMonitor's metrics
// (coro/task_monitor.h), by the rules of executors/prometheus_text.h: every metric with
// its HELP and TYPE lines, counters named *_total, durations in seconds (exact to the
// nanosecond), every sample labelled monitor="<monitorLabel>" (escaped as the format
// requires). The names and their meaning are in docs/debugging.md ("In production"). No
// HTTP server: serve the text as you like, beside the pools' (append the two texts: their
// metric names differ).
// Errors: std::bad_alloc. Thread safety: a pure function of its arguments.
//
// Example:
//   std::string text = weft::toPrometheusText(monitor.cumulative(), "requests");
//   text += weft::toPrometheusText(pool.metrics(), "api");
std::string toPrometheusText(const TaskMetrics& metrics, std::string_view monitorLabel);

// The same for several monitors in one exposition (each metric's HELP and TYPE once, then
// the samples of every monitor): `monitors[i]` labelled `labels[i]`. Precondition: the two
// have the same size (else std::invalid_argument), and the labels differ.
std::string toPrometheusText(const std::vector<TaskMetrics>& monitors,
                             const std::vector<std::string>& labels);

}  // namespace weft
