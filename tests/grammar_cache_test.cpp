// GrammarCache: one compile per key, least recently used evicted, failures not kept.
#include <gtest/gtest.h>

#include "text/grammar.h"

namespace mx {
namespace {

TEST(GrammarCacheTest, SameKeyCompilesOnceAndEvictsTheLeastRecentlyUsed) {
  GrammarCache cache(2);
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return grammar_from_choices({"yes", "no"});
  };
  auto a = cache.get("a", compile);
  auto a2 = cache.get("a", compile);
  ASSERT_TRUE(a.is_ok() && a2.is_ok());
  EXPECT_EQ(a->get(), a2->get());
  EXPECT_EQ(compiles, 1);
  ASSERT_TRUE(cache.get("b", compile).is_ok());
  ASSERT_TRUE(cache.get("a", compile).is_ok());  // a is now the most recent
  ASSERT_TRUE(cache.get("c", compile).is_ok());  // evicts b
  EXPECT_EQ(compiles, 3);
  ASSERT_TRUE(cache.get("a", compile).is_ok());
  EXPECT_EQ(compiles, 3);
  ASSERT_TRUE(cache.get("b", compile).is_ok());
  EXPECT_EQ(compiles, 4);
  // A failed compile is not cached: the next request gets the error again, compiled anew.
  auto bad = [&] {
    ++compiles;
    return grammar_from_regex("(");
  };
  EXPECT_FALSE(cache.get("bad", bad).is_ok());
  EXPECT_FALSE(cache.get("bad", bad).is_ok());
  EXPECT_EQ(compiles, 6);
}

}  // namespace
}  // namespace mx
