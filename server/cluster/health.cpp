#include "server/cluster/health.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "server/cluster/proxy.hpp"

namespace splitpoint::server {

namespace {

// The primary's insert position: the end of its last WAL record, so a standby that
// replayed everything is not behind (the write position can be ahead of it).
constexpr const char* kCheckSql =
    "SELECT pg_catalog.pg_is_in_recovery(), CASE WHEN pg_catalog.pg_is_in_recovery() THEN "
    "pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_insert_lsn() END, "
    "extract(epoch FROM now() - pg_catalog.pg_last_xact_replay_timestamp())";

// Where a check of `host` connects, as whom: the shard's configured user, else the
// credentials of a pool a client made (no client yet: nothing to route, no check).
std::optional<BackendTarget> check_target(ShardPools& shard, std::size_t host, const config::Config& config) {
  BackendTarget t;
  const auto& def = shard.shard();
  if (!def.user.empty() && !def.database.empty()) {
    t.user = def.user;
    t.password = def.password;
    t.database = def.database;
  } else {
    auto pools = shard.all();
    if (pools.empty()) return std::nullopt;
    t = pools.front()->target();
  }
  t.shard = def.name;
  t.tls = def.tls;
  t.host_index = host;
  t.host = shard.hosts().endpoint(host).host;
  t.port = shard.hosts().endpoint(host).port;
  t.connect_timeout = config.health.timeout;
  return t;
}

// The checks' own connections, one per host, outside the pools: PAUSE, a full pool or
// pool_size do not stop a check.
// (Keyed by the shared state, which a reload may replace: a key never names another
// shard's host.)
using Connections = std::map<std::pair<std::shared_ptr<ShardHosts>, std::size_t>, std::unique_ptr<Backend>>;

awaitable<ShardHosts::Check> check_host(ShardPools& shard, std::size_t host, const config::Config& config,
                                        Connections& conns) {
  ShardHosts::Check c;
  auto target = check_target(shard, host, config);
  if (!target) co_return c;
  auto& b = conns[{shard.hosts_ptr(), host}];
  if (!b) {
    auto r = co_await connect_backend(*target);
    if (!r.backend) co_return c;
    b = std::move(r.backend);
  }
  auto q = co_await simple_query(*b, kCheckSql, config.health.timeout);
  if (q.ok() && q.rows.size() == 1 && q.rows[0].size() == 3 && q.rows[0][0]) {
    c.in_recovery = *q.rows[0][0] == "t";
    if (q.rows[0][1]) c.lsn = parse_lsn(*q.rows[0][1]).value_or(0);
    if (q.rows[0][2]) c.replay_age = std::strtod(q.rows[0][2]->c_str(), nullptr);
    c.ok = true;
  }
  if (!c.ok || b->status != 'I') b.reset();  // reconnect next time
  co_return c;
}

// One round for one shard: the possible primaries first (standbys' lag is measured
// against the primary's LSN of this round), then the standbys.
awaitable<void> check_shard(Proxy& server, std::shared_ptr<ShardPools> shard, std::shared_ptr<const Runtime> rt,
                            std::shared_ptr<Connections> conns) {
  ShardHosts& hosts = shard->hosts();
  if (!check_target(*shard, 0, rt->config)) co_return;
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    if (hosts.due(h, ShardHosts::Clock::now())) {
      auto c = co_await check_host(*shard, h, rt->config, *conns);
      if (!c.ok) spdlog::warn("health: shard \"{}\" host {} failed its check", shard->shard().name, hosts.label(h));
      hosts.record(h, c, ShardHosts::Clock::now());
    }
    if (h + 1 == hosts.candidates() && hosts.settle_primary()) {
      spdlog::warn("health: shard \"{}\" follows its new primary {}", shard->shard().name,
                   hosts.label(hosts.primary()));
      server.primary_changed();
    }
  }
  if (hosts.primary_state() == ShardHosts::PrimaryState::two_primaries)
    spdlog::error("health: shard \"{}\" has two hosts out of recovery; writes to it are refused",
                  shard->shard().name);
}

awaitable<void> check_shard_once(Proxy& server, std::shared_ptr<ShardPools> shard, std::shared_ptr<const Runtime> rt,
                                 std::shared_ptr<Connections> conns, std::shared_ptr<std::set<ShardPools*>> running) {
  co_await check_shard(server, shard, rt, conns);
  running->erase(shard.get());
}

}  // namespace

awaitable<void> health_loop(Proxy& server) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  // One round per shard at a time: a slow host delays only its own shard.
  auto running = std::make_shared<std::set<ShardPools*>>();
  auto conns = std::make_shared<Connections>();
  while (!server.shutting_down()) {
    auto rt = server.runtime();
    if (!rt) co_return;
    if (running->empty())  // no check in flight: drop the connections of hosts a reload replaced
      std::erase_if(*conns, [&](const auto& e) {
        return std::none_of(rt->shards.begin(), rt->shards.end(),
                            [&](const auto& s) { return s->hosts_ptr() == e.first.first; });
      });
    for (const auto& shard : rt->shards) {
      if (!shard->hosts().has_standbys() || !running->insert(shard.get()).second) continue;
      asio::co_spawn(timer.get_executor(), check_shard_once(server, shard, rt, conns, running), asio::detached);
    }
    timer.expires_after(rt->config.health.interval);
    co_await timer.async_wait(use_nothrow);
  }
}

}  // namespace splitpoint::server
