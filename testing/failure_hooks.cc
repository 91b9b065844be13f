#include "weft/testing/failure_hooks.h"

#include <cstdio>

namespace weft::testing {

namespace {

constinit FailureHooks gHooks{};

}  // namespace

FailureHooks setFailureHooks(FailureHooks hooks) noexcept {
  const FailureHooks previous = gHooks;
  gHooks = hooks;
  return previous;
}

FailureHooks failureHooks() noexcept { return gHooks; }

void reportFailure(std::string_view message) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  if (gHooks.report != nullptr) gHooks.report(message);
}

}  // namespace weft::testing
