// core/strings.h: the one join and ends_with.
#include "core/strings.h"

#include <gtest/gtest.h>

namespace servelab {
namespace {

TEST(Strings, Join) {
  EXPECT_EQ(join({}), "");
  EXPECT_EQ(join({"a"}), "a");
  EXPECT_EQ(join({"a", "", "c"}), "a, , c");
  EXPECT_EQ(join({"x", "y"}, "|"), "x|y");
}

TEST(Strings, EndsWith) {
  EXPECT_TRUE(ends_with("trace.jsonl", ".jsonl"));
  EXPECT_TRUE(ends_with("a", ""));
  EXPECT_TRUE(ends_with(".yaml", ".yaml"));
  EXPECT_FALSE(ends_with("yaml", ".yaml"));
  EXPECT_FALSE(ends_with("a.yml", ".yaml"));
}

}  // namespace
}  // namespace servelab
