// The merge planner's handling of ORDER BY, DISTINCT, GROUP BY and LIMIT/OFFSET.
// Name resolution follows PostgreSQL (parse_clause.c): an ORDER BY / DISTINCT ON name or
// position refers to an output column first, GROUP BY prefers a table column, and any
// other expression is matched against the select list or computed as a hidden column.
#include <algorithm>
#include <limits>

#include "routing/merge/merge_planner.hpp"
#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing::merge_detail {

using merge_tree::AggKind;

namespace {

bool is_plain_distinct(const PgQuery__SelectStmt* s) {
  return s->n_distinct_clause == 1 &&
         (s->distinct_clause[0] == nullptr || s->distinct_clause[0]->node_case == PG_QUERY__NODE__NODE__NOT_SET);
}

// The name of an unqualified column reference (`x`), else "".
std::string_view single_name(const PgQuery__Node* n) {
  if (!is(n, PG_QUERY__NODE__NODE_COLUMN_REF) || n->column_ref->n_fields != 1) return {};
  return str_of(n->column_ref->fields[0]);
}

// ORDER BY 2 / GROUP BY 2: only an Integer constant is a position.
bool position_of(const PgQuery__Node* n, std::int64_t& k) {
  return is(n, PG_QUERY__NODE__NODE_A_CONST) && !n->a_const->isnull && n->a_const->val_case == PG_QUERY__A__CONST__VAL_IVAL &&
         merge_tree::integer_value(n, k);
}

bool contains(const std::vector<ShardColumn>& v, const ShardColumn& c) { return std::find(v.begin(), v.end(), c) != v.end(); }

// The last element of a qualified name whose last component is a column name.
std::string_view column_name_of(const PgQuery__Node* n) {
  if (!is(n, PG_QUERY__NODE__NODE_COLUMN_REF) || n->column_ref->n_fields == 0) return {};
  return str_of(n->column_ref->fields[n->column_ref->n_fields - 1]);
}

}  // namespace

const Target* Planner::target_at(std::int64_t position) const {
  if (position < 1 || position > static_cast<std::int64_t>(targets_.size())) return nullptr;
  for (std::int64_t i = 0; i < position; ++i)
    if (targets_[static_cast<std::size_t>(i)].star) return nullptr;  // `*` before it: width unknown
  return &targets_[static_cast<std::size_t>(position - 1)];
}

bool Planner::is_group_key(const ShardColumn& c) const { return contains(plan_.group_keys, c); }

std::optional<ShardColumn> Planner::order_column(const PgQuery__Node* expr, bool allow_hidden, bool plain_name_rules) {
  const bool has_star = std::any_of(targets_.begin(), targets_.end(), [](const Target& t) { return t.star; });
  std::int64_t k = 0;
  if (plain_name_rules && position_of(expr, k)) {
    if (k < 1 || (!has_star && k > static_cast<std::int64_t>(targets_.size()))) {
      fail("42P10", "ORDER BY position " + std::to_string(k) + " is not in select list");
      return std::nullopt;
    }
    return ShardColumn{ShardColumn::From::start, static_cast<std::uint32_t>(k - 1)};
  }
  std::string_view name = plain_name_rules ? single_name(expr) : std::string_view{};
  const Target* named = nullptr;
  for (const Target& t : targets_) {
    if (t.star || name.empty() || t.name != name) continue;
    if (named != nullptr && !merge_tree::same_expr(named->original, t.original)) {
      fail("42702", "ORDER BY \"" + std::string(name) + "\" is ambiguous");
      return std::nullopt;
    }
    if (named == nullptr) named = &t;
  }
  if (named == nullptr) {
    for (const Target& t : targets_)
      if (!t.star && t.column && merge_tree::same_expr(t.original, expr)) return t.column;
  }
  if (named != nullptr && named->column) return named->column;
  const PgQuery__Node* value = named != nullptr ? named->original : expr;
  if (plan_.aggregate && merge_tree::contains_aggregate(value)) {
    std::string why;
    if (is(value, PG_QUERY__NODE__NODE_FUNC_CALL) && merge_tree::aggregate_kind(value->func_call, why) != AggKind::none)
      return aggregate_column(value);
    refuse("ORDER BY an expression over aggregates would have to be computed after combining");
    return std::nullopt;
  }
  if (!allow_hidden) {
    fail("42P10", "for SELECT DISTINCT, ORDER BY expressions must appear in select list");
    return std::nullopt;
  }
  return add_hidden(value);
}

std::optional<SortKey> Planner::sort_key(const PgQuery__SortBy* by, bool allow_hidden) {
  SortKey key;
  switch (by->sortby_dir) {
    case PG_QUERY__SORT_BY_DIR__SORTBY_DESC: key.descending = true; break;
    case PG_QUERY__SORT_BY_DIR__SORTBY_USING: {
      std::string_view op = last_name(by->use_op, by->n_use_op);
      if (op != "<" && op != ">") {
        refuse("ORDER BY ... USING " + std::string(op) + " has no order the proxy knows");
        return std::nullopt;
      }
      key.descending = op == ">";
      break;
    }
    default: break;
  }
  key.nulls_first = by->sortby_nulls == PG_QUERY__SORT_BY_NULLS__SORTBY_NULLS_FIRST ||
                    (by->sortby_nulls != PG_QUERY__SORT_BY_NULLS__SORTBY_NULLS_LAST && key.descending);
  const PgQuery__Node* expr = by->node;
  if (merge_tree::contains_volatile_function(expr)) {
    refuse("ORDER BY a volatile function (such as random()) gives each shard its own order");
    return std::nullopt;
  }
  bool plain = true;
  if (is(expr, PG_QUERY__NODE__NODE_COLLATE_CLAUSE)) {
    // The value is the inner expression's; only the comparison changes.
    std::string_view c = last_name(expr->collate_clause->collname, expr->collate_clause->n_collname);
    key.collation = c == "default" ? "" : std::string(c);
    expr = expr->collate_clause->arg;
    plain = false;
  }
  std::optional<ShardColumn> column = order_column(expr, allow_hidden, plain);
  if (!column) return std::nullopt;
  key.column = *column;
  return key;
}

std::optional<bool> Planner::is_table_column(std::string_view name) const {
  if (!options_.table_columns) return std::nullopt;
  bool all_known = true, found = false;
  std::function<void(const PgQuery__Node*)> visit = [&](const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_RANGE_VAR)) {
      const std::vector<std::string>* cols = options_.table_columns(n->range_var->relname);
      if (cols == nullptr) all_known = false;
      else found = found || std::find(cols->begin(), cols->end(), name) != cols->end();
    } else if (is(n, PG_QUERY__NODE__NODE_JOIN_EXPR)) {
      visit(n->join_expr->larg);
      visit(n->join_expr->rarg);
    } else {
      all_known = false;  // sub-selects, functions: columns unknown
    }
  };
  for (std::size_t i = 0; i < s_->n_from_clause; ++i) visit(s_->from_clause[i]);
  if (found) return true;
  if (all_known) return false;
  return std::nullopt;
}

std::optional<ShardColumn> Planner::group_column(const PgQuery__Node* item) {
  if (is(item, PG_QUERY__NODE__NODE_GROUPING_SET)) {
    refuse("GROUPING SETS, ROLLUP and CUBE are not merged");
    return std::nullopt;
  }
  if (merge_tree::contains_volatile_function(item)) {
    refuse("GROUP BY a volatile function gives each shard its own groups");
    return std::nullopt;
  }
  std::int64_t k = 0;
  const Target* chosen = nullptr;
  if (position_of(item, k)) {
    bool has_star = std::any_of(targets_.begin(), targets_.end(), [](const Target& t) { return t.star; });
    if (k < 1 || (!has_star && k > static_cast<std::int64_t>(targets_.size()))) {
      fail("42P10", "GROUP BY position " + std::to_string(k) + " is not in select list");
      return std::nullopt;
    }
    chosen = target_at(k);
    if (chosen == nullptr) {  // after a `*`: known by position only
      groups_.push_back({nullptr, ShardColumn{ShardColumn::From::start, static_cast<std::uint32_t>(k - 1)}});
      return groups_.back().second;
    }
  } else if (std::string_view name = single_name(item); !name.empty()) {
    // A table column wins over an output column of the same name.
    bool evidently_table_column = std::any_of(targets_.begin(), targets_.end(),
                                              [&](const Target& t) { return column_name_of(t.original) == name; });
    for (const Target& t : targets_) {
      if (t.star || t.name != name || evidently_table_column || merge_tree::same_expr(t.original, item)) continue;
      std::optional<bool> table_column = is_table_column(name);
      if (!table_column) {
        refuse("GROUP BY " + std::string(name) + " may mean a table column or the output column \"" +
               std::string(name) + "\"; write the expression or its position instead");
        return std::nullopt;
      }
      if (!*table_column) chosen = &t;
      break;
    }
  }
  if (chosen == nullptr) {
    for (const Target& t : targets_)
      if (!t.star && t.column && t.agg == AggKind::none && merge_tree::same_expr(t.original, item)) chosen = &t;
  }
  if (chosen != nullptr && chosen->agg != AggKind::none) {
    fail("42803", "aggregate functions are not allowed in GROUP BY");
    return std::nullopt;
  }
  const PgQuery__Node* expr = chosen != nullptr ? chosen->original : item;
  ShardColumn column = chosen != nullptr && chosen->column ? *chosen->column : add_hidden(expr);
  groups_.push_back({merge_tree::clone(expr), column});
  return column;
}

std::optional<ShardColumn> Planner::group_key_column(const PgQuery__Node* expr) const {
  for (const auto& [g, column] : groups_)
    if (g != nullptr && merge_tree::same_expr(g, expr)) return column;
  return std::nullopt;
}

// Orders the shard query by a group key as well (ascending, NULLS LAST).
bool Planner::append_shard_sort(const ShardColumn& column, const PgQuery__Node* expr) {
  PgQuery__Node* item = nullptr;
  const bool has_star = std::any_of(targets_.begin(), targets_.end(), [](const Target& t) { return t.star; });
  if (column.from == ShardColumn::From::start) {
    item = merge_tree::make_integer(column.index + 1);  // a position cannot be misread
  } else if (column.from == ShardColumn::From::hidden && !has_star) {
    item = merge_tree::make_integer(static_cast<std::int64_t>(targets_.size() + column.index) + 1);
  } else {
    if (expr == nullptr) return refuse("a GROUP BY position after * cannot be ordered by");
    std::string_view name = single_name(expr);
    for (const Target& t : targets_)
      if (!name.empty() && !t.star && t.name == name && !merge_tree::same_expr(t.original, expr))
        return refuse("GROUP BY " + std::string(name) + " shares its name with an output column");
    item = merge_tree::clone(expr);
  }
  merge_tree::append(s_->sort_clause, s_->n_sort_clause, merge_tree::make_sort_by(item, false, false));
  plan_.shard_order.push_back(SortKey{column, false, false, ""});
  return true;
}

bool Planner::plan_plain() {
  plain_distinct_ = is_plain_distinct(s_);
  plan_.client_order_keys = s_->n_sort_clause;
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i) {
    std::optional<SortKey> key = sort_key(s_->sort_clause[i]->sort_by, !plain_distinct_);
    if (!key) return false;
    plan_.shard_order.push_back(*key);
  }
  auto ordered = [&](const ShardColumn& c) {
    return std::any_of(plan_.shard_order.begin(), plan_.shard_order.end(), [&](const SortKey& k) { return k.column == c; });
  };
  if (plain_distinct_) {
    if (std::any_of(targets_.begin(), targets_.end(), [](const Target& t) { return t.star; })) {
      plan_.distinct = MergePlan::Distinct::hashed;  // the columns cannot be listed to sort by
    } else {
      // Sort by every column so equal rows from different shards meet.
      for (std::size_t i = 0; i < targets_.size(); ++i) {
        ShardColumn c{ShardColumn::From::start, static_cast<std::uint32_t>(i)};
        if (!ordered(c) && !append_shard_sort(c, nullptr)) return false;
      }
      plan_.distinct = MergePlan::Distinct::sorted;
    }
  } else if (s_->n_distinct_clause > 0) {
    std::vector<ShardColumn> on;
    for (std::size_t i = 0; i < s_->n_distinct_clause; ++i) {
      std::optional<ShardColumn> c = order_column(s_->distinct_clause[i], true, true);
      if (!c) return false;
      on.push_back(*c);
    }
    if (s_->n_sort_clause > 0) {
      bool leads = plan_.shard_order.size() >= on.size();
      for (std::size_t i = 0; leads && i < on.size(); ++i) leads = contains(on, plan_.shard_order[i].column);
      if (!leads) return fail("42P10", "SELECT DISTINCT ON expressions must match initial ORDER BY expressions");
    } else {
      for (std::size_t i = 0; i < s_->n_distinct_clause; ++i) {
        merge_tree::append(s_->sort_clause, s_->n_sort_clause,
                           merge_tree::make_sort_by(merge_tree::clone(s_->distinct_clause[i]), false, false));
        plan_.shard_order.push_back(SortKey{on[i], false, false, ""});
      }
    }
    plan_.distinct = MergePlan::Distinct::sorted;
    plan_.distinct_on = on;
  }
  // Every kind of plain SELECT may push LIMIT down: a row among the first n+m of the
  // merged result is among the first n+m of its own shard (also after DISTINCT).
  return plan_limits(true);
}

bool Planner::plan_aggregate() {
  plain_distinct_ = is_plain_distinct(s_);
  if (s_->n_distinct_clause > 0 && !plain_distinct_) return refuse("DISTINCT ON with aggregates is not merged");
  for (Target& t : targets_) {
    if (t.agg == AggKind::none) continue;
    if (!t.column) return refuse("an aggregate between two * in the select list cannot be located");
    std::string label(last_name(t.res->val->func_call->funcname, t.res->val->func_call->n_funcname));
    if (t.agg == AggKind::avg) rewrite_avg(t);
    else plan_.aggregates.push_back({*t.column, combine_of(t.agg), {}, label, argument_collation(t.original)});
    aggregates_.push_back({merge_tree::clone(t.original), *t.column});
  }
  for (std::size_t i = 0; i < s_->n_group_clause; ++i) {
    std::optional<ShardColumn> c = group_column(s_->group_clause[i]);
    if (!c) return false;
    if (!is_group_key(*c)) plan_.group_keys.push_back(*c);
  }
  if (s_->group_distinct) return refuse("GROUP BY DISTINCT is not merged");
  if (s_->having_clause != nullptr) {
    std::optional<HavingExpr> having = translate_having(*this, s_->having_clause);
    if (!having) return false;
    plan_.having = std::move(*having);
    // The shards must still take every parameter of the client's statement, typed as
    // the client's statement types them: keep a HAVING with parameters as an unused
    // hidden column.
    if (!merge_tree::parameters_of(&s_->having_clause->base).empty()) add_hidden(s_->having_clause);
    merge_tree::free_node(s_->having_clause);
    s_->having_clause = nullptr;  // evaluated after combining
  }
  std::vector<SortKey> keys;
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i) {
    std::optional<SortKey> key = sort_key(s_->sort_clause[i]->sort_by, !plain_distinct_);
    if (!key) return false;
    keys.push_back(*key);
  }
  plan_.client_order_keys = keys.size();
  bool compatible = std::all_of(keys.begin(), keys.end(), [&](const SortKey& k) { return is_group_key(k.column); });
  if (plan_.group_keys.empty() || !compatible) merge_tree::clear(s_->sort_clause, s_->n_sort_clause);
  if (!plan_.group_keys.empty()) {
    if (compatible) plan_.shard_order = keys;
    else plan_.final_order = keys;
    for (const ShardColumn& g : plan_.group_keys) {
      bool done = std::any_of(plan_.shard_order.begin(), plan_.shard_order.end(),
                              [&](const SortKey& k) { return k.column == g; });
      const PgQuery__Node* expr = nullptr;
      for (const auto& [e, c] : groups_)
        if (c == g && e != nullptr) expr = e;
      if (!done && !append_shard_sort(g, expr)) return false;
    }
  }
  if (plain_distinct_) plan_.distinct = MergePlan::Distinct::hashed;
  // Groups ordered by all group keys reach the first n+m the same way rows do, unless
  // HAVING or DISTINCT drops some of them after combining.
  bool push = !plan_.group_keys.empty() && compatible && !plan_.having && !plain_distinct_;
  return plan_limits(push);
}

bool Planner::bound(const PgQuery__Node* n, RowBound& out, const char* clause) {
  out = RowBound{};
  while (is(n, PG_QUERY__NODE__NODE_TYPE_CAST)) {
    std::string type = type_name_of(n->type_cast->type_name);
    if (type != "int2" && type != "int4" && type != "int8") break;
    n = n->type_cast->arg;
  }
  if (n == nullptr || (is(n, PG_QUERY__NODE__NODE_A_CONST) && n->a_const->isnull)) return true;
  if (merge_tree::integer_value(n, out.value)) {
    out.kind = RowBound::Kind::constant;
    return true;
  }
  if (is(n, PG_QUERY__NODE__NODE_PARAM_REF) && n->param_ref->number >= 1) {
    out.kind = RowBound::Kind::param;
    out.param = n->param_ref->number - 1;
    return true;
  }
  return refuse(std::string(clause) + " must be a constant or a parameter to be applied across shards");
}

bool Planner::plan_limits(bool push_down) {
  if (!bound(s_->limit_count, plan_.limit, "LIMIT") || !bound(s_->limit_offset, plan_.offset, "OFFSET")) return false;
  plan_.with_ties = s_->limit_option == PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_WITH_TIES;
  const RowBound& n = plan_.limit;
  const RowBound& m = plan_.offset;
  auto drop = [](PgQuery__Node*& node) {
    merge_tree::free_node(node);
    node = nullptr;
  };
  // A LIMIT/OFFSET the shards must not apply but whose parameter they must still take
  // (as bigint, as in LIMIT): NULLIF($n::int8, $n::int8) is NULL, i.e. no limit.
  auto neutralize = [&](PgQuery__Node*& node) {
    if (node == nullptr || merge_tree::parameters_of(&node->base).empty()) return drop(node);
    PgQuery__Node* a = merge_tree::make_int8_cast(merge_tree::clone(node));
    PgQuery__Node* b = merge_tree::make_int8_cast(node);
    node = merge_tree::make_nullif(a, b);
  };
  if (!push_down || n.kind == RowBound::Kind::none) {
    neutralize(s_->limit_count);
    neutralize(s_->limit_offset);
    s_->limit_option = s_->limit_count != nullptr ? PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_COUNT  // never WITH TIES
                                                  : PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_DEFAULT;
    return true;
  }
  if (n.kind == RowBound::Kind::constant && m.kind != RowBound::Kind::param) {
    std::int64_t skip = m.kind == RowBound::Kind::constant ? m.value : 0;
    if (n.value < 0 || skip < 0) return true;  // the shards report PostgreSQL's own error
    drop(s_->limit_offset);
    drop(s_->limit_count);
    if (n.value <= std::numeric_limits<std::int64_t>::max() - skip)
      s_->limit_count = merge_tree::make_integer(n.value + skip);
    else s_->limit_option = PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_DEFAULT;
    return true;
  }
  if (m.kind == RowBound::Kind::none) return true;  // LIMIT $n alone already asks for n rows
  // LIMIT ($n::int8 + $m::int8): the shards get the client's parameters unchanged.
  auto term = [](const RowBound& b, PgQuery__Node* original) {
    return b.kind == RowBound::Kind::param ? merge_tree::make_int8_cast(merge_tree::clone(original))
                                           : merge_tree::make_integer(b.value);
  };
  PgQuery__Node* sum = merge_tree::make_plus(term(n, s_->limit_count), term(m, s_->limit_offset));
  drop(s_->limit_count);
  drop(s_->limit_offset);
  s_->limit_count = sum;
  return true;
}

}  // namespace splitpoint::routing::merge_detail
