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

struct Router::Impl {
  explicit Impl(const config::Config& c) : config(c), topo(config) {}

  // Routes `sql` from a plan of its own (no cache).
  Route exact(std::string_view sql, const SessionRouting& session, const ShapeLookup& shapes) const {
    std::shared_ptr<Plan> p = analyze(sql, {}, topo, session.standard_conforming_strings);
    return evaluate(*p, EvalInput{topo, nullptr, {}, p->hints, session, shapes, true}, nullptr);
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
  return evaluate(plan, EvalInput{impl_->topo, &params, {}, plan.hints, session, shapes, true}, nullptr);
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
      if (!needs_exact) return r;
    }
    return im.exact(sql, session, shapes);
  }
  std::shared_ptr<Plan> p = analyze(sql, {}, im.topo);
  if (p->cacheable)
    if (std::shared_ptr<Plan> shared = with_literal_slots(*p, sql, scan)) im.cache.insert(scan.key, hash, std::move(shared));
  return evaluate(*p, EvalInput{im.topo, nullptr, {}, p->hints, session, shapes, true}, nullptr);
}

std::vector<std::string> Router::tables_changed_by(const Plan& plan) const { return plan.ddl_tables; }

}  // namespace splitpoint::routing
