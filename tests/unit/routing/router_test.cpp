// Statement routing (SPEC §3): keys in WHERE, joins, sub-queries, writes, DDL,
// reference/catalog tables, transaction control, splitpoint.* commands, errors, hints.
#include "routing/key_guard.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

namespace {

void check_single(const Route& r, std::string_view key) {
  INFO("message: " << r.message);
  REQUIRE(r.kind == RouteKind::shards);
  CHECK(r.shards == std::vector<std::size_t>{user_shard(key)});
  REQUIRE(r.partitions.size() == 1);
  CHECK(r.partitions[0].distribution == 0);
  CHECK(r.partitions[0].partition == user_partition(key));
  CHECK(r.distribution == std::optional<std::size_t>(0));
}

}  // namespace

TEST_CASE("key equality routes to the owning shard", "[router]") {
  Fixture f;
  for (const char* sql : {"SELECT * FROM users WHERE id = 42", "select name from users where 42 = id",
                          "SELECT * FROM public.users u WHERE u.id = 42", "SELECT * FROM users WHERE users.id = '42'",
                          "SELECT * FROM users WHERE id = '42'::bigint", "SELECT * FROM users WHERE id = CAST('42' AS int8)",
                          "SELECT * FROM users WHERE id = 42 AND name LIKE 'a%'",
                          "SELECT * FROM users WHERE (name = 'x' OR email = 'y') AND id = 42",
                          "SELECT * FROM users WHERE id IS NOT DISTINCT FROM 42",
                          "SELECT count(*) FROM orders WHERE user_id = 42 GROUP BY id ORDER BY 1 LIMIT 5"}) {
    INFO(sql);
    Route r = f.both(sql);
    check_single(r, "42");
    CHECK(r.cls == StatementClass::read);
    CHECK(r.key_values == std::vector<std::string>{"42"});
  }
}

TEST_CASE("each key value goes to its own partition", "[router]") {
  Fixture f;
  for (int k = -50; k <= 200; k += 7) {
    std::string key = std::to_string(k);
    INFO(key);
    check_single(f.simple("SELECT * FROM users WHERE id = " + key), key);
    check_single(f.prepared("SELECT * FROM users WHERE id = $1", {key}), key);
  }
}

TEST_CASE("bound parameters in text and binary format", "[router]") {
  Fixture f;
  check_single(f.prepared("SELECT * FROM users WHERE id = $1", {"42"}), "42");
  check_single(f.prepared("SELECT * FROM users WHERE id = $1::bigint", {"42"}), "42");
  check_single(f.prepared("SELECT * FROM users WHERE id = $1", {be(42, 8)}, {1}, {20}), "42");
  check_single(f.prepared("SELECT * FROM users WHERE id = $1", {be(42, 4)}, {1}, {23}), "42");
  check_single(f.prepared("SELECT * FROM users WHERE id = $1", {be(42, 8)}, {1}), "42");  // type from the column
  check_single(f.prepared("SELECT * FROM users WHERE id = $2 AND name = $1", {"bob", be(42, 8)}, {0, 1}), "42");
  check_single(f.prepared("SELECT * FROM users WHERE id = $1", {be(-7, 2)}, {1}, {21}), "-7");
  // A NULL key matches no row: one shard answers.
  Route r = f.prepared("SELECT * FROM users WHERE id = $1", {std::nullopt});
  CHECK(r.kind == RouteKind::shards);
  CHECK(r.shards.size() == 1);
  // Text and varchar keys.
  Route t = f.prepared("SELECT * FROM sessions WHERE token = $1", {"abc"});
  auto h = hash_key_text(KeyType::varchar, "abc", 20);
  REQUIRE(h);
  CHECK(t.partitions.at(0).partition == partition_for_hash(*h, 64));
}

TEST_CASE("IN, ANY and OR take the union of the keys' shards", "[router]") {
  Fixture f;
  const std::string a = std::to_string(user_key_on(0)), b = std::to_string(user_key_on(1));
  const std::string a2 = std::to_string(user_key_on(0, std::stoll(a) + 1));
  auto check_both = [&](const Route& r) {
    INFO(r.message);
    REQUIRE(r.kind == RouteKind::shards);
    CHECK(r.shards == shards({0, 1}));
    CHECK(r.partitions.size() == 2);
    CHECK(r.key_values.size() == 2);
  };
  check_both(f.both("SELECT * FROM users WHERE id IN (" + a + ", " + b + ")"));
  check_both(f.both("SELECT * FROM users WHERE id = " + a + " OR id = " + b));
  check_both(f.both("SELECT * FROM users WHERE id = ANY('{" + a + "," + b + "}')"));
  check_both(f.both("SELECT * FROM users WHERE id = ANY(ARRAY[" + a + ", " + b + "])"));
  check_both(f.both("SELECT * FROM users WHERE id = ANY('{" + a + "," + b + "}'::bigint[])"));
  check_both(f.prepared("SELECT * FROM users WHERE id = ANY($1)", {"{" + a + "," + b + "}"}));
  check_both(f.prepared("SELECT * FROM users WHERE id IN ($1, $2)", {a, b}));
  // Binary int8[] parameter: ndim, has-null, element type, dimension, lower bound, elements.
  std::string arr = be(1, 4) + be(0, 4) + be(20, 4) + be(2, 4) + be(1, 4) + be(8, 4) + be(std::stoll(a), 8) +
                    be(8, 4) + be(std::stoll(b), 8);
  check_both(f.prepared("SELECT * FROM users WHERE id = ANY($1)", {arr}, {1}));
  // Two keys on one shard: one shard, two partitions.
  Route same = f.both("SELECT * FROM users WHERE id IN (" + a + ", " + a2 + ")");
  CHECK(same.shards == shards({0}));
  // OR with a condition on something else: any row may match.
  Route any = f.both("SELECT * FROM users WHERE id = " + a + " OR name = 'x'");
  CHECK(any.kind == RouteKind::shards);
  CHECK(any.shards == shards({0, 1}));
  CHECK(any.partitions.empty());
  // AND of two keys: the intersection.
  Route both = f.both("SELECT * FROM users WHERE id IN (" + a + ", " + b + ") AND id = " + b);
  CHECK(both.shards == shards({1}));
  Route none = f.both("SELECT * FROM users WHERE id = " + a + " AND id = " + b);
  CHECK(none.kind == RouteKind::shards);
  CHECK(none.shards.size() == 1);
  // NOT / NOT IN / <> say nothing about the key.
  CHECK(f.both("SELECT * FROM users WHERE NOT id = " + a).shards == shards({0, 1}));
  CHECK(f.both("SELECT * FROM users WHERE id NOT IN (" + a + ")").shards == shards({0, 1}));
  CHECK(f.both("SELECT * FROM users WHERE id <> " + a).shards == shards({0, 1}));
}

TEST_CASE("statements without a usable key scatter to every shard", "[router]") {
  Fixture f;
  for (const char* sql : {"SELECT * FROM users", "SELECT * FROM users WHERE name = 'x'",
                          "SELECT * FROM users WHERE id > 5", "SELECT count(*) FROM orders",
                          "SELECT * FROM users WHERE id = (SELECT 42)", "SELECT * FROM users WHERE id + 0 = 42"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards == shards({0, 1}));
    CHECK(r.partitions.empty());
    CHECK(r.distribution == std::optional<std::size_t>(0));
  }
}

TEST_CASE("joins, sub-queries and CTEs of co-located tables", "[router]") {
  Fixture f;
  for (const char* sql : {
           "SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = 42",
           "SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE o.user_id = 42",
           "SELECT * FROM users u JOIN orders o ON o.user_id = u.id AND u.id = 42",
           "SELECT * FROM users u, orders o WHERE o.user_id = u.id AND o.user_id = 42",
           "SELECT * FROM users JOIN orders ON orders.user_id = users.id WHERE users.id = 42",
           "SELECT * FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.id = 42",
           "SELECT * FROM users u JOIN countries c ON c.code = u.name WHERE u.id = 42",
           "SELECT * FROM users WHERE id IN (SELECT user_id FROM orders WHERE user_id = 42)",
           "SELECT * FROM users WHERE id = 42 AND id IN (SELECT user_id FROM orders)",
           "SELECT * FROM users u WHERE u.id = 42 AND EXISTS (SELECT 1 FROM orders o WHERE o.user_id = u.id)",
           "SELECT u.*, (SELECT sum(total) FROM orders o WHERE o.user_id = u.id) FROM users u WHERE u.id = 42",
           "SELECT * FROM (SELECT * FROM orders) o WHERE o.user_id = 42",
           "SELECT * FROM (SELECT user_id AS uid, total FROM orders) o WHERE uid = 42",
           "WITH x AS (SELECT * FROM orders WHERE user_id = 42) SELECT * FROM x JOIN users u ON u.id = x.user_id",
           "WITH x AS (SELECT * FROM orders) SELECT * FROM x WHERE user_id = 42",
           "SELECT * FROM users WHERE id = 42 UNION ALL SELECT * FROM users WHERE id = 42",
           "SELECT * FROM users u WHERE u.id = 42 AND NOT EXISTS "
           "(SELECT 1 FROM orders o WHERE o.user_id = u.id AND o.user_id = 7)",
       }) {
    INFO(sql);
    check_single(f.both(sql), "42");
  }
}

TEST_CASE("joins and sub-queries that need several shards", "[router]") {
  Fixture f;
  for (const char* sql : {
           // the ON of an outer join does not filter the preserved side
           "SELECT * FROM users u LEFT JOIN orders o ON o.user_id = u.id AND u.id = 42",
           // a CTE used twice
           "WITH x AS (SELECT * FROM orders) SELECT * FROM x a JOIN x b ON a.id = b.id WHERE a.user_id = 42",
           // the outer table is not restricted by the correlated sub-query
           "SELECT * FROM users u WHERE EXISTS (SELECT 1 FROM orders o WHERE o.user_id = u.id AND o.user_id = 42) OR true",
           // LIMIT inside a derived table: which rows survive depends on all of them
           "SELECT * FROM (SELECT * FROM orders LIMIT 10) o WHERE o.user_id = 42",
       }) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards == shards({0, 1}));
  }
}

TEST_CASE("reads of sharded tables that are not co-located go to the combine step", "[router]") {
  Fixture f;
  for (const char* sql : {
           // a condition on the outer query inside EXISTS does not link the two tables by key
           "SELECT * FROM users u WHERE EXISTS (SELECT 1 FROM orders o WHERE u.id = 42)",
           // one arm of the UNION has no key
           "SELECT id FROM users WHERE id = 42 UNION SELECT user_id FROM orders",
           // keys of different distributions are never co-located by an equality
           "SELECT * FROM users u JOIN events e ON e.id = u.id WHERE u.id = 42",
       }) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards.size() > 1);
    CHECK(r.needs_combine);
  }
  // a write of them still cannot be, with the key or without (each shard would join only
  // its own rows: a keyless write to every shard is not the answer either; within one
  // distribution a keyless write still goes to every shard, tested above)
  for (const char* sql : {"UPDATE users u SET name = 'x' FROM events e WHERE e.id = u.id AND u.id = 42",
                          "UPDATE users u SET name = 'x' FROM events e WHERE e.payload = u.name",
                          "DELETE FROM users u USING events e WHERE e.payload = u.name",
                          "DELETE FROM users WHERE name IN (SELECT payload FROM events)"}) {
    INFO(sql);
    Route w = f.both(sql);
    CHECK(w.kind == RouteKind::error);
    CHECK(w.sqlstate == "SPC01");
  }
}

TEST_CASE("tables of different distributions route by each one's key", "[router]") {
  Fixture f;
  Route r = f.both("SELECT * FROM users u, events e WHERE u.id = 42 AND e.id = 1500");
  CHECK(r.kind == RouteKind::shards);
  std::vector<std::size_t> expect{user_shard("42"), 1};
  std::sort(expect.begin(), expect.end());
  expect.erase(std::unique(expect.begin(), expect.end()), expect.end());
  CHECK(r.shards == expect);
  CHECK(!r.distribution);
  CHECK(r.partitions.size() == 2);
}

TEST_CASE("range distributions: equality and ranges touch the overlapping ranges", "[router]") {
  Fixture f;
  auto parts = [&](const std::string& sql) {
    Route r = f.both(sql);
    INFO(sql << " -> " << r.message);
    REQUIRE(r.kind == RouteKind::shards);
    std::vector<std::uint32_t> p;
    for (const auto& h : r.partitions) {
      CHECK(h.distribution == 1);
      p.push_back(h.partition);
    }
    return p;
  };
  using P = std::vector<std::uint32_t>;
  CHECK(parts("SELECT * FROM events WHERE id = 5") == P{0});
  CHECK(parts("SELECT * FROM events WHERE id = -5") == P{0});
  CHECK(parts("SELECT * FROM events WHERE id = 999") == P{0});
  CHECK(parts("SELECT * FROM events WHERE id = 1000") == P{1});
  CHECK(parts("SELECT * FROM events WHERE id = 1999") == P{1});
  CHECK(parts("SELECT * FROM events WHERE id = 2000") == P{2});
  CHECK(parts("SELECT * FROM events WHERE id = 123456") == P{2});
  CHECK(parts("SELECT * FROM events WHERE id BETWEEN 950 AND 1050") == (P{0, 1}));
  CHECK(parts("SELECT * FROM events WHERE id BETWEEN 1000 AND 1999") == P{1});
  CHECK(parts("SELECT * FROM events WHERE id >= 2000") == P{2});
  CHECK(parts("SELECT * FROM events WHERE id > 1999") == P{2});
  CHECK(parts("SELECT * FROM events WHERE id > 999") == (P{1, 2}));
  CHECK(parts("SELECT * FROM events WHERE id < 1000") == P{0});
  CHECK(parts("SELECT * FROM events WHERE id <= 1000") == (P{0, 1}));
  CHECK(parts("SELECT * FROM events WHERE 1000 > id") == P{0});
  CHECK(parts("SELECT * FROM events WHERE id >= 500 AND id < 1500") == (P{0, 1}));
  CHECK(parts("SELECT * FROM events WHERE id IN (1, 2500)") == (P{0, 2}));
  CHECK(parts("SELECT * FROM events WHERE id < 10 OR id >= 3000") == (P{0, 2}));
  CHECK(f.both("SELECT * FROM events WHERE id = 5").shards == shards({0}));
  CHECK(f.both("SELECT * FROM events WHERE id > 999").shards == shards({1}));
  CHECK(f.prepared("SELECT * FROM events WHERE id BETWEEN $1 AND $2", {"950", "1050"}).partitions.size() == 2);
  CHECK(f.prepared("SELECT * FROM events WHERE id >= $1", {be(2000, 4)}, {1}).partitions.size() == 1);
}

TEST_CASE("list distributions: listed values, default, and no default", "[router]") {
  Fixture f;
  Route jp = f.both("SELECT * FROM stores WHERE region = 'jp'");
  CHECK(jp.shards == shards({0}));
  CHECK(jp.partitions.at(0).partition == 0);
  Route us = f.both("SELECT * FROM stores WHERE region = 'us'");
  CHECK(us.shards == shards({1}));
  CHECK(us.partitions.at(0).partition == 1);
  Route fr = f.both("SELECT * FROM stores WHERE region = 'fr'");
  CHECK(fr.shards == shards({0}));
  CHECK(fr.partitions.at(0).partition == 2);  // the default partition
  Route many = f.both("SELECT * FROM stores WHERE region IN ('kr', 'eu')");
  CHECK(many.shards == shards({0, 1}));

  Fixture strict("reference", false);
  Route none = strict.both("SELECT * FROM stores WHERE region = 'fr'");
  CHECK(none.kind == RouteKind::error);
  CHECK(none.sqlstate == "SPR02");
  CHECK_THAT(none.message, Catch::Contains("no partition"));
  Route ins = strict.both("INSERT INTO stores (region, name) VALUES ('fr', 'Paris')");
  CHECK(ins.sqlstate == "SPR02");
}

TEST_CASE("UPDATE and DELETE", "[router]") {
  Fixture f;
  Route u = f.both("UPDATE users SET name = 'x' WHERE id = 42");
  check_single(u, "42");
  CHECK(u.cls == StatementClass::write);
  Route d = f.both("DELETE FROM orders WHERE user_id = 42 RETURNING *");
  check_single(d, "42");
  CHECK(d.cls == StatementClass::write);
  check_single(f.both("UPDATE orders o SET total = 0 FROM users u WHERE u.id = o.user_id AND u.id = 42"), "42");
  check_single(f.prepared("DELETE FROM users WHERE id = $1", {"42"}), "42");
  for (const char* sql : {"UPDATE users SET name = 'x'", "DELETE FROM users WHERE name = 'x'",
                          "UPDATE users SET name = 'x' WHERE id > 5"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::all_shards);
    CHECK(r.cls == StatementClass::write);
  }
  // Setting the key to the value the WHERE already requires moves nothing (multi-tenant
  // ORMs write every UPDATE so); any other value, even after that text was routed (no
  // plan shared across literals), is refused.
  check_single(f.both("UPDATE users SET id = 42, name = 'x' WHERE id = 42"), "42");
  check_single(f.both("UPDATE users SET name = 'x', id = '42' WHERE name = 'y' AND users.id = 42"), "42");
  check_single(f.prepared("UPDATE users SET id = $1, name = $2 WHERE id = $1", {"42", "x"}), "42");
  // Other constants and parameters: the value's shard runs the statement, every other
  // shard the WHERE reaches runs it guarded (it fails there on any row it matches).
  struct Guarded {
    const char* sql;
    std::vector<std::optional<std::string>> params;
    std::string value;
  };
  for (const Guarded& g : {Guarded{"UPDATE users SET id = 42 WHERE id = 42 OR name = 'x'", {}, "42"},
                           Guarded{"UPDATE users SET id = 42, name = 'x'", {}, "42"},
                           Guarded{"UPDATE users SET id = 42 WHERE id > 41", {}, "42"},
                           Guarded{"UPDATE users SET name = 'x', id = '7' WHERE name = 'y' RETURNING *", {}, "7"},
                           Guarded{"UPDATE users SET id = $1, name = $2 WHERE email = $3", {"42", "x", "y"}, "42"}}) {
    INFO(g.sql);
    Route r = g.params.empty() ? f.both(g.sql) : f.prepared(g.sql, g.params);
    REQUIRE(r.key_guard());
    CHECK(r.key_guard()->table == "users");
    CHECK(r.key_guard()->column == "id");
    CHECK(r.key_guard()->owner == user_shard(g.value));
    CHECK(r.cls == StatementClass::write);
    REQUIRE_FALSE(r.per_shard_sql.empty());
    for (const auto& [shard, sql] : r.per_shard_sql) {
      CHECK(shard != r.key_guard()->owner);
      CHECK_THAT(sql, Catch::Contains(std::string(kKeyGuardMarker)) && Catch::StartsWith("UPDATE users SET "));
    }
  }
  // A WHERE that confines the rows to the value's own shard: an ordinary route there.
  for (int k = 0; k < 40; ++k) {
    const std::string from = std::to_string(k), to = std::to_string(k + 1);
    INFO(from << " -> " << to);
    Route r = k % 2 == 0 ? f.simple("UPDATE users SET id = " + to + " WHERE id = " + from)
                         : f.prepared("UPDATE users SET id = $1 WHERE id = $2", {to, from});
    if (user_shard(from) == user_shard(to)) {
      CHECK(r.kind == RouteKind::shards);
      CHECK(r.shards == std::vector<std::size_t>{user_shard(to)});
      CHECK_FALSE(r.key_guard());
    } else {
      REQUIRE(r.key_guard());
      CHECK(r.shards == std::vector<std::size_t>{user_shard(from)});
      CHECK(r.per_shard_sql.size() == 1);
    }
  }
  for (const char* sql : {"UPDATE users SET id = NULL WHERE id = NULL", "UPDATE orders SET user_id = user_id + 1",
                          "UPDATE users SET (name, id) = ('a', 5) WHERE id = 1",
                          "UPDATE users u SET id = 5 FROM orders o WHERE o.user_id = u.id AND o.id = 3",
                          "INSERT INTO users (id, name) VALUES (1, 'a') ON CONFLICT (id) DO UPDATE SET id = 2",
                          "WITH x AS (UPDATE users SET id = 5 WHERE name = 'a' RETURNING *) SELECT * FROM x",
                          "EXPLAIN UPDATE users SET id = 5 WHERE name = 'a'",
                          "UPDATE users SET id = 5 WHERE CURRENT OF c",
                          "UPDATE users SET id = 5 WHERE name = 'a'; SELECT 1"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::error);
    CHECK(r.sqlstate == "SPR01");
    CHECK_THAT(r.message, Catch::Contains("distribution key"));
  }
}

TEST_CASE("reference and table-less statements", "[router]") {
  Fixture f;
  // (Catalog reads go to one shard: "catalog reads go to one shard ...".)
  for (const char* sql : {"SELECT * FROM countries", "SELECT * FROM countries WHERE code = 'jp'",
                          "SELECT 1", "SELECT now()", "SELECT version()",
                          "SELECT * FROM generate_series(1, 10)", "SELECT * FROM unknown_table",
                          "SHOW search_path", "SET search_path = public", "RESET ALL", "SHOW ALL"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::any_shard);
  }
  CHECK(f.both("SET search_path = public").cls == StatementClass::utility);
  for (const char* sql : {"INSERT INTO countries VALUES ('jp', 'Japan')", "UPDATE countries SET name = 'x'",
                          "DELETE FROM countries WHERE code = 'jp'", "INSERT INTO countries SELECT 'a', 'b'"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::all_shards);
    CHECK(r.cls == StatementClass::write);
  }
  Route mixed = f.both("INSERT INTO countries SELECT name, email FROM users");
  CHECK(mixed.kind == RouteKind::error);
  CHECK(mixed.sqlstate == "SPC01");
}

TEST_CASE("sequence functions go to the combine shard and write nothing", "[router]") {
  Fixture f;
  for (const char* sql : {"SELECT nextval('tickets')", "SELECT currval('tickets'), lastval()",
                          "SELECT setval('tickets', 10)", "SELECT nextval('tickets'), name FROM countries"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards == std::vector<std::size_t>{0});
    CHECK(r.reads == Route::Reads::sequences);
  }
  CHECK(f.both("SELECT now()").reads == Route::Reads::standby_safe);
  Route locks = f.both("SELECT nextval('tickets'), pg_advisory_lock(1)");
  CHECK(locks.kind == RouteKind::any_shard);
  CHECK(locks.reads == Route::Reads::writes);
  // A sequence read as a relation (pg_dump's form): that shard's copy too.
  Route read = f.both("SELECT last_value, is_called FROM public.tickets");
  CHECK(read.shards == std::vector<std::size_t>{0});
  // On a sharded table it runs where the statement runs.
  Route keyed = f.both("SELECT nextval('tickets'), * FROM users WHERE id = 7");
  CHECK(keyed.shards == std::vector<std::size_t>{user_shard("7")});
  CHECK(keyed.reads == Route::Reads::sequences);
}

TEST_CASE("catalog reads are marked for one shard (SPEC 14)", "[router]") {
  Fixture f;
  for (const char* sql :
       {"SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON "
        "n.oid = c.relnamespace WHERE c.relname OPERATOR(pg_catalog.~) '^(users)$' COLLATE pg_catalog.default",
        "SELECT relchecks, relkind FROM pg_class WHERE oid = '16403'", "SELECT 'users'::regclass",
        "SELECT pg_get_indexdef(16410)", "SELECT format_type(23, -1)",
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"}) {
    INFO(sql);
    for (int i = 0; i < 3; ++i) {  // (the session sends it to the combine shard: Session::catalog_shard)
      Route r = f.both(sql);
      CHECK(r.kind == RouteKind::any_shard);
      CHECK(r.reads == Route::Reads::catalog);
    }
  }
  // Not a catalog read: any shard.
  CHECK(f.both("SELECT name FROM countries").reads == Route::Reads::standby_safe);
  // One that writes (a large object made): the combine shard, from the router.
  CHECK(f.both("SELECT lo_create(0)").shards == std::vector<std::size_t>{0});
  // A sharded table's rows still decide.
  CHECK(f.both("SELECT u.* FROM users u JOIN pg_class c ON c.relname = 'users' WHERE u.id = 7").shards ==
        std::vector<std::size_t>{user_shard("7")});
}

TEST_CASE("the proxy's own tables and LOCK of tables on one shard", "[router]") {
  Fixture f;
  for (const char* sql : {"SELECT * FROM splitpoint.two_phase_decisions",
                          "LOCK TABLE splitpoint.two_phase_decisions, splitpoint.spanning_sessions IN SHARE MODE",
                          "SELECT * FROM splitpoint_2pc", "LOCK TABLE public.splitpoint_2pc IN ACCESS SHARE MODE",
                          "LOCK TABLE splitpoint_2pc, splitpoint_spanning_sessions",
                          "COPY public.splitpoint_spanning_sessions TO STDOUT"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards == std::vector<std::size_t>{0});
  }
  for (const char* sql : {"LOCK TABLE users", "LOCK TABLE countries", "LOCK TABLE splitpoint_2pc, countries"}) {
    INFO(sql);
    CHECK(f.both(sql).kind == RouteKind::all_shards);
  }
  Fixture pinned("shard:s1");
  Route lock = pinned.both("LOCK TABLE somewhere_else IN EXCLUSIVE MODE");
  CHECK(lock.kind == RouteKind::shards);
  CHECK(lock.shards == std::vector<std::size_t>{1});
}

TEST_CASE("unlisted tables follow unlisted_tables", "[router]") {
  Fixture reject("reject");
  Route r = reject.both("SELECT * FROM mystery");
  CHECK(r.kind == RouteKind::error);
  CHECK(r.sqlstate == "SPR01");
  CHECK_THAT(r.message, Catch::Contains("\"mystery\" is not configured"));
  CHECK(reject.both("SELECT * FROM countries").kind == RouteKind::any_shard);
  CHECK(reject.both("WITH mystery AS (SELECT 1) SELECT * FROM mystery").kind == RouteKind::any_shard);
  CHECK(reject.both("CREATE TABLE mystery (id int)").kind == RouteKind::all_shards);  // DDL goes everywhere

  Fixture pinned("shard:s1");
  Route p = pinned.both("SELECT * FROM mystery");
  CHECK(p.kind == RouteKind::shards);
  CHECK(p.shards == shards({1}));
  Route w = pinned.both("INSERT INTO mystery VALUES (1)");
  CHECK(w.kind == RouteKind::shards);
  CHECK(w.shards == shards({1}));
  CHECK(pinned.both("SELECT * FROM countries").kind == RouteKind::any_shard);
}

TEST_CASE("DDL goes to every shard and names the tables it changes", "[router]") {
  Fixture f;
  using V = std::vector<std::string>;
  struct Case {
    const char* sql;
    V tables;
  } cases[] = {
      {"CREATE TABLE users (id bigint PRIMARY KEY, name text)", {"users"}},
      {"ALTER TABLE orders ADD COLUMN note text", {"orders"}},
      {"DROP TABLE users, public.orders", {"users", "orders"}},
      {"DROP TABLE IF EXISTS app.things", {"app.things"}},
      {"CREATE INDEX ON orders (user_id)", {"orders"}},
      {"CREATE UNIQUE INDEX users_email ON users (email)", {"users"}},
      {"TRUNCATE users, orders", {"users", "orders"}},
      {"COMMENT ON TABLE users IS 'people'", {"users"}},
      {"ALTER TABLE users RENAME TO people", {"users", "people"}},
      {"GRANT SELECT ON users TO app", {"users"}},
      {"CREATE VIEW v AS SELECT * FROM users", {"v", "users"}},
      {"CREATE TABLE t2 AS SELECT * FROM countries", {"t2", "countries"}},
      {"SELECT * INTO t3 FROM countries", {"t3", "countries"}},
      {"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'", {}},
      {"CREATE SCHEMA app", {}},
  };
  for (const Case& c : cases) {
    INFO(c.sql);
    Route r = f.both(c.sql);
    CHECK(r.kind == RouteKind::all_shards);
    CHECK(r.cls == StatementClass::ddl);
    V got = f.changed(c.sql);
    std::sort(got.begin(), got.end());
    V want = c.tables;
    std::sort(want.begin(), want.end());
    CHECK(got == want);
  }
  CHECK(f.changed("SELECT * FROM users").empty());
  for (const char* sql : {"VACUUM users", "ANALYZE", "LOCK TABLE users"}) {
    INFO(sql);
    CHECK(f.both(sql).kind == RouteKind::all_shards);
  }
}

TEST_CASE("EXPLAIN routes as its statement", "[router]") {
  Fixture f;
  check_single(f.both("EXPLAIN SELECT * FROM users WHERE id = 42"), "42");
  check_single(f.both("EXPLAIN (ANALYZE, BUFFERS) UPDATE users SET name = 'a' WHERE id = 42"), "42");
  CHECK(f.both("EXPLAIN SELECT 1").kind == RouteKind::any_shard);
  CHECK(f.both("EXPLAIN CREATE TABLE t AS SELECT 1").kind == RouteKind::all_shards);
}

TEST_CASE("transaction control", "[router]") {
  Fixture f;
  struct Case {
    const char* sql;
    TxnCommand txn;
  } cases[] = {
      {"BEGIN", TxnCommand::begin},
      {"begin isolation level serializable", TxnCommand::begin},
      {"START TRANSACTION READ ONLY", TxnCommand::begin},
      {"COMMIT", TxnCommand::commit},
      {"END", TxnCommand::commit},
      {"ROLLBACK", TxnCommand::rollback},
      {"ABORT", TxnCommand::rollback},
      {"SAVEPOINT a", TxnCommand::savepoint},
      {"RELEASE SAVEPOINT a", TxnCommand::release_savepoint},
      {"RELEASE a", TxnCommand::release_savepoint},
      {"ROLLBACK TO SAVEPOINT a", TxnCommand::rollback_to_savepoint},
      {"ROLLBACK TO a", TxnCommand::rollback_to_savepoint},
  };
  for (const Case& c : cases) {
    INFO(c.sql);
    Route r = f.both(c.sql);
    CHECK(r.kind == RouteKind::any_shard);
    CHECK(r.cls == StatementClass::transaction);
    CHECK(r.txn == c.txn);
  }
  // The client's own two-phase commit: the session finds the shard of the gid.
  for (const char* sql : {"PREPARE TRANSACTION 'x'", "COMMIT PREPARED 'x'", "ROLLBACK PREPARED 'x'"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::any_shard);
    REQUIRE(r.names);
    CHECK(r.names->gid == "x");
  }
  // A shard hint does not redirect transaction control.
  f.session.shard = 1;
  CHECK(f.both("COMMIT").kind == RouteKind::any_shard);
}

TEST_CASE("SET, RESET and SHOW of splitpoint.* are local", "[router]") {
  Fixture f;
  using K = LocalCommand::Kind;
  struct Case {
    const char* sql;
    K kind;
    const char* name;
    const char* value;
  } cases[] = {
      {"SET splitpoint.deadline = '200ms'", K::set, "deadline", "200ms"},
      {"SET splitpoint.deadline TO '1s'", K::set, "deadline", "1s"},
      {"set SplitPoint.Partial_Results = allow", K::set, "partial_results", "allow"},
      {"SET LOCAL splitpoint.deadline = '50ms'", K::set_local, "deadline", "50ms"},
      {"SET SESSION splitpoint.shard = 's1'", K::set, "shard", "s1"},
      {"SET splitpoint.max = 10", K::set, "max", "10"},
      {"RESET splitpoint.deadline", K::reset, "deadline", ""},
      {"SET splitpoint.deadline TO DEFAULT", K::reset, "deadline", ""},
      {"SHOW splitpoint.last_scatter", K::show, "last_scatter", ""},
      {"show splitpoint.deadline", K::show, "deadline", ""},
  };
  for (const Case& c : cases) {
    INFO(c.sql);
    Route r = f.both(c.sql);
    REQUIRE(r.kind == RouteKind::local);
    REQUIRE(r.local);
    CHECK(r.local->kind == c.kind);
    CHECK(r.local->name == c.name);
    CHECK(r.local->value == c.value);
  }
  // The value is a literal: a second text of the same shape must not reuse the first.
  CHECK(f.simple("SET splitpoint.deadline = '300ms'").local->value == "300ms");
  CHECK(f.simple("SET splitpoint.deadline = '400ms'").local->value == "400ms");
  Route multi = f.both("SET splitpoint.deadline = '1s'; SELECT 1");
  CHECK(multi.kind == RouteKind::error);
  CHECK(multi.sqlstate == "0A000");
}

TEST_CASE("syntax errors carry PostgreSQL's message and position", "[router]") {
  Fixture f;
  struct Case {
    const char* sql;
    const char* message;
    int position;
  } cases[] = {
      {"SELECT * FORM users", "syntax error at or near \"FORM\"", 10},
      {"SELEC 1", "syntax error at or near \"SELEC\"", 1},
      {"SELECT * FROM users WHERE", "syntax error at end of input", 26},
      {"SELECT 'abc", "unterminated quoted string at or near \"'abc\"", 8},
      {"SELECT 1 /* open", "unterminated /* comment at or near \"/* open\"", 10},
      {"INSERT INTO users (id VALUES (1)", "syntax error at or near \"VALUES\"", 23},
  };
  for (const Case& c : cases) {
    INFO(c.sql);
    for (int i = 0; i < 2; ++i) {  // twice: errors are never served from the cache
      Route r = i == 0 ? f.prepared(c.sql) : f.simple(c.sql);
      CHECK(r.kind == RouteKind::error);
      CHECK(r.sqlstate == "42601");
      CHECK(r.message == c.message);
      CHECK(r.position == c.position);
    }
  }
  // Same normalised text, error at another position (FORM is read as a column alias).
  CHECK(f.simple("SELECT 'a' FORM users").message == "syntax error at or near \"users\"");
  CHECK(f.simple("SELECT 'a' FORM users").position == 17);
  CHECK(f.simple("SELECT 'abcdef' FORM users").position == 22);
  // A shard hint does not hide a syntax error.
  CHECK(f.simple("/* splitpoint: shard=s1 */ SELEC 1").kind == RouteKind::error);
}

TEST_CASE("hints: shard=, key=, and others passed through", "[router]") {
  Fixture f;
  Route s = f.both("/* splitpoint: shard=s1 */ SELECT * FROM users");
  CHECK(s.kind == RouteKind::shards);
  CHECK(s.shards == shards({1}));
  CHECK(f.both("SELECT * FROM users WHERE id = 42 -- splitpoint: shard=s0").shards == shards({0}));
  CHECK(f.both("CREATE INDEX ON users (name) /* splitpoint: shard=s1 */").shards == shards({1}));
  // Routing errors give way to an explicit shard.
  Route forced = f.both("/* splitpoint: shard=s0 */ INSERT INTO users (name) VALUES ('x')");
  CHECK(forced.shards == shards({0}));
  CHECK(forced.cls == StatementClass::write);
  Route bad = f.both("/* splitpoint: shard=nope */ SELECT 1");
  CHECK(bad.kind == RouteKind::error);
  CHECK(bad.sqlstate == "SPR02");
  CHECK_THAT(bad.message, Catch::Contains("nope"));

  Route k = f.both("SELECT count(*) FROM orders /* splitpoint: key=42 */");
  check_single(k, "42");
  CHECK(k.key_values == std::vector<std::string>{"42"});
  Route other = f.both("/* splitpoint: deadline=200ms, partial=allow */ SELECT * FROM users WHERE id = 42");
  check_single(other, "42");
  CHECK(other.hints == std::vector<std::pair<std::string, std::string>>{{"deadline", "200ms"}, {"partial", "allow"}});
  Route two = f.both("/* splitpoint: key=42 */ SELECT * FROM users, events");
  CHECK(two.kind == RouteKind::error);
  CHECK(two.sqlstate == "SPR01");
  // A hint inside a string is no hint.
  CHECK(f.both("SELECT '/* splitpoint: shard=s1 */' FROM users WHERE id = 42").shards ==
        std::vector<std::size_t>{user_shard("42")});
  // SET splitpoint.shard (the session) forces the shard too.
  f.session.shard = 1;
  CHECK(f.both("SELECT * FROM users WHERE id = " + std::to_string(user_key_on(0))).shards == shards({1}));
  CHECK(f.both("SET splitpoint.shard = 's0'").kind == RouteKind::local);
}

TEST_CASE("unknown table shapes are asked for", "[router]") {
  Fixture f;
  f.shapes_.erase("users");
  f.shapes_.erase("orders");
  Route r = f.prepared("SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = 42 AND o.user_id = 42");
  CHECK(r.kind == RouteKind::need_shapes);
  std::sort(r.missing_tables.begin(), r.missing_tables.end());
  CHECK(r.missing_tables == std::vector<std::string>{"orders", "users"});
  // Without a key nothing needs reading.
  CHECK(f.prepared("SELECT * FROM users").kind == RouteKind::shards);
  CHECK(f.prepared("CREATE TABLE users (id bigint)").kind == RouteKind::all_shards);
  f.shapes_["users"] = {{"id", "name"}, {"bigint", "text"}};
  f.shapes_["orders"] = {{"id", "user_id"}, {"bigint", "bigint"}};
  check_single(f.prepared("SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = 42"), "42");
}

TEST_CASE("several statements in one query text", "[router]") {
  Fixture f;
  Route r = f.both("BEGIN; UPDATE users SET name = 'x' WHERE id = 42; COMMIT");
  CHECK(r.kind == RouteKind::shards);
  CHECK(r.shards == std::vector<std::size_t>{user_shard("42")});
  CHECK(r.cls == StatementClass::write);
  CHECK(f.both("SELECT 1; SELECT 2").kind == RouteKind::any_shard);
  CHECK(f.both("SELECT 1; CREATE TABLE t (a int)").kind == RouteKind::all_shards);
  CHECK(f.both("").kind == RouteKind::any_shard);
  // A write on one shard and a read of every shard cannot run as one text: said so.
  Route mixed = f.simple("BEGIN; UPDATE users SET name = 'x' WHERE id = 42; SELECT count(*) FROM users; COMMIT");
  CHECK(mixed.kind == RouteKind::error);
  CHECK(mixed.sqlstate == "SPC01");
  CHECK(mixed.message.find("send them one by one") != std::string::npos);
  // INSERTs of one text into several shards: the same (the session runs them one by one).
  std::string a = "1", b = "2";
  while (user_shard(b) == user_shard(a)) b = std::to_string(std::stoi(b) + 1);
  Route inserts = f.simple("INSERT INTO users (id) VALUES (" + a + "); INSERT INTO users (id) VALUES (" + b + ")");
  CHECK(inserts.kind == RouteKind::error);
  CHECK(inserts.sqlstate == "SPC01");
  CHECK(inserts.message.find("send them one by one") != std::string::npos);
}

TEST_CASE("IS NULL on a hash key goes where PostgreSQL puts NULL keys", "[router]") {
  Fixture f;
  Route r = f.both("SELECT * FROM users WHERE id IS NULL");
  REQUIRE(r.kind == RouteKind::shards);
  CHECK(r.partitions.at(0).partition == partition_for_null(64));
}

TEST_CASE("COPY: into a sharded table every shard (rows split by the caller), out of it a scatter", "[router]") {
  Fixture f;
  Route in = f.both("COPY users FROM STDIN");
  CHECK(in.kind == RouteKind::all_shards);
  CHECK(in.cls == StatementClass::write);
  CHECK(in.distribution == std::optional<std::size_t>(0));
  Route ref = f.both("COPY countries FROM STDIN (FORMAT csv)");
  CHECK(ref.kind == RouteKind::all_shards);
  CHECK(ref.reference_write);
  CHECK_FALSE(in.reference_write);
  CHECK(f.both("UPDATE countries SET name = 'x'").reference_write);
  CHECK_FALSE(f.both("UPDATE users SET name = 'x'").reference_write);
  Route out = f.both("COPY users TO STDOUT");
  CHECK(out.kind == RouteKind::shards);
  CHECK(out.shards == shards({0, 1}));
  check_single(f.both("COPY (SELECT * FROM users WHERE id = 42) TO STDOUT"), "42");
  CHECK(f.both("COPY countries TO STDOUT").kind == RouteKind::any_shard);
  Fixture reject("reject");
  CHECK(reject.both("COPY mystery FROM STDIN").sqlstate == "SPR01");
}

TEST_CASE("range distributions over dates compare ISO text", "[router]") {
  auto loaded = splitpoint::config::load_string(R"(
shards: [{name: s0}, {name: s1}, {name: s2}]
distributions:
  - name: by_day
    method: range
    ranges:
      - { upto: '2024-01-01', shard: s0 }
      - { upto: '2024-02-01', shard: s1 }
      - { shard: s2 }
    tables: { logs: day, audit: at }
)");
  REQUIRE(loaded.config);
  Router router(*loaded.config);
  std::map<std::string, TableShape> shapes{{"logs", {{"day", "msg"}, {"date", "text"}}},
                                           {"audit", {{"at"}, {"timestamp without time zone"}}}};
  ShapeLookup lookup = [&](std::string_view t) -> const TableShape* {
    auto it = shapes.find(std::string(t));
    return it == shapes.end() ? nullptr : &it->second;
  };
  auto parts = [&](const std::string& sql) {
    Route r = router.route_simple(sql, {}, lookup);
    INFO(sql << ": " << r.message);
    REQUIRE(r.kind == RouteKind::shards);
    std::vector<std::uint32_t> p;
    for (const auto& h : r.partitions) p.push_back(h.partition);
    return p;
  };
  using P = std::vector<std::uint32_t>;
  CHECK(parts("SELECT * FROM logs WHERE day = '2023-12-31'") == P{0});
  CHECK(parts("SELECT * FROM logs WHERE day = '2024-01-01'") == P{1});
  CHECK(parts("SELECT * FROM logs WHERE day = date '2024-01-15'") == P{1});
  CHECK(parts("SELECT * FROM logs WHERE day >= '2024-02-01'") == P{2});
  CHECK(parts("SELECT * FROM logs WHERE day BETWEEN '2023-12-31' AND '2024-01-01'") == (P{0, 1}));
  CHECK(parts("SELECT * FROM logs WHERE day < '2024-01-01'") == P{0});
  CHECK(parts("SELECT * FROM audit WHERE at = '2024-01-31 23:59:59'") == P{1});
  // A binary date parameter (days since 2000-01-01): 2024-01-15 is day 8780.
  auto plan = router.plan("SELECT * FROM logs WHERE day = $1", {});
  std::string bytes = be(8780, 4);
  std::optional<std::string_view> v = std::string_view(bytes);
  std::int16_t format = 1;
  Route r = router.route(*plan, BoundParams{std::span(&v, 1), std::span(&format, 1), {}}, {}, lookup);
  REQUIRE(r.partitions.size() == 1);
  CHECK(r.partitions[0].partition == 1);
  CHECK(r.shards == shards({1}));
}
