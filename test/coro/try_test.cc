#include "weft/coro/try.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "test/support/counted.h"

namespace weft {
namespace {

using test::Counted;

TEST(TryTest, DefaultIsEmpty) {
  Try<int> t;
  EXPECT_FALSE(t.available());
  EXPECT_FALSE(t.hasValue());
  EXPECT_FALSE(t.hasException());
  EXPECT_THROW(t.value(), EmptyTry);
}

TEST(TryTest, HoldsValue) {
  Try<std::string> t = std::string("hello");
  ASSERT_TRUE(t.hasValue());
  EXPECT_TRUE(static_cast<bool>(t));
  EXPECT_EQ(t.value(), "hello");
  EXPECT_EQ(t.exception(), nullptr);
}

TEST(TryTest, ValueRethrowsStoredException) {
  Try<int> t{std::make_exception_ptr(std::runtime_error("stored"))};
  ASSERT_TRUE(t.hasException());
  EXPECT_NE(t.exception(), nullptr);
  try {
    t.value();
    FAIL() << "value() did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "stored");
  }
}

TEST(TryTest, MovesMoveOnlyValue) {
  Try<std::unique_ptr<int>> a = std::make_unique<int>(3);
  Try<std::unique_ptr<int>> b = std::move(a);
  ASSERT_TRUE(b.hasValue());
  EXPECT_EQ(*b.value(), 3);
  std::unique_ptr<int> taken = std::move(b).value();
  EXPECT_EQ(*taken, 3);
}

TEST(TryTest, CopiesAndAssigns) {
  Try<std::string> a = std::string("x");
  Try<std::string> b;
  b = a;
  EXPECT_EQ(b.value(), "x");
  b.setException(std::make_exception_ptr(std::logic_error("e")));
  EXPECT_TRUE(b.hasException());
  a = b;
  EXPECT_THROW(a.value(), std::logic_error);
  a.emplace("y");
  EXPECT_EQ(a.value(), "y");
}

TEST(TryTest, DestroysItsValueExactlyOnce) {
  Counted::reset();
  {
    Try<Counted> a{Counted{}};
    Try<Counted> b = std::move(a);
    Try<Counted> c;
    c = b;
    c.setException(std::make_exception_ptr(1));  // destroys c's value
    EXPECT_EQ(Counted::alive(), 2);
  }
  EXPECT_EQ(Counted::alive(), 0);
}

TEST(TryTest, ReferenceTryHoldsTheReferent) {
  int x = 1;
  Try<int&> t = x;
  t.value() = 5;
  EXPECT_EQ(x, 5);
  EXPECT_EQ(&t.value(), &x);
  Try<int&> e{std::make_exception_ptr(std::runtime_error("r"))};
  EXPECT_THROW(e.value(), std::runtime_error);
  Try<int&> empty;
  EXPECT_THROW(empty.value(), EmptyTry);
}

TEST(TryTest, VoidTryReportsSuccessOrException) {
  Try<void> ok = Try<void>::success();
  EXPECT_TRUE(ok.hasValue());
  EXPECT_NO_THROW(ok.value());
  Try<void> failed{std::make_exception_ptr(std::runtime_error("v"))};
  EXPECT_THROW(failed.value(), std::runtime_error);
  Try<void> empty;
  EXPECT_THROW(empty.value(), EmptyTry);
}

}  // namespace
}  // namespace weft
