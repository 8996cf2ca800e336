// KeyTrend: which way a distribution's keys move, for SHOW SPLIT ADVICE's "monotonic".
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "server/state/key_trend.hpp"

using splitpoint::server::compare_keys;
using splitpoint::server::KeyTrend;

TEST_CASE("compare_keys orders integers as numbers and other keys as bytes") {
  CHECK(compare_keys("999", "1000") < 0);
  CHECK(compare_keys("-5", "3") < 0);
  CHECK(compare_keys("-50", "-6") < 0);
  CHECK(compare_keys("007", "7") == 0);
  CHECK(compare_keys("+12", "11") > 0);
  CHECK(compare_keys("2025-01-02", "2025-01-10") < 0);
  CHECK(compare_keys("b", "abc") > 0);
  CHECK(compare_keys("12345678901234567890123", "9") > 0);  // beyond 64 bits
}

TEST_CASE("increasing keys nearly all rise; random keys hardly any") {
  KeyTrend up;
  for (int i = 1; i <= 1000; ++i) up.add(std::to_string(1000 + i));
  CHECK(up.offers() == 1000);
  CHECK(up.rising() == 1000);
  CHECK(up.top() == "2000");

  KeyTrend random;
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) random.add(std::to_string(rng() % 500));
  CHECK(random.rising() < 100);  // about 8 * ln(1000 / 8) + 8 entries into the top 8
  CHECK(random.top() == "499");
}

TEST_CASE("writers' increasing keys, interleaved and a little out of order, still rise") {
  KeyTrend t;
  for (int i = 0; i < 500; ++i) {  // a shared sequence, the later writer's key sometimes first
    t.add(std::to_string(1000 + 2 * i + (i % 3 == 0)));
    t.add(std::to_string(1000 + 2 * i + (i % 3 != 0)));
  }
  CHECK(t.rising() == 1000);  // each enters the 8 largest keys so far
  // Two writers with key spaces of their own: the lower one's keys stay below the 8
  // largest, so half rise (still kMonotonicShare of the rows written).
  KeyTrend apart;
  for (int i = 0; i < 500; ++i) {
    apart.add(std::to_string(1000 + i));
    apart.add(std::to_string(1000000 + i));
  }
  CHECK(apart.rising() >= 500);
  CHECK(apart.rising() < 520);
  KeyTrend same;  // a key offered again does not rise again
  for (int i = 0; i < 100; ++i) same.add("42");
  CHECK(same.rising() == 1);
}

TEST_CASE("the sample holds at most its size, drawn from every part of the stream") {
  KeyTrend t(64);
  for (int i = 0; i < 10000; ++i) t.add(std::to_string(i));
  REQUIRE(t.sample().size() == 64);
  int late = 0;
  for (const auto& k : t.sample()) late += std::stoi(k) >= 5000;
  CHECK(late > 16);
  CHECK(late < 48);
}
