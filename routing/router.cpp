// Router: glue between analysis (analyze.hpp), execution (evaluate.hpp) and the
// simple-protocol plan cache (plan_cache.hpp, literal_slots.hpp).
#include "routing/router.hpp"

#include "routing/analyze.hpp"
#include "routing/evaluate.hpp"
#include "routing/literal_slots.hpp"
#include "routing/plan_cache.hpp"
#include "routing/text_scan.hpp"
#include "routing/topology.hpp"

namespace splitpoint::routing {

namespace {

// Route::indexes.writes: the statement inserts into, updates or deletes from a table
// with a global index, or copies into one.
Route& note_indexed_writes(const Topology& topo, const Plan& p, Route& r) {
  if (topo.config().indexes.empty() || r.cls != StatementClass::write) return r;
  auto indexed = [&](int occ) { return occ >= 0 && static_cast<std::size_t>(occ) < p.occs.size() && topo.indexed(p.occs[occ].table); };
  for (int t : p.write_targets) r.indexes.writes = r.indexes.writes || indexed(t);
  for (int t : p.insert_targets) r.indexes.writes = r.indexes.writes || indexed(t);
  if (r.copy_from && r.copy_from->statement && r.copy_from->statement->from_stdin)
    r.indexes.writes = r.indexes.writes || topo.indexed(Topology::table_name(r.copy_from->statement->schema,
                                                                             r.copy_from->statement->table));
  return r;
}

}  // namespace

struct Router::Impl {
  explicit Impl(const config::Config& c) : config(c), topo(config) {}

  // Routes `sql` from a plan of its own (no cache).
  Route exact(std::string_view sql, const SessionRouting& session, const ShapeLookup& shapes) const {
    std::shared_ptr<Plan> p = analyze(sql, {}, topo, session.standard_conforming_strings);
    Route r = evaluate(*p, EvalInput{topo, nullptr, {}, p->hints, session, shapes, true}, nullptr);
    return note_indexed_writes(topo, *p, r);
  }

  config::Config config;  // a copy: the router must not depend on the caller keeping its config
  Topology topo;
  PlanCache cache;           // route_simple: by normalised text
  PlanCache exact_cache;     // plan(): by the very text and parameter types
};

Router::Router(const config::Config& config) : impl_(std::make_unique<Impl>(config)) {}
Router::~Router() = default;

std::shared_ptr<const Plan> Router::plan(std::string_view sql, std::span<const std::int32_t> param_types,
                                         bool standard_strings) const {
  // Texts read with standard_conforming_strings off (legacy clients) are not cached:
  // the same text can mean another statement.
  if (!standard_strings) return analyze(sql, param_types, impl_->topo, false);
  // A plan depends only on the text, the parameter types and the topology, so a Parse
  // of a text seen before (an unnamed statement re-parsed for each execution, as
  // pgbench -M extended and many drivers do) is not analysed again. The key is the
  // text, a NUL (no query text holds one) and the types' bytes; per-thread so a hit
  // allocates nothing.
  thread_local std::string key;
  key.assign(sql);
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(param_types.data()), param_types.size_bytes());
  const std::size_t hash = std::hash<std::string_view>{}(key);
  if (std::shared_ptr<const Plan> cached = impl_->exact_cache.find(key, hash)) return cached;
  std::shared_ptr<const Plan> p = analyze(sql, param_types, impl_->topo);
  impl_->exact_cache.insert(key, hash, p);
  return p;
}

Route Router::route(const Plan& plan, const BoundParams& params, const SessionRouting& session,
                    const ShapeLookup& shapes) const {
  Route r = evaluate(plan, EvalInput{impl_->topo, &params, {}, plan.hints, session, shapes, true}, nullptr);
  if (!note_indexed_writes(impl_->topo, plan, r).indexes.writes || !r.copy_from) return r;
  // (COPY FROM STDIN in the extended protocol: its rows are not split by the proxy, so
  // neither are its entries kept.)
  Route refused;
  refused.kind = RouteKind::error;
  refused.cls = r.cls;
  refused.sqlstate = "0A000";
  refused.message = "COPY into a table with a global index runs in the simple query protocol only (docs/indexes.md)";
  return refused;
}

Route Router::route_simple(std::string_view sql, const SessionRouting& session, const ShapeLookup& shapes) {
  // Per-thread buffers: a cache hit allocates nothing for the scan.
  thread_local std::vector<std::optional<std::string>> slots;
  Impl& im = *impl_;
  // Unterminated (PostgreSQL's error), or standard_conforming_strings off, which the
  // cache's scan does not follow: a plan of its own.
  if (!session.standard_conforming_strings) return im.exact(sql, session, shapes);
  const ScannedText& scan = scan_text_once(sql);  // (the scatter planner's scan of a scatter, too)
  if (!scan.ok) return im.exact(sql, session, shapes);
  const std::size_t hash = std::hash<std::string_view>{}(scan.key);
  if (std::shared_ptr<const Plan> cached = im.cache.find(scan.key, hash)) {
    if (read_slots(*cached, sql, scan, slots)) {
      bool needs_exact = false;
      Route r = evaluate(*cached, EvalInput{im.topo, nullptr, slots, scan.hints, session, shapes, false, sql},
                         &needs_exact);
      if (!needs_exact) return note_indexed_writes(im.topo, *cached, r);
    }
    return im.exact(sql, session, shapes);
  }
  std::shared_ptr<Plan> p = analyze(sql, {}, im.topo);
  if (p->cacheable)
    if (std::shared_ptr<Plan> shared = with_literal_slots(*p, sql, scan)) im.cache.insert(scan.key, hash, std::move(shared));
  Route r = evaluate(*p, EvalInput{im.topo, nullptr, {}, p->hints, session, shapes, true}, nullptr);
  return note_indexed_writes(im.topo, *p, r);
}

std::vector<std::string> Router::tables_changed_by(const Plan& plan) const { return plan.ddl_tables; }

}  // namespace splitpoint::routing
