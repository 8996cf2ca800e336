// Automatic splits and merges (SPEC §13, moves.auto_split, moves.auto_merge): a thread of
// the catalog that, on the proxy holding the auto-split lease (a session advisory lock on
// the catalog database: one proxy at a time, handed over when its connection ends), looks
// at this proxy's partition counters every quarter window (100 ms to 1 s), computes SHOW
// SPLIT ADVICE and the cold neighbours over the last window's load, and turns advice that
// held for a whole window (server/state/auto_split.hpp) into SPLIT RANGE at the median of
// the sampled keys or SPLIT PARTITION, then MOVE PARTITION of the hotter half to the
// least-loaded shard; cold neighbours on one shard into MERGE RANGE / MERGE PARTITION
// (metadata only: their rows are on that shard already): the admin console's own
// commands (change_range, split_partition, merge_partition, plan_move). `advise` only
// logs; monotonic keys are never split, only logged. docs/operations.md.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <pqxx/pqxx>

#include "server/cluster/catalog.hpp"
#include "server/cluster/proxy.hpp"
#include "server/state/auto_split.hpp"
#include "server/state/split_advice.hpp"

namespace splitpoint::server {

namespace {

using namespace std::chrono_literals;
using AutoSplit = config::Moves::AutoSplit;
using Kind = AutoSplitAction::Kind;

// A note instead of a split: why not.
void note(const AutoSplitAction& a) {
  if (a.kind == Kind::monotonic)
    spdlog::info("auto split: not splitting {}: {}; splitting will not help (every new key lands in the newest "
                 "range): hash or salt the key",
                 a.figures,
                 a.advice.reason == "monotonic" ? "its keys only increase" : "writes pile onto the last range");
  else
    spdlog::info("auto split: not splitting {}: no split value (fewer than 8 of the sampled keys in it, or half "
                 "of them one key)",
                 a.figures);
}

}  // namespace

// Merges cold neighbours (mode on) or says it would (advise).
void Catalog::auto_merge_act(const AutoSplitAction& a, config::Moves::AutoSplit mode) {
  const auto& d = a.advice.distribution;
  const bool range = a.kind == Kind::merge_range;
  const std::string merge = range ? "MERGE RANGE " + d + " AT " + a.advice.split_at
                                  : "MERGE PARTITION " + d + ":" + std::to_string(*a.advice.partition);
  if (mode == AutoSplit::advise) {
    spdlog::info("auto merge (advise): would {}: {}", merge, a.figures);
    return;
  }
  spdlog::info("auto merge: {}: {}", merge, a.figures);
  try {
    if (range) change_range(d, a.advice.split_at, false);
    else merge_partition(d, *a.advice.partition);
  } catch (const std::exception& e) {
    spdlog::warn("auto merge: {} refused: {}", merge, e.what());
  }
}

// Splits (mode on) or says it would (advise); the hotter half's move is queued with the
// figures as its reason (SHOW MOVES).
void Catalog::auto_split_act(const AutoSplitAction& a, config::Moves::AutoSplit mode) {
  if (a.kind == Kind::monotonic || a.kind == Kind::no_value) return note(a);
  const auto& d = a.advice.distribution;
  const auto p = *a.advice.partition;
  const bool range = a.kind == Kind::split_range;
  const std::string split = range ? "SPLIT RANGE " + d + " AT " + a.advice.split_at
                                  : "SPLIT PARTITION " + d + ":" + std::to_string(p);
  const std::string half = range ? "the upper half (at least half of the sampled keys)" : "the new half";
  if (mode == AutoSplit::advise) {
    spdlog::info("auto split (advise): would {}, then move {} to {}: {}", split, half, a.advice.move_to, a.figures);
    return;
  }
  spdlog::info("auto split: {}, then {} to {}: {}", split, half, a.advice.move_to, a.figures);
  try {
    std::uint32_t hot = 0;
    if (range) hot = change_range(d, a.advice.split_at, true).at(1).partition;
    else hot = split_partition(d, p).at(1).partition;
    const auto id = plan_move(d, hot, a.advice.move_to,
                              "auto split: " + a.figures + "; " + split + ", " + half + " to the least-loaded shard, " +
                                  a.advice.move_to);
    spdlog::info("auto split: move {} of {}:{} to {} queued", id, d, hot, a.advice.move_to);
  } catch (const std::exception& e) {
    spdlog::warn("auto split: {} refused: {}", split, e.what());
  }
}

void Catalog::auto_split_loop() {
  AutoSplitState state;
  std::unique_ptr<pqxx::connection> lease;  // holds the auto-split lease while open
  while (!stop_) {
    const auto rt = server_.runtime();
    const auto& m = rt->config.moves;
    const auto tick = std::clamp<config::Duration>(m.auto_split_window / 4, 100ms, 1000ms);
    if (m.auto_split == AutoSplit::off && m.auto_merge == AutoSplit::off) {
      if (lease) spdlog::info("auto split: off; lease given up");
      lease.reset();
      state = AutoSplitState();
      nap(tick);
      continue;
    }
    try {
      if (!lease) {
        auto c = connect_catalog();
        if (pqxx::nontransaction(*c).exec("SELECT pg_try_advisory_lock(hashtext('splitpoint auto split'))")[0][0].as<bool>()) {
          lease = std::move(c);
          auto name = [](AutoSplit x) { return x == AutoSplit::on ? "on" : x == AutoSplit::advise ? "advise" : "off"; };
          spdlog::info("auto split: this proxy holds the auto-split lease (splits {}, merges {}, window {} ms, "
                       "interval {} ms)",
                       name(m.auto_split), name(m.auto_merge), m.auto_split_window.count(),
                       m.auto_split_interval.count());
        }
      } else {
        pqxx::nontransaction(*lease).exec("SELECT 1");  // (still held: the connection lives)
      }
      if (lease) {
        auto& metrics = server_.metrics();
        state.observe(std::chrono::steady_clock::now(), rt->moves->epoch, metrics.partitions(rt->config, *rt->slots),
                      m.auto_split_window, metrics.key_trends(rt->config));
        if (auto load = state.window_load()) {
          std::vector<SplitAdvice> advice;
          if (m.auto_split != AutoSplit::off)
            advice = split_advice(rt->config, *load, {}, state.window_trends());
          if (m.auto_merge != AutoSplit::off)
            for (auto& cold : merge_advice(rt->config, *load)) advice.push_back(std::move(cold));
          for (const auto& a : state.decide(rt->config, advice, m.auto_split_interval)) {
            if (a.kind == Kind::merge_range || a.kind == Kind::merge_hash) auto_merge_act(a, m.auto_merge);
            else auto_split_act(a, m.auto_split);
            state.done(a);
          }
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("auto split: {}", e.what());
      lease.reset();
      state = AutoSplitState();
    }
    nap(tick);
  }
}

}  // namespace splitpoint::server
