#include "weft/coro/task_prometheus_text.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "weft/executors/prometheus_writer.h"

namespace weft {

namespace {

using Writer = PrometheusWriter;

enum class Unit { kCount, kNanos };

// One metric: its HELP and TYPE, and the TaskMetrics field of its samples.
struct Metric {
  const char* name;
  const char* type;
  const char* help;
  Unit unit;
  std::uint64_t TaskMetrics::*field;
};

using TM = TaskMetrics;

// The exposition's metrics, in the order it writes them.
constexpr Metric kMetrics[] = {
    {"weft_task_instrumented_total", "counter",
     "Tasks started under the monitor (Lazys it instrumented).", Unit::kCount,
     &TM::instrumentedCount},
    {"weft_task_dropped_total", "counter",
     "Of those, tasks that are gone (finished, or destroyed before they finished).",
     Unit::kCount, &TM::droppedCount},
    {"weft_task_first_polls_total", "counter", "Tasks that have started running.", Unit::kCount,
     &TM::firstPollCount},
    {"weft_task_first_poll_delay_seconds_total", "counter",
     "Time from instrumentation to the first run, summed over tasks.", Unit::kNanos,
     &TM::totalFirstPollDelayNanos},
    {"weft_task_first_poll_delay_max_seconds", "gauge",
     "The longest time a task waited for its first run.", Unit::kNanos,
     &TM::maxFirstPollDelayNanos},
    {"weft_task_polls_total", "counter",
     "Polls: runs of a task from its start or a resumption to its next wait or its end.",
     Unit::kCount, &TM::totalPollCount},
    {"weft_task_poll_duration_seconds_total", "counter", "Time tasks spent in polls (running).",
     Unit::kNanos, &TM::totalPollDurationNanos},
    {"weft_task_slow_polls_total", "counter",
     "Polls that took the slow-poll threshold or longer.", Unit::kCount,
     &TM::totalSlowPollCount},
    {"weft_task_slow_poll_duration_seconds_total", "counter", "Time spent in slow polls.",
     Unit::kNanos, &TM::totalSlowPollDurationNanos},
    {"weft_task_slow_poll_threshold_seconds", "gauge", "The duration from which a poll is slow.",
     Unit::kNanos, &TM::slowPollThresholdNanos},
    {"weft_task_scheduled_total", "counter",
     "Times a task waited to run after being handed to an executor (its start).", Unit::kCount,
     &TM::totalScheduledCount},
    {"weft_task_scheduled_duration_seconds_total", "counter",
     "Time tasks waited to run after being handed to an executor.", Unit::kNanos,
     &TM::totalScheduledDurationNanos},
    {"weft_task_idled_total", "counter",
     "Times a task was idle between two polls (waiting on something, then for a thread).",
     Unit::kCount, &TM::totalIdledCount},
    {"weft_task_idle_duration_seconds_total", "counter", "Time tasks were idle between polls.",
     Unit::kNanos, &TM::totalIdleDurationNanos},
};

}  // namespace

std::string toPrometheusText(const TaskMetrics& metrics, std::string_view monitorLabel) {
  return toPrometheusText(std::vector<TaskMetrics>{metrics},
                          std::vector<std::string>{std::string(monitorLabel)});
}

std::string toPrometheusText(const std::vector<TaskMetrics>& monitors,
                             const std::vector<std::string>& labels) {
  if (monitors.size() != labels.size())
    throw std::invalid_argument("weft: toPrometheusText: as many labels as monitors");
  Writer out;
  for (const Metric& metric : kMetrics) {
    out.header(metric.name, metric.type, metric.help);
    for (std::size_t i = 0; i < monitors.size(); ++i) {
      const std::uint64_t value = monitors[i].*metric.field;
      out.sample(metric.name, Writer::label("monitor", labels[i]),
                 metric.unit == Unit::kNanos ? Writer::seconds(value) : Writer::integer(value));
    }
  }
  return out.take();
}

}  // namespace weft
