#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>

namespace weft::test {

// A test suite run once on ThreadPool(1) and once on ThreadPool(2) (GetParam() is the
// thread count). The two take different paths: on ThreadPool(1)'s own thread a fiber
// acts on its park before it switches out ("Acting first", docs/stackful.md); on two
// threads the park is acted on after the switch, and wake-ups race with it.
//
// Example:
//   class MutexFiberTest : public weft::test::PoolThreadsTest {};
//   TEST_P(MutexFiberTest, Something) { weft::ThreadPool pool(GetParam()); ... }
//   INSTANTIATE_TEST_SUITE_P(Threads, MutexFiberTest, weft::test::oneAndTwoPoolThreads(),
//                            weft::test::poolThreadsName);
class PoolThreadsTest : public ::testing::TestWithParam<std::size_t> {};

inline auto oneAndTwoPoolThreads() { return ::testing::Values(std::size_t{1}, std::size_t{2}); }

// "Threads1", "Threads2": the instantiation's names in the test list.
inline std::string poolThreadsName(const ::testing::TestParamInfo<std::size_t>& info) {
  return "Threads" + std::to_string(info.param);
}

}  // namespace weft::test
