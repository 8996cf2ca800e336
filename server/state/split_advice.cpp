#include "server/state/split_advice.hpp"

#include <algorithm>
#include <map>

#include "server/state/key_trend.hpp"

namespace splitpoint::server {

namespace {

std::string part_name(const std::string& distribution, std::uint32_t partition) {
  return distribution + ":" + std::to_string(partition);
}

// The shard with the fewest of the distribution's statements, other than `not_on`.
std::string quietest_shard(const std::vector<const Metrics::PartitionRow*>& rows, const config::Config& config,
                           const std::string& not_on) {
  std::map<std::string, std::uint64_t> load;
  for (const auto& s : config.shards) load[s.name] = 0;
  for (const auto* r : rows) load[r->shard] += r->queries + r->writes;
  std::string best;
  for (const auto& s : config.shards)
    if (s.name != not_on && (best.empty() || load[s.name] < load[best])) best = s.name;
  return best;
}

// The range of a range distribution holding `key` (bounds compared as compare_keys does).
std::uint32_t range_of(const config::Distribution& d, std::string_view key) {
  std::uint32_t p = 0;
  while (p + 1 < d.ranges.size() && d.ranges[p].upto && compare_keys(key, *d.ranges[p].upto) >= 0) ++p;
  return p;
}

// The median of the sampled keys in range p, if it lies strictly above the range's
// lower bound (a split there separates something); "" otherwise.
std::string median_in(const config::Distribution& d, std::uint32_t p, const Metrics::KeyTrendRow* trend) {
  if (!trend) return "";
  std::vector<std::string> in;
  for (const auto& k : trend->sample)
    if (range_of(d, k) == p) in.push_back(k);
  if (in.size() < 8) return "";
  std::sort(in.begin(), in.end(), [](const std::string& a, const std::string& b) { return compare_keys(a, b) < 0; });
  const std::string& m = in[in.size() / 2];
  if (p > 0 && d.ranges[p - 1].upto && compare_keys(m, *d.ranges[p - 1].upto) <= 0) return "";
  if (compare_keys(m, in.front()) == 0) return "";  // half the sample is one key
  return m;
}

struct DistributionView {
  const config::Config& config;
  const config::Distribution& d;
  std::vector<const Metrics::PartitionRow*> rows;
  const Metrics::KeyTrendRow* trend = nullptr;
  std::uint64_t queries = 0, writes = 0;
};

// The range partition whose keys only increase (KeyTrend), if any.
std::optional<std::uint32_t> monotonic_range(const DistributionView& v) {
  const auto* t = v.trend;
  if (v.d.method != config::Method::range || !t || t->offers == 0 || t->rising < kSplitAdviceMinimum) return {};
  const std::uint32_t p = range_of(v.d, t->top);
  if (p >= v.rows.size()) return {};
  const auto w = v.rows[p]->writes;
  if (w < kSplitAdviceMinimum || static_cast<double>(t->rising) < kMonotonicShare * static_cast<double>(w)) return {};
  return p;
}

void hot_key_advice(const DistributionView& v, const std::vector<Metrics::HotKeyRow>& hot_keys,
                    std::vector<SplitAdvice>& out) {
  const double n = static_cast<double>(v.rows.size());
  for (const auto& k : hot_keys) {
    if (k.distribution != v.d.name || v.queries < kSplitAdviceMinimum) continue;
    const double share = static_cast<double>(k.count - std::min(k.count, k.error)) / static_cast<double>(v.queries);
    if (share < split_advice_threshold(n)) continue;
    out.push_back({v.d.name, std::nullopt, "", "hot_key", share, share * n,
                   "key " + k.key + " alone has this share: no split separates one key; cache it, or choose a "
                   "shard key that spreads it"});
  }
}

// Whether the key trend speaks for the rows written to range p: the keys it saw there
// (its offers times the sampled keys' share in p) are at least half those rows. Bulk
// statements give 64 keys at most (routing's cap), COPY none: their rows it cannot judge.
bool trend_speaks(const DistributionView& v, std::uint32_t p, std::uint64_t rows_written) {
  const auto* t = v.trend;
  if (!t || t->offers == 0 || t->sample.empty()) return false;
  std::size_t in = 0;
  for (const auto& k : t->sample) in += range_of(v.d, k) == p ? 1 : 0;
  const double keys = static_cast<double>(t->offers) * static_cast<double>(in) / static_cast<double>(t->sample.size());
  return 2 * keys >= static_cast<double>(rows_written);
}

// Advice on one partition by its share of writes, else of queries; false: none.
bool load_advice(const DistributionView& v, const Metrics::PartitionRow& r, std::vector<SplitAdvice>& out) {
  const auto& d = v.d;
  const bool last_range = d.method == config::Method::range && r.partition + 1 == v.rows.size() && !d.ranges.back().upto;
  // An even share: 1/partitions, or 1/modulus for a hash partition (mixed once split).
  const double parts = d.method == config::Method::hash && r.partition < d.placement.size()
                           ? static_cast<double>(d.hash_partition(r.partition).modulus)
                           : static_cast<double>(v.rows.size());
  auto check = [&](std::uint64_t mine, std::uint64_t total, const std::string& what) {
    if (total < kSplitAdviceMinimum) return false;
    const double share = static_cast<double>(mine) / static_cast<double>(total);
    if (share < split_advice_threshold(parts)) return false;
    const std::string part = part_name(d.name, r.partition);
    const std::string quietest = quietest_shard(v.rows, v.config, r.shard);
    const std::string move = "MOVE PARTITION " + part + " TO " + quietest;
    // Writes piling onto the last range are guessed to be keys that only increase unless
    // the key trend speaks for them (monotonic_range has then ruled that out).
    const bool guess_monotonic = last_range && what == "rows_written" && !trend_speaks(v, r.partition, r.writes);
    std::string advice, split_at;
    if (guess_monotonic) {
      advice = "writes pile onto the last range, as with keys that only increase (ids, timestamps); if they do, "
               "splitting will not help (new keys land above any split): hash or salt the key. Otherwise split it "
               "(SPLIT RANGE " + d.name + " AT ...), then " + move;
    } else if (d.method == config::Method::hash) {
      advice = "split it (SPLIT PARTITION " + part + "), or " + move;
    } else {
      const std::string median = split_at = median_in(d, r.partition, v.trend);
      advice = median.empty() ? "split it (SPLIT RANGE " + d.name + " AT ...), or " + move
                              : "split it at the median of its sampled keys (SPLIT RANGE " + d.name + " AT " +
                                    median + "), then MOVE PARTITION " + part_name(d.name, r.partition + 1) + " TO " +
                                    quietest + "; or " + move;
    }
    out.push_back({d.name, r.partition, r.shard, guess_monotonic ? "last_range" : what, share, share * parts, advice,
                   split_at, quietest});
    return true;
  };
  return check(r.writes, v.writes, "rows_written") || check(r.queries, v.queries, "queries");
}

}  // namespace

std::vector<SplitAdvice> split_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& partitions,
                                      const std::vector<Metrics::HotKeyRow>& hot_keys,
                                      const std::vector<Metrics::KeyTrendRow>& trends) {
  std::vector<SplitAdvice> out;
  for (const auto& d : config.distributions) {
    DistributionView v{config, d, {}, nullptr, 0, 0};
    for (const auto& p : partitions)
      if (p.distribution == d.name) v.rows.push_back(&p);
    if (v.rows.size() < 2) continue;
    for (const auto& t : trends)
      if (t.distribution == d.name) v.trend = &t;
    for (const auto* r : v.rows) v.queries += r->queries, v.writes += r->writes;
    const double n = static_cast<double>(v.rows.size());
    // A key with a large share of its distribution: splitting its partition cannot help.
    hot_key_advice(v, hot_keys, out);
    const auto monotonic = monotonic_range(v);
    for (const auto* r : v.rows) {
      if (monotonic && r->partition == *monotonic) {
        const double share = v.writes ? static_cast<double>(r->writes) / static_cast<double>(v.writes) : 0;
        out.push_back({d.name, r->partition, r->shard, "monotonic", share, share * n,
                       "keys only increase (ids, timestamps: " + std::to_string(v.trend->rising) + " of the keys seen "
                       "rose to the top, largest " + v.trend->top + "): every new row lands at the top of the key "
                       "space, on this range however often it is split; splitting will not help: hash the key (a hash "
                       "distribution) or salt it (add a bucket to the key) to spread the inserts"});
        continue;
      }
      load_advice(v, *r, out);
    }
  }
  return out;
}

}  // namespace splitpoint::server
