#include "server/txn/two_phase.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <set>

#include "server/cluster/proxy.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server::two_phase {

std::string new_txid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int half = 0; half < 2; ++half) {
    auto v = rng();
    for (int i = 0; i < 16; ++i, v >>= 4) id += kHex[v & 15];
  }
  return id;
}

std::string gid(const std::string& txid, std::size_t shard_index) {
  return std::string(kGidPrefix) + txid + ":" + std::to_string(shard_index);
}

std::optional<std::string> txid_of(std::string_view g) {
  if (g.substr(0, kGidPrefix.size()) != kGidPrefix) return std::nullopt;
  g.remove_prefix(kGidPrefix.size());
  auto colon = g.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return std::string(g.substr(0, colon));
}

std::string no_prepared_transactions(std::string_view shard) {
  return "shard \"" + std::string(shard) +
         "\" has max_prepared_transactions = 0: set it above 0 (e.g. to max_connections) and restart it to allow "
         "writes to several shards in one transaction, or set transactions.cross_shard_writes: refuse";
}

std::vector<std::string> shards_without_prepared_transactions(const Runtime& rt) {
  std::vector<std::string> out;
  for (auto& shard : rt.shards) {
    for (auto& pool : shard->all()) {
      if (pool->max_prepared_transactions() == 0) {
        out.push_back(shard->shard().name);
        break;
      }
    }
  }
  return out;
}

namespace {

using Identity = ShardPools::Identity;

// A connection to the shard as `who` (a client's identity, the shard's configured user
// standing in for it as in a session), or without `who` as the shard's configured user.
awaitable<std::unique_ptr<Backend>> connect(const Runtime& rt, std::size_t shard, const Identity* who,
                                            std::shared_ptr<Pool>& pool) {
  const auto& def = rt.shards[shard]->shard();
  if (!who && def.user.empty()) co_return nullptr;
  pool = who ? rt.shards[shard]->get(who->user, who->password, who->database)
             : rt.shards[shard]->get(def.user, def.password, def.database);
  auto r = co_await pool->acquire(rt.config.timeouts.server_connect);
  co_return std::move(r.backend);
}

// Every client identity some shard without a configured user has seen.
std::vector<Identity> client_identities(const Runtime& rt) {
  std::vector<Identity> out;
  for (auto& shard : rt.shards)
    for (auto& who : shard->identities())
      if (std::find(out.begin(), out.end(), who) == out.end()) out.push_back(who);
  return out;
}

// One pass over every shard, connected as `who` (see connect).
awaitable<int> recover_as(const Runtime& rt, Metrics& metrics, const Identity* who) {
  const auto timeout = rt.config.timeouts.server_connect;
  std::shared_ptr<Pool> rec_pool;
  auto rec = co_await connect(rt, 0, who, rec_pool);
  if (!rec) {
    spdlog::warn("two-phase recovery: no connection to the recorder shard \"{}\"{}", rt.shards[0]->shard().name,
                 who ? " as user \"" + who->user + "\"" : std::string());
    co_return 0;
  }
  int resolved = 0;
  // (A client may lack CREATE where the table is: its pass goes on, as the table exists
  // once its own transactions have been decided.)
  bool rec_ok = (co_await simple_query(*rec, kCreateTable, timeout)).ok() || who;
  // An older proxy's records first: deciding without them would roll back what they
  // say was committed.
  if (rec_ok) {
    auto moved = co_await simple_query(*rec, kMoveOldTable, timeout);
    rec_ok = moved.ok();
    if (!rec_ok)
      spdlog::warn("two-phase recovery: cannot move public.splitpoint_2pc to {} on shard \"{}\"{}: {}", kTable,
                   rt.shards[0]->shard().name, who ? " as user \"" + who->user + "\"" : std::string(),
                   moved.error_message);
  }
  // Transactions still prepared somewhere keep their record; `listed` stays true only if
  // every shard's list was read (see the DELETE below).
  std::set<std::string> still_prepared;
  bool listed = rec_ok;
  for (std::size_t s = 0; s < rt.shards.size() && rec_ok; ++s) {
    std::shared_ptr<Pool> pool;
    auto b = co_await connect(rt, s, who, pool);
    if (!b) {
      listed = false;
      continue;
    }
    auto list = co_await simple_query(
        *b,
        "SELECT gid, prepared < now() - interval '" + std::to_string(kRecoverAfter.count()) +
            " seconds', owner = current_user FROM pg_catalog.pg_prepared_xacts WHERE gid LIKE 'splitpoint:%' AND "
            "database = current_database()",
        timeout);
    bool ok = list.ok();
    for (auto& row : list.rows) {
      if (!ok || row.size() < 3 || !row[0]) break;
      auto txid = txid_of(*row[0]);
      if (!txid) continue;
      // Too recent (its coordinator may still be at work), or, as a client, another
      // user's (its owner's pass finishes it).
      if (row[1] != "t" || (who && row[2] != "t")) {
        still_prepared.insert(*txid);
        continue;
      }
      auto decided = co_await simple_query(
          *rec,
          "INSERT INTO " + kTable + " (txid, decision) VALUES (" + quote_literal(*txid) +
              ", 'abort') ON CONFLICT (txid) DO NOTHING; SELECT decision FROM " + kTable +
              " WHERE txid = " + quote_literal(*txid),
          timeout);
      if (!decided.ok() || decided.rows.empty() || !decided.rows[0][0]) {
        rec_ok = decided.ok();
        break;
      }
      bool commit = *decided.rows[0][0] == "commit";
      auto done = co_await simple_query(
          *b, std::string(commit ? "COMMIT PREPARED " : "ROLLBACK PREPARED ") + quote_literal(*row[0]), timeout);
      ok = done.ok() || done.error_code == "42704";  // 42704: resolved meanwhile by someone else
      if (!ok) still_prepared.insert(*txid);
      if (done.ok()) {
        ++resolved;
        metrics.two_phase(commit ? Metrics::TwoPhase::recovered_committed : Metrics::TwoPhase::recovered_rolled_back);
        spdlog::warn("two-phase recovery: {} {} on shard \"{}\"", commit ? "committed" : "rolled back", *row[0],
                     rt.shards[s]->shard().name);
      }
    }
    listed = listed && ok;  // (a failure above stops the list: the rest went unread)
    bool reusable = ok && b->status == 'I';
    pool->release(std::move(b), reusable);
  }
  // A row outlives its transaction only when the coordinator died before deleting it;
  // such rows go after an hour, but never one whose transaction is still prepared on a
  // shard (a shard down for the hour would otherwise find no decision when it is back,
  // and roll back what the others committed), nor any while a shard could not be listed.
  // A row older than the hour was written after its PREPAREs, so they were listed above.
  if (rec_ok && listed) {
    std::string sql = "DELETE FROM " + kTable + " WHERE decided_at < now() - interval '1 hour'";
    for (auto& txid : still_prepared) sql += " AND txid <> " + quote_literal(txid);
    rec_ok = (co_await simple_query(*rec, sql, timeout)).ok();
  }
  bool reusable = rec_ok && rec->status == 'I';
  rec_pool->release(std::move(rec), reusable);
  co_return resolved;
}

}  // namespace

// As the shards' configured users when the recorder has one, then as each client that
// used a shard without one: a prepared transaction can be finished only by the user
// that prepared it (or a superuser), and a proxy without shard users knows no other
// credentials that log in. After a restart such transactions wait for their owner's
// first login.
awaitable<int> recover_once(const Runtime& rt, Metrics& metrics) {
  int resolved = 0;
  if (!rt.shards[0]->shard().user.empty()) resolved += co_await recover_as(rt, metrics, nullptr);
  for (const Identity& who : client_identities(rt)) resolved += co_await recover_as(rt, metrics, &who);
  co_return resolved;
}

namespace {

// (Weak: a static must not own pools past the io_contexts their connections use.)
using Deferred = std::pair<std::weak_ptr<Pool>, std::string>;  // (pool, txid)
std::mutex deferred_mu;
std::vector<Deferred> deferred;

bool same_pool(const std::weak_ptr<Pool>& a, const std::weak_ptr<Pool>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

bool defer_delete(const std::shared_ptr<Pool>& pool, std::string txid) {
  std::lock_guard lock(deferred_mu);
  if (deferred.size() >= kMaxDeferred) return false;
  deferred.emplace_back(pool, std::move(txid));
  return true;
}

awaitable<void> delete_deferred(std::chrono::milliseconds timeout) {
  std::vector<Deferred> batch;
  {
    std::lock_guard lock(deferred_mu);
    batch.swap(deferred);
  }
  // One DELETE per pool and up to 1000 records; a pool gone since (a reload) leaves its
  // records to the hourly deletion.
  std::stable_sort(batch.begin(), batch.end(), [](auto& a, auto& b) { return a.first.owner_before(b.first); });
  for (std::size_t i = 0; i < batch.size();) {
    const std::size_t first = i;
    std::string sql = "DELETE FROM " + kTable + " WHERE txid IN (";
    for (; i < batch.size() && same_pool(batch[i].first, batch[first].first) && i - first < 1000; ++i)
      sql += (i > first ? ", " : "") + quote_literal(batch[i].second);
    sql += ")";
    auto pool = batch[first].first.lock();
    if (!pool) continue;
    auto r = co_await pool->acquire(timeout);
    if (!r.backend) continue;  // (left to the hourly deletion)
    auto q = co_await simple_query(*r.backend, sql, timeout);
    const bool reusable = q.ok() && r.backend->status == 'I';
    pool->release(std::move(r.backend), reusable);
  }
}

awaitable<void> recovery_loop(Proxy& server) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::set<std::string> warned;  // shards whose max_prepared_transactions = 0 was logged
  while (!server.shutting_down()) {
    auto rt = server.runtime();
    if (!rt) co_return;
    co_await delete_deferred(rt->config.timeouts.server_connect);
    if (rt->config.cross_shard_writes == config::CrossShardWrites::two_phase) {
      co_await recover_once(*rt, server.metrics());
      // Once per shard (again if it was fixed and broke again); the pools learn the
      // value at their first connection, recovery's own at start-up.
      auto without = shards_without_prepared_transactions(*rt);
      for (auto& name : without)
        if (warned.insert(name).second) spdlog::warn("two-phase commit: {}", no_prepared_transactions(name));
      std::erase_if(warned, [&](const std::string& n) {
        return std::find(without.begin(), without.end(), n) == without.end();
      });
    }
    rt.reset();  // (not kept while asleep: it would keep the pools of a dropped shard open)
    timer.expires_after(kRecoverEvery);
    co_await timer.async_wait(use_nothrow);
  }
}

}  // namespace splitpoint::server::two_phase
