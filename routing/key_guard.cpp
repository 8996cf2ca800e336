#include "routing/key_guard.hpp"

#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

std::optional<std::string> guarded_update(const std::string& packed) {
  auto tree = unpack_tree(packed);
  if (!tree || tree->n_stmts != 1 || !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_UPDATE_STMT)) return std::nullopt;
  PgQuery__UpdateStmt* update = tree->stmts[0]->stmt->update_stmt;
  PgQuery__Node* const where = update->where_clause;
  if (is(where, PG_QUERY__NODE__NODE_CURRENT_OF_EXPR)) return std::nullopt;
  // The condition comes from PostgreSQL's own parser; the statement's WHERE is put in
  // the places of its two `true`s, and taken out again before either tree is freed.
  const std::string guard = "SELECT WHERE true AND CASE WHEN true THEN (pg_catalog.textcat('" +
                            std::string(kKeyGuardMarker) +
                            " ', ctid::pg_catalog.text))::pg_catalog.int4 IS NULL ELSE false END";
  ParseTree parsed = ParseTree::parse(guard);
  if (!parsed.ok()) return std::nullopt;
  PgQuery__Node* both = parsed.tree()->stmts[0]->stmt->select_stmt->where_clause;
  if (!is(both, PG_QUERY__NODE__NODE_BOOL_EXPR) || both->bool_expr->n_args != 2 ||
      !is(both->bool_expr->args[1], PG_QUERY__NODE__NODE_CASE_EXPR))
    return std::nullopt;
  PgQuery__CaseExpr* c = both->bool_expr->args[1]->case_expr;
  if (c->n_args != 1 || !is(c->args[0], PG_QUERY__NODE__NODE_CASE_WHEN)) return std::nullopt;
  PgQuery__CaseWhen* when = c->args[0]->case_when;
  PgQuery__Node* const placeholder[2] = {both->bool_expr->args[0], when->expr};
  // No WHERE: every row is matched, and the CASE alone is the condition.
  if (where != nullptr) {
    both->bool_expr->args[0] = where;
    when->expr = where;
    update->where_clause = both;
  } else {
    update->where_clause = both->bool_expr->args[1];
  }
  std::optional<std::string> out = deparse(tree.get());
  update->where_clause = where;
  both->bool_expr->args[0] = placeholder[0];
  when->expr = placeholder[1];
  return out;
}

}  // namespace splitpoint::routing
