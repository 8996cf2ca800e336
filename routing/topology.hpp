// The routing view of the configuration: which tables are sharded (and by which key),
// reference, catalog or unlisted; how a key value maps to a logical partition (hash,
// range, list) and a partition to a shard (SPEC §3).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "routing/hash.hpp"

namespace splitpoint::routing {

struct TableClass {
  enum class Kind : std::uint8_t { sharded, reference, catalog, pinned, rejected };
  Kind kind = Kind::reference;
  std::size_t distribution = 0;  // sharded
  std::string key_column;        // sharded
  std::size_t shard = 0;         // pinned (unlisted_tables: shard:<name>)
};

// How to read a key column's values, from its catalog type (format_type()).
struct ColumnType {
  std::string base;                  // type name without modifier: "bigint", "date", ...
  std::optional<KeyType> hash_type;  // nullopt: not a hashable key type
  std::int32_t varchar_max_chars = 0;
  bool integer = false;  // compare numerically (range), normalise (list)
};
ColumnType column_type(std::string_view format_type);

// A set of logical partitions of one distribution; `all` means unconstrained.
struct PartSet {
  bool all = true;
  std::vector<std::uint32_t> parts;  // sorted, unique, when !all

  static PartSet none() { return PartSet{false, {}}; }
  void intersect(const PartSet& other);
  void unite(const PartSet& other);
  void add(std::uint32_t p);
};

// Result of mapping one value.
struct PartitionOf {
  enum class Status : std::uint8_t { ok, unknown, no_partition };
  Status status = Status::unknown;
  std::uint32_t partition = 0;
};

class Topology {
 public:
  explicit Topology(const config::Config& config);

  const config::Config& config() const { return config_; }
  // `schema` empty or "public" means unqualified.
  TableClass classify(std::string_view schema, std::string_view name) const;
  // The name tables are known by in the config and in ShapeLookup.
  static std::string table_name(std::string_view schema, std::string_view name);

  // A table with a global index (`indexes:`), by the name it is known by.
  bool indexed(std::string_view table) const {
    for (const auto& ix : config_.indexes)
      if (ix.table == table) return true;
    return false;
  }

  std::uint32_t partition_count(std::size_t distribution) const;
  std::size_t shard_of(std::size_t distribution, std::uint32_t partition) const;
  // Every shard holding a partition of the distribution, sorted.
  const std::vector<std::size_t>& shards_of(std::size_t distribution) const { return distribution_shards_[distribution]; }
  std::optional<std::size_t> find_shard(std::string_view name) const { return config_.find_shard(name); }
  std::size_t shard_count() const { return config_.shards.size(); }

  // The partition of one key value (nullopt = NULL). `for_insert`: a NULL key of a
  // range/list distribution has no partition (as in PostgreSQL without a default).
  // A salted distribution (config::Salt) needs the row's bucket (bucket_of its salt
  // value): without it, `unknown`.
  PartitionOf partition_of(std::size_t distribution, const ColumnType& type, const std::optional<std::string>& value,
                           std::optional<std::uint32_t> bucket = std::nullopt) const;
  // Salted distributions: the bucket of a salt value (nullopt = NULL: bucket 0);
  // nullopt when it cannot be read as `salt_type`.
  std::optional<std::uint32_t> bucket_of(std::size_t distribution, const ColumnType& salt_type,
                                         const std::optional<std::string>& salt) const;
  // Salted distributions: every partition a key's rows may be in, one per bucket (only
  // bucket 0 for a key outside `salt.keys`), added to `out`; false when the key cannot be read.
  bool key_partitions(std::size_t distribution, const ColumnType& type, const std::optional<std::string>& value,
                      PartSet& out) const;
  bool salted(std::size_t distribution) const { return config_.distributions[distribution].salt.has_value(); }
  // The partition of a hash distribution holding row hash `h`: the one whose
  // h % modulus == remainder, as PostgreSQL picks among mixed-modulus hash partitions.
  // Uniform (never split): h % partitions; split: a table by h % the largest modulus.
  std::uint32_t hash_partition_of(std::size_t distribution, std::uint64_t h) const {
    const std::vector<std::uint32_t>& slots = hash_slots_[distribution];
    return slots.empty() ? partition_for_hash(h, partition_count(distribution))
                         : slots[h % slots.size()];
  }
  // Partitions of a range distribution overlapping [lower, upper]; `all` when the
  // distribution is not a range one or a bound cannot be read.
  PartSet partitions_between(std::size_t distribution, const ColumnType& type, std::optional<std::string> lower,
                             bool lower_inclusive, std::optional<std::string> upper, bool upper_inclusive) const;

 private:
  // Turns an exclusive integer bound into an inclusive one; false if none can exist.
  static bool step_integer(std::optional<std::string>& bound, bool& inclusive, int step);
  int compare_keys(const ColumnType& type, std::string_view a, std::string_view b, bool& ok) const;
  // A salted distribution's key: its row hash (0 for NULL) and whether it is salted.
  std::optional<std::uint64_t> key_row_hash(const ColumnType& type, const std::optional<std::string>& value) const;
  bool key_salted(const config::Salt& salt, const ColumnType& type, const std::optional<std::string>& value) const;

  const config::Config& config_;
  std::unordered_map<std::string, TableClass> tables_;
  std::vector<std::vector<std::size_t>> distribution_shards_;
  // Hash distributions with mixed moduli: the partition of each h % (largest modulus);
  // empty for uniform ones and other methods.
  std::vector<std::vector<std::uint32_t>> hash_slots_;
};

// SPLIT RANGE and MERGE RANGE (SPEC §9) on a range distribution's ranges, metadata only.
// A range partition's number is its position in key order (as in the file), so a split
// at a value inside partition p makes [lo, value) partition p and [value, hi) partition
// p + 1, both on p's shard, and every partition above p is numbered one higher; a merge
// at the bound between p and p + 1 makes one partition p on their shard, and the ones
// above are numbered one lower. Bounds compare as integers when all of them (and the
// value) are integers, else as strings (byte order), as the file's ranges are checked.
struct RangeChange {
  std::vector<config::Range> ranges;  // the distribution's ranges afterwards
  std::uint32_t partition = 0;        // split: the lower half (the upper is + 1); merge: the merged one
  std::string error;                  // non-empty: refused, and why
};
RangeChange split_range(const std::vector<config::Range>& ranges, std::string_view value);
// Refused unless `value` is the upper bound of a range that has one after it; the shards
// are not compared here (the caller names them in its refusal).
RangeChange merge_range(const std::vector<config::Range>& ranges, std::string_view value);

// SPLIT PARTITION (SPEC §9) on a hash distribution, metadata only: partition p with
// modulus m and remainder r becomes (2m, r), keeping its number, and the new partition
// (2m, r + m) gets the next number (the count before), so no other number changes.
// Refused when 2m would exceed kMaxHashModulus (the lookup table of a split
// distribution has one entry per value of the largest modulus).
inline constexpr std::uint32_t kMaxHashModulus = 65536;
struct HashSplit {
  std::vector<config::HashPartition> parts;  // every partition's, by number, afterwards
  std::uint32_t added = 0;                   // the new partition's number
  std::string error;                         // non-empty: refused, and why
};
HashSplit split_hash_partition(const config::Distribution& distribution, std::uint32_t partition);
// MERGE PARTITION (SPEC §9), SPLIT PARTITION's inverse, metadata only: partition p with
// modulus m and remainder r and its sibling (m, (r + m/2) % m), two halves as a split
// makes them, become one partition (m/2, r % (m/2)) numbered the lower of the two; the
// partitions above the higher number are numbered one lower. Refused when m is odd or
// the sibling is not one partition (it was split again: merge its halves first).
struct HashMerge {
  std::vector<config::HashPartition> parts;  // every partition's, by number, afterwards
  std::uint32_t kept = 0, removed = 0;       // the merged partition's number; the number that goes
  std::string error;                         // non-empty: refused, and why
};
HashMerge merge_hash_partition(const config::Distribution& distribution, std::uint32_t partition);
// Why `parts` is not a set of PostgreSQL hash partitions covering every row hash once
// (each modulus at most kMaxHashModulus and a factor of the next larger one, remainder
// below the modulus, no row hash in two partitions or in none); empty: it is one.
std::string check_hash_parts(const std::vector<config::HashPartition>& parts);

}  // namespace splitpoint::routing
