// The client's transaction over shards, beyond the status the client was told
// (Frontend): which shards it reached and wrote, its BEGIN and savepoints replayed on
// each shard it joins, and its end on several shards (execute/two_phase.cpp:
// transactions.cross_shard_writes: two_phase, the coordinator side of two-phase commit;
// the protocol and recovery are in server/txn/two_phase.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;

class ShardTransaction {
 public:
  explicit ShardTransaction(Session& s) : s_(s) {}

  // transactions.cross_shard_writes: two_phase (inline, after Session: session.hpp).
  bool two_phase() const;
  void note_written(std::size_t shard);
  // Makes `shard` part of the open transaction (held, BEGIN sent). False on failure.
  awaitable<bool> join_transaction(std::size_t shard);
  // A backend of `shard` held by the session (BEGIN not sent: send_on's `join` sends it
  // with the statement). False: none could be had.
  awaitable<bool> hold_backend(std::size_t shard);
  // Commits a transaction that wrote to several shards; "" or the ErrorResponse body.
  // Notices the shards raised while committing are appended to `notices`.
  awaitable<std::string> commit_two_phase(std::string* notices = nullptr);
  // The client's Sync ends an `implicit` transaction: commit (or roll back) on every
  // shard, then one ReadyForQuery 'I'.
  awaitable<bool> end_implicit_transaction();

  std::uint64_t seq = 0;  // changes when a transaction ends (the deadlock search)
  // The backend whose statement break_deadlock cancelled (0: none), and the cycle, for
  // the client's 40P01.
  std::int32_t deadlock_pid = 0;
  std::string deadlock_detail;
  std::string begin_sql;  // the client's BEGIN, replayed on each shard joined
  // The transaction's savepoints, outermost first, as the client made them; each
  // shard gets those it lacks before its next statement of the transaction
  // (BackendState::savepoints).
  std::vector<std::string> savepoints;
  std::optional<std::size_t> write_shard;
  std::vector<std::size_t> written;  // two_phase: every shard this transaction wrote
  // Extended protocol outside a transaction block: the current backend ran a write
  // since the client's last Sync.
  bool batch_wrote = false;
  // That batch moved on to another shard: the proxy turned it into a transaction
  // block on every shard it touches (BEGIN after the write), finished at the Sync.
  bool implicit = false;
  // The proxy's own block around a client's statements (run_parts): a write that
  // fails in it is rolled back.
  bool own = false;
  bool ddl = false;  // ran DDL: table shapes are forgotten again when it ends (committed by then)

 private:
  // SPT01 for a transaction that wrote to `shard`, which has max_prepared_transactions = 0.
  std::string no_prepared_transactions_error(std::size_t shard) const;
  // A shard's answer to PREPARE TRANSACTION (lost, its error, its tag): "" when it
  // prepared, else the client's error.
  std::string prepare_failure(std::size_t shard, bool lost, const std::string& error, std::string_view tag);

  Session& s_;
};

}  // namespace splitpoint::server
