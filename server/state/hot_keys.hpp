// The hot-key summary (server/state/metrics.hpp keeps one per distribution and worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::server {

// Approximate top-k of a stream of keys (space-saving): bounded memory, the heavy
// hitters are always among the k entries, counts over-estimate by at most `error`.
// Flat arrays, because a key is offered for every keyed statement: a key is found
// through a hash index (not by a look at every counter); a smallest counter is looked
// for from where the last one was found (counts only grow, so the smallest value is
// rescanned only once none is left at it); an offer allocates nothing once the k
// entries exist (for keys short enough for std::string's inline buffer).
class HotKeys {
 public:
  explicit HotKeys(std::size_t capacity = 64);
  void add(std::string_view key);
  struct Entry {
    std::string key;
    std::uint64_t count = 0;
    std::uint64_t error = 0;
  };
  std::vector<Entry> top() const;  // sorted by count, descending

 private:
  std::size_t position(std::size_t hash, std::string_view key) const;
  void unindex(std::size_t slot);

  std::size_t capacity_;
  // Where each key's counter is: open addressing by hash, linear probing, -1 = empty;
  // at least twice the capacity.
  std::vector<std::int32_t> index_;
  std::vector<std::size_t> hashes_;  // parallel arrays, one slot per counter
  std::vector<std::string> keys_;
  std::vector<std::uint64_t> counts_, errors_;
  std::uint64_t min_ = 0;   // no counter is below it
  std::size_t cursor_ = 0;  // where the next smallest counter is looked for
};

}  // namespace splitpoint::server
