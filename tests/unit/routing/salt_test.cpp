// Salted distributions (SPEC §13, docs/operations.md "Salting hot keys"): the bucket and
// the (key, bucket) row hash against figures PostgreSQL 15 gave, and which partitions
// statements reach.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "config/config.hpp"
#include "routing/hash.hpp"
#include "routing/router.hpp"
#include "routing/topology.hpp"

using namespace splitpoint;
using namespace splitpoint::routing;

namespace {

const char* kSalted = R"(
shards:
  - { name: s0, port: 5433 }
  - { name: s1, port: 5434 }
  - { name: s2, port: 5435 }
distributions:
  - name: by_product
    method: hash
    partitions: 1000
    tables: { sales: product_id, returns: product_id }
    salt: { column: order_id, buckets: 8 }
  - name: by_tag
    method: hash
    partitions: 8
    tables: { tagged: tag }
    salt: { column: code, buckets: 8, keys: [hot] }
)";

config::Config salted_config() {
  config::LoadResult r = config::load_string(kSalted);
  for (const auto& e : r.errors) FAIL("config line " << e.line << ": " << e.message);
  REQUIRE(r.config);
  return *r.config;
}

// The partition of (key, bucket) as PostgreSQL's PARTITION BY HASH (key bigint, b int4) places it.
std::uint32_t salted_partition(std::string_view key, std::uint32_t bucket, std::uint32_t modulus) {
  auto h = hash_key_text(KeyType::int8, key);
  REQUIRE(h);
  return partition_for_hash(salted_row_hash(*h, bucket), modulus);
}

struct SaltFixture {
  SaltFixture() : config(salted_config()), router(config), topo(config) {
    shapes_["sales"] = {{"product_id", "order_id", "qty"}, {"bigint", "bigint", "integer"}};
    shapes_["returns"] = {{"product_id", "order_id"}, {"bigint", "bigint"}};
    shapes_["tagged"] = {{"tag", "code"}, {"text", "text"}};
    lookup = [this](std::string_view t) -> const TableShape* {
      auto it = shapes_.find(std::string(t));
      return it == shapes_.end() ? nullptr : &it->second;
    };
  }
  Route simple(std::string_view sql) { return router.route_simple(sql, session, lookup); }
  Route prepared(std::string_view sql, std::vector<std::optional<std::string>> params) {
    auto plan = router.plan(sql, {});
    std::vector<std::optional<std::string_view>> views(params.begin(), params.end());
    BoundParams bp{views, {}, {}};
    return router.route(*plan, bp, session, lookup);
  }
  std::set<std::uint32_t> parts(const Route& r) {
    std::set<std::uint32_t> out;
    for (const auto& p : r.partitions) out.insert(p.partition);
    return out;
  }
  std::uint32_t bucket(std::string_view order_id) {
    auto b = topo.bucket_of(0, column_type("bigint"), std::string(order_id));
    REQUIRE(b);
    return *b;
  }
  config::Config config;
  Router router;
  Topology topo;
  SessionRouting session;
  std::map<std::string, TableShape> shapes_;
  ShapeLookup lookup;
};

}  // namespace

TEST_CASE("the (key, bucket) row hash is PostgreSQL's two-column hash", "[salt][hash]") {
  // SELECT r FROM generate_series(0, 999) r WHERE satisfies_hash_partition(
  //   'h2'::regclass, 1000, r, k, b)  with h2 (k bigint, b int4) PARTITION BY HASH (k, b)
  CHECK(salted_partition("1", 0, 1000) == 151);
  CHECK(salted_partition("1", 1, 1000) == 887);
  CHECK(salted_partition("1", 7, 1000) == 790);
  CHECK(salted_partition("42", 3, 1000) == 63);
  CHECK(salted_partition("-5", 2, 1000) == 706);
}

TEST_CASE("a salt value's bucket is its one-column hash partition", "[salt][hash]") {
  // satisfies_hash_partition with MODULUS 8 on a one-column text / bigint table.
  const config::Config c = salted_config();
  Topology topo(c);
  auto bucket = [&](const char* type, std::optional<std::string> v) { return topo.bucket_of(0, column_type(type), v); };
  CHECK(bucket("text", "a") == 6u);
  CHECK(bucket("text", "order-17") == 7u);
  CHECK(bucket("text", "") == 6u);
  CHECK(bucket("text", "zz") == 1u);
  CHECK(bucket("bigint", "0") == 0u);
  CHECK(bucket("bigint", "1") == 0u);
  CHECK(bucket("bigint", "-1") == 5u);
  CHECK(bucket("integer", "17") == 4u);
  CHECK(bucket("bigint", "123456789012") == 7u);
  CHECK(bucket("bigint", std::nullopt) == 0u);  // NULL: bucket 0
  CHECK_FALSE(bucket("bigint", "x").has_value());
}

TEST_CASE("salted reads: key and salt one partition, key alone its buckets, neither all", "[salt][router]") {
  SaltFixture f;
  const std::uint32_t b = f.bucket("77");
  Route one = f.simple("SELECT * FROM sales WHERE product_id = 5 AND order_id = 77");
  CHECK(f.parts(one) == std::set<std::uint32_t>{salted_partition("5", b, 1000)});
  CHECK(one.shards.size() == 1);
  Route p = f.prepared("SELECT * FROM sales WHERE order_id = $2 AND qty > 0 AND product_id = $1", {"5", "77"});
  CHECK(f.parts(p) == f.parts(one));
  std::set<std::uint32_t> all_buckets;
  for (std::uint32_t i = 0; i < 8; ++i) all_buckets.insert(salted_partition("5", i, 1000));
  CHECK(f.parts(f.simple("SELECT * FROM sales WHERE product_id = 5")) == all_buckets);
  // Another literal, the same cached shape: its own buckets.
  CHECK(f.parts(f.simple("SELECT * FROM sales WHERE product_id = 5 AND order_id = 78")) ==
        std::set<std::uint32_t>{salted_partition("5", f.bucket("78"), 1000)});
  Route in = f.simple("SELECT * FROM sales WHERE product_id IN (5, 6) AND order_id = 77");
  CHECK(f.parts(in) == std::set<std::uint32_t>{salted_partition("5", b, 1000), salted_partition("6", b, 1000)});
  Route salt_only = f.simple("SELECT * FROM sales WHERE order_id = 77");
  CHECK(salt_only.shards == std::vector<std::size_t>{0, 1, 2});
  CHECK(salt_only.partitions.empty());
  Route either = f.simple("SELECT * FROM sales WHERE product_id = 5 AND order_id = 77 OR product_id = 6");
  CHECK(f.parts(either).size() > 1);
  CHECK(f.parts(either).count(salted_partition("5", b, 1000)) == 1);
}

TEST_CASE("salted writes name the key and the salt column", "[salt][router]") {
  SaltFixture f;
  Route ins = f.simple("INSERT INTO sales (product_id, order_id, qty) VALUES (5, 77, 1)");
  CHECK(f.parts(ins) == std::set<std::uint32_t>{salted_partition("5", f.bucket("77"), 1000)});
  Route ext = f.prepared("INSERT INTO sales VALUES ($1, $2, 1)", {"5", "77"});
  CHECK(f.parts(ext) == f.parts(ins));
  Route missing = f.simple("INSERT INTO sales (product_id, qty) VALUES (5, 1)");
  CHECK(missing.kind == RouteKind::error);
  CHECK(missing.sqlstate == "SPR01");
  CHECK_THAT(missing.message, Catch::Matchers::Contains("salt column \"order_id\""));
  Route upd = f.simple("UPDATE sales SET qty = 2 WHERE product_id = 5 AND order_id = 77");
  CHECK(f.parts(upd) == f.parts(ins));
  Route del = f.simple("DELETE FROM sales WHERE product_id = 5");
  CHECK(f.parts(del).size() > 1);
  Route moving = f.simple("UPDATE sales SET order_id = 78 WHERE product_id = 5");
  CHECK(moving.kind == RouteKind::error);
  CHECK(moving.sqlstate == "SPR01");
  CHECK_THAT(moving.message, Catch::Matchers::Contains("salt column"));
  Route same = f.simple("UPDATE sales SET order_id = 77, qty = 3 WHERE product_id = 5 AND order_id = 77");
  CHECK(same.kind != RouteKind::error);
}

TEST_CASE("salt keys: only the listed keys are spread over buckets", "[salt][router]") {
  SaltFixture f;
  CHECK(f.parts(f.simple("SELECT * FROM tagged WHERE tag = 'cold'")).size() == 1);
  CHECK(f.parts(f.simple("SELECT * FROM tagged WHERE tag = 'cold' AND code = 'x'")) ==
        f.parts(f.simple("SELECT * FROM tagged WHERE tag = 'cold'")));
  CHECK(f.parts(f.simple("SELECT * FROM tagged WHERE tag = 'hot'")).size() > 1);
  CHECK(f.parts(f.simple("SELECT * FROM tagged WHERE tag = 'hot' AND code = 'x'")).size() == 1);
}

TEST_CASE("tables of a salted distribution are not co-located by the key", "[salt][router]") {
  SaltFixture f;
  // One key's rows are in several partitions: a join on the key is the combine step's.
  Route join = f.simple("SELECT * FROM sales s JOIN returns r ON s.product_id = r.product_id WHERE s.product_id = 5");
  CHECK(join.needs_combine);
  Route sub = f.simple("SELECT * FROM sales WHERE product_id IN (SELECT product_id FROM returns WHERE product_id = 5)");
  CHECK(sub.needs_combine);
  Route write = f.simple("DELETE FROM sales s USING returns r WHERE s.product_id = r.product_id AND s.product_id = 5");
  CHECK(write.kind == RouteKind::error);
  CHECK(write.sqlstate == "SPC01");
  // INSERT ... SELECT: pulled through the proxy, its rows inserted by (key, bucket).
  CHECK(f.simple("INSERT INTO sales SELECT product_id, order_id + 1, 1 FROM sales WHERE product_id = 5").pull_insert);
}
