#include "routing/topology.hpp"

#include <algorithm>
#include <charconv>
#include <climits>

#include "routing/presplit.hpp"

namespace splitpoint::routing {

namespace {

bool parse_int(std::string_view s, long long& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

namespace {

ColumnType parse_column_type(std::string_view t) {
  ColumnType out;
  std::string name(t);
  // "character varying(20)" -> "character varying" and a length of 20.
  if (std::size_t paren = name.find('('); paren != std::string::npos) {
    long long n = 0;
    std::size_t close = name.find(')', paren);
    if (close != std::string::npos && parse_int(std::string_view(name).substr(paren + 1, close - paren - 1), n))
      out.varchar_max_chars = static_cast<std::int32_t>(n);
    name.erase(paren);
    while (!name.empty() && name.back() == ' ') name.pop_back();
  }
  out.hash_type = key_type_from_name(name);
  out.base = name;
  out.integer = out.hash_type == KeyType::int2 || out.hash_type == KeyType::int4 || out.hash_type == KeyType::int8;
  return out;
}

}  // namespace

ColumnType column_type(std::string_view t) {
  // Routing reads the key column's type for every execution of a statement; the few
  // type names a deployment has are parsed once per thread.
  struct Known {
    std::string text;
    ColumnType type;
  };
  thread_local std::vector<Known> known;
  for (const Known& k : known)
    if (k.text == t) return k.type;
  ColumnType out = parse_column_type(t);
  if (known.size() < 32) known.push_back({std::string(t), out});
  return out;
}

void PartSet::intersect(const PartSet& other) {
  if (other.all) return;
  if (all) {
    *this = other;
    return;
  }
  // In place (both sorted): the result is never longer than `parts`.
  auto kept = parts.begin();
  auto o = other.parts.begin();
  for (std::uint32_t p : parts) {
    while (o != other.parts.end() && *o < p) ++o;
    if (o != other.parts.end() && *o == p) *kept++ = p;
  }
  parts.erase(kept, parts.end());
}

void PartSet::unite(const PartSet& other) {
  if (all) return;
  if (other.all) {
    *this = other;
    return;
  }
  if (parts.empty()) {
    parts = other.parts;  // (keeps this set's buffer)
    return;
  }
  std::vector<std::uint32_t> out;
  std::set_union(parts.begin(), parts.end(), other.parts.begin(), other.parts.end(), std::back_inserter(out));
  parts = std::move(out);
}

void PartSet::add(std::uint32_t p) {
  if (all) return;
  auto it = std::lower_bound(parts.begin(), parts.end(), p);
  if (it == parts.end() || *it != p) parts.insert(it, p);
}

Topology::Topology(const config::Config& config) : config_(config) {
  for (std::size_t d = 0; d < config.distributions.size(); ++d)
    for (const auto& [table, key] : config.distributions[d].tables)
      tables_[table] = TableClass{TableClass::Kind::sharded, d, key, 0};
  for (const std::string& t : config.reference_tables) tables_[t] = TableClass{};
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    std::vector<std::size_t> shards;
    for (std::uint32_t p = 0; p < partition_count(d); ++p) shards.push_back(shard_of(d, p));
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    distribution_shards_.push_back(std::move(shards));
  }
  hash_slots_.resize(config.distributions.size());
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    const config::Distribution& dist = config.distributions[d];
    if (dist.method != config::Method::hash || dist.hash_parts.empty()) continue;
    std::uint32_t largest = 1;
    for (const auto& hp : dist.hash_parts) largest = std::max(largest, hp.modulus);
    // (apply_catalog only takes sets check_hash_parts accepts: every slot is filled once.)
    std::vector<std::uint32_t>& slots = hash_slots_[d];
    slots.assign(largest, 0);
    for (std::uint32_t p = 0; p < dist.hash_parts.size(); ++p)
      for (std::uint64_t k = dist.hash_parts[p].remainder; dist.hash_parts[p].modulus > 0 && k < largest;
           k += dist.hash_parts[p].modulus)
        slots[k] = p;
  }
}

std::string Topology::table_name(std::string_view schema, std::string_view name) {
  if (schema.empty() || schema == "public") return std::string(name);
  std::string out(schema);
  out += '.';
  out += name;
  return out;
}

TableClass Topology::classify(std::string_view schema, std::string_view name) const {
  if (schema == "pg_catalog" || schema == "information_schema" || (schema.empty() && name.starts_with("pg_")))
    return TableClass{TableClass::Kind::catalog};
  if (auto it = tables_.find(table_name(schema, name)); it != tables_.end()) return it->second;
  // The proxy's own tables live on one shard: the two-phase decisions and the sessions
  // of cross-shard deadlock detection on the first (server/txn/own_tables.hpp; in schema
  // public before, as splitpoint_2pc and splitpoint_spanning_sessions), the catalog
  // (schema splitpoint) on its shard. A statement on them (pg_dump's LOCK TABLE and
  // COPY, say) goes there.
  if ((schema == "splitpoint" && (name == "two_phase_decisions" || name == "spanning_sessions")) ||
      ((schema.empty() || schema == "public") && (name == "splitpoint_2pc" || name == "splitpoint_spanning_sessions")))
    return TableClass{TableClass::Kind::pinned, 0, {}, 0};
  if (schema == "splitpoint" && config_.catalog_shard)
    return TableClass{TableClass::Kind::pinned, 0, {}, *config_.catalog_shard};
  switch (config_.unlisted_tables) {
    case config::UnlistedPolicy::reference: return TableClass{TableClass::Kind::reference};
    case config::UnlistedPolicy::reject: return TableClass{TableClass::Kind::rejected};
    case config::UnlistedPolicy::shard: return TableClass{TableClass::Kind::pinned, 0, {}, config_.unlisted_shard};
  }
  return TableClass{};
}

std::uint32_t Topology::partition_count(std::size_t d) const {
  const config::Distribution& dist = config_.distributions[d];
  switch (dist.method) {
    case config::Method::hash: return static_cast<std::uint32_t>(dist.partitions);
    case config::Method::range: return static_cast<std::uint32_t>(dist.ranges.size());
    case config::Method::list: return static_cast<std::uint32_t>(dist.lists.size() + (dist.default_shard ? 1 : 0));
  }
  return 0;
}

std::size_t Topology::shard_of(std::size_t d, std::uint32_t p) const {
  const config::Distribution& dist = config_.distributions[d];
  switch (dist.method) {
    case config::Method::hash: return p < dist.placement.size() ? dist.placement[p] : 0;
    case config::Method::range: return p < dist.ranges.size() ? dist.ranges[p].shard : 0;
    case config::Method::list: return p < dist.lists.size() ? dist.lists[p].shard : dist.default_shard.value_or(0);
  }
  return 0;
}

int Topology::compare_keys(const ColumnType& type, std::string_view a, std::string_view b, bool& ok) const {
  if (type.integer) {
    long long x = 0, y = 0;
    if (!parse_int(a, x) || !parse_int(b, y)) {
      ok = false;
      return 0;
    }
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  // text, date, timestamp: byte order, which is the value order for ISO dates/times
  // and for text under the C collation.
  int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

std::optional<std::uint64_t> Topology::key_row_hash(const ColumnType& type,
                                                     const std::optional<std::string>& value) const {
  if (!value) return 0;
  if (!type.hash_type) return std::nullopt;
  return hash_key_text(*type.hash_type, *value, type.varchar_max_chars);
}

bool Topology::key_salted(const config::Salt& salt, const ColumnType& type,
                          const std::optional<std::string>& value) const {
  if (salt.keys.empty()) return true;
  for (const std::string& k : salt.keys) {
    bool ok = true;
    if (value && compare_keys(type, *value, k, ok) == 0 && ok) return true;
  }
  return false;
}

std::optional<std::uint32_t> Topology::bucket_of(std::size_t d, const ColumnType& salt_type,
                                                 const std::optional<std::string>& salt) const {
  const auto& s = config_.distributions[d].salt;
  if (!s) return std::nullopt;
  auto h = key_row_hash(salt_type, salt);
  if (!h) return std::nullopt;
  return partition_for_hash(*h, s->buckets);
}

bool Topology::key_partitions(std::size_t d, const ColumnType& type, const std::optional<std::string>& value,
                              PartSet& out) const {
  const auto& salt = config_.distributions[d].salt;
  auto h = key_row_hash(type, value);
  if (!salt || !h) return false;
  const std::uint32_t buckets = key_salted(*salt, type, value) ? salt->buckets : 1;
  for (std::uint32_t b = 0; b < buckets; ++b) out.add(hash_partition_of(d, salted_row_hash(*h, b)));
  return true;
}

PartitionOf Topology::partition_of(std::size_t d, const ColumnType& type, const std::optional<std::string>& value,
                                   std::optional<std::uint32_t> bucket) const {
  using S = PartitionOf::Status;
  const config::Distribution& dist = config_.distributions[d];
  if (dist.salt) {
    auto h = key_row_hash(type, value);
    if (!bucket || !h) return {S::unknown};
    return {S::ok, hash_partition_of(d, salted_row_hash(*h, key_salted(*dist.salt, type, value) ? *bucket : 0))};
  }
  if (dist.method == config::Method::hash) {
    if (!value) return {S::ok, hash_partition_of(d, 0)};  // a NULL key's row hash is 0
    if (!type.hash_type) return {S::unknown};
    auto h = hash_key_text(*type.hash_type, *value, type.varchar_max_chars);
    if (!h) return {S::unknown};
    return {S::ok, hash_partition_of(d, *h)};
  }
  if (dist.method == config::Method::range) {
    if (!value) return {S::no_partition};
    for (std::uint32_t i = 0; i < dist.ranges.size(); ++i) {
      if (!dist.ranges[i].upto) return {S::ok, i};
      bool ok = true;
      int c = compare_keys(type, *value, *dist.ranges[i].upto, ok);
      if (!ok) return {S::unknown};
      if (c < 0) return {S::ok, i};
    }
    return {S::no_partition};
  }
  if (value) {
    for (std::uint32_t i = 0; i < dist.lists.size(); ++i)
      for (const std::string& v : dist.lists[i].values) {
        bool ok = true;
        if (compare_keys(type, *value, v, ok) == 0 && ok) return {S::ok, i};
      }
  }
  if (dist.default_shard) return {S::ok, static_cast<std::uint32_t>(dist.lists.size())};
  return {S::no_partition};
}

PartSet Topology::partitions_between(std::size_t d, const ColumnType& type, std::optional<std::string> lower,
                                     bool lower_inclusive, std::optional<std::string> upper,
                                     bool upper_inclusive) const {
  const config::Distribution& dist = config_.distributions[d];
  if (dist.method != config::Method::range) return PartSet{};
  // Integers are discrete: `> 5` is `>= 6`, `< 5` is `<= 4`.
  if (type.integer && !step_integer(lower, lower_inclusive, +1)) return PartSet::none();
  if (type.integer && !step_integer(upper, upper_inclusive, -1)) return PartSet::none();
  PartSet out = PartSet::none();
  const std::string* below = nullptr;  // the previous range's upto: this range's lower bound
  for (std::uint32_t i = 0; i < dist.ranges.size(); ++i) {
    const auto& above = dist.ranges[i].upto;  // exclusive upper bound
    bool ok = true;
    // [below, above) misses the interval if it ends at or before `lower`...
    bool ends_before = false;
    if (lower && above) {
      int c = compare_keys(type, *above, *lower, ok);
      ends_before = c <= 0;
    }
    // ...or starts after `upper` (non-integer exclusive bounds are kept: conservative).
    bool starts_after = false;
    if (upper && below) {
      int c = compare_keys(type, *below, *upper, ok);
      starts_after = c > 0 || (c == 0 && !upper_inclusive);
    }
    if (!ok) return PartSet{};
    if (!ends_before && !starts_after) out.add(i);
    below = above ? &*above : nullptr;
  }
  return out;
}

bool Topology::step_integer(std::optional<std::string>& bound, bool& inclusive, int step) {
  if (!bound || inclusive) return true;
  long long v = 0;
  if (!parse_int(*bound, v)) return true;  // compare_keys reports it
  if ((step > 0 && v == LLONG_MAX) || (step < 0 && v == LLONG_MIN)) return false;  // nothing beyond
  bound = std::to_string(v + step);
  inclusive = true;
  return true;
}

namespace {

// How bounds of one range distribution compare: as integers when every bound and the
// value are integers (integers also get their canonical spelling), else byte order.
struct BoundOrder {
  bool numeric = true;
  bool mixed = false;  // the bounds are integers (there is one at least), the value is not

  BoundOrder(const std::vector<config::Range>& ranges, std::string& value) {
    bool bounds_numeric = true, any = false;
    for (const auto& r : ranges) {
      long long b = 0;
      any = any || r.upto.has_value();
      if (r.upto && !parse_int(*r.upto, b)) bounds_numeric = false;
    }
    long long v = 0;
    const bool value_numeric = parse_int(value, v);
    numeric = bounds_numeric && value_numeric;
    mixed = any && bounds_numeric && !value_numeric;
    if (numeric) value = std::to_string(v);
  }
  std::string mixed_error(const std::string& value) const {
    return "the ranges' bounds are integers and \"" + value + "\" is not one";
  }
  int compare(const std::string& a, const std::string& b) const {
    if (!numeric) return a.compare(b) < 0 ? -1 : (a.compare(b) > 0 ? 1 : 0);
    long long x = 0, y = 0;
    parse_int(a, x);
    parse_int(b, y);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
};

std::string quoted(const std::string& v) { return "\"" + v + "\""; }

}  // namespace

RangeChange split_range(const std::vector<config::Range>& ranges, std::string_view value_in) {
  RangeChange out;
  std::string value(value_in);
  if (value.empty()) {
    out.error = "the split value is empty";
    return out;
  }
  const BoundOrder order(ranges, value);
  if (order.mixed) {
    out.error = order.mixed_error(value);
    return out;
  }
  for (std::uint32_t i = 0; i < ranges.size(); ++i) {
    const int above = ranges[i].upto ? order.compare(value, *ranges[i].upto) : -1;
    if (above == 0) {
      out.error = quoted(value) + " is already the bound between partitions " + std::to_string(i) + " and " +
                  std::to_string(i + 1);
      return out;
    }
    if (above > 0) continue;
    // value < this range's upper bound and (the earlier ranges passed) above its lower.
    out.ranges = ranges;
    config::Range lower{value, ranges[i].shard};
    out.ranges.insert(out.ranges.begin() + i, lower);
    out.partition = i;
    return out;
  }
  out.error = quoted(value) + " is above every range's upper bound: no partition holds it";
  return out;
}

Presplit presplit_ranges(const std::vector<config::Range>& ranges, std::vector<std::string> keys, std::uint32_t n) {
  Presplit out;
  if (n < 2) {
    out.error = "INTO needs at least 2 ranges";
    return out;
  }
  bool numeric = !keys.empty();
  for (const auto& k : keys) {
    long long v = 0;
    numeric = numeric && parse_int(k, v);
  }
  auto less = [numeric](const std::string& a, const std::string& b) {
    if (!numeric) return a < b;
    long long x = 0, y = 0;
    parse_int(a, x);
    parse_int(b, y);
    return x < y;
  };
  std::sort(keys.begin(), keys.end(), less);
  std::size_t distinct = keys.empty() ? 0 : 1;
  for (std::size_t i = 1; i < keys.size(); ++i) distinct += less(keys[i - 1], keys[i]) ? 1 : 0;
  if (distinct < n) {
    out.error = "the keys have " + std::to_string(distinct) + " distinct value" + (distinct == 1 ? "" : "s") +
                ", fewer than the " + std::to_string(n) + " ranges asked for (load some rows, or give FROM SAMPLE)";
    return out;
  }
  out.ranges = ranges;
  for (std::uint32_t i = 1; i < n; ++i) {
    const std::string& q = keys[keys.size() * i / n];
    if (!out.bounds.empty() && !less(out.bounds.back(), q)) continue;
    if (less(q, keys.front()) || !less(keys.front(), q)) continue;  // the smallest key: nothing below it
    auto split = split_range(out.ranges, q);
    if (!split.error.empty()) {
      if (split.error.find("already the bound") != std::string::npos) continue;
      out.error = split.error;
      return out;
    }
    out.ranges = std::move(split.ranges);
    out.bounds.push_back(q);
  }
  if (out.bounds.empty()) out.error = "the keys' quantiles are the ranges' bounds already: nothing to split";
  return out;
}

RangeChange merge_range(const std::vector<config::Range>& ranges, std::string_view value_in) {
  RangeChange out;
  std::string value(value_in);
  const BoundOrder order(ranges, value);
  if (order.mixed) {
    out.error = order.mixed_error(value);
    return out;
  }
  for (std::uint32_t i = 0; i + 1 < ranges.size(); ++i) {
    if (!ranges[i].upto || order.compare(value, *ranges[i].upto) != 0) continue;
    out.ranges = ranges;
    out.ranges[i + 1].shard = ranges[i].shard;
    out.ranges.erase(out.ranges.begin() + i);
    out.partition = i;
    return out;
  }
  out.error = quoted(value) + " is not a bound between two ranges (SHOW PARTITIONS lists them)";
  return out;
}

HashSplit split_hash_partition(const config::Distribution& d, std::uint32_t partition) {
  HashSplit out;
  const auto count = static_cast<std::uint32_t>(d.partitions);
  if (partition >= count) {
    out.error = "distribution \"" + d.name + "\" has no partition " + std::to_string(partition) + " (it has " +
                std::to_string(count) + ")";
    return out;
  }
  const config::HashPartition half = d.hash_partition(partition);
  if (half.modulus > kMaxHashModulus / 2) {
    out.error = "partition " + d.name + ":" + std::to_string(partition) + " has modulus " +
                std::to_string(half.modulus) + "; split, it would have " + std::to_string(2ull * half.modulus) +
                ", above the largest allowed, " + std::to_string(kMaxHashModulus);
    return out;
  }
  for (std::uint32_t p = 0; p < count; ++p) out.parts.push_back(d.hash_partition(p));
  out.parts[partition] = {2 * half.modulus, half.remainder};
  out.parts.push_back({2 * half.modulus, half.remainder + half.modulus});
  out.added = count;
  return out;
}

HashMerge merge_hash_partition(const config::Distribution& d, std::uint32_t partition) {
  HashMerge out;
  const auto count = static_cast<std::uint32_t>(d.partitions);
  const std::string name = d.name + ":" + std::to_string(partition);
  if (partition >= count) {
    out.error = "distribution \"" + d.name + "\" has no partition " + std::to_string(partition) + " (it has " +
                std::to_string(count) + ")";
    return out;
  }
  const config::HashPartition hp = d.hash_partition(partition);
  if (hp.modulus % 2 != 0) {
    out.error = "partition " + name + " has modulus " + std::to_string(hp.modulus) + ", an odd one: it is not half of " +
                "a partition with modulus " + std::to_string(hp.modulus / 2);
    return out;
  }
  const config::HashPartition sibling{hp.modulus, (hp.remainder + hp.modulus / 2) % hp.modulus};
  std::optional<std::uint32_t> other;
  for (std::uint32_t p = 0; p < count; ++p)
    if (p != partition && d.hash_partition(p) == sibling) other = p;
  if (!other) {
    out.error = "partition " + name + " (modulus " + std::to_string(hp.modulus) + ", remainder " +
                std::to_string(hp.remainder) + ") has no partition (modulus " + std::to_string(sibling.modulus) +
                ", remainder " + std::to_string(sibling.remainder) +
                ") to merge with: those keys are split further; merge their partitions first";
    return out;
  }
  out.kept = std::min(partition, *other);
  out.removed = std::max(partition, *other);
  for (std::uint32_t p = 0; p < count; ++p)
    if (p != out.removed) out.parts.push_back(d.hash_partition(p));
  out.parts[out.kept] = {hp.modulus / 2, hp.remainder % (hp.modulus / 2)};
  return out;
}

std::string check_hash_parts(const std::vector<config::HashPartition>& parts) {
  if (parts.empty()) return "no partitions";
  std::vector<std::uint32_t> moduli;
  for (const auto& hp : parts) {
    if (hp.modulus == 0 || hp.modulus > kMaxHashModulus)
      return "modulus " + std::to_string(hp.modulus) + " is not between 1 and " + std::to_string(kMaxHashModulus);
    if (hp.remainder >= hp.modulus)
      return "remainder " + std::to_string(hp.remainder) + " is not below its modulus " + std::to_string(hp.modulus);
    moduli.push_back(hp.modulus);
  }
  std::sort(moduli.begin(), moduli.end());
  moduli.erase(std::unique(moduli.begin(), moduli.end()), moduli.end());
  for (std::size_t i = 0; i + 1 < moduli.size(); ++i)
    if (moduli[i + 1] % moduli[i] != 0)
      return "modulus " + std::to_string(moduli[i]) + " is not a factor of the next larger one, " +
             std::to_string(moduli[i + 1]);
  // Every value of h % largest in exactly one partition.
  std::vector<std::uint8_t> seen(moduli.back(), 0);
  for (const auto& hp : parts)
    for (std::uint32_t k = hp.remainder; k < moduli.back(); k += hp.modulus)
      if (seen[k]++) return "row hashes with remainder " + std::to_string(k) + " of " + std::to_string(moduli.back()) +
                            " are in two partitions";
  for (std::uint32_t k = 0; k < moduli.back(); ++k)
    if (!seen[k])
      return "row hashes with remainder " + std::to_string(k) + " of " + std::to_string(moduli.back()) +
             " are in no partition";
  return {};
}

}  // namespace splitpoint::routing
