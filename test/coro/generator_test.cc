#include "weft/coro/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <ranges>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "test/support/counted.h"

namespace weft {
namespace {

using test::Counted;

Generator<int> iota(int n) {
  for (int i = 0; i < n; ++i) co_yield i;
}

static_assert(std::ranges::input_range<Generator<int>>);
static_assert(std::same_as<std::ranges::range_reference_t<Generator<int>>, int&>);
static_assert(std::same_as<std::ranges::range_reference_t<Generator<const int&>>, const int&>);

TEST(GeneratorTest, DoesNotStartUntilIterated) {
  bool started = false;
  auto gen = [](bool* started) -> Generator<int> {
    *started = true;
    co_yield 1;
  }(&started);
  EXPECT_FALSE(started);
  auto it = gen.begin();
  EXPECT_TRUE(started);
  EXPECT_EQ(*it, 1);
}

TEST(GeneratorTest, YieldsTheSequenceInOrder) {
  std::vector<int> got;
  for (int i : iota(5)) got.push_back(i);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(GeneratorTest, RunsTheBodyOneElementAtATime) {
  std::vector<std::string> log;
  auto gen = [](std::vector<std::string>* log) -> Generator<int> {
    log->push_back("produce 1");
    co_yield 1;
    log->push_back("produce 2");
    co_yield 2;
    log->push_back("end");
  }(&log);
  for (int i : gen) log.push_back("consume " + std::to_string(i));
  EXPECT_EQ(log, (std::vector<std::string>{"produce 1", "consume 1", "produce 2", "consume 2",
                                           "end"}));
}

TEST(GeneratorTest, AnEmptyBodyIsAnEmptyRange) {
  auto gen = []() -> Generator<int> { co_return; }();
  EXPECT_TRUE(gen.begin() == gen.end());
  Generator<int> empty;
  EXPECT_TRUE(empty.begin() == empty.end());
}

TEST(GeneratorTest, YieldsReferencesToTheYieldedObjectsWithoutCopying) {
  Counted::reset();
  {
    auto gen = []() -> Generator<Counted> {
      Counted local;
      co_yield local;      // an lvalue: referenced, not copied
      co_yield Counted();  // a temporary: alive until the generator resumes
    }();
    int elements = 0;
    for (Counted& c : gen) {
      (void)c;
      ++elements;
    }
    EXPECT_EQ(elements, 2);
    EXPECT_EQ(Counted::constructions.load(), 2) << "no copy or move of a yielded value";
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(GeneratorTest, AReferenceGeneratorLetsTheConsumerWriteThroughIt) {
  int value = 0;
  auto gen = [](int* seen) -> Generator<int&> {
    int x = 1;
    co_yield x;
    *seen = x;  // what the consumer wrote
  }(&value);
  for (int& x : gen) x = 42;
  EXPECT_EQ(value, 42);
}

TEST(GeneratorTest, TheConsumerMayMoveFromAYieldedValue) {
  auto gen = []() -> Generator<std::unique_ptr<int>> {
    co_yield std::make_unique<int>(7);
  }();
  auto it = gen.begin();
  std::unique_ptr<int> taken = std::move(*it);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 7);
}

TEST(GeneratorTest, CollectsConvertedValues) {
  std::vector<std::string> got;
  for (std::string& s : []() -> Generator<std::string> {
         co_yield "abc";
         co_yield std::string(3, 'x');
       }()) {
    got.push_back(s);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"abc", "xxx"}));
}

TEST(GeneratorTest, AnExceptionReachesTheConsumerAndEndsTheRange) {
  auto gen = []() -> Generator<int> {
    co_yield 1;
    throw std::runtime_error("boom");
  }();
  auto it = gen.begin();
  EXPECT_EQ(*it, 1);
  EXPECT_THROW(++it, std::runtime_error);
  EXPECT_TRUE(it == gen.end());
}

TEST(GeneratorTest, AnExceptionBeforeTheFirstYieldComesFromBegin) {
  auto gen = []() -> Generator<int> {
    throw std::logic_error("early");
    co_return;
  }();
  EXPECT_THROW(gen.begin(), std::logic_error);
}

TEST(GeneratorTest, StoppingEarlyDestroysTheBodysLocals) {
  Counted::reset();
  {
    auto gen = []() -> Generator<int> {
      Counted local;
      for (int i = 0;; ++i) co_yield i;
    }();
    for (int i : gen) {
      if (i == 3) break;
    }
    EXPECT_EQ(Counted::alive(), 1) << "the suspended body still owns its local";
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(GeneratorTest, AnUnstartedGeneratorFreesItsArguments) {
  Counted::reset();
  {
    auto gen = [](Counted) -> Generator<int> { co_yield 1; }(Counted());
    EXPECT_EQ(Counted::alive(), 1);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(GeneratorTest, MovingTransfersTheSequence) {
  Generator<int> a = iota(3);
  Generator<int> b = std::move(a);
  EXPECT_TRUE(a.begin() == a.end());  // NOLINT(bugprone-use-after-move): empty after move
  std::vector<int> got;
  for (int i : b) got.push_back(i);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2}));
  b = iota(1);
  int count = 0;
  for (int i : b) count += i + 1;
  EXPECT_EQ(count, 1);
}

TEST(GeneratorTest, AMillionElementsUseConstantStack) {
  long sum = 0;
  for (int i : iota(1'000'000)) sum += i;
  EXPECT_EQ(sum, 1'000'000L * 999'999 / 2);
}

TEST(GeneratorTest, WorksWithRangeAlgorithms) {
  auto gen = iota(10);
  auto it = std::ranges::find(gen, 6);
  ASSERT_FALSE(it == gen.end());
  EXPECT_EQ(*it, 6);
}

TEST(GeneratorDeathTest, BeginTwiceAborts) {
  EXPECT_DEATH(
      {
        auto gen = iota(3);
        (void)gen.begin();
        (void)gen.begin();
      },
      "begin\\(\\) called twice");
}

TEST(GeneratorDeathTest, IncrementingAtEndAborts) {
  EXPECT_DEATH(
      {
        auto gen = iota(1);
        auto it = gen.begin();
        ++it;  // now at end()
        if (it == gen.end()) ++it;
      },
      "weft: Generator: \\+\\+ on an iterator at end\\(\\)");
}

TEST(GeneratorDeathTest, IncrementingAnEmptyRangesIteratorAborts) {
  EXPECT_DEATH(
      {
        Generator<int> empty;
        auto it = empty.begin();
        if (it == empty.end()) ++it;
      },
      "weft: Generator: \\+\\+ on an iterator at end\\(\\)");
}

TEST(GeneratorDeathTest, DereferencingAtEndAborts) {
  EXPECT_DEATH(
      {
        auto gen = iota(1);
        auto it = gen.begin();
        ++it;
        if (it == gen.end()) std::printf("%d\n", *it);
      },
      "weft: Generator: dereferencing an iterator at end\\(\\)");
}

}  // namespace
}  // namespace weft
