#include "weft/executors/prometheus_text.h"

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

// Writes one exposition: per metric, its HELP and TYPE once, then the samples of every
// pool.
class Exposition {
 public:
  Exposition(const std::vector<PoolMetrics>& pools, const std::vector<std::string>& labels)
      : pools_(pools) {
    for (const std::string& label : labels)
      poolLabels_.push_back(Writer::label("pool", label));
  }

  std::string write() {
    workerCounter(
        "weft_pool_items_run_total",
        "Work items a worker ran (coroutine resumptions, callables, timer fire functions).",
        [](const WorkerMetrics& w) { return w.itemsRun; });
    workerCounter("weft_pool_steals_total", "Successful steals from another worker's queue.",
                  [](const WorkerMetrics& w) { return w.steals; });
    workerCounter("weft_pool_stolen_items_total", "Items taken by those steals.",
                  [](const WorkerMetrics& w) { return w.stolenItems; });
    workerCounter("weft_pool_parks_total", "Times a worker ran out of work and went to sleep.",
                  [](const WorkerMetrics& w) { return w.parks; });
    workerCounter("weft_pool_wake_ups_total",
                  "Sleeps of a worker ended by another thread handing it work.",
                  [](const WorkerMetrics& w) { return w.wakeUps; });
    workerGauge("weft_pool_queue_depth", "Items in a worker's own run queue.",
                [](const WorkerMetrics& w) { return w.queueDepth; });
    workerGauge("weft_pool_queue_high_water", "The most items a worker's run queue has held.",
                [](const WorkerMetrics& w) { return w.queueHighWater; });
    poolGauge("weft_pool_injection_queue_depth",
              "Items scheduled from outside the pool that no worker has taken yet.",
              [](const PoolMetrics& p) { return p.injectionQueueDepth; });
    ioCounter("weft_pool_io_submitted_total", "I/O operations submitted to a worker's event loop.",
              &WorkerMetrics::ioSubmitted);
    ioCounter("weft_pool_io_completed_total",
              "I/O operations a worker's event loop completed (cancelled, timed out and "
              "withdrawn ones included).",
              &WorkerMetrics::ioCompleted);
    timerCounter(
        "weft_pool_timers_armed_total",
        "Timers armed in a worker's heap, or on the pool's timer thread (worker=\"timer\").",
        [](const WorkerMetrics& w) { return w.timersArmed; },
        [](const PoolMetrics& p) { return p.timerThreadArmed; });
    workerCounter("weft_pool_timers_fired_total",
                  "Timers whose fire function a worker ran at or after their deadline.",
                  [](const WorkerMetrics& w) { return w.timersFired; });
    workerCounter("weft_pool_timers_shut_down_total",
                  "Timers fired early because the pool shut down.",
                  [](const WorkerMetrics& w) { return w.timersShutDown; });
    timerCounter(
        "weft_pool_timers_cancelled_total",
        "Timers cancelled before they fired, by where they were armed.",
        [](const WorkerMetrics& w) { return w.timersCancelled; },
        [](const PoolMetrics& p) { return p.timerThreadCancelled; });
    poolCounter("weft_pool_timers_taken_from_busy_workers_total",
                "Worker timers the timer thread gave to other workers, their own being busy.",
                [](const PoolMetrics& p) { return p.timersTakenFromBusyWorkers; });
    latenessHistogram();
    poolCounter("weft_pool_stalls_total",
                "Stall reports: a worker ran one item for longer than the pool's stallThreshold.",
                [](const PoolMetrics& p) { return p.stalls; });
    poolCounter("weft_pool_whole_pool_stalls_total",
                "Stall reports of the whole pool: every worker stalled at once.",
                [](const PoolMetrics& p) { return p.wholePoolStalls; });
    poolGauge("weft_pool_blocking_threads",
              "Threads of the process's default blocking pool (weft::blocking).",
              [](const PoolMetrics& p) { return p.blockingThreads; });
    poolGauge("weft_pool_blocking_queued",
              "Calls waiting for a thread of the process's default blocking pool.",
              [](const PoolMetrics& p) { return p.blockingQueued; });
    return out_.take();
  }

 private:
  void header(const char* name, const char* type, const char* help) {
    out_.header(name, type, help);
  }
  void sample(const char* name, const std::string& labels, const std::string& value) {
    out_.sample(name, labels, value);
  }
  std::string workerLabels(std::size_t pool, const std::string& worker) const {
    return poolLabels_[pool] + ",worker=\"" + worker + "\"";
  }

  template <class Get>
  void perWorker(const char* name, Get get) {
    for (std::size_t p = 0; p < pools_.size(); ++p) {
      for (std::size_t i = 0; i < pools_[p].workers.size(); ++i) {
        sample(name, workerLabels(p, std::to_string(i)), std::to_string(get(pools_[p].workers[i])));
      }
    }
  }
  template <class Get>
  void workerCounter(const char* name, const char* help, Get get) {
    header(name, "counter", help);
    perWorker(name, get);
  }
  template <class Get>
  void workerGauge(const char* name, const char* help, Get get) {
    header(name, "gauge", help);
    perWorker(name, get);
  }
  template <class Get>
  void poolMetric(const char* name, const char* type, const char* help, Get get) {
    header(name, type, help);
    for (std::size_t p = 0; p < pools_.size(); ++p) {
      sample(name, poolLabels_[p], std::to_string(get(pools_[p])));
    }
  }
  template <class Get>
  void poolGauge(const char* name, const char* help, Get get) {
    poolMetric(name, "gauge", help, get);
  }
  template <class Get>
  void poolCounter(const char* name, const char* help, Get get) {
    poolMetric(name, "counter", help, get);
  }
  template <class GetWorker, class GetPool>
  void timerCounter(const char* name, const char* help, GetWorker worker, GetPool pool) {
    header(name, "counter", help);
    for (std::size_t p = 0; p < pools_.size(); ++p) {
      for (std::size_t i = 0; i < pools_[p].workers.size(); ++i) {
        sample(name, workerLabels(p, std::to_string(i)),
               std::to_string(worker(pools_[p].workers[i])));
      }
      sample(name, workerLabels(p, "timer"), std::to_string(pool(pools_[p])));
    }
  }
  void ioCounter(const char* name, const char* help,
                 std::array<std::uint64_t, kIoOpcodeCount> WorkerMetrics::*field) {
    header(name, "counter", help);
    for (std::size_t p = 0; p < pools_.size(); ++p) {
      for (std::size_t i = 0; i < pools_[p].workers.size(); ++i) {
        const std::string labels = workerLabels(p, std::to_string(i)) + ",op=\"";
        for (std::size_t op = 0; op < kIoOpcodeCount; ++op) {
          sample(name, labels + std::string(ioOpcodeName(static_cast<IoOpcode>(op))) + "\"",
                 std::to_string((pools_[p].workers[i].*field)[op]));
        }
      }
    }
  }
  void latenessHistogram() {
    static constexpr const char* kName = "weft_pool_timer_lateness_seconds";
    header(kName, "histogram",
           "How late timers fired: from their deadline to when a worker took them to run.");
    const std::string bucket = std::string(kName) + "_bucket";
    const std::string sum = std::string(kName) + "_sum";
    const std::string count = std::string(kName) + "_count";
    for (std::size_t p = 0; p < pools_.size(); ++p) {
      for (std::size_t i = 0; i < pools_[p].workers.size(); ++i) {
        const LatenessHistogram& h = pools_[p].workers[i].timerLateness;
        const std::string labels = workerLabels(p, std::to_string(i));
        std::uint64_t cumulative = 0;
        for (std::size_t b = 0; b + 1 < LatenessHistogram::kBuckets; ++b) {
          cumulative += h.buckets[b];
          sample(bucket.c_str(), labels + ",le=\"" + bucketBound(b) + "\"",
                 std::to_string(cumulative));
        }
        sample(bucket.c_str(), labels + ",le=\"+Inf\"", std::to_string(h.count));
        sample(sum.c_str(), labels, Writer::seconds(h.sumNanos));
        sample(count.c_str(), labels, std::to_string(h.count));
      }
    }
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
