// A move's end: the source's rows deleted once the target owns them, or everything
// undone when it failed or was cancelled (server/cluster/move.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;

// The partition's rows of every table on `side`, deleted a range of pages at a time (a
// TID range scan each: one pass over the table in all, and no long transaction), then
// the pages added since the start. After each range a pause as long as the range took:
// the rows are hidden or not yet owned, so this is not urgent, and leaves the cores to
// the application half the time.
void Move::delete_rows(pqxx::connection& side) {
  constexpr std::int64_t kPages = 1024;
  for (const auto& t : tables_) {
    const auto pages = pqxx::nontransaction(side)
                           .exec_params("SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::bigint",
                                        t.name)[0][0]
                           .as<std::int64_t>();
    auto tid = [](std::int64_t page) { return "'(" + std::to_string(page) + ",0)'::tid"; };
    for (std::int64_t from = 0;; from += kPages) {
      const bool last = from + kPages > pages;
      const std::string where = in_partition(t, side) + " AND ctid >= " + tid(from) +
                                (last ? "" : " AND ctid < " + tid(from + kPages));
      const auto started = std::chrono::steady_clock::now();
      pqxx::work w(side);
      w.exec("SET LOCAL splitpoint.mover = 'on'");
      w.exec("DELETE FROM " + q(side, t.name) + " WHERE " + where);
      w.commit();
      if (last) break;
      cat_.nap(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started));
    }
  }
}

void Move::cleanup() {
  drop_subscription();              // (already gone unless the mover stopped just after the flip)
  wait_acks(cfg_.moves.lease * 2);  // nobody routes the partition to the source any more
  // A grace period for transactions that began before the flip and still route by the
  // old placement: the fence refuses their writes to the partition until the rows go.
  cat_.nap(cfg_.moves.lease);
  delete_rows(*src_);
  drop_fences();
  drop_publication();
  delete_marks();
  set_state("done", true);
  drop_views();
}

// Once no proxy reads through the move's views: every live one runs the epoch without
// them, and a statement routed just before it (waiting for a backend, say) had a lease's
// time to be sent. In the background, so the next move need not wait.
void Move::drop_views() {
  wait_acks(cfg_.moves.lease * 2);
  cat_.drop_later({shard_dsn(cfg_, cfg_.shards[*cfg_.find_shard(m_.source)]),
                   shard_dsn(cfg_, cfg_.shards[*cfg_.find_shard(m_.target)])},
                  name_);
}

// The application's tables leave the publication first, then it goes: a write that
// looked the publication up just before a plain DROP PUBLICATION can fail with "cache
// lookup failed for publication" (XX000, seen under load).
void Move::drop_publication() {
  pqxx::nontransaction w(*src_);
  if (w.exec_params("SELECT 1 FROM pg_publication WHERE pubname = $1", name_).empty()) return;
  w.exec("ALTER PUBLICATION " + name_ + " SET TABLE splitpoint.move_marks");
  // A write that read the table's publications before the ALTER may look this one up
  // after a DROP right behind it (seen once more under load, test_split_range): a moment
  // for such writes to finish.
  cat_.nap(500ms);
  w.exec("DROP PUBLICATION " + name_);
}

void Move::drop_subscription() {
  pqxx::nontransaction w(*tgt_);
  if (!w.exec_params("SELECT 1 FROM pg_subscription WHERE subname = $1", name_).empty()) {
    try {
      w.exec("DROP SUBSCRIPTION " + name_);  // drops the slot on the source too
    } catch (const pqxx::sql_error&) {  // the source is unreachable: keep its slot for later
      w.exec("ALTER SUBSCRIPTION " + name_ + " DISABLE");
      w.exec("ALTER SUBSCRIPTION " + name_ + " SET (slot_name = NONE)");
      w.exec("DROP SUBSCRIPTION " + name_);
    }
  }
  for (int attempt = 0; attempt < 50; ++attempt) {  // (a walsender may still be letting go)
    try {
      pqxx::nontransaction s(*src_);
      s.exec_params("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                    name_);
      return;
    } catch (const pqxx::sql_error&) {
      cat_.nap(100ms);
    }
  }
}

void Move::drop_fences() {
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    exec_locking(tables_[i].name, "DROP TRIGGER IF EXISTS " + name_ + "_fence ON " + q(*src_, tables_[i].name), true);
    exec(*src_, "DROP FUNCTION IF EXISTS splitpoint." + name_ + "_fence_" + std::to_string(i) + "()");
  }
}

void Move::delete_marks() {
  for (auto* side : {src_.get(), tgt_.get()})
    exec(*side, "DELETE FROM splitpoint.move_marks WHERE move = " + std::to_string(m_.id) +
                    "; DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id));
}

// Before the flip: the source still owns every row, so undo everything else.
void Move::roll_back(const std::string& state, const std::string& why) {
  spdlog::warn("move {}: rolling back ({})", m_.id, why);
  m_.error = why;
  try {
    exec(*src_, "SELECT pg_advisory_unlock_all()");
  } catch (const std::exception&) {
  }
  drop_subscription();
  drop_publication();
  drop_fences();
  delete_rows(*tgt_);
  delete_marks();
  set_state(state, true);
  drop_views();
}

}  // namespace splitpoint::server::moving
