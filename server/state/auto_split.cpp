#include "server/state/auto_split.hpp"

#include <algorithm>
#include <cstdio>

#include "routing/topology.hpp"

namespace splitpoint::server {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool is_monotonic(const SplitAdvice& a) { return a.reason == "monotonic" || a.reason == "last_range"; }

std::string figures(const SplitAdvice& a, double window_s, double held_s) {
  char buf[320];
  if (a.reason == "cold")
    std::snprintf(buf, sizeof buf, "%s:%u and its neighbour on %s had together at most %.3f of the statements and "
                  "of the rows written over the last %.1f s (%.2f times an even share), cold for %.1f s",
                  a.distribution.c_str(), a.partition.value_or(0), a.shard.c_str(), a.share, window_s, a.even, held_s);
  else
    std::snprintf(buf, sizeof buf, "%s:%u on %s had %.2f of %s over the last %.1f s (%.1f times an even share), "
                  "advised for %.1f s", a.distribution.c_str(), a.partition.value_or(0), a.shard.c_str(), a.share,
                  a.reason == "queries" ? "the statements" : "the rows written", window_s, a.even, held_s);
  return buf;
}

// The two partitions of `d` one merge would make one, lower number first: range p and
// p + 1; hash p and its sibling as MERGE PARTITION finds it, when p's modulus is above
// the distribution's smallest (a split made it).
std::optional<std::pair<std::uint32_t, std::uint32_t>> merge_pair(const config::Distribution& d, std::uint32_t p) {
  if (d.method == config::Method::range) {
    if (p + 1 >= d.ranges.size()) return std::nullopt;
    return std::pair{p, p + 1};
  }
  if (d.method != config::Method::hash || d.hash_parts.empty()) return std::nullopt;
  std::uint32_t smallest = d.hash_parts[0].modulus;
  for (const auto& h : d.hash_parts) smallest = std::min(smallest, h.modulus);
  if (d.hash_parts[p].modulus <= smallest) return std::nullopt;
  const routing::HashMerge merged = routing::merge_hash_partition(d, p);
  if (!merged.error.empty()) return std::nullopt;  // (e.g. the sibling was split again: its halves merge first)
  return std::pair{merged.kept, merged.removed};
}

}  // namespace

std::vector<SplitAdvice> merge_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& load) {
  std::vector<SplitAdvice> out;
  for (const auto& d : config.distributions) {
    std::vector<const Metrics::PartitionRow*> rows;  // by partition
    std::uint64_t queries = 0, writes = 0;
    for (const auto& r : load)
      if (r.distribution == d.name) {
        if (r.partition >= rows.size()) rows.resize(r.partition + 1, nullptr);
        rows[r.partition] = &r;
        queries += r.queries;
        writes += r.writes;
      }
    if (queries < kSplitAdviceMinimum || rows.size() < 2) continue;
    const double parts = static_cast<double>(rows.size());
    for (std::uint32_t p = 0; p < rows.size(); ++p) {
      const auto pair = merge_pair(d, p);
      if (!pair || pair->first != p || pair->second >= rows.size()) continue;
      const Metrics::PartitionRow* a = rows[pair->first];
      const Metrics::PartitionRow* b = rows[pair->second];
      if (!a || !b || a->shard != b->shard) continue;
      const double q = static_cast<double>(a->queries + b->queries) / static_cast<double>(queries);
      const double w = writes ? static_cast<double>(a->writes + b->writes) / static_cast<double>(writes) : 0.0;
      const double share = std::max(q, w);
      if (share >= kAutoMergeCold / parts) continue;
      SplitAdvice m;
      m.distribution = d.name;
      m.partition = p;
      m.shard = a->shard;
      m.reason = "cold";
      m.share = share;
      m.even = share * parts;
      if (d.method == config::Method::range) {
        m.split_at = *d.ranges[p].upto;
        m.advice = "merge it with the next range (MERGE RANGE " + d.name + " AT " + m.split_at + ")";
      } else {
        m.advice = "merge it with its other half (MERGE PARTITION " + d.name + ":" + std::to_string(p) + ")";
      }
      out.push_back(std::move(m));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.share < y.share; });
  return out;
}

AutoSplitState::Key AutoSplitState::key_of(const SplitAdvice& a) {
  const What what = a.reason == "cold" ? What::merge : is_monotonic(a) ? What::monotonic : What::split;
  return {a.distribution, a.partition.value_or(0), what};
}

void AutoSplitState::observe(Clock::time_point now, std::int64_t epoch, Rows rows, config::Duration window,
                             Trends trends) {
  if (epoch != epoch_) {
    epoch_ = epoch;
    looks_.clear();
    since_.clear();
  }
  window_ = window;
  looks_.push_back({now, std::move(rows), std::move(trends)});
  // Keep the newest look at least a window old, and every one after it.
  while (looks_.size() > 2 && looks_[1].at <= now - window) looks_.pop_front();
}

std::optional<AutoSplitState::Rows> AutoSplitState::window_load() const {
  if (looks_.size() < 2 || looks_.front().at > looks_.back().at - window_) return std::nullopt;
  std::map<std::pair<std::string, std::uint32_t>, const Metrics::PartitionRow*> before;
  for (const auto& r : looks_.front().rows) before[{r.distribution, r.partition}] = &r;
  Rows out = looks_.back().rows;
  for (auto& r : out)
    if (auto it = before.find({r.distribution, r.partition}); it != before.end()) {
      r.queries -= std::min(r.queries, it->second->queries);
      r.writes -= std::min(r.writes, it->second->writes);
    }
  return out;
}

AutoSplitState::Trends AutoSplitState::window_trends() const {
  if (looks_.empty()) return {};
  Trends out = looks_.back().trends;
  for (auto& t : out)
    for (const auto& before : looks_.front().trends)
      if (before.distribution == t.distribution) {
        t.offers -= std::min(t.offers, before.offers);
        t.rising -= std::min(t.rising, before.rising);
      }
  return out;
}

std::vector<AutoSplitAction> AutoSplitState::decide(const config::Config& config, const std::vector<SplitAdvice>& advice,
                                                    config::Duration interval) {
  std::vector<AutoSplitAction> out;
  if (looks_.empty()) return out;
  const auto now = looks_.back().at;
  const double window_s = seconds(looks_.back().at - looks_.front().at);
  std::map<Key, const SplitAdvice*> present;
  for (const auto& a : advice)
    if (a.partition && (is_monotonic(a) || a.reason == "queries" || a.reason == "rows_written" || a.reason == "cold"))
      present.emplace(key_of(a), &a);
  std::erase_if(since_, [&](const auto& e) { return !present.count(e.first); });
  std::optional<AutoSplitAction> split;  // the one with the largest share
  std::optional<AutoSplitAction> merge;  // the coldest
  for (const auto& [key, a] : present) {
    const auto since = since_.try_emplace(key, now).first->second;
    if (now - since < window_) continue;
    const config::Distribution* d = nullptr;
    for (const auto& x : config.distributions)
      if (x.name == a->distribution) d = &x;
    if (!d || d->method == config::Method::list) continue;  // (a list partition is not split)
    AutoSplitAction act{AutoSplitAction::Kind::split_range, *a, seconds(now - since), ""};
    act.figures = figures(*a, window_s, act.held_s);
    if (std::get<2>(key) == What::merge) {
      act.kind = d->method == config::Method::range ? AutoSplitAction::Kind::merge_range
                                                    : AutoSplitAction::Kind::merge_hash;
      if ((!last_merge_ || now - *last_merge_ >= interval) && (!merge || a->share < merge->advice.share))
        merge = std::move(act);
      continue;
    }
    if (std::get<2>(key) == What::monotonic) act.kind = AutoSplitAction::Kind::monotonic;
    else if (d->method == config::Method::hash) act.kind = AutoSplitAction::Kind::split_hash;
    else if (a->split_at.empty()) act.kind = AutoSplitAction::Kind::no_value;
    if (act.kind == AutoSplitAction::Kind::split_range || act.kind == AutoSplitAction::Kind::split_hash) {
      if (a->move_to.empty() || (last_split_ && now - *last_split_ < interval)) continue;
      if (!split || a->share > split->advice.share) split = std::move(act);
    } else if (auto n = noted_.find(key); n == noted_.end() || now - n->second >= interval) {
      out.push_back(std::move(act));
    }
  }
  if (merge) out.push_back(std::move(*merge));
  if (split) out.push_back(std::move(*split));
  return out;
}

void AutoSplitState::done(const AutoSplitAction& a) {
  if (looks_.empty()) return;
  const auto now = looks_.back().at;
  since_[key_of(a.advice)] = now;
  if (a.kind == AutoSplitAction::Kind::split_range || a.kind == AutoSplitAction::Kind::split_hash)
    last_split_ = now;
  else if (a.kind == AutoSplitAction::Kind::merge_range || a.kind == AutoSplitAction::Kind::merge_hash)
    last_merge_ = now;
  else
    noted_[key_of(a.advice)] = now;
}

}  // namespace splitpoint::server
