// PRESPLIT (SPEC §9, #48) on a range distribution's ranges, metadata only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace splitpoint::routing {

// The ranges after splitting at n - 1 quantiles of `keys` (the existing keys, or a
// sample): the keys sorted (as integers when all of them are, else as strings), the key
// i/n of the way through them, for i = 1..n-1, split at as routing::split_range does; a
// quantile that is a bound already, the smallest key or the quantile before it is not
// added. Each new range is on its old range's shard. Refused (error) when n < 2, when the
// keys have fewer than n distinct values, or when no bound would be added.
struct Presplit {
  std::vector<config::Range> ranges;  // the distribution's ranges afterwards
  std::vector<std::string> bounds;    // the new bounds, ascending
  std::string error;
};
Presplit presplit_ranges(const std::vector<config::Range>& ranges, std::vector<std::string> keys, std::uint32_t n);

}  // namespace splitpoint::routing
