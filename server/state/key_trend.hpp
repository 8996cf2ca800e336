// Which way a distribution's keys move (SHOW SPLIT ADVICE, SPEC §9): fed with the keys
// the hot-key summary is fed with (server/state/metrics.hpp keeps one per distribution
// and worker). Pure: no I/O, unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::server {

// Orders keys as range bounds are ordered (routing::split_range): as integers when both
// are integers, else as strings (byte order; ISO dates and timestamps sort right).
// <0, 0, >0.
int compare_keys(std::string_view a, std::string_view b);

// Counts the keys offered and the rising ones: those that enter the kTops largest keys
// offered so far (a few, not only the largest, so that writers with increasing keys of
// their own, interleaved, still rise). With keys that only increase (ids, timestamps)
// nearly every key rises; with keys drawn at random ever fewer (about kTops * ln n of
// n). Keeps a uniform sample of the keys offered
// (reservoir, deterministic), from which SHOW SPLIT ADVICE reads where a range's load
// sits. Bounded memory: the sample and the largest key.
class KeyTrend {
 public:
  static constexpr std::size_t kTops = 8;
  explicit KeyTrend(std::size_t sample_size = 128) : capacity_(sample_size) {}
  void add(std::string_view key);

  std::uint64_t offers() const { return offers_; }
  std::uint64_t rising() const { return rising_; }
  // The largest key offered ("" before any).
  const std::string& top() const { return tops_.empty() ? empty_ : tops_.back(); }
  const std::vector<std::string>& sample() const { return sample_; }

 private:
  std::size_t capacity_;
  std::uint64_t offers_ = 0, rising_ = 0;
  std::vector<std::string> tops_;  // the kTops largest distinct keys, ascending
  std::string empty_;
  std::vector<std::string> sample_;
  std::uint64_t rng_ = 0x9e3779b97f4a7c15ULL;  // splitmix64 state
};

}  // namespace splitpoint::server
