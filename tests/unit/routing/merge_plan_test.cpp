// The merge planner (routing/merge/merge_plan.hpp): the shard query it writes (re-parsed with
// PostgreSQL's parser and checked), the merge it plans, and what it refuses.
// tests/integration/merge_differential.cpp runs plans like these against PostgreSQL.
#include <catch2/catch.hpp>

#include <string>
#include <variant>

#include "routing/merge/merge_plan.hpp"
#include "routing/pg_tree.hpp"

using namespace splitpoint::routing;

namespace {

MergePlan plan_of(const std::string& sql, const MergeOptions& options = {}) {
  auto r = plan_merge(sql, options);
  if (auto* e = std::get_if<MergeError>(&r)) FAIL("refused: " << e->sqlstate << " " << e->message << " for " << sql);
  return std::get<MergePlan>(r);
}

MergeError error_of(const std::string& sql, const MergeOptions& options = {}) {
  auto r = plan_merge(sql, options);
  if (auto* p = std::get_if<MergePlan>(&r)) FAIL("planned: " << p->shard_sql << " for " << sql);
  return std::get<MergeError>(r);
}

// The shard query, parsed back: it must be one valid SELECT.
struct Reparsed {
  ParseTree tree;
  PgQuery__SelectStmt* s = nullptr;
  explicit Reparsed(const std::string& sql) : tree(ParseTree::parse(sql)) {
    REQUIRE(tree.ok());
    REQUIRE(tree.tree()->n_stmts == 1);
    REQUIRE(is(tree.tree()->stmts[0]->stmt, PG_QUERY__NODE__NODE_SELECT_STMT));
    s = tree.tree()->stmts[0]->stmt->select_stmt;
  }
  std::string alias(std::size_t i) const { return s->target_list[i]->res_target->name; }
  std::string function(std::size_t i) const {
    const PgQuery__Node* v = s->target_list[i]->res_target->val;
    REQUIRE(is(v, PG_QUERY__NODE__NODE_FUNC_CALL));
    return std::string(last_name(v->func_call->funcname, v->func_call->n_funcname));
  }
};

ShardColumn start(std::uint32_t i) { return {ShardColumn::From::start, i}; }
ShardColumn hidden(std::uint32_t i) { return {ShardColumn::From::hidden, i}; }

}  // namespace

TEST_CASE("plain SELECT is concatenated and sent unchanged", "[merge]") {
  MergePlan p = plan_of("SELECT a, b FROM t WHERE a > 1");
  CHECK(p.shard_sql == "SELECT a, b FROM t WHERE a > 1");
  CHECK(p.shard_order.empty());
  CHECK_FALSE(p.aggregate);
  CHECK(p.hidden_columns == 0);
  CHECK(p.distinct == MergePlan::Distinct::none);
}

TEST_CASE("ORDER BY by position, name and expression; hidden keys appended", "[merge]") {
  MergePlan p = plan_of("SELECT a, b AS x FROM t ORDER BY x DESC, 1, c NULLS FIRST, lower(d) COLLATE \"C\"");
  Reparsed r(p.shard_sql);
  REQUIRE(r.s->n_target_list == 4);
  CHECK(r.alias(2) == "_sp_h1");
  CHECK(r.alias(3) == "_sp_h2");
  CHECK(r.s->n_sort_clause == 4);  // the client's ORDER BY, unchanged
  REQUIRE(p.shard_order.size() == 4);
  CHECK(p.shard_order[0].column == start(1));
  CHECK(p.shard_order[0].descending);
  CHECK(p.shard_order[0].nulls_first);  // DESC defaults to NULLS FIRST
  CHECK(p.shard_order[1].column == start(0));
  CHECK_FALSE(p.shard_order[1].nulls_first);
  CHECK(p.shard_order[2].column == hidden(0));
  CHECK(p.shard_order[2].nulls_first);
  CHECK(p.shard_order[3].column == hidden(1));
  CHECK(p.shard_order[3].collation == "C");
  CHECK(p.hidden_columns == 2);
}

TEST_CASE("ORDER BY an expression already selected reuses its column", "[merge]") {
  MergePlan p = plan_of("SELECT id, k + 1 FROM t ORDER BY k + 1 DESC, id USING >");
  CHECK(p.hidden_columns == 0);
  REQUIRE(p.shard_order.size() == 2);
  CHECK(p.shard_order[0].column == start(1));
  CHECK(p.shard_order[1].descending);
}

TEST_CASE("ORDER BY after * addresses columns from the end", "[merge]") {
  MergePlan p = plan_of("SELECT *, k AS z FROM t ORDER BY z, 2");
  CHECK(p.hidden_columns == 0);
  REQUIRE(p.shard_order.size() == 2);
  CHECK(p.shard_order[0].column == ShardColumn{ShardColumn::From::visible_end, 1});
  CHECK(p.shard_order[1].column == start(1));
  CHECK(p.shard_order[0].column.resolve(6, 0) == 5u);
}

TEST_CASE("LIMIT n OFFSET m becomes LIMIT n+m on the shards", "[merge]") {
  MergePlan p = plan_of("SELECT a FROM t ORDER BY a LIMIT 10 OFFSET 5");
  CHECK(p.shard_sql == "SELECT a FROM t ORDER BY a LIMIT 15");
  CHECK(p.limit.kind == RowBound::Kind::constant);
  CHECK(p.limit.value == 10);
  CHECK(p.offset.value == 5);

  p = plan_of("SELECT a FROM t ORDER BY a LIMIT $1 OFFSET $2");
  CHECK(p.shard_sql == "SELECT a FROM t ORDER BY a LIMIT ($1::bigint + $2::bigint)");
  CHECK(p.limit.kind == RowBound::Kind::param);
  CHECK(p.limit.param == 0);
  CHECK(p.offset.param == 1);

  p = plan_of("SELECT a FROM t ORDER BY a LIMIT 3 OFFSET $1");
  CHECK(p.shard_sql == "SELECT a FROM t ORDER BY a LIMIT (3 + $1::bigint)");

  p = plan_of("SELECT a FROM t OFFSET 7");
  CHECK(p.shard_sql == "SELECT a FROM t");
  CHECK(p.offset.value == 7);

  p = plan_of("SELECT a FROM t LIMIT ALL");
  CHECK(p.limit.kind == RowBound::Kind::none);

  // Negative bounds stay so that every shard reports PostgreSQL's error.
  p = plan_of("SELECT a FROM t LIMIT -1 OFFSET 2");
  CHECK(p.shard_sql == "SELECT a FROM t LIMIT -1 OFFSET 2");

  p = plan_of("SELECT a FROM t ORDER BY a FETCH FIRST 2 ROWS WITH TIES");
  CHECK(p.with_ties);
  CHECK(p.shard_sql == "SELECT a FROM t ORDER BY a FETCH FIRST 2 ROWS WITH TIES");
  CHECK(error_of("SELECT a FROM t FETCH FIRST 2 ROWS WITH TIES").sqlstate == "42601");
  CHECK(error_of("SELECT a FROM t LIMIT 1 + 1").sqlstate == "SPC01");
}

TEST_CASE("avg becomes sum and a hidden count; aggregates keep their names", "[merge]") {
  MergePlan p = plan_of("SELECT avg(x), avg(y) AS m, count(*) FILTER (WHERE z) FROM t");
  Reparsed r(p.shard_sql);
  REQUIRE(r.s->n_target_list == 5);
  CHECK(r.function(0) == "sum");
  CHECK(r.alias(0) == "avg");
  CHECK(r.function(1) == "sum");
  CHECK(r.alias(1) == "m");
  CHECK(r.function(3) == "count");
  CHECK(r.function(4) == "count");
  CHECK(p.hidden_columns == 2);
  CHECK(p.aggregate);
  CHECK(p.group_keys.empty());
  CHECK(p.shard_order.empty());
  int avgs = 0;
  for (const auto& a : p.aggregates) {
    if (a.combine != Combine::avg) continue;
    ++avgs;
    CHECK(a.count_column.from == ShardColumn::From::hidden);
  }
  CHECK(avgs == 2);
  // FILTER stays on every partial.
  CHECK(p.shard_sql.find("FILTER (WHERE z)") != std::string::npos);
}

TEST_CASE("aggregate without GROUP BY drops ORDER BY and LIMIT from the shards", "[merge]") {
  MergePlan p = plan_of("SELECT count(*) FROM t ORDER BY 1 LIMIT 1 OFFSET 0");
  CHECK(p.shard_sql == "SELECT count(*) FROM t");
  CHECK(p.limit.value == 1);
}

TEST_CASE("GROUP BY sorts the shard query by the group keys", "[merge]") {
  MergePlan p = plan_of("SELECT g, count(*) FROM t GROUP BY g");
  CHECK(p.shard_sql == "SELECT g, count(*) FROM t GROUP BY g ORDER BY 1 ASC NULLS LAST");
  REQUIRE(p.group_keys.size() == 1);
  CHECK(p.group_keys[0] == start(0));
  CHECK(p.final_order.empty());

  // ORDER BY only group keys: the client's order leads, the rest follow.
  p = plan_of("SELECT a, b, sum(x) FROM t GROUP BY a, b ORDER BY b DESC LIMIT 5 OFFSET 1");
  CHECK(p.shard_sql == "SELECT a, b, sum(x) FROM t GROUP BY a, b ORDER BY b DESC, 1 ASC NULLS LAST LIMIT 6");
  CHECK(p.final_order.empty());
  CHECK(p.client_order_keys == 1);

  // ORDER BY an aggregate: groups stream in key order, then a final sort.
  p = plan_of("SELECT g, sum(x) FROM t GROUP BY g ORDER BY sum(x) DESC LIMIT 3");
  CHECK(p.shard_sql == "SELECT g, sum(x) FROM t GROUP BY g ORDER BY 1 ASC NULLS LAST");
  REQUIRE(p.final_order.size() == 1);
  CHECK(p.final_order[0].column == start(1));

  // A group key not in the select list is a hidden column.
  p = plan_of("SELECT count(*) FROM t GROUP BY lower(s)");
  CHECK(p.shard_sql == "SELECT count(*), lower(s) AS _sp_h1 FROM t GROUP BY lower(s) ORDER BY 2 ASC NULLS LAST");
  // After a `*` hidden positions are unknown: the expression itself.
  p = plan_of("SELECT *, count(*) FROM t GROUP BY id, lower(s)");
  CHECK(p.shard_sql ==
        "SELECT *, count(*), id AS _sp_h1, lower(s) AS _sp_h2 FROM t GROUP BY id, lower(s) ORDER BY id ASC NULLS LAST, "
        "lower(s) ASC NULLS LAST");
  CHECK(p.group_keys[0] == hidden(0));
}

TEST_CASE("HAVING is evaluated after combining", "[merge]") {
  MergePlan p = plan_of("SELECT g FROM t GROUP BY g HAVING count(*) > 2 AND (max(x) < 10 OR g IS NULL)");
  Reparsed r(p.shard_sql);
  CHECK(r.s->having_clause == nullptr);
  CHECK(p.hidden_columns == 2);  // count(*), max(x)
  REQUIRE(p.having);
  CHECK(p.having->op == HavingExpr::Op::and_);
  CHECK(p.having->args[0].op == HavingExpr::Op::compare);
  CHECK(p.having->args[0].comparison == ">");
  CHECK(p.having->args[0].right.kind == HavingOperand::Kind::number);
  CHECK(p.having->args[1].op == HavingExpr::Op::or_);
  CHECK(p.having->args[1].args[1].op == HavingExpr::Op::is_null);

  // BETWEEN, IN, NOT, casts and parameters.
  p = plan_of("SELECT g FROM t GROUP BY g HAVING sum(x) BETWEEN 1 AND $1 AND NOT g IN (1, 2) AND max(d) > '2024-01-01'::date");
  REQUIRE(p.having);
  CHECK(p.having->args.size() == 3);
  // The parameter must still reach the shards: the HAVING is kept as a hidden column.
  CHECK(p.shard_sql.find("$1") != std::string::npos);

  CHECK(error_of("SELECT g FROM t GROUP BY g HAVING sum(x) * 2 > 10").sqlstate == "SPC01");
  CHECK(error_of("SELECT g FROM t GROUP BY g HAVING x > 1").sqlstate == "SPC01");  // not a group key
  CHECK(error_of("SELECT g FROM t GROUP BY g HAVING count(*) > 1::numeric(3,1)").sqlstate == "SPC01");
}

TEST_CASE("DISTINCT keeps DISTINCT on the shards and sorts by every column", "[merge]") {
  MergePlan p = plan_of("SELECT DISTINCT a, b FROM t ORDER BY b");
  CHECK(p.shard_sql == "SELECT DISTINCT a, b FROM t ORDER BY b, 1 ASC NULLS LAST");
  CHECK(p.distinct == MergePlan::Distinct::sorted);
  CHECK(p.shard_order.size() == 2);

  p = plan_of("SELECT DISTINCT * FROM t");
  CHECK(p.distinct == MergePlan::Distinct::hashed);

  p = plan_of("SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, c DESC");
  CHECK(p.distinct == MergePlan::Distinct::sorted);
  REQUIRE(p.distinct_on.size() == 1);
  CHECK(p.distinct_on[0] == start(0));
  CHECK(p.hidden_columns == 1);

  p = plan_of("SELECT DISTINCT g, count(*) FROM t GROUP BY g, k");
  CHECK(p.distinct == MergePlan::Distinct::hashed);

  CHECK(error_of("SELECT DISTINCT a FROM t ORDER BY b").sqlstate == "42P10");
  CHECK(error_of("SELECT DISTINCT ON (a) a, b FROM t ORDER BY b").sqlstate == "42P10");
}

TEST_CASE("constructs that cannot be merged exactly are refused with SPC01", "[merge]") {
  const char* refused[] = {
      "SELECT count(DISTINCT x) FROM t",
      "SELECT sum(DISTINCT x) FROM t",
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t",
      "SELECT mode() WITHIN GROUP (ORDER BY x) FROM t",
      "SELECT string_agg(s, ',') FROM t",
      "SELECT array_agg(x) FROM t",
      "SELECT stddev(x) FROM t",
      "SELECT myschema.myagg(x ORDER BY y) FROM t",
      "SELECT x, row_number() OVER (ORDER BY x) FROM t",
      "SELECT sum(x) OVER () FROM t",
      "SELECT sum(x) / count(x) FROM t",
      "SELECT coalesce(max(x), 0) FROM t",
      "SELECT a FROM t UNION SELECT a FROM u",
      "SELECT a FROM t UNION ALL SELECT a FROM u",
      "SELECT a FROM t INTERSECT SELECT a FROM u",
      "SELECT * FROM t ORDER BY a LIMIT 5 FOR UPDATE",
      "SELECT * FROM t OFFSET 5 FOR SHARE NOWAIT",
      "SELECT * FROM t LIMIT 5 FOR UPDATE OF t SKIP LOCKED FOR SHARE OF u",
      "SELECT * FROM t FOR SHARE OF t NOWAIT",
      "SELECT DISTINCT a FROM t FOR UPDATE",
      "SELECT a, count(*) FROM t GROUP BY a FOR UPDATE",
      "SELECT * FROM t ORDER BY random()",
      "SELECT a FROM t GROUP BY a, random()",
      "SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 5) s",
      "SELECT * FROM t WHERE x > (SELECT avg(x) FROM t)",
      "WITH c AS (SELECT count(*) AS n FROM t) SELECT n FROM c",
      "SELECT * FROM t WHERE a IN (SELECT a FROM u UNION SELECT a FROM v)",
      "SELECT a, count(*) FROM t GROUP BY ROLLUP (a)",
      "SELECT a, count(*) FROM t GROUP BY GROUPING SETS ((a), ())",
      "SELECT lower(name) AS name, count(*) FROM t GROUP BY name",
      "SELECT * FROM t ORDER BY a USING ~<~",
      "SELECT DISTINCT ON (a) a, count(*) FROM t GROUP BY a, b",
  };
  for (const char* sql : refused) {
    INFO(sql);
    MergeError e = error_of(sql);
    CHECK(e.sqlstate == "SPC01");
    CHECK(e.message.rfind("cannot be answered exactly across shards: ", 0) == 0);
  }
  CHECK(error_of("SELECT a INTO x FROM t").sqlstate == "0A000");
  // FOR UPDATE/SHARE: each shard locks what it returns (with LIMIT only SKIP LOCKED).
  CHECK(plan_of("SELECT * FROM t WHERE a > 1 FOR UPDATE").shard_sql == "SELECT * FROM t WHERE a > 1 FOR UPDATE");
  CHECK(plan_of("SELECT a FROM t ORDER BY b FOR SHARE NOWAIT").shard_sql ==
        "SELECT a, b AS _sp_h1 FROM t ORDER BY b FOR SHARE NOWAIT");
  CHECK(plan_of("SELECT a FROM t ORDER BY a LIMIT 2 OFFSET 1 FOR UPDATE SKIP LOCKED").shard_sql ==
        "SELECT a FROM t ORDER BY a LIMIT 3 FOR UPDATE SKIP LOCKED");
  CHECK(error_of("INSERT INTO t VALUES (1)").sqlstate == "0A000");
  CHECK(error_of("SELECT 1; SELECT 2").sqlstate == "0A000");
  CHECK(error_of("SELEC 1").sqlstate == "42601");
  CHECK(error_of("SELECT a, b AS a FROM t ORDER BY a").sqlstate == "42702");
  CHECK(error_of("SELECT a FROM t ORDER BY 3").sqlstate == "42P10");
  CHECK(error_of("SELECT a, count(*) FROM t GROUP BY 2").sqlstate == "42803");
}

TEST_CASE("sub-selects over reference tables may aggregate", "[merge]") {
  MergeOptions options;
  options.is_reference_table = [](std::string_view t) { return t == "countries"; };
  plan_of("SELECT * FROM t WHERE c IN (SELECT code FROM countries GROUP BY code HAVING count(*) > 1)", options);
  plan_of("SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id)");  // filters distribute
  CHECK(error_of("SELECT * FROM t WHERE c IN (SELECT max(x) FROM orders)", options).sqlstate == "SPC01");
}

TEST_CASE("GROUP BY a name that is also an output column uses table columns when known", "[merge]") {
  std::vector<std::string> columns{"id", "ts", "name"};
  MergeOptions options;
  options.table_columns = [&](std::string_view t) -> const std::vector<std::string>* {
    return t == "t" ? &columns : nullptr;
  };
  // "day" is no column of t: the output column.
  MergePlan p = plan_of("SELECT date_trunc('day', ts) AS day, count(*) FROM t GROUP BY day", options);
  CHECK(p.group_keys[0] == start(0));
  CHECK(p.hidden_columns == 0);
  // "name" is a column of t: PostgreSQL groups by it, not by lower(name).
  p = plan_of("SELECT lower(name) AS name, count(*) FROM t GROUP BY name", options);
  CHECK(p.group_keys[0] == hidden(0));
  CHECK(p.shard_sql == "SELECT lower(name) AS name, count(*), name AS _sp_h1 FROM t GROUP BY name ORDER BY 3 ASC NULLS LAST");
}

TEST_CASE("parameters the shards would lose are kept", "[merge]") {
  MergePlan p = plan_of("SELECT count(*) FROM t LIMIT $1");
  CHECK(p.shard_sql == "SELECT count(*) FROM t LIMIT (NULLIF($1::bigint, $1::bigint))");
  p = plan_of("SELECT g FROM t GROUP BY g HAVING count(*) > $1 OFFSET $2");
  CHECK(p.shard_sql.find("$1") != std::string::npos);
  CHECK(p.shard_sql.find("OFFSET NULLIF($2::bigint, $2::bigint)") != std::string::npos);
}

TEST_CASE("client formats and RowDescription", "[merge]") {
  MergePlan p = plan_of("SELECT g, avg(x) FROM t GROUP BY g ORDER BY max(y)");
  std::int16_t binary[] = {1};
  auto formats = p.shard_result_formats(binary, 2 + p.hidden_columns);
  REQUIRE(formats.size() == 4);
  CHECK(formats[0] == 1);
  CHECK(formats[1] == 1);
  CHECK(formats[2] == 0);  // hidden: text
  CHECK(formats[3] == 0);

  std::vector<splitpoint::protocol::FieldDescription> fields(4);
  fields[0].name = "g";
  fields[0].type_oid = 23;
  fields[1].name = "avg";
  fields[1].type_oid = 20;  // sum(int4) is bigint
  fields[1].type_size = 8;
  fields[2].type_oid = 20;
  fields[3].type_oid = 23;
  auto client = client_row_description(p, fields);
  REQUIRE(client);
  REQUIRE(client->size() == 2);
  CHECK((*client)[1].name == "avg");
  CHECK((*client)[1].type_oid == 1700);  // numeric
  CHECK((*client)[1].type_size == -1);
  fields[1].type_oid = 700;  // avg(real): refused
  CHECK_FALSE(client_row_description(p, fields));
}

TEST_CASE("describe() summarises the plan", "[merge]") {
  MergePlan p = plan_of("SELECT g, count(*) FROM t GROUP BY g HAVING count(*) > 1 ORDER BY 2 DESC LIMIT 3 OFFSET 1");
  CHECK(p.describe() == "sorted merge on 1; combine groups on 1; 2=count; having; sort on 2 DESC; offset 1; limit 3");
}
