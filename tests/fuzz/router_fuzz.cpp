// libFuzzer target for the router (SPEC §3) and the scatter planner (SPEC §4): any SQL
// text, as a client sends it, through the analysis (libpg_query), the plan cache, the
// routing of an extended-protocol execution with parameters and of a simple-protocol
// one through the literal-slot cache, and — for a read on several shards — the merge
// and combine planners. Properties: nothing crashes or trips a sanitizer; a route of
// kind `error` has a SQLSTATE; a text without parameters routes the same way in both
// protocols (unless it does not parse) and again from the cache (the property
// tests/unit's router_fixture checks by hand); an INSERT split over shards, or given the
// keys the proxy draws, is cut from its text as the parse tree's edit would make it.
// Build and run: tests/fuzz/run
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "routing/insert_split.hpp"
#include "routing/merge/scatter_plan.hpp"
#include "routing/pg_tree.hpp"
#include "routing/plan.hpp"
#include "tests/fuzz/fuzz_world.hpp"

using namespace splitpoint;
using routing::Route;
using routing::RouteKind;

namespace {

routing::Router& router() {
  static routing::Router r(fuzz::fuzz_config());
  return r;
}

void check_route(const Route& r, const char* how) {
  if (r.kind == RouteKind::error && r.sqlstate.size() != 5) fuzz::fail("router_fuzz", std::string(how) + ": error route without a SQLSTATE");
  for (std::size_t s : r.shards)
    if (s >= fuzz::fuzz_config().shards.size()) fuzz::fail("router_fuzz", std::string(how) + ": shard out of range");
}

void same(const Route& a, const Route& b, const char* what) {
  if (a.kind != b.kind || a.shards != b.shards || a.sqlstate != b.sqlstate)
    fuzz::fail("router_fuzz", std::string(what) + ": kind/shards/sqlstate differ (" + a.sqlstate + " vs " + b.sqlstate + ")");
}

// `sql` as PostgreSQL's deparser spells it (nullopt: it does not parse).
std::optional<std::string> canonical(const std::string& sql) {
  auto tree = routing::ParseTree::parse(sql);
  if (!tree.ok()) return std::nullopt;
  return routing::deparse(tree.tree());
}

void same_statement(const std::string& cut, const std::string& deparsed, const char* what) {
  auto a = canonical(cut), b = canonical(deparsed);
  // No reference when the deparser's spelling does not parse again (libpg_query 15
  // writes `(ARRAY['c'])[0]` as `ARRAY['c'][0]`): the edit must still parse.
  if (!b && a) return;
  if (!a || !b || *a != *b) fuzz::fail("router_fuzz", std::string(what) + ": the text's edit is another statement: " + cut);
}

void check_rewrites(const std::string& sql, const Route& simple) {
  if (!simple.per_shard_sql.empty()) {
    auto plan = router().plan(sql, {}, true);
    if (plan->packed_tree.empty()) return;
    auto tree = routing::split_insert(plan->packed_tree, simple.row_shards);
    if (!tree || tree->size() != simple.per_shard_sql.size()) fuzz::fail("router_fuzz", "split: the tree's split differs");
    for (std::size_t i = 0; i < tree->size(); ++i)
      same_statement(simple.per_shard_sql[i].second, (*tree)[i].second, "split INSERT");
  }
  // (Read with standard_conforming_strings off, a text goes through the tree: the same
  // text without backslashes is read alike.)
  if (simple.generate_keys && sql.find('\\') == std::string::npos) {
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < simple.generate_keys->rows.size(); ++i) keys.push_back(std::to_string(100 + i));
    auto cut = routing::insert_with_keys(sql, true, *simple.generate_keys, keys, true);
    auto deparsed = routing::insert_with_keys(sql, false, *simple.generate_keys, keys, true);
    if (cut.has_value() != deparsed.has_value()) fuzz::fail("router_fuzz", "keys: one way only");
    if (cut) same_statement(*cut, *deparsed, "keyed INSERT");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::uint8_t flags = data[0];
  std::string sql(reinterpret_cast<const char*>(data + 1), size - 1);
  sql.resize(std::min(sql.size(), sql.find('\0')));  // the wire's Query/Parse text is a C string
  const bool standard = (flags & 1) == 0;
  routing::SessionRouting session;
  session.standard_conforming_strings = standard;
  if (flags & 2) session.shard = std::size_t{1};
  const auto& shapes = fuzz::fuzz_shapes();

  // Extended protocol: up to three parameters, typed or not, text values.
  static const std::vector<std::int32_t> kTypes = {20, 25, 0};
  const std::size_t nparams = (flags >> 2) & 3;
  std::vector<std::int32_t> types(kTypes.begin(), kTypes.begin() + static_cast<std::ptrdiff_t>(nparams));
  auto plan = router().plan(sql, types, standard);
  static const std::optional<std::string_view> kValues[] = {std::string_view("42"), std::string_view("jp"), std::nullopt};
  std::vector<std::optional<std::string_view>> values(kValues, kValues + nparams);
  Route extended = router().route(*plan, routing::BoundParams{values, {}, types}, session, shapes);
  check_route(extended, "extended");
  (void)router().tables_changed_by(*plan);

  // Simple protocol, twice (the second from the cache when cacheable), against a fresh
  // analysis without parameters.
  Route simple = router().route_simple(sql, session, shapes);
  check_route(simple, "simple");
  Route again = router().route_simple(sql, session, shapes);
  same(simple, again, "simple protocol, cache hit");
  if (sql.find('$') == std::string::npos) {
    auto fresh = router().plan(sql, {}, standard);
    Route r = router().route(*fresh, routing::BoundParams{}, session, shapes);
    // (A syntax error in a literal that the cache replaced by a slot goes unnoticed
    // there: the shard the statement goes to reports it, as PostgreSQL does.)
    if (!r.syntax_error) same(r, simple, "extended vs simple protocol");
  }

  // INSERTs the proxy rewrites in their text (routing/insert_split.cpp): the same
  // statements as the parse tree's edits and deparse give.
  if (standard) check_rewrites(sql, simple);

  // A read on several shards: how it would be merged or combined.
  if (simple.kind == RouteKind::shards && simple.shards.size() > 1 && simple.cls == routing::StatementClass::read) {
    routing::ScatterOptions o;
    o.merge.is_reference_table = [](std::string_view t) { return t == "countries"; };
    o.combine.is_sharded_table = [](std::string_view, std::string_view t) {
      return t == "users" || t == "orders" || t == "sessions" || t == "events" || t == "stores";
    };
    o.combine.table_shape = shapes;
    o.combine_only = simple.needs_combine;
    auto p = routing::plan_scatter(sql, o, standard);
    if (!p.merge && !p.combine && !p.error && p.missing_shapes.empty())
      fuzz::fail("router_fuzz", "scatter plan with no decision");
  }
  return 0;
}
