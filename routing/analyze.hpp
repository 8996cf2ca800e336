// Statement analysis: walks PostgreSQL's parse tree of a statement and records in a
// Plan what routing needs (routing/plan.hpp). Internal to routing/.
//  analyze_stmt.cpp   statement kinds: DDL, SET/SHOW, transactions, EXPLAIN, ...
//  analyze_query.cpp  SELECT/INSERT/UPDATE/DELETE: scopes, FROM items, sub-queries
//  analyze_expr.cpp   WHERE/ON conditions on keys, joins on keys, literal values
#pragma once

#include <pg_query/pg_query.pb-c.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "routing/plan.hpp"
#include "routing/topology.hpp"

namespace splitpoint::routing {

// Analyses `sql` (which may hold several statements) into a plan. Never null.
std::shared_ptr<Plan> analyze(std::string_view sql, std::span<const std::int32_t> param_types, const Topology& topo,
                              bool standard_strings = true);

class Analyzer {
 public:
  Analyzer(const Topology& topo, Plan& plan) : topo_(topo), plan_(plan) {}

  void statement(const PgQuery__Node* stmt, bool alone);
  // Before finish(): the guarded UPDATE of Plan::key_assignment, or a refusal.
  void guard_key_assignment(const std::string& packed);
  void finish(std::size_t statement_count);
  // A DECLARE CURSOR alone in its text: its name, options and query (Route::cursor).
  std::shared_ptr<const Route::Names> declared_cursor() const { return cursor_; }

 private:
  using KeyCols = std::vector<std::pair<std::string, int>>;  // column name -> occurrence
  struct Rel {
    std::string name;  // alias, or the table's own name
    KeyCols key_cols;
    int table_occ = -1;  // the occurrence this relation is (a sharded table itself, not a CTE or sub-query)
  };
  struct Cte {
    std::string name;
    KeyCols key_cols;  // empty when referenced more than once (see select())
  };
  struct Scope {
    const Scope* parent = nullptr;
    std::vector<Rel> rels;
    std::vector<Cte> ctes;
  };
  struct Resolved {
    int occ = -1;   // the occurrence whose key the column is, or -1
    int depth = 0;  // 0: a relation of this scope; >0: of an enclosing query
    int rel = -1;   // index in that scope's rels
  };
  // Which key equalities of a condition say something about which rows matter.
  enum class EdgeRule : std::uint8_t { both, left_to_right, right_to_left, none };

  // --- statements (analyze_stmt.cpp)
  void keyed(const PgQuery__Node* stmt, bool alone);
  void fixed(Route route);
  void finish_with(const Route& route);
  void error(std::string sqlstate, std::string message, bool overridable);
  void ddl(const PgQuery__Node* stmt);
  Route lock_route(const PgQuery__LockStmt* s) const;
  void variable_set(const PgQuery__VariableSetStmt* s);
  void variable_show(const PgQuery__VariableShowStmt* s);
  void transaction(const PgQuery__TransactionStmt* s);
  void copy(const PgQuery__CopyStmt* s);
  void safety_net(const PgQuery__Node* stmt, std::size_t first_occ);

  // --- queries (analyze_query.cpp)
  void dml(const PgQuery__Node* stmt, Scope& scope, bool alone, KeyCols* exposed);
  void select(const PgQuery__SelectStmt* s, Scope& scope, KeyCols* exposed);
  // Plan::lookup of a top-level SELECT of one table with a global index.
  void index_lookup(const PgQuery__Node* where, const Scope& scope);
  void with(const PgQuery__WithClause* w, Scope& scope);
  void from_item(const PgQuery__Node* n, Scope& scope);
  void join(const PgQuery__JoinExpr* j, Scope& scope);
  void table(const PgQuery__RangeVar* rv, Scope& scope, int* occ_out);
  void insert(const PgQuery__InsertStmt* s, Scope& scope, bool alone);
  void insert_values(const PgQuery__InsertStmt* s, const PgQuery__SelectStmt* values, int occ, bool alone);
  void insert_select(const PgQuery__InsertStmt* s, const Scope& child, int occ, bool alone, const std::string& what);
  int pushdown_source(const PgQuery__InsertStmt* s, const Scope& child, int occ) const;
  void update(const PgQuery__UpdateStmt* s, Scope& scope, bool alone);
  void remove(const PgQuery__DeleteStmt* s, Scope& scope);
  void write_target(const PgQuery__RangeVar* rv, Scope& scope);
  void refuse_key_assignment(PgQuery__Node* const* targets, std::size_t n, int occ,
                             const PgQuery__Node* where = nullptr, const PgQuery__UpdateStmt* update = nullptr);
  void refuse_moving_rows(const Occurrence& o);
  // The salt column of an occurrence's salted distribution, or null.
  const std::string* salt_column(int occ) const;
  // A column that is a salted occurrence's salt column, in this query level's relations.
  int resolve_salt(const PgQuery__Node* column, const Scope& scope) const;
  bool where_pins(const PgQuery__Node* where, std::string_view key, const ValueSource& value) const;
  void where(const PgQuery__Node* cond, Scope& scope, EdgeRule rule);
  void scan(const PgQuery__Node* n, Scope& scope);
  void scan(PgQuery__Node* const* items, std::size_t n, Scope& scope);
  void sublink(const PgQuery__SubLink* s, Scope& scope);
  int add_occurrence(const std::string& table, const TableClass& c);

  // --- conditions (analyze_expr.cpp)
  KeyCond cond_of(const PgQuery__Node* n, const Scope& scope) const;
  KeyCond compare(const PgQuery__AExpr* e, const Scope& scope) const;
  KeyCond leaf_in(const PgQuery__Node* column, std::vector<ValueSource> values, bool null_matches,
                  const Scope& scope) const;
  KeyCond leaf_range(const PgQuery__Node* column, std::string_view op, const PgQuery__Node* value,
                     const Scope& scope) const;
  void edges_of(const PgQuery__Node* n, const Scope& scope, EdgeRule rule, std::size_t left_end);
  void edge(const Resolved& a, const Resolved& b, EdgeRule rule, std::size_t left_end);
  Resolved resolve(const PgQuery__Node* n, const Scope& scope) const;
  std::optional<ValueSource> value_of(const PgQuery__Node* n) const;
  std::optional<std::vector<ValueSource>> array_of(const PgQuery__Node* n) const;

  const Topology& topo_;
  Plan& plan_;
  std::shared_ptr<const Route::Names> cursor_;
  std::vector<Route> fixed_routes_;  // one per statement that routes whatever its values
  bool keyed_ = false;
  bool writes_ = false;
  bool reference_target_ = false;  // the current statement writes a reference table
  std::unordered_map<std::string, int> relname_refs_;  // unqualified FROM name -> uses in the statement
  std::unordered_map<std::string, int> cte_names_;     // names the statement gives CTEs
  std::unordered_map<const PgQuery__SubLink*, int> sublink_key_;  // `IN (SELECT key ...)` -> occurrence
};

}  // namespace splitpoint::routing
