#include "server/state/partition_slots.hpp"

#include <map>

namespace splitpoint::server {

namespace {

// Every row hash in `inner` is in `outer`.
bool contains(const config::HashPartition& outer, const config::HashPartition& inner) {
  return inner.modulus % outer.modulus == 0 && inner.remainder % outer.modulus == outer.remainder;
}

std::size_t partitions(const routing::Topology& topo) {
  std::size_t n = 0;
  for (std::size_t d = 0; d < topo.config().distributions.size(); ++d) n += topo.partition_count(d);
  return n;
}

}  // namespace

PartitionSlots::PartitionSlots(const routing::Topology& topo) : allocator_(std::make_shared<Allocator>()) {
  allocator_->capacity = 2 * partitions(topo) + 1024;
  add(topo, nullptr);
}

PartitionSlots::PartitionSlots(const routing::Topology& topo, const PartitionSlots& previous)
    : allocator_(previous.allocator_) {
  add(topo, &previous);
}

std::vector<std::size_t> PartitionSlots::take() {
  const auto slot = allocator_->next.fetch_add(1, std::memory_order_relaxed);
  if (slot < allocator_->capacity) return {slot};
  return {};
}

void PartitionSlots::add(const routing::Topology& topo, const PartitionSlots* previous) {
  const auto& config = topo.config();
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    const auto& dist = config.distributions[d];
    Distribution out{dist.name, dist.method, {}, {}};
    const std::uint32_t n = topo.partition_count(d);
    if (dist.method == config::Method::range)
      for (std::uint32_t p = 0; p < n; ++p) out.lower.push_back(p == 0 ? std::nullopt : dist.ranges[p - 1].upto);
    if (dist.method == config::Method::hash)
      for (std::uint32_t p = 0; p < n; ++p) out.hash.push_back(dist.hash_partition(p));
    const Distribution* was = nullptr;
    if (previous)
      for (const auto& old : previous->distributions_)
        if (old.name == dist.name && old.method == dist.method) was = &old;
    if (!was) {
      for (std::uint32_t p = 0; p < n; ++p) out.slots.push_back(take());
    } else if (dist.method == config::Method::list) {
      for (std::uint32_t p = 0; p < n; ++p) out.slots.push_back(p < was->slots.size() ? was->slots[p] : take());
    } else if (dist.method == config::Method::hash) {
      HashNumbers before;
      for (std::size_t q = 0; q < was->hash.size(); ++q) before.emplace(std::pair{was->hash[q].modulus, was->hash[q].remainder}, q);
      for (std::uint32_t p = 0; p < n; ++p) out.slots.push_back(hash_slots(*was, before, out.hash[p], p));
    } else {
      // A range is known by its lower bound. One that no longer begins a range was merged
      // into the range before it: that one reads its slots too.
      std::map<std::optional<std::string>, std::uint32_t> now;
      for (std::uint32_t p = 0; p < n; ++p) now.emplace(out.lower[p], p);
      out.slots.resize(n);
      std::uint32_t into = 0;
      for (std::size_t q = 0; q < was->slots.size(); ++q) {
        auto it = now.find(was->lower[q]);
        if (it != now.end()) into = it->second;
        auto& to = out.slots[into];
        to.insert(to.end(), was->slots[q].begin(), was->slots[q].end());
      }
      for (auto& s : out.slots)
        if (s.empty()) s = take();
    }
    distributions_.push_back(std::move(out));
  }
}

// A hash partition's slots: those of the same partition before (renumbered or not);
// else those of the two halves merged into it, the lower-numbered one's first; else,
// for the half of a split that kept its number, that partition's; else a new one.
std::vector<std::size_t> PartitionSlots::hash_slots(const Distribution& was, const HashNumbers& before,
                                                    const config::HashPartition& hp, std::uint32_t p) {
  if (auto it = before.find({hp.modulus, hp.remainder}); it != before.end()) return was.slots[it->second];
  auto lo = before.find({2 * hp.modulus, hp.remainder}), hi = before.find({2 * hp.modulus, hp.remainder + hp.modulus});
  if (lo != before.end() && hi != before.end()) {
    if (lo->second > hi->second) std::swap(lo, hi);
    auto merged = was.slots[lo->second];
    merged.insert(merged.end(), was.slots[hi->second].begin(), was.slots[hi->second].end());
    return merged;
  }
  if (p < was.hash.size() && contains(was.hash[p], hp)) return was.slots[p];
  return take();
}

std::size_t PartitionSlots::slot(std::size_t d, std::uint32_t p) const {
  const auto& s = slots(d, p);
  return s.empty() ? kNone : s.front();
}

const std::vector<std::size_t>& PartitionSlots::slots(std::size_t d, std::uint32_t p) const {
  static const std::vector<std::size_t> none;
  if (d >= distributions_.size() || p >= distributions_[d].slots.size()) return none;
  return distributions_[d].slots[p];
}

}  // namespace splitpoint::server
