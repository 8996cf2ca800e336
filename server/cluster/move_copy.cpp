// A move's copy: the target's subscription copies the partition's rows and streams
// what is written since (server/cluster/move.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;

void Move::start_copy() {
  {
    pqxx::nontransaction w(*src_);
    if (w.exec_params("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", name_).empty())
      w.exec_params("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name_);
  }
  const auto& s = cfg_.shards[*cfg_.find_shard(m_.source)];
  pqxx::nontransaction w(*tgt_);
  if (!w.exec_params("SELECT 1 FROM pg_subscription WHERE subname = $1", name_).empty()) return;
  // (The slot exists already: a subscription to the same cluster could not create it.)
  w.exec("CREATE SUBSCRIPTION " + name_ + " CONNECTION " + w.quote(shard_dsn(cfg_, s)) + " PUBLICATION " + name_ +
         " WITH (create_slot = false, slot_name = " + w.quote(name_) + ", copy_data = true)");
}

// Until the subscription has copied every table. Progress, once a second, from the
// target's pg_stat_progress_copy (the COPY of each table's initial sync); the rows
// counted once at the end.
void Move::wait_copied() {
  std::map<std::int64_t, std::int64_t> copied;  // table's oid on the target -> rows of its COPY
  auto last_update = std::chrono::steady_clock::now() - 1h;
  for (;;) {
    if (cancelled()) throw Abort("cancelled");
    auto r = pqxx::nontransaction(*tgt_).exec_params(
        "SELECT count(*) FILTER (WHERE r.srsubstate <> 'r'), count(*), (SELECT coalesce(sum(apply_error_count + "
        "sync_error_count), 0) FROM pg_stat_subscription_stats st WHERE st.subname = $1) FROM pg_subscription_rel r "
        "JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1",
        name_);
    if (r[0][2].as<std::int64_t>() > 0) throw Abort("logical replication reported errors on the target (see its log)");
    const bool ready = r[0][0].as<std::int64_t>() == 0 && r[0][1].as<std::size_t>() == tables_.size() + 1;  // (and the marks)
    if (ready || std::chrono::steady_clock::now() - last_update > 1s) {
      std::int64_t n = 0;
      if (ready) {
        n = partition_rows(*tgt_);
      } else {
        for (const auto& row : pqxx::nontransaction(*tgt_).exec_params(
                 "SELECT p.relid::bigint, p.tuples_processed FROM pg_stat_progress_copy p JOIN pg_subscription_rel r "
                 "ON r.srrelid = p.relid JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1 AND "
                 "r.srsubstate IN ('i', 'd')",
                 name_))
          copied[row[0].as<std::int64_t>()] = row[1].as<std::int64_t>();
        for (const auto& [table, rows] : copied) n += rows;
      }
      cat_.metrics().rows_copied += static_cast<std::uint64_t>(std::max<std::int64_t>(0, n - m_.rows_copied));
      m_.rows_copied = n;
      set_state(m_.state, false);
      last_update = std::chrono::steady_clock::now();
    }
    if (ready) return;
    cat_.nap(100ms);
    if (cat_.stopping()) throw Abort("the proxy is stopping");
  }
}

void Move::catch_up() {
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    if (cancelled()) throw Abort("cancelled");
    pqxx::nontransaction w(*src_);
    auto r = w.exec_params(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE "
        "slot_name = $1",
        name_);
    m_.lag_bytes = r.empty() || r[0][0].is_null() ? 0 : r[0][0].as<std::int64_t>();
    set_state(m_.state, false);
    if (*m_.lag_bytes < (1 << 20) || std::chrono::steady_clock::now() > until) return;
    cat_.nap(100ms);
  }
}

// The partition's rows on one side, every table of the distribution.
std::int64_t Move::partition_rows(pqxx::connection& side) {
  pqxx::nontransaction w(side);
  std::int64_t n = 0;
  for (const auto& t : tables_)
    n += w.exec("SELECT count(*) FROM " + q(side, t.name) + " WHERE " + in_partition(t, side))[0][0].as<std::int64_t>();
  return n;
}

}  // namespace splitpoint::server::moving
