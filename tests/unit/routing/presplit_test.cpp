// PRESPLIT's bounds at quantiles of the keys (routing::presplit_ranges).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "routing/presplit.hpp"

using splitpoint::config::Range;
using splitpoint::routing::presplit_ranges;

namespace {

std::vector<std::string> ints(int from, int to) {
  std::vector<std::string> v;
  for (int i = to - 1; i >= from; --i) v.push_back(std::to_string(i));  // unsorted on purpose
  return v;
}

}  // namespace

TEST_CASE("presplit puts n - 1 bounds at the keys' quantiles, numerically, on the old ranges' shards") {
  const std::vector<Range> one{{std::nullopt, 0}};
  auto p = presplit_ranges(one, ints(0, 4000), 4);
  REQUIRE(p.error.empty());
  CHECK(p.bounds == std::vector<std::string>{"1000", "2000", "3000"});
  REQUIRE(p.ranges.size() == 4);
  CHECK(p.ranges[0].upto == "1000");
  CHECK(!p.ranges[3].upto);
  for (const auto& r : p.ranges) CHECK(r.shard == 0);
}

TEST_CASE("presplit skips a quantile that is a bound already, and keeps each range's shard") {
  const std::vector<Range> two{{std::string("1000"), 0}, {std::nullopt, 1}};
  auto p = presplit_ranges(two, ints(0, 4000), 4);
  REQUIRE(p.error.empty());
  CHECK(p.bounds == std::vector<std::string>{"2000", "3000"});
  REQUIRE(p.ranges.size() == 4);
  CHECK(p.ranges[0].shard == 0);
  CHECK(p.ranges[1].shard == 1);
  CHECK(p.ranges[3].shard == 1);
}

TEST_CASE("presplit refuses n < 2 and too few distinct keys; text keys sort as bytes") {
  const std::vector<Range> one{{std::nullopt, 0}};
  CHECK(presplit_ranges(one, ints(0, 100), 1).error.find("at least 2") != std::string::npos);
  CHECK(presplit_ranges(one, {"5", "5", "5", "6"}, 3).error.find("2 distinct values") != std::string::npos);
  CHECK(presplit_ranges(one, {}, 2).error.find("0 distinct") != std::string::npos);
  auto t = presplit_ranges(one, {"d", "b", "a", "c"}, 2);
  REQUIRE(t.error.empty());
  CHECK(t.bounds == std::vector<std::string>{"c"});
  // Skewed keys: quantiles of the keys, not of their span.
  std::vector<std::string> skewed = ints(0, 900);
  for (int i = 0; i < 100; ++i) skewed.push_back(std::to_string(1000000 + i));
  auto s = presplit_ranges(one, skewed, 2);
  CHECK(s.bounds == std::vector<std::string>{"500"});
}
