// How a SELECT that runs on several shards is answered exactly (SPEC §4): the query to
// send to every shard, and how the proxy combines their rows so the client sees what
// one PostgreSQL holding all rows would return. Pure: no I/O, no catalog.
//
// Life of a scatter-gather SELECT:
//   1. plan_merge(sql) once per statement text (plan_scatter in scatter_plan.hpp does,
//      and caches it); an error is sent to the client instead of running anything.
//   2. Every shard gets `plan.shard_sql` (same parameters as the client's statement; for
//      Bind, result formats from shard_result_formats()).
//   3. The client's RowDescription is client_row_description() of a shard's.
//   4. A routing::Merger (merger.hpp) built from the plan and the shards' columns turns
//      the shards' DataRows into the client's.
//
// What the merge does, in PostgreSQL's order of evaluation:
//   shard rows ─► k-way merge by `shard_order` (or any order when empty)
//              ─► aggregate: runs of rows with equal `group_keys` (all rows when there
//                 are none) become one row; `aggregates` are combined, other columns
//                 come from the run's first row
//              ─► `having` filter
//              ─► DISTINCT (`distinct`)
//              ─► `final_order` sort (buffers every row; only after aggregation)
//              ─► OFFSET / LIMIT (FETCH ... WITH TIES)
//              ─► hidden columns dropped
// GROUP BY is a streaming merge: the shard query is sorted by the group keys (the
// client's ORDER BY first when it only names group keys), so equal groups from the
// shards arrive next to each other and memory stays O(shards) unless a final sort by
// something else (an aggregate, say) has to buffer. The merger also checks that every
// shard's rows really arrive in `shard_order` and fails rather than mis-merging.
//
// Errors: SQLSTATE SPC01 "cannot be answered exactly across shards: <why>" for constructs
// whose per-shard results cannot be combined exactly; 0A000 for statements that are not
// a mergeable SELECT at all; PostgreSQL's own code where the statement is invalid in a
// way the shard would not report (e.g. 42P10 for DISTINCT with ORDER BY on a column not
// in the select list).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <pg_query/pg_query.pb-c.h>

#include "protocol/messages.hpp"

namespace splitpoint::routing {

struct MergeError {
  std::string sqlstate;  // "SPC01", "0A000", "42P10", ...
  std::string message;
};

// A column of the rows shards return. The select list may contain `*`, whose width is
// only known from the RowDescription, so a column is addressed from where it can be
// counted: from the start, from the end of the visible columns, or among the hidden
// columns the rewritten query appends after them.
struct ShardColumn {
  enum class From : std::uint8_t { start, visible_end, hidden };
  From from = From::start;
  std::uint32_t index = 0;  // start: 0-based; visible_end: 1 = last visible; hidden: 0-based

  // Position in a shard row of `columns` fields, the last `hidden` of them hidden.
  // nullopt if it falls outside the row.
  std::optional<std::size_t> resolve(std::size_t columns, std::size_t hidden) const;
  bool operator==(const ShardColumn&) const = default;
};

// How a shard column's per-shard values are combined into one.
enum class Combine : std::uint8_t {
  count,     // partial counts summed (int8)
  sum,       // partial sums summed, in the partial's own type (= sum()'s result type)
  min,
  max,
  avg,       // the column carries sum(x); `count_column` carries count(x); the result is
             // numeric for integer and numeric x (numeric division as avg() does) and
             // float8 for float8 x; float4/interval/money x are refused by the merger
  bool_and,
  bool_or,
};

struct AggregateColumn {
  ShardColumn column;
  Combine combine = Combine::count;
  ShardColumn count_column;  // avg only
  std::string label;         // the aggregate as written, for describe()
  std::string collation;     // min/max(x COLLATE "c"): the comparison's; "" = the column's
  bool operator==(const AggregateColumn&) const = default;
};

struct SortKey {
  ShardColumn column;
  bool descending = false;
  bool nulls_first = false;  // PostgreSQL's default: NULLS LAST for ASC, FIRST for DESC
  std::string collation;     // from COLLATE in ORDER BY; "" = the column's (database) default
  bool operator==(const SortKey&) const = default;
};

// LIMIT / OFFSET: absent (or NULL / ALL), a constant, or a parameter of the statement.
struct RowBound {
  enum class Kind : std::uint8_t { none, constant, param };
  Kind kind = Kind::none;
  std::int64_t value = 0;  // constant
  int param = 0;           // param: 0-based index ($1 = 0)
  bool operator==(const RowBound&) const = default;
};

// A HAVING condition, evaluated on combined rows with SQL's three-valued logic.
struct HavingOperand {
  enum class Kind : std::uint8_t { column, number, string, boolean, null, param };
  Kind kind = Kind::null;
  ShardColumn column;  // column
  std::string text;    // number / string literal text; boolean: "true" / "false"
  int param = 0;       // param: 0-based
  std::string cast;    // a literal's explicit type ('2024-01-01'::date), lower-case; "" = none
  bool operator==(const HavingOperand&) const = default;
};

struct HavingExpr {
  enum class Op : std::uint8_t { and_, or_, not_, compare, is_null, is_not_null, truth };
  Op op = Op::truth;
  std::string comparison;          // compare: "=", "<>", "<", "<=", ">", ">="
  std::vector<HavingExpr> args;    // and_ / or_ / not_
  HavingOperand left, right;       // compare: both; is_null / is_not_null / truth: left
  bool operator==(const HavingExpr&) const = default;
};

struct MergePlan {
  // The statement every shard runs. Visible columns keep their positions and names
  // (avg(x) becomes sum(x) named "avg", or the alias); `hidden_columns` extra columns
  // are appended after them. When the shards can apply LIMIT themselves it becomes
  // LIMIT n+m without OFFSET — for parameters `LIMIT ($n::int8 + $m::int8)`, so the
  // shard statement takes exactly the client's parameters.
  std::string shard_sql;
  std::size_t hidden_columns = 0;

  std::vector<SortKey> shard_order;  // shards return rows in this order; empty = unordered

  bool aggregate = false;                  // rows are combined (aggregates, GROUP BY, HAVING)
  std::vector<ShardColumn> group_keys;     // aggregate: empty = the whole result is one group
  std::vector<AggregateColumn> aggregates; // every other column is taken from the group's first row
  std::optional<HavingExpr> having;

  enum class Distinct : std::uint8_t {
    none,
    sorted,  // equal rows arrive next to each other: drop repeats (no memory)
    hashed,  // remember every row kept (bounded by max_buffered_rows)
  };
  Distinct distinct = Distinct::none;
  std::vector<ShardColumn> distinct_on;  // DISTINCT ON columns; empty = all visible columns

  std::vector<SortKey> final_order;  // sort after combining (buffers); empty = already ordered

  RowBound limit, offset;
  bool with_ties = false;  // FETCH FIRST n ROWS WITH TIES
  // How many leading keys of final_order (when set) or else shard_order are the client's
  // ORDER BY: rows tie for WITH TIES when equal on those.
  std::size_t client_order_keys = 0;

  // One line for SHOW ROUTE / logs, e.g. "sorted merge on 1 DESC; limit 10 offset 5".
  std::string describe() const;

  // Result format codes for the shard Bind, from the client's Bind codes (0, 1 or one
  // per visible column): visible columns as the client asked, hidden columns text.
  // The merger emits each visible column in the format its shard column was sent in.
  std::vector<std::int16_t> shard_result_formats(std::span<const std::int16_t> client_formats,
                                                 std::size_t shard_columns) const;
  bool operator==(const MergePlan&) const = default;  // every field (scatter_shape.cpp compares plans)
};

// Catalog knowledge the planner may use; both are optional.
struct MergeOptions {
  // True for tables with a full copy on every shard (reference tables). A sub-select
  // that aggregates, limits or de-duplicates gives each shard's own answer, which is
  // only the global one when it reads nothing but such tables.
  std::function<bool(std::string_view table)> is_reference_table;
  // The columns of a table (lower-case), or nullptr if unknown. GROUP BY x prefers a
  // table column x over an output column named x; with this the planner can tell.
  std::function<const std::vector<std::string>*(std::string_view table)> table_columns;
};

// Plans the merge of `select_sql`, a single SELECT (parameters $n allowed).
std::variant<MergePlan, MergeError> plan_merge(std::string_view select_sql, const MergeOptions& options = {});
// The same for a parsed statement (an unpacked copy the planner may change).
std::variant<MergePlan, MergeError> plan_merge(PgQuery__ParseResult* tree, const MergeOptions& options);

// The RowDescription the client gets: a shard's without the hidden columns, avg
// columns typed numeric (or float8). Field names point into `shard_fields`.
// nullopt if the shard's description is inconsistent with the plan (too few columns,
// an avg over an unsupported type).
std::optional<std::vector<protocol::FieldDescription>> client_row_description(
    const MergePlan& plan, std::span<const protocol::FieldDescription> shard_fields);

}  // namespace splitpoint::routing
