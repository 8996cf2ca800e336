// Which texts carry session state over to other backends (routing/session_command.hpp):
// the router's Route::session_commands lists them (the proxy reads no statement text
// itself), so it must be set for every text that holds one and,
// for the hot path, for no other (UPDATE ... SET, a literal 'set', a column "listen").
#include "routing/session_command.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

TEST_CASE("session commands are flagged by the router, in every mode and on a cache hit", "[router][session]") {
  Fixture f;
  const char* with_command[] = {
      "SET search_path TO public",
      "set statement_timeout = 5",
      "SET LOCAL work_mem = '4MB'",
      "SET TIME ZONE 'UTC'",
      "SET ROLE app",
      "RESET search_path",
      "RESET ALL",
      "DISCARD ALL",
      "DEALLOCATE ALL",
      "DEALLOCATE PREPARE p1",
      "LISTEN channel",
      "SELECT 1; SET search_path TO public",
      "/* SELECT */ SET search_path TO public; SELECT * FROM users WHERE id = 1",
      "UPDATE users SET name = 'x' WHERE id = 1; RESET ALL",
  };
  for (const char* sql : with_command) {
    INFO(sql);
    CHECK(f.simple(sql).session_commands);
    CHECK(f.simple(sql).session_commands);  // a cache hit when cacheable
    CHECK(f.prepared(sql).session_commands);
    CHECK(f.prepared(sql).session_commands);  // the cached Parse plan
  }
  const char* without[] = {
      "SELECT * FROM users WHERE id = 1",
      "UPDATE users SET name = 'settings' WHERE id = 1",
      "SELECT 'set search_path to x' FROM users WHERE id = 2",
      "SELECT 1 AS \"listen\", 2 AS discard",
      "INSERT INTO users (id, name) VALUES (3, 'reset all')",
      "BEGIN",
      "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE; SELECT 1",  // still a VariableSetStmt: flagged below
  };
  for (std::size_t i = 0; i + 1 < std::size(without); ++i) {
    INFO(without[i]);
    CHECK_FALSE(f.simple(without[i]).session_commands);
    CHECK_FALSE(f.simple(without[i]).session_commands);
    CHECK_FALSE(f.prepared(without[i]).session_commands);
  }
  // SET TRANSACTION parses as a SET: looked at, and classify_session_command ignores
  // it, so the list is empty.
  Route set_transaction = f.simple(without[std::size(without) - 1]);
  REQUIRE(set_transaction.session_commands);
  CHECK(set_transaction.session_commands->empty());
  CHECK(classify_session_command("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").kind == SessionCommand::none);
}

TEST_CASE("a syntax error is not a session command", "[router][session]") {
  Fixture f;
  Route r = f.simple("SET search_path TO");
  CHECK(r.kind == RouteKind::error);
}

TEST_CASE("classify_session_command reads the leading keywords", "[session]") {
  CHECK(classify_session_command("SET search_path TO x").kind == SessionCommand::set);
  CHECK(classify_session_command("SET search_path TO x").name == "search_path");
  CHECK(classify_session_command("set local x = 1").kind == SessionCommand::set_local);
  CHECK(classify_session_command("SET TIME ZONE 'UTC'").name == "timezone");
  CHECK(classify_session_command("SET SESSION AUTHORIZATION app").name == "session_authorization");
  CHECK(classify_session_command("RESET SESSION AUTHORIZATION").kind == SessionCommand::reset);
  CHECK(classify_session_command("RESET SESSION AUTHORIZATION").name == "session_authorization");
  CHECK(classify_session_command("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY").kind == SessionCommand::none);
  CHECK(classify_session_command("SET CONSTRAINTS ALL DEFERRED").kind == SessionCommand::none);
  CHECK(classify_session_command("-- c\n/* d */ RESET ALL").kind == SessionCommand::reset_all);
  CHECK(classify_session_command("RESET work_mem").kind == SessionCommand::reset);
  CHECK(classify_session_command("DISCARD ALL").kind == SessionCommand::discard_all);
  CHECK(classify_session_command("DISCARD PLANS").kind == SessionCommand::none);
  CHECK(classify_session_command("DEALLOCATE PREPARE P_1").kind == SessionCommand::deallocate);
  CHECK(classify_session_command("DEALLOCATE PREPARE P_1").name == "p_1");
  CHECK(classify_session_command("DEALLOCATE ALL").kind == SessionCommand::deallocate_all);
  CHECK(classify_session_command("LISTEN x").kind == SessionCommand::listen);
  CHECK(classify_session_command("UPDATE t SET a = 1").kind == SessionCommand::none);
  CHECK(split_statements("SET a = 1; SELECT 'x;y'; RESET a").size() == 3);
  // The cheap test before a split: a ';' with more than blanks after it.
  CHECK(may_hold_several_statements("SELECT 1; SELECT 2"));
  CHECK(may_hold_several_statements("SELECT 'x;y'"));  // (a string: the split then finds one)
  CHECK_FALSE(may_hold_several_statements("SELECT 1;"));
  CHECK_FALSE(may_hold_several_statements("SELECT 1 ;  \n;\t"));
  CHECK_FALSE(may_hold_several_statements("SELECT 1"));
  CHECK(split_statements("SELECT 'x;y'").size() == 1);
}
