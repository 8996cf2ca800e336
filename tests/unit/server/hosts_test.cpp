// server/state/hosts.hpp: what the health checks and the data path make of a shard's hosts —
// LSNs, lag against the primary, the standby a read may use, bans with backoff, the
// primary found among several candidates (SPEC §10).
#include <catch2/catch.hpp>

#include <set>

#include "server/state/hosts.hpp"

using splitpoint::config::Endpoint;
using splitpoint::config::Health;
using splitpoint::config::Shard;
using namespace splitpoint::server;
using namespace std::chrono_literals;

namespace {

Shard shard_with(std::vector<Endpoint> hosts, std::vector<Endpoint> replicas) {
  Shard s;
  s.name = "s0";
  s.hosts = std::move(hosts);
  if (!s.hosts.empty()) {
    s.host = s.hosts.front().host;
    s.port = s.hosts.front().port;
  }
  s.replicas = std::move(replicas);
  return s;
}

ShardHosts::Check primary_at(std::uint64_t lsn) { return {true, false, lsn, std::nullopt}; }
ShardHosts::Check standby_at(std::uint64_t lsn, double age) { return {true, true, lsn, age}; }
const ShardHosts::Check kFailed{};

}  // namespace

TEST_CASE("LSNs parse as PostgreSQL prints them") {
  CHECK(parse_lsn("0/0") == 0u);
  CHECK(parse_lsn("16/B374D848") == 0x16B374D848u);
  CHECK(parse_lsn("ffffffff/ffffffff") == ~std::uint64_t{0});
  CHECK_FALSE(parse_lsn(""));
  CHECK_FALSE(parse_lsn("16B374D848"));
  CHECK_FALSE(parse_lsn("/1"));
  CHECK_FALSE(parse_lsn("1/"));
  CHECK_FALSE(parse_lsn("1/12345678Z"));
  CHECK_FALSE(parse_lsn("123456789/0"));
  // An insert position just past a page header is the end of the record before it.
  CHECK(end_of_records(8192 + 24) == 8192);
  CHECK(end_of_records((16u << 20) + 40) == (16u << 20));
  CHECK(end_of_records(8192 + 100) == 8192 + 100);
}

TEST_CASE("A standby serves reads only once checked, within the lag limit and past the session's LSN") {
  ShardHosts h(shard_with({}, {{"r1", 5433}, {"r2", 5434}}), Health{});
  const auto now = ShardHosts::Clock::now();
  REQUIRE(h.size() == 3);
  REQUIRE(h.candidates() == 1);
  CHECK_FALSE(h.pick_standby(1000ms, 0));  // nothing checked yet

  h.record(0, primary_at(1000), now);
  h.record(1, standby_at(1000, 50.0), now);  // replayed everything: not behind, whatever its last commit's age
  h.record(2, standby_at(400, 3.0), now);    // 600 bytes and 3 s behind
  auto v = h.view(now);
  CHECK(v[0].role == "primary");
  CHECK(v[1].role == "standby");
  CHECK(*v[1].lag_s == 0.0);
  CHECK(*v[2].lag_s == 3.0);
  CHECK(*v[2].lag_bytes == 600);

  CHECK(h.pick_standby(1000ms, 0) == 1u);
  CHECK(h.pick_standby(1000ms, 1001) == std::nullopt);  // the session committed past what r1 replayed
  CHECK(h.pick_standby(5000ms, 0).has_value());
  // Round robin among the usable ones.
  std::set<std::size_t> seen;
  for (int i = 0; i < 4; ++i) seen.insert(*h.pick_standby(5000ms, 0));
  CHECK(seen == std::set<std::size_t>{1, 2});
}

TEST_CASE("A failing host is banned for longer each time in a row, and back after a good check") {
  Health health;
  health.ban = 100ms;
  ShardHosts h(shard_with({}, {{"r1", 5433}}), health);
  auto now = ShardHosts::Clock::now();
  h.record(0, primary_at(10), now);
  h.record(1, standby_at(10, 0), now);
  REQUIRE(h.pick_standby(1000ms, 0) == 1u);

  h.ban(1, BanReason::connect, now);
  CHECK_FALSE(h.pick_standby(1000ms, 0));
  CHECK_FALSE(h.due(1, now + 99ms));
  CHECK(h.due(1, now + 100ms));
  h.record(1, kFailed, now + 100ms);  // the probe fails: 200 ms now
  CHECK_FALSE(h.due(1, now + 299ms));
  CHECK(h.due(1, now + 300ms));
  auto v = h.view(now + 150ms);
  CHECK(v[1].role == "down");
  CHECK(v[1].banned);
  CHECK(v[1].bans[static_cast<std::size_t>(BanReason::connect)] == 1);
  CHECK(v[1].bans[static_cast<std::size_t>(BanReason::check)] == 1);
  for (int i = 0; i < 10; ++i) h.record(1, kFailed, now);  // capped at 32 times the first ban
  CHECK(h.due(1, now + 3200ms));

  h.record(1, standby_at(10, 0), now + 4s);
  CHECK(h.pick_standby(1000ms, 0) == 1u);
}

TEST_CASE("With several possible primaries, the one out of recovery is the primary") {
  ShardHosts h(shard_with({{"a", 1}, {"b", 2}}, {{"r", 3}}), Health{});
  const auto now = ShardHosts::Clock::now();
  REQUIRE(h.candidates() == 2);
  CHECK(h.primary() == 0);  // until a check says otherwise

  h.record(0, primary_at(100), now);
  h.record(1, standby_at(100, 0), now);
  CHECK_FALSE(h.settle_primary());  // no change
  CHECK(h.primary_state() == ShardHosts::PrimaryState::known);
  CHECK(h.pick_standby(1000ms, 0) == 1u);  // b, a standby, serves reads too

  // a stops, b is promoted.
  h.ban(0, BanReason::lost, now);
  CHECK(h.primary_state() == ShardHosts::PrimaryState::unknown);
  h.record(1, primary_at(200), now);
  CHECK(h.settle_primary());
  CHECK(h.primary() == 1);
  CHECK(h.failovers() == 1);
  CHECK(h.primary_state() == ShardHosts::PrimaryState::known);

  // a comes back as a primary too: writes are refused until one of them is not.
  h.record(0, primary_at(150), now + 1s);
  CHECK_FALSE(h.settle_primary());
  CHECK(h.primary_state() == ShardHosts::PrimaryState::two_primaries);
  h.record(0, standby_at(200, 0), now + 2s);
  CHECK_FALSE(h.settle_primary());
  CHECK(h.primary_state() == ShardHosts::PrimaryState::known);
  CHECK(h.primary() == 1);
  CHECK(h.pick_standby(1000ms, 0).has_value());
}

TEST_CASE("A standby's lag is the age of the last primary check it caught up with, not of its last commit") {
  ShardHosts h(shard_with({}, {{"r1", 5433}}), Health{});
  const auto t0 = ShardHosts::Clock::now();
  // An idle primary, then a commit between two checks: the standby has not replayed it
  // yet at the second check. Its last replayed commit is 30 s old, but it holds all the
  // primary had 200 ms ago.
  h.record(0, primary_at(1000), t0);
  h.record(1, standby_at(1000, 30.0), t0);
  h.record(0, primary_at(1100), t0 + 200ms);
  h.record(1, standby_at(1000, 30.0), t0 + 200ms);
  CHECK(*h.view(t0 + 200ms)[1].lag_s == Approx(0.2));
  CHECK(*h.view(t0 + 200ms)[1].lag_bytes == 100);
  CHECK(h.pick_standby(1000ms, 0) == 1u);
  // Still not replayed 1.5 s later (a delayed or stuck standby): beyond the limit.
  h.record(0, primary_at(1100), t0 + 1500ms);
  h.record(1, standby_at(1000, 31.5), t0 + 1500ms);
  CHECK(*h.view(t0 + 1500ms)[1].lag_s == Approx(1.5));
  CHECK_FALSE(h.pick_standby(1000ms, 0));
  // Behind every check remembered: its last commit's age is all there is.
  h.record(1, standby_at(900, 31.5), t0 + 1700ms);
  CHECK(*h.view(t0 + 1700ms)[1].lag_s == 31.5);
}
