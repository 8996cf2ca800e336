// PartitionSlots: a partition's counters follow it when SPLIT or MERGE renumbers the
// partitions (SHOW PARTITIONS queries and rows_written, splitpoint_partition_*_total).
#include <catch2/catch.hpp>

#include <set>

#include "config/config.hpp"
#include "routing/topology.hpp"
#include "server/state/partition_slots.hpp"

using splitpoint::config::Config;
using splitpoint::routing::merge_hash_partition;
using splitpoint::routing::merge_range;
using splitpoint::routing::split_hash_partition;
using splitpoint::routing::split_range;
using splitpoint::routing::Topology;
using splitpoint::server::PartitionSlots;

namespace {

constexpr std::size_t kHash = 0, kRange = 1, kList = 2;

Config config() {
  auto r = splitpoint::config::load_string(R"(
shards:
  - { name: s0, host: 127.0.0.1, port: 5432 }
  - { name: s1, host: 127.0.0.1, port: 5433 }
distributions:
  - { name: by_user, method: hash, partitions: 4, tables: { users: id } }
  - name: by_time
    method: range
    ranges: [ { upto: 100, shard: s0 }, { upto: 200, shard: s1 }, { upto: 300, shard: s1 }, { shard: s1 } ]
    tables: { events: id }
  - name: by_region
    method: list
    lists: { s0: [eu], s1: [us] }
    default: s1
    tables: { sites: region }
)");
  REQUIRE(r.config);
  return *r.config;
}

PartitionSlots next(const Config& c, const PartitionSlots& previous) {
  Topology topo(c);
  return PartitionSlots(topo, previous);
}

}  // namespace

TEST_CASE("partition slots: every partition its own, room to grow", "[slots]") {
  const auto c = config();
  Topology topo(c);
  PartitionSlots slots(topo);
  CHECK(slots.capacity() == 2 * (4 + 4 + 3) + 1024);
  std::set<std::size_t> seen;
  for (std::size_t d : {kHash, kRange, kList})
    for (std::uint32_t p = 0; p < topo.partition_count(d); ++p) {
      REQUIRE(slots.slots(d, p).size() == 1);
      CHECK(seen.insert(slots.slot(d, p)).second);
    }
  CHECK(slots.slot(kHash, 4) == PartitionSlots::kNone);
  CHECK(slots.slot(7, 0) == PartitionSlots::kNone);
  CHECK(slots.slots(kList, 2).size() == 1);  // the default partition
}

TEST_CASE("partition slots: SPLIT RANGE renumbers, counters stay with their ranges", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots before(topo);
  auto split = split_range(c.distributions[kRange].ranges, "150");  // [100, 200) -> [100, 150) + [150, 200)
  REQUIRE(split.error.empty());
  REQUIRE(split.partition == 1);
  c.distributions[kRange].ranges = split.ranges;
  auto after = next(c, before);
  CHECK(after.slot(kRange, 0) == before.slot(kRange, 0));
  CHECK(after.slot(kRange, 1) == before.slot(kRange, 1));  // the lower half keeps the number and the counts
  CHECK(after.slot(kRange, 3) == before.slot(kRange, 2));  // [200, 300) was 2
  CHECK(after.slot(kRange, 4) == before.slot(kRange, 3));
  const auto added = after.slot(kRange, 2);                 // [150, 200): new
  CHECK(added != PartitionSlots::kNone);
  for (std::uint32_t p = 0; p < 4; ++p) CHECK(added != before.slot(kRange, p));
  for (std::uint32_t p = 0; p < 4; ++p) CHECK(after.slot(kHash, p) == before.slot(kHash, p));
  // A session still on the older runtime counts in the same slots for the same ranges.
  CHECK(before.slot(kRange, 2) == after.slot(kRange, 3));
}

TEST_CASE("partition slots: MERGE RANGE reads both halves, writes the lower", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots before(topo);
  auto merged = merge_range(c.distributions[kRange].ranges, "200");  // [100, 200) + [200, 300)
  REQUIRE(merged.error.empty());
  c.distributions[kRange].ranges = merged.ranges;
  auto after = next(c, before);
  CHECK(after.slots(kRange, 1) == std::vector<std::size_t>{before.slot(kRange, 1), before.slot(kRange, 2)});
  CHECK(after.slot(kRange, 1) == before.slot(kRange, 1));
  CHECK(after.slot(kRange, 2) == before.slot(kRange, 3));
  CHECK(after.slot(kRange, 3) == PartitionSlots::kNone);
  // Split again at the same value: the upper half is a new partition, the lower keeps both.
  c.distributions[kRange].ranges = split_range(c.distributions[kRange].ranges, "200").ranges;
  auto again = next(c, after);
  CHECK(again.slots(kRange, 1) == after.slots(kRange, 1));
  CHECK(again.slots(kRange, 2).size() == 1);
  CHECK(again.slot(kRange, 2) != before.slot(kRange, 2));
}

TEST_CASE("partition slots: SPLIT PARTITION adds a counted partition", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots before(topo);
  auto& d = c.distributions[kHash];
  auto s = split_hash_partition(d, 2);
  REQUIRE(s.error.empty());
  d.hash_parts = s.parts;
  d.partitions = static_cast<int>(s.parts.size());
  d.placement.push_back(d.placement[2]);
  auto after = next(c, before);
  for (std::uint32_t p = 0; p < 4; ++p) CHECK(after.slot(kHash, p) == before.slot(kHash, p));
  REQUIRE(s.added == 4);
  CHECK(after.slot(kHash, 4) != PartitionSlots::kNone);
  CHECK(after.slot(kHash, 4) != after.slot(kHash, 2));
}

TEST_CASE("partition slots: MERGE PARTITION reads both halves; the numbers above keep their counts", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots before(topo);
  auto& d = c.distributions[kHash];
  auto m = merge_hash_partition(d, 1);  // (4, 1) #1 and (4, 3) #3: (2, 1) #1
  REQUIRE(m.error.empty());
  REQUIRE((m.kept == 1 && m.removed == 3));
  d.hash_parts = m.parts;
  d.partitions = 3;
  d.placement.pop_back();
  auto merged = next(c, before);
  CHECK(merged.slots(kHash, 1) == std::vector<std::size_t>{before.slot(kHash, 1), before.slot(kHash, 3)});
  CHECK(merged.slot(kHash, 0) == before.slot(kHash, 0));
  CHECK(merged.slot(kHash, 2) == before.slot(kHash, 2));
  // Merging #0 (4, 0) and #2 (4, 2) removes number 2; split #0 (2, 0) again: (4, 0) keeps
  // the number and both slots, (4, 2) is new, numbered 2.
  auto m2 = merge_hash_partition(d, 2);
  REQUIRE((m2.error.empty() && m2.kept == 0 && m2.removed == 2));
  d.hash_parts = m2.parts;
  d.partitions = 2;
  d.placement.pop_back();
  auto two = next(c, merged);
  CHECK(two.slots(kHash, 0) == std::vector<std::size_t>{before.slot(kHash, 0), before.slot(kHash, 2)});
  CHECK(two.slots(kHash, 1) == merged.slots(kHash, 1));
  auto s = split_hash_partition(d, 0);
  REQUIRE(s.error.empty());
  d.hash_parts = s.parts;
  d.partitions = 3;
  d.placement.push_back(d.placement[0]);
  auto split = next(c, two);
  CHECK(split.slots(kHash, 0) == two.slots(kHash, 0));
  CHECK(split.slots(kHash, 1) == two.slots(kHash, 1));
  CHECK(split.slots(kHash, 2).size() == 1);
  CHECK(split.slot(kHash, 2) != before.slot(kHash, 2));
}

TEST_CASE("partition slots: a reload that drops and adds distributions", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots before(topo);
  auto later = c;
  later.distributions.erase(later.distributions.begin());  // by_user gone: by_time is 0 now
  auto after = next(later, before);
  for (std::uint32_t p = 0; p < 4; ++p) CHECK(after.slot(0, p) == before.slot(kRange, p));
  CHECK(after.slot(1, 2) == before.slot(kList, 2));
}

TEST_CASE("partition slots: past the capacity, new partitions are not counted", "[slots]") {
  auto c = config();
  Topology topo(c);
  PartitionSlots slots(topo);
  std::size_t counted = 0, left_out = 0;
  for (int round = 0; round < 1100; ++round) {
    auto& d = c.distributions[kRange];
    d.ranges = split_range(d.ranges, std::to_string(1000 + round)).ranges;  // splits the last range
    slots = next(c, slots);
    (slots.slot(kRange, static_cast<std::uint32_t>(d.ranges.size() - 1)) == PartitionSlots::kNone ? left_out : counted)++;
  }
  CHECK(counted == slots.capacity() - 11);
  CHECK(left_out == 1100 - counted);
  CHECK(left_out > 0);
}
