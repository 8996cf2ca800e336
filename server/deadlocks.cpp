#include "server/deadlocks.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "server/backend.hpp"
#include "server/pool.hpp"
#include "server/server.hpp"
#include "server/session.hpp"

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

// The search's own connections, one per pool asked through (its server and user).
class Askers {
 public:
  // Which of `pids` (backends of `pool`) wait for a lock, and for whom.
  awaitable<std::vector<Wait>> ask(const std::shared_ptr<Pool>& pool, const std::vector<std::int32_t>& pids,
                                   std::chrono::milliseconds timeout) {
    std::vector<Wait> out;
    Conn& c = conns_[pool.get()];
    if (c.pool.lock() != pool) c = Conn{pool, nullptr, {}, false};
    c.used = Clock::now();
    if (!c.backend) {
      BackendTarget target = pool->target();
      target.connect_timeout = timeout;
      auto r = co_await connect_backend(target);
      if (!r.backend) {
        if (!c.failing)  // (once until it works again: at max_connections it would every second)
          spdlog::warn("deadlock search: cannot connect to shard {} ({}): {}", target.shard, server_of(*pool),
                       r.message);
        c.failing = true;
        co_return out;
      }
      c.backend = std::move(r.backend);
      c.failing = false;
    }
    std::string sql =
        "SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid IN (";
    for (std::size_t i = 0; i < pids.size(); ++i) sql += (i ? "," : "") + std::to_string(pids[i]);
    sql += ")";
    auto q = co_await simple_query(*c.backend, sql, timeout);
    if (!q.ok()) {
      spdlog::warn("deadlock search: shard {} ({}): {}", pool->target().shard, server_of(*pool), q.error_message);
      if (q.lost || c.backend->status != 'I') c.backend.reset();
      co_return out;
    }
    for (auto& row : q.rows) {
      if (row.size() != 2 || !row[0] || !row[1]) continue;
      Wait w{server_of(*pool), 0, int_array(*row[1])};
      std::from_chars(row[0]->data(), row[0]->data() + row[0]->size(), w.pid);
      if (!w.blockers.empty()) out.push_back(std::move(w));
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
    bool failing = false;  // the last connection attempt failed (and was logged)
  };
  std::map<const Pool*, Conn> conns_;
};

awaitable<std::vector<Holding>> list_on(Worker& w) {
  std::vector<Holding> out;
  for (Session* s : w.sessions) s->list_held(out);
  co_return out;
}

struct Look {
  std::vector<Holding> holding;
  std::vector<Held> held;  // of `holding`, servers filled in
  std::vector<wait_graph::Edge> cycle;
};

// What every session holds, and the cycle of waits among them if there is one.
awaitable<Look> look(Server& server, Askers& askers, std::chrono::milliseconds timeout) {
  Look l;
  for (Worker* w : server.worker_list()) {
    auto [e, part] = co_await asio::co_spawn(w->context, list_on(*w), use_nothrow);
    if (e) co_return Look{};
    std::move(part.begin(), part.end(), std::back_inserter(l.holding));
  }
  for (auto& h : l.holding) {
    h.held.server = server_of(*h.pool);
    l.held.push_back(h.held);
  }
  if (!wait_graph::some_session_on_several_backends(l.held)) co_return l;
  std::map<Pool*, std::pair<std::shared_ptr<Pool>, std::vector<std::int32_t>>> by_pool;
  for (auto& h : l.holding) {
    auto& [pool, pids] = by_pool[h.pool.get()];
    pool = h.pool;
    pids.push_back(h.held.pid);
  }
  std::vector<Wait> waits;
  for (auto& [key, group] : by_pool) {
    auto some = co_await askers.ask(group.first, group.second, timeout);
    std::move(some.begin(), some.end(), std::back_inserter(waits));
  }
  l.cycle = wait_graph::find_cycle(l.held, waits);
  co_return l;
}

std::uint64_t txn_of(const Look& l, std::uint64_t session) {
  for (const Held& h : l.held)
    if (h.session == session) return h.txn;
  return 0;
}

// The same cycle, every session of it in the same transaction in both looks.
bool confirmed(const Look& first, const Look& again) {
  if (first.cycle.empty() || first.cycle != again.cycle) return false;
  return std::all_of(first.cycle.begin(), first.cycle.end(),
                     [&](const auto& e) { return txn_of(first, e.waiter) == txn_of(again, e.waiter); });
}

// Sessions' transactions by the look that first saw them: the youngest is cancelled.
class Ages {
 public:
  void saw(const Look& l) {
    ++looks_;
    std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> next;
    for (const Held& h : l.held) {
      auto it = seen_.find(h.session);
      next[h.session] = it != seen_.end() && it->second.first == h.txn ? it->second : std::pair{h.txn, looks_};
    }
    seen_.swap(next);
  }
  // The edge whose waiter is cancelled.
  const wait_graph::Edge& victim(const std::vector<wait_graph::Edge>& cycle) const {
    auto age = [&](const wait_graph::Edge& e) {
      auto it = seen_.find(e.waiter);
      return std::pair{it == seen_.end() ? looks_ : it->second.second, e.waiter};
    };
    return *std::max_element(cycle.begin(), cycle.end(), [&](auto& a, auto& b) { return age(a) < age(b); });
  }

 private:
  std::uint64_t looks_ = 0;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> seen_;  // session -> (txn, look)
};

void break_cycle(Server& server, const Look& l, const wait_graph::Edge& victim) {
  std::vector<std::string> names;
  if (auto rt = server.runtime())
    for (auto& s : rt->config.shards) names.push_back(s.name);
  std::string detail = wait_graph::describe(l.cycle, names);
  spdlog::warn("deadlock across shards; cancelling the wait of session {}:\n{}", victim.waiter, detail);
  for (const Holding& h : l.holding) {
    if (h.held.session != victim.waiter || h.held.server != victim.server || h.held.pid != victim.waiter_pid) continue;
    asio::post(h.worker->context, [s = h.session, shard = h.held.shard, pid = h.held.pid, txn = h.held.txn,
                                   detail = std::move(detail)]() mutable {
      if (auto session = s.lock()) session->break_deadlock(shard, pid, txn, std::move(detail));
    });
    return;
  }
}

}  // namespace

awaitable<void> search_loop(Server& server) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  Askers askers;
  Ages ages;
  while (!server.shutting_down()) {
    auto rt = server.runtime();
    if (!rt) co_return;
    const auto every = rt->config.timeouts.deadlock;
    const auto timeout = rt->config.timeouts.server_connect;
    rt.reset();  // (not kept while asleep: it would keep the pools of a dropped shard open)
    timer.expires_after(every.count() > 0 ? every : std::chrono::milliseconds(1000));
    co_await timer.async_wait(use_nothrow);
    if (every.count() == 0 || server.shutting_down()) {
      askers.close_all();
      continue;
    }
    askers.close_unused(std::chrono::minutes(1));
    Look first = co_await look(server, askers, timeout);
    ages.saw(first);
    if (first.cycle.empty()) continue;
    Look again = co_await look(server, askers, timeout);
    if (confirmed(first, again)) break_cycle(server, again, ages.victim(again.cycle));
  }
}

}  // namespace splitpoint::server::deadlocks
