#include "weft/testing/faults.h"

#include <array>
#include <cinttypes>
#include <cstdio>

#include "weft/testing/simulation.h"

namespace weft::testing {

namespace {

Faults::Path randomPath(Simulation& sim) noexcept {
  static constexpr std::array<std::uint64_t, 4> kBandwidths = {10'000, 100'000, 1'000'000,
                                                               10'000'000};
  Faults::Path path;
  path.latency = std::chrono::milliseconds(sim.randomBelow(101));
  if (sim.randomBelow(3) != 0) path.bytesPerSecond = kBandwidths[sim.randomBelow(4)];
  if (sim.randomBelow(2) == 0) {
    path.randomChunks = true;
    path.maxChunk = std::size_t{1} << sim.randomBelow(13);
  }
  return path;
}

std::string describe(const Faults::Path& path) {
  std::string out;
  const auto add = [&out](const char* format, auto... values) {
    char text[96];
    std::snprintf(text, sizeof(text), format, values...);
    if (!out.empty()) out += ", ";
    out += text;
  };
  const auto seconds = [](Faults::Duration d) { return std::chrono::duration<double>(d).count(); };
  if (path.latency != Faults::Duration::zero()) add("latency %.9g s", seconds(path.latency));
  if (path.bytesPerSecond != 0) add("%" PRIu64 " B/s", path.bytesPerSecond);
  if (path.randomChunks) {
    add("pieces of 1..%zu B", path.maxChunk);
  } else if (path.maxChunk != Faults::Path{}.maxChunk) {
    add("pieces of %zu B", path.maxChunk);
  }
  if (path.window != Faults::Path{}.window) add("window %zu B", path.window);
  if (path.resetAfter) add("reset after %" PRIu64 " B", *path.resetAfter);
  if (path.shutdownAfter) add("end after %" PRIu64 " B", *path.shutdownAfter);
  if (path.stallAt) {
    if (path.stallFor == Faults::Duration::max()) {
      add("stalls at %.9g s", seconds(*path.stallAt));
    } else {
      add("stalls at %.9g s for %.9g s", seconds(*path.stallAt), seconds(path.stallFor));
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Faults Faults::random(Simulation& sim) noexcept {
  Faults faults;
  faults.toServer = randomPath(sim);
  faults.toClient = randomPath(sim);
  return faults;
}

std::string Faults::toString() const {
  std::string out = "to server: " + describe(toServer) + "; to client: " + describe(toClient);
  if (resetAt) {
    char text[64];
    std::snprintf(text, sizeof(text), "; reset at %.9g s",
                  std::chrono::duration<double>(*resetAt).count());
    out += text;
  }
  return out;
}

}  // namespace weft::testing
