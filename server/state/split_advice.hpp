// SHOW SPLIT ADVICE (SPEC §9): partitions whose load stands out, from this proxy's
// counters since start (SHOW PARTITIONS, SHOW HOT KEYS). Pure: no I/O, unit-tested.
#pragma once

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
  std::string reason;  // "queries", "rows_written", "last_range", "hot_key"
  double share = 0;    // the partition's (or key's) share of the distribution's count
  double even = 0;     // the partition's share divided by an even share (1/partitions)
  std::string advice;
};

// Statements (or rows) below this count in a distribution give no advice: too little
// traffic to tell a pattern from noise.
inline constexpr std::uint64_t kSplitAdviceMinimum = 100;
// A partition stands out at twice an even share.
inline constexpr double kSplitAdviceFactor = 2.0;

std::vector<SplitAdvice> split_advice(const config::Config& config, const std::vector<Metrics::PartitionRow>& partitions,
                                      const std::vector<Metrics::HotKeyRow>& hot_keys);

}  // namespace splitpoint::server
