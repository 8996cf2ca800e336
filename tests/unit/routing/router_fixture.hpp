// Shared set-up for the router tests: the SPEC §2 example distributions over two
// shards, table shapes as a shard's catalog would give them, and helpers that compute
// expected partitions with the PostgreSQL-verified hash functions (routing/hash.hpp).
#pragma once

#include <catch2/catch.hpp>
#include <pg_query.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "routing/hash.hpp"
#include "routing/router.hpp"

namespace splitpoint::routing::test {

// Parses a rewritten statement back (with PostgreSQL's parser) and returns its JSON
// tree, so a test checks the statement, not its spelling.
inline std::string parse_json(const std::string& sql) {
  PgQueryParseResult r = pg_query_parse(sql.c_str());
  std::string out = r.error ? std::string("ERROR: ") + r.error->message : r.parse_tree;
  pg_query_free_parse_result(r);
  return out;
}

inline std::string config_yaml(std::string_view unlisted = "reference", bool list_default = true) {
  std::string y = R"(
shards:
  - name: s0
    port: 5433
  - name: s1
    port: 5434
distributions:
  - name: by_user
    method: hash
    partitions: 64
    placement:
      s0: 0-31
      s1: 32-63
    tables:
      users: id
      orders: user_id
      sessions: token
  - name: by_id_range
    method: range
    ranges:
      - { upto: 1000, shard: s0 }
      - { upto: 2000, shard: s1 }
      - { shard: s1 }
    tables:
      events: id
  - name: by_region
    method: list
    lists: { s0: [jp, kr], s1: [us, eu] }
)";
  if (list_default) y += "    default: s0\n";
  y += R"(    tables:
      stores: region
reference_tables: [countries]
unlisted_tables: )";
  y += unlisted;
  y += "\n";
  return y;
}

inline config::Config load_config(std::string_view unlisted = "reference", bool list_default = true) {
  config::LoadResult r = config::load_string(config_yaml(unlisted, list_default));
  for (const auto& e : r.errors) FAIL("config line " << e.line << ": " << e.message);
  REQUIRE(r.config);
  return *r.config;
}

// The partition and shard of a by_user key (bigint), as PostgreSQL places it.
inline std::uint32_t user_partition(std::string_view key, KeyType type = KeyType::int8) {
  auto h = hash_key_text(type, key);
  REQUIRE(h);
  return partition_for_hash(*h, 64);
}
inline std::size_t user_shard(std::string_view key) { return user_partition(key) < 32 ? 0 : 1; }

// The first key from `from` upwards on `shard`.
inline long long user_key_on(std::size_t shard, long long from = 1) {
  for (long long k = from;; ++k)
    if (user_shard(std::to_string(k)) == shard) return k;
}

struct Fixture {
  explicit Fixture(std::string_view unlisted = "reference", bool list_default = true)
      : config(load_config(unlisted, list_default)), router(config) {
    shapes_["users"] = {{"id", "name", "email"}, {"bigint", "text", "text"}};
    shapes_["orders"] = {{"id", "user_id", "total"}, {"bigint", "bigint", "numeric(10,2)"}};
    shapes_["sessions"] = {{"token", "user_name"}, {"character varying(20)", "text"}};
    shapes_["events"] = {{"id", "payload"}, {"integer", "text"}};
    shapes_["stores"] = {{"region", "name"}, {"text", "text"}};
    lookup = [this](std::string_view t) -> const TableShape* {
      auto it = shapes_.find(std::string(t));
      return it == shapes_.end() ? nullptr : &it->second;
    };
  }

  // Extended protocol with text parameters (nullopt = NULL).
  Route prepared(std::string_view sql, std::vector<std::optional<std::string>> params = {},
                 std::vector<std::int16_t> formats = {}, std::vector<std::int32_t> types = {}) {
    auto plan = router.plan(sql, types);
    std::vector<std::optional<std::string_view>> views;
    for (const auto& p : params) views.push_back(p ? std::optional<std::string_view>(*p) : std::nullopt);
    BoundParams bp{views, formats, types};
    return router.route(*plan, bp, session, lookup);
  }
  // Simple protocol, through the plan cache.
  Route simple(std::string_view sql) { return router.route_simple(sql, session, lookup); }
  // Both ways must agree; returns the simple-protocol route.
  Route both(std::string_view sql) {
    Route a = prepared(sql);
    Route b = simple(sql);
    Route c = simple(sql);  // now a cache hit, when cacheable
    CHECK(a.kind == b.kind);
    CHECK(a.shards == b.shards);
    CHECK(b.kind == c.kind);
    CHECK(b.shards == c.shards);
    CHECK(b.key_values == c.key_values);
    CHECK(b.message == c.message);
    return b;
  }

  std::vector<std::string> changed(std::string_view sql) { return router.tables_changed_by(*router.plan(sql, {})); }

  config::Config config;
  Router router;
  SessionRouting session;
  std::map<std::string, TableShape> shapes_;
  ShapeLookup lookup;
};

inline std::vector<std::size_t> shards(std::initializer_list<std::size_t> s) { return s; }

// Big-endian bytes of an integer, as a binary-format Bind parameter.
inline std::string be(long long v, int bytes) {
  std::string out(static_cast<std::size_t>(bytes), '\0');
  for (int i = bytes - 1; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

}  // namespace splitpoint::routing::test
