// Automatic splits and merges (SPEC §13, moves.auto_split and moves.auto_merge): the load
// of the last window, taken from the partition counters SHOW PARTITIONS reads; the split
// advice (split_advice.hpp) or cold neighbours (merge_advice below) that have named the
// same partition at every look for a whole window (the hysteresis); and what to do about
// them, at most one split and one merge per interval (the rate limit). Pure: no I/O,
// unit-tested. server/cluster/auto_split.cpp looks, decides and acts.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.hpp"
#include "server/state/metrics.hpp"
#include "server/state/split_advice.hpp"

namespace splitpoint::server {

struct AutoSplitAction {
  enum class Kind {
    split_range,  // SPLIT RANGE dist AT value, then the upper half to `advice.move_to`
    split_hash,   // SPLIT PARTITION dist:part, then the new half to `advice.move_to`
    monotonic,    // keys only increase there (or seem to): hash or salt, never split
    no_value,     // a hot range without a split value (too few sampled keys, or one key)
    merge_range,  // MERGE RANGE dist AT advice.split_at (cold neighbours on one shard)
    merge_hash,   // MERGE PARTITION dist:part (cold halves of a split, on one shard)
  };
  Kind kind = Kind::split_range;
  SplitAdvice advice;  // as computed over the window: its share and times_even
  double held_s = 0;   // how long the advice has named this partition
  // The figures that caused it, for the log and SHOW MOVES: "by_id:0 on s0 had 0.93 of
  // the rows written over the last 2.0 s (1.9 times an even share), advised for 2.0 s".
  std::string figures;
};

// Cold neighbours (moves.auto_merge): two partitions one merge makes one — adjacent
// ranges, or the two halves SPLIT PARTITION made of a hash partition (a modulus above the
// distribution's smallest: what was split, never the file's own partitions) — on one
// shard, that together had less than kAutoMergeCold of an even share (1/partitions) of
// the distribution's statements and of its rows written over the window, in a
// distribution with at least kSplitAdviceMinimum statements in it (no traffic tells
// nothing). Reason "cold"; `partition` the lower number; `split_at` a range merge's
// bound; `share` the pair's larger share of the two counts. The coldest pair first.
inline constexpr double kAutoMergeCold = 0.5;
std::vector<SplitAdvice> merge_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& load);

class AutoSplitState {
 public:
  using Clock = std::chrono::steady_clock;
  using Rows = std::vector<Metrics::PartitionRow>;

  using Trends = std::vector<Metrics::KeyTrendRow>;

  // The counters at `now`, under topology `epoch`, with the key trends (SHOW SPLIT ADVICE's
  // monotonic test). A new epoch starts over (partitions split, merged or moved: the load
  // before says nothing about them now).
  void observe(Clock::time_point now, std::int64_t epoch, Rows rows, config::Duration window, Trends trends = {});
  // The counters' growth over the last window: from the newest look at least a window
  // old (of this epoch); nullopt before there is one.
  std::optional<Rows> window_load() const;
  // The key trends over the same window: the newest look's top key and sample, with the
  // keys offered and rising since window_load()'s first look — the trend counts from the
  // proxy's start, so a bulk load of increasing keys long ago would otherwise read as
  // keys that only increase now.
  Trends window_trends() const;
  // The advice computed from window_load() at the last look. Returns what to do about
  // the advice that has named the same partition (for splitting, or as monotonic) at
  // every look for at least a window: at most one split (the largest share), and none
  // within `interval` of the last one, nor without another shard to move to; at most one
  // merge (the coldest, advice reason "cold"), none within `interval` of the last one;
  // a note (monotonic, no_value) at most once per interval per partition. Splits and
  // merges come last.
  std::vector<AutoSplitAction> decide(const config::Config& config, const std::vector<SplitAdvice>& advice,
                                      config::Duration interval);
  // `a` was acted on (or logged) at the last look: its advice must hold a window again.
  void done(const AutoSplitAction& a);

 private:
  struct Look {
    Clock::time_point at;
    Rows rows;
    Trends trends;
  };
  enum class What : std::uint8_t { split, monotonic, merge };
  using Key = std::tuple<std::string, std::uint32_t, What>;  // distribution, partition, what about it
  static Key key_of(const SplitAdvice& a);

  std::int64_t epoch_ = -1;
  config::Duration window_{0};
  std::deque<Look> looks_;
  std::map<Key, Clock::time_point> since_;  // advice present at every look since
  std::map<Key, Clock::time_point> noted_;  // the last note about it
  std::optional<Clock::time_point> last_split_, last_merge_;
};

}  // namespace splitpoint::server
