#include "server/state/hosts.hpp"

#include <algorithm>

namespace splitpoint::server {

std::uint64_t end_of_records(std::uint64_t insert_lsn) {
  constexpr std::uint64_t kPage = 8192, kSegment = 16 << 20;  // PostgreSQL's defaults
  if (insert_lsn % kSegment == 40) return insert_lsn - 40;     // long page header
  if (insert_lsn % kPage == 24) return insert_lsn - 24;        // short page header
  return insert_lsn;
}

std::optional<std::uint64_t> parse_lsn(std::string_view text) {
  const auto slash = text.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == text.size()) return std::nullopt;
  auto hex = [](std::string_view s) -> std::optional<std::uint64_t> {
    if (s.size() > 8) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : s) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v * 16 + static_cast<std::uint64_t>(d);
    }
    return v;
  };
  auto hi = hex(text.substr(0, slash)), lo = hex(text.substr(slash + 1));
  if (!hi || !lo) return std::nullopt;
  return (*hi << 32) | *lo;
}

ShardHosts::ShardHosts(const config::Shard& shard, config::Health health) : health_(health) {
  for (const auto& e : shard.all_hosts()) hosts_.push_back(Host{e});
  candidates_ = shard.hosts.empty() ? 1 : shard.hosts.size();
}

std::string ShardHosts::label(std::size_t h) const {
  return hosts_[h].endpoint.host + ":" + std::to_string(hosts_[h].endpoint.port);
}

bool ShardHosts::same_hosts(const config::Shard& other, const config::Health& health) const {
  auto all = other.all_hosts();
  const std::size_t cand = other.hosts.empty() ? 1 : other.hosts.size();
  if (all.size() != hosts_.size() || cand != candidates_ || health.interval != health_.interval ||
      health.timeout != health_.timeout || health.ban != health_.ban)
    return false;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].host != hosts_[i].endpoint.host || all[i].port != hosts_[i].endpoint.port) return false;
  return true;
}

std::chrono::milliseconds ShardHosts::ban_time(int failures) const {
  return health_.ban * (1 << std::min(std::max(failures - 1, 0), 5));
}

std::optional<std::size_t> ShardHosts::pick_standby(std::chrono::milliseconds max_lag, std::uint64_t min_lsn) {
  const auto now = Clock::now();
  const double max_s = std::chrono::duration<double>(max_lag).count();
  const std::size_t primary = primary_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  for (std::size_t n = 0; n < hosts_.size(); ++n) {
    const std::size_t h = (next_ + n) % hosts_.size();
    const Host& x = hosts_[h];
    if (h == primary || !x.checked || !x.in_recovery || now < x.banned_until) continue;
    if (!x.lag_s || *x.lag_s > max_s || x.lsn < min_lsn) continue;
    next_ = h + 1;
    return h;
  }
  return std::nullopt;
}

void ShardHosts::record(std::size_t h, const Check& c, Clock::time_point now) {
  std::lock_guard lock(mu_);
  Host& x = hosts_[h];
  if (!c.ok) {
    x.checked = false;
    ++x.failures;
    x.banned_until = now + ban_time(x.failures);
    ++x.bans[static_cast<std::size_t>(BanReason::check)];
    return;
  }
  x.checked = true;
  x.failures = 0;
  x.banned_until = {};
  x.in_recovery = c.in_recovery;
  x.lsn = c.lsn;
  if (!c.in_recovery) {
    x.lag_s = 0.0;
    x.lag_bytes = 0;
    if (h < candidates_) mark_primary(end_of_records(c.lsn), now);
    return;
  }
  // Against the primary's LSN of this round (checked first): a standby that replayed
  // all of it is not behind, whatever its last commit's age (an idle primary).
  const Host* p = nullptr;
  for (std::size_t i = 0; i < candidates_; ++i)
    if (hosts_[i].checked && !hosts_[i].in_recovery) p = &hosts_[i];
  if (p == nullptr) {
    x.lag_s = c.replay_age;
    x.lag_bytes.reset();
  } else if (c.lsn >= end_of_records(p->lsn)) {
    x.lag_s = 0.0;
    x.lag_bytes = 0;
  } else {
    x.lag_s = behind_since(c.lsn, now).value_or(c.replay_age ? std::max(*c.replay_age, 0.0) : 1e9);
    x.lag_bytes = static_cast<std::int64_t>(p->lsn - c.lsn);
  }
}

void ShardHosts::mark_primary(std::uint64_t lsn, Clock::time_point now) {
  constexpr std::size_t kMarks = 64;  // 12.8 s of history at the default 200 ms interval
  primary_marks_.emplace_back(now, lsn);
  if (primary_marks_.size() > kMarks) primary_marks_.pop_front();
}

// The lag of a standby that replayed up to `lsn`: at most the age of the latest
// primary check it has caught up with. (Its last replayed commit's age says how long
// the primary was idle before the commit the standby has not replayed yet, not how far
// behind it is: a standby a few milliseconds behind an idle primary would look seconds
// late.) nullopt: behind every check remembered.
std::optional<double> ShardHosts::behind_since(std::uint64_t lsn, Clock::time_point now) const {
  for (auto it = primary_marks_.rbegin(); it != primary_marks_.rend(); ++it)
    if (it->second <= lsn) return std::max(std::chrono::duration<double>(now - it->first).count(), 0.0);
  return std::nullopt;
}

bool ShardHosts::settle_primary() {
  std::lock_guard lock(mu_);
  if (candidates_ == 1) return false;  // one possible primary: nothing to find
  std::vector<std::size_t> out_of_recovery;
  for (std::size_t i = 0; i < candidates_; ++i)
    if (hosts_[i].checked && !hosts_[i].in_recovery) out_of_recovery.push_back(i);
  if (out_of_recovery.size() > 1) {
    state_.store(PrimaryState::two_primaries, std::memory_order_relaxed);
    return false;
  }
  if (out_of_recovery.empty()) {
    state_.store(PrimaryState::unknown, std::memory_order_relaxed);
    return false;
  }
  const std::size_t p = out_of_recovery.front();
  const bool changed = p != primary_.load(std::memory_order_relaxed);
  primary_.store(p, std::memory_order_relaxed);
  state_.store(PrimaryState::known, std::memory_order_relaxed);
  if (changed) failovers_.fetch_add(1, std::memory_order_relaxed);
  return changed;
}

void ShardHosts::ban(std::size_t h, BanReason why, Clock::time_point now) {
  std::lock_guard lock(mu_);
  Host& x = hosts_[h];
  x.checked = false;
  ++x.failures;
  x.banned_until = now + ban_time(x.failures);
  ++x.bans[static_cast<std::size_t>(why)];
  if (h == primary_.load(std::memory_order_relaxed) && candidates_ > 1)
    state_.store(PrimaryState::unknown, std::memory_order_relaxed);
}

bool ShardHosts::due(std::size_t h, Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return now >= hosts_[h].banned_until;
}

std::uint64_t ShardHosts::primary_lsn() const {
  std::lock_guard lock(mu_);
  return hosts_[primary_.load(std::memory_order_relaxed)].lsn;
}

std::vector<ShardHosts::View> ShardHosts::view(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<View> out;
  const std::size_t primary = primary_.load(std::memory_order_relaxed);
  for (std::size_t h = 0; h < hosts_.size(); ++h) {
    const Host& x = hosts_[h];
    View v;
    v.host = x.endpoint.host;
    v.port = x.endpoint.port;
    v.banned = now < x.banned_until;
    v.banned_for_s = v.banned ? std::chrono::duration<double>(x.banned_until - now).count() : 0;
    if (!x.checked) v.role = x.failures > 0 ? "down" : "unknown";
    else v.role = x.in_recovery ? "standby" : (h == primary || candidates_ == 1 ? "primary" : "primary (second)");
    if (x.checked) {
      v.lag_s = x.lag_s;
      v.lag_bytes = x.lag_bytes;
    }
    v.bans = x.bans;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace splitpoint::server
