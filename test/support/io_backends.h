#pragma once

#include <gtest/gtest.h>

#include <string>

#include "weft/executors/io_loop.h"

namespace weft::test {

// For suites that run once per I/O backend:
//   INSTANTIATE_TEST_SUITE_P(Backends, MyTest, weft::test::kIoBackends, weft::test::ioBackendName);
// and WEFT_SKIP_UNAVAILABLE_BACKEND(GetParam()) first in each test: io_uring is skipped
// where the kernel (or qemu-user, or a build without liburing) does not offer it.
inline const auto kIoBackends = ::testing::Values(IoBackendChoice::kIoUring, IoBackendChoice::kEpoll);

inline std::string ioBackendName(const ::testing::TestParamInfo<IoBackendChoice>& info) {
  return info.param == IoBackendChoice::kEpoll ? "epoll" : "io_uring";
}

inline bool backendAvailable(IoBackendChoice choice) {
  return choice != IoBackendChoice::kIoUring || IoLoop::available(IoBackend::kIoUring);
}

}  // namespace weft::test

#define WEFT_SKIP_UNAVAILABLE_BACKEND(choice)                                        \
  do {                                                                               \
    if (!::weft::test::backendAvailable(choice)) GTEST_SKIP() << "no io_uring here"; \
  } while (0)
