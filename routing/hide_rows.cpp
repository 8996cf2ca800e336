#include "routing/hide_rows.hpp"

#include <cstdlib>

#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"
#include "routing/topology.hpp"

namespace splitpoint::routing {

namespace {

using Views = std::map<std::string, std::string, std::less<>>;

// (A table of another schema, as the config names it "schema.table": its view has the
// table's own name in the move's schema.)
const std::string* view_schema(const PgQuery__RangeVar* rv, const Views& views) {
  auto it = views.find(Topology::table_name(sv(rv->schemaname), sv(rv->relname)));
  return it == views.end() ? nullptr : &it->second;
}

// COPY t [(cols)] TO ...: a view cannot be copied from, a query over it can.
bool copy_from_view(PgQuery__CopyStmt* copy, const std::string& schema, bool standard_strings) {
  std::string select = "SELECT ";
  if (copy->n_attlist == 0) select += "*";
  for (std::size_t i = 0; i < copy->n_attlist; ++i)
    select += (i ? ", " : "") + std::string("\"") + std::string(str_of(copy->attlist[i])) + "\"";
  select += " FROM \"" + schema + "\".\"" + std::string(sv(copy->relation->relname)) + "\"";
  auto parsed = ParseTree::parse(select, standard_strings);
  if (!parsed.ok()) return false;
  auto query = unpack_tree(parsed.packed());
  if (!query || query->n_stmts != 1) return false;
  copy->query = query->stmts[0]->stmt;
  query->stmts[0]->stmt = nullptr;  // now owned by `copy`
  protobuf_c_message_free_unpacked(&copy->relation->base, nullptr);
  copy->relation = nullptr;
  for (std::size_t i = 0; i < copy->n_attlist; ++i) protobuf_c_message_free_unpacked(&copy->attlist[i]->base, nullptr);
  std::free(copy->attlist);
  copy->attlist = nullptr;
  copy->n_attlist = 0;
  return true;
}

}  // namespace

std::optional<std::string> read_through_views(std::string_view sql, const Views& views, bool standard_strings) {
  if (views.empty()) return std::nullopt;
  auto parsed = ParseTree::parse(sql, standard_strings);
  if (!parsed.ok()) return std::nullopt;
  auto tree = unpack_tree(parsed.packed());
  if (!tree) return std::nullopt;
  bool changed = false, failed = false;
  for (std::size_t i = 0; i < tree->n_stmts; ++i) {
    PgQuery__Node* stmt = tree->stmts[i]->stmt;
    if (is(stmt, PG_QUERY__NODE__NODE_COPY_STMT) && stmt->copy_stmt->relation != nullptr &&
        !stmt->copy_stmt->is_from) {
      if (const auto* schema = view_schema(stmt->copy_stmt->relation, views)) {
        failed |= !copy_from_view(stmt->copy_stmt, *schema, standard_strings);
        changed = true;
      }
    }
    for_each_range_var(&tree->stmts[i]->base, [&](const PgQuery__RangeVar* rv) {
      if (const auto* schema = view_schema(rv, views)) {
        merge_tree::retarget(const_cast<PgQuery__RangeVar*>(rv), *schema, sv(rv->relname));
        changed = true;
      }
    });
  }
  if (!changed || failed) return std::nullopt;
  return deparse(tree.get());
}

}  // namespace splitpoint::routing
