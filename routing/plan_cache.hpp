// Plans by key, bounded in bytes with least-recently-used eviction: route plans by
// normalised text (routing/text_scan.hpp) or by exact text, scatter plans by exact text
// or by shape (routing/merge/scatter_shape.hpp).
// Lookups run on many threads: the cache is split into shards by key hash, each
// behind its own mutex, so threads only contend when they touch the same shard; a hit
// holds the lock for a hash lookup and a list splice.
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

// T has a `bytes` member: its rough memory footprint.
template <typename T>
class BoundedCache {
 public:
  explicit BoundedCache(std::size_t max_bytes = kDefaultPlanCacheBytes) : shard_budget_(max_bytes / kShards) {}

  std::shared_ptr<const T> find(std::string_view key, std::size_t hash) {
    Shard& s = shard_for(hash);
    std::lock_guard lock(s.mu);
    auto it = s.index.find(key);
    if (it == s.index.end()) return nullptr;
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return it->second->plan;
  }

  void insert(std::string_view key, std::size_t hash, std::shared_ptr<const T> plan) {
    const std::size_t bytes = 2 * key.size() + plan->bytes + kEntryOverhead;
    if (bytes > shard_budget_) return;  // would evict everything else
    Shard& s = shard_for(hash);
    std::lock_guard lock(s.mu);
    if (s.index.count(key) != 0) return;  // another thread got there first
    while (s.bytes + bytes > shard_budget_ && !s.lru.empty()) {
      Entry& victim = s.lru.back();
      s.bytes -= victim.bytes;
      s.index.erase(victim.key);
      s.lru.pop_back();
    }
    s.lru.push_front(Entry{std::string(key), std::move(plan), bytes});
    s.index.emplace(s.lru.front().key, s.lru.begin());
    s.bytes += bytes;
  }

  void clear() {
    for (Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      s.index.clear();
      s.lru.clear();
      s.bytes = 0;
    }
  }

  std::size_t bytes() const { return sum([](const Shard& s) { return s.bytes; }); }  // current footprint (approximate)
  std::size_t entries() const { return sum([](const Shard& s) { return s.lru.size(); }); }

 private:
  static constexpr std::size_t kEntryOverhead = 128;  // list node, index node, control block
  struct Entry {
    std::string key;
    std::shared_ptr<const T> plan;
    std::size_t bytes = 0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::list<Entry> lru;  // most recently used first
    std::unordered_map<std::string_view, typename std::list<Entry>::iterator> index;  // views of Entry::key
    std::size_t bytes = 0;
  };
  static constexpr std::size_t kShards = 16;

  Shard& shard_for(std::size_t hash) { return shards_[(hash >> 7) % kShards]; }
  template <typename F>
  std::size_t sum(F f) const {
    std::size_t n = 0;
    for (const Shard& s : shards_) {
      std::lock_guard lock(s.mu);
      n += f(s);
    }
    return n;
  }

  std::array<Shard, kShards> shards_;
  std::size_t shard_budget_;
};

using PlanCache = BoundedCache<Plan>;

}  // namespace splitpoint::routing
