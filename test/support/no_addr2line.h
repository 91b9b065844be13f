#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace weft::test {

// A GoogleTest environment that takes addr2line off PATH while the program's tests run
// (set before the first, restored after the last). The symbolizer runs addr2line once per
// task dump for file:line; without it a dump names functions only (from the symbol
// table), which is all a test that reads function names needs, and hundreds of dumps
// take a fraction of the time.
//
// Use: `const auto* const kNoAddr2line =
//           ::testing::AddGlobalTestEnvironment(new weft::test::NoAddr2line);`
// at namespace scope of the test file.
class NoAddr2line : public ::testing::Environment {
 public:
  void SetUp() override {
    if (const char* path = std::getenv("PATH")) saved_ = path;
    ::setenv("PATH", "/nonexistent", 1);
  }
  void TearDown() override {
    if (saved_) ::setenv("PATH", saved_->c_str(), 1);
  }

 private:
  std::optional<std::string> saved_;
};

}  // namespace weft::test
