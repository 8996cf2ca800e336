// Transactions that write to several shards (transactions.cross_shard_writes:
// two_phase): joining shards and the coordinator side of two-phase commit. The
// protocol and recovery are described in server/txn/two_phase.hpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/execute/shard_transaction.hpp"

#include "server/session/session.hpp"
#include "server/net/wire.hpp"
#include "server/txn/two_phase.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

void ShardTransaction::note_written(std::size_t shard) {
  if (std::find(written.begin(), written.end(), shard) == written.end()) written.push_back(shard);
}

awaitable<bool> ShardTransaction::hold_backend(std::size_t shard) {
  s_.drop_if_closed(shard);
  if (s_.held_[shard]) co_return true;  // (in session mode it may be held since an earlier transaction)
  auto r = co_await s_.acquire_counted(shard, true);
  if (!r.backend) co_return false;
  s_.held_[shard] = std::move(r.backend);
  co_return true;
}

awaitable<bool> ShardTransaction::join_transaction(std::size_t shard) {
  if (s_.in_transaction_on(shard)) co_return true;
  if (!co_await hold_backend(shard)) co_return false;
  auto reply = co_await s_.run_on(shard, begin_sql.empty() ? std::string_view("BEGIN") : std::string_view(begin_sql));
  if (reply.lost || !reply.error.empty()) {
    s_.release_shard(shard, false);
    co_return false;
  }
  co_return true;
}

std::string ShardTransaction::no_prepared_transactions_error(std::size_t shard) const {
  return error_body(sqlstate::cross_shard_write, two_phase::no_prepared_transactions(s_.pools_[shard]->target().shard) +
                                                     "; the transaction was rolled back");
}

// What a shard's answer to PREPARE TRANSACTION means: empty when it prepared, else the
// client's error. PREPARE of a transaction that failed meanwhile rolls it back and
// answers ROLLBACK, so the tag is what tells.
std::string ShardTransaction::prepare_failure(std::size_t shard, bool lost, const std::string& error,
                                              std::string_view tag) {
  auto fields = error.empty() ? std::nullopt : proto::ErrorFields::decode(error);
  if (!lost && fields && fields->get('C') == "55000") {
    // PREPARE's 55000 is "prepared transactions are disabled": a shard whose setting
    // was not read yet (or changed since).
    s_.pools_[shard]->set_max_prepared_transactions(0);
    return no_prepared_transactions_error(shard);
  }
  if (!lost && error.empty() && tag == "PREPARE TRANSACTION") return {};
  if (!error.empty()) return error;
  return error_body(lost ? sqlstate::connection_failure : "40001",
                    "shard \"" + s_.pools_[shard]->target().shard + "\" could not prepare the transaction; it was rolled back");
}

awaitable<std::string> ShardTransaction::commit_two_phase(std::string* notices) {
  std::string ignored_notices;
  if (!notices) notices = &ignored_notices;
  const std::string txid = two_phase::new_txid();
  auto gid = [&](std::size_t s) { return quote_literal(two_phase::gid(txid, s)); };
  std::vector<std::size_t> prepared;
  std::string error;
  // A shard known to have max_prepared_transactions = 0 cannot prepare, nor one whose
  // connection is gone: say so before preparing anything (SPEC §5).
  for (auto s : written) {
    if (!error.empty()) break;
    if (s_.pools_[s]->max_prepared_transactions() == 0)
      error = no_prepared_transactions_error(s);
    else if (!s_.held_[s])
      error = error_body(sqlstate::connection_failure,
                         "lost the connection to shard \"" + s_.pools_[s]->target().shard + "\"");
  }
  // Shards the transaction only read from commit on their own, and phase one prepares
  // the written ones: all in one round trip (run_on_each).
  std::vector<std::pair<std::size_t, std::string>> statements;
  for (std::size_t s = 0; s < s_.held_.size(); ++s)
    if (s_.in_transaction_on(s) && std::find(written.begin(), written.end(), s) == written.end())
      statements.emplace_back(s, "COMMIT");
  const std::size_t read_only = statements.size();
  if (error.empty())
    for (auto s : written) statements.emplace_back(s, "PREPARE TRANSACTION " + gid(s));
  auto replies = co_await s_.run_on_each(std::move(statements));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& [s, r] = replies[i];
    append_notices_and_status(r.messages, *notices);
    if (i < read_only) {
      s_.end_shard(s, !r.lost && r.error.empty());
      continue;
    }
    // The first failure is the client's error; shards that prepared anyway are rolled
    // back below.
    auto failure = prepare_failure(s, r.lost, r.error, r.tag);
    if (failure.empty()) prepared.push_back(s);
    else if (error.empty()) error = std::move(failure);
  }
  // The decision: a 'commit' row on the recorder shard.
  bool unknown = false;
  if (error.empty()) {
    const std::string insert =
        "INSERT INTO " + two_phase::kTable + " (txid, decision) VALUES (" + quote_literal(txid) + ", 'commit')";
    auto r = co_await s_.run_on(0, insert);
    const auto missing = [&](const char* code) { return r.error.find(std::string("C") + code) != std::string::npos; };
    if (!r.lost && (missing(sqlstate::undefined_table) || missing("3F000"))) {  // (3F000: no schema splitpoint)
      // (Sessions creating it at once: one wins, the others fail but their INSERT works.)
      auto created = co_await s_.run_on(0, two_phase::kCreateTable);
      if (!created.lost) r = co_await s_.run_on(0, insert);
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
    for (auto s : written) {
      if (!s_.held_[s]) continue;
      bool was_prepared = std::find(prepared.begin(), prepared.end(), s) != prepared.end();
      if (unknown && was_prepared) {
        s_.end_shard(s, s_.held_[s]->status == 'I');  // left for recovery to decide
        continue;
      }
      // (Not a conditional inside the co_await: GCC 12 destroys its temporary twice.)
      std::string undo = "ROLLBACK";
      if (was_prepared) undo += " PREPARED " + gid(s);
      auto r = co_await s_.run_on(s, undo);
      s_.end_shard(s, !r.lost && r.error.empty());
    }
    s_.server_.metrics().two_phase(unknown ? Metrics::TwoPhase::unknown : Metrics::TwoPhase::rolled_back);
    co_return error;
  }
  // Phase two: decided; a shard that fails here is finished by recovery. All at once.
  bool all = true;
  std::vector<std::pair<std::size_t, std::string>> commits;
  for (auto s : prepared) commits.emplace_back(s, "COMMIT PREPARED " + gid(s));
  auto committed = co_await s_.run_on_each(std::move(commits));
  for (const auto& [s, r] : committed) {
    if (r.lost || !r.error.empty()) {
      all = false;
      spdlog::warn("[{}] COMMIT PREPARED {} on shard {} failed; recovery will finish it", s_.id_, two_phase::gid(txid, s),
                   s_.pools_[s]->target().shard);
    }
    s_.end_shard(s, !r.lost && r.error.empty());
  }
  // The record goes later, in a batch (two_phase::defer_delete), unless too many wait.
  if (all && !two_phase::defer_delete(s_.pools_[0], txid))
    co_await s_.run_on(0, "DELETE FROM " + two_phase::kTable + " WHERE txid = " + quote_literal(txid));
  s_.server_.metrics().two_phase(Metrics::TwoPhase::committed);
  co_return std::string();
}

awaitable<bool> ShardTransaction::end_implicit_transaction() {
  co_await s_.pump_.drain();  // the current shard's part of the batch, up to an added Sync
  if (s_.closing_) co_return false;
  bool failed = s_.fe_.batch_failed || s_.fe_.proxy_failed_txn || s_.fe_.client_txn == 'E';
  for (auto& b : s_.held_)
    if (b && b->status == 'E') failed = true;
  std::string error;
  if (!failed && written.size() > 1) {
    error = co_await commit_two_phase();
  } else {
    std::vector<std::size_t> order;
    for (std::size_t s = 0; s < s_.held_.size(); ++s)
      if (s_.held_[s] && (!write_shard || s != *write_shard)) order.push_back(s);
    if (write_shard && s_.held_[*write_shard]) order.push_back(*write_shard);
    // Ended at once (run_on_each), the written shard's answer last.
    std::vector<std::pair<std::size_t, std::string>> statements;
    for (auto s : order) {
      if (s_.held_[s]->status == 'I') {  // an error before its BEGIN: PostgreSQL rolled it back
        s_.end_shard(s, true);
        continue;
      }
      statements.emplace_back(s, failed ? "ROLLBACK" : "COMMIT");
    }
    auto replies = co_await s_.run_on_each(std::move(statements));
    for (const auto& [s, reply] : replies) {
      if (!failed && error.empty()) {
        if (!reply.error.empty()) error = reply.error;
        else if (reply.lost || reply.tag != "COMMIT")
          error = error_body(reply.lost ? sqlstate::connection_failure : "40000",
                             "the batch could not commit on shard \"" + s_.pools_[s]->target().shard + "\"");
      }
      s_.end_shard(s, !reply.lost && reply.error.empty());
    }
  }
  if (!failed && error.empty()) s_.apply_session_commands();
  else s_.fe_.pending_commands.clear();
  s_.reset_transaction();
  s_.fe_.batch_failed = false;
  std::string out;
  if (!error.empty()) {
    proto::Writer w(out, 'E');
    w.bytes(error).finish();
  }
  proto::ReadyForQuery{'I'}.encode(out);
  co_await s_.stream_.write(out);
  co_return true;
}

}  // namespace splitpoint::server
