// The order in which the proxy's special cases are tried (routing/dispatch.hpp, issue
// #46): one statement of each kind through the router, then dispatch, for the simple
// Query and the Bind. A change of order shows here first.
#include <string>

#include "routing/dispatch.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

namespace {

std::string steps_of(const Route& route, std::size_t shards, Protocol protocol) {
  std::string out;
  for (Executor e : dispatch(route, shards, protocol)) {
    if (!out.empty()) out += ' ';
    out += executor_name(e);
  }
  return out;
}

}  // namespace

TEST_CASE("the simple Query's steps, statement by statement", "[dispatch]") {
  Fixture f;
  const std::pair<const char*, const char*> cases[] = {
      {"SELECT * FROM users WHERE id = 42", "one_shard"},
      {"SELECT * FROM users", "scatter_read"},
      {"EXPLAIN SELECT * FROM users", "several_shards"},
      {"SELECT * FROM countries", "one_shard"},
      {"UPDATE users SET name = 'x'", "several_shards"},
      {"CREATE TABLE t (a int)", "several_shards"},
      {"COPY users FROM STDIN", "copy_in"},
      {"COPY countries FROM STDIN", "copy_in"},
      {"COPY users TO STDOUT", "scatter_read"},
      {"BEGIN", "transaction one_shard"},
      {"COMMIT", "transaction one_shard"},
      {"SAVEPOINT a", "transaction one_shard"},
      {"PREPARE TRANSACTION 'g'", "transaction one_shard"},
      {"SELEC 1", "shard_error one_shard"},
      {"SELECT currval('users_id_seq')", "sequence_read one_shard"},
      {"INSERT INTO users (name) VALUES ('a')", "generate_keys"},
      {"INSERT INTO users SELECT * FROM orders", "pull_insert"},
      {"DECLARE c CURSOR FOR SELECT * FROM users", "cursor scatter_read"},
      {"FETCH 10 FROM c", "cursor one_shard"},
      {"SET splitpoint.shard = 's1'", "local"},
      {"UPDATE users SET id = 5 WHERE CURRENT OF c", "reject"},
      {"PREPARE p AS SELECT * FROM users WHERE id = $1", "sql_prepare one_shard"},
      {"EXECUTE p(1)", "sql_execute one_shard"},
      {"DEALLOCATE p", "deallocate one_shard"},
      {"SET search_path = public", "one_shard"},
  };
  for (const auto& [sql, expected] : cases) {
    INFO(sql);
    Route r = f.simple(sql);
    INFO("message: " << r.message);
    CHECK(steps_of(r, 2, Protocol::simple) == expected);
  }
}

TEST_CASE("the Bind's steps: no COPY or SQL PREPARE/EXECUTE steps", "[dispatch]") {
  Fixture f;
  const std::pair<const char*, const char*> cases[] = {
      {"SELECT * FROM users WHERE id = $1", "one_shard"},
      {"SELECT * FROM users WHERE name = $1", "scatter_read"},
      {"UPDATE users SET name = $1", "several_shards"},
      {"COMMIT", "transaction one_shard"},
      {"BEGIN", "one_shard"},  // (a Bind's BEGIN is the shard's: the proxy follows its status)
      {"INSERT INTO users (name) VALUES ($1)", "generate_keys"},
      {"SELECT currval('users_id_seq')", "sequence_read one_shard"},
      {"SHOW splitpoint.shard", "local"},
      {"DECLARE c CURSOR FOR SELECT * FROM users WHERE name = $1", "cursor scatter_read"},  // (psycopg 3)
      {"FETCH 10 FROM c", "cursor one_shard"},
  };
  for (const auto& [sql, expected] : cases) {
    INFO(sql);
    Route r = f.prepared(sql, {"1"});
    INFO("message: " << r.message);
    CHECK(steps_of(r, 2, Protocol::extended) == expected);
  }
}

TEST_CASE("one shard: a keyless write and COPY are that shard's", "[dispatch]") {
  Fixture f;
  CHECK(steps_of(f.simple("UPDATE users SET name = 'x'"), 1, Protocol::simple) == "one_shard");
  CHECK(steps_of(f.simple("COPY users FROM STDIN"), 1, Protocol::simple) == "one_shard");
}
