#include "routing/merge/combine_plan.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

namespace {

// A string field of an unpacked tree: the old value freed unless it is protobuf-c's
// shared empty string.
// A reference to a sharded table, turned into one to its temporary table.
void read_temp_table(PgQuery__RangeVar* rv, std::string_view temp_name) { merge_tree::retarget(rv, "pg_temp", temp_name); }

struct Table {
  std::string schema, name;
  std::vector<PgQuery__RangeVar*> uses;  // every place the statement names it
  bool all_columns = false;
  bool whole = false;  // every shard holds it whole: pulled from one shard
};

// What the statement reads: its sharded tables and the column names it mentions.
struct Reads {
  std::vector<Table> tables;
  std::set<std::string> names;       // the last name of every column reference, USING names
  std::set<std::string> whole_rows;  // one-name references (a table's whole row, or a column)
  bool star = false;                 // `*`, `t.*` or NATURAL JOIN somewhere
  std::string refused;               // SPC01: why no combine can answer it
};

std::string schema_of(const PgQuery__RangeVar* rv) { return std::string(sv(rv->schemaname)); }

void collect(PgQuery__ParseResult* tree, const CombineOptions& options, Reads& r) {
  std::set<std::string> ctes;
  walk_nodes(&tree->base, [&](const PgQuery__Node* n) {
    switch (n->node_case) {
      case PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR:
        ctes.emplace(sv(n->common_table_expr->ctename));
        break;
      case PG_QUERY__NODE__NODE_INSERT_STMT:
      case PG_QUERY__NODE__NODE_UPDATE_STMT:
      case PG_QUERY__NODE__NODE_DELETE_STMT:
        r.refused = "a data-modifying statement inside a multi-shard read";
        break;
      case PG_QUERY__NODE__NODE_SELECT_STMT:
        if (n->select_stmt->n_locking_clause > 0) r.refused = "FOR UPDATE/SHARE over several shards";
        if (n->select_stmt->into_clause != nullptr) r.refused = "SELECT INTO over several shards";
        break;
      case PG_QUERY__NODE__NODE_JOIN_EXPR:
        if (n->join_expr->is_natural) r.star = true;
        for (std::size_t i = 0; i < n->join_expr->n_using_clause; ++i)
          r.names.emplace(str_of(n->join_expr->using_clause[i]));
        break;
      case PG_QUERY__NODE__NODE_COLUMN_REF: {
        const auto* c = n->column_ref;
        if (c->n_fields == 0) break;
        if (is(c->fields[c->n_fields - 1], PG_QUERY__NODE__NODE_A_STAR)) r.star = true;
        else r.names.emplace(str_of(c->fields[c->n_fields - 1]));
        if (c->n_fields == 1) r.whole_rows.emplace(str_of(c->fields[0]));
        break;
      }
      default:
        break;
    }
    return true;
  });
  for_each_range_var(&tree->base, [&](const PgQuery__RangeVar* crv) {
    auto* rv = const_cast<PgQuery__RangeVar*>(crv);  // the tree is the caller's copy
    const std::string schema = schema_of(rv), name(sv(rv->relname));
    if (schema.empty() && ctes.count(name) != 0) return;  // a CTE of the statement
    const bool sharded = options.is_sharded_table && options.is_sharded_table(schema, name);
    if (!sharded && !(options.is_whole_table && options.is_whole_table(schema, name))) return;
    auto it = std::find_if(r.tables.begin(), r.tables.end(),
                           [&](const Table& t) { return t.schema == schema && t.name == name; });
    if (it == r.tables.end()) it = r.tables.insert(r.tables.end(), Table{schema, name, {}, false, !sharded});
    it->uses.push_back(rv);
    const std::string shown = rv->alias != nullptr ? std::string(sv(rv->alias->aliasname)) : name;
    if (r.whole_rows.count(shown) != 0) it->all_columns = true;  // f(t), row_to_json(t), t IS NULL
  });
}

std::string quoted_table(const Table& t) {
  return t.schema.empty() ? quote_ident(t.name) : quote_ident(t.schema) + "." + quote_ident(t.name);
}

// The columns of `t` the statement may read, in the table's order; empty = every column
// (`*`); {""}: none (the rows count, not their values).
std::vector<std::string> columns_needed(const Table& t, const Reads& r, const CombineOptions& options) {
  const TableShape* shape = options.table_shape ? options.table_shape(t.name) : nullptr;
  if (r.star || t.all_columns || shape == nullptr) return {};
  std::vector<std::string> out;
  for (const auto& c : shape->columns)
    if (r.names.count(c) != 0) out.push_back(c);
  if (out.empty()) out.push_back("");
  return out;
}

std::string select_list(const std::vector<std::string>& columns) {
  if (columns.empty()) return "*";
  if (columns.size() == 1 && columns[0].empty()) return "1 AS sp_combine_row";
  std::string s;
  for (const auto& c : columns) s += (s.empty() ? "" : ", ") + quote_ident(c);
  return s;
}

// The statement's WHERE may move to the shards when it filters the rows of the one
// table the statement reads, and nothing but them: a plain SELECT ... FROM t WHERE ...
// with no sub-select in the condition. It then runs once per row, on the shard.
bool filter_moves(const PgQuery__SelectStmt* s, const Reads& r) {
  if (s->op != PG_QUERY__SET_OPERATION__SETOP_NONE || s->with_clause != nullptr || s->n_from_clause != 1 ||
      s->where_clause == nullptr || r.tables.size() != 1 || r.tables[0].uses.size() != 1 ||
      !is(s->from_clause[0], PG_QUERY__NODE__NODE_RANGE_VAR) || s->from_clause[0]->range_var != r.tables[0].uses[0])
    return false;
  bool sublink = false;
  walk_nodes(&s->where_clause->base, [&](const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_SUB_LINK)) sublink = true;
    return !sublink;
  });
  return !sublink && !is(s->where_clause, PG_QUERY__NODE__NODE_SUB_LINK);
}

using Tree = std::unique_ptr<PgQuery__ParseResult, void (*)(PgQuery__ParseResult*)>;

Tree copy_of(PgQuery__ParseResult* tree) {
  std::string packed(pg_query__parse_result__get_packed_size(tree), '\0');
  pg_query__parse_result__pack(tree, reinterpret_cast<uint8_t*>(packed.data()));
  return unpack_tree(packed);
}

// A copy of the statement's SELECT ... FROM [WHERE] [GROUP BY] with `targets` as its
// select list and everything that comes after grouping taken out: a pull.
std::optional<std::string> pull_from(PgQuery__ParseResult* tree, std::vector<PgQuery__Node*> targets, bool keep_where,
                                     bool keep_group) {
  Tree copy = copy_of(tree);
  if (!copy) return std::nullopt;
  PgQuery__SelectStmt* s = copy->stmts[0]->stmt->select_stmt;
  merge_tree::clear(s->target_list, s->n_target_list);
  for (PgQuery__Node* t : targets) merge_tree::append(s->target_list, s->n_target_list, t);
  merge_tree::clear(s->distinct_clause, s->n_distinct_clause);
  if (!keep_group) merge_tree::clear(s->group_clause, s->n_group_clause);
  merge_tree::clear(s->window_clause, s->n_window_clause);
  merge_tree::clear(s->sort_clause, s->n_sort_clause);
  if (!keep_group) s->group_distinct = false;
  for (PgQuery__Node** n : {&s->having_clause, &s->limit_count, &s->limit_offset}) {
    merge_tree::free_node(*n);
    *n = nullptr;
  }
  if (!keep_where) {
    merge_tree::free_node(s->where_clause);
    s->where_clause = nullptr;
  }
  s->limit_option = PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_DEFAULT;
  return deparse(copy.get());
}

// SELECT <columns> FROM t [AS a] WHERE <the statement's condition>.
std::optional<std::string> filtered_pull(PgQuery__ParseResult* tree, const std::vector<std::string>& columns) {
  std::vector<PgQuery__Node*> targets;
  if (columns.empty()) {
    targets.push_back(merge_tree::make_res_target(merge_tree::make_column_ref(""), ""));
  } else if (columns.size() == 1 && columns[0].empty()) {
    targets.push_back(merge_tree::make_res_target(merge_tree::make_integer(1), "sp_combine_row"));
  } else {
    for (const auto& c : columns) targets.push_back(merge_tree::make_res_target(merge_tree::make_column_ref(c), ""));
  }
  return pull_from(tree, std::move(targets), true, false);
}

// ---- Aggregation on the shards

// Calls `visit` on `slot` and every Node slot below it (visit says whether to descend).
void each_slot(PgQuery__Node*& slot, const std::function<bool(PgQuery__Node*&)>& visit) {
  if (slot == nullptr || !visit(slot) || slot == nullptr) return;
  for_each_node_slot(&slot->base, visit);
}

// sum() of a smallint/integer column is bigint, and the sum of bigint partials is
// numeric: the combined sum is cast back. nullopt: a type not combined this way.
std::optional<bool> sum_cast_to_int8(std::string_view type) {
  if (type == "smallint" || type == "integer") return true;
  if (type == "bigint" || type.substr(0, 7) == "numeric" || type == "real" || type == "double precision" ||
      type == "money" || type.substr(0, 8) == "interval")
    return false;
  return std::nullopt;
}

struct Aggregation {
  std::string pull_sql, create_sql, combine_sql;
};

class ShardAggregation {
 public:
  ShardAggregation(PgQuery__ParseResult* tree, const TableShape& shape) : tree_(tree), shape_(shape) {}
  ~ShardAggregation() {
    for (auto* n : groups_) merge_tree::free_node(n);
    for (auto* n : aggs_) merge_tree::free_node(n);
  }
  ShardAggregation(const ShardAggregation&) = delete;
  ShardAggregation& operator=(const ShardAggregation&) = delete;
  std::optional<Aggregation> run();

 private:
  bool collect();
  bool collect_aggregates(PgQuery__Node*& root);
  PgQuery__Node* combined(std::size_t j) const;
  bool rewrite(PgQuery__Node*& root, bool order_by);
  bool is_column(std::string_view name) const {
    return std::find(shape_.columns.begin(), shape_.columns.end(), name) != shape_.columns.end();
  }

  PgQuery__ParseResult* tree_;
  const TableShape& shape_;
  Tree copy_{nullptr, nullptr};
  PgQuery__SelectStmt* s_ = nullptr;
  std::vector<PgQuery__Node*> groups_;  // copies of the statement's GROUP BY expressions
  std::vector<PgQuery__Node*> aggs_;    // copies of its distinct aggregate calls
  std::vector<bool> int8_sum_;          // per aggregate: a sum cast back to bigint
  std::set<std::string> aliases_;       // output column names, which ORDER BY may use
};

bool ShardAggregation::collect() {
  if (s_->op != PG_QUERY__SET_OPERATION__SETOP_NONE || s_->with_clause != nullptr || s_->n_from_clause != 1 ||
      !is(s_->from_clause[0], PG_QUERY__NODE__NODE_RANGE_VAR) || s_->group_distinct || s_->n_window_clause > 0 ||
      s_->n_values_lists > 0)
    return false;
  bool bad = false;
  walk_nodes(&s_->base, [&](const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_SUB_LINK) || is(n, PG_QUERY__NODE__NODE_GROUPING_SET) ||
        (is(n, PG_QUERY__NODE__NODE_FUNC_CALL) && n->func_call->over != nullptr) ||
        (is(n, PG_QUERY__NODE__NODE_COLUMN_REF) && n->column_ref->n_fields > 0 &&
         is(n->column_ref->fields[n->column_ref->n_fields - 1], PG_QUERY__NODE__NODE_A_STAR)))
      bad = true;
    return !bad;
  });
  if (bad) return false;
  for (std::size_t i = 0; i < s_->n_group_clause; ++i) {
    PgQuery__Node* g = s_->group_clause[i];
    if (is(g, PG_QUERY__NODE__NODE_A_CONST)) return false;  // GROUP BY 1
    if (is(g, PG_QUERY__NODE__NODE_COLUMN_REF) && g->column_ref->n_fields == 1 &&
        !is_column(str_of(g->column_ref->fields[0])))
      return false;  // an output column's name
    groups_.push_back(merge_tree::clone(g));
  }
  for (std::size_t i = 0; i < s_->n_target_list; ++i) {
    auto* t = s_->target_list[i]->res_target;
    if (sv(t->name).empty()) merge_tree::set_string(t->name, merge_tree::output_name(t));  // its name stays
    aliases_.emplace(sv(t->name));
    if (!collect_aggregates(t->val)) return false;
  }
  if (!collect_aggregates(s_->having_clause)) return false;
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i)
    if (!collect_aggregates(s_->sort_clause[i]->sort_by->node)) return false;
  return !aggs_.empty() || !groups_.empty();
}

// The aggregate calls below `root`; false for one whose partial results do not combine.
bool ShardAggregation::collect_aggregates(PgQuery__Node*& root) {
  bool ok = true;
  each_slot(root, [&](PgQuery__Node*& n) {
    if (!ok || !is(n, PG_QUERY__NODE__NODE_FUNC_CALL)) return ok;
    std::string why;
    const auto* f = n->func_call;
    auto kind = merge_tree::aggregate_kind(f, why);
    if (kind == merge_tree::AggKind::none) return true;
    using K = merge_tree::AggKind;
    if ((kind != K::count && kind != K::sum && kind != K::min && kind != K::max && kind != K::bool_and &&
         kind != K::bool_or) ||
        f->agg_distinct || f->agg_within_group) {
      ok = false;
      return false;
    }
    bool cast = false;
    if (kind == K::sum) {  // the partial's type must be known
      const PgQuery__Node* arg = f->n_args == 1 ? f->args[0] : nullptr;
      if (!is(arg, PG_QUERY__NODE__NODE_COLUMN_REF) || arg->column_ref->n_fields == 0) return ok = false;
      auto name = str_of(arg->column_ref->fields[arg->column_ref->n_fields - 1]);
      auto it = std::find(shape_.columns.begin(), shape_.columns.end(), name);
      if (it == shape_.columns.end()) return ok = false;
      auto c = sum_cast_to_int8(shape_.types[static_cast<std::size_t>(it - shape_.columns.begin())]);
      if (!c) return ok = false;
      cast = *c;
    }
    if (std::none_of(aggs_.begin(), aggs_.end(), [&](const PgQuery__Node* a) { return merge_tree::same_expr(a, n); })) {
      aggs_.push_back(merge_tree::clone(n));
      int8_sum_.push_back(cast);
    }
    return false;
  });
  return ok;
}

// The re-aggregation of aggregate `j` over its partial column sp_a<j>: sum of counts,
// sum of sums, min of mins, ...
PgQuery__Node* ShardAggregation::combined(std::size_t j) const {
  PgQuery__Node* n = merge_tree::clone(aggs_[j]);
  PgQuery__FuncCall* f = n->func_call;
  std::string why;
  const bool count = merge_tree::aggregate_kind(f, why) == merge_tree::AggKind::count;
  merge_tree::clear(f->args, f->n_args);
  merge_tree::append(f->args, f->n_args, merge_tree::make_column_ref("sp_a" + std::to_string(j + 1)));
  merge_tree::clear(f->agg_order, f->n_agg_order);
  merge_tree::free_node(f->agg_filter);
  f->agg_filter = nullptr;
  f->agg_star = false;
  if (count) merge_tree::set_function_name(f, "", "sum");
  return count || int8_sum_[j] ? merge_tree::make_int8_cast(n) : n;
}

// Group keys and aggregates below `root` become the partial columns; false if a column
// of the table is left (it would not exist in the partial rows).
bool ShardAggregation::rewrite(PgQuery__Node*& root, bool order_by) {
  bool ok = true;
  each_slot(root, [&](PgQuery__Node*& n) {
    for (std::size_t i = 0; i < groups_.size(); ++i)
      if (merge_tree::same_expr(n, groups_[i])) {
        merge_tree::free_node(n);
        n = merge_tree::make_column_ref("sp_g" + std::to_string(i + 1));
        return false;
      }
    for (std::size_t j = 0; j < aggs_.size(); ++j)
      if (merge_tree::same_expr(n, aggs_[j])) {
        PgQuery__Node* c = combined(j);
        merge_tree::free_node(n);
        n = c;
        return false;
      }
    if (is(n, PG_QUERY__NODE__NODE_COLUMN_REF)) {
      const auto* c = n->column_ref;
      if (!(order_by && c->n_fields == 1 && aliases_.count(std::string(str_of(c->fields[0]))) != 0)) ok = false;
      return false;
    }
    return true;
  });
  return ok;
}

std::optional<Aggregation> ShardAggregation::run() {
  copy_ = copy_of(tree_);
  if (!copy_) return std::nullopt;
  s_ = copy_->stmts[0]->stmt->select_stmt;
  if (!collect()) return std::nullopt;
  // The pull: SELECT <group keys> AS sp_g<i>, <aggregates> AS sp_a<j> FROM t WHERE ... GROUP BY ...
  auto targets = [&] {
    std::vector<PgQuery__Node*> t;
    for (std::size_t i = 0; i < groups_.size(); ++i)
      t.push_back(merge_tree::make_res_target(merge_tree::clone(groups_[i]), "sp_g" + std::to_string(i + 1)));
    for (std::size_t j = 0; j < aggs_.size(); ++j)
      t.push_back(merge_tree::make_res_target(merge_tree::clone(aggs_[j]), "sp_a" + std::to_string(j + 1)));
    return t;
  };
  Aggregation a;
  auto pull = pull_from(copy_.get(), targets(), true, true);
  auto create = pull_from(copy_.get(), targets(), false, true);
  if (!pull || !create) return std::nullopt;
  a.pull_sql = std::move(*pull);
  a.create_sql = std::move(*create);
  // The statement over the partial rows: the WHERE ran on the shards, the rest here.
  bool ok = true;
  for (std::size_t i = 0; i < s_->n_target_list; ++i) ok = ok && rewrite(s_->target_list[i]->res_target->val, false);
  ok = ok && rewrite(s_->having_clause, false);
  for (std::size_t i = 0; i < s_->n_sort_clause; ++i) ok = ok && rewrite(s_->sort_clause[i]->sort_by->node, true);
  for (std::size_t i = 0; i < s_->n_distinct_clause; ++i)
    if (s_->distinct_clause[i] != nullptr && s_->distinct_clause[i]->node_case != 0)
      ok = ok && rewrite(s_->distinct_clause[i], false);
  if (!ok) return std::nullopt;
  merge_tree::clear(s_->group_clause, s_->n_group_clause);
  for (std::size_t i = 0; i < groups_.size(); ++i)
    merge_tree::append(s_->group_clause, s_->n_group_clause, merge_tree::make_column_ref("sp_g" + std::to_string(i + 1)));
  merge_tree::free_node(s_->where_clause);
  s_->where_clause = nullptr;
  PgQuery__RangeVar* rv = s_->from_clause[0]->range_var;
  read_temp_table(rv, "sp_combine_1");
  auto sql = deparse(copy_.get());
  if (!sql) return std::nullopt;
  a.combine_sql = std::move(*sql);
  return a;
}

}  // namespace

std::string CombinePlan::describe() const {
  std::string s = "combine:";
  for (const auto& p : pulls) s += " pull " + p.table + " as " + p.temp_name + " (" + p.pull_sql + ");";
  return s + " then " + combine_sql;
}

std::variant<CombinePlan, MergeError> plan_combine(PgQuery__ParseResult* tree, const CombineOptions& options) {
  if (tree == nullptr || tree->n_stmts != 1 || tree->stmts[0]->stmt == nullptr ||
      !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_SELECT_STMT))
    return MergeError{"0A000", "only a single SELECT can be answered across shards"};
  Reads reads;
  collect(tree, options, reads);
  auto cannot = [](std::string why) {
    return MergeError{"SPC01", "cannot be answered exactly across shards: " + std::move(why)};
  };
  if (!reads.refused.empty()) return cannot(reads.refused);
  if (std::all_of(reads.tables.begin(), reads.tables.end(), [](const Table& t) { return t.whole; }))
    return cannot("no sharded table found to combine");
  PgQuery__SelectStmt* top = tree->stmts[0]->stmt->select_stmt;
  CombinePlan plan;
  const TableShape* shape =
      reads.tables.size() == 1 && options.table_shape ? options.table_shape(reads.tables[0].name) : nullptr;
  if (shape != nullptr && reads.tables[0].uses.size() == 1)
    if (auto agg = ShardAggregation(tree, *shape).run()) {
      CombinePull pull;
      pull.table = quoted_table(reads.tables[0]);
      pull.temp_name = "sp_combine_1";
      pull.create_sql = "CREATE TEMP TABLE sp_combine_1 ON COMMIT DROP AS " + agg->create_sql + " WITH NO DATA";
      pull.pull_sql = std::move(agg->pull_sql);
      pull.filtered = pull.aggregated = true;
      plan.pulls.push_back(std::move(pull));
      plan.combine_sql = std::move(agg->combine_sql);
      plan.all_shards = false;
      return plan;
    }
  const bool filtered = filter_moves(top, reads);
  plan.all_shards = !filtered;
  for (std::size_t i = 0; i < reads.tables.size(); ++i) {
    const Table& t = reads.tables[i];
    CombinePull pull;
    pull.table = quoted_table(t);
    pull.temp_name = "sp_combine_" + std::to_string(i + 1);
    auto columns = columns_needed(t, reads, options);
    pull.create_sql = "CREATE TEMP TABLE " + pull.temp_name + " ON COMMIT DROP AS SELECT " + select_list(columns) +
                      " FROM " + pull.table + " WITH NO DATA";
    pull.filtered = filtered;
    pull.one_shard = t.whole;
    if (filtered) {
      auto sql = filtered_pull(tree, columns);
      if (!sql) return MergeError{"XX000", "could not print the partial query"};
      pull.pull_sql = std::move(*sql);
    } else {
      pull.pull_sql = "SELECT " + select_list(columns) + " FROM " + pull.table;
    }
    plan.pulls.push_back(std::move(pull));
  }
  // The statement over the temporary tables: each use keeps the name its columns are
  // qualified with (its alias, else the table's own name).
  for (std::size_t i = 0; i < reads.tables.size(); ++i) {
    for (PgQuery__RangeVar* rv : reads.tables[i].uses) {
      read_temp_table(rv, plan.pulls[i].temp_name);
    }
  }
  if (filtered) {
    merge_tree::free_node(top->where_clause);
    top->where_clause = nullptr;
  }
  std::optional<std::string> sql = deparse(tree);
  if (!sql) return MergeError{"XX000", "could not print the combine query"};
  plan.combine_sql = std::move(*sql);
  return plan;
}

}  // namespace splitpoint::routing
