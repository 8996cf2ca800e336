// TrimPolicy: when a worker gives the heap of ended sessions back (malloc_trim).
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "server/state/heap_trim.hpp"

using splitpoint::server::TrimPolicy;

namespace {

void rise(TrimPolicy& p, std::size_t from, std::size_t to) {
  for (std::size_t n = from; n <= to; ++n) CHECK_FALSE(p.note(n));
}

// Sessions fall one by one from `from` to `to`: the counts at which it trims.
std::vector<std::size_t> fall(TrimPolicy& p, std::size_t from, std::size_t to) {
  std::vector<std::size_t> at;
  for (std::size_t n = from; n-- > to;)
    if (p.note(n)) at.push_back(n);
  return at;
}

}  // namespace

TEST_CASE("5000 clients leaving: a trim at each halving while at least 256 left since the last") {
  TrimPolicy p;
  rise(p, 1, 5000);
  CHECK(fall(p, 5000, 0) == std::vector<std::size_t>{2500, 1250, 625, 312, 56});
}

TEST_CASE("clients coming and going in small numbers never trim") {
  TrimPolicy p;
  rise(p, 1, 200);
  CHECK(fall(p, 200, 0).empty());
  for (int round = 0; round < 100; ++round) {
    rise(p, 1000, 1100);
    CHECK(fall(p, 1100, 1000).empty());
  }
}

TEST_CASE("after a trim the peak starts again from what is left") {
  TrimPolicy p;
  rise(p, 1, 1000);
  CHECK(fall(p, 1000, 400) == std::vector<std::size_t>{500});
  rise(p, 400, 900);
  CHECK(fall(p, 900, 0) == std::vector<std::size_t>{450, 194});
}
