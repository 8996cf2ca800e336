// The merge planner's working state (routing/merge/merge_plan.cpp), shared with the HAVING
// translation (merge_plan_having.cpp). Internal to routing/.
#pragma once

#include <pg_query/pg_query.pb-c.h>

#include <optional>
#include <string>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merge_tree.hpp"

namespace splitpoint::routing::merge_detail {

// One item of the client's select list.
struct Target {
  PgQuery__ResTarget* res = nullptr;    // in the shard statement (avg is rewritten in place)
  PgQuery__Node* original = nullptr;    // the expression as the client wrote it (owned copy)
  bool star = false;
  std::string name;                     // PostgreSQL's output column name
  std::optional<ShardColumn> column;    // nullopt: between two `*`, position unknown
  merge_tree::AggKind agg = merge_tree::AggKind::none;
};

// An aggregate the shard query computes (visible or hidden), for reuse by ORDER BY/HAVING.
struct KnownAggregate {
  PgQuery__Node* original = nullptr;  // owned copy of the FuncCall as written
  ShardColumn column;
};

class Planner {
 public:
  Planner(PgQuery__SelectStmt* stmt, const MergeOptions& options) : s_(stmt), options_(options) {}
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  // Analyses and rewrites the statement; false with error() set when it cannot be merged.
  bool run();
  MergePlan& plan() { return plan_; }
  const MergeError& error() const { return *error_; }

  // For HAVING: the column carrying an aggregate (added as a hidden column if the select
  // list does not have it) or a GROUP BY expression. nullopt with the error set.
  std::optional<ShardColumn> aggregate_column(const PgQuery__Node* func_call);
  std::optional<ShardColumn> group_key_column(const PgQuery__Node* expr) const;

  // Records the first error; always returns false so callers can `return fail(...)`.
  bool fail(std::string sqlstate, std::string message);
  bool refuse(const std::string& why) { return fail("SPC01", "cannot be answered exactly across shards: " + why); }
  bool failed() const { return error_.has_value(); }

 private:
  PgQuery__SelectStmt* s_;
  const MergeOptions& options_;
  MergePlan plan_;
  std::optional<MergeError> error_;
  std::vector<Target> targets_;
  std::vector<KnownAggregate> aggregates_;
  std::vector<PgQuery__Node*> hidden_;                       // owned copies, for de-duplication
  std::vector<std::pair<PgQuery__Node*, ShardColumn>> groups_;  // owned copies of GROUP BY expressions
  bool plain_distinct_ = false;

  bool check_statement();
  bool locks_what_it_returns();
  bool check_subqueries();
  bool collect_targets();
  bool plan_plain();
  bool plan_aggregate();
  bool plan_limits(bool push_down);
  bool rewrite_avg(Target& t);

  ShardColumn add_hidden(const PgQuery__Node* expr);
  std::optional<ShardColumn> add_aggregate(const PgQuery__Node* func_call);
  std::optional<SortKey> sort_key(const PgQuery__SortBy* by, bool allow_hidden);
  std::optional<ShardColumn> order_column(const PgQuery__Node* expr, bool allow_hidden, bool plain_name_rules);
  std::optional<ShardColumn> group_column(const PgQuery__Node* item);
  std::optional<bool> is_table_column(std::string_view name) const;
  const Target* target_at(std::int64_t position) const;
  bool append_shard_sort(const ShardColumn& column, const PgQuery__Node* expr);
  bool bound(const PgQuery__Node* n, RowBound& out, const char* clause);
  bool is_group_key(const ShardColumn& c) const;
};

// min(x COLLATE "C") compares under "C"; "" when the argument has no COLLATE.
std::string argument_collation(const PgQuery__Node* call);

inline Combine combine_of(merge_tree::AggKind k) {
  switch (k) {
    case merge_tree::AggKind::count: return Combine::count;
    case merge_tree::AggKind::sum: return Combine::sum;
    case merge_tree::AggKind::avg: return Combine::avg;
    case merge_tree::AggKind::min: return Combine::min;
    case merge_tree::AggKind::max: return Combine::max;
    case merge_tree::AggKind::bool_and: return Combine::bool_and;
    default: return Combine::bool_or;
  }
}

// Translates a HAVING clause into a HavingExpr; nullopt with the planner's error set.
std::optional<HavingExpr> translate_having(Planner& planner, const PgQuery__Node* having);

}  // namespace splitpoint::routing::merge_detail
