#include "routing/insert_split.hpp"

#include <algorithm>

#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

// The VALUES list of the statement's INSERT (also under EXPLAIN).
PgQuery__SelectStmt* values_of(PgQuery__ParseResult* tree) {
  if (tree == nullptr || tree->n_stmts != 1 || tree->stmts[0]->stmt == nullptr) return nullptr;
  PgQuery__Node* stmt = tree->stmts[0]->stmt;
  if (is(stmt, PG_QUERY__NODE__NODE_EXPLAIN_STMT)) stmt = stmt->explain_stmt->query;
  if (!is(stmt, PG_QUERY__NODE__NODE_INSERT_STMT)) return nullptr;
  PgQuery__Node* sel = stmt->insert_stmt->select_stmt;
  return is(sel, PG_QUERY__NODE__NODE_SELECT_STMT) ? sel->select_stmt : nullptr;
}

}  // namespace

std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert(
    const std::string& packed, const std::vector<std::size_t>& row_shards) {
  auto tree = unpack_tree(packed);
  PgQuery__SelectStmt* values = values_of(tree.get());
  if (values == nullptr || values->n_values_lists != row_shards.size()) return std::nullopt;
  std::vector<std::size_t> shards = row_shards;
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  // The rows are swapped in and out of the tree; the original array is put back
  // before the tree is freed, so each row is freed once.
  PgQuery__Node** all = values->values_lists;
  const std::size_t n = values->n_values_lists;
  std::vector<std::pair<std::size_t, std::string>> out;
  std::vector<PgQuery__Node*> subset;
  bool ok = true;
  for (std::size_t shard : shards) {
    subset.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (row_shards[i] == shard) subset.push_back(all[i]);
    values->values_lists = subset.data();
    values->n_values_lists = subset.size();
    std::optional<std::string> sql = deparse(tree.get());
    if (!sql) {
      ok = false;
      break;
    }
    out.emplace_back(shard, std::move(*sql));
  }
  values->values_lists = all;
  values->n_values_lists = n;
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace splitpoint::routing
