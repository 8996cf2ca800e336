// Two-phase commit for transactions that wrote to several shards
// (transactions.cross_shard_writes: two_phase, SPEC §5).
//
// COMMIT runs PREPARE TRANSACTION '<gid>' on every written shard, then records the
// decision as a row of the table splitpoint.two_phase_decisions on the first shard of
// the config (the recorder; server/txn/own_tables.hpp), then COMMIT PREPARED
// everywhere; the row is deleted later, in a batch
// (defer_delete). The row is the durable decision record: it lives in PostgreSQL, so it
// survives the proxy's container being replaced.
//
// Recovery resolves prepared transactions whose owner died: a gid prepared longer
// ago than kRecoverAfter is committed if the recorder holds a 'commit' row for it, else
// rolled back — after inserting an 'abort' row for it. The table's primary key makes
// the two writers agree: whichever of the coordinator's 'commit' and recovery's
// 'abort' is inserted first decides, so a slow coordinator can never commit a
// transaction that recovery rolled back on another shard.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/net/asio.hpp"
#include "server/state/metrics.hpp"
#include "server/cluster/runtime.hpp"
#include "server/txn/own_tables.hpp"

namespace splitpoint::server {

class Proxy;

namespace two_phase {

inline constexpr std::string_view kGidPrefix = "splitpoint:";
inline constexpr std::chrono::seconds kRecoverAfter{5};
inline constexpr std::chrono::seconds kRecoverEvery{5};
inline const std::string kTable = own_tables::kDecisions;
inline const std::string kCreateTable = std::string(own_tables::kEnsureSchema) + "CREATE TABLE IF NOT EXISTS " +
                                        kTable +
                                        " (txid text PRIMARY KEY, decision text NOT NULL, "
                                        "decided_at timestamptz NOT NULL DEFAULT now())";
// The records of a proxy before this one (public.splitpoint_2pc), carried over and the
// old table dropped, in one transaction; nothing if there is none. Recovery runs it
// before it decides anything, so that a transaction such a proxy left in doubt is
// still committed when its record says so. (Each pass: an older proxy still running
// beside this one makes the old table again at its next two-shard COMMIT.)
inline const std::string kMoveOldTable =
    "DO $splitpoint$BEGIN IF pg_catalog.to_regclass('public.splitpoint_2pc') IS NOT NULL THEN "
    "LOCK TABLE public.splitpoint_2pc IN ACCESS EXCLUSIVE MODE; INSERT INTO " +
    kTable +
    " (txid, decision, decided_at) SELECT txid, decision, decided_at FROM public.splitpoint_2pc "
    "ON CONFLICT (txid) DO NOTHING; DROP TABLE public.splitpoint_2pc; END IF; END$splitpoint$";

// A fresh transaction id (random, unique across proxy processes).
std::string new_txid();
// The prepared transaction's identifier on shard `shard_index`.
std::string gid(const std::string& txid, std::size_t shard_index);
// The transaction id inside a gid made by gid(); nullopt for any other gid.
std::optional<std::string> txid_of(std::string_view gid);

// What an operator must change when shard `shard` has max_prepared_transactions = 0
// (the SPT01 of a transaction that wrote to it and another shard, /readyz, the log).
std::string no_prepared_transactions(std::string_view shard);
// Shards whose pools read max_prepared_transactions = 0 (Pool::max_prepared_transactions),
// in config order; those not read yet are not listed.
std::vector<std::string> shards_without_prepared_transactions(const Runtime& rt);

// Decision records of transactions committed on every shard, waiting to be deleted:
// the committing session hands its record over (`defer_delete`) instead of deleting it
// before it answers — one round trip and one write on the recorder fewer per commit —
// and the recovery loop deletes them in batches, on the pool the record was written
// through (if it still exists). At most kMaxDeferred wait; past that the session
// deletes its own. A record whose deletion failed, or left when the proxy stopped, is
// deleted by recovery after the hour (recover_once).
inline constexpr std::size_t kMaxDeferred = 100000;
bool defer_delete(const std::shared_ptr<Pool>& pool, std::string txid);
awaitable<void> delete_deferred(std::chrono::milliseconds timeout);

// Deletes the deferred records, then runs recovery if the config asks for two_phase,
// every kRecoverEvery while the server runs; the first pass at start-up.
awaitable<void> recovery_loop(Proxy& server);
// One pass over every shard; returns how many prepared transactions it resolved.
awaitable<int> recover_once(const Runtime& rt, Metrics& metrics);

}  // namespace two_phase
}  // namespace splitpoint::server
