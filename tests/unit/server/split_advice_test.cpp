// SHOW SPLIT ADVICE's rules on counters made up for them.
#include <catch2/catch.hpp>

#include "config/config.hpp"
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
