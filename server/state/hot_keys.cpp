#include "server/state/hot_keys.hpp"

#include <algorithm>
#include <functional>

namespace splitpoint::server {

HotKeys::HotKeys(std::size_t capacity) : capacity_(capacity) {
  std::size_t size = 8;
  while (size < 2 * capacity) size *= 2;
  index_.assign(size, -1);
}

// The index position of `key`'s counter, or the empty one where it would go.
std::size_t HotKeys::position(std::size_t hash, std::string_view key) const {
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const std::int32_t slot = index_[i];
    if (slot < 0 || (hashes_[slot] == hash && keys_[slot] == key)) return i;
  }
}

// Takes a counter's key out of the index, moving back the entries after it that
// would no longer be found (deletion in linear probing).
void HotKeys::unindex(std::size_t slot) {
  const std::size_t mask = index_.size() - 1;
  std::size_t hole = hashes_[slot] & mask;
  while (index_[hole] != static_cast<std::int32_t>(slot)) hole = (hole + 1) & mask;
  for (std::size_t j = (hole + 1) & mask; index_[j] >= 0; j = (j + 1) & mask) {
    const std::size_t home = hashes_[index_[j]] & mask;
    // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
    const bool stays = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = -1;
}

void HotKeys::add(std::string_view key) {
  if (capacity_ == 0) return;
  const std::size_t h = std::hash<std::string_view>{}(key);
  std::size_t at = position(h, key);
  if (index_[at] >= 0) {
    ++counts_[index_[at]];
    return;
  }
  const std::size_t n = keys_.size();
  if (n < capacity_) {
    index_[at] = static_cast<std::int32_t>(n);
    hashes_.push_back(h);
    keys_.emplace_back(key);
    counts_.push_back(1);
    errors_.push_back(0);
    return;
  }
  // Replace a smallest counter; the newcomer inherits its count as possible error.
  std::size_t m = n;
  for (int pass = 0; pass < 2 && m == n; ++pass) {
    for (std::size_t k = 0; k < n; ++k, cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1) {
      if (counts_[cursor_] == min_) {
        m = cursor_;
        break;
      }
    }
    if (m == n) min_ = *std::min_element(counts_.begin(), counts_.end());
  }
  unindex(m);
  hashes_[m] = h;
  keys_[m].assign(key);
  errors_[m] = counts_[m];
  ++counts_[m];
  index_[position(h, key)] = static_cast<std::int32_t>(m);
}

std::vector<HotKeys::Entry> HotKeys::top() const {
  std::vector<Entry> v;
  for (std::size_t i = 0; i < keys_.size(); ++i) v.push_back({keys_[i], counts_[i], errors_[i]});
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.count > b.count; });
  return v;
}

}  // namespace splitpoint::server
