// What a session does about the catalog (SPEC §9): it moves to a new topology epoch
// between transactions, holds statements for a partition in cutover, and reads the
// distribution's tables through views on shards that hold rows they do not own.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/sqlstate.hpp"
#include "routing/hide_rows.hpp"
#include "server/cluster/catalog.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/moves.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

using routing::RouteKind;

void CatalogEpoch::follow_runtime() {
  if (s_.pump_.active() || s_.txn_.implicit) return;  // (asked again at the next frame)
  // A transaction block that has sent nothing to any shard yet (its BEGIN held,
  // hold_begin; no backend taken) depends on no placement: it follows too, so that its
  // first statement routes by the placement in force. Otherwise a cutover between the
  // client's BEGIN and that statement sent it to the partition's old shard, whose fence
  // refused it (SPM01: pgbench -N through REBALANCE, tests/integration/test_adopt.py).
  if (s_.in_transaction()) {
    if (s_.txn_.begin_sql.empty() || s_.fe_.client_txn != 'T' || s_.txn_.write_shard || !s_.txn_.written.empty()) return;
    for (const auto& b : s_.held_)
      if (b) return;
  }
  const auto generation = s_.server_.runtime_generation();
  auto rt = s_.server_.runtime();
  generation_ = generation;
  // A reload starts another lineage: the session keeps its runtime, but follows its
  // shards' primaries (a failover, SPEC §10, also bumps the generation).
  if (rt && rt != s_.runtime_ && rt->lineage == s_.runtime_->lineage) {
    renumber_shards(*rt);
    s_.runtime_ = std::move(rt);
  }
  // A new epoch may have given a shard new pools; a backend the session holds (session
  // pooling, LISTEN) goes back to the pool it came from, so those stay.
  for (std::size_t i = 0; i < s_.runtime_->shards.size(); ++i) {
    auto pool = s_.runtime_->shards[i]->get(s_.who_.user, s_.who_.password, s_.who_.database);
    if (i == s_.pools_.size()) s_.pools_.push_back(std::move(pool));
    else if (!s_.held_[i]) s_.pools_[i] = std::move(pool);
  }
  s_.held_.resize(s_.pools_.size());
  s_.hosts_.resize(s_.pools_.size());
}

// DROP SHARD renumbers the shards after the dropped one: the session's per-shard state
// follows the names. A backend kept on the dropped shard (session pooling, LISTEN) is
// closed; SET splitpoint.shard naming it is forgotten.
void CatalogEpoch::renumber_shards(const Runtime& next) {
  const auto& was = s_.runtime_->config.shards;
  const auto& now = next.config.shards;
  bool same = now.size() >= was.size();
  for (std::size_t i = 0; same && i < was.size(); ++i) same = was[i].name == now[i].name;
  if (same) return;  // (shards added at the end, or none changed)
  std::vector<std::shared_ptr<Pool>> pools(now.size());
  std::vector<std::unique_ptr<Backend>> held(now.size());
  std::vector<std::optional<std::size_t>> to_of(was.size());
  std::size_t cur = Session::kNoShard;
  for (std::size_t i = 0; i < was.size() && i < s_.pools_.size(); ++i) {
    const auto to = to_of[i] = next.config.find_shard(was[i].name);
    if (!to) {
      if (i < s_.held_.size()) s_.release_shard(i, false);
      continue;
    }
    pools[*to] = std::move(s_.pools_[i]);
    if (i < s_.held_.size()) held[*to] = std::move(s_.held_[i]);
    if (s_.cur_ == i) cur = *to;
  }
  if (s_.settings_.routing.shard) {
    const auto to = *s_.settings_.routing.shard < was.size() ? next.config.find_shard(was[*s_.settings_.routing.shard].name) : std::nullopt;
    if (to) s_.settings_.routing.shard = *to;
    else s_.settings_.routing.shard.reset();
  }
  // (Shards new to the session stay null here: follow_runtime fills them in.)
  s_.pools_ = std::move(pools);
  s_.held_ = std::move(held);
  s_.hosts_.renumber(to_of, now.size());
  s_.cur_ = cur;
}

bool held_by_moves(const MoveView& v, const routing::Route& r) {
  if (r.kind == RouteKind::local || r.kind == RouteKind::error || !r.distribution) return false;
  if (v.fenced) return true;
  for (const auto& h : v.held) {
    if (*r.distribution != h.distribution && r.partitions.empty()) continue;
    if (r.partitions.empty()) return true;  // every partition of the distribution
    for (const auto& p : r.partitions)
      if (p.distribution == h.distribution && p.partition == h.partition) return true;
  }
  return false;
}

void CatalogEpoch::take_moves() {
  if (s_.server_.catalog()) {
    // Marked before the moves are read: the catalog thread reads the mark after storing
    // a new epoch's runtime, so one of the two sees the other (Proxy::epoch_in_use).
    epoch.store(s_.server_.epoch(), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  view.reset();
  if (!s_.server_.moves_active()) return;
  view = s_.server_.runtime()->moves;  // (the newest epoch's: the session's may predate a cutover)
  if (!view->active()) view.reset();
}

awaitable<bool> CatalogEpoch::wait_for_moves(routing::Route& route, bool extended,
                                        const std::function<routing::Route()>& again) {
  const auto& moves = view;
  if (route.cls == routing::StatementClass::ddl && route.kind == RouteKind::all_shards && moves->moving) {
    co_await s_.reject("SPA01", "a partition move is in progress (SHOW MOVES); DDL on the shards waits until it ends",
                    extended);
    co_return false;
  }
  if (!held_by_moves(*moves, route)) co_return true;
  // A transaction already open on every shard the statement goes to runs it there at
  // once: after the hold it would go there anyway (a transaction keeps its placement),
  // and when it wrote the partition before the hold the cutover waits for it to end (the
  // fence's lock), so holding it stalled both until the cutover gave up and retried.
  const auto open_on = [&](std::size_t s) { return s < s_.held_.size() && s_.in_transaction_on(s); };
  if (!moves->fenced && route.kind == RouteKind::shards && !route.shards.empty() &&
      std::all_of(route.shards.begin(), route.shards.end(), open_on))
    co_return true;
  const auto until = std::chrono::steady_clock::now() + s_.runtime_->config.moves.max_hold;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  // Counted while held (splitpoint_held_statements), and once (…_total).
  struct Held {
    MoveMetrics* m;
    explicit Held(MoveMetrics* metrics) : m(metrics) {
      if (!m) return;
      m->held_statements.fetch_add(1, std::memory_order_relaxed);
      m->holding.fetch_add(1, std::memory_order_relaxed);
    }
    ~Held() {
      if (m) m->holding.fetch_sub(1, std::memory_order_relaxed);
    }
  } held(s_.server_.catalog() ? &s_.server_.catalog()->metrics() : nullptr);
  while (moves && held_by_moves(*moves, route)) {
    if (std::chrono::steady_clock::now() >= until || s_.closing_) {
      co_await s_.reject("SPM01",
                      moves->fenced ? "this proxy lost its catalog lease; retry when it is back"
                                    : "the partition is moving and its hold expired before the move finished; retry",
                      extended);
      co_return false;
    }
    timer.expires_after(std::chrono::milliseconds(2));
    co_await timer.async_wait(use_nothrow);
    take_moves();  // (a held statement has sent nothing: it runs under the newest epoch)
  }
  follow_runtime();  // outside a transaction (or before its first shard) the statement routes with the new placement
  route = again();
  co_return true;
}

std::optional<std::string> CatalogEpoch::hide_foreign_rows(std::size_t shard, const routing::Route& route,
                                                      std::string_view sql) const {
  const auto& moves = view;
  if (!moves || shard >= moves->views.size() || moves->views[shard].empty()) return std::nullopt;
  if (!route.partitions.empty()) {
    // Keys confine the statement to their partitions: only those hidden here matter.
    bool any = false;
    for (const auto& h : moves->hidden)
      for (const auto& p : route.partitions)
        any |= h.shard == shard && p.distribution == h.distribution && p.partition == h.partition;
    if (!any) return std::nullopt;
  }
  return routing::read_through_views(sql, moves->views[shard], s_.settings_.routing.standard_conforming_strings);
}

void Session::count_shard_error(std::string_view sqlstate) {
  metrics_.error(sqlstate);
  if (sqlstate == "SPM01")
    if (auto* c = server_.catalog()) c->metrics().fence_rejections.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace splitpoint::server
