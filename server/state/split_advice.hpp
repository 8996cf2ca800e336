// SHOW SPLIT ADVICE (SPEC §9): partitions whose load stands out, from this proxy's
// counters since start (SHOW PARTITIONS, SHOW HOT KEYS), and keys that only increase
// (the key trend, server/state/key_trend.hpp). Pure: no I/O, unit-tested.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "server/state/metrics.hpp"

namespace splitpoint::server {

struct SplitAdvice {
  std::string distribution;
  std::optional<std::uint32_t> partition;  // none for a hot key
  std::string shard;
  std::string reason;  // "queries", "rows_written", "last_range", "monotonic", "hot_key"
  double share = 0;    // the partition's (or key's) share of the distribution's count
  double even = 0;     // the partition's share divided by an even share (1/partitions)
  std::string advice;
  // A range partition's load advice: the median of its sampled keys, where SPLIT RANGE
  // would split it ("" when there is none: too few sampled keys, or half of them one key).
  std::string split_at;
  // The shard the advice would move it (or its hotter half) to: the one with the fewest
  // of the distribution's statements and rows written, other than its own.
  std::string move_to;
};

// Statements (or rows) below this count in a distribution give no advice: too little
// traffic to tell a pattern from noise.
inline constexpr std::uint64_t kSplitAdviceMinimum = 100;
// A partition (or key) stands out at twice an even share, or at kSplitAdviceDominant of
// the distribution's count when that is less: with two or three partitions (two times
// 1/2 is everything; two times 1/3 is 0.67), 60% of the load on one is dominant.
inline constexpr double kSplitAdviceFactor = 2.0;
inline constexpr double kSplitAdviceDominant = 0.6;
// The share a partition (or key) stands out at, of `parts` even shares.
inline double split_advice_threshold(double parts) {
  return std::min(kSplitAdviceFactor / parts, kSplitAdviceDominant);
}
// Keys only increase, in a range distribution, when at least kSplitAdviceMinimum keys
// rose (entered the few largest so far, KeyTrend) and they are at least
// kMonotonicShare of the rows written to the range holding the largest key: new rows
// go to the top of the key space, whatever share of the load that is.
inline constexpr double kMonotonicShare = 0.5;

// `trends`: the distributions' key trends (without one, or for rows it saw too few keys
// of, monotonic keys are only guessed from writes piling onto the last range,
// "last_range").
std::vector<SplitAdvice> split_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& partitions,
                                      const std::vector<Metrics::HotKeyRow>& hot_keys,
                                      const std::vector<Metrics::KeyTrendRow>& trends = {});

}  // namespace splitpoint::server
