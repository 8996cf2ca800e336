#include "server/state/split_advice.hpp"

#include <map>

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

}  // namespace

std::vector<SplitAdvice> split_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& partitions,
                                      const std::vector<Metrics::HotKeyRow>& hot_keys) {
  std::vector<SplitAdvice> out;
  for (const auto& d : config.distributions) {
    std::vector<const Metrics::PartitionRow*> rows;
    for (const auto& p : partitions)
      if (p.distribution == d.name) rows.push_back(&p);
    if (rows.size() < 2) continue;
    std::uint64_t queries = 0, writes = 0;
    for (const auto* r : rows) queries += r->queries, writes += r->writes;
    const double n = static_cast<double>(rows.size());
    // A key with a large share of its distribution: splitting its partition cannot help.
    std::map<std::uint32_t, bool> hot_partition;
    for (const auto& k : hot_keys) {
      if (k.distribution != d.name || queries < kSplitAdviceMinimum) continue;
      const double share = static_cast<double>(k.count - std::min(k.count, k.error)) / static_cast<double>(queries);
      if (share * n < kSplitAdviceFactor) continue;
      out.push_back({d.name, std::nullopt, "", "hot_key", share, share * n,
                     "key " + k.key + " alone has this share: no split separates one key; cache it, or choose a "
                     "shard key that spreads it"});
    }
    for (const auto* r : rows) {
      const bool last_range = d.method == config::Method::range && r->partition + 1 == rows.size() &&
                              !d.ranges.back().upto;
      // An even share: 1/partitions, or 1/modulus for a hash partition (mixed once split).
      const double parts = d.method == config::Method::hash && r->partition < d.placement.size()
                               ? static_cast<double>(d.hash_partition(r->partition).modulus)
                               : n;
      auto check = [&](std::uint64_t mine, std::uint64_t total, const char* what) {
        if (total < kSplitAdviceMinimum) return false;
        const double share = static_cast<double>(mine) / static_cast<double>(total);
        if (share * parts < kSplitAdviceFactor) return false;
        const std::string part = part_name(d.name, r->partition);
        const std::string move = "MOVE PARTITION " + part + " TO " + quietest_shard(rows, config, r->shard);
        std::string advice;
        if (last_range && std::string(what) == "rows_written")
          advice = "writes pile onto the last range, as with keys that only increase (ids, timestamps): split it "
                   "above the current largest key (SPLIT RANGE " + d.name + " AT ...) so that "
                   "new keys land on their own range, then " + move;
        else if (d.method == config::Method::hash)
          advice = "split it (SPLIT PARTITION " + part + "), or " + move;
        else
          advice = "split it (SPLIT RANGE " + d.name + " AT ...), or " + move;
        out.push_back({d.name, r->partition, r->shard,
                       last_range && std::string(what) == "rows_written" ? "last_range" : what, share, share * parts,
                       advice});
        return true;
      };
      if (!check(r->writes, writes, "rows_written")) check(r->queries, queries, "queries");
    }
  }
  return out;
}

}  // namespace splitpoint::server
