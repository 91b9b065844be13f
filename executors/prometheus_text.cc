#include "weft/executors/prometheus_text.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "weft/executors/prometheus_writer.h"

namespace weft {

namespace {

using Writer = PrometheusWriter;

// A bucket's bound, 2^i microseconds, in seconds without trailing zeros ("0.000512").
std::string bucketBound(std::size_t i) {
  std::string text = Writer::seconds(LatenessHistogram::upperBoundMicros(i) * 1000);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

// Where a metric's samples come from.
enum class Source {
  kWorkers,                // `worker`, one sample per worker
  kPools,                  // `pool`, one sample per pool
  kWorkersAndTimerThread,  // `worker` per worker, then `pool` as worker="timer"
  kWorkersByOpcode,        // `byOpcode`, one sample per worker and IoOpcode (op="...")
  kLatenessHistogram,      // WorkerMetrics::timerLateness, a histogram per worker
};

// One metric of the exposition: its HELP and TYPE, and where its samples come from.
struct Metric {
  const char* name;
  const char* type;
  const char* help;
  Source source;
  std::uint64_t WorkerMetrics::*worker = nullptr;
  std::uint64_t PoolMetrics::*pool = nullptr;
  std::array<std::uint64_t, kIoOpcodeCount> WorkerMetrics::*byOpcode = nullptr;
};

using W = WorkerMetrics;
using P = PoolMetrics;

// The exposition's metrics, in the order it writes them.
constexpr Metric kMetrics[] = {
    {.name = "weft_pool_items_run_total",
     .type = "counter",
     .help = "Work items a worker ran (coroutine resumptions, callables, timer fire functions).",
     .source = Source::kWorkers,
     .worker = &W::itemsRun},
    {.name = "weft_pool_steals_total",
     .type = "counter",
     .help = "Successful steals from another worker's queue.",
     .source = Source::kWorkers,
     .worker = &W::steals},
    {.name = "weft_pool_stolen_items_total",
     .type = "counter",
     .help = "Items taken by those steals.",
     .source = Source::kWorkers,
     .worker = &W::stolenItems},
    {.name = "weft_pool_parks_total",
     .type = "counter",
     .help = "Times a worker ran out of work and went to sleep.",
     .source = Source::kWorkers,
     .worker = &W::parks},
    {.name = "weft_pool_wake_ups_total",
     .type = "counter",
     .help = "Sleeps of a worker ended by another thread handing it work.",
     .source = Source::kWorkers,
     .worker = &W::wakeUps},
    {.name = "weft_pool_queue_depth",
     .type = "gauge",
     .help = "Items in a worker's own run queue.",
     .source = Source::kWorkers,
     .worker = &W::queueDepth},
    {.name = "weft_pool_queue_high_water",
     .type = "gauge",
     .help = "The most items a worker's run queue has held.",
     .source = Source::kWorkers,
     .worker = &W::queueHighWater},
    {.name = "weft_pool_injection_queue_depth",
     .type = "gauge",
     .help = "Items scheduled from outside the pool that no worker has taken yet.",
     .source = Source::kPools,
     .pool = &P::injectionQueueDepth},
    {.name = "weft_pool_io_submitted_total",
     .type = "counter",
     .help = "I/O operations submitted to a worker's event loop.",
     .source = Source::kWorkersByOpcode,
     .byOpcode = &W::ioSubmitted},
    {.name = "weft_pool_io_completed_total",
     .type = "counter",
     .help = "I/O operations a worker's event loop completed (cancelled, timed out and "
             "withdrawn ones included).",
     .source = Source::kWorkersByOpcode,
     .byOpcode = &W::ioCompleted},
    {.name = "weft_pool_timers_armed_total",
     .type = "counter",
     .help = "Timers armed in a worker's heap, or on the pool's timer thread "
             "(worker=\"timer\").",
     .source = Source::kWorkersAndTimerThread,
     .worker = &W::timersArmed,
     .pool = &P::timerThreadArmed},
    {.name = "weft_pool_timers_fired_total",
     .type = "counter",
     .help = "Timers whose fire function a worker ran at or after their deadline.",
     .source = Source::kWorkers,
     .worker = &W::timersFired},
    {.name = "weft_pool_timers_shut_down_total",
     .type = "counter",
     .help = "Timers fired early because the pool shut down.",
     .source = Source::kWorkers,
     .worker = &W::timersShutDown},
    {.name = "weft_pool_timers_cancelled_total",
     .type = "counter",
     .help = "Timers cancelled before they fired, by where they were armed.",
     .source = Source::kWorkersAndTimerThread,
     .worker = &W::timersCancelled,
     .pool = &P::timerThreadCancelled},
    {.name = "weft_pool_timers_taken_from_busy_workers_total",
     .type = "counter",
     .help = "Worker timers the timer thread gave to other workers, their own being busy.",
     .source = Source::kPools,
     .pool = &P::timersTakenFromBusyWorkers},
    {.name = "weft_pool_timer_lateness_seconds",
     .type = "histogram",
     .help = "How late timers fired: from their deadline to when a worker took them to run.",
     .source = Source::kLatenessHistogram},
    {.name = "weft_pool_stalls_total",
     .type = "counter",
     .help = "Stall reports: a worker ran one item for longer than the pool's stallThreshold.",
     .source = Source::kPools,
     .pool = &P::stalls},
    {.name = "weft_pool_whole_pool_stalls_total",
     .type = "counter",
     .help = "Stall reports of the whole pool: every worker stalled at once.",
     .source = Source::kPools,
     .pool = &P::wholePoolStalls},
    {.name = "weft_pool_blocking_threads",
     .type = "gauge",
     .help = "Threads of the process's default blocking pool (weft::blocking).",
     .source = Source::kPools,
     .pool = &P::blockingThreads},
    {.name = "weft_pool_blocking_queued",
     .type = "gauge",
     .help = "Calls waiting for a thread of the process's default blocking pool.",
     .source = Source::kPools,
     .pool = &P::blockingQueued},
};

// Writes one exposition: per metric, its HELP and TYPE once, then the samples of every
// pool.
class Exposition {
 public:
  Exposition(const std::vector<PoolMetrics>& pools, const std::vector<std::string>& labels)
      : pools_(pools) {
    for (const std::string& label : labels) poolLabels_.push_back(Writer::label("pool", label));
  }

  std::string write() {
    for (const Metric& metric : kMetrics) {
      out_.header(metric.name, metric.type, metric.help);
      for (std::size_t p = 0; p < pools_.size(); ++p) samples(metric, p);
    }
    return out_.take();
  }

 private:
  // The samples of `metric` for pool `p`.
  void samples(const Metric& metric, std::size_t p) {
    const PoolMetrics& pool = pools_[p];
    switch (metric.source) {
      case Source::kPools:
        out_.sample(metric.name, poolLabels_[p], std::to_string(pool.*metric.pool));
        return;
      case Source::kWorkers:
      case Source::kWorkersAndTimerThread:
        for (std::size_t i = 0; i < pool.workers.size(); ++i) {
          out_.sample(metric.name, workerLabels(p, std::to_string(i)),
                      std::to_string(pool.workers[i].*metric.worker));
        }
        if (metric.source == Source::kWorkersAndTimerThread) {
          out_.sample(metric.name, workerLabels(p, "timer"), std::to_string(pool.*metric.pool));
        }
        return;
      case Source::kWorkersByOpcode:
        for (std::size_t i = 0; i < pool.workers.size(); ++i) {
          const std::string labels = workerLabels(p, std::to_string(i)) + ",op=\"";
          for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
            out_.sample(metric.name,
                        labels + std::string(ioOpcodeName(static_cast<IoOpcode>(op))) + "\"",
                        std::to_string((pool.workers[i].*metric.byOpcode)[op]));
          }
        }
        return;
      case Source::kLatenessHistogram:
        for (std::size_t i = 0; i < pool.workers.size(); ++i) {
          histogram(metric.name, workerLabels(p, std::to_string(i)),
                    pool.workers[i].timerLateness);
        }
        return;
    }
  }

  std::string workerLabels(std::size_t pool, const std::string& worker) const {
    return poolLabels_[pool] + ",worker=\"" + worker + "\"";
  }

  // One worker's histogram: cumulative _bucket series ending with le="+Inf", _sum, _count.
  void histogram(const char* name, const std::string& labels, const LatenessHistogram& h) {
    const std::string bucket = std::string(name) + "_bucket";
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b + 1 < LatenessHistogram::kBuckets; ++b) {
      cumulative += h.buckets[b];
      out_.sample(bucket.c_str(), labels + ",le=\"" + bucketBound(b) + "\"",
                  std::to_string(cumulative));
    }
    out_.sample(bucket.c_str(), labels + ",le=\"+Inf\"", std::to_string(h.count));
    out_.sample((std::string(name) + "_sum").c_str(), labels, Writer::seconds(h.sumNanos));
    out_.sample((std::string(name) + "_count").c_str(), labels, std::to_string(h.count));
  }

  const std::vector<PoolMetrics>& pools_;
  std::vector<std::string> poolLabels_;
  Writer out_;
};

}  // namespace

std::string toPrometheusText(const std::vector<PoolMetrics>& pools,
                             const std::vector<std::string>& labels) {
  if (pools.size() != labels.size()) {
    throw std::invalid_argument("weft: toPrometheusText: one label per pool is needed");
  }
  return Exposition(pools, labels).write();
}

std::string toPrometheusText(const PoolMetrics& metrics, std::string_view poolLabel) {
  // One copy of the snapshot: the exposition of a single pool is not a hot path.
  return toPrometheusText(std::vector<PoolMetrics>{metrics},
                          std::vector<std::string>{std::string(poolLabel)});
}

}  // namespace weft
