#include "weft/testing/for_each_seed.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "weft/testing/failure_hooks.h"

namespace weft::testing::detail {

SeedRange seedRange(std::uint64_t count) {
  const char* text = std::getenv("WEFT_TEST_SEED");
  if (text == nullptr || *text == '\0') return {0, count};
  char* end = nullptr;
  errno = 0;
  const unsigned long long seed = std::strtoull(text, &end, 10);
  if (*text < '0' || *text > '9' || *end != '\0' || errno == ERANGE) {
    throw std::invalid_argument(std::string("weft::testing: WEFT_TEST_SEED='") + text +
                                "' is not a seed (a decimal number)");
  }
  std::fprintf(stderr, "weft::testing: WEFT_TEST_SEED=%llu: forEachSeed runs that seed only\n",
               seed);
  return {seed, seed + 1};  // wraps to 0 for the largest seed: the loop stops there too
}

bool testFailed() {
  const FailureHooks hooks = failureHooks();
  return hooks.failed != nullptr && hooks.failed();
}

void reportSeedFailure(std::uint64_t seed, std::uint64_t count, const std::exception_ptr& failure) {
  std::string cause = "the test recorded a failure";
  if (failure != nullptr) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      cause = std::string("it threw: ") + e.what();
    } catch (...) {
      cause = "it threw an exception that is not a std::exception";
    }
  }
  char head[160];
  std::snprintf(head, sizeof(head),
                "weft::testing: forEachSeed: seed %" PRIu64 " of 0..%" PRIu64
                " failed; replay it alone with WEFT_TEST_SEED=%" PRIu64 ": ",
                seed, count == 0 ? 0 : count - 1, seed);
  reportFailure(head + cause);
}

}  // namespace weft::testing::detail
