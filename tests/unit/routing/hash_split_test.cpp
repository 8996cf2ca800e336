// SPLIT PARTITION on a hash distribution (routing::split_hash_partition,
// routing::check_hash_parts) and the lookup among mixed moduli (Topology::partition_of,
// Topology::hash_partition_of): a key's partition is the one whose
// row hash % modulus == remainder, as PostgreSQL picks among mixed-modulus hash partitions.
#include <catch2/catch.hpp>

#include <random>

#include "config/config.hpp"
#include "routing/hash.hpp"
#include "routing/topology.hpp"
#include "router_fixture.hpp"

using splitpoint::config::HashPartition;
using splitpoint::routing::check_hash_parts;
using splitpoint::routing::column_type;
using splitpoint::routing::hash_key_text;
using splitpoint::routing::KeyType;
using splitpoint::routing::kMaxHashModulus;
using splitpoint::routing::merge_hash_partition;
using splitpoint::routing::partition_for_hash;
using splitpoint::routing::PartitionOf;
using splitpoint::routing::split_hash_partition;
using splitpoint::routing::Topology;

namespace {

constexpr std::size_t kByUser = 0;  // the fixture's hash distribution: 64 partitions, 0-31 on s0

// The fixture's configuration with by_user's partitions as the catalog has them after
// `splits` (apply_catalog's effect: the moduli, the count, the new ones on their half's shard).
splitpoint::config::Config split_config(const std::vector<std::uint32_t>& splits) {
  auto config = splitpoint::routing::test::load_config();
  auto& d = config.distributions[kByUser];
  for (std::uint32_t p : splits) {
    auto s = split_hash_partition(d, p);
    REQUIRE(s.error.empty());
    d.hash_parts = s.parts;
    d.partitions = static_cast<int>(s.parts.size());
    d.placement.push_back(d.placement[p]);
  }
  REQUIRE(check_hash_parts(d.hash_parts).empty());
  return config;
}

// The partitions whose (modulus, remainder) holds row hash h, by brute force.
std::vector<std::uint32_t> holders(const std::vector<HashPartition>& parts, std::uint64_t h) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t p = 0; p < parts.size(); ++p)
    if (h % parts[p].modulus == parts[p].remainder) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("split_hash_partition: r of m becomes r and r + m of 2m; the new half is numbered next") {
  auto config = splitpoint::routing::test::load_config();
  const auto& d = config.distributions[kByUser];
  auto s = split_hash_partition(d, 5);
  REQUIRE(s.error.empty());
  CHECK(s.added == 64);
  REQUIRE(s.parts.size() == 65);
  CHECK(s.parts[5] == HashPartition{128, 5});
  CHECK(s.parts[64] == HashPartition{128, 69});
  for (std::uint32_t p = 0; p < 64; ++p)  // every other number keeps its (64, p)
    if (p != 5) CHECK(s.parts[p] == HashPartition{64, p});
  CHECK(check_hash_parts(s.parts).empty());

  // Again, on the new half and on the old one: moduli 256 next to 128 and 64.
  auto config2 = split_config({5, 64, 5});
  const auto& parts = config2.distributions[kByUser].hash_parts;
  REQUIRE(parts.size() == 67);
  CHECK(parts[5] == HashPartition{256, 5});
  CHECK(parts[64] == HashPartition{256, 69});
  CHECK(parts[65] == HashPartition{256, 197});
  CHECK(parts[66] == HashPartition{256, 133});
  CHECK(config2.distributions[kByUser].placement[66] == config2.distributions[kByUser].placement[5]);
}

TEST_CASE("split_hash_partition refuses an unknown partition and a modulus beyond the limit") {
  auto config = splitpoint::routing::test::load_config();
  auto& d = config.distributions[kByUser];
  auto unknown = split_hash_partition(d, 64);
  CHECK(unknown.error.find("has no partition 64 (it has 64)") != std::string::npos);
  CHECK(unknown.parts.empty());
  CHECK_FALSE(split_hash_partition(d, 100000).error.empty());
  d.partitions = static_cast<int>(kMaxHashModulus / 2);
  d.placement.assign(kMaxHashModulus / 2, 0);
  CHECK(split_hash_partition(d, 7).error.empty());  // 32768 -> 65536: the largest allowed
  d.partitions = static_cast<int>(kMaxHashModulus);
  d.placement.assign(kMaxHashModulus, 0);
  auto capped = split_hash_partition(d, 7);
  CHECK(capped.error.find("has modulus 65536; split, it would have 131072, above the largest allowed, 65536") !=
        std::string::npos);
  CHECK(capped.parts.empty());
}

TEST_CASE("merge_hash_partition undoes a split: the two halves become one, numbered the lower") {
  auto config = split_config({5, 64, 5});  // (256, 5) #5, (256, 69) #64, (256, 197) #65, (256, 133) #66
  auto d = config.distributions[kByUser];
  d.hash_parts = config.distributions[kByUser].hash_parts;
  // #5's sibling is (256, 133), #66: the merge keeps 5, and no number above 66 exists.
  auto m = merge_hash_partition(d, 66);
  REQUIRE(m.error.empty());
  CHECK(m.kept == 5);
  CHECK(m.removed == 66);
  REQUIRE(m.parts.size() == 66);
  CHECK(m.parts[5] == HashPartition{128, 5});
  CHECK(m.parts[64] == HashPartition{256, 69});
  CHECK(m.parts[65] == HashPartition{256, 197});
  CHECK(check_hash_parts(m.parts).empty());
  // #64 (256, 69) and #65 (256, 197): one (128, 69) numbered 64, nothing renumbered.
  d.hash_parts = m.parts;
  d.partitions = 66;
  auto m2 = merge_hash_partition(d, 64);
  REQUIRE(m2.error.empty());
  CHECK((m2.kept == 64 && m2.removed == 65));
  d.hash_parts = m2.parts;
  d.partitions = 65;
  // Now #5 (128, 5) and #64 (128, 69): back to 64 partitions of (64, p).
  auto m3 = merge_hash_partition(d, 5);
  REQUIRE(m3.error.empty());
  CHECK((m3.kept == 5 && m3.removed == 64));
  REQUIRE(m3.parts.size() == 64);
  for (std::uint32_t p = 0; p < 64; ++p) CHECK(m3.parts[p] == HashPartition{64, p});
  // Every row hash has exactly one partition at every step.
  for (std::uint64_t h = 0; h < 1024; ++h) {
    CHECK(holders(m.parts, h).size() == 1);
    CHECK(holders(m2.parts, h).size() == 1);
  }
}

TEST_CASE("merge_hash_partition: numbers above the removed one go down by one; refusals") {
  auto config = splitpoint::routing::test::load_config();
  auto d = config.distributions[kByUser];
  // Uniform 64: #3 (64, 3) and #35 (64, 35) are halves of (32, 3); #36.. are numbered one lower.
  auto m = merge_hash_partition(d, 35);
  REQUIRE(m.error.empty());
  CHECK((m.kept == 3 && m.removed == 35));
  REQUIRE(m.parts.size() == 63);
  CHECK(m.parts[3] == HashPartition{32, 3});
  CHECK(m.parts[35] == HashPartition{64, 36});
  CHECK(check_hash_parts(m.parts).empty());
  // (32, 3)'s sibling (32, 19) is still split in two: refused until those merge.
  d.hash_parts = m.parts;
  d.partitions = 63;
  auto refused = merge_hash_partition(d, 3);
  CHECK(refused.error.find("has no partition (modulus 32, remainder 19) to merge with") != std::string::npos);
  CHECK(merge_hash_partition(d, 63).error.find("has no partition 63") != std::string::npos);
  d.hash_parts.clear();
  d.partitions = 3;
  CHECK(merge_hash_partition(d, 1).error.find("an odd one") != std::string::npos);
}

TEST_CASE("check_hash_parts accepts PostgreSQL's rules only") {
  CHECK(check_hash_parts({{1, 0}}).empty());
  CHECK(check_hash_parts({{2, 0}, {4, 1}, {4, 3}}).empty());
  CHECK(check_hash_parts({}) == "no partitions");
  CHECK(check_hash_parts({{2, 0}, {2, 0}}).find("in two partitions") != std::string::npos);
  CHECK(check_hash_parts({{2, 0}, {4, 1}}).find("remainder 3 of 4 are in no partition") != std::string::npos);
  CHECK(check_hash_parts({{2, 0}, {3, 1}}).find("not a factor of the next larger one") != std::string::npos);
  CHECK(check_hash_parts({{2, 2}, {2, 0}}).find("not below its modulus") != std::string::npos);
  CHECK(check_hash_parts({{0, 0}}).find("not between 1 and 65536") != std::string::npos);
  CHECK(check_hash_parts({{131072, 0}}).find("not between") != std::string::npos);
}

TEST_CASE("a uniform hash distribution's partition is h % partitions") {
  auto config = splitpoint::routing::test::load_config();
  Topology topo(config);
  std::mt19937_64 rng(14);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t h = rng();
    CHECK(topo.hash_partition_of(kByUser, h) == partition_for_hash(h, 64));
  }
  const auto bigint = column_type("bigint");
  for (long long k = -500; k < 500; ++k) {
    auto p = topo.partition_of(kByUser, bigint, std::to_string(k));
    REQUIRE(p.status == PartitionOf::Status::ok);
    CHECK(p.partition == splitpoint::routing::test::user_partition(std::to_string(k)));
  }
}

TEST_CASE("mixed moduli: the one partition whose h % modulus == remainder") {
  auto config = split_config({5, 64, 5, 17, 0});
  const auto& d = config.distributions[kByUser];
  Topology topo(config);
  CHECK(topo.partition_count(kByUser) == 69);
  std::mt19937_64 rng(15);
  for (int i = 0; i < 20000; ++i) {
    // Half of them with a low word that lands in a split partition.
    std::uint64_t h = rng();
    if (i % 2) h = (h & ~std::uint64_t{255}) | (i % 4 == 1 ? 5 : 69);
    auto who = holders(d.hash_parts, h);
    REQUIRE(who.size() == 1);
    CHECK(topo.hash_partition_of(kByUser, h) == who[0]);
  }
  // Keys outside the split partitions keep the partition they had.
  const auto bigint = column_type("bigint");
  std::size_t moved = 0;
  for (long long k = 0; k < 3000; ++k) {
    const std::string key = std::to_string(k);
    auto h = hash_key_text(KeyType::int8, key);
    REQUIRE(h);
    auto p = topo.partition_of(kByUser, bigint, key);
    REQUIRE(p.status == PartitionOf::Status::ok);
    CHECK(*h % d.hash_parts[p.partition].modulus == d.hash_parts[p.partition].remainder);
    const auto uniform = partition_for_hash(*h, 64);
    if (uniform != 5 && uniform != 17 && uniform != 0) CHECK(p.partition == uniform);
    if (p.partition != uniform) ++moved;
    CHECK(topo.shard_of(kByUser, p.partition) == (uniform < 32 ? 0u : 1u));  // no row changes shard
  }
  CHECK(moved > 0);
  // NULL: row hash 0, the partition with remainder 0 (partition 0, now 0 of 128).
  auto null = topo.partition_of(kByUser, bigint, std::nullopt);
  CHECK(null.partition == 0);
  CHECK(d.hash_parts[0] == HashPartition{128, 0});
}
