#include "routing/merge/merge_plan.hpp"

#include <algorithm>

#include "routing/merge/merge_planner.hpp"
#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

using merge_tree::AggKind;

std::optional<std::size_t> ShardColumn::resolve(std::size_t columns, std::size_t hidden) const {
  if (hidden > columns) return std::nullopt;
  std::size_t visible = columns - hidden;
  switch (from) {
    case From::start: return index < visible ? std::optional<std::size_t>(index) : std::nullopt;
    case From::visible_end:
      return index >= 1 && index <= visible ? std::optional<std::size_t>(visible - index) : std::nullopt;
    case From::hidden: return index < hidden ? std::optional<std::size_t>(visible + index) : std::nullopt;
  }
  return std::nullopt;
}

namespace merge_detail {

Planner::~Planner() {
  for (auto& t : targets_) merge_tree::free_node(t.original);
  for (auto& a : aggregates_) merge_tree::free_node(a.original);
  for (auto* h : hidden_) merge_tree::free_node(h);
  for (auto& g : groups_) merge_tree::free_node(g.first);
}

bool Planner::fail(std::string sqlstate, std::string message) {
  if (!error_) error_ = MergeError{std::move(sqlstate), std::move(message)};
  return false;
}

bool Planner::run() {
  if (!check_statement() || !check_subqueries() || !collect_targets()) return false;
  bool aggregates_in_order = false;
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i)
    if (is(s_->sort_clause[i], PG_QUERY__NODE__NODE_SORT_BY) &&
        merge_tree::contains_aggregate(s_->sort_clause[i]->sort_by->node))
      aggregates_in_order = true;
  plan_.aggregate = s_->n_group_clause > 0 || s_->having_clause != nullptr || aggregates_in_order ||
                    std::any_of(targets_.begin(), targets_.end(), [](const Target& t) { return t.agg != AggKind::none; });
  if (s_->n_locking_clause > 0 && plan_.aggregate)  // (PostgreSQL rejects it: its error comes first)
    return refuse("FOR UPDATE/SHARE with an aggregate or GROUP BY");
  std::vector<int> params = merge_tree::parameters_of(&s_->base);
  if (!(plan_.aggregate ? plan_aggregate() : plan_plain())) return false;
  plan_.hidden_columns = hidden_.size();
  // The executor binds the client's parameters to the shard statement unchanged.
  if (merge_tree::parameters_of(&s_->base) != params)
    return fail("0A000", "a parameter of this statement would not reach the shards");
  return !failed();
}

// FOR UPDATE/SHARE (NOWAIT, SKIP LOCKED) over several shards: each shard locks the rows
// it returns, and the merge returns them all, so the rows locked are the rows of the
// answer, as on one PostgreSQL — unless LIMIT/OFFSET (each shard's, then the merge's)
// drops some after they were locked. That is taken only with SKIP LOCKED, a queue's
// workers taking rows: a row locked and not returned is skipped by the other workers
// until the transaction ends, where one PostgreSQL would have left it to them.
bool Planner::locks_what_it_returns() {
  if (s_->distinct_clause != nullptr) return refuse("FOR UPDATE/SHARE with DISTINCT");
  bool of_with_wait = false, unskipped = false;
  for (std::size_t i = 0; i < s_->n_locking_clause; ++i) {
    const PgQuery__Node* c = s_->locking_clause[i];
    const PgQuery__LockingClause* l = is(c, PG_QUERY__NODE__NODE_LOCKING_CLAUSE) ? c->locking_clause : nullptr;
    of_with_wait |= l && l->n_locked_rels > 0 && l->wait_policy != PG_QUERY__LOCK_WAIT_POLICY__LockWaitBlock;
    unskipped |= !l || l->wait_policy != PG_QUERY__LOCK_WAIT_POLICY__LockWaitSkip;
  }
  // (libpg_query 15's deparser writes `OF a NOWAIT` as `OF aNOWAIT`: not sent.)
  if (of_with_wait) return refuse("FOR UPDATE/SHARE OF a table with NOWAIT or SKIP LOCKED (leave out OF)");
  if (unskipped && (s_->limit_count != nullptr || s_->limit_offset != nullptr))
    return refuse("FOR UPDATE/SHARE with LIMIT or OFFSET would lock rows on every shard beyond those returned "
                  "(taken with SKIP LOCKED)");
  return true;
}

// Statement-level constructs that never merge.
bool Planner::check_statement() {
  if (s_->op != PG_QUERY__SET_OPERATION__SETOP_NONE)
    return refuse("UNION, INTERSECT and EXCEPT would be applied on each shard separately");
  if (s_->into_clause != nullptr) return fail("0A000", "SELECT INTO cannot run on several shards");
  if (s_->n_locking_clause > 0 && !locks_what_it_returns()) return false;
  if (s_->n_values_lists > 0) return fail("0A000", "a VALUES list has no shard to run on");
  if (s_->n_window_clause > 0) return refuse("window functions need every row in one place");
  if (s_->limit_option == PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_WITH_TIES && s_->n_sort_clause == 0)
    return fail("42601", "WITH TIES cannot be specified without ORDER BY clause");
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i)
    if (merge_tree::contains_window_function(s_->sort_clause[i]))
      return refuse("window functions need every row in one place");
  return true;
}

namespace {

// Why a sub-select's answer on one shard is not its part of the global answer, if so.
std::optional<std::string> local_only(const PgQuery__SelectStmt* q) {
  if (q->op != PG_QUERY__SET_OPERATION__SETOP_NONE) {
    if (!(q->op == PG_QUERY__SET_OPERATION__SETOP_UNION && q->all)) return "UNION, INTERSECT or EXCEPT";
    if (auto why = local_only(q->larg)) return why;
    return local_only(q->rarg);
  }
  if (q->n_group_clause > 0 || q->having_clause != nullptr) return "GROUP BY or HAVING";
  if (q->n_distinct_clause > 0) return "DISTINCT";
  if (q->limit_count != nullptr || q->limit_offset != nullptr) return "LIMIT or OFFSET";
  if (q->n_window_clause > 0) return "window functions";
  for (std::size_t i = 0; i < q->n_target_list; ++i) {
    if (merge_tree::contains_aggregate(q->target_list[i])) return "aggregates";
    if (merge_tree::contains_window_function(q->target_list[i])) return "window functions";
  }
  for (std::size_t i = 0; i < q->n_sort_clause; ++i)
    if (merge_tree::contains_aggregate(q->sort_clause[i])) return "aggregates";
  return std::nullopt;
}

}  // namespace

// A sub-select (in FROM, WHERE, the select list or a CTE) runs on each shard over that
// shard's rows. Filters and joins distribute; aggregates, DISTINCT, LIMIT and the like
// do not, unless everything the sub-select reads is a reference table.
bool Planner::check_subqueries() {
  walk_nodes(&s_->base, [&](const PgQuery__Node* n) {
    if (failed() || !is(n, PG_QUERY__NODE__NODE_SELECT_STMT)) return !failed();
    std::optional<std::string> why = local_only(n->select_stmt);
    if (!why) return true;
    bool reference_only = true;
    walk_nodes(&n->base, [&](const PgQuery__Node* c) {
      if (is(c, PG_QUERY__NODE__NODE_RANGE_VAR))
        reference_only = reference_only && options_.is_reference_table &&
                         options_.is_reference_table(c->range_var->relname != nullptr ? c->range_var->relname : "");
      return reference_only;
    });
    if (!reference_only) refuse("a sub-select with " + *why + " would be answered by each shard on its own rows");
    return !failed();
  });
  return !failed();
}

bool Planner::collect_targets() {
  std::size_t stars = 0;
  for (std::size_t i = 0; i < s_->n_target_list; ++i) {
    if (!is(s_->target_list[i], PG_QUERY__NODE__NODE_RES_TARGET)) return fail("0A000", "unexpected select list");
    Target t;
    t.res = s_->target_list[i]->res_target;
    t.star = merge_tree::is_star(t.res);
    t.name = merge_tree::output_name(t.res);
    t.original = merge_tree::clone(t.res->val);
    stars += t.star ? 1 : 0;
    targets_.push_back(t);
    const PgQuery__Node* v = t.res->val;
    if (merge_tree::contains_window_function(v)) return refuse("window functions need every row in one place");
    std::string why;
    if (is(v, PG_QUERY__NODE__NODE_FUNC_CALL)) targets_.back().agg = merge_tree::aggregate_kind(v->func_call, why);
    if (targets_.back().agg == AggKind::unsupported) return refuse(why);
    if (targets_.back().agg == AggKind::none && merge_tree::contains_aggregate(v)) {
      walk_nodes(&v->base, [&](const PgQuery__Node* c) {
        if (is(c, PG_QUERY__NODE__NODE_FUNC_CALL) &&
            merge_tree::aggregate_kind(c->func_call, why) == AggKind::unsupported)
          refuse(why);
        return !failed();
      });
      return refuse("the expression \"" + t.name +
                    "\" applies an operator or function to an aggregate; select the aggregate itself");
    }
  }
  // Address each item: from the start until the first `*`, from the end after the last.
  std::size_t seen = 0;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    Target& t = targets_[i];
    if (t.star) {
      ++seen;
      continue;
    }
    if (seen == 0) t.column = ShardColumn{ShardColumn::From::start, static_cast<std::uint32_t>(i)};
    else if (seen == stars) t.column = ShardColumn{ShardColumn::From::visible_end, static_cast<std::uint32_t>(targets_.size() - i)};
  }
  return true;
}

ShardColumn Planner::add_hidden(const PgQuery__Node* expr) {
  for (std::size_t h = 0; h < hidden_.size(); ++h)
    if (merge_tree::same_expr(hidden_[h], expr)) return {ShardColumn::From::hidden, static_cast<std::uint32_t>(h)};
  std::string alias = "_sp_h" + std::to_string(hidden_.size() + 1);
  merge_tree::append(s_->target_list, s_->n_target_list,
                     merge_tree::make_res_target(merge_tree::clone(expr), alias));
  hidden_.push_back(merge_tree::clone(expr));
  return {ShardColumn::From::hidden, static_cast<std::uint32_t>(hidden_.size() - 1)};
}

namespace {

// sum(...) / count(...) with avg's arguments, FILTER and ORDER BY, schema-qualified so a
// user function of the same name cannot capture it.
PgQuery__Node* renamed_aggregate(const PgQuery__Node* avg_call, const char* name, bool qualified = true) {
  PgQuery__Node* n = merge_tree::clone(avg_call);
  merge_tree::set_function_name(n->func_call, qualified ? "pg_catalog" : "", name);
  return n;
}

}  // namespace

// avg(x) in the select list becomes sum(x) (keeping avg's output name) plus a hidden count(x).
bool Planner::rewrite_avg(Target& t) {
  PgQuery__Node* sum = renamed_aggregate(t.res->val, "sum");
  PgQuery__Node* count = renamed_aggregate(t.res->val, "count");
  merge_tree::free_node(t.res->val);
  t.res->val = sum;
  if (t.res->name == nullptr || t.res->name[0] == '\0') t.res->name = merge_tree::dup_string(t.name);
  ShardColumn count_column = add_hidden(count);
  merge_tree::free_node(count);
  aggregates_.push_back({renamed_aggregate(t.original, "count", false), count_column});  // HAVING count(x) reuses it
  plan_.aggregates.push_back({count_column, Combine::count, {}, "count"});
  plan_.aggregates.push_back({*t.column, Combine::avg, count_column, "avg"});
  return true;
}

std::string argument_collation(const PgQuery__Node* call) {
  const PgQuery__FuncCall* f = call->func_call;
  if (f->n_args != 1 || !is(f->args[0], PG_QUERY__NODE__NODE_COLLATE_CLAUSE)) return {};
  std::string_view name = last_name(f->args[0]->collate_clause->collname, f->args[0]->collate_clause->n_collname);
  return name == "default" ? std::string() : std::string(name);
}

std::optional<ShardColumn> Planner::add_aggregate(const PgQuery__Node* call) {
  std::string why;
  AggKind kind = merge_tree::aggregate_kind(call->func_call, why);
  if (kind == AggKind::unsupported) {
    refuse(why);
    return std::nullopt;
  }
  std::string label(last_name(call->func_call->funcname, call->func_call->n_funcname));
  if (kind != AggKind::avg) {
    ShardColumn c = add_hidden(call);
    plan_.aggregates.push_back({c, combine_of(kind), {}, label, argument_collation(call)});
    aggregates_.push_back({merge_tree::clone(call), c});
    return c;
  }
  PgQuery__Node* sum = renamed_aggregate(call, "sum");
  PgQuery__Node* count = renamed_aggregate(call, "count");
  ShardColumn sum_column = add_hidden(sum);
  ShardColumn count_column = add_hidden(count);
  plan_.aggregates.push_back({count_column, Combine::count, {}, "count"});
  plan_.aggregates.push_back({sum_column, Combine::avg, count_column, label});
  aggregates_.push_back({renamed_aggregate(call, "count", false), count_column});
  aggregates_.push_back({merge_tree::clone(call), sum_column});
  merge_tree::free_node(sum);
  merge_tree::free_node(count);
  return sum_column;
}

std::optional<ShardColumn> Planner::aggregate_column(const PgQuery__Node* call) {
  for (const auto& a : aggregates_)
    if (merge_tree::same_expr(a.original, call)) return a.column;
  return add_aggregate(call);
}

}  // namespace merge_detail

std::variant<MergePlan, MergeError> plan_merge(PgQuery__ParseResult* tree, const MergeOptions& options) {
  if (!tree || tree->n_stmts != 1 || tree->stmts[0]->stmt == nullptr ||
      !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_SELECT_STMT))
    return MergeError{"0A000", "only a single SELECT can be merged across shards"};
  merge_detail::Planner planner(tree->stmts[0]->stmt->select_stmt, options);
  if (!planner.run()) return planner.error();
  std::optional<std::string> sql = deparse(tree);
  if (!sql) return MergeError{"XX000", "could not print the shard query"};
  MergePlan plan = std::move(planner.plan());
  plan.shard_sql = std::move(*sql);
  return plan;
}

std::variant<MergePlan, MergeError> plan_merge(std::string_view select_sql, const MergeOptions& options) {
  ParseTree parsed = ParseTree::parse(select_sql);
  if (!parsed.ok()) return MergeError{parsed.error().sqlstate, parsed.error().message};
  auto tree = unpack_tree(parsed.packed());
  return plan_merge(tree.get(), options);
}

}  // namespace splitpoint::routing
