// INSERT ... VALUES routing (SPEC §3): rows grouped by shard, one rewritten statement
// per shard, and the INSERTs that are refused (SPR01).
#include "routing/insert_split.hpp"
#include "routing/pg_tree.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}


// A statement whose `column` the proxy fills: the request it routes to, and the statement
// with values 100, 101, ... routed again without one. Returns the filled statement.
struct FillCase {
  const char* sql;
  bool omitted;
  std::size_t position;
  std::vector<std::size_t> rows;
};

std::string check_fill(Fixture& f, const FillCase& c, const char* table, const char* column) {
  INFO(c.sql);
  Route r = f.both(c.sql);
  CHECK(r.kind == RouteKind::error);
  CHECK(r.sqlstate == "SPR01");
  REQUIRE(r.generate_keys);
  CHECK(r.generate_keys->table == table);
  CHECK(r.generate_keys->column == column);
  CHECK(r.generate_keys->column_omitted == c.omitted);
  if (!c.omitted) CHECK(r.generate_keys->position == c.position);
  CHECK(r.generate_keys->rows == c.rows);
  std::vector<std::string> values;
  for (std::size_t i = 0; i < c.rows.size(); ++i) values.push_back(std::to_string(100 + i));
  auto filled = insert_with_keys(c.sql, true, *r.generate_keys, values, false);
  REQUIRE(filled);
  INFO(*filled);
  Route again = f.both(*filled);
  CHECK(again.kind == RouteKind::shards);
  CHECK_FALSE(again.generate_keys);
  return *filled;
}

}  // namespace

TEST_CASE("INSERT of one row goes to its key's shard", "[router][insert]") {
  Fixture f;
  for (const char* sql : {"INSERT INTO users (id, name) VALUES (42, 'a')", "INSERT INTO users (name, id) VALUES ('a', 42)",
                          "INSERT INTO users VALUES (42, 'a', 'a@x')", "INSERT INTO users VALUES (42)",
                          "INSERT INTO public.users AS u (id) VALUES ('42')",
                          "INSERT INTO users (id, name) VALUES (42, 'a') ON CONFLICT (id) DO UPDATE SET name = excluded.name",
                          "INSERT INTO users (id, name) VALUES (42, 'a') ON CONFLICT DO NOTHING RETURNING id",
                          "INSERT INTO users (id, name) VALUES (42::bigint, now()::text)",
                          "WITH x AS (SELECT 1) INSERT INTO users (id) VALUES (42)"}) {
    INFO(sql);
    Route r = f.both(sql);
    INFO(r.message);
    REQUIRE(r.kind == RouteKind::shards);
    CHECK(r.shards == std::vector<std::size_t>{user_shard("42")});
    CHECK(r.cls == StatementClass::write);
    CHECK(r.per_shard_sql.empty());
    REQUIRE(r.partitions.size() == 1);
    CHECK(r.partitions[0].partition == user_partition("42"));
    CHECK(r.key_values == std::vector<std::string>{"42"});
  }
  Route p = f.prepared("INSERT INTO users (id, name) VALUES ($1, $2)", {"42", "a"});
  CHECK(p.shards == std::vector<std::size_t>{user_shard("42")});
  Route b = f.prepared("INSERT INTO users (name, id) VALUES ($1, $2)", {"a", be(42, 8)}, {0, 1}, {25, 20});
  CHECK(b.shards == std::vector<std::size_t>{user_shard("42")});
  // Range and list distributions.
  CHECK(f.both("INSERT INTO events (id, payload) VALUES (1500, 'x')").shards == shards({1}));
  CHECK(f.both("INSERT INTO stores VALUES ('jp', 'Tokyo')").shards == shards({0}));
  // A NULL hash key goes where PostgreSQL puts it.
  Route n = f.both("INSERT INTO users (id, name) VALUES (NULL, 'a')");
  REQUIRE(n.kind == RouteKind::shards);
  CHECK(n.partitions.at(0).partition == partition_for_null(64));
  CHECK(f.both("INSERT INTO events (id) VALUES (NULL)").sqlstate == "SPR02");
}

TEST_CASE("multi-row INSERT: rows grouped by shard", "[router][insert]") {
  Fixture f;
  const long long a1 = user_key_on(0), a2 = user_key_on(0, a1 + 1);
  const long long b1 = user_key_on(1), b2 = user_key_on(1, b1 + 1);
  const std::string A1 = std::to_string(a1), A2 = std::to_string(a2), B1 = std::to_string(b1), B2 = std::to_string(b2);

  Route same = f.both("INSERT INTO users (id, name) VALUES (" + A1 + ", 'a'), (" + A2 + ", 'b')");
  CHECK(same.kind == RouteKind::shards);
  CHECK(same.shards == shards({0}));
  CHECK(same.per_shard_sql.empty());
  CHECK(same.partitions.size() == (user_partition(A1) == user_partition(A2) ? 1u : 2u));

  const std::string sql = "INSERT INTO users (id, name) VALUES (" + A1 + ", 'a1'), (" + B1 + ", 'b1'), (" + A2 +
                          ", 'a2'), (" + B2 + ", 'b2') ON CONFLICT (id) DO NOTHING RETURNING id";
  for (int pass = 0; pass < 3; ++pass) {  // prepared, simple miss, simple hit
    Route r = pass == 0 ? f.prepared(sql) : f.simple(sql);
    INFO("pass " << pass << ": " << r.message);
    REQUIRE(r.kind == RouteKind::shards);
    CHECK(r.shards == shards({0, 1}));
    REQUIRE(r.per_shard_sql.size() == 2);
    CHECK(r.per_shard_sql[0].first == 0);
    CHECK(r.per_shard_sql[1].first == 1);
    const std::string s0 = parse_json(r.per_shard_sql[0].second), s1 = parse_json(r.per_shard_sql[1].second);
    INFO(r.per_shard_sql[0].second);
    INFO(r.per_shard_sql[1].second);
    // Each statement holds exactly its shard's rows, and keeps ON CONFLICT / RETURNING.
    CHECK(count(s0, "\"sval\":\"a1\"") == 1);
    CHECK(count(s0, "\"sval\":\"a2\"") == 1);
    CHECK(count(s0, "\"sval\":\"b") == 0);
    CHECK(count(s1, "\"sval\":\"b1\"") == 1);
    CHECK(count(s1, "\"sval\":\"b2\"") == 1);
    CHECK(count(s1, "\"sval\":\"a") == 0);
    for (const std::string& s : {s0, s1}) {
      CHECK(count(s, "onConflictClause") == 1);
      CHECK(count(s, "returningList") == 1);
      CHECK(count(s, "\"relname\":\"users\"") == 1);
    }
    // The same text through the parser again gives the same statements (cut from the
    // text in the simple protocol, deparsed from the tree in the extended one).
    const Route again = f.prepared(sql);
    REQUIRE(again.per_shard_sql.size() == 2);
    for (std::size_t i = 0; i < 2; ++i)
      CHECK(parse_json(again.per_shard_sql[i].second) == parse_json(r.per_shard_sql[i].second));
  }

  // A new text of a known shape is cut from its text, without a parse.
  f.simple(sql);
  const auto parses = ParseTree::parses_on_this_thread();
  Route cut = f.simple("insert into USERS (id, name) values (" + B2 + ", 'x'), /* c */ (" + A2 + ", E'y\\\\'), (" + B1 +
                       ", $$z$$), (" + A1 + ", 'w') on conflict (id) do nothing returning id");
  CHECK(ParseTree::parses_on_this_thread() == parses);
  REQUIRE(cut.per_shard_sql.size() == 2);
  CHECK(cut.per_shard_sql[0].second == "insert into users (id, name) values (" + A2 + ", E'y\\\\'), (" + A1 +
                                           ", 'w') on conflict (id) do nothing returning id");
  CHECK(cut.per_shard_sql[1].second == "insert into users (id, name) values (" + B2 + ", 'x'), (" + B1 +
                                           ", $$z$$) on conflict (id) do nothing returning id");
  CHECK(cut.row_shards == std::vector<std::size_t>{1, 0, 1, 0});

  // The rows' shards in the statement's order, for RETURNING in that order.
  CHECK(f.simple(sql).row_shards == std::vector<std::size_t>{0, 1, 0, 1});

  // Parameters keep their numbers.
  Route p = f.prepared("INSERT INTO users (id, name) VALUES ($1, $2), ($3, $4)", {A1, "x", B1, "y"});
  REQUIRE(p.per_shard_sql.size() == 2);
  CHECK(p.per_shard_sql[0].second.find("$1") != std::string::npos);
  CHECK(p.per_shard_sql[0].second.find("$3") == std::string::npos);
  CHECK(p.per_shard_sql[1].second.find("$3") != std::string::npos);
  CHECK(p.per_shard_sql[1].second.find("$4") != std::string::npos);
  // (Cut from the prepared statement's text too, for every Bind.)
  CHECK(p.per_shard_sql[0].second == "insert into users (id, name) values ($1, $2)");

  // Without a column list the key's position comes from the table's shape.
  Route nc = f.both("INSERT INTO orders VALUES (1, " + A1 + ", 9.5), (2, " + B1 + ", 1)");
  REQUIRE(nc.per_shard_sql.size() == 2);
  CHECK(parse_json(nc.per_shard_sql[0].second).find("\"fval\":\"9.5\"") != std::string::npos);
}

TEST_CASE("INSERTs without a usable key are refused", "[router][insert]") {
  Fixture f;
  for (const char* sql : {"INSERT INTO users (name) VALUES ('a')", "INSERT INTO users DEFAULT VALUES",
                          "INSERT INTO users (id, name) VALUES (DEFAULT, 'a')",
                          "INSERT INTO users (id, name) VALUES (1 + 1, 'a')",
                          "INSERT INTO users (id, name) VALUES ((SELECT max(id) FROM users), 'a')",
                          "INSERT INTO users (id) VALUES (1), (DEFAULT)", "INSERT INTO users (id) SELECT 42",
                          "INSERT INTO users SELECT * FROM users WHERE id = 1",
                          "INSERT INTO users (id) VALUES ('not a number')",
                          "INSERT INTO orders (user_id) VALUES (1) ON CONFLICT (id) DO UPDATE SET user_id = 2"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::error);
    CHECK(r.sqlstate == "SPR01");
    CHECK(!r.message.empty());
  }
  Route short_row = f.both("INSERT INTO orders VALUES (1)");  // user_id is the 2nd column
  CHECK(short_row.sqlstate == "SPR01");
  CHECK_THAT(short_row.message, Catch::Contains("user_id"));
  // A multi-row INSERT inside a larger statement cannot be split.
  const std::string A = std::to_string(user_key_on(0)), B = std::to_string(user_key_on(1));
  Route cte = f.both("WITH w AS (INSERT INTO users (id) VALUES (" + A + "), (" + B + ") RETURNING id) SELECT * FROM w");
  CHECK(cte.kind == RouteKind::error);
  CHECK(cte.sqlstate == "SPR01");
  Route ok = f.both("WITH w AS (INSERT INTO users (id) VALUES (" + A + ") RETURNING id) SELECT * FROM w");
  CHECK(ok.shards == shards({0}));
  CHECK(ok.cls == StatementClass::write);
}

TEST_CASE("INSERT shapes are asked for when the column order is needed", "[router][insert]") {
  Fixture f;
  f.shapes_.erase("orders");
  Route r = f.prepared("INSERT INTO orders VALUES (1, 42, 3)");
  CHECK(r.kind == RouteKind::need_shapes);
  CHECK(r.missing_tables == std::vector<std::string>{"orders"});
}

TEST_CASE("INSERT without its key: the rows the proxy generates keys for, and the statement with them", "[router][insert]") {
  Fixture f;
  for (const FillCase& c : {FillCase{"INSERT INTO users (name) VALUES ('a'), ('b') RETURNING id", true, 0, {0, 1}},
                            FillCase{"INSERT INTO users (id, name) VALUES (DEFAULT, 'a')", false, 0, {0}},
                            FillCase{"INSERT INTO users (name, id) VALUES ('a', 7), ('b', DEFAULT)", false, 1, {1}},
                            FillCase{"INSERT INTO users VALUES (DEFAULT, 'a')", false, 0, {0}},
                            FillCase{"INSERT INTO users DEFAULT VALUES RETURNING id", true, 0, {0}}}) {
    const std::string keyed = check_fill(f, c, "users", "id");
    CHECK(count(parse_json(keyed), "\"sval\":\"100\"") == 1);
    CHECK(count(parse_json(keyed), "SetToDefault") == 0);
    Route r = f.both(c.sql);
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < c.rows.size(); ++i) keys.push_back(std::to_string(100 + i));
    // As parameters after the client's, and with OVERRIDING SYSTEM VALUE.
    auto with_params = insert_with_keys(c.sql, true, *r.generate_keys, keys, true, 3);
    REQUIRE(with_params);
    CHECK(with_params->find("$3") != std::string::npos);
    CHECK(count(parse_json(*with_params), "OVERRIDING_SYSTEM_VALUE") == 1);
  }
  // Not DEFAULT, not omitted: an expression stays refused, with nothing to generate.
  for (const char* sql : {"INSERT INTO users (id, name) VALUES (1 + 1, 'a')", "INSERT INTO users (id) SELECT 42"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.sqlstate == "SPR01");
    CHECK_FALSE(r.generate_keys);
  }
}

TEST_CASE("INSERT ... SELECT: run where the rows are, or pulled through the proxy", "[router][insert]") {
  Fixture f;
  // The key is a co-located table's key, passed through: the shards its conditions select.
  for (const char* sql : {"INSERT INTO orders (user_id, total) SELECT id, 1 FROM users",
                          "INSERT INTO orders (total, user_id) SELECT count(*), u.id FROM users u GROUP BY u.id",
                          "INSERT INTO users (id, name) SELECT o.user_id, c.name FROM orders o JOIN countries c ON true",
                          "INSERT INTO users (id) SELECT id FROM users ON CONFLICT DO NOTHING RETURNING id"}) {
    INFO(sql);
    Route r = f.both(sql);
    INFO(r.message);
    CHECK(r.kind == RouteKind::shards);
    CHECK(r.shards == shards({0, 1}));
    CHECK(r.cls == StatementClass::write);
    CHECK_FALSE(r.pull_insert);
  }
  Route one = f.both("INSERT INTO orders (user_id, total) SELECT id, 1 FROM users WHERE id = 42");
  CHECK(one.shards == std::vector<std::size_t>{user_shard("42")});
  // Anything else: the rows are read and inserted by the proxy.
  for (const char* sql : {"INSERT INTO users (id) SELECT id + 1 FROM users", "INSERT INTO users SELECT * FROM users",
                          "INSERT INTO users (id) SELECT 42", "INSERT INTO users (id) SELECT g FROM generate_series(1, 9) g",
                          "INSERT INTO users (id) SELECT id FROM users LIMIT 5",
                          "INSERT INTO users (id) SELECT DISTINCT id FROM users",
                          "INSERT INTO users (id) SELECT max(id) FROM users",
                          "INSERT INTO users (id) SELECT id FROM events",
                          "INSERT INTO users (id) SELECT id FROM users UNION SELECT user_id FROM orders",
                          "INSERT INTO users (id, name) SELECT id, (SELECT max(name) FROM users) FROM users",
                          "INSERT INTO users (name) SELECT name FROM users"}) {
    INFO(sql);
    Route r = f.both(sql);
    CHECK(r.kind == RouteKind::error);
    CHECK(r.sqlstate == "SPR01");
    CHECK(r.pull_insert);
  }
  // Not alone: refused.
  Route with = f.both("WITH x AS (SELECT 1) INSERT INTO users (id) SELECT id + 1 FROM users");
  CHECK(with.sqlstate == "SPR01");
  CHECK_FALSE(with.pull_insert);
  // The parts the proxy runs: the SELECT, and the INSERT with the rows' place marked.
  auto parts = insert_select_parts(
      "INSERT INTO users AS u (id, name) OVERRIDING USER VALUE SELECT id + 1, name FROM users WHERE id > $1 "
      "ON CONFLICT (id) DO UPDATE SET name = excluded.name RETURNING u.id",
      true);
  REQUIRE(parts);
  CHECK(parts->select == "SELECT id + 1, name FROM users WHERE id > $1");
  CHECK_FALSE(parts->params_outside_select);
  INFO(parts->insert);
  CHECK(parts->insert.find(kRowsMarker) != std::string::npos);
  std::string text = parts->insert;
  text.replace(text.find(kRowsMarker), kRowsMarker.size(), "VALUES ('1'::int8, 'a'::text)");
  Route again = f.both(text);
  CHECK(again.kind == RouteKind::shards);
  CHECK(again.shards == std::vector<std::size_t>{user_shard("1")});
  CHECK(count(parse_json(text), "onConflictClause") == 1);
  auto with_param = insert_select_parts("INSERT INTO users (id) SELECT id + 1 FROM users RETURNING id + $1", true);
  REQUIRE(with_param);
  CHECK(with_param->params_outside_select);
  CHECK_FALSE(insert_select_parts("INSERT INTO users (id) VALUES (1)", true));
}

TEST_CASE("INSERT into a table with a sequence column besides the key: the proxy fills it", "[router][insert]") {
  Fixture f;
  f.shapes_["orders"].sequence_columns = {"id"};  // orders: sharded by user_id, id a bigserial
  for (const FillCase& c :
       {FillCase{"INSERT INTO orders (user_id, total) VALUES (1, 2), (3, 4) RETURNING id", true, 0, {0, 1}},
        FillCase{"INSERT INTO orders (id, user_id, total) VALUES (DEFAULT, 1, 2), (5, 3, 4)", false, 0, {0}},
        FillCase{"INSERT INTO orders VALUES (DEFAULT, 1, 2)", false, 0, {0}}})
    check_fill(f, c, "orders", "id");
  // Given: routed as before.
  CHECK(f.both("INSERT INTO orders (id, user_id, total) VALUES (5, 1, 2)").kind == RouteKind::shards);
  // Without a column list, a row that ends just before the column gets it appended.
  f.shapes_["orders"] = {{"user_id", "total", "id"}, {"bigint", "numeric(10,2)", "bigint"}, "", {"id"}};
  Route trailing = f.both("INSERT INTO orders VALUES (1, 2)");
  REQUIRE(trailing.generate_keys);
  CHECK(trailing.generate_keys->position == 2);
  auto appended = insert_with_keys("INSERT INTO orders VALUES (1, 2)", true, *trailing.generate_keys, {"100"}, false);
  REQUIRE(appended);
  CHECK(*appended == "insert into orders values (1, 2, '100')");
  // INSERT ... SELECT that leaves it out: pulled (the proxy fills it), not run on the shards.
  Route pulled = f.both("INSERT INTO orders (user_id, total) SELECT id, 1 FROM users");
  CHECK(pulled.pull_insert);
  Route pushed = f.both("INSERT INTO orders (id, user_id, total) SELECT id, id, 1 FROM users");
  CHECK(pushed.kind == RouteKind::shards);
}

TEST_CASE("nextval('s') in an INSERT's VALUES: the proxy draws it", "[router][insert]") {
  Fixture f;
  // As the key: the rows' keys come from the proxy, then the statement routes by them.
  const FillCase key{"INSERT INTO users (id, name) VALUES (nextval('users_id_seq'), 'a'), "
                     "(nextval('users_id_seq'::regclass), 'b')",
                     false, 0, {0, 1}};
  const std::string keyed = check_fill(f, key, "users", "id");
  CHECK(keyed.find("nextval") == std::string::npos);
  CHECK(f.both(key.sql).generate_keys->sequence == "users_id_seq");
  // Another column: the same, whatever the table's shape says.
  const FillCase other{"INSERT INTO orders (id, user_id, total) VALUES (nextval('o'), 1, 2)", false, 0, {0}};
  check_fill(f, other, "orders", "id");
  CHECK(f.both(other.sql).generate_keys->sequence == "o");
  // Not a literal name: left to the shard.
  CHECK(f.prepared("INSERT INTO orders (id, user_id, total) VALUES (nextval($1), 1, 2)", {"o"}).kind ==
        RouteKind::shards);
}

TEST_CASE("The keys go into the INSERT's own text, not through a parse and a deparse", "[router][insert]") {
  Fixture f;
  struct Case {
    const char* sql;
    const char* keyed;  // with keys '100', '101', ...
  };
  for (const Case& c : {
           Case{"INSERT INTO users (name) VALUES ('a'), ('b') RETURNING id",
                "insert into users (name, \"id\") values ('a', '100'), ('b', '101') returning id"},
           Case{"INSERT  INTO Public.users AS u (ID, name) -- c\n VALUES (DEFAULT, 'x''y'), (7, $$b$$) ON CONFLICT DO NOTHING",
                "insert into public.users as u (id, name) values ('100', 'x''y'), (7, $$b$$) on conflict do nothing"},
           Case{"INSERT INTO users VALUES (DEFAULT, E'a\\'b', (ARRAY['c', 'd'])[1]);",
                "insert into users values ('100', E'a\\'b', (array['c', 'd'])[1]);"},
           Case{"INSERT INTO users DEFAULT VALUES RETURNING id",
                "insert into users (\"id\") values ('100') returning id"},
           Case{"INSERT INTO \"users\" (\"na\"\"me\", id) VALUES (f(1, (2)), nextval('users_id_seq'))",
                "insert into \"users\" (\"na\"\"me\", id) values (f(1, (2)), '100')"},
       }) {
    INFO(c.sql);
    Route r = f.both(c.sql);
    INFO(r.message);
    REQUIRE(r.generate_keys);
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < r.generate_keys->rows.size(); ++i) keys.push_back(std::to_string(100 + i));
    const auto parses = ParseTree::parses_on_this_thread();
    auto keyed = insert_with_keys(c.sql, true, *r.generate_keys, keys, false);
    CHECK(ParseTree::parses_on_this_thread() == parses);
    REQUIRE(keyed);
    CHECK(*keyed == c.keyed);
    // OVERRIDING SYSTEM VALUE, and parameters.
    auto with_params = insert_with_keys(c.sql, true, *r.generate_keys, keys, true, 3);
    REQUIRE(with_params);
    INFO(*with_params);
    CHECK(count(*with_params, "overriding system value") == 1);
    CHECK(count(parse_json(*with_params), "OVERRIDING_SYSTEM_VALUE") == 1);
    CHECK(with_params->find("$3") != std::string::npos);
  }
  // OVERRIDING USER VALUE written: made SYSTEM.
  Route r = f.both("INSERT INTO users (id, name) OVERRIDING USER VALUE VALUES (DEFAULT, 'a')");
  REQUIRE(r.generate_keys);
  CHECK(insert_with_keys("INSERT INTO users (id, name) OVERRIDING USER VALUE VALUES (DEFAULT, 'a')", true,
                         *r.generate_keys, {"5"}, true) ==
        "insert into users (id, name) overriding system value values ('5', 'a')");
  // Only one statement is read from a text: none of a text with two.
  CHECK(split_insert_text("INSERT INTO users (id) VALUES (1), (2);", {0, 1}));
  CHECK_FALSE(split_insert_text("INSERT INTO users (id) VALUES (1), (2); SELECT 1", {0, 1}));
  CHECK_FALSE(split_insert_text("INSERT INTO users (id) VALUES (1), (2)", {0, 1, 1}));
  // Other shapes, and texts read with standard_conforming_strings off, go through the tree.
  for (const auto& [sql, standard] : {std::pair{"WITH x AS (SELECT 1) INSERT INTO users (name) VALUES ('a')", true},
                                      std::pair{"INSERT INTO users (name) VALUES ('a')", false}}) {
    INFO(sql);
    Route w = f.both(sql);
    REQUIRE(w.generate_keys);
    auto keyed = insert_with_keys(sql, standard, *w.generate_keys, {"100"}, false);
    REQUIRE(keyed);
    CHECK(keyed->find("INSERT INTO users") != std::string::npos);  // (the deparser's spelling)
    CHECK(count(parse_json(*keyed), "\"sval\":\"100\"") == 1);
  }
}
