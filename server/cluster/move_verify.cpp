// A move's verification: the target's copy against the source, by scans before the
// hold and key by key under it (server/cluster/move.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;

// Per group of the partition's rows of `t` on `side` (a NULL group is nullopt): their
// count and the sum of their hashes.
Move::Sums Move::sums(pqxx::connection& side, const Table& t, const std::string& group, const std::string& and_where) {
  pqxx::nontransaction w(side);
  auto r = w.exec("SELECT (" + group + ")::text, count(*) || ' ' || sum(hashtextextended(x::text, 0)) FROM " +
                  q(side, t.name) + " x WHERE " + filter(t, "x.", side) + and_where + " GROUP BY 1");
  Sums out;
  for (const auto& row : r)
    out[row[0].is_null() ? std::nullopt : std::optional(row[0].as<std::string>())] = row[1].as<std::string>();
  return out;
}

namespace {

std::vector<std::optional<std::string>> differing(const std::map<std::optional<std::string>, std::string>& a,
                                                  const std::map<std::optional<std::string>, std::string>& b) {
  std::vector<std::optional<std::string>> out;
  for (const auto& [k, v] : a)
    if (auto it = b.find(k); it == b.end() || it->second != v) out.push_back(k);
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(k);
  return out;
}

// Keys compared one by one: under the hold, and before it (where a table scan is the
// alternative, so more may be).
constexpr std::size_t kMaxKeysUnderHold = 10000;
constexpr std::size_t kMaxKeysBeforeHold = 200000;

std::size_t count(const std::vector<KeySet>& keys) {
  std::size_t n = 0;
  for (const auto& k : keys) n += k.size();
  return n;
}

}  // namespace

// Moves the keys the fence trigger logged into `keys` (the log starts again). False: a
// NULL key, or more than `max` keys in all.
bool Move::take_logged(std::vector<KeySet>& keys, std::size_t max) {
  pqxx::nontransaction w(*src_);
  for (const auto& row : w.exec("DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id) +
                                " RETURNING tab, key")) {
    const auto tab = row[0].as<std::size_t>();
    if (row[1].is_null() || tab >= keys.size()) return false;
    keys[tab].insert(row[1].as<std::string>());
  }
  return count(keys) <= max;
}

// Of `keys`, those whose rows differ between the two sides (both compared at once; an
// index lookup per key where the key column has an index).
std::vector<KeySet> Move::differing_keys(const std::vector<KeySet>& keys) {
  std::vector<KeySet> out(tables_.size());
  for (std::size_t i = 0; i < tables_.size() && i < keys.size(); ++i) {
    if (keys[i].empty()) continue;
    const auto& t = tables_[i];
    std::string array;
    for (const auto& k : keys[i]) {
      array += array.empty() ? "{\"" : ",\"";
      for (char c : k) array += c == '"' || c == '\\' ? std::string{'\\', c} : std::string(1, c);
      array += '"';
    }
    array += '}';
    auto sides = both([&](pqxx::connection& side) {
      return sums(side, t, "x." + q(side, t.key),
                  " AND x." + q(side, t.key) + " = ANY (" + side.quote(array) + "::" + t.key_type + "[])");
    });
    for (const auto& k : differing(sides.first, sides.second)) out[i].insert(*k);  // (no NULL among them)
  }
  return out;
}

// Buckets of keys for the scans before the hold. An integer key that a btree index on
// the source leads with is bucketed by its high bits (key >> shift, about 1024 buckets
// from the smallest key to the largest): a bucket is then a key range, which the index
// finds, so the second look, at the buckets that differ, reads only those. nullopt:
// any other key, bucketed by a hash of its text; that look scans the table again.
std::optional<int> Move::bucket_shift(const Table& t) {
  if (t.key_type != "bigint" && t.key_type != "integer" && t.key_type != "smallint") return std::nullopt;
  pqxx::nontransaction w(*src_);
  auto r = w.exec_params(
      "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam JOIN "
      "pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass($1) AND "
      "a.attname = $2 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indisvalid LIMIT 1",
      t.name, t.key);
  if (r.empty()) return std::nullopt;
  auto range = w.exec("SELECT min(" + q(*src_, t.key) + ")::bigint, max(" + q(*src_, t.key) + ")::bigint FROM " +
                      q(*src_, t.name));
  if (range[0][0].is_null()) return std::nullopt;
  const auto lo = range[0][0].as<std::int64_t>(), hi = range[0][1].as<std::int64_t>();
  int shift = 0;
  while ((hi >> shift) - static_cast<__int128>(lo >> shift) >= 1024) ++shift;
  return shift;
}

// The condition "in one of `buckets`" (key >> shift), as key ranges (adjacent buckets
// joined) that an index scan reads.
std::string Move::bucket_ranges(const std::string& key, int shift, const std::vector<std::string>& buckets) {
  std::vector<std::int64_t> b;
  for (const auto& s : buckets) b.push_back(std::stoll(s));
  std::sort(b.begin(), b.end());
  auto bound = [&](__int128 v) {
    v = std::clamp<__int128>(v, INT64_MIN, INT64_MAX);
    return std::to_string(static_cast<std::int64_t>(v)) + "::bigint";
  };
  std::string out;
  for (std::size_t i = 0; i < b.size();) {
    std::size_t j = i;
    while (j + 1 < b.size() && b[j + 1] == b[j] + 1) ++j;
    const __int128 unit = static_cast<__int128>(1) << shift;
    out += std::string(out.empty() ? "" : " OR ") + "(" + key + " >= " + bound(b[i] * unit) + " AND " + key +
           " <= " + bound((b[j] + static_cast<__int128>(1)) * unit - 1) + ")";
    i = j + 1;
  }
  return " AND (" + out + ")";
}

// Before a cutover attempt (moves.verify), VDiff-style but with the scans outside the
// hold. The partition's rows on both sides, at once, per bucket of keys (bucket_shift),
// then key by key in the buckets that differ. Writes go on
// meanwhile (the fence trigger logs their keys from the start), so a key that differs
// may be lagging: those keys and the logged ones are compared again, key by key (a few
// rounds, each with the keys written during the one before), and what still differs is
// left for the hold, with the keys written since. nullopt: too many keys, or a NULL
// key; the hold compares every row.
std::optional<std::vector<KeySet>> Move::verify_before_hold() {
  exec(*src_, "DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id));
  using Clock = std::chrono::steady_clock;
  Clock::duration scans{};
  std::size_t buckets_differing = 0;
  std::vector<KeySet> suspects(tables_.size());
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    const auto started = Clock::now();
    const auto& t = tables_[i];
    const std::string key = "x." + q(*src_, t.key);
    const auto shift = bucket_shift(t);
    const std::string bucket = shift ? key + " >> " + std::to_string(*shift) : "hashtextextended(" + key + "::text, 0) & 1023";
    auto buckets = both([&](pqxx::connection& side) { return sums(side, t, bucket, ""); });
    std::vector<std::string> differ;
    for (const auto& b : differing(buckets.first, buckets.second)) {
      if (!b) return std::nullopt;
      differ.push_back(*b);
    }
    buckets_differing += differ.size();
    if (!differ.empty()) {
      std::string in;
      if (shift) {
        in = bucket_ranges(key, *shift, differ);
      } else {
        for (const auto& b : differ) in += (in.empty() ? "" : ", ") + b;
        in = " AND (" + bucket + ") IN (" + in + ")";
      }
      auto keys = both([&](pqxx::connection& side) { return sums(side, t, key, in); });
      for (const auto& k : differing(keys.first, keys.second)) {
        if (!k) return std::nullopt;
        suspects[i].insert(*k);
      }
    }
    scans += Clock::now() - started;
  }
  // Each round compares the keys written during the one before: fewer, and faster.
  const auto started = Clock::now();
  int round = 0;
  while (round < 4) {
    if (!take_logged(suspects, kMaxKeysBeforeHold)) return std::nullopt;
    const bool few = count(suspects) <= 100;
    suspects = differing_keys(suspects);
    ++round;
    if (few) break;
  }
  const auto rounds = Clock::now() - started;
  auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  spdlog::info("move {}: checked before the hold: {} ms of scans ({} buckets differed), {} rounds over written keys in "
               "{} ms, {} keys left",
               m_.id, ms(scans), buckets_differing, round, ms(rounds), count(suspects));
  return suspects;
}

// Under the hold, the target caught up: the same rows on both sides, or the move fails.
void Move::verify_held(std::optional<std::vector<KeySet>> keys) {
  if (keys && !take_logged(*keys, kMaxKeysUnderHold)) keys.reset();
  bool same = true;
  if (keys) {
    same = count(differing_keys(*keys)) == 0;
  } else {
    for (std::size_t i = 0; same && i < tables_.size(); ++i) {  // (one group: the whole partition)
      auto sides = both([&](pqxx::connection& side) { return sums(side, tables_[i], "0", ""); });
      same = sides.first == sides.second;
    }
  }
  if (!same) throw Abort("verification failed: the target's rows differ from the source's");
  if (keys) spdlog::info("move {}: verified: {} keys compared under the hold", m_.id, count(*keys));
  else spdlog::info("move {}: verified: every row compared under the hold", m_.id);
}

}  // namespace splitpoint::server::moving
