#include "server/state/key_trend.hpp"

#include <algorithm>

namespace splitpoint::server {

namespace {

// An integer as range bounds spell them: an optional sign, then digits. The digits
// without leading zeros; nullopt-like false when not one.
bool integer_parts(std::string_view s, bool& negative, std::string_view& digits) {
  negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return false;
  // (A loop, not find_first_not_of: that is a memchr over the set per byte, and this
  // runs for every routed key, KeyTrend::add.)
  for (char c : s)
    if (c < '0' || c > '9') return false;
  while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
  digits = s;
  if (digits == "0") negative = false;
  return true;
}

int compare_magnitude(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : (a == b ? 0 : 1);
}

}  // namespace

int compare_keys(std::string_view a, std::string_view b) {
  bool na = false, nb = false;
  std::string_view da, db;
  if (integer_parts(a, na, da) && integer_parts(b, nb, db)) {
    if (na != nb) return na ? -1 : 1;
    const int m = compare_magnitude(da, db);
    return na ? -m : m;
  }
  const int c = a.compare(b);
  return c < 0 ? -1 : (c == 0 ? 0 : 1);
}

void KeyTrend::add(std::string_view key) {
  // Rising: above the smallest of the kTops largest (or one of the first kTops), and
  // not one of them already. Most keys of a random stream are below the smallest: one
  // comparison says so; a key above the largest (ids that only grow) needs one more.
  const bool full = tops_.size() >= kTops;
  if (!full || compare_keys(key, tops_.front()) > 0) {
    auto at = tops_.end();
    if (tops_.empty() || compare_keys(key, tops_.back()) <= 0)
      at = std::lower_bound(tops_.begin(), tops_.end(), key,
                            [](const std::string& a, std::string_view b) { return compare_keys(a, b) < 0; });
    if ((at == tops_.end() || compare_keys(*at, key) != 0) && (!full || at != tops_.begin())) {
      ++rising_;
      tops_.insert(at, std::string(key));
      if (tops_.size() > kTops) tops_.erase(tops_.begin());
    }
  }
  ++offers_;
  if (sample_.size() < capacity_) {
    sample_.emplace_back(key);
    return;
  }
  // splitmix64: the offer replaces a sampled key with probability capacity / offers.
  rng_ += 0x9e3779b97f4a7c15ULL;
  std::uint64_t z = rng_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const std::uint64_t j = z % offers_;
  if (j < capacity_) sample_[j].assign(key);
}

}  // namespace splitpoint::server
