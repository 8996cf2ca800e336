#include "routing/plan_cache.hpp"

namespace splitpoint::routing {

namespace {
constexpr std::size_t kEntryOverhead = 128;  // list node, index node, control block
}

PlanCache::PlanCache(std::size_t max_bytes) : shard_budget_(max_bytes / kShards) {}

std::shared_ptr<const Plan> PlanCache::find(std::string_view key, std::size_t hash) {
  Shard& s = shard_for(hash);
  std::lock_guard lock(s.mu);
  auto it = s.index.find(key);
  if (it == s.index.end()) return nullptr;
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  return it->second->plan;
}

void PlanCache::insert(std::string_view key, std::size_t hash, std::shared_ptr<const Plan> plan) {
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

std::size_t PlanCache::bytes() const {
  std::size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.bytes;
  }
  return n;
}

std::size_t PlanCache::entries() const {
  std::size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.lru.size();
  }
  return n;
}

}  // namespace splitpoint::routing
