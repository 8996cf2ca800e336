// SPLIT RANGE / MERGE RANGE on a range distribution's ranges (routing::split_range,
// routing::merge_range): partition numbers are positions in key order.
#include <catch2/catch.hpp>

#include "config/config.hpp"
#include "routing/topology.hpp"

using splitpoint::config::Range;
using splitpoint::routing::merge_range;
using splitpoint::routing::split_range;

namespace {

// [-inf, 100) on 0, [100, 200) on 1, [200, +inf) on 0
std::vector<Range> three() { return {{"100", 0}, {"200", 1}, {std::nullopt, 0}}; }

std::vector<std::optional<std::string>> bounds(const std::vector<Range>& r) {
  std::vector<std::optional<std::string>> out;
  for (const auto& x : r) out.push_back(x.upto);
  return out;
}

std::vector<std::size_t> shards(const std::vector<Range>& r) {
  std::vector<std::size_t> out;
  for (const auto& x : r) out.push_back(x.shard);
  return out;
}

}  // namespace

TEST_CASE("split_range splits the range holding the value, on its shard") {
  auto c = split_range(three(), "150");
  REQUIRE(c.error.empty());
  CHECK(c.partition == 1);
  CHECK(bounds(c.ranges) == std::vector<std::optional<std::string>>{"100", "150", "200", std::nullopt});
  CHECK(shards(c.ranges) == std::vector<std::size_t>{0, 1, 1, 0});
}

TEST_CASE("split_range: the first and the last, unbounded, range") {
  auto first = split_range(three(), "-5");
  REQUIRE(first.error.empty());
  CHECK(first.partition == 0);
  CHECK(bounds(first.ranges) == std::vector<std::optional<std::string>>{"-5", "100", "200", std::nullopt});
  auto last = split_range(three(), "1000");
  REQUIRE(last.error.empty());
  CHECK(last.partition == 2);
  CHECK(bounds(last.ranges) == std::vector<std::optional<std::string>>{"100", "200", "1000", std::nullopt});
  CHECK(shards(last.ranges) == std::vector<std::size_t>{0, 1, 0, 0});
}

TEST_CASE("split_range compares integers as numbers and spells them canonically") {
  // "99" < "100" as numbers (as strings it would be above).
  auto c = split_range(three(), "+099");
  REQUIRE(c.error.empty());
  CHECK(c.partition == 0);
  CHECK(c.ranges[0].upto == std::optional<std::string>("99"));
  // A bound spelled differently is still the same bound.
  CHECK_FALSE(split_range(three(), "0100").error.empty());
}

TEST_CASE("split_range refuses an existing bound, and a value above the last bound") {
  auto c = split_range(three(), "200");
  CHECK(c.error.find("already the bound between partitions 1 and 2") != std::string::npos);
  CHECK(c.ranges.empty());
  std::vector<Range> bounded{{"10", 0}, {"20", 1}};  // no unbounded last range
  CHECK(split_range(bounded, "25").error.find("above every range") != std::string::npos);
  CHECK(split_range(bounded, "15").error.empty());
  CHECK_FALSE(split_range(three(), "").error.empty());
  // Integer bounds, a value that is not one: refused rather than compared as text.
  CHECK(split_range(three(), "abc").error.find("integers") != std::string::npos);
  CHECK(merge_range(three(), "1e2").error.find("integers") != std::string::npos);
}

TEST_CASE("split_range on text and ISO dates uses byte order") {
  std::vector<Range> dates{{"2024-01-01", 0}, {std::nullopt, 1}};
  auto c = split_range(dates, "2025-01-01");
  REQUIRE(c.error.empty());
  CHECK(c.partition == 1);
  CHECK(bounds(c.ranges) == std::vector<std::optional<std::string>>{"2024-01-01", "2025-01-01", std::nullopt});
  CHECK(shards(c.ranges) == std::vector<std::size_t>{0, 1, 1});
  // One unbounded range: the value alone decides the order.
  auto one = split_range({{std::nullopt, 3}}, "m");
  REQUIRE(one.error.empty());
  CHECK(bounds(one.ranges) == std::vector<std::optional<std::string>>{"m", std::nullopt});
  CHECK(shards(one.ranges) == std::vector<std::size_t>{3, 3});
}

TEST_CASE("merge_range joins the two ranges that meet at the value") {
  auto c = merge_range(three(), "200");
  REQUIRE(c.error.empty());
  CHECK(c.partition == 1);
  CHECK(bounds(c.ranges) == std::vector<std::optional<std::string>>{"100", std::nullopt});
  CHECK(shards(c.ranges) == std::vector<std::size_t>{0, 1});  // (the caller refuses two shards)
  auto first = merge_range(three(), "100");
  REQUIRE(first.error.empty());
  CHECK(first.partition == 0);
  CHECK(bounds(first.ranges) == std::vector<std::optional<std::string>>{"200", std::nullopt});
}

TEST_CASE("merge_range refuses a value that is not a bound between two ranges") {
  CHECK(merge_range(three(), "150").error.find("not a bound") != std::string::npos);
  CHECK_FALSE(merge_range({{"10", 0}}, "10").error.empty());  // the last range's upper bound
  CHECK_FALSE(merge_range({{std::nullopt, 0}}, "10").error.empty());
}

TEST_CASE("split then merge at the same value is the identity") {
  auto s = split_range(three(), "150");
  REQUIRE(s.error.empty());
  auto m = merge_range(s.ranges, "150");
  REQUIRE(m.error.empty());
  CHECK(bounds(m.ranges) == bounds(three()));
  CHECK(shards(m.ranges) == shards(three()));
}
