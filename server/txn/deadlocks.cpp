#include "server/txn/deadlocks.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>

#include "server/net/backend.hpp"
#include "server/net/pool.hpp"
#include "server/cluster/proxy.hpp"
#include "server/net/wire.hpp"
#include "server/txn/own_tables.hpp"

namespace splitpoint::server::deadlocks {

namespace {

using Clock = std::chrono::steady_clock;
using wait_graph::Held;
using wait_graph::Wait;

std::string server_of(const Pool& pool) { return pool.target().host + ":" + std::to_string(pool.target().port); }

// "{12,345}" (PostgreSQL's text form of an int[]) as numbers.
std::vector<std::int32_t> int_array(std::string_view text) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < text.size();) {
    std::int32_t v = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec == std::errc()) {
      out.push_back(v);
      i = static_cast<std::size_t>(end - text.data());
    } else {
      ++i;
    }
  }
  return out;
}

// Every process of the asker's database that waits for a lock, and for whom (not only
// this proxy's backends: a chain of waits may pass through another proxy's or a direct
// client's process).
constexpr const char* kWaits =
    "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity "
    "WHERE wait_event_type = 'Lock' AND datname = current_database()";

// The proxies' sessions on several shards, published on the first shard (unlogged:
// nothing of it needs to survive a crash; server/txn/own_tables.hpp). An older proxy's
// table in schema public goes (when this user may drop it): its rows are a minute's.
const std::string kPublished = own_tables::kSpanningSessions;
const std::string kPublishedTable =
    std::string(own_tables::kEnsureSchema) + "CREATE UNLOGGED TABLE IF NOT EXISTS " + kPublished +
    " (proxy text NOT NULL, session bigint NOT NULL, txn bigint NOT NULL, shard text NOT NULL, pid int NOT NULL, "
    "first_seen bigint NOT NULL, updated timestamptz NOT NULL DEFAULT now()); "
    "DO $splitpoint$BEGIN DROP TABLE IF EXISTS public.splitpoint_spanning_sessions; "
    "EXCEPTION WHEN insufficient_privilege THEN NULL; END$splitpoint$;";

// One backend of a session on several shards, as its proxy publishes it: the shard by
// name (every proxy of a deployment knows the same shards by the same names, not
// necessarily by the same host names) and when that proxy first saw the transaction
// (milliseconds since 1970, its clock): the youngest transaction of a cycle is cancelled.
struct Published {
  std::string proxy;
  std::uint64_t session = 0, txn = 0;
  std::string shard;
  std::int32_t pid = 0;
  std::int64_t first_seen = 0;
};

// The search's own connections, one per pool asked through (its server and user).
class Askers {
 public:
  // Which processes of `pool`'s database (shard number `shard`) wait for a lock, and
  // for whom.
  awaitable<std::vector<Wait>> ask(const std::shared_ptr<Pool>& pool, std::size_t shard,
                                   std::chrono::milliseconds timeout) {
    std::vector<Wait> out;
    Conn* c = co_await connected(pool, timeout);
    if (!c) co_return out;
    auto q = co_await simple_query(*c->backend, kWaits, timeout);
    if (!q.ok()) {
      spdlog::warn("deadlock search: shard {} ({}): {}", pool->target().shard, server_of(*pool), q.error_message);
      if (q.lost || c->backend->status != 'I') c->backend.reset();
      co_return out;
    }
    for (auto& row : q.rows) {
      if (row.size() != 2 || !row[0] || !row[1]) continue;
      Wait w{server_of(*pool), 0, int_array(*row[1]), shard};
      std::from_chars(row[0]->data(), row[0]->data() + row[0]->size(), w.pid);
      if (!w.blockers.empty()) out.push_back(std::move(w));
    }
    co_return out;
  }

  // Replaces this proxy's published sessions (`mine`: none, to withdraw them) in the
  // first shard's table and reads the other proxies' that are fresh (updated within
  // `fresh`); nullopt if that failed (logged once until it works again).
  awaitable<std::optional<std::vector<Published>>> exchange(const std::shared_ptr<Pool>& pool, const std::string& me,
                                                            const std::vector<Published>& mine,
                                                            std::chrono::milliseconds fresh,
                                                            std::chrono::milliseconds timeout) {
    Conn* c = co_await connected(pool, timeout);
    if (!c) co_return std::nullopt;
    std::string sql = c->table_made ? std::string() : kPublishedTable;
    sql += "DELETE FROM " + kPublished + " WHERE proxy = " + quote_literal(me) +
           " OR updated < now() - interval '1 minute';";
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const Published& p = mine[i];
      sql += (i ? ", (" : "INSERT INTO " + kPublished + " (proxy, session, txn, shard, pid, first_seen) VALUES (") +
             quote_literal(me) + ", " + std::to_string(p.session) + ", " + std::to_string(p.txn) + ", " +
             quote_literal(p.shard) + ", " + std::to_string(p.pid) + ", " + std::to_string(p.first_seen) + ")";
    }
    if (!mine.empty()) sql += ";";
    sql += "SELECT proxy, session, txn, shard, pid, first_seen FROM " + kPublished + " WHERE proxy <> " +
           quote_literal(me) + " AND updated > now() - interval '" + std::to_string(fresh.count()) + " milliseconds'";
    auto q = co_await simple_query(*c->backend, sql, timeout);
    if (!q.ok()) {
      if (!c->exchange_failing)
        spdlog::warn("deadlock search: cannot publish this proxy's sessions on shard {} ({}): {}",
                     pool->target().shard, server_of(*pool), q.error_message);
      c->exchange_failing = true;
      if (q.lost || c->backend->status != 'I') c->backend.reset();
      co_return std::nullopt;
    }
    c->table_made = true;
    c->exchange_failing = false;
    std::vector<Published> out;
    for (auto& row : q.rows) {
      if (row.size() != 6 || !row[0] || !row[1] || !row[2] || !row[3] || !row[4] || !row[5]) continue;
      Published p;
      p.proxy = *row[0];
      p.shard = *row[3];
      std::from_chars(row[1]->data(), row[1]->data() + row[1]->size(), p.session);
      std::from_chars(row[2]->data(), row[2]->data() + row[2]->size(), p.txn);
      std::from_chars(row[4]->data(), row[4]->data() + row[4]->size(), p.pid);
      std::from_chars(row[5]->data(), row[5]->data() + row[5]->size(), p.first_seen);
      out.push_back(std::move(p));
    }
    co_return out;
  }

  // Connections of pools gone, or not asked through for `idle`, are closed.
  void close_unused(std::chrono::milliseconds idle) {
    const auto now = Clock::now();
    std::erase_if(conns_, [&](auto& c) { return c.second.pool.expired() || now - c.second.used > idle; });
  }
  void close_all() { conns_.clear(); }

 private:
  struct Conn {
    std::weak_ptr<Pool> pool;
    std::unique_ptr<Backend> backend;
    Clock::time_point used{};
    bool failing = false;           // the last connection attempt failed (and was logged)
    bool table_made = false;        // splitpoint.spanning_sessions exists (on this connection's database)
    bool exchange_failing = false;  // the last exchange failed (and was logged)
  };

  // The search's connection through `pool`'s server and user, opened if need be.
  awaitable<Conn*> connected(const std::shared_ptr<Pool>& pool, std::chrono::milliseconds timeout) {
    Conn& c = conns_[pool.get()];
    if (c.pool.lock() != pool) c = Conn{pool};
    c.used = Clock::now();
    if (c.backend) co_return &c;
    BackendTarget target = pool->target();
    target.connect_timeout = timeout;
    auto r = co_await connect_backend(target);
    if (!r.backend) {
      if (!c.failing)  // (once until it works again: at max_connections it would every second)
        spdlog::warn("deadlock search: cannot connect to shard {} ({}): {}", target.shard, server_of(*pool), r.message);
      c.failing = true;
      co_return nullptr;
    }
    c.backend = std::move(r.backend);
    c.failing = false;
    co_return &c;
  }

  std::map<const Pool*, Conn> conns_;
};

awaitable<std::vector<Holding>> list_on(Worker& w, SessionHooks hooks) {
  std::vector<Holding> out;
  hooks.list_held(w, out);
  co_return out;
}

struct Look {
  std::vector<Holding> holding;  // this proxy's
  std::vector<Held> held;        // this proxy's (servers filled in), then other proxies' published ones
  // When each session's transaction was first seen by its proxy (ms since 1970), by
  // (Held::proxy, session).
  std::map<std::pair<std::string, std::uint64_t>, std::int64_t> first_seen;
  std::vector<wait_graph::Edge> cycle;
};

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// This proxy's sessions' transactions by when the search first saw them.
class Ages {
 public:
  // Remembers the transactions of `held` (this proxy's) and forgets the others.
  void saw(const std::vector<Held>& held) {
    const std::int64_t now = wall_ms();
    std::map<std::uint64_t, std::pair<std::uint64_t, std::int64_t>> next;
    for (const Held& h : held) {
      auto it = seen_.find(h.session);
      next[h.session] = it != seen_.end() && it->second.first == h.txn ? it->second : std::pair{h.txn, now};
    }
    seen_.swap(next);
  }
  std::int64_t first_seen(std::uint64_t session) const {
    auto it = seen_.find(session);
    return it == seen_.end() ? wall_ms() : it->second.second;
  }

 private:
  std::map<std::uint64_t, std::pair<std::uint64_t, std::int64_t>> seen_;  // session -> (txn, first seen)
};

// The pool the search asks shard `shard` through: one a session of this proxy holds a
// backend of (its user sees those backends' waits), else the shard's configured user's.
std::shared_ptr<Pool> pool_for(const Runtime& rt, std::size_t shard, const std::vector<Holding>& holding) {
  for (const Holding& h : holding)
    if (h.held.shard == shard) return h.pool;
  if (shard >= rt.shards.size()) return nullptr;
  const auto& def = rt.shards[shard]->shard();
  if (def.user.empty()) return nullptr;
  return rt.shards[shard]->get(def.user, def.password, def.database);
}

class Search {
 public:
  Search(Proxy& proxy, SessionHooks hooks) : server_(proxy), hooks_(hooks), me_(proxy.instance_id()) {}

  // What every session holds (this proxy's, and other proxies' on several shards), and
  // the cycle of waits among them if there is one.
  awaitable<Look> look(std::chrono::milliseconds timeout, std::chrono::milliseconds every) {
    Look l;
    for (Worker* w : server_.worker_list()) {
      auto [e, part] = co_await asio::co_spawn(w->context, list_on(*w, hooks_), use_nothrow);
      if (e) co_return Look{};
      std::move(part.begin(), part.end(), std::back_inserter(l.holding));
    }
    for (auto& h : l.holding) {
      h.held.server = server_of(*h.pool);
      l.held.push_back(h.held);
    }
    ages_.saw(l.held);
    for (const Held& h : l.held) l.first_seen[{"", h.session}] = ages_.first_seen(h.session);
    const bool spanning = wait_graph::some_session_on_several_backends(l.held);
    auto rt = server_.runtime();
    if (!rt) co_return l;
    // The waits in the databases this proxy's sessions use; without one, no session of
    // it is in a cycle (every session of a cycle waits), and nothing is published.
    std::vector<Wait> waits;
    std::map<Pool*, std::pair<std::shared_ptr<Pool>, std::size_t>> pools;  // asked through, with their shard
    if (spanning) {
      for (const Holding& h : l.holding) pools.try_emplace(h.pool.get(), h.pool, h.held.shard);
      co_await ask(pools, waits, timeout);
    }
    if (waits.empty()) {
      if (published_) co_await exchange(*rt, l, false, timeout, every);
      co_return l;
    }
    std::vector<Published> others = co_await exchange(*rt, l, true, timeout, every);
    std::map<Pool*, std::pair<std::shared_ptr<Pool>, std::size_t>> more;  // other proxies' shards
    for (const Published& p : others) {
      const std::optional<std::size_t> i = rt->config.find_shard(p.shard);
      auto pool = i ? pool_for(*rt, *i, l.holding) : nullptr;
      if (!pool) continue;
      if (!pools.count(pool.get())) more.try_emplace(pool.get(), pool, *i);
      l.held.push_back(Held{p.session, p.txn, *i, server_of(*pool), p.pid, p.proxy});
      l.first_seen[{p.proxy, p.session}] = p.first_seen;
    }
    co_await ask(more, waits, timeout);
    l.cycle = wait_graph::find_cycle(l.held, waits);
    co_return l;
  }

  // The edge whose waiter is cancelled: the youngest transaction's (by when its proxy
  // first saw it; then the highest proxy id and session id), the same whichever proxy
  // looks; nullptr if no session waits in the cycle.
  const wait_graph::Edge* victim(const Look& l) const {
    const wait_graph::Edge* out = nullptr;
    std::tuple<std::int64_t, std::string, std::uint64_t> best;
    for (const auto& e : l.cycle) {
      if (e.waiter == 0) continue;
      auto it = l.first_seen.find({e.waiter_proxy, e.waiter});
      std::tuple<std::int64_t, std::string, std::uint64_t> age{it == l.first_seen.end() ? 0 : it->second,
                                                               e.waiter_proxy.empty() ? me_ : e.waiter_proxy, e.waiter};
      if (!out || age > best) out = &e, best = std::move(age);
    }
    return out;
  }

  void close_unused() { askers_.close_unused(std::chrono::minutes(1)); }

  void stop() {
    askers_.close_all();
    published_ = false;  // (the other proxies stop reading what was published within seconds)
  }

 private:
  // Adds the waits in the databases of `pools` (each with its shard number).
  awaitable<void> ask(const std::map<Pool*, std::pair<std::shared_ptr<Pool>, std::size_t>>& pools,
                      std::vector<Wait>& waits, std::chrono::milliseconds timeout) {
    for (auto& [key, asked] : pools) {
      auto some = co_await askers_.ask(asked.first, asked.second, timeout);
      std::move(some.begin(), some.end(), std::back_inserter(waits));
    }
  }

  // Publishes this proxy's sessions on several shards (none, once they are gone) on the
  // first shard and returns the other proxies'.
  awaitable<std::vector<Published>> exchange(const Runtime& rt, const Look& l, bool spanning,
                                             std::chrono::milliseconds timeout, std::chrono::milliseconds every) {
    auto pool = pool_for(rt, 0, l.holding);
    if (!pool) co_return std::vector<Published>{};
    std::vector<Published> mine;
    if (spanning) {
      std::map<std::uint64_t, int> backends;
      for (const Held& h : l.held) ++backends[h.session];
      for (const Held& h : l.held)
        if (backends[h.session] > 1 && h.shard < rt.config.shards.size())
          mine.push_back(Published{me_, h.session, h.txn, rt.config.shards[h.shard].name, h.pid,
                                   l.first_seen.at({"", h.session})});
    }
    auto got = co_await askers_.exchange(pool, me_, mine, 2 * every + std::chrono::milliseconds(1000), timeout);
    if (!got) co_return std::vector<Published>{};
    published_ = spanning;
    co_return std::move(*got);
  }

  Proxy& server_;
  SessionHooks hooks_;
  std::string me_;
  Askers askers_;
  Ages ages_;
  bool published_ = false;  // this proxy's sessions are in the first shard's table
};

std::uint64_t txn_of(const Look& l, const std::string& proxy, std::uint64_t session) {
  for (const Held& h : l.held)
    if (h.session == session && h.proxy == proxy) return h.txn;
  return 0;
}

// The same cycle, every session of it in the same transaction in both looks.
bool confirmed(const Look& first, const Look& again) {
  if (first.cycle.empty() || first.cycle != again.cycle) return false;
  return std::all_of(first.cycle.begin(), first.cycle.end(), [&](const auto& e) {
    return txn_of(first, e.waiter_proxy, e.waiter) == txn_of(again, e.waiter_proxy, e.waiter);
  });
}

void break_cycle(Proxy& server, SessionHooks hooks, const Look& l, const wait_graph::Edge& victim) {
  std::vector<std::string> names;
  if (auto rt = server.runtime())
    for (auto& s : rt->config.shards) names.push_back(s.name);
  std::string detail = wait_graph::describe(l.cycle, names);
  spdlog::warn("deadlock across shards; cancelling the wait of session {}:\n{}", victim.waiter, detail);
  for (const Holding& h : l.holding) {
    if (h.held.session != victim.waiter || h.held.server != victim.server || h.held.pid != victim.waiter_pid) continue;
    hooks.break_deadlock(h, std::move(detail));
    return;
  }
}

}  // namespace

awaitable<void> search_loop(Proxy& server, SessionHooks hooks) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  Search search(server, hooks);
  while (!server.shutting_down()) {
    auto rt = server.runtime();
    if (!rt) co_return;
    const auto every = rt->config.timeouts.deadlock;
    const auto timeout = rt->config.timeouts.server_connect;
    rt.reset();  // (not kept while asleep: it would keep the pools of a dropped shard open)
    timer.expires_after(every.count() > 0 ? every : std::chrono::milliseconds(1000));
    co_await timer.async_wait(use_nothrow);
    if (every.count() == 0 || server.shutting_down()) {
      search.stop();
      continue;
    }
    search.close_unused();
    Look first = co_await search.look(timeout, every);
    if (first.cycle.empty()) continue;
    Look again = co_await search.look(timeout, every);
    if (!confirmed(first, again)) continue;
    const wait_graph::Edge* victim = search.victim(again);
    if (!victim) continue;
    if (victim->waiter_proxy.empty())
      break_cycle(server, hooks, again, *victim);
    else  // (its proxy finds the same cycle and cancels it)
      spdlog::debug("deadlock across proxies: session {} of proxy {} is to be cancelled by its proxy", victim->waiter,
                    victim->waiter_proxy);
  }
}

}  // namespace splitpoint::server::deadlocks
