// The hosts of one shard and what the health checks saw of them (SPEC §10): which is the
// primary, how far each standby's replay is behind, which are banned and until when.
// Written by the health loop (server/cluster/health.cpp) and by sessions that failed to reach a
// host; read by every session that routes a read. One mutex, held for a few loads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"

namespace splitpoint::server {

// "16/B374D848" -> 0x16B374D848; nullopt when malformed.
std::optional<std::uint64_t> parse_lsn(std::string_view text);

// A primary's pg_current_wal_insert_lsn() points past the page header when its last
// record ended on a page boundary; the end of that record is what a standby that
// replayed everything reports.
std::uint64_t end_of_records(std::uint64_t insert_lsn);

// Why a host was banned (splitpoint_host_bans_total{reason}).
enum class BanReason : std::uint8_t { connect, check, lost };
inline constexpr std::size_t kBanReasons = 3;
inline constexpr const char* kBanReasonNames[kBanReasons] = {"connect", "check", "lost"};
// An acquire that failed this way says the host is unreachable or going away (not a
// full pool, not bad credentials).
inline bool host_unreachable(std::string_view sqlstate) {
  return sqlstate.starts_with("08") || sqlstate == "57P01" || sqlstate == "57P03";
}

class ShardHosts {
 public:
  using Clock = std::chrono::steady_clock;
  ShardHosts(const config::Shard& shard, config::Health health);

  std::size_t size() const { return hosts_.size(); }
  const config::Endpoint& endpoint(std::size_t h) const { return hosts_[h].endpoint; }
  std::string label(std::size_t h) const;  // "host:port"
  // Hosts that may be primary (`hosts:`), the first ones; the rest are `replicas:`.
  std::size_t candidates() const { return candidates_; }
  // Some host besides the primary could answer reads.
  bool has_standbys() const { return hosts_.size() > 1; }

  // The primary's host number: the one a check found out of recovery (the first host
  // until a check has run).
  std::size_t primary() const { return primary_.load(std::memory_order_relaxed); }
  // Writes can go to the primary: it was seen and no second primary was.
  enum class PrimaryState : std::uint8_t { known, unknown, two_primaries };
  PrimaryState primary_state() const { return state_.load(std::memory_order_relaxed); }

  // A standby for a read: checked, not banned, in recovery, lag within `max_lag` and
  // replayed at least up to `min_lsn`. Round robin among those; nullopt: none (use the
  // primary).
  std::optional<std::size_t> pick_standby(std::chrono::milliseconds max_lag, std::uint64_t min_lsn);

  // What one health check of host `h` found.
  struct Check {
    bool ok = false;              // connected and answered
    bool in_recovery = false;
    std::uint64_t lsn = 0;        // primary: pg_current_wal_lsn(); standby: pg_last_wal_replay_lsn()
    std::optional<double> replay_age;  // standby: seconds since the last replayed commit
  };
  void record(std::size_t h, const Check& c, Clock::time_point now);
  // After a round of checks: the primary is the one candidate out of recovery. Returns
  // true when that changed to another host (a failover).
  bool settle_primary();
  // The data path could not use host `h`: banned now, for longer each time in a row.
  void ban(std::size_t h, BanReason why, Clock::time_point now);
  // The check of `h` is due (not banned, or its ban ran out: the check probes it).
  bool due(std::size_t h, Clock::time_point now) const;
  // The primary's LSN as of the last check (standbys' lag is measured against it).
  std::uint64_t primary_lsn() const;

  // For SHOW HOSTS and the metrics.
  struct View {
    std::string host;
    std::uint16_t port = 0;
    std::string role;   // primary | standby | unknown | down
    bool banned = false;
    double banned_for_s = 0;
    std::optional<double> lag_s;
    std::optional<std::int64_t> lag_bytes;
    std::array<std::uint64_t, kBanReasons> bans{};
  };
  std::vector<View> view(Clock::time_point now) const;
  std::uint64_t failovers() const { return failovers_.load(std::memory_order_relaxed); }

  // Same hosts and check settings: the state is kept across a reload.
  bool same_hosts(const config::Shard& other, const config::Health& health) const;

 private:
  struct Host {
    config::Endpoint endpoint;
    bool checked = false;  // a check succeeded since the last failure
    bool in_recovery = false;
    std::uint64_t lsn = 0;
    std::optional<double> lag_s;
    std::optional<std::int64_t> lag_bytes;
    int failures = 0;  // in a row
    Clock::time_point banned_until{};
    std::array<std::uint64_t, kBanReasons> bans{};
  };
  std::chrono::milliseconds ban_time(int failures) const;
  void mark_primary(std::uint64_t lsn, Clock::time_point now);  // under mu_
  std::optional<double> behind_since(std::uint64_t lsn, Clock::time_point now) const;  // under mu_

  const config::Health health_;
  std::size_t candidates_ = 1;
  mutable std::mutex mu_;
  std::vector<Host> hosts_;
  std::size_t next_ = 0;  // round robin
  // The primary's LSN at its recent checks, oldest first: a standby that replayed up to
  // one of them holds everything the primary had then, so it is at most that old.
  std::deque<std::pair<Clock::time_point, std::uint64_t>> primary_marks_;
  std::atomic<std::size_t> primary_{0};
  std::atomic<PrimaryState> state_{PrimaryState::known};
  std::atomic<std::uint64_t> failovers_{0};
};

}  // namespace splitpoint::server
