// A move's cutover: the partition held on every proxy, the fence on the source, the
// placement flipped in the catalog (server/cluster/move.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;

// One attempt: false when it had to give up (the partition is released, writes go on
// on the source, and the move tries again).
bool Move::cutover() {
  std::optional<std::vector<KeySet>> suspects;
  if (cfg_.moves.verify) suspects = verify_before_hold();
  ++m_.attempts;
  set_state("cutover", true);
  const auto held_from = std::chrono::steady_clock::now();
  const auto hold = cfg_.moves.max_hold;
  auto give_up = [&](const std::string& why) {
    spdlog::warn("move {}: cutover attempt {} given up: {}", m_.id, m_.attempts, why);
    try {  // (a lock that timed out left the session's lock_timeout set: the cleanup must wait, not fail)
      exec(*src_, "SET lock_timeout = 0");
      exec(*src_, "SELECT pg_advisory_unlock_all()");
    } catch (const std::exception&) {
    }
    set_state("catching_up", true);
    return false;
  };
  if (!cat_.wait_for_acks(*catalog_, epoch_, hold / 3)) return give_up("not every proxy holds the partition yet");
  // A statement routed just before its proxy took the epoch may still be on its way to
  // the source: a moment for it to arrive and take the fence's lock shared (then the
  // lock below waits for it instead of the fence refusing it).
  cat_.nap(50ms);
  try {
    exec(*src_, "SET lock_timeout = " + std::to_string(std::max<long long>(1, hold.count() / 3)));
    exec(*src_, "SELECT pg_advisory_lock(" + std::to_string(kLockSpace) + ", " + std::to_string(m_.id) + ")");
    exec(*src_, "SET lock_timeout = 0");
  } catch (const pqxx::sql_error& e) {
    return give_up(std::string("open transactions on the partition: ") + e.what());
  }
  const auto locked = std::chrono::steady_clock::now();
  // Writes to the partition are fenced. A mark committed on the source now (with
  // synchronous_commit on, so the WAL goes out at once) reaches the target after every
  // earlier commit: when it is there, the target has caught up.
  const std::string mark = std::to_string(m_.id) + ", " + std::to_string(m_.attempts);
  exec(*src_, "BEGIN; SET LOCAL synchronous_commit = on; INSERT INTO splitpoint.move_marks VALUES (" + mark +
                  ", now()) ON CONFLICT (move) DO UPDATE SET attempt = excluded.attempt, at = excluded.at; COMMIT");
  for (;;) {
    pqxx::nontransaction w(*tgt_);
    if (!w.exec("SELECT 1 FROM splitpoint.move_marks WHERE (move, attempt) = (" + mark + ")").empty()) break;
    if (std::chrono::steady_clock::now() - held_from > hold * 4 / 5) return give_up("the target did not catch up in time");
    cat_.nap(1ms);
  }
  // Then the same rows on both sides; a difference now is a failed copy, not lag.
  if (cfg_.moves.verify) verify_held(suspects);
  const auto verified = std::chrono::steady_clock::now();
  flip(held_from);
  auto ms = [](auto a, auto b) { return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count(); };
  spdlog::info("move {}: cutover: {} ms to hold and lock, {} ms to catch up and verify, {} ms to flip", m_.id, ms(held_from, locked),
               ms(locked, verified), ms(verified, std::chrono::steady_clock::now()));
  return true;
}

void Move::flip(std::chrono::steady_clock::time_point held_from) {
  for (std::size_t i = 0; i < tables_.size(); ++i) exec(*src_, fence_function(i, true));
  set_state("cleanup", true,
            "UPDATE splitpoint.placement SET shard = " + catalog_->quote(m_.target) + " WHERE distribution = " +
                catalog_->quote(m_.distribution) + " AND partition = " + std::to_string(m_.partition));
  // (Held statements go on as each proxy reads the new epoch, a NOTIFY away.)
  m_.hold_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - held_from).count();
  set_state("cleanup", false);
  exec(*src_, "SELECT pg_advisory_unlock_all()");
  drop_subscription();  // (the fence refuses every write it could still bring)
  cat_.metrics().cutover_hold.observe(static_cast<double>(*m_.hold_ms) / 1000.0);
  spdlog::info("move {}: {}:{} now on {} (held {} ms)", m_.id, m_.distribution, m_.partition, m_.target, *m_.hold_ms);
}

// `sql` (one transaction on the source) takes a lock on `table` that its writers wait
// for (CREATE and DROP TRIGGER), and while it waits every statement on the table waits
// behind it: so it waits half a second at a time, 20 times, then fails (55P03) or, with
// `until_done`, waits as long as it takes. An autovacuum of the table holds a
// conflicting lock and gives it up to a waiter of deadlock_timeout: once one is seen,
// the attempts wait that long.
void Move::exec_locking(const std::string& table, const std::string& sql, bool until_done) {
  std::int64_t timeout_ms = 500;
  for (int attempt = 0;; ++attempt) {
    const bool last = attempt >= 19;
    try {
      pqxx::work w(*src_);
      w.exec("SET LOCAL lock_timeout = " + std::to_string(last && until_done ? 0 : timeout_ms));
      w.exec(sql);
      w.commit();
      return;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "55P03" || (last && !until_done) || cat_.stopping()) throw;  // (lock_not_available)
    }
    auto r = pqxx::nontransaction(*src_).exec_params(
        "SELECT (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint + 500 FROM "
        "pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.relation = to_regclass($1) AND l.granted AND "
        "a.backend_type = 'autovacuum worker' LIMIT 1",
        table);
    if (!r.empty()) {
      if (timeout_ms != r[0][0].as<std::int64_t>()) spdlog::info("move {}: an autovacuum of {} is in the way", m_.id, table);
      timeout_ms = r[0][0].as<std::int64_t>();
    }
    cat_.nap(200ms);
  }
}

bool Move::cancelled() {
  pqxx::nontransaction w(*catalog_);
  return w.exec_params("SELECT cancel FROM splitpoint.moves WHERE id = $1", m_.id)[0][0].as<bool>();
}

void Move::set_state(const std::string& state, bool bump, const std::string& extra) {
  if (state != m_.state) spdlog::info("move {}: {}", m_.id, state);
  m_.state = state;
  auto epoch = cat_.update_move(*catalog_, m_, bump, extra);
  if (bump) epoch_ = epoch;
}

void Move::wait_acks(std::chrono::milliseconds timeout) {
  if (!cat_.wait_for_acks(*catalog_, epoch_, timeout)) spdlog::warn("move {}: a live proxy did not acknowledge epoch {}", m_.id, epoch_);
}

}  // namespace splitpoint::server::moving
