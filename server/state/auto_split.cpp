#include "server/state/auto_split.hpp"

#include <algorithm>
#include <cstdio>

namespace splitpoint::server {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool is_monotonic(const SplitAdvice& a) { return a.reason == "monotonic" || a.reason == "last_range"; }

std::string figures(const SplitAdvice& a, double window_s, double held_s) {
  const char* what = a.reason == "queries" ? "the statements" : "the rows written";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s:%u on %s had %.2f of %s over the last %.1f s (%.1f times an even share), "
                "advised for %.1f s", a.distribution.c_str(), a.partition.value_or(0), a.shard.c_str(), a.share, what,
                window_s, a.even, held_s);
  return buf;
}

}  // namespace

AutoSplitState::Key AutoSplitState::key_of(const SplitAdvice& a) {
  return {a.distribution, a.partition.value_or(0), is_monotonic(a)};
}

void AutoSplitState::observe(Clock::time_point now, std::int64_t epoch, Rows rows, config::Duration window) {
  if (epoch != epoch_) {
    epoch_ = epoch;
    looks_.clear();
    since_.clear();
  }
  window_ = window;
  looks_.push_back({now, std::move(rows)});
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

std::vector<AutoSplitAction> AutoSplitState::decide(const config::Config& config, const std::vector<SplitAdvice>& advice,
                                                    config::Duration interval) {
  std::vector<AutoSplitAction> out;
  if (looks_.empty()) return out;
  const auto now = looks_.back().at;
  const double window_s = seconds(looks_.back().at - looks_.front().at);
  std::map<Key, const SplitAdvice*> present;
  for (const auto& a : advice)
    if (a.partition && (is_monotonic(a) || a.reason == "queries" || a.reason == "rows_written"))
      present.emplace(key_of(a), &a);
  std::erase_if(since_, [&](const auto& e) { return !present.count(e.first); });
  std::optional<AutoSplitAction> split;  // the one with the largest share
  for (const auto& [key, a] : present) {
    const auto since = since_.try_emplace(key, now).first->second;
    if (now - since < window_) continue;
    const config::Distribution* d = nullptr;
    for (const auto& x : config.distributions)
      if (x.name == a->distribution) d = &x;
    if (!d || d->method == config::Method::list) continue;  // (a list partition is not split)
    AutoSplitAction act{AutoSplitAction::Kind::split_range, *a, seconds(now - since), ""};
    act.figures = figures(*a, window_s, act.held_s);
    if (std::get<2>(key)) act.kind = AutoSplitAction::Kind::monotonic;
    else if (d->method == config::Method::hash) act.kind = AutoSplitAction::Kind::split_hash;
    else if (a->split_at.empty()) act.kind = AutoSplitAction::Kind::no_value;
    if (act.kind == AutoSplitAction::Kind::split_range || act.kind == AutoSplitAction::Kind::split_hash) {
      if (a->move_to.empty() || (last_split_ && now - *last_split_ < interval)) continue;
      if (!split || a->share > split->advice.share) split = std::move(act);
    } else if (auto n = noted_.find(key); n == noted_.end() || now - n->second >= interval) {
      out.push_back(std::move(act));
    }
  }
  if (split) out.push_back(std::move(*split));
  return out;
}

void AutoSplitState::done(const AutoSplitAction& a) {
  if (looks_.empty()) return;
  const auto now = looks_.back().at;
  since_[key_of(a.advice)] = now;
  if (a.kind == AutoSplitAction::Kind::split_range || a.kind == AutoSplitAction::Kind::split_hash)
    last_split_ = now;
  else
    noted_[key_of(a.advice)] = now;
}

}  // namespace splitpoint::server
