// What the router tells the session so that a statement behaves through the proxy as on
// one PostgreSQL (issue: transparency): syntax errors left to a shard, transaction
// chaining and the client's own two-phase commit, SQL-level PREPARE/EXECUTE, objects
// that pin a backend, SET ... TO DEFAULT, and standard_conforming_strings = off.
#include "routing/session_command.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

TEST_CASE("a statement that does not parse is marked for a shard to report", "[router][transparency]") {
  Fixture f;
  for (const char* sql : {"selec 1", "SELECT FROM users WHERE", "SELECT 'unterminated"}) {
    INFO(sql);
    CHECK(f.simple(sql).kind == RouteKind::error);
    CHECK(f.simple(sql).syntax_error);
    CHECK(f.prepared(sql).syntax_error);
  }
  // A proxy error is not a syntax error: it must never reach a shard.
  Route r = f.simple("UPDATE users SET id = 2 WHERE id = 1");
  CHECK_FALSE(r.syntax_error);
}

TEST_CASE("transaction verbs: chaining and the client's two-phase commit", "[router][transparency]") {
  Fixture f;
  CHECK(f.simple("COMMIT AND CHAIN").txn_options.chain);
  CHECK(f.simple("rollback and chain").txn_options.chain);
  CHECK_FALSE(f.simple("COMMIT AND NO CHAIN").txn_options.chain);
  CHECK_FALSE(f.simple("COMMIT").txn_options.chain);
  Route p = f.simple("PREPARE TRANSACTION 'a1'");
  CHECK(p.txn == TxnCommand::prepare);
  CHECK(p.names->gid == "a1");
  // The gid is a literal: another gid must not come from the cache with the first's.
  CHECK(f.simple("PREPARE TRANSACTION 'b2'").names->gid == "b2");
  CHECK(f.simple("COMMIT PREPARED 'c3'").txn == TxnCommand::finish_prepared);
  CHECK(f.simple("COMMIT PREPARED 'c3'").names->gid == "c3");
  CHECK(f.simple("ROLLBACK PREPARED 'd4'").names->gid == "d4");
}

TEST_CASE("SQL-level PREPARE and EXECUTE carry what routes the EXECUTE", "[router][transparency]") {
  Fixture f;
  Route p = f.simple("PREPARE q1 (bigint) AS SELECT name FROM users WHERE id = $1");
  CHECK(p.sql_prepared == Route::SqlPrepared::prepare);
  CHECK(p.names->prepared_name == "q1");
  CHECK(p.session_commands);
  REQUIRE_FALSE(p.names->prepared_query.empty());
  // The deparsed query routes like the client's own text.
  auto plan = f.router.plan(p.names->prepared_query, {});
  std::vector<std::optional<std::string_view>> values{std::string_view("7")};
  BoundParams bp{values, {}, {}};
  Route on_key = f.router.route(*plan, bp, f.session, f.lookup);
  CHECK(on_key.kind == RouteKind::shards);
  CHECK(on_key.shards == f.prepared("SELECT name FROM users WHERE id = $1", {"7"}).shards);

  Route e = f.simple("EXECUTE q1(7)");
  CHECK(e.sql_prepared == Route::SqlPrepared::execute);
  CHECK(e.names->prepared_name == "q1");
  REQUIRE(e.names->execute_args);
  CHECK(*e.names->execute_args == std::vector<std::optional<std::string>>{"7"});
  // Literals are the statement: EXECUTE q1(8) must not reuse q1(7)'s arguments.
  CHECK(*f.simple("EXECUTE q1(8)").names->execute_args == std::vector<std::optional<std::string>>{"8"});
  CHECK(*f.simple("EXECUTE Q1('x', NULL, -3)").names->execute_args ==
        std::vector<std::optional<std::string>>{"x", std::nullopt, "-3"});
  CHECK(f.simple("EXECUTE Q1('x')").names->prepared_name == "q1");
  CHECK_FALSE(f.simple("EXECUTE q1(1 + 1)").names->execute_args);  // not a constant
  // Not alone in its text: refused. Sent whole, the PREPARE stayed on a pooled backend
  // unknown to the proxy (the next client's PREPARE of that name failed with 42P05) and
  // the EXECUTE went to any shard (a wrong answer).
  Route mixed = f.simple("PREPARE a AS SELECT 1; SELECT 2");
  CHECK(mixed.kind == RouteKind::error);
  CHECK(mixed.sqlstate == "0A000");
  CHECK(f.simple("SELECT 1; EXECUTE q1(7)").kind == RouteKind::error);
  CHECK(f.simple("PREPARE b (bigint) AS SELECT name FROM users WHERE id = $1; EXECUTE b(7)").sqlstate == "0A000");
}

TEST_CASE("cursor commands alone in their text carry the cursor", "[router][transparency]") {
  Fixture f;
  Route d = f.simple("DECLARE c1 CURSOR WITH HOLD FOR SELECT name FROM users ORDER BY name");
  CHECK(d.cursor == Route::Cursor::declare);
  REQUIRE(d.names);
  CHECK(d.names->cursor == "c1");
  CHECK(d.names->cursor_hold);
  CHECK(d.names->cursor_plain);
  CHECK_FALSE(f.simple("DECLARE c4 SCROLL CURSOR FOR SELECT name FROM users").names->cursor_plain);
  CHECK_FALSE(f.simple("FETCH BACKWARD 2 FROM c1").names->fetch_forward);
  CHECK_FALSE(f.simple("FETCH -2 FROM c1").names->fetch_forward);
  CHECK(d.names->cursor_query == "SELECT name FROM users ORDER BY name");
  CHECK(d.kind == RouteKind::shards);  // routed as its query: every shard
  CHECK(d.shards.size() == 2);
  Route on_key = f.simple("DECLARE c2 CURSOR FOR SELECT name FROM users WHERE id = 7");
  CHECK(on_key.cursor == Route::Cursor::declare);
  CHECK(on_key.kind == RouteKind::shards);
  Route fetch = f.simple("FETCH 25 FROM c1");
  CHECK(fetch.cursor == Route::Cursor::fetch);
  CHECK(fetch.names->cursor == "c1");
  CHECK(fetch.names->fetch_count == 25);
  CHECK(fetch.names->fetch_forward);
  CHECK_FALSE(fetch.names->move);
  Route move = f.simple("MOVE ALL IN c1");
  CHECK(move.names->move);
  CHECK(move.names->fetch_count > (std::int64_t{1} << 40));
  CHECK(f.simple("CLOSE c1").cursor == Route::Cursor::close);
  CHECK(f.simple("CLOSE ALL").names->cursor.empty());
  // Different literals, different cursors: never one cached plan for both.
  CHECK(f.simple("FETCH 2 FROM c1").names->fetch_count == 2);
  CHECK(f.simple("DECLARE c3 CURSOR FOR SELECT 1; SELECT 2").cursor == Route::Cursor::none);
}

TEST_CASE("objects that outlive the transaction pin the backend", "[router][transparency]") {
  Fixture f;
  for (const char* sql : {"CREATE TEMP TABLE t (a int)", "create temporary table t as select 1",
                          "SELECT 1 INTO TEMP t", "CREATE TEMP VIEW v AS SELECT 1", "CREATE TEMP SEQUENCE s",
                          "DECLARE c CURSOR WITH HOLD FOR SELECT 1"}) {
    INFO(sql);
    CHECK(f.simple(sql).pins_session);
  }
  for (const char* sql : {"CREATE TEMP TABLE t (a int) ON COMMIT DROP", "CREATE TABLE t (a int)",
                          "DECLARE c CURSOR FOR SELECT 1", "SELECT * FROM users WHERE id = 1"}) {
    INFO(sql);
    CHECK_FALSE(f.simple(sql).pins_session);
  }
}

TEST_CASE("SET name TO DEFAULT is a RESET", "[session][transparency]") {
  CHECK(classify_session_command("SET datestyle TO DEFAULT").kind == SessionCommand::reset);
  CHECK(classify_session_command("set DateStyle = default;").kind == SessionCommand::reset);
  CHECK(classify_session_command("SET datestyle TO DEFAULT").name == "datestyle");
  CHECK(classify_session_command("SET datestyle TO 'default'").kind == SessionCommand::set);
  CHECK(classify_session_command("SET search_path TO default, public").kind == SessionCommand::set);
}

TEST_CASE("standard_conforming_strings off: backslashes escape, and nothing is cached", "[router][transparency]") {
  Fixture f;
  const char* sql = "SELECT name FROM users WHERE id = 5 AND name = 'a\\'b'";
  CHECK(f.simple(sql).syntax_error);  // standard strings: unterminated
  f.session.standard_conforming_strings = false;
  Route r = f.simple(sql);
  CHECK(r.kind == RouteKind::shards);
  CHECK(r.shards == f.simple("SELECT name FROM users WHERE id = 5").shards);
  std::vector<std::optional<std::string_view>> none;
  Route extended = f.router.route(*f.router.plan(sql, {}, false), BoundParams{none, {}, {}}, f.session, f.lookup);
  CHECK(extended.shards == r.shards);
  const char* two_or_one = "SELECT 'x\\' AS a, '; SELECT 1; -- '";
  CHECK(split_statements(two_or_one, false).size() == 2);
  CHECK(split_statements(two_or_one, true).size() == 1);
  f.session.standard_conforming_strings = true;
  CHECK(f.simple(sql).syntax_error);  // the parser is back to standard strings
}
