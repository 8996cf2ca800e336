// Which counter slot each logical partition counts in (SHOW PARTITIONS queries and
// rows_written, splitpoint_partition_*_total, SHOW SPLIT ADVICE). One per runtime: a
// session counts by the numbering it routes with, and the numbering changes when SPLIT
// or MERGE renumbers partitions (SPEC §9). A partition keeps its slots across such a
// change: a range partition is known by its lower bound, a hash partition by its
// modulus and remainder, a list partition by its number. The half of a split that keeps
// the number keeps the slots, the other half gets a new one; a merged partition reads
// both halves' slots and writes the lower-numbered one's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "routing/topology.hpp"

namespace splitpoint::server {

class PartitionSlots {
 public:
  static constexpr std::size_t kNone = ~std::size_t{0};

  // The first runtime's: a slot per partition, and room for as many again plus 1024
  // added later (beyond that, a new partition is not counted).
  explicit PartitionSlots(const routing::Topology& topo);
  // A later runtime's (a catalog epoch, a reload), from the one before it.
  PartitionSlots(const routing::Topology& topo, const PartitionSlots& previous);

  std::size_t capacity() const { return allocator_->capacity; }
  // The slot a statement on partition p of distribution d counts in; kNone: none.
  std::size_t slot(std::size_t d, std::uint32_t p) const;
  // The slots partition p of d reads (its own first; empty: none).
  const std::vector<std::size_t>& slots(std::size_t d, std::uint32_t p) const;

 private:
  struct Allocator {
    std::size_t capacity = 0;
    std::atomic<std::size_t> next{0};
  };
  struct Distribution {
    std::string name;
    config::Method method = config::Method::hash;
    std::vector<std::optional<std::string>> lower;  // range: each partition's lower bound
    std::vector<config::HashPartition> hash;        // hash: each partition's modulus and remainder
    std::vector<std::vector<std::size_t>> slots;    // per partition
  };
  std::vector<std::size_t> take();  // a new slot ({} when none is left)
  using HashNumbers = std::map<std::pair<std::uint32_t, std::uint32_t>, std::size_t>;  // (modulus, remainder) -> number
  std::vector<std::size_t> hash_slots(const Distribution& was, const HashNumbers& before,
                                      const config::HashPartition& hp, std::uint32_t p);
  void add(const routing::Topology& topo, const PartitionSlots* previous);

  std::shared_ptr<Allocator> allocator_;
  std::vector<Distribution> distributions_;
};

}  // namespace splitpoint::server
