#include "weft/executors/prometheus_writer.h"

#include <cinttypes>
#include <cstdio>
#include <utility>

namespace weft {

void PrometheusWriter::header(std::string_view name, std::string_view type,
                              std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PrometheusWriter::sample(std::string_view name, std::string_view labels,
                              std::string_view value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

std::string PrometheusWriter::take() noexcept { return std::exchange(out_, std::string()); }

std::string PrometheusWriter::label(std::string_view name, std::string_view value) {
  std::string out(name);
  out += "=\"";
  out += labelValue(value);
  out += '"';
  return out;
}

std::string PrometheusWriter::labelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusWriter::seconds(std::uint64_t nanos) {
  char text[48];
  std::snprintf(text, sizeof text, "%" PRIu64 ".%09" PRIu64, nanos / 1000000000,
                nanos % 1000000000);
  return text;
}

std::string PrometheusWriter::integer(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "%" PRIu64, value);
  return text;
}

}  // namespace weft
