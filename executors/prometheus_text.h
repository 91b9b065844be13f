#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "weft/executors/pool_metrics.h"

namespace weft {

// The Prometheus text exposition format (version 0.0.4) of `metrics`: every metric with
// its HELP and TYPE lines, counters named *_total, gauges, and the timer lateness as a
// histogram (weft_pool_timer_lateness_seconds: cumulative _bucket{le="..."} series ending
// with le="+Inf", then _sum in seconds and _count). Every sample is labelled
// pool="<poolLabel>" (escaped as the format requires), and per worker worker="<index>";
// the timer thread's timer counters have worker="timer". The names and their meaning are
// in docs/debugging.md ("In production"). No HTTP server: serve the text as you like.
// Errors: std::bad_alloc. Thread safety: a pure function of its arguments.
//
// Example:
//   std::string text = weft::toPrometheusText(pool.metrics(), "api");
//   respond("text/plain; version=0.0.4", text);
std::string toPrometheusText(const PoolMetrics& metrics, std::string_view poolLabel);

// The same for several pools in one exposition (each metric's HELP and TYPE once, then
// the samples of every pool): `pools[i]` labelled `labels[i]`. Precondition: the two
// have the same size (else std::invalid_argument), and the labels differ.
std::string toPrometheusText(const std::vector<PoolMetrics>& pools,
                             const std::vector<std::string>& labels);

}  // namespace weft
