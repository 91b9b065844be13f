#include "weft/coro/task_prometheus_text.h"

#include <cstdint>
#include <stdexcept>

#include "weft/executors/prometheus_writer.h"

namespace weft {

namespace {

using Writer = PrometheusWriter;

enum class Unit { kCount, kNanos };

// One metric: its HELP and TYPE, then a sample per monitor.
void metric(Writer& out, const std::vector<TaskMetrics>& monitors,
            const std::vector<std::string>& labels, const char* name, const char* type,
            const char* help, Unit unit, std::uint64_t TaskMetrics::*field) {
  out.header(name, type, help);
  for (std::size_t i = 0; i < monitors.size(); ++i) {
    const std::uint64_t value = monitors[i].*field;
    out.sample(name, Writer::label("monitor", labels[i]),
               unit == Unit::kNanos ? Writer::seconds(value) : Writer::integer(value));
  }
}

}  // namespace

std::string toPrometheusText(const TaskMetrics& metrics, std::string_view monitorLabel) {
  return toPrometheusText(std::vector<TaskMetrics>{metrics},
                          std::vector<std::string>{std::string(monitorLabel)});
}

std::string toPrometheusText(const std::vector<TaskMetrics>& monitors,
                             const std::vector<std::string>& labels) {
  if (monitors.size() != labels.size())
    throw std::invalid_argument("weft: toPrometheusText: as many labels as monitors");
  const auto& m = monitors;
  const auto& l = labels;
  using TM = TaskMetrics;
  Writer out;
  metric(out, m, l, "weft_task_instrumented_total", "counter",
         "Tasks started under the monitor (Lazys it instrumented).", Unit::kCount,
         &TM::instrumentedCount);
  metric(out, m, l, "weft_task_dropped_total", "counter",
         "Of those, tasks that are gone (finished, or destroyed before they finished).",
         Unit::kCount, &TM::droppedCount);
  metric(out, m, l, "weft_task_first_polls_total", "counter", "Tasks that have started running.",
         Unit::kCount, &TM::firstPollCount);
  metric(out, m, l, "weft_task_first_poll_delay_seconds_total", "counter",
         "Time from instrumentation to the first run, summed over tasks.", Unit::kNanos,
         &TM::totalFirstPollDelayNanos);
  metric(out, m, l, "weft_task_first_poll_delay_max_seconds", "gauge",
         "The longest time a task waited for its first run.", Unit::kNanos,
         &TM::maxFirstPollDelayNanos);
  metric(out, m, l, "weft_task_polls_total", "counter",
         "Polls: runs of a task from its start or a resumption to its next wait or its end.",
         Unit::kCount, &TM::totalPollCount);
  metric(out, m, l, "weft_task_poll_duration_seconds_total", "counter",
         "Time tasks spent in polls (running).", Unit::kNanos, &TM::totalPollDurationNanos);
  metric(out, m, l, "weft_task_slow_polls_total", "counter",
         "Polls that took the slow-poll threshold or longer.", Unit::kCount,
         &TM::totalSlowPollCount);
  metric(out, m, l, "weft_task_slow_poll_duration_seconds_total", "counter",
         "Time spent in slow polls.", Unit::kNanos, &TM::totalSlowPollDurationNanos);
  metric(out, m, l, "weft_task_slow_poll_threshold_seconds", "gauge",
         "The duration from which a poll is slow.", Unit::kNanos, &TM::slowPollThresholdNanos);
  metric(out, m, l, "weft_task_scheduled_total", "counter",
         "Times a task waited to run after being handed to an executor (its start).", Unit::kCount,
         &TM::totalScheduledCount);
  metric(out, m, l, "weft_task_scheduled_duration_seconds_total", "counter",
         "Time tasks waited to run after being handed to an executor.", Unit::kNanos,
         &TM::totalScheduledDurationNanos);
  metric(out, m, l, "weft_task_idled_total", "counter",
         "Times a task was idle between two polls (waiting on something, then for a thread).",
         Unit::kCount, &TM::totalIdledCount);
  metric(out, m, l, "weft_task_idle_duration_seconds_total", "counter",
         "Time tasks were idle between polls.", Unit::kNanos, &TM::totalIdleDurationNanos);
  return out.take();
}

}  // namespace weft
