// The hot-key counters (SHOW HOT KEYS, splitpoint_hot_key_hits): the space-saving
// summary, with counters found through a hash index.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "server/state/metrics.hpp"

using splitpoint::server::HotKeys;

namespace {

// The summary as a plain search over the counters: what HotKeys must agree with.
struct Reference {
  explicit Reference(std::size_t capacity) : capacity(capacity) {}
  void add(const std::string& key) {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return void(++counts[i]);
    if (keys.size() < capacity) {
      keys.push_back(key);
      counts.push_back(1);
      errors.push_back(0);
      return;
    }
    const std::size_t n = keys.size();
    std::size_t m = n;
    for (int pass = 0; pass < 2 && m == n; ++pass) {
      for (std::size_t k = 0; k < n; ++k, cursor = cursor + 1 == n ? 0 : cursor + 1)
        if (counts[cursor] == min) {
          m = cursor;
          break;
        }
      if (m == n) min = *std::min_element(counts.begin(), counts.end());
    }
    keys[m] = key;
    errors[m] = counts[m];
    ++counts[m];
  }
  std::size_t capacity;
  std::vector<std::string> keys;
  std::vector<std::uint64_t> counts, errors;
  std::uint64_t min = 0;
  std::size_t cursor = 0;
};

std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> as_map(const std::vector<HotKeys::Entry>& top) {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> m;
  for (const auto& e : top) m[e.key] = {e.count, e.error};
  return m;
}

}  // namespace

TEST_CASE("hot keys: counters agree with a plain search, through many replacements", "[metrics]") {
  for (std::size_t capacity : {1, 3, 8, 64}) {
    HotKeys hot(capacity);
    Reference ref(capacity);
    std::mt19937 rng(static_cast<unsigned>(capacity));
    // A few hot keys among many cold ones, so counters are replaced all the time.
    std::uniform_int_distribution<int> pick(0, 99), cold(0, 5000);
    for (int i = 0; i < 50000; ++i) {
      const int p = pick(rng);
      const std::string key = p < 30 ? "hot" + std::to_string(p % 3) : std::to_string(cold(rng));
      hot.add(key);
      ref.add(key);
    }
    std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> want;
    for (std::size_t i = 0; i < ref.keys.size(); ++i) want[ref.keys[i]] = {ref.counts[i], ref.errors[i]};
    INFO("capacity " << capacity);
    CHECK(as_map(hot.top()) == want);
  }
}

TEST_CASE("hot keys: the hottest keys come first with their counts", "[metrics]") {
  HotKeys hot(8);
  for (int i = 0; i < 1000; ++i) {
    hot.add("a");
    if (i % 2 == 0) hot.add("b");
    hot.add("cold" + std::to_string(i));
  }
  const auto top = hot.top();
  REQUIRE(top.size() == 8);
  CHECK(top[0].key == "a");
  CHECK(top[0].count - top[0].error <= 1000);
  CHECK(top[0].count >= 1000);
  CHECK(top[1].key == "b");
  CHECK(top[1].count >= 500);
}

TEST_CASE("hot keys: no capacity counts nothing", "[metrics]") {
  HotKeys hot(0);
  hot.add("a");
  CHECK(hot.top().empty());
}
