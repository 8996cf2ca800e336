// The combine step (SPEC §4.1): a SELECT that the streaming merger cannot answer
// exactly is answered by PostgreSQL itself. Each sharded table the statement reads is
// pulled — the rows and columns the statement needs, filtered on the shards when the
// statement's WHERE applies to that table alone — into a temporary table on the combine
// database, and the statement runs there with every reference to such a table turned
// into its temporary table. A single-table aggregate whose aggregates combine
// (count, sum, min, max, bool_and/or) is aggregated on the shards first: the pull
// returns one row per group and shard, and the statement re-aggregates those. Reference tables and everything else the statement reads
// are the combine database's own (it is a shard, holding a copy of them), or, when it is
// a PostgreSQL of its own, reference tables are pulled from one shard as well. Types,
// collations, functions and NULL rules are PostgreSQL's by construction.
//
// Life of a combined SELECT (server/session/execute/scatter_combine.cpp runs it):
//   1. on the combine database: BEGIN, then each pull's `create_sql` (ON COMMIT DROP);
//   2. on every shard concerned: each pull's `pull_sql` (the client's parameters), its
//      rows streamed as COPY text into `COPY <temp_name> FROM STDIN`;
//   3. `combine_sql` (the client's parameters and result formats), its rows streamed
//      to the client; then COMMIT, which drops the temporary tables.
//
// Pure: no I/O. What it needs from the catalog comes through CombineOptions.
#pragma once

#include <pg_query/pg_query.pb-c.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/router.hpp"

namespace splitpoint::routing {

struct CombinePull {
  std::string table;        // as the shards name it, quoted: "orders" or "app"."orders"
  std::string temp_name;    // sp_combine_1, sp_combine_2, ...
  std::string create_sql;   // CREATE TEMP TABLE temp_name ON COMMIT DROP AS SELECT ... WITH NO DATA
  std::string pull_sql;     // SELECT <columns> FROM table [WHERE <the statement's filter>]
  bool filtered = false;    // the statement's WHERE moved into pull_sql (single-table statements)
  bool aggregated = false;  // pull_sql aggregates (partial aggregates, re-aggregated by combine_sql)
  bool one_shard = false;   // a table every shard holds whole (CombineOptions::is_whole_table): from one shard
};

struct CombinePlan {
  std::vector<CombinePull> pulls;
  std::string combine_sql;  // the client's statement over the temporary tables
  // Every shard holds rows the statement may need (several tables, or no filter moved
  // to the shards): the route's shards only when the one table's filter was moved.
  bool all_shards = true;

  // For SHOW ROUTE: "combine on <db>: pull ...; then ...".
  std::string describe() const;
};

struct CombineOptions {
  // Whether (schema, table) names a sharded table (schema "" = unqualified).
  std::function<bool(std::string_view schema, std::string_view table)> is_sharded_table;
  // A table's columns and types (from the shards' catalogs), or nullptr if unknown:
  // pull only the columns the statement names, aggregate on the shards. Unknown: every
  // column, and no aggregation on the shards.
  std::function<const TableShape*(std::string_view table)> table_shape;
  // Set when the combine database holds none of the tables (scatter.combine is a
  // PostgreSQL of its own): whether (schema, table) is one every shard holds whole (a
  // reference table), which is then pulled too, from one shard. Unset: such tables are
  // the combine database's own (it is a shard).
  std::function<bool(std::string_view schema, std::string_view table)> is_whole_table;
};

// Plans the combine step for the single SELECT in `tree` (an unpacked copy the
// planner may change). SPC01 for statements no combine can answer (FOR UPDATE, a
// data-modifying CTE, SELECT INTO), 0A000 for what is not a SELECT.
std::variant<CombinePlan, MergeError> plan_combine(PgQuery__ParseResult* tree, const CombineOptions& options);

}  // namespace splitpoint::routing
