// Automatic splits' hysteresis and rate limit (SPEC §13) on counters made up for them.
#include <catch2/catch.hpp>

#include "config/config.hpp"
#include "server/state/auto_split.hpp"

using splitpoint::server::AutoSplitAction;
using splitpoint::server::AutoSplitState;
using splitpoint::server::Metrics;
using splitpoint::server::SplitAdvice;
using namespace std::chrono_literals;

namespace {

splitpoint::config::Config config() {
  auto r = splitpoint::config::load_string(R"(
shards:
  - { name: s0, host: 127.0.0.1, port: 5432 }
  - { name: s1, host: 127.0.0.1, port: 5433 }
distributions:
  - name: by_id
    method: range
    ranges: [ { upto: 1000, shard: s0 }, { shard: s1 } ]
    tables: { items: id }
  - { name: by_user, method: hash, partitions: 2, tables: { users: id } }
)");
  REQUIRE(r.config);
  return *r.config;
}

// Cumulative counters: by_id:0 written `w0`, by_id:1 `w1`.
AutoSplitState::Rows rows(std::uint64_t w0, std::uint64_t w1) {
  return {{"by_id", 0, "s0", 0, w0}, {"by_id", 1, "s1", 0, w1}};
}

SplitAdvice hot(std::string reason = "rows_written", std::string at = "150") {
  return {"by_id", 0u, "s0", std::move(reason), 0.9, 1.8, "split it", std::move(at), "s1"};
}

const auto t0 = std::chrono::steady_clock::time_point{} + 1h;

}  // namespace

TEST_CASE("the window's load is the counters' growth since the newest look a window old") {
  AutoSplitState s;
  s.observe(t0, 1, rows(100, 100), 2000ms);
  CHECK_FALSE(s.window_load());  // one look
  s.observe(t0 + 1s, 1, rows(500, 150), 2000ms);
  CHECK_FALSE(s.window_load());  // not a window yet
  s.observe(t0 + 2s, 1, rows(900, 200), 2000ms);
  auto w = s.window_load();
  REQUIRE(w);
  CHECK((*w)[0].writes == 800);
  CHECK((*w)[1].writes == 100);
  s.observe(t0 + 3s, 1, rows(1000, 1200), 2000ms);
  w = s.window_load();
  REQUIRE(w);
  CHECK((*w)[0].writes == 500);  // since t0 + 1s
  CHECK((*w)[1].writes == 1050);
  // A new epoch starts over.
  s.observe(t0 + 4s, 2, rows(1000, 1200), 2000ms);
  CHECK_FALSE(s.window_load());
}

TEST_CASE("advice is acted on once it has named the partition at every look for a window, then rate-limited") {
  const auto cfg = config();
  AutoSplitState s;
  auto look = [&](std::chrono::milliseconds at, std::vector<SplitAdvice> advice) {
    s.observe(t0 + at, 1, rows(0, 0), 2000ms);
    return s.decide(cfg, advice, 10000ms);
  };
  CHECK(look(0ms, {hot()}).empty());
  CHECK(look(1000ms, {hot()}).empty());
  CHECK(look(1500ms, {}).empty());  // gone for one look: starts over
  CHECK(look(2000ms, {hot()}).empty());
  CHECK(look(3000ms, {hot()}).empty());
  auto a = look(4000ms, {hot()});
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == AutoSplitAction::Kind::split_range);
  CHECK(a[0].held_s == Approx(2.0));
  CHECK(a[0].advice.split_at == "150");
  CHECK(a[0].figures.find("by_id:0 on s0 had 0.90 of the rows written over the last 2.0 s (1.8 times an even share), "
                          "advised for 2.0 s") != std::string::npos);
  s.done(a[0]);
  // Within the interval: no second split, however long the advice holds.
  for (int t = 5000; t < 14000; t += 1000) CHECK(look(std::chrono::milliseconds(t), {hot()}).empty());
  CHECK(look(14000ms, {hot()}).size() == 1);
}

TEST_CASE("monotonic keys are never split, only noted once per interval; a hot range without a median neither") {
  const auto cfg = config();
  AutoSplitState s;
  std::vector<AutoSplitAction> a;
  for (int t = 0; t <= 2000; t += 1000) {
    s.observe(t0 + std::chrono::milliseconds(t), 1, rows(0, 0), 2000ms);
    a = s.decide(cfg, {hot("monotonic", ""), hot("queries", "")}, 10000ms);
  }
  REQUIRE(a.size() == 2);
  // (ordered by partition key: the monotonic note of by_id:0 sorts after its split advice)
  CHECK(a[0].kind == AutoSplitAction::Kind::no_value);
  CHECK(a[1].kind == AutoSplitAction::Kind::monotonic);
  for (const auto& x : a) s.done(x);
  for (int t = 3000; t < 12000; t += 1000) {
    s.observe(t0 + std::chrono::milliseconds(t), 1, rows(0, 0), 2000ms);
    CHECK(s.decide(cfg, {hot("monotonic", "")}, 10000ms).empty());
  }
}

TEST_CASE("a hash partition is split in halves; with no shard to move to, nothing is split") {
  const auto cfg = config();
  AutoSplitState s;
  SplitAdvice h{"by_user", 1u, "s1", "queries", 0.8, 1.6, "split it (SPLIT PARTITION by_user:1)", "", "s0"};
  std::vector<AutoSplitAction> a;
  for (int t = 0; t <= 2000; t += 1000) {
    s.observe(t0 + std::chrono::milliseconds(t), 1, rows(0, 0), 2000ms);
    auto nowhere = h;
    nowhere.move_to = "";
    CHECK(s.decide(cfg, {nowhere}, 10000ms).empty());
  }
  AutoSplitState s2;
  for (int t = 0; t <= 2000; t += 1000) {
    s2.observe(t0 + std::chrono::milliseconds(t), 1, rows(0, 0), 2000ms);
    a = s2.decide(cfg, {h}, 10000ms);
  }
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == AutoSplitAction::Kind::split_hash);
  CHECK(a[0].figures.find("of the statements") != std::string::npos);
}

TEST_CASE("cold neighbours on one shard are merge advice; hash halves only when a split made them") {
  using splitpoint::server::merge_advice;
  auto cfg = config();
  cfg.distributions[0].ranges = {{"100", 0}, {"200", 0}, {"300", 0}, {std::nullopt, 1}};
  using Row = Metrics::PartitionRow;
  // by_id:0 and :1 together 10 of 1000 statements (well under half of an even 1/4);
  // :1 and :2 together 110 (0.11: under 0.125 too, but warmer); :3 is on s1.
  std::vector<Row> load = {{"by_id", 0, "s0", 5, 0}, {"by_id", 1, "s0", 5, 0}, {"by_id", 2, "s0", 105, 0},
                           {"by_id", 3, "s1", 885, 0}, {"by_user", 0, "s0", 500, 0}, {"by_user", 1, "s1", 0, 0}};
  auto a = merge_advice(cfg, load);
  REQUIRE(a.size() == 2);
  CHECK(a[0].partition == 0u);
  CHECK(a[0].split_at == "100");
  CHECK(a[0].reason == "cold");
  CHECK(a[0].shard == "s0");
  CHECK(a[0].share == Approx(0.01));
  CHECK(a[0].advice == "merge it with the next range (MERGE RANGE by_id AT 100)");
  CHECK(a[1].partition == 1u);
  CHECK(a[1].split_at == "200");
  // Rows written count too: a pair cold in statements but not in writes is not cold.
  load[0].writes = 50;
  load[3].writes = 50;
  a = merge_advice(cfg, load);
  REQUIRE(a.size() == 1);
  CHECK(a[0].partition == 1u);
  // Too little traffic says nothing.
  for (auto& x : load) x.queries /= 100, x.writes = 0;
  CHECK(merge_advice(cfg, load).empty());
  // by_user's two partitions are the file's own (no split made them): never merged. Once
  // by_user:0 is split in halves on s0, the cold halves are advice.
  auto& h = cfg.distributions[1];
  h.hash_parts = {{4, 0}, {2, 1}, {4, 2}};
  h.placement = {0, 1, 0};
  h.partitions = 3;
  a = merge_advice(cfg, {{"by_user", 0, "s0", 2, 0}, {"by_user", 1, "s1", 500, 0}, {"by_user", 2, "s0", 3, 0}});
  REQUIRE(a.size() == 1);
  CHECK(a[0].distribution == "by_user");
  CHECK(a[0].partition == 0u);
  CHECK(a[0].advice == "merge it with its other half (MERGE PARTITION by_user:0)");
  h.placement = {0, 1, 1};  // halves on two shards: a move, not a merge
  CHECK(merge_advice(cfg, {{"by_user", 0, "s0", 2, 0}, {"by_user", 1, "s1", 500, 0}, {"by_user", 2, "s1", 3, 0}})
            .empty());
}

TEST_CASE("a merge waits for a window of cold looks, one at a time, once per interval") {
  const auto cfg = config();
  AutoSplitState s;
  SplitAdvice cold{"by_id", 0u, "s0", "cold", 0.01, 0.02, "merge it", "1000", ""};
  auto look = [&](std::chrono::milliseconds at, std::vector<SplitAdvice> advice) {
    s.observe(t0 + at, 1, rows(0, 0), 2000ms);
    return s.decide(cfg, advice, 10000ms);
  };
  CHECK(look(0ms, {cold}).empty());
  CHECK(look(1000ms, {cold}).empty());
  auto a = look(2000ms, {cold, hot()});
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == AutoSplitAction::Kind::merge_range);
  CHECK(a[0].figures.find("by_id:0 and its neighbour on s0 had together at most 0.010 of the statements") !=
        std::string::npos);
  s.done(a[0]);
  CHECK(look(3000ms, {cold, hot()}).empty());
  // The split advice held since 2000 ms: a split is not held back by the merge's interval.
  a = look(4000ms, {cold, hot()});
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == AutoSplitAction::Kind::split_range);
}

TEST_CASE("the window's key trend counts the keys offered and rising since the window began") {
  // 40,000 increasing keys loaded long ago, then a window of 400 writes to the last range
  // of which 20 rose: keys that only increase then, not now.
  const auto trend = [](std::uint64_t offers, std::uint64_t rising) {
    return AutoSplitState::Trends{{"by_id", offers, rising, "40000", {"39990", "40000"}}};
  };
  AutoSplitState s;
  CHECK(s.window_trends().empty());
  s.observe(t0, 1, rows(0, 40000), 2000ms, trend(40000, 40000));
  s.observe(t0 + 2s, 1, rows(0, 40400), 2000ms, trend(40400, 40020));
  const auto w = s.window_trends();
  REQUIRE(w.size() == 1);
  CHECK(w[0].offers == 400);
  CHECK(w[0].rising == 20);
  CHECK(w[0].top == "40000");
  CHECK(w[0].sample.size() == 2);
  // With the window's figures the last range is load, not a monotonic key; with the
  // counters since the start it would read as one.
  const auto config = ::config();
  const auto load = s.window_load();
  REQUIRE(load);
  for (const auto& a : splitpoint::server::split_advice(config, *load, {}, w)) CHECK(a.reason != "monotonic");
  bool since_start = false;
  for (const auto& a : splitpoint::server::split_advice(config, *load, {}, trend(40400, 40020)))
    since_start = since_start || a.reason == "monotonic";
  CHECK(since_start);
}
