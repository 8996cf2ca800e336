// SHOW SPLIT ADVICE's rules on counters made up for them.
#include <catch2/catch.hpp>

#include "config/config.hpp"
#include "server/state/key_trend.hpp"
#include "server/state/split_advice.hpp"

using splitpoint::server::Metrics;
using splitpoint::server::split_advice;

namespace {

splitpoint::config::Config two_distributions() {
  auto r = splitpoint::config::load_string(R"(
shards:
  - { name: s0, host: 127.0.0.1, port: 5432 }
  - { name: s1, host: 127.0.0.1, port: 5433 }
distributions:
  - { name: by_user, method: hash, partitions: 4, tables: { users: id } }
  - name: by_time
    method: range
    ranges: [ { upto: 100, shard: s0 }, { upto: 200, shard: s1 }, { shard: s1 } ]
    tables: { events: id }
)");
  REQUIRE(r.config);
  return *r.config;
}

std::vector<Metrics::PartitionRow> rows(std::vector<std::uint64_t> hash_queries, std::vector<std::uint64_t> range_writes) {
  std::vector<Metrics::PartitionRow> out;
  for (std::uint32_t p = 0; p < hash_queries.size(); ++p)
    out.push_back({"by_user", p, p < 2 ? "s0" : "s1", hash_queries[p], 0});
  for (std::uint32_t p = 0; p < range_writes.size(); ++p)
    out.push_back({"by_time", p, p == 0 ? "s0" : "s1", 0, range_writes[p]});
  return out;
}

}  // namespace

TEST_CASE("even load gives no advice; so does too little traffic") {
  const auto config = two_distributions();
  CHECK(split_advice(config, rows({100, 110, 90, 100}, {50, 60, 55}), {}).empty());
  CHECK(split_advice(config, rows({10, 0, 0, 0}, {0, 0, 90}), {}).empty());  // below kSplitAdviceMinimum
}

TEST_CASE("a hash partition with twice an even share of queries is advised to split or move") {
  const auto config = two_distributions();
  auto a = split_advice(config, rows({500, 100, 100, 100}, {}), {});
  REQUIRE(a.size() == 1);
  CHECK(a[0].distribution == "by_user");
  CHECK(a[0].partition == 0u);
  CHECK(a[0].reason == "queries");
  CHECK(a[0].even == Approx(2.5));
  CHECK(a[0].advice.find("SPLIT PARTITION by_user:0") != std::string::npos);
  CHECK(a[0].advice.find("MOVE PARTITION by_user:0 TO s1") != std::string::npos);  // the quieter shard
}

TEST_CASE("writes piling onto the last, unbounded range read as increasing keys") {
  const auto config = two_distributions();
  auto a = split_advice(config, rows({}, {10, 10, 980}), {});
  REQUIRE(a.size() == 1);
  CHECK(a[0].partition == 2u);
  CHECK(a[0].reason == "last_range");
  CHECK(a[0].advice.find("increase") != std::string::npos);
  auto middle = split_advice(config, rows({}, {10, 980, 10}), {});
  REQUIRE(middle.size() == 1);
  CHECK(middle[0].reason == "rows_written");
}

TEST_CASE("one key with a large share is a hot key, not a partition to split") {
  const auto config = two_distributions();
  auto a = split_advice(config, rows({700, 100, 100, 100}, {}), {{"by_user", "42", 650, 5}});
  REQUIRE(a.size() == 2);
  CHECK(a[0].reason == "hot_key");
  CHECK(!a[0].partition);
  CHECK(a[0].advice.find("key 42") != std::string::npos);
  CHECK(a[1].reason == "queries");
}

TEST_CASE("a split hash partition's even share is 1/modulus, and the advice names SPLIT PARTITION") {
  auto config = two_distributions();
  auto& d = config.distributions[0];
  // by_user:1 split: (8, 1) and the new by_user:4 (8, 5); the others (4, r).
  d.hash_parts = {{4, 0}, {8, 1}, {4, 2}, {4, 3}, {8, 5}};
  d.partitions = 5;
  d.placement.push_back(d.placement[1]);
  std::vector<Metrics::PartitionRow> r;
  const std::vector<std::uint64_t> queries{200, 100, 200, 200, 300};  // by_user:4 holds 1/8 of the hashes
  for (std::uint32_t p = 0; p < queries.size(); ++p) r.push_back({"by_user", p, "s0", queries[p], 0});
  auto a = split_advice(config, r, {});
  REQUIRE(a.size() == 1);
  CHECK(a[0].partition == 4u);
  CHECK(a[0].even == Approx(3.0 / 10 * 8));  // 1/partitions would say 1.5: no advice
  CHECK(a[0].advice.find("split it (SPLIT PARTITION by_user:4), or MOVE PARTITION by_user:4 TO s1") !=
        std::string::npos);
  CHECK(a[0].advice.find("not implemented") == std::string::npos);
}

namespace {

// The issue's distribution (#48): (-inf, 1000) on s0, [1000, inf) on s1.
splitpoint::config::Config two_ranges() {
  auto r = splitpoint::config::load_string(R"(
shards:
  - { name: s0, host: 127.0.0.1, port: 5432 }
  - { name: s1, host: 127.0.0.1, port: 5433 }
distributions:
  - name: by_id
    method: range
    ranges: [ { upto: 1000, shard: s0 }, { shard: s1 } ]
    tables: { items: id }
)");
  REQUIRE(r.config);
  return *r.config;
}

std::vector<Metrics::PartitionRow> two(std::uint64_t q0, std::uint64_t w0, std::uint64_t q1, std::uint64_t w1) {
  return {{"by_id", 0, "s0", q0, w0}, {"by_id", 1, "s1", q1, w1}};
}

// The trend of `updates` random keys in [0, 500) and `inserts` increasing keys above 1000.
Metrics::KeyTrendRow trend(int updates, int inserts) {
  splitpoint::server::KeyTrend t;
  std::uint64_t x = 1;
  for (int i = 0, j = 0; i < updates || j < inserts;) {
    if (i < updates) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      t.add(std::to_string((x >> 33) % 500)), ++i;
    }
    if (i < updates) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      t.add(std::to_string((x >> 33) % 500)), ++i;
    }
    if (j < inserts) t.add(std::to_string(1001 + j)), ++j;
  }
  return {"by_id", t.offers(), t.rising(), t.top(), t.sample()};
}

}  // namespace

TEST_CASE("with two partitions, a dominant share (60%) is advised to split, at the median of its keys") {
  const auto config = two_ranges();
  // 2/3 of the writes on by_id:0: twice an even share (100%) would never fire.
  auto a = split_advice(config, two(400, 400, 200, 200), {}, {trend(400, 0)});
  REQUIRE(a.size() == 1);
  CHECK(a[0].partition == 0u);
  CHECK(a[0].reason == "rows_written");
  CHECK(a[0].share == Approx(2.0 / 3));
  CHECK(a[0].even == Approx(4.0 / 3));
  // The sampled keys are in [0, 500): the median is near 250.
  const auto at = a[0].advice.find("SPLIT RANGE by_id AT ");
  REQUIRE(at != std::string::npos);
  const int median = std::stoi(a[0].advice.substr(at + 21));
  CHECK(median > 150);
  CHECK(median < 350);
  CHECK(a[0].advice.find("MOVE PARTITION by_id:1 TO s1") != std::string::npos);
  // 55% is not dominant.
  CHECK(split_advice(config, two(550, 550, 450, 450), {}, {}).empty());
  CHECK(splitpoint::server::split_advice_threshold(2) == Approx(0.6));
  CHECK(splitpoint::server::split_advice_threshold(3) == Approx(0.6));
  CHECK(splitpoint::server::split_advice_threshold(4) == Approx(0.5));
  CHECK(splitpoint::server::split_advice_threshold(10) == Approx(0.2));
}

TEST_CASE("the issue's scenario: hot updates on by_id:0 split, monotonic inserts on by_id:1 hashed or salted") {
  const auto config = two_ranges();
  // Four updaters on random keys in [0, 500), two inserters of increasing keys above 1000.
  auto a = split_advice(config, two(800, 800, 400, 400), {}, {trend(800, 400)});
  REQUIRE(a.size() == 2);
  CHECK(a[0].partition == 0u);
  CHECK(a[0].reason == "rows_written");
  CHECK(a[0].advice.find("SPLIT RANGE by_id AT") != std::string::npos);
  CHECK(a[1].partition == 1u);
  CHECK(a[1].shard == "s1");
  CHECK(a[1].reason == "monotonic");
  CHECK(a[1].share == Approx(1.0 / 3));
  CHECK(a[1].advice.find("splitting will not help") != std::string::npos);
  CHECK(a[1].advice.find("hash the key") != std::string::npos);
  CHECK(a[1].advice.find("salt") != std::string::npos);
  CHECK(a[1].advice.find("largest 1400") != std::string::npos);
}

TEST_CASE("monotonic needs rising keys: random inserts into the last range are load, not a trend") {
  const auto config = two_ranges();
  splitpoint::server::KeyTrend t;
  std::uint64_t x = 3;
  for (int i = 0; i < 900; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t.add(std::to_string(1000 + (x >> 33) % 100000));
  }
  auto a = split_advice(config, two(100, 100, 900, 900), {}, {{"by_id", t.offers(), t.rising(), t.top(), t.sample()}});
  REQUIRE(a.size() == 1);
  CHECK(a[0].partition == 1u);
  CHECK(a[0].reason == "rows_written");  // not last_range: the trend rules increasing keys out
  CHECK(a[0].advice.find("SPLIT RANGE by_id AT") != std::string::npos);
  // Rows the trend saw few keys of (a bulk INSERT gives 64 keys at most): still the guess.
  auto bulk = split_advice(config, two(100, 100, 100, 5000), {}, {trend(200, 64)});
  REQUIRE(bulk.size() == 1);
  CHECK(bulk[0].reason == "last_range");
  CHECK(bulk[0].advice.find("hash or salt") != std::string::npos);
  // Too few rising keys: no verdict.
  auto few = split_advice(config, two(500, 500, 50, 50), {}, {trend(500, 50)});
  REQUIRE(few.size() == 1);
  CHECK(few[0].partition == 0u);
  // Rising keys in a middle range are monotonic there (a bounded last range).
  auto r = splitpoint::config::load_string(R"(
shards:
  - { name: s0, host: 127.0.0.1, port: 5432 }
  - { name: s1, host: 127.0.0.1, port: 5433 }
distributions:
  - name: by_id
    method: range
    ranges: [ { upto: 1000, shard: s0 }, { upto: 100000, shard: s1 } ]
    tables: { items: id }
)");
  REQUIRE(r.config);
  auto bounded = split_advice(*r.config, two(800, 800, 400, 400), {}, {trend(800, 400)});
  REQUIRE(bounded.size() == 2);
  CHECK(bounded[1].reason == "monotonic");
}

TEST_CASE("a hot key in a two-partition distribution stands out at a dominant share") {
  const auto config = two_ranges();
  auto a = split_advice(config, two(700, 0, 300, 0), {{"by_id", "7", 650, 0}});
  REQUIRE(a.size() == 2);
  CHECK(a[0].reason == "hot_key");
  CHECK(a[0].share == Approx(0.65));
  CHECK(a[1].reason == "queries");
}
