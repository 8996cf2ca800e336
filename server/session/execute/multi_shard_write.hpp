// A write several shards must apply (an UPDATE/DELETE without a key, a multi-row
// INSERT split per shard, DDL, a write to a reference table), or EXPLAIN of any
// statement on several shards (each shard's plan, under a line naming the shard in the
// text format; a read's EXPLAIN writes nothing): the executor that runs
// it on each shard in turn through Session::run_on and answers the client with one
// combined result per statement of the Query — one description, notices shown once,
// the rows each shard returned, and a tag summing their counts — or, if any shard
// failed, one error naming where it was applied and where not. Outside a transaction
// block each shard commits on its own; inside one (cross_shard_writes: two_phase)
// every target joins the block first and the COMMIT is a two-phase commit
// (server/session/execute/two_phase.cpp). docs/transactions.md.
//
// The shards run in turn, in config order, and on purpose: that is the order in which
// the write takes its row locks, so two sessions running the same write never deadlock,
// as on one PostgreSQL. (Sending it to every shard before reading any answer, one round
// trip instead of one per shard, was tried and dropped: the same transaction repeated
// by 4 pgbench clients then deadlocked across shards again and again, about 2,000 → 300
// tps. test_deadlocks.py same_write_on_several_shards_never_deadlocks.)
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "routing/router.hpp"
#include "server/net/asio.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

// The error of a write to several shards that failed on `failed` with `first_error` (a
// shard's ErrorResponse body) and was applied on `applied` (empty: nowhere, or rolled
// back everywhere). Applied nowhere — the outcome of one PostgreSQL — it is PostgreSQL's
// own error, every field of it but a position and a CONTEXT (they count the text and the
// rows that shard was sent, not the client's), the shards named in a HINT; applied
// somewhere, the message says so: "<what> failed on shard(s) s1; it was applied on
// shard(s) s0: <message>".
std::string several_shards_error(std::string_view first_error, std::string_view what, const std::string& failed,
                                 const std::string& applied);

class MultiShardWrite {
 public:
  // `ext`: the statement runs in the extended protocol with those parameters.
  MultiShardWrite(Session& session, const routing::Route& route, std::string_view sql,
                  const ScatterRequest* ext);

  // False: the session ends.
  awaitable<bool> run();

 private:
  // Inside a block: every target joins it. False: refused (the error was sent).
  awaitable<bool> join_block(bool& ok);
  // SET key = <value> (Route::key_guard): the shard runs the guarded statement.
  bool guarded(std::size_t shard) const;
  // The statement may write there (not a read such as EXPLAIN, not guarded).
  bool writes_on(std::size_t shard) const;
  // Runs the statement on one shard and folds its answer into the result.
  awaitable<void> run_on(std::size_t shard);
  void fold(std::size_t shard, const Session::Reply& reply);
  // The error of a write that failed on some shards.
  void fail(std::string& out) const;
  awaitable<void> answer();

  // The answer to one statement of the Query (a Query may hold several: each shard
  // answers each of them, in order, ending with its CommandComplete).
  struct Result {
    std::string rows;          // its description (once), notices and the rows returned
    // A split INSERT's RETURNING rows per shard, put back in the statement's row order.
    std::vector<std::vector<std::string>> returned;
    bool described = false;
    std::string verb;          // "UPDATE", "INSERT", "CREATE TABLE", ...
    long long total = 0;       // the shards' counts summed
    bool counted = false;
    bool ended = false;        // its CommandComplete (or EmptyQueryResponse) came
    bool empty_query = false;  // EmptyQueryResponse instead of a CommandComplete
    std::set<std::size_t> explained_shard;  // EXPLAIN: shards whose header line is out
  };
  void append_returned(const Result& r, std::string& out) const;

  Session& s_;
  const routing::Route& route_;
  std::string_view sql_;
  const ScatterRequest* ext_;
  std::vector<std::size_t> targets_;
  bool in_block_ = false;
  std::string first_error_, applied_, failed_;
  std::vector<Result> results_;
  std::vector<std::string> notices_seen_;
};

}  // namespace splitpoint::server
