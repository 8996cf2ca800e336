// SELECT / INSERT / UPDATE / DELETE: which sharded tables a statement reads and writes,
// in which scopes, and which conditions restrict the rows that matter.
#include <algorithm>

#include "routing/analyze.hpp"
#include "routing/key_guard.hpp"
#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

std::string alias_or(const PgQuery__Alias* alias, const char* name) {
  if (alias != nullptr && !sv(alias->aliasname).empty()) return alias->aliasname;
  return std::string(sv(name));
}

// A VALUES list as INSERT uses it: rows and nothing else.
bool is_plain_values(const PgQuery__Node* n) {
  if (!is(n, PG_QUERY__NODE__NODE_SELECT_STMT)) return false;
  const PgQuery__SelectStmt* s = n->select_stmt;
  return s->n_values_lists > 0 && s->n_from_clause == 0 && s->n_sort_clause == 0 && s->limit_count == nullptr &&
         s->limit_offset == nullptr && s->with_clause == nullptr && s->n_locking_clause == 0;
}

}  // namespace

int Analyzer::add_occurrence(const std::string& table, const TableClass& c) {
  plan_.occs.push_back(Occurrence{table, c.distribution, c.key_column});
  return static_cast<int>(plan_.occs.size()) - 1;
}

void Analyzer::dml(const PgQuery__Node* stmt, Scope& scope, bool alone, KeyCols* exposed) {
  switch (stmt->node_case) {
    case PG_QUERY__NODE__NODE_SELECT_STMT:
      return select(stmt->select_stmt, scope, exposed);
    case PG_QUERY__NODE__NODE_INSERT_STMT:
      writes_ = true;
      return insert(stmt->insert_stmt, scope, alone);
    case PG_QUERY__NODE__NODE_UPDATE_STMT:
      writes_ = true;
      return update(stmt->update_stmt, scope, alone);
    case PG_QUERY__NODE__NODE_DELETE_STMT:
      writes_ = true;
      return remove(stmt->delete_stmt, scope);
    case PG_QUERY__NODE__NODE_MERGE_STMT: {  // only into reference tables (see statement())
      writes_ = true;
      const PgQuery__MergeStmt* m = stmt->merge_stmt;
      if (m->with_clause != nullptr) with(m->with_clause, scope);
      write_target(m->relation, scope);
      from_item(m->source_relation, scope);
      scan(m->join_condition, scope);
      scan(m->merge_when_clauses, m->n_merge_when_clauses, scope);
      return;
    }
    default:
      return;  // the safety net counts its tables
  }
}

// The WHERE read as if the index's first column were the table's key: a set of values
// it must have, or nothing.
void Analyzer::index_lookup(const PgQuery__Node* where, const Scope& scope) {
  const Rel& rel = scope.rels.front();
  if (rel.key_cols.size() != 1) return;
  const int occ = rel.key_cols.front().second;
  const auto& indexes = topo_.config().indexes;
  for (std::size_t i = 0; i < indexes.size(); ++i) {
    if (indexes[i].table != plan_.occs[occ].table) continue;
    Scope by_index{nullptr, {Rel{rel.name, {{indexes[i].columns.front(), occ}}}}, {}};
    KeyCond k = cond_of(where, by_index);
    if (k.op != KeyCond::Op::in || k.null_matches || k.occ != occ) continue;
    plan_.lookup = Plan::IndexLookup{i, occ, std::move(k.values)};
    return;
  }
}

void Analyzer::select(const PgQuery__SelectStmt* s, Scope& scope, KeyCols* exposed) {
  if (s->with_clause != nullptr) with(s->with_clause, scope);
  if (s->larg != nullptr || s->rarg != nullptr) {  // UNION / INTERSECT / EXCEPT
    for (const PgQuery__SelectStmt* arm : {s->larg, s->rarg}) {
      if (arm == nullptr) continue;
      Scope child{&scope, {}, {}};
      select(arm, child, nullptr);
    }
    scan(s->sort_clause, s->n_sort_clause, scope);
    return;
  }
  for (std::size_t i = 0; i < s->n_from_clause; ++i) from_item(s->from_clause[i], scope);
  // Sub-queries first, so that `key IN (SELECT key ...)` can be seen as a join.
  scan(s->target_list, s->n_target_list, scope);
  scan(s->where_clause, scope);
  scan(s->having_clause, scope);
  scan(s->group_clause, s->n_group_clause, scope);
  scan(s->sort_clause, s->n_sort_clause, scope);
  scan(s->distinct_clause, s->n_distinct_clause, scope);
  scan(s->window_clause, s->n_window_clause, scope);
  scan(s->values_lists, s->n_values_lists, scope);
  scan(s->limit_count, scope);
  scan(s->limit_offset, scope);
  where(s->where_clause, scope, EdgeRule::both);
  where(s->having_clause, scope, EdgeRule::both);  // a bare column there is a grouping column
  if (scope.parent == nullptr && s->where_clause != nullptr && scope.rels.size() == 1 && plan_.occs.size() == 1 &&
      !topo_.config().indexes.empty())
    index_lookup(s->where_clause, scope);
  // Key columns this query passes through, so conditions of an enclosing query on
  // them restrict its rows. Not through LIMIT/OFFSET: which rows survive depends on
  // all of them.
  if (exposed == nullptr || s->limit_count != nullptr || s->limit_offset != nullptr) return;
  for (std::size_t i = 0; i < s->n_target_list; ++i) {
    if (!is(s->target_list[i], PG_QUERY__NODE__NODE_RES_TARGET)) continue;
    const PgQuery__ResTarget* rt = s->target_list[i]->res_target;
    if (!is(rt->val, PG_QUERY__NODE__NODE_COLUMN_REF)) continue;
    const PgQuery__ColumnRef* c = rt->val->column_ref;
    if (c->n_fields > 0 && is(c->fields[c->n_fields - 1], PG_QUERY__NODE__NODE_A_STAR)) {
      std::string_view only = c->n_fields >= 2 ? str_of(c->fields[c->n_fields - 2]) : std::string_view{};
      for (const Rel& rel : scope.rels)
        if (only.empty() || rel.name == only) exposed->insert(exposed->end(), rel.key_cols.begin(), rel.key_cols.end());
      continue;
    }
    Resolved r = resolve(rt->val, scope);
    if (r.occ < 0 || r.depth != 0) continue;
    std::string name(!sv(rt->name).empty() ? sv(rt->name) : str_of(c->fields[c->n_fields - 1]));
    exposed->emplace_back(std::move(name), r.occ);
  }
}

void Analyzer::with(const PgQuery__WithClause* w, Scope& scope) {
  for (std::size_t i = 0; i < w->n_ctes; ++i) {
    if (!is(w->ctes[i], PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR)) continue;
    const PgQuery__CommonTableExpr* cte = w->ctes[i]->common_table_expr;
    std::string name(sv(cte->ctename));
    // A recursive CTE sees itself; it passes no keys through.
    if (w->recursive) scope.ctes.push_back(Cte{name, {}});
    Scope child{&scope, {}, {}};
    KeyCols exposed;
    if (cte->ctequery != nullptr) dml(cte->ctequery, child, false, &exposed);
    // Conditions on a CTE's key columns restrict its rows only when it is used once:
    // with two uses, each may need different rows.
    auto refs = relname_refs_.find(name);
    bool once = refs == relname_refs_.end() || refs->second <= 1;
    if (w->recursive || !once || cte->n_aliascolnames > 0) exposed.clear();
    if (w->recursive)
      scope.ctes.back().key_cols = {};
    else
      scope.ctes.push_back(Cte{std::move(name), std::move(exposed)});
  }
}

void Analyzer::from_item(const PgQuery__Node* n, Scope& scope) {
  if (n == nullptr) return;
  switch (n->node_case) {
    case PG_QUERY__NODE__NODE_RANGE_VAR:
      return table(n->range_var, scope, nullptr);
    case PG_QUERY__NODE__NODE_JOIN_EXPR:
      return join(n->join_expr, scope);
    case PG_QUERY__NODE__NODE_RANGE_SUBSELECT: {
      const PgQuery__RangeSubselect* rs = n->range_subselect;
      Scope child{rs->lateral ? &scope : scope.parent, {}, {}};
      KeyCols exposed;
      if (rs->subquery != nullptr) dml(rs->subquery, child, false, &exposed);
      if (rs->alias != nullptr && rs->alias->n_colnames > 0) exposed.clear();  // renamed columns
      scope.rels.push_back(Rel{alias_or(rs->alias, ""), std::move(exposed)});
      return;
    }
    case PG_QUERY__NODE__NODE_RANGE_FUNCTION:
      scan(n->range_function->functions, n->range_function->n_functions, scope);
      scope.rels.push_back(Rel{alias_or(n->range_function->alias, ""), {}});
      return;
    case PG_QUERY__NODE__NODE_RANGE_TABLE_SAMPLE:
      return from_item(n->range_table_sample->relation, scope);
    default:
      return scan(n, scope);
  }
}

void Analyzer::table(const PgQuery__RangeVar* rv, Scope& scope, int* occ_out) {
  if (rv == nullptr || sv(rv->relname).empty()) return;
  std::string alias = alias_or(rv->alias, rv->relname);
  std::string_view schema = sv(rv->schemaname);
  if (schema.empty()) {
    for (const Scope* s = &scope; s != nullptr; s = s->parent)
      for (auto it = s->ctes.rbegin(); it != s->ctes.rend(); ++it)
        if (it->name == rv->relname) {
          scope.rels.push_back(Rel{alias, it->key_cols});
          return;
        }
  }
  TableClass c = topo_.classify(schema, rv->relname);
  if (c.kind != TableClass::Kind::sharded) {
    scope.rels.push_back(Rel{alias, {}});
    return;
  }
  int occ = add_occurrence(Topology::table_name(schema, rv->relname), c);
  scope.rels.push_back(Rel{alias, {{c.key_column, occ}}, occ});
  if (occ_out != nullptr) *occ_out = occ;
}

void Analyzer::join(const PgQuery__JoinExpr* j, Scope& scope) {
  from_item(j->larg, scope);
  std::size_t left_end = scope.rels.size();
  from_item(j->rarg, scope);
  scan(j->quals, scope);
  EdgeRule rule = EdgeRule::none;
  switch (j->jointype) {
    case PG_QUERY__JOIN_TYPE__JOIN_INNER: rule = EdgeRule::both; break;
    case PG_QUERY__JOIN_TYPE__JOIN_LEFT: rule = EdgeRule::left_to_right; break;
    case PG_QUERY__JOIN_TYPE__JOIN_RIGHT: rule = EdgeRule::right_to_left; break;
    default: break;  // FULL: every row of both sides matters
  }
  // Only an inner join's ON filters rows; an outer join's ON only says which rows of
  // the nullable side match.
  if (rule == EdgeRule::both) {
    where(j->quals, scope, rule);
  } else {
    edges_of(j->quals, scope, rule, left_end);
  }
  for (std::size_t i = 0; i < j->n_using_clause; ++i) {  // JOIN ... USING (key)
    std::string_view col = str_of(j->using_clause[i]);
    Resolved a, b;
    for (std::size_t r = 0; r < scope.rels.size(); ++r)
      for (const auto& [name, occ] : scope.rels[r].key_cols)
        if (name == col) (r < left_end ? a : b) = Resolved{occ, 0, static_cast<int>(r)};
    edge(a, b, rule, left_end);
  }
}

void Analyzer::write_target(const PgQuery__RangeVar* rv, Scope& scope) {
  if (rv == nullptr) return;
  int occ = -1;
  table(rv, scope, &occ);
  if (occ >= 0) {
    plan_.write_targets.push_back(occ);
    return;
  }
  TableClass c = topo_.classify(sv(rv->schemaname), rv->relname);
  if (c.kind == TableClass::Kind::reference || c.kind == TableClass::Kind::catalog) {
    reference_target_ = true;
    plan_.writes_reference = true;
  }
}

// SET key = <value> moves the row unless the value is the one an UPDATE's WHERE already
// requires (`where`: `key = <the same literal or $n> AND ...`, as multi-tenant ORMs
// write every UPDATE): then nothing moves and the statement routes by that value.
// `update`, a lone UPDATE without FROM, may also set the key to a constant or a
// parameter whatever its WHERE (as ORMs save a loaded object: `SET tenant_id = <its
// own value>, ... WHERE id = ...`): Plan::key_assignment; then the rows the WHERE
// matches must all be on the value's shard, or the statement fails (Route::key_guard).
// Either way the plan is not shared with texts that differ only in literals (their
// values could differ). Anything else (ON CONFLICT DO UPDATE, UPDATE ... FROM, an
// expression, NULL, a second assignment): refused.
void Analyzer::refuse_key_assignment(PgQuery__Node* const* targets, std::size_t n, int occ,
                                     const PgQuery__Node* where, const PgQuery__UpdateStmt* update) {
  const Occurrence& o = plan_.occs[static_cast<std::size_t>(occ)];
  for (std::size_t i = 0; i < n; ++i) {
    const PgQuery__Node* t = targets[i];
    if (!is(t, PG_QUERY__NODE__NODE_RES_TARGET)) continue;
    std::optional<ValueSource> v =
        t->res_target->n_indirection == 0 ? value_of(t->res_target->val) : std::optional<ValueSource>{};
    if (v && (v->kind == ValueSource::Kind::null || v->is_array)) v.reset();
    if (const std::string* salt = salt_column(occ); salt && *salt == sv(t->res_target->name)) {
      // The salt column: as the key, kept only where the WHERE pins it to the same value.
      if (v && where != nullptr && where_pins(where, *salt, *v)) {
        plan_.cacheable = false;
        continue;
      }
      error("SPR01", "cannot update the salt column \"" + *salt + "\" of table \"" + o.table +
                         "\": the row could move to another partition; delete it and insert it again instead",
            true);
      continue;
    }
    if (o.key_column != sv(t->res_target->name)) continue;
    if (v && where != nullptr && where_pins(where, o.key_column, *v)) {
      plan_.cacheable = false;
      continue;
    }
    if (v && update != nullptr && !plan_.key_assignment) {
      plan_.key_assignment = KeyAssignment{occ, *v, {}};
      plan_.cacheable = false;
      continue;
    }
    refuse_moving_rows(o);
  }
}

void Analyzer::refuse_moving_rows(const Occurrence& o) {
  error("SPR01", "cannot update the distribution key \"" + o.key_column + "\" of table \"" + o.table +
                     "\": the row could move to another shard; delete it and insert it again instead",
        true);
}

// Plan::key_assignment's guarded statement, from the text's own tree (a lone UPDATE).
void Analyzer::guard_key_assignment(const std::string& packed) {
  if (!plan_.key_assignment) return;
  if (std::optional<std::string> sql = guarded_update(packed)) {
    plan_.key_assignment->guarded_sql = std::move(*sql);
    return;
  }
  const Occurrence o = plan_.occs[static_cast<std::size_t>(plan_.key_assignment->occ)];
  plan_.key_assignment.reset();
  refuse_moving_rows(o);
}

bool Analyzer::where_pins(const PgQuery__Node* where, std::string_view key, const ValueSource& value) const {
  if (is(where, PG_QUERY__NODE__NODE_BOOL_EXPR) && where->bool_expr->boolop == PG_QUERY__BOOL_EXPR_TYPE__AND_EXPR) {
    for (std::size_t i = 0; i < where->bool_expr->n_args; ++i)
      if (where_pins(where->bool_expr->args[i], key, value)) return true;
    return false;
  }
  if (!is(where, PG_QUERY__NODE__NODE_A_EXPR) || where->a_expr->kind != PG_QUERY__A__EXPR__KIND__AEXPR_OP ||
      last_name(where->a_expr->name, where->a_expr->n_name) != "=")
    return false;
  const PgQuery__Node* l = where->a_expr->lexpr;
  const PgQuery__Node* r = where->a_expr->rexpr;
  if (!is(l, PG_QUERY__NODE__NODE_COLUMN_REF)) std::swap(l, r);
  if (!is(l, PG_QUERY__NODE__NODE_COLUMN_REF) || l->column_ref->n_fields == 0 ||
      str_of(l->column_ref->fields[l->column_ref->n_fields - 1]) != key)
    return false;
  std::optional<ValueSource> w = value_of(r);
  return w && w->kind == value.kind && w->index == value.index && w->text == value.text;
}

void Analyzer::update(const PgQuery__UpdateStmt* s, Scope& scope, bool alone) {
  if (s->with_clause != nullptr) with(s->with_clause, scope);
  std::size_t before = plan_.write_targets.size();
  write_target(s->relation, scope);
  if (plan_.write_targets.size() > before)
    refuse_key_assignment(s->target_list, s->n_target_list, plan_.write_targets.back(),
                          s->n_from_clause == 0 ? s->where_clause : nullptr,
                          alone && s->n_from_clause == 0 ? s : nullptr);
  for (std::size_t i = 0; i < s->n_from_clause; ++i) from_item(s->from_clause[i], scope);
  scan(s->target_list, s->n_target_list, scope);
  scan(s->where_clause, scope);
  scan(s->returning_list, s->n_returning_list, scope);
  where(s->where_clause, scope, EdgeRule::both);
}

void Analyzer::remove(const PgQuery__DeleteStmt* s, Scope& scope) {
  if (s->with_clause != nullptr) with(s->with_clause, scope);
  write_target(s->relation, scope);
  for (std::size_t i = 0; i < s->n_using_clause; ++i) from_item(s->using_clause[i], scope);
  scan(s->where_clause, scope);
  scan(s->returning_list, s->n_returning_list, scope);
  where(s->where_clause, scope, EdgeRule::both);
}

void Analyzer::insert(const PgQuery__InsertStmt* s, Scope& scope, bool alone) {
  if (s->with_clause != nullptr) with(s->with_clause, scope);
  const PgQuery__RangeVar* rv = s->relation;
  TableClass c = topo_.classify(sv(rv->schemaname), rv->relname);
  int occ = -1;
  if (c.kind == TableClass::Kind::sharded) {
    occ = add_occurrence(Topology::table_name(sv(rv->schemaname), rv->relname), c);
    scope.rels.push_back(Rel{alias_or(rv->alias, rv->relname), {{c.key_column, occ}}, occ});
    plan_.insert_targets.push_back(occ);
  } else if (c.kind == TableClass::Kind::reference || c.kind == TableClass::Kind::catalog) {
    reference_target_ = true;
    plan_.writes_reference = true;
  }
  const std::string what = "INSERT into sharded table \"" + (occ >= 0 ? plan_.occs[occ].table : "") + "\"";
  if (is_plain_values(s->select_stmt)) {
    const PgQuery__SelectStmt* values = s->select_stmt->select_stmt;
    scan(values->values_lists, values->n_values_lists, scope);
    if (occ >= 0) insert_values(s, values, occ, alone);
  } else if (s->select_stmt != nullptr) {
    Scope child{scope.parent, {}, {}};
    dml(s->select_stmt, child, false, nullptr);
    if (occ >= 0) insert_select(s, child, occ, alone, what);
  } else if (occ >= 0) {
    // DEFAULT VALUES: one row, its key generated from the column's default (SPEC §3).
    InsertRows rows;
    rows.occ = occ;
    rows.splittable = alone;
    rows.key_omitted = true;
    rows.rows.emplace_back();
    plan_.inserts.push_back(std::move(rows));
  }
  if (s->on_conflict_clause != nullptr) {
    const PgQuery__OnConflictClause* oc = s->on_conflict_clause;
    if (occ >= 0) refuse_key_assignment(oc->target_list, oc->n_target_list, occ);
    scan(oc->target_list, oc->n_target_list, scope);
    scan(oc->where_clause, scope);
  }
  scan(s->returning_list, s->n_returning_list, scope);
}

// INSERT ... SELECT into a sharded table. Where each row's key is a co-located
// table's key, passed through unchanged, every shard inserts the rows it holds (the
// statement runs where those rows are). Otherwise the proxy reads the rows and
// inserts them itself (Route::pull_insert, server/session/execute/insert_select.cpp).
void Analyzer::insert_select(const PgQuery__InsertStmt* s, const Scope& child, int occ, bool alone,
                             const std::string& what) {
  const int source = alone ? pushdown_source(s, child, occ) : -1;
  if (source >= 0) {
    plan_.edges.push_back(KeyEdge{source, occ});
    plan_.edges.push_back(KeyEdge{occ, source});
    plan_.insert_select.emplace().occ = occ;
    for (std::size_t i = 0; i < s->n_cols; ++i)
      if (is(s->cols[i], PG_QUERY__NODE__NODE_RES_TARGET))
        plan_.insert_select->columns.emplace_back(sv(s->cols[i]->res_target->name));
    return;
  }
  const bool pull = alone && s->with_clause == nullptr;
  error("SPR01",
        what + (pull ? ": the rows of its SELECT could not be read"
                     : ": INSERT ... SELECT must be a statement of its own, without WITH"),
        true);
  fixed_routes_.back().pull_insert = pull;
}

// The occurrence whose key fills the target's key column, when each target row stays
// in its source row's partition: the SELECT item at the key's place in the column
// list is that key itself, and no clause combines rows of several partitions (LIMIT,
// DISTINCT, window functions, set operations, aggregates not grouped by that key).
// -1: the rows must be pulled.
int Analyzer::pushdown_source(const PgQuery__InsertStmt* s, const Scope& child, int occ) const {
  const PgQuery__SelectStmt* q = is(s->select_stmt, PG_QUERY__NODE__NODE_SELECT_STMT) ? s->select_stmt->select_stmt : nullptr;
  if (q == nullptr || q->larg != nullptr || q->rarg != nullptr || q->n_values_lists > 0 || q->with_clause != nullptr ||
      q->limit_count != nullptr || q->limit_offset != nullptr || q->n_distinct_clause > 0 || q->n_window_clause > 0)
    return -1;
  const std::string& key = plan_.occs[static_cast<std::size_t>(occ)].key_column;
  std::optional<std::size_t> position;
  for (std::size_t i = 0; i < s->n_cols; ++i)
    if (is(s->cols[i], PG_QUERY__NODE__NODE_RES_TARGET) && sv(s->cols[i]->res_target->name) == key) position = i;
  if (!position || *position >= q->n_target_list) return -1;
  bool aggregated = q->n_group_clause > 0 || q->having_clause != nullptr;
  for (std::size_t i = 0; i < q->n_target_list; ++i) {
    if (!is(q->target_list[i], PG_QUERY__NODE__NODE_RES_TARGET)) return -1;
    const PgQuery__ResTarget* t = q->target_list[i]->res_target;
    if (merge_tree::is_star(t) || merge_tree::contains_window_function(t->val)) return -1;
    aggregated = aggregated || merge_tree::contains_aggregate(t->val);
  }
  const Resolved r = resolve(q->target_list[*position]->res_target->val, child);
  if (r.occ < 0 || r.depth != 0 ||
      plan_.occs[static_cast<std::size_t>(r.occ)].distribution != plan_.occs[static_cast<std::size_t>(occ)].distribution)
    return -1;
  if (!aggregated) return r.occ;
  for (std::size_t i = 0; i < q->n_group_clause; ++i) {  // grouped by that key: a group is one partition's
    const Resolved g = resolve(q->group_clause[i], child);
    if (g.occ == r.occ && g.depth == 0) return r.occ;
  }
  return -1;
}

// The sequence of `nextval('name')` (the name a string literal, maybe cast); nullopt for
// anything else.
static std::optional<std::string> nextval_sequence(const PgQuery__Node* n) {
  if (!is(n, PG_QUERY__NODE__NODE_FUNC_CALL) || n->func_call->n_args != 1 ||
      last_name(n->func_call->funcname, n->func_call->n_funcname) != "nextval")
    return std::nullopt;
  const PgQuery__Node* arg = n->func_call->args[0];
  if (is(arg, PG_QUERY__NODE__NODE_TYPE_CAST)) arg = arg->type_cast->arg;
  if (!is(arg, PG_QUERY__NODE__NODE_A_CONST) || arg->a_const->val_case != PG_QUERY__A__CONST__VAL_SVAL)
    return std::nullopt;
  return std::string(sv(arg->a_const->sval->sval));
}

void Analyzer::insert_values(const PgQuery__InsertStmt* s, const PgQuery__SelectStmt* values, int occ, bool alone) {
  InsertRows rows;
  rows.occ = occ;
  rows.splittable = alone;
  const std::string& key = plan_.occs[static_cast<std::size_t>(occ)].key_column;
  for (std::size_t i = 0; i < s->n_cols; ++i) {
    const char* name = is(s->cols[i], PG_QUERY__NODE__NODE_RES_TARGET) ? s->cols[i]->res_target->name : nullptr;
    rows.columns.emplace_back(sv(name));
    if (rows.columns.back() == key) rows.key_index = i;
  }
  rows.key_omitted = !rows.columns.empty() && !rows.key_index;
  const std::string* salt = salt_column(occ);
  rows.rows.reserve(values->n_values_lists);
  for (std::size_t r = 0; r < values->n_values_lists; ++r) {
    const PgQuery__Node* row = values->values_lists[r];
    std::vector<std::optional<ValueSource>> items;
    if (is(row, PG_QUERY__NODE__NODE_LIST)) {
      for (std::size_t k = 0; k < row->list->n_items; ++k) {
        if (is(row->list->items[k], PG_QUERY__NODE__NODE_SET_TO_DEFAULT)) rows.defaults.emplace_back(r, k);
        if (auto seq = nextval_sequence(row->list->items[k])) rows.nextvals.push_back({r, k, std::move(*seq)});
        // Only the key item's value matters when its position is known (and a salted
        // distribution's salt column's).
        if (rows.key_index && k != *rows.key_index &&
            (salt == nullptr || k >= rows.columns.size() || rows.columns[k] != *salt)) {
          items.emplace_back();
          continue;
        }
        items.push_back(value_of(row->list->items[k]));  // nullopt for DEFAULT and expressions
      }
    }
    rows.rows.push_back(std::move(items));
  }
  plan_.inserts.push_back(std::move(rows));
}

void Analyzer::where(const PgQuery__Node* cond, Scope& scope, EdgeRule rule) {
  if (cond == nullptr) return;
  KeyCond k = cond_of(cond, scope);
  if (k.op != KeyCond::Op::all) plan_.conds.push_back(std::move(k));
  edges_of(cond, scope, rule, 0);
}

void Analyzer::scan(PgQuery__Node* const* items, std::size_t n, Scope& scope) {
  for (std::size_t i = 0; i < n; ++i) scan(items[i], scope);
}

// Finds the sub-queries of an expression and analyses each in its own scope.
void Analyzer::scan(const PgQuery__Node* n, Scope& scope) {
  if (n == nullptr) return;
  if (is(n, PG_QUERY__NODE__NODE_SUB_LINK)) return sublink(n->sub_link, scope);
  walk_nodes(&n->base, [&](const PgQuery__Node* child) {
    if (!is(child, PG_QUERY__NODE__NODE_SUB_LINK)) return true;
    sublink(child->sub_link, scope);
    return false;
  });
}

void Analyzer::sublink(const PgQuery__SubLink* s, Scope& scope) {
  scan(s->testexpr, scope);
  if (s->subselect == nullptr) return;
  Scope child{&scope, {}, {}};
  dml(s->subselect, child, false, nullptr);
  // `x IN (SELECT key FROM ...)`: remember which key the sub-query returns.
  if (s->sub_link_type != PG_QUERY__SUB_LINK_TYPE__ANY_SUBLINK || !is(s->subselect, PG_QUERY__NODE__NODE_SELECT_STMT))
    return;
  const PgQuery__SelectStmt* q = s->subselect->select_stmt;
  if (q->larg != nullptr || q->n_target_list != 1 || !is(q->target_list[0], PG_QUERY__NODE__NODE_RES_TARGET) ||
      q->limit_count != nullptr || q->limit_offset != nullptr)
    return;
  Resolved r = resolve(q->target_list[0]->res_target->val, child);
  if (r.occ >= 0 && r.depth == 0) sublink_key_[s] = r.occ;
}

}  // namespace splitpoint::routing
