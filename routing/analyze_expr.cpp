// Conditions on distribution keys (SPEC §3): `key = v`, `key IN (...)`, `key = ANY(...)`,
// ranges, IS NULL, combined with AND/OR; equalities between keys (joins); literal
// and parameter values.
#include "routing/analyze.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

KeyCond all() { return KeyCond{}; }

bool is_column(const PgQuery__Node* n) { return is(n, PG_QUERY__NODE__NODE_COLUMN_REF); }

// `5 < key` is `key > 5`.
std::string_view flipped(std::string_view op) {
  if (op == "<") return ">";
  if (op == "<=") return ">=";
  if (op == ">") return "<";
  if (op == ">=") return "<=";
  return op;
}

}  // namespace

KeyCond Analyzer::cond_of(const PgQuery__Node* n, const Scope& scope) const {
  if (n == nullptr) return all();
  if (is(n, PG_QUERY__NODE__NODE_BOOL_EXPR)) {
    const PgQuery__BoolExpr* b = n->bool_expr;
    bool is_and = b->boolop == PG_QUERY__BOOL_EXPR_TYPE__AND_EXPR;
    if (!is_and && b->boolop != PG_QUERY__BOOL_EXPR_TYPE__OR_EXPR) return all();  // NOT: no key set
    KeyCond out;
    out.op = is_and ? KeyCond::Op::and_ : KeyCond::Op::or_;
    for (std::size_t i = 0; i < b->n_args; ++i) {
      KeyCond k = cond_of(b->args[i], scope);
      if (k.op == KeyCond::Op::all) {
        if (!is_and) return all();  // one unconstrained arm: any row may match
        continue;                   // AND with something else: the constrained side
      }
      out.kids.push_back(std::move(k));
    }
    if (out.kids.empty()) return all();
    if (out.kids.size() == 1) return std::move(out.kids.front());
    return out;
  }
  if (is(n, PG_QUERY__NODE__NODE_A_EXPR)) return compare(n->a_expr, scope);
  if (is(n, PG_QUERY__NODE__NODE_NULL_TEST) && n->null_test->nulltesttype == PG_QUERY__NULL_TEST_TYPE__IS_NULL) {
    ValueSource null;
    return leaf_in(n->null_test->arg, {null}, true, scope);
  }
  return all();
}

KeyCond Analyzer::compare(const PgQuery__AExpr* e, const Scope& scope) const {
  std::string_view op = last_name(e->name, e->n_name);
  const PgQuery__Node* l = e->lexpr;
  const PgQuery__Node* r = e->rexpr;
  switch (e->kind) {
    case PG_QUERY__A__EXPR__KIND__AEXPR_OP:
    case PG_QUERY__A__EXPR__KIND__AEXPR_NOT_DISTINCT: {
      bool not_distinct = e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_NOT_DISTINCT;
      if (op == "=" || not_distinct) {
        if (is_column(r) && !is_column(l)) std::swap(l, r);
        std::optional<ValueSource> v = value_of(r);
        if (!is_column(l) || !v) return all();
        return leaf_in(l, {std::move(*v)}, not_distinct, scope);
      }
      if (op == "<" || op == "<=" || op == ">" || op == ">=") {
        if (is_column(l)) return leaf_range(l, op, r, scope);
        if (is_column(r)) return leaf_range(r, flipped(op), l, scope);
      }
      return all();
    }
    case PG_QUERY__A__EXPR__KIND__AEXPR_IN: {
      if (op != "=" || !is_column(l) || !is(r, PG_QUERY__NODE__NODE_LIST)) return all();  // NOT IN: "<>"
      std::vector<ValueSource> values;
      for (std::size_t i = 0; i < r->list->n_items; ++i) {
        std::optional<ValueSource> v = value_of(r->list->items[i]);
        if (!v) return all();
        values.push_back(std::move(*v));
      }
      return leaf_in(l, std::move(values), false, scope);
    }
    case PG_QUERY__A__EXPR__KIND__AEXPR_OP_ANY: {
      if (op != "=" || !is_column(l)) return all();
      std::optional<std::vector<ValueSource>> values = array_of(r);
      if (!values) return all();
      return leaf_in(l, std::move(*values), false, scope);
    }
    case PG_QUERY__A__EXPR__KIND__AEXPR_BETWEEN: {
      if (!is_column(l) || !is(r, PG_QUERY__NODE__NODE_LIST) || r->list->n_items != 2) return all();
      KeyCond k = leaf_range(l, ">=", r->list->items[0], scope);
      KeyCond upper = leaf_range(l, "<=", r->list->items[1], scope);
      if (k.op != KeyCond::Op::range || upper.op != KeyCond::Op::range) return all();
      k.upper = std::move(upper.upper);
      return k;
    }
    default:
      return all();  // NOT BETWEEN, BETWEEN SYMMETRIC, LIKE, ALL, ...
  }
}

KeyCond Analyzer::leaf_in(const PgQuery__Node* column, std::vector<ValueSource> values, bool null_matches,
                          const Scope& scope) const {
  Resolved c = resolve(column, scope);
  // A condition on an enclosing query's key, inside a sub-query, does not say which
  // of the enclosing query's rows matter (NOT EXISTS ...).
  const int salt_occ = c.occ < 0 ? resolve_salt(column, scope) : -1;
  if ((c.occ < 0 && salt_occ < 0) || c.depth != 0) return all();
  KeyCond k;
  k.op = KeyCond::Op::in;
  k.occ = c.occ >= 0 ? c.occ : salt_occ;
  k.salt = c.occ < 0;
  k.values = std::move(values);
  k.null_matches = null_matches;
  return k;
}

KeyCond Analyzer::leaf_range(const PgQuery__Node* column, std::string_view op, const PgQuery__Node* value,
                             const Scope& scope) const {
  Resolved c = resolve(column, scope);
  std::optional<ValueSource> v = value_of(value);
  if (c.occ < 0 || c.depth != 0 || !v || v->kind == ValueSource::Kind::null) return all();
  KeyCond k;
  k.op = KeyCond::Op::range;
  k.occ = c.occ;
  if (op[0] == '>') {
    k.lower = std::move(v);
    k.lower_inclusive = op == ">=";
  } else {
    k.upper = std::move(v);
    k.upper_inclusive = op == "<=";
  }
  return k;
}

// Equalities between keys among the top-level AND terms of a condition.
void Analyzer::edges_of(const PgQuery__Node* n, const Scope& scope, EdgeRule rule, std::size_t left_end) {
  if (n == nullptr || rule == EdgeRule::none) return;
  if (is(n, PG_QUERY__NODE__NODE_BOOL_EXPR)) {
    if (n->bool_expr->boolop != PG_QUERY__BOOL_EXPR_TYPE__AND_EXPR) return;
    for (std::size_t i = 0; i < n->bool_expr->n_args; ++i) edges_of(n->bool_expr->args[i], scope, rule, left_end);
    return;
  }
  if (is(n, PG_QUERY__NODE__NODE_A_EXPR)) {
    const PgQuery__AExpr* e = n->a_expr;
    bool eq = e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_OP || e->kind == PG_QUERY__A__EXPR__KIND__AEXPR_NOT_DISTINCT;
    if (!eq || last_name(e->name, e->n_name) != "=" || !is_column(e->lexpr) || !is_column(e->rexpr)) return;
    edge(resolve(e->lexpr, scope), resolve(e->rexpr, scope), rule, left_end);
    return;
  }
  // `key IN (SELECT key FROM ...)`: a semi-join on the key, both ways.
  if (is(n, PG_QUERY__NODE__NODE_SUB_LINK) && rule == EdgeRule::both) {
    auto it = sublink_key_.find(n->sub_link);
    if (it == sublink_key_.end() || !is_column(n->sub_link->testexpr)) return;
    Resolved outer = resolve(n->sub_link->testexpr, scope);
    if (outer.depth != 0) return;
    edge(outer, Resolved{it->second, 0, -1}, rule, left_end);
  }
}

void Analyzer::edge(const Resolved& a, const Resolved& b, EdgeRule rule, std::size_t left_end) {
  if (a.occ < 0 || b.occ < 0 || a.occ == b.occ) return;
  // Only keys of one distribution are co-located by value, and not those of a salted
  // one: rows with one key are in as many partitions as it has buckets.
  if (plan_.occs[a.occ].distribution != plan_.occs[b.occ].distribution || salt_column(a.occ) != nullptr) return;
  // 0: an enclosing query's relation; 1: the left side of the join; 2: the right side
  // (or, outside joins, any relation of this query).
  auto side = [&](const Resolved& r) {
    if (r.depth != 0) return 0;
    return (r.rel >= 0 && static_cast<std::size_t>(r.rel) < left_end) ? 1 : 2;
  };
  // Whether matching `from` on the key filters which rows of `to` matter.
  auto filters = [&](const Resolved& from, const Resolved& to) {
    int f = side(from), t = side(to);
    switch (rule) {
      case EdgeRule::both: return t != 0;
      case EdgeRule::left_to_right: return t == 2 && f != 2;
      case EdgeRule::right_to_left: return t == 1 && f != 1;
      case EdgeRule::none: return false;
    }
    return false;
  };
  if (filters(a, b)) plan_.edges.push_back(KeyEdge{a.occ, b.occ});
  if (filters(b, a)) plan_.edges.push_back(KeyEdge{b.occ, a.occ});
}

Analyzer::Resolved Analyzer::resolve(const PgQuery__Node* n, const Scope& scope) const {
  if (!is_column(n)) return {};
  const PgQuery__ColumnRef* c = n->column_ref;
  if (c->n_fields == 0) return {};
  std::string_view col = str_of(c->fields[c->n_fields - 1]);
  if (col.empty()) return {};
  if (c->n_fields == 1) {
    // Unqualified: only this query level. PostgreSQL would look outwards only if no
    // relation here has the column, which cannot be known without every shape.
    Resolved found;
    for (std::size_t r = 0; r < scope.rels.size(); ++r)
      for (const auto& [name, occ] : scope.rels[r].key_cols)
        if (name == col) {
          if (found.occ >= 0 && found.occ != occ) return {};  // ambiguous
          found = Resolved{occ, 0, static_cast<int>(r)};
        }
    return found;
  }
  std::string_view rel = str_of(c->fields[c->n_fields - 2]);
  int depth = 0;
  for (const Scope* s = &scope; s != nullptr; s = s->parent, ++depth) {
    for (std::size_t r = s->rels.size(); r-- > 0;) {
      if (s->rels[r].name != rel) continue;
      for (const auto& [name, occ] : s->rels[r].key_cols)
        if (name == col) return Resolved{occ, depth, static_cast<int>(r)};
      return Resolved{-1, depth, static_cast<int>(r)};
    }
  }
  return {};
}

const std::string* Analyzer::salt_column(int occ) const {
  if (occ < 0) return nullptr;
  const auto& salt = topo_.config().distributions[plan_.occs[static_cast<std::size_t>(occ)].distribution].salt;
  return salt ? &salt->column : nullptr;
}

int Analyzer::resolve_salt(const PgQuery__Node* n, const Scope& scope) const {
  if (!is_column(n) || n->column_ref->n_fields == 0 || n->column_ref->n_fields > 2) return -1;
  const PgQuery__ColumnRef* c = n->column_ref;
  std::string_view col = str_of(c->fields[c->n_fields - 1]);
  std::string_view rel = c->n_fields == 2 ? str_of(c->fields[0]) : std::string_view{};
  int found = -1;
  for (std::size_t r = scope.rels.size(); r-- > 0;) {
    const Rel& x = scope.rels[r];
    if (c->n_fields == 2 && x.name != rel) continue;
    const std::string* salt = salt_column(x.table_occ);
    if (salt != nullptr && *salt == col) {
      if (found >= 0 && found != x.table_occ) return -1;  // ambiguous
      found = x.table_occ;
    }
    if (c->n_fields == 2) break;  // the innermost relation of that name
  }
  return found;
}

std::optional<ValueSource> Analyzer::value_of(const PgQuery__Node* n) const {
  if (is(n, PG_QUERY__NODE__NODE_TYPE_CAST)) {
    const PgQuery__TypeName* t = n->type_cast->type_name;
    if (t != nullptr && t->n_array_bounds > 0) return std::nullopt;
    return value_of(n->type_cast->arg);
  }
  if (is(n, PG_QUERY__NODE__NODE_PARAM_REF)) {
    ValueSource v;
    v.kind = ValueSource::Kind::param;
    v.index = n->param_ref->number - 1;
    return v;
  }
  if (!is(n, PG_QUERY__NODE__NODE_A_CONST)) return std::nullopt;
  const PgQuery__AConst* c = n->a_const;
  ValueSource v;
  v.location = c->location;
  if (c->isnull) return v;  // Kind::null
  v.kind = ValueSource::Kind::constant;
  switch (c->val_case) {
    case PG_QUERY__A__CONST__VAL_IVAL: v.text = std::to_string(c->ival->ival); break;
    case PG_QUERY__A__CONST__VAL_FVAL: v.text = c->fval->fval; break;
    case PG_QUERY__A__CONST__VAL_SVAL: v.text = c->sval->sval; break;
    case PG_QUERY__A__CONST__VAL_BOOLVAL: v.text = c->boolval->boolval ? "true" : "false"; break;
    default: return std::nullopt;  // bit strings
  }
  return v;
}

std::optional<std::vector<ValueSource>> Analyzer::array_of(const PgQuery__Node* n) const {
  if (is(n, PG_QUERY__NODE__NODE_TYPE_CAST)) return array_of(n->type_cast->arg);
  if (is(n, PG_QUERY__NODE__NODE_A_ARRAY_EXPR)) {  // ARRAY[1, 2] (nested ones flatten)
    std::vector<ValueSource> out;
    for (std::size_t i = 0; i < n->a_array_expr->n_elements; ++i) {
      const PgQuery__Node* e = n->a_array_expr->elements[i];
      if (is(e, PG_QUERY__NODE__NODE_A_ARRAY_EXPR)) {
        auto inner = array_of(e);
        if (!inner) return std::nullopt;
        out.insert(out.end(), inner->begin(), inner->end());
        continue;
      }
      std::optional<ValueSource> v = value_of(e);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
    }
    return out;
  }
  std::optional<ValueSource> v = value_of(n);  // '{1,2}' or $1: an array value
  if (!v || v->kind == ValueSource::Kind::null) return std::nullopt;
  v->is_array = true;
  return std::vector<ValueSource>{std::move(*v)};
}

}  // namespace splitpoint::routing
