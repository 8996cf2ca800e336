// The scatter decision (routing/merge/scatter_plan.hpp) and the combine step's plan
// (combine_plan.hpp): which reads the merger answers and which PostgreSQL combines,
// the partial and combine queries, and that a statement is parsed once.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "routing/merge/scatter_plan.hpp"
#include "routing/pg_tree.hpp"
#include "routing/router.hpp"
#include "router_fixture.hpp"

using namespace splitpoint::routing;

namespace {

const std::map<std::string, TableShape> kShapes = {
    {"orders", {{"order_id", "customer", "amount", "status", "created_at", "qty"},
                {"bigint", "text", "numeric(12,2)", "text", "timestamp with time zone", "integer"}}},
    {"customers", {{"name", "city", "since"}, {"text", "text", "date"}}},
};

ScatterOptions options(bool known_columns = true) {
  ScatterOptions o;
  o.merge.is_reference_table = [](std::string_view t) { return t == "countries"; };
  o.combine.is_sharded_table = [](std::string_view, std::string_view t) { return t == "orders" || t == "customers"; };
  if (known_columns) {
    o.combine.table_shape = [](std::string_view t) -> const TableShape* {
      auto it = kShapes.find(std::string(t));
      return it == kShapes.end() ? nullptr : &it->second;
    };
    o.merge.table_columns = [](std::string_view t) -> const std::vector<std::string>* {
      auto it = kShapes.find(std::string(t));
      return it == kShapes.end() ? nullptr : &it->second.columns;
    };
  }
  return o;
}

const CombinePlan& combined(const ScatterPlan& p) {
  INFO((p.error ? p.error->sqlstate + " " + p.error->message : std::string("merged")));
  REQUIRE(p.combine);
  return *p.combine;
}

}  // namespace

TEST_CASE("what the merger answers stays a merge", "[combine]") {
  for (const char* sql : {"SELECT status, count(*) FROM orders GROUP BY status ORDER BY 2 DESC LIMIT 5",
                          "SELECT * FROM orders ORDER BY created_at, order_id"}) {
    INFO(sql);
    auto p = plan_scatter(sql, options());
    CHECK(p.merge);
    CHECK_FALSE(p.combine);
    CHECK_FALSE(p.error);
  }
}

TEST_CASE("what the merger refuses goes to the combine step", "[combine]") {
  for (const char* sql : {
           "SELECT count(*)::int AS n FROM orders",
           "SELECT round(sum(amount)::numeric, 2) FROM orders",
           "SELECT count(DISTINCT status) FROM orders",
           "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM orders",
           "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders",
           "SELECT status FROM orders UNION SELECT city FROM customers",
           "SELECT status, count(*) FROM orders GROUP BY ROLLUP (status)",
           "SELECT count(*)::int FROM (SELECT * FROM orders WHERE status = 'paid') AS anon_1",
       }) {
    INFO(sql);
    auto p = plan_scatter(sql, options());
    CHECK_FALSE(p.merge);
    CHECK_FALSE(p.error);
    CHECK(p.combine);
  }
}

TEST_CASE("a combine pulls the columns the statement names, filtered on the shards when it can", "[combine]") {
  auto p = plan_scatter("SELECT count(DISTINCT status) FROM orders o WHERE o.amount > $1", options());
  const auto& c = combined(p);
  REQUIRE(c.pulls.size() == 1);
  CHECK(c.pulls[0].temp_name == "sp_combine_1");
  CHECK(c.pulls[0].filtered);
  CHECK_FALSE(c.all_shards);
  CHECK(c.pulls[0].pull_sql == "SELECT amount, status FROM orders o WHERE o.amount > $1");
  CHECK(c.pulls[0].create_sql ==
        "CREATE TEMP TABLE sp_combine_1 ON COMMIT DROP AS SELECT \"amount\", \"status\" FROM \"orders\" WITH NO DATA");
  // the filter ran on the shards: the combine query reads the temporary table as is
  CHECK(c.combine_sql == "SELECT count(DISTINCT status) FROM pg_temp.sp_combine_1 o");
}

TEST_CASE("a combine of numbered rows pulls no values, one of unknown tables every column", "[combine]") {
  auto counted = plan_scatter("SELECT row_number() OVER () FROM orders", options());
  CHECK(combined(counted).pulls[0].pull_sql == "SELECT 1 AS sp_combine_row FROM \"orders\"");
  CHECK(combined(counted).combine_sql == "SELECT row_number() OVER () FROM pg_temp.sp_combine_1 orders");
  auto unknown = plan_scatter("SELECT count(*)::int FROM orders", options(false));
  CHECK(combined(unknown).pulls[0].pull_sql == "SELECT * FROM \"orders\"");
  auto whole = plan_scatter("SELECT count(DISTINCT o) FROM orders o", options());
  CHECK(combined(whole).pulls[0].pull_sql == "SELECT * FROM \"orders\"");
}

TEST_CASE("a combine of several tables pulls each from every shard, unfiltered", "[combine]") {
  auto o = options();
  o.combine_only = true;  // the router says so: the tables are not co-located
  auto p = plan_scatter(
      "SELECT c.city, count(*) FROM orders o JOIN customers c ON c.name = o.customer WHERE o.amount > 5 GROUP BY 1", o);
  const auto& c = combined(p);
  REQUIRE(c.pulls.size() == 2);
  CHECK(c.all_shards);
  CHECK(c.pulls[0].pull_sql == "SELECT \"customer\", \"amount\" FROM \"orders\"");
  CHECK(c.pulls[1].pull_sql == "SELECT \"name\", \"city\" FROM \"customers\"");
  CHECK(c.combine_sql.find("pg_temp.sp_combine_1 o JOIN pg_temp.sp_combine_2 c") != std::string::npos);
  CHECK(c.combine_sql.find("WHERE o.amount > 5") != std::string::npos);
}

TEST_CASE("a combine database of its own: reference tables are pulled too, from one shard", "[combine]") {
  const char* sql = "SELECT co.region, count(DISTINCT o.status) FROM orders o JOIN countries co ON co.code = o.customer "
                    "GROUP BY 1";
  // On a shard, the reference table is the combine database's own.
  auto p = plan_scatter(sql, options());
  const auto& on_shard = combined(p);
  REQUIRE(on_shard.pulls.size() == 1);
  CHECK(on_shard.combine_sql.find("JOIN countries co") != std::string::npos);

  auto o = options();
  o.combine.is_whole_table = [](std::string_view schema, std::string_view t) { return schema.empty() && t == "countries"; };
  auto q = plan_scatter(sql, o);
  const auto& own = combined(q);
  REQUIRE(own.pulls.size() == 2);
  CHECK_FALSE(own.pulls[0].one_shard);
  CHECK(own.pulls[1].one_shard);
  CHECK(own.pulls[1].pull_sql == "SELECT * FROM \"countries\"");  // (no shape known: every column)
  CHECK(own.combine_sql.find("pg_temp.sp_combine_1 o JOIN pg_temp.sp_combine_2 co") != std::string::npos);
  // A statement of reference tables alone is not combined.
  auto r = plan_scatter("SELECT count(DISTINCT region) FROM countries", o);
  CHECK(r.error);
}

TEST_CASE("a CTE's name is not a table to pull; a sub-select's filter stays in the combine", "[combine]") {
  auto p = plan_scatter("WITH orders AS (SELECT * FROM customers) SELECT count(DISTINCT city) FROM orders", options());
  const auto& c = combined(p);
  REQUIRE(c.pulls.size() == 1);
  CHECK(c.pulls[0].table == "\"customers\"");
  auto sub = plan_scatter(
      "SELECT count(DISTINCT status) FROM orders WHERE customer IN (SELECT name FROM customers WHERE city = 'x')",
      options());
  CHECK_FALSE(combined(sub).pulls[0].filtered);
}

TEST_CASE("what no combine can answer is refused with SPC01", "[combine]") {
  // (The join is not co-located: the router asks for the combine step only.)
  auto only = options();
  only.combine_only = true;
  for (const auto& [sql, o] : {std::pair{"SELECT count(DISTINCT status) FROM orders FOR UPDATE", options()},
                               std::pair{"SELECT * FROM orders o JOIN customers c ON c.name = o.customer FOR SHARE", only}}) {
    INFO(sql);
    auto p = plan_scatter(sql, o);
    REQUIRE(p.error);
    CHECK(p.error->sqlstate == "SPC01");
    CHECK_FALSE(p.combine);
  }
}

TEST_CASE("several statements and cursors are refused plainly, with 0A000", "[combine]") {
  for (bool combine_only : {false, true}) {
    auto o = options();
    o.combine_only = combine_only;
    auto several = plan_scatter("SELECT count(*) FROM orders; SELECT count(*) FROM customers", o);
    REQUIRE(several.error);
    CHECK(several.error->sqlstate == "0A000");
    CHECK(several.error->message.find("several statements") != std::string::npos);
    auto cursor = plan_scatter("DECLARE c CURSOR FOR SELECT * FROM orders ORDER BY id", o);
    REQUIRE(cursor.error);
    CHECK(cursor.error->sqlstate == "0A000");
    CHECK(cursor.error->message.find("cursor") != std::string::npos);
  }
}

TEST_CASE("Route::needs_combine skips the merger", "[combine]") {
  auto o = options();
  o.combine_only = true;
  auto p = plan_scatter("SELECT * FROM orders o JOIN customers c ON c.name = o.customer", o);
  CHECK_FALSE(p.merge);
  CHECK(p.combine);
}

TEST_CASE("one parse per new statement text, none for a cached one", "[combine][parse]") {
  ScatterPlanner planner;
  const auto o = options();
  for (const char* sql : {"SELECT count(DISTINCT status) FROM orders WHERE amount > $1",
                          "SELECT status, count(*) FROM orders GROUP BY status"}) {
    INFO(sql);
    auto before = ParseTree::parses_on_this_thread();
    auto first = planner.plan(sql, o);
    CHECK(ParseTree::parses_on_this_thread() - before == 1);
    before = ParseTree::parses_on_this_thread();
    auto again = planner.plan(sql, o);
    CHECK(ParseTree::parses_on_this_thread() == before);
    CHECK(again == first);
  }
  auto cached = planner.plan("SELECT status, count(*) FROM orders GROUP BY status", o);
  planner.clear();  // DDL: plans are made again
  CHECK(planner.plan("SELECT status, count(*) FROM orders GROUP BY status", o) != cached);
}

TEST_CASE("a statement's text is parsed once, however many steps read it", "[router][parse]") {
  splitpoint::routing::test::Fixture f;
  ScatterPlanner planner;
  // A scatter read of a new text: the router's analysis, then the scatter plan.
  const char* read = "SELECT user_id, sum(total) FROM orders WHERE total > 10 GROUP BY user_id";
  auto before = ParseTree::parses_on_this_thread();
  Route r = f.simple(read);
  CHECK((r.kind == RouteKind::all_shards || r.shards.size() > 1));
  auto plan = planner.plan(read, options());
  CHECK(plan->merge);
  CHECK(ParseTree::parses_on_this_thread() - before == 1);
  // Its next execution with other literals: the route plan and the scatter plan are
  // the shape's (scatter_shape.hpp), nothing is parsed.
  before = ParseTree::parses_on_this_thread();
  f.simple("SELECT user_id, sum(total) FROM orders WHERE total > 20 GROUP BY user_id");
  auto shaped = planner.plan("SELECT user_id, sum(total) FROM orders WHERE total > 20 GROUP BY user_id", options());
  CHECK(ParseTree::parses_on_this_thread() == before);
  REQUIRE(shaped->merge);
  CHECK(shaped->merge->shard_sql.find("total > 20") != std::string::npos);
  // COPY FROM: the route carries the COPY's options, read from the same parse.
  before = ParseTree::parses_on_this_thread();
  Route copy = f.simple("COPY orders (id, user_id) FROM STDIN WITH (FORMAT csv, DELIMITER ';')");
  CHECK(ParseTree::parses_on_this_thread() - before == 1);
  REQUIRE(copy.copy_from);
  REQUIRE(copy.copy_from->statement);
  CHECK(copy.copy_from->statement->from_stdin);
  CHECK(copy.copy_from->statement->format == CopyStatement::Format::csv);
  CHECK(copy.copy_from->statement->delimiter == ';');
  Route bad = f.simple("COPY orders FROM STDIN WITH (ENCODING 'LATIN1')");
  REQUIRE(bad.copy_from);
  CHECK_FALSE(bad.copy_from->statement);
  CHECK_FALSE(bad.copy_from->error.empty());
  CHECK_FALSE(f.simple("COPY orders TO STDOUT").copy_from);
}

TEST_CASE("the route carries the text's session commands and BEGIN's tag", "[router][transparency]") {
  splitpoint::routing::test::Fixture f;
  for (int i = 0; i < 2; ++i) {  // the second time from the cache, with other literals
    Route r = f.simple(i == 0 ? "SET search_path = a; SELECT 1; RESET work_mem" : "SET search_path = b; SELECT 1; RESET work_mem");
    REQUIRE(r.session_commands);
    REQUIRE(r.session_commands->size() == 2);
    CHECK((*r.session_commands)[0].kind == SessionCommand::set);
    CHECK((*r.session_commands)[0].name == "search_path");
    CHECK((*r.session_commands)[0].text == (i == 0 ? "SET search_path = a" : "SET search_path = b"));
    CHECK((*r.session_commands)[1].kind == SessionCommand::reset);
    CHECK((*r.session_commands)[1].statement == 2);
  }
  // set_config as pg_dump sends it: a SET (or SET LOCAL) of that parameter (SPEC 14).
  Route sc = f.simple("SELECT pg_catalog.set_config('search_path', '', false);");
  REQUIRE(sc.session_commands);
  REQUIRE(sc.session_commands->size() == 1);
  CHECK((*sc.session_commands)[0].kind == SessionCommand::set);
  CHECK((*sc.session_commands)[0].name == "search_path");
  Route scl = f.simple("SELECT set_config('Work_Mem', '8MB', true)");
  REQUIRE(scl.session_commands);
  CHECK((*scl.session_commands)[0].kind == SessionCommand::set_local);
  CHECK((*scl.session_commands)[0].name == "work_mem");
  CHECK_FALSE(f.simple("SELECT set_config('work_mem', current_setting('work_mem'), false)").session_commands);
  CHECK_FALSE(f.simple("SELECT set_config('a.b', 'c', false), 1").session_commands);
  Route d = f.simple("SELECT 1; DEALLOCATE q");  // not a text that starts with DEALLOCATE
  REQUIRE(d.session_commands);
  CHECK(d.session_commands->front().statement == 1);
  CHECK_FALSE(f.simple("SELECT 1").session_commands);
  CHECK(f.simple("START TRANSACTION").txn_options.start);
  CHECK_FALSE(f.simple("BEGIN").txn_options.start);
}

TEST_CASE("a cached route plan is not parsed again", "[router][parse]") {
  splitpoint::routing::test::Fixture f;
  f.simple("SELECT * FROM users WHERE id = 7");
  auto before = ParseTree::parses_on_this_thread();
  Route r = f.simple("SELECT * FROM users WHERE id = 8");
  CHECK(ParseTree::parses_on_this_thread() == before);
  CHECK(r.kind == RouteKind::shards);
}

TEST_CASE("combinable aggregates are aggregated on the shards and re-aggregated", "[combine]") {
  auto p = plan_scatter(
      "SELECT status, count(*)::int AS n, round(sum(qty) / 2.0, 1), coalesce(max(amount), 0) FROM orders o "
      "WHERE o.created_at > $1 GROUP BY status HAVING sum(qty) > $2 ORDER BY n DESC, status LIMIT $3",
      options());
  const auto& c = combined(p);
  REQUIRE(c.pulls.size() == 1);
  CHECK(c.pulls[0].aggregated);
  CHECK_FALSE(c.all_shards);
  CHECK(c.pulls[0].pull_sql ==
        "SELECT status AS sp_g1, count(*) AS sp_a1, sum(qty) AS sp_a2, max(amount) AS sp_a3 FROM orders o "
        "WHERE o.created_at > $1 GROUP BY status");
  CHECK(c.pulls[0].create_sql ==
        "CREATE TEMP TABLE sp_combine_1 ON COMMIT DROP AS SELECT status AS sp_g1, count(*) AS sp_a1, sum(qty) AS "
        "sp_a2, max(amount) AS sp_a3 FROM orders o GROUP BY status WITH NO DATA");
  // sum(integer) is bigint, the sum of its bigint partials numeric: cast back
  CHECK(c.combine_sql ==
        "SELECT sp_g1 AS status, sum(sp_a1)::bigint::int AS n, round(sum(sp_a2)::bigint / 2.0, 1) AS round, "
        "COALESCE(max(sp_a3), 0) AS \"coalesce\" FROM pg_temp.sp_combine_1 o GROUP BY sp_g1 "
        "HAVING sum(sp_a2)::bigint > $2 ORDER BY n DESC, sp_g1 LIMIT $3");
}

TEST_CASE("what does not combine on the shards pulls rows instead", "[combine]") {
  for (const char* sql : {
           "SELECT count(DISTINCT status)::int FROM orders",              // DISTINCT
           "SELECT sum(qty * 2)::int FROM orders",                        // a sum of an expression: type unknown
           "SELECT avg(qty)::int FROM orders",                            // avg's scale
           "SELECT status, created_at, count(*)::int FROM orders GROUP BY status",  // not grouped (an error)
           "SELECT count(*)::int FROM orders GROUP BY 1",                 // by position
           "SELECT status, count(*)::int FROM orders GROUP BY ROLLUP (status)",
       }) {
    INFO(sql);
    auto p = plan_scatter(sql, options());
    const auto& c = combined(p);
    CHECK_FALSE(c.pulls[0].aggregated);
  }
}

TEST_CASE("a statement whose FROM reads no sharded table goes to the combine step", "[combine]") {
  // each shard would answer the outer row once
  for (const char* sql : {"SELECT EXISTS (SELECT * FROM orders WHERE order_id = 1) AS anon_1",
                          "SELECT true WHERE EXISTS (SELECT 1 FROM orders WHERE amount > 900)",
                          "SELECT * FROM countries c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.status = c.code)",
                          "SELECT (SELECT count(*) FROM orders) AS n"}) {
    INFO(sql);
    auto p = plan_scatter(sql, options());
    CHECK_FALSE(p.merge);
    CHECK(p.combine);
  }
  // rows from a sharded table in FROM (or a CTE over one) stay a merge
  auto merged = plan_scatter("WITH o AS (SELECT * FROM orders) SELECT status FROM o ORDER BY status", options());
  CHECK(merged.merge);
}
