// Partition moves (SPEC §9), run by the mover thread of whichever proxy claims them.
// How a partition's rows are selected, and why (docs/operations.md): a row filter on
// the shards' ordinary tables. Hash partitions use PostgreSQL's own
// satisfies_hash_partition() with the partition's own modulus and remainder (mixed once
// SPLIT PARTITION split some) against a small hash-partitioned helper table per key
// type (splitpoint.hash_<type>, no rows), so source, target, the proxy and PostgreSQL
// agree on every row; range partitions use key >= lower AND key < upper. The same
// filter selects the rows for the publication, the fence trigger, the verification,
// the cleanup and the views that hide rows a shard holds but does not own.
//
// States: planned -> copying (publication, fence trigger and views exist; the slot and
// the subscription copy and stream) -> catching_up -> cutover (the partition is held
// on every proxy, the fence refuses writes to it on the source, the target's copy is
// verified — the scans before the hold, the keys that differed or were written since
// under it — the placement flips) -> cleanup (the source's rows are deleted) -> done.
// Before the flip any failure, a cancel or a dead mover rolls everything back.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server {

namespace moving {

using namespace std::chrono_literals;

void Move::run() {
  connect();
  if (m_.state == "cleanup") {
    load_tables();
    cleanup();
    return;
  }
  try {
    if (m_.state != "planned") {
      load_tables();
      throw Abort("its mover (proxy " + previous_owner_ + ") stopped during " + m_.state);
    }
    prepare();
    m_.rows_total = partition_rows(*src_);
    set_state("copying", true);
    if (!cat_.wait_for_acks(*catalog_, epoch_, cfg_.moves.lease * 2))
      throw Abort("a live proxy did not acknowledge the move");
    start_copy();
    wait_copied();
    set_state("catching_up", false);
    for (;;) {
      catch_up();
      if (cutover()) break;
      if (m_.attempts >= 5) throw Abort("cutover failed " + std::to_string(m_.attempts) + " times");
      cat_.nap(500ms);
    }
  } catch (const std::exception& e) {
    const std::string why = e.what();
    if (m_.state == "cleanup") throw;  // flipped: the target owns the rows, cleanup is retried
    roll_back(why == "cancelled" ? "cancelled" : "failed", why == "cancelled" ? "" : why);
    return;
  }
  cleanup();
}

}  // namespace moving

using moving::Move;
using namespace std::chrono_literals;

void Catalog::drop_later(std::vector<std::string> dsns, std::string schema) {
  std::lock_guard lock(droppers_mu_);
  droppers_.emplace_back([this, dsns = std::move(dsns), schema = std::move(schema)] {
    nap(config_.moves.lease);
    if (stop_) return;  // (the next start's sweep drops it)
    for (const auto& dsn : dsns) {
      try {
        pqxx::connection c(dsn);
        pqxx::nontransaction w(c);
        w.exec("SET client_min_messages = warning");
        w.exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
      } catch (const std::exception& e) {
        spdlog::warn("catalog: cannot drop {} yet: {}", schema, e.what());
      }
    }
  });
}

// View schemas of moves finished a while ago that a stopped proxy left behind (its
// drop_later did not run).
void Catalog::sweep_views() {
  auto config = effective_config();
  auto c = connect_catalog();
  pqxx::nontransaction w(*c);
  auto done = w.exec_params("SELECT 'splitpoint_m' || id FROM splitpoint.moves WHERE state IN ('done', 'failed', "
                     "'cancelled') AND updated < now() - $1::int * interval '1 millisecond'",
                            static_cast<int>(config_.moves.lease.count() * 2));
  std::set<std::string> finished;
  for (const auto& r : done) finished.insert(r[0].as<std::string>());
  for (const auto& s : config.shards) {
    try {
      pqxx::connection sc(shard_dsn(config, s));
      pqxx::nontransaction sw(sc);
      for (const auto& r : sw.exec("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'splitpoint\\_m%'"))
        if (finished.count(r[0].as<std::string>())) {
          sw.exec("SET client_min_messages = warning");
          sw.exec("DROP SCHEMA IF EXISTS " + r[0].as<std::string>() + " CASCADE");
        }
    } catch (const std::exception& e) {
      spdlog::warn("catalog: view sweep on shard {}: {}", s.name, e.what());
    }
  }
}

void Catalog::mover_loop() {
  std::unique_ptr<pqxx::connection> c;
  auto swept = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!stop_) {
    if (std::chrono::steady_clock::now() - swept > config_.moves.lease * 3) {  // (when idle)
      swept = std::chrono::steady_clock::now();
      try {
        sweep_views();
      } catch (const std::exception& e) {
        spdlog::warn("catalog: view sweep: {}", e.what());
      }
    }
    try {
      if (!c) c = connect_catalog();
      pqxx::work w(*c);
      auto r = w.exec_params(
          "WITH c AS (SELECT id, owner AS previous FROM splitpoint.moves m WHERE state NOT IN ('done', 'failed', "
          "'cancelled') AND (owner IS NULL OR owner = $1 OR NOT EXISTS (SELECT 1 FROM splitpoint.proxies p WHERE p.id "
          "= m.owner AND p.lease_until > now())) AND NOT EXISTS (SELECT 1 FROM splitpoint.moves o WHERE o.distribution = "
          "m.distribution AND o.id < m.id AND o.state NOT IN ('done', 'failed', 'cancelled')) "
          "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
          "UPDATE splitpoint.moves m SET owner = $1 FROM c WHERE m.id = c.id RETURNING m.id, m.distribution, "
          "m.partition, m.source, m.target, m.state, m.owner, m.error, m.rows_copied, m.lag_bytes, m.hold_ms, "
          "m.attempts, coalesce(c.previous, ''), (SELECT epoch FROM splitpoint.topology)",
          proxy_id_);
      w.commit();
      // A proxy behind the catalog's epoch would move by ranges a SPLIT/MERGE RANGE has
      // changed since: the move waits (claimed) until this proxy has caught up.
      if (r.empty() || r[0][13].as<std::int64_t>() > epoch()) {
        nap(config_.moves.poll);
        continue;
      }
      MoveRow m;
      m.id = r[0][0].as<std::int64_t>();
      m.distribution = r[0][1].as<std::string>();
      m.partition = r[0][2].as<std::uint32_t>();
      m.source = r[0][3].as<std::string>();
      m.target = r[0][4].as<std::string>();
      m.state = r[0][5].as<std::string>();
      m.rows_copied = r[0][8].as<std::int64_t>();
      m.attempts = r[0][11].as<int>();
      spdlog::info("move {}: {}:{} from {} to {}, state {}", m.id, m.distribution, m.partition, m.source, m.target,
                   m.state);
      Move(*this, m, r[0][12].as<std::string>()).run();
    } catch (const std::exception& e) {
      spdlog::warn("mover: {}", e.what());
      c.reset();
      nap(config_.moves.poll * 4);
    }
  }
}

}  // namespace splitpoint::server
