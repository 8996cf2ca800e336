// Transactions that write to several shards (transactions.cross_shard_writes:
// two_phase): joining shards and the coordinator side of two-phase commit. The
// protocol and recovery are described in server/txn/two_phase.hpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"
#include "server/txn/two_phase.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

void Session::note_written(std::size_t shard) {
  if (std::find(txn_.written.begin(), txn_.written.end(), shard) == txn_.written.end()) txn_.written.push_back(shard);
}

awaitable<bool> Session::hold_backend(std::size_t shard) {
  drop_if_closed(shard);
  if (held_[shard]) co_return true;  // (in session mode it may be held since an earlier transaction)
  auto r = co_await acquire_counted(shard, true);
  if (!r.backend) co_return false;
  held_[shard] = std::move(r.backend);
  co_return true;
}

awaitable<bool> Session::join_transaction(std::size_t shard) {
  if (in_transaction_on(shard)) co_return true;
  if (!co_await hold_backend(shard)) co_return false;
  auto reply = co_await run_on(shard, txn_.begin_sql.empty() ? std::string_view("BEGIN") : std::string_view(txn_.begin_sql));
  if (reply.lost || !reply.error.empty()) {
    release_shard(shard, false);
    co_return false;
  }
  co_return true;
}

std::string Session::no_prepared_transactions_error(std::size_t shard) const {
  return error_body(sqlstate::cross_shard_write, two_phase::no_prepared_transactions(pools_[shard]->target().shard) +
                                                     "; the transaction was rolled back");
}

// What a shard's answer to PREPARE TRANSACTION means: empty when it prepared, else the
// client's error. PREPARE of a transaction that failed meanwhile rolls it back and
// answers ROLLBACK, so the tag is what tells.
std::string Session::prepare_failure(std::size_t shard, const Reply& r) {
  auto fields = r.error.empty() ? std::nullopt : proto::ErrorFields::decode(r.error);
  if (!r.lost && fields && fields->get('C') == "55000") {
    // PREPARE's 55000 is "prepared transactions are disabled": a shard whose setting
    // was not read yet (or changed since).
    pools_[shard]->set_max_prepared_transactions(0);
    return no_prepared_transactions_error(shard);
  }
  if (!r.lost && r.error.empty() && r.tag == "PREPARE TRANSACTION") return {};
  if (!r.error.empty()) return r.error;
  return error_body(r.lost ? sqlstate::connection_failure : "40001",
                    "shard \"" + pools_[shard]->target().shard + "\" could not prepare the transaction; it was rolled back");
}

awaitable<std::string> Session::commit_two_phase(std::string* notices) {
  std::string ignored_notices;
  if (!notices) notices = &ignored_notices;
  const std::string txid = two_phase::new_txid();
  auto gid = [&](std::size_t s) { return quote_literal(two_phase::gid(txid, s)); };
  std::vector<std::size_t> prepared;
  std::string error;
  // A shard known to have max_prepared_transactions = 0 cannot prepare, nor one whose
  // connection is gone: say so before preparing anything (SPEC §5).
  for (auto s : txn_.written) {
    if (!error.empty()) break;
    if (pools_[s]->max_prepared_transactions() == 0)
      error = no_prepared_transactions_error(s);
    else if (!held_[s])
      error = error_body(sqlstate::connection_failure,
                         "lost the connection to shard \"" + pools_[s]->target().shard + "\"");
  }
  // Shards the transaction only read from commit on their own, and phase one prepares
  // the written ones: all in one round trip (run_on_each).
  std::vector<std::pair<std::size_t, std::string>> statements;
  for (std::size_t s = 0; s < held_.size(); ++s)
    if (in_transaction_on(s) && std::find(txn_.written.begin(), txn_.written.end(), s) == txn_.written.end())
      statements.emplace_back(s, "COMMIT");
  const std::size_t read_only = statements.size();
  if (error.empty())
    for (auto s : txn_.written) statements.emplace_back(s, "PREPARE TRANSACTION " + gid(s));
  auto replies = co_await run_on_each(std::move(statements));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& [s, r] = replies[i];
    append_notices_and_status(r.messages, *notices);
    if (i < read_only) {
      end_shard(s, !r.lost && r.error.empty());
      continue;
    }
    // The first failure is the client's error; shards that prepared anyway are rolled
    // back below.
    auto failure = prepare_failure(s, r);
    if (failure.empty()) prepared.push_back(s);
    else if (error.empty()) error = std::move(failure);
  }
  // The decision: a 'commit' row on the recorder shard.
  bool unknown = false;
  if (error.empty()) {
    const std::string insert =
        "INSERT INTO " + two_phase::kTable + " (txid, decision) VALUES (" + quote_literal(txid) + ", 'commit')";
    auto r = co_await run_on(0, insert);
    const auto missing = [&](const char* code) { return r.error.find(std::string("C") + code) != std::string::npos; };
    if (!r.lost && (missing(sqlstate::undefined_table) || missing("3F000"))) {  // (3F000: no schema splitpoint)
      // (Sessions creating it at once: one wins, the others fail but their INSERT works.)
      auto created = co_await run_on(0, two_phase::kCreateTable);
      if (!created.lost) r = co_await run_on(0, insert);
    }
    if (r.lost) {
      unknown = true;
      error = error_body(sqlstate::transaction_resolution_unknown,
                         "lost the connection to the recorder shard while committing; the transaction is prepared "
                         "on every shard it wrote and recovery will commit or roll it back");
    } else if (!r.error.empty()) {
      auto e = proto::ErrorFields::decode(r.error);
      error = error_body(e ? e->get('C') : std::string_view("XX000"),
                         "two-phase commit could not record its decision; the transaction was rolled back: " +
                             (e ? std::string(e->get('M')) : std::string()));
    }
  }
  if (!error.empty()) {
    for (auto s : txn_.written) {
      if (!held_[s]) continue;
      bool was_prepared = std::find(prepared.begin(), prepared.end(), s) != prepared.end();
      if (unknown && was_prepared) {
        end_shard(s, held_[s]->status == 'I');  // left for recovery to decide
        continue;
      }
      // (Not a conditional inside the co_await: GCC 12 destroys its temporary twice.)
      std::string undo = "ROLLBACK";
      if (was_prepared) undo += " PREPARED " + gid(s);
      auto r = co_await run_on(s, undo);
      end_shard(s, !r.lost && r.error.empty());
    }
    server_.metrics().two_phase(unknown ? Metrics::TwoPhase::unknown : Metrics::TwoPhase::rolled_back);
    co_return error;
  }
  // Phase two: decided; a shard that fails here is finished by recovery. All at once.
  bool all = true;
  std::vector<std::pair<std::size_t, std::string>> commits;
  for (auto s : prepared) commits.emplace_back(s, "COMMIT PREPARED " + gid(s));
  auto committed = co_await run_on_each(std::move(commits));
  for (const auto& [s, r] : committed) {
    if (r.lost || !r.error.empty()) {
      all = false;
      spdlog::warn("[{}] COMMIT PREPARED {} on shard {} failed; recovery will finish it", id_, two_phase::gid(txid, s),
                   pools_[s]->target().shard);
    }
    end_shard(s, !r.lost && r.error.empty());
  }
  // The record goes later, in a batch (two_phase::defer_delete), unless too many wait.
  if (all && !two_phase::defer_delete(pools_[0], txid))
    co_await run_on(0, "DELETE FROM " + two_phase::kTable + " WHERE txid = " + quote_literal(txid));
  server_.metrics().two_phase(Metrics::TwoPhase::committed);
  co_return std::string();
}

awaitable<bool> Session::end_implicit_transaction() {
  co_await pump_.drain();  // the current shard's part of the batch, up to an added Sync
  if (closing_) co_return false;
  bool failed = fe_.batch_failed || fe_.proxy_failed_txn || fe_.client_txn == 'E';
  for (auto& b : held_)
    if (b && b->status == 'E') failed = true;
  std::string error;
  if (!failed && txn_.written.size() > 1) {
    error = co_await commit_two_phase();
  } else {
    std::vector<std::size_t> order;
    for (std::size_t s = 0; s < held_.size(); ++s)
      if (held_[s] && (!txn_.write_shard || s != *txn_.write_shard)) order.push_back(s);
    if (txn_.write_shard && held_[*txn_.write_shard]) order.push_back(*txn_.write_shard);
    // Ended at once (run_on_each), the written shard's answer last.
    std::vector<std::pair<std::size_t, std::string>> statements;
    for (auto s : order) {
      if (held_[s]->status == 'I') {  // an error before its BEGIN: PostgreSQL rolled it back
        end_shard(s, true);
        continue;
      }
      statements.emplace_back(s, failed ? "ROLLBACK" : "COMMIT");
    }
    auto replies = co_await run_on_each(std::move(statements));
    for (const auto& [s, reply] : replies) {
      if (!failed && error.empty()) {
        if (!reply.error.empty()) error = reply.error;
        else if (reply.lost || reply.tag != "COMMIT")
          error = error_body(reply.lost ? sqlstate::connection_failure : "40000",
                             "the batch could not commit on shard \"" + pools_[s]->target().shard + "\"");
      }
      end_shard(s, !reply.lost && reply.error.empty());
    }
  }
  if (!failed && error.empty()) apply_session_commands();
  else fe_.pending_commands.clear();
  reset_transaction();
  fe_.batch_failed = false;
  std::string out;
  if (!error.empty()) {
    proto::Writer w(out, 'E');
    w.bytes(error).finish();
  }
  proto::ReadyForQuery{'I'}.encode(out);
  co_await stream_.write(out);
  co_return true;
}

}  // namespace splitpoint::server
