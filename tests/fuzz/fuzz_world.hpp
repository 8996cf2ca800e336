// What the routing fuzz targets share: a configuration with every kind of
// distribution over three shards (hash, range, list, reference tables) and the table
// shapes a shard's catalog would give, as tests/unit/routing/router_fixture.hpp has.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "routing/router.hpp"

namespace splitpoint::fuzz {

inline constexpr const char* kConfig = R"(
shards: [ { name: s0 }, { name: s1 }, { name: s2 } ]
distributions:
  - { name: by_user, method: hash, partitions: 16, tables: { users: id, orders: user_id, sessions: token } }
  - name: by_range
    method: range
    ranges: [ { upto: 100, shard: s0 }, { upto: 1000, shard: s1 }, { shard: s2 } ]
    tables: { events: id }
  - { name: by_region, method: list, lists: { s0: [jp, kr], s1: [us, eu] }, default: s2, tables: { stores: region } }
reference_tables: [countries]
)";

[[noreturn]] inline void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::abort();
}

inline const config::Config& fuzz_config() {
  static const config::Config config = [] {
    auto r = config::load_string(kConfig);
    if (!r.config) fail("fuzz", "the fuzz configuration does not load");
    return *r.config;
  }();
  return config;
}

inline const routing::ShapeLookup& fuzz_shapes() {
  static const std::map<std::string, routing::TableShape, std::less<>> shapes = {
      {"users", {{"id", "name", "email"}, {"bigint", "text", "text"}}},
      {"orders", {{"id", "user_id", "total"}, {"bigint", "bigint", "numeric(10,2)"}}},
      {"sessions", {{"token", "user_name"}, {"character varying(20)", "text"}}},
      {"events", {{"id", "payload"}, {"integer", "text"}}},
      {"stores", {{"region", "name"}, {"text", "text"}}},
      {"countries", {{"code", "name"}, {"text", "text"}}},
  };
  static const routing::ShapeLookup lookup = [](std::string_view t) -> const routing::TableShape* {
    auto it = shapes.find(t);
    return it == shapes.end() ? nullptr : &it->second;
  };
  return lookup;
}

}  // namespace splitpoint::fuzz
