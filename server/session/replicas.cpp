// Which host of a shard runs a statement (SPEC §10): reads outside a transaction block
// on a standby when `reads: replica` allows it and the standby is recent enough —
// within max_replica_lag and past this session's own last commit there
// (read-your-writes) — else the primary; and following the primary through a failover.
#include <spdlog/spdlog.h>

#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/replicas.hpp"

#include "server/session/session.hpp"

namespace splitpoint::server {

namespace {

constexpr auto kPrimaryPoll = std::chrono::milliseconds(50);

}  // namespace

bool HostChoice::reads_from_standby(const routing::Route& route) const {
  for (auto& [k, v] : route.hints)
    if (k == "reads") return v == "replica";
  if (auto v = s_.local_setting("reads")) return *v == "replica";
  return s_.runtime_->config.reads == config::Reads::replica;
}

bool HostChoice::may_read_standby(std::size_t shard, const routing::Route& route) const {
  if (!s_.runtime_->standbys || !route.replica_safe() || !s_.runtime_->shards[shard]->hosts().has_standbys()) return false;
  if (s_.in_transaction() || s_.txn_.implicit || s_.txn_.batch_wrote || s_.pinned_ ||
      s_.runtime_->config.pool_mode != config::PoolMode::transaction)
    return false;
  // The shard's primary is in the current batch, or still owes answers (a write sent
  // just before may not have committed yet, so its LSN is not known): the statement
  // stays on it.
  if (s_.held_[shard] && s_.held_[shard]->host == s_.pools_[shard]->target().host_index &&
      (s_.fe_.sent_after_sync || (s_.cur_ == shard && !s_.fe_.expect.empty())))
    return false;
  return reads_from_standby(route);
}

awaitable<std::optional<std::size_t>> HostChoice::read_host(std::size_t shard, const routing::Route& route) {
  if (!may_read_standby(shard, route)) co_return std::nullopt;
  ShardHosts& hosts = s_.runtime_->shards[shard]->hosts();
  // Within a batch the reads stay on the standby the batch is on.
  if (s_.cur_ == shard && s_.pump_.active() && s_.cur()->host != s_.pools_[shard]->target().host_index) co_return s_.cur()->host;
  if (ryw_.unknown[shard]) {
    // The session used the primary since it last looked: what it committed there is
    // at most the primary's current LSN. A standby must have replayed that far.
    auto pool = s_.pools_[shard];
    auto r = co_await pool->acquire(s_.runtime_->config.timeouts.server_connect);
    if (!r.backend) co_return std::nullopt;
    auto q = co_await simple_query(*r.backend, "SELECT pg_catalog.pg_current_wal_insert_lsn()",
                                   s_.runtime_->config.timeouts.server_connect);
    const bool fine = q.ok() && !q.rows.empty() && !q.rows[0].empty() && q.rows[0][0];
    pool->release(std::move(r.backend), fine);
    if (!fine) co_return std::nullopt;
    // (Its insert position: at or past the end of every record the session committed.)
    const auto lsn = parse_lsn(*q.rows[0][0]);
    ryw_.lsn[shard] = std::max(ryw_.lsn[shard], lsn ? end_of_records(*lsn) : ~std::uint64_t{0});
    ryw_.unknown[shard] = 0;
  }
  co_return hosts.pick_standby(s_.runtime_->config.max_replica_lag, ryw_.lsn[shard]);
}

std::shared_ptr<Pool> HostChoice::pool_on(std::size_t shard, std::size_t host) {
  if (s_.pools_[shard]->target().host_index == host) return s_.pools_[shard];
  return s_.runtime_->shards[shard]->get(s_.who_.user, s_.who_.password, s_.who_.database, host);
}

void HostChoice::give_back(std::size_t shard, std::unique_ptr<Backend> b, bool reusable) {
  if (b->host != s_.pools_[shard]->target().host_index) return pool_on(shard, b->host)->release(std::move(b), reusable);
  s_.pools_[shard]->release(std::move(b), reusable);
}

void HostChoice::host_failed(std::size_t shard, std::size_t host, BanReason why) {
  ShardHosts& hosts = s_.runtime_->shards[shard]->hosts();
  if (host == hosts.primary() && hosts.candidates() == 1) return;  // nowhere else to go: not banned
  spdlog::warn("[{}] shard \"{}\" host {} banned ({})", s_.id_, s_.runtime_->shards[shard]->shard().name,
               hosts.label(host), kBanReasonNames[static_cast<std::size_t>(why)]);
  hosts.ban(host, why, ShardHosts::Clock::now());
}

// Up to moves.max_hold for the health checks to find the shard's one primary, then the
// session's pool follows it. False: none within the hold, or two (the caller reports
// SPH01).
awaitable<bool> HostChoice::wait_for_primary(std::size_t shard) {
  ShardHosts& hosts = s_.runtime_->shards[shard]->hosts();
  const auto until = std::chrono::steady_clock::now() + s_.runtime_->config.moves.max_hold;
  asio::steady_timer timer(s_.stream_.socket().get_executor());
  while (hosts.primary_state() != ShardHosts::PrimaryState::known) {
    // Two primaries: refused at once (which one the application's writes should reach
    // is for an operator to say).
    if (hosts.primary_state() == ShardHosts::PrimaryState::two_primaries) co_return false;
    if (std::chrono::steady_clock::now() >= until || s_.closing_) co_return false;
    timer.expires_after(kPrimaryPoll);
    co_await timer.async_wait(use_nothrow);
  }
  if (s_.pools_[shard]->target().host_index != hosts.primary())
    s_.pools_[shard] = s_.runtime_->shards[shard]->get(s_.who_.user, s_.who_.password, s_.who_.database);
  co_return true;
}

std::string HostChoice::host_label(std::size_t shard, std::size_t host) const {
  return s_.runtime_->shards[shard]->hosts().label(host);
}

void HostChoice::count_target(RouteLabel label) {
  if (s_.runtime_->standbys && s_.cur() && s_.cur()->host != s_.pools_[s_.cur_]->target().host_index)
    s_.metrics_.replica_queries[static_cast<std::size_t>(label)].add();
}

std::string HostChoice::no_primary_message(std::size_t shard) const {
  const ShardHosts& hosts = s_.runtime_->shards[shard]->hosts();
  const std::string& name = s_.runtime_->shards[shard]->shard().name;
  if (hosts.primary_state() == ShardHosts::PrimaryState::two_primaries)
    return "shard \"" + name + "\" has more than one host out of recovery; writes to it are refused until one is";
  return "shard \"" + name + "\" has no primary (none found within moves.max_hold)";
}

// A connection for `shard` on the standby, or on the primary. A standby that cannot be
// reached is banned and the primary used instead; a primary that cannot be reached,
// on a shard with several possible primaries, is banned and the statement waits for
// the health checks to find the new one (moves.max_hold).
awaitable<AcquireResult> HostChoice::acquire_backend(std::size_t shard, std::optional<std::size_t>& standby) {
  const auto wait = s_.runtime_->config.timeouts.client_login;  // as long as a login may take
  ShardHosts& hosts = s_.runtime_->shards[shard]->hosts();
  AcquireResult r;
  if (standby) {
    auto pool = pool_on(shard, *standby);
    r.backend = pool->take_idle(s_.stream_.socket().get_executor());
    if (!r.backend) r = co_await pool->acquire(wait);
    if (!r.backend) {
      if (host_unreachable(r.sqlstate)) host_failed(shard, *standby, BanReason::connect);
      standby.reset();
    }
  }
  std::chrono::milliseconds backoff{50};
  const auto unavailable_until = std::chrono::steady_clock::now() + s_.runtime_->config.timeouts.shard_unavailable;
  for (int attempt = 0; !r.backend && attempt < 2; ++attempt) {
    if (s_.runtime_->standbys && hosts.candidates() > 1 &&
        (hosts.primary_state() != ShardHosts::PrimaryState::known || s_.pools_[shard]->target().host_index != hosts.primary()) &&
        !co_await wait_for_primary(shard)) {
      r = AcquireResult{nullptr, sqlstate::no_primary, no_primary_message(shard)};
      break;
    }
    r.backend = s_.pools_[shard]->take_idle(s_.stream_.socket().get_executor());
    if (!r.backend) r = co_await s_.pools_[shard]->acquire(wait);
    if (!r.backend && r.restarting && (!s_.runtime_->standbys || hosts.candidates() == 1) &&
        std::chrono::steady_clock::now() + backoff < unavailable_until) {
      // A shard restarting (or switched over by hand) comes back: wait for it, as
      // PgBouncer's clients wait, instead of failing every statement meanwhile.
      asio::steady_timer pause(co_await asio::this_coro::executor, backoff);
      co_await pause.async_wait(use_nothrow);
      backoff = std::min(backoff * 2, std::chrono::milliseconds{1000});
      attempt = -1;
      continue;
    }
    if (r.backend || !s_.runtime_->standbys || hosts.candidates() == 1 || !host_unreachable(r.sqlstate)) break;
    host_failed(shard, s_.pools_[shard]->target().host_index, BanReason::connect);  // then wait for another
  }
  co_return r;
}

void HostChoice::renumber(const std::vector<std::optional<std::size_t>>& to, std::size_t n) {
  ReadYourWrites ryw;
  ryw.resize(n);
  for (std::size_t i = 0; i < to.size() && i < ryw_.lsn.size(); ++i)
    if (to[i]) ryw.lsn[*to[i]] = ryw_.lsn[i], ryw.unknown[*to[i]] = ryw_.unknown[i];
  ryw_ = std::move(ryw);
}

std::size_t HostChoice::pick_any_shard() {
  if (s_.cur_ != Session::kNoShard) return s_.cur_;
  for (std::size_t s = 0; s < s_.held_.size(); ++s)
    if (s_.held_[s]) return s;
  if (s_.settings_.routing.shard) return *s_.settings_.routing.shard;
  // A transaction block's first keyless read: where its catalog reads and sequences go,
  // so that a block that reads all three (pg_dump's snapshot) stays on one shard.
  if (s_.in_transaction()) return s_.runtime_->config.combine_shard();
  // Spread keyless reads (reference tables) over the shards.
  return next_any_++ % s_.pools_.size();
}

}  // namespace splitpoint::server
