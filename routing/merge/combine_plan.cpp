#include "routing/merge/combine_plan.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

namespace {

// A string field of an unpacked tree: the old value freed unless it is protobuf-c's
// shared empty string.
void set_string(char*& field, std::string_view value) {
  if (field != nullptr && field != protobuf_c_empty_string) std::free(field);
  field = merge_tree::dup_string(value);
}

struct Table {
  std::string schema, name;
  std::vector<PgQuery__RangeVar*> uses;  // every place the statement names it
  bool all_columns = false;
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
    if (!options.is_sharded_table || !options.is_sharded_table(schema, name)) return;
    auto it = std::find_if(r.tables.begin(), r.tables.end(),
                           [&](const Table& t) { return t.schema == schema && t.name == name; });
    if (it == r.tables.end()) it = r.tables.insert(r.tables.end(), Table{schema, name, {}, false});
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
  const std::vector<std::string>* all = options.table_columns ? options.table_columns(t.name) : nullptr;
  if (r.star || t.all_columns || all == nullptr) return {};
  std::vector<std::string> out;
  for (const auto& c : *all)
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

// SELECT <columns> FROM t [AS a] WHERE <the statement's condition>, from a copy of the
// statement with everything else taken out.
std::optional<std::string> filtered_pull(PgQuery__ParseResult* tree, const std::vector<std::string>& columns) {
  std::string packed(pg_query__parse_result__get_packed_size(tree), '\0');
  pg_query__parse_result__pack(tree, reinterpret_cast<uint8_t*>(packed.data()));
  auto copy = unpack_tree(packed);
  if (!copy) return std::nullopt;
  PgQuery__SelectStmt* s = copy->stmts[0]->stmt->select_stmt;
  merge_tree::clear(s->target_list, s->n_target_list);
  if (columns.empty()) {
    merge_tree::append(s->target_list, s->n_target_list, merge_tree::make_res_target(merge_tree::make_column_ref(""), ""));
  } else if (columns.size() == 1 && columns[0].empty()) {
    merge_tree::append(s->target_list, s->n_target_list,
                       merge_tree::make_res_target(merge_tree::make_integer(1), "sp_combine_row"));
  } else {
    for (const auto& c : columns)
      merge_tree::append(s->target_list, s->n_target_list, merge_tree::make_res_target(merge_tree::make_column_ref(c), ""));
  }
  merge_tree::clear(s->distinct_clause, s->n_distinct_clause);
  merge_tree::clear(s->group_clause, s->n_group_clause);
  merge_tree::clear(s->window_clause, s->n_window_clause);
  merge_tree::clear(s->sort_clause, s->n_sort_clause);
  s->group_distinct = false;
  for (PgQuery__Node** n : {&s->having_clause, &s->limit_count, &s->limit_offset}) {
    merge_tree::free_node(*n);
    *n = nullptr;
  }
  s->limit_option = PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_DEFAULT;
  return deparse(copy.get());
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
  if (reads.tables.empty()) return cannot("no sharded table found to combine");
  PgQuery__SelectStmt* top = tree->stmts[0]->stmt->select_stmt;
  CombinePlan plan;
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
      if (rv->alias == nullptr) {
        rv->alias = static_cast<PgQuery__Alias*>(std::malloc(sizeof(PgQuery__Alias)));
        *rv->alias = PG_QUERY__ALIAS__INIT;
        rv->alias->aliasname = merge_tree::dup_string(reads.tables[i].name);
      }
      set_string(rv->schemaname, "pg_temp");
      set_string(rv->relname, plan.pulls[i].temp_name);
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
