// Simple-protocol route plans by normalised text (routing/text_scan.hpp), bounded in
// bytes with least-recently-used eviction. route_simple runs on many threads: the
// cache is split into shards by key hash, each behind its own mutex, so threads only
// contend when they touch the same shard; a hit holds the lock for a hash lookup
// and a list splice.
#pragma once

#include <array>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "routing/plan.hpp"

namespace splitpoint::routing {

inline constexpr std::size_t kDefaultPlanCacheBytes = std::size_t{8} << 20;

class PlanCache {
 public:
  explicit PlanCache(std::size_t max_bytes = kDefaultPlanCacheBytes);

  std::shared_ptr<const Plan> find(std::string_view key, std::size_t hash);
  void insert(std::string_view key, std::size_t hash, std::shared_ptr<const Plan> plan);

  std::size_t bytes() const;    // current footprint (approximate)
  std::size_t entries() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const Plan> plan;
    std::size_t bytes = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::list<Entry> lru;  // most recently used first
    std::unordered_map<std::string_view, std::list<Entry>::iterator> index;  // views of Entry::key
    std::size_t bytes = 0;
  };
  static constexpr std::size_t kShards = 16;

  Shard& shard_for(std::size_t hash) { return shards_[(hash >> 7) % kShards]; }

  std::array<Shard, kShards> shards_;
  std::size_t shard_budget_;
};

}  // namespace splitpoint::routing
