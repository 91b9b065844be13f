#include "weft/executors/stall_report.h"

#include <cstdio>
#include <string>

namespace weft {

std::string StallReport::toString() const {
  std::string out = "weft: ThreadPool '" + pool + "': ";
  if (wholePool) {
    out += "every worker is stalled (";
    for (std::size_t i = 0; i < stalledWorkers.size(); ++i) {
      out += (i == 0 ? "" : ", ") + std::to_string(stalledWorkers[i]);
    }
    out +=
        "): the pool runs nothing else until one of them returns; the last to stall, "
        "worker " +
        std::to_string(worker) + ", for " + std::to_string(stalledFor.count()) + " ms\n";
  } else {
    out += "worker " + std::to_string(worker) + " (thread " + thread +
           ") has been running one item for " + std::to_string(stalledFor.count()) +
           " ms (a stall: reported once)\n";
  }
  if (!task.empty()) {
    out += "  " + task + ", async backtrace (root coroutine, then origin):\n";
    for (std::size_t i = 0; i < asyncFunctions.size(); ++i) {
      out += "    #" + std::to_string(i) + " " + asyncFunctions[i] + "\n";
    }
  } else if (!asyncBacktraceMissing.empty()) {
    out += "  (" + asyncBacktraceMissing + ")\n";
  }
  if (!nativeFrames.empty()) {
    out += "  native backtrace (innermost first):\n";
    for (std::size_t i = 0; i < nativeFrames.size(); ++i) {
      std::string name = i < nativeFunctions.size() ? nativeFunctions[i] : "??";
      if (name == "??") {
        char address[32];
        std::snprintf(address, sizeof address, "%p", nativeFrames[i]);
        name = address;
      }
      out += "    #" + std::to_string(i) + " " + name + "\n";
    }
  } else if (!nativeBacktraceMissing.empty()) {
    out += "  (" + nativeBacktraceMissing + ")\n";
  }
  return out;
}

}  // namespace weft
