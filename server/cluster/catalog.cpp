#include "server/cluster/catalog.hpp"
#include "config/indexes.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <pqxx/pqxx>

#include "routing/topology.hpp"
#include "server/cluster/proxy.hpp"

namespace splitpoint::server {

namespace {

// Every table lives in schema splitpoint of the catalog database. The topology row's
// lock orders every change; the epoch says a proxy has to re-read.
constexpr const char* kSchema = R"sql(
CREATE SCHEMA IF NOT EXISTS splitpoint;
CREATE TABLE IF NOT EXISTS splitpoint.topology (
  one bool PRIMARY KEY DEFAULT true CHECK (one),
  epoch bigint NOT NULL);
CREATE TABLE IF NOT EXISTS splitpoint.placement (
  distribution text NOT NULL,
  partition int NOT NULL,
  shard text NOT NULL,
  PRIMARY KEY (distribution, partition));
CREATE TABLE IF NOT EXISTS splitpoint.shards (
  name text PRIMARY KEY,
  host text NOT NULL,
  port int NOT NULL,
  database text NOT NULL,
  "user" text NOT NULL,
  password text,
  pool_size int NOT NULL,
  added timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS splitpoint.proxies (
  id text PRIMARY KEY,
  address text NOT NULL,
  epoch bigint NOT NULL DEFAULT 0,
  started timestamptz NOT NULL DEFAULT now(),
  lease_until timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS splitpoint.moves (
  id bigserial PRIMARY KEY,
  distribution text NOT NULL,
  partition int NOT NULL,
  source text NOT NULL,
  target text NOT NULL,
  state text NOT NULL DEFAULT 'planned',
  owner text,
  attempts int NOT NULL DEFAULT 0,
  cancel boolean NOT NULL DEFAULT false,
  rows_copied bigint NOT NULL DEFAULT 0,
  lag_bytes bigint,
  hold_ms bigint,
  error text,
  created timestamptz NOT NULL DEFAULT now(),
  updated timestamptz NOT NULL DEFAULT now());
DO $$
DECLARE
  added_later text[][] := ARRAY[['topology', 'ddl', 'bigint NOT NULL DEFAULT 0'],
                                ['moves', 'rows_total', 'bigint'],
                                ['moves', 'copy_started', 'timestamptz'],
                                ['moves', 'reason', 'text']];
  c text[];
BEGIN
  -- Only a column that is missing: ALTER TABLE takes its exclusive lock even when the
  -- column is there, and the other proxies' followers read these tables.
  FOREACH c SLICE 1 IN ARRAY added_later LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ('splitpoint.' || c[1])::regclass
                   AND attname = c[2] AND NOT attisdropped) THEN
      EXECUTE format('ALTER TABLE splitpoint.%I ADD COLUMN %I %s', c[1], c[2], c[3]);
    END IF;
  END LOOP;
END $$;
CREATE TABLE IF NOT EXISTS splitpoint.ranges (
  distribution text NOT NULL,
  partition int NOT NULL,
  upto text,
  PRIMARY KEY (distribution, partition));
CREATE TABLE IF NOT EXISTS splitpoint.hash_partitions (
  distribution text NOT NULL,
  partition int NOT NULL,
  modulus int NOT NULL,
  remainder int NOT NULL,
  PRIMARY KEY (distribution, partition));
CREATE TABLE IF NOT EXISTS splitpoint.catalog_indexes (
  name text PRIMARY KEY,
  "table" text NOT NULL,
  columns text[] NOT NULL,
  is_unique boolean NOT NULL,
  created timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS splitpoint.dropped_shards (
  name text PRIMARY KEY,
  dropped timestamptz NOT NULL DEFAULT now());
)sql";


}  // namespace

std::size_t partitions_of(const config::Distribution& d) {
  switch (d.method) {
    case config::Method::hash: return d.placement.size();
    case config::Method::range: return d.ranges.size();
    case config::Method::list: return d.lists.size();
  }
  return 0;
}

std::size_t& shard_slot(config::Distribution& d, std::size_t p) {
  switch (d.method) {
    case config::Method::hash: return d.placement[p];
    case config::Method::range: return d.ranges[p].shard;
    case config::Method::list: break;
  }
  return d.lists[p].shard;
}

namespace {

MoveRow move_row(const pqxx::row& r) {
  MoveRow m;
  m.id = r["id"].as<std::int64_t>();
  m.distribution = r["distribution"].as<std::string>();
  m.partition = r["partition"].as<std::uint32_t>();
  m.source = r["source"].as<std::string>();
  m.target = r["target"].as<std::string>();
  m.state = r["state"].as<std::string>();
  m.owner = r["owner"].is_null() ? "" : r["owner"].as<std::string>();
  m.error = r["error"].is_null() ? "" : r["error"].as<std::string>();
  m.rows_copied = r["rows_copied"].as<std::int64_t>();
  if (!r["lag_bytes"].is_null()) m.lag_bytes = r["lag_bytes"].as<std::int64_t>();
  if (!r["hold_ms"].is_null()) m.hold_ms = r["hold_ms"].as<std::int64_t>();
  m.attempts = r["attempts"].as<int>();
  if (!r["rows_total"].is_null()) m.rows_total = r["rows_total"].as<std::int64_t>();
  if (!r["eta_s"].is_null()) m.eta_s = r["eta_s"].as<std::int64_t>();
  m.reason = r["reason"].is_null() ? "" : r["reason"].as<std::string>();
  return m;
}

// (eta_s: the initial copy's rate so far, applied to the rows still to copy.)
constexpr const char* kMoveColumns =
    "id, distribution, partition, source, target, state, owner, error, rows_copied, lag_bytes, hold_ms, attempts, "
    "rows_total, reason, CASE WHEN state = 'copying' AND rows_copied > 0 AND rows_total IS NOT NULL THEN "
    "round(extract(epoch FROM now() - copy_started) * greatest(rows_total - rows_copied, 0) / rows_copied)::bigint "
    "END AS eta_s";

}  // namespace

const config::Distribution* movable_distribution(const config::Config& config, const std::string& name) {
  for (const auto& d : config.distributions)
    if (d.name == name) return &d;
  throw CatalogError("SPA01", "unknown distribution \"" + name + "\"");
}

std::string shard_password(const config::Config& config, const config::Shard& s) {
  if (!s.password.empty()) return s.password;
  const auto* u = config.find_user(s.user);
  return u ? u->password : std::string();
}

std::string shard_dsn(const config::Config& config, const config::Shard& s) {
  auto quote = [](const std::string& v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\'' || c == '\\') q += '\\';
      q += c;
    }
    return q + "'";
  };
  const std::string password = shard_password(config, s);
  std::string dsn = "host=" + quote(s.host) + " port=" + std::to_string(s.port) + " dbname=" + quote(s.database) +
                    " user=" + quote(s.user) + " connect_timeout=" +
                    std::to_string(std::max<long long>(1, config.timeouts.server_connect.count() / 1000));
  if (!password.empty()) dsn += " password=" + quote(password);
  // SPEC §11: the same TLS as the proxy's own connections (libpq's names). Without
  // tls:, libpq's default (prefer) as before. (A subscription's connection string is
  // used by the target server: its sslrootcert path must exist there too.)
  static constexpr const char* kSslMode[] = {"disable", "require", "verify-ca", "verify-full"};
  if (s.tls.mode != config::ShardTlsMode::disable) dsn += std::string(" sslmode=") + kSslMode[static_cast<int>(s.tls.mode)];
  if (!s.tls.ca.empty()) dsn += " sslrootcert=" + quote(s.tls.ca);
  return dsn;
}

namespace {

// Takes shard `gone` out of `config` and renumbers every index past it. False (nothing
// changed) while the configuration still names it (a placement the catalog does not
// hold, a list's default, the catalog, the combine step, unlisted tables).
bool remove_shard(config::Config& c, std::size_t gone) {
  for (const auto& d : c.distributions) {
    if (std::find(d.placement.begin(), d.placement.end(), gone) != d.placement.end()) return false;
    for (const auto& r : d.ranges)
      if (r.shard == gone) return false;
    for (const auto& l : d.lists)
      if (l.shard == gone) return false;
    if (d.default_shard == gone) return false;
  }
  if (c.catalog_shard == gone || c.scatter.combines_on(gone) ||
      (c.unlisted_tables == config::UnlistedPolicy::shard && c.unlisted_shard == gone))
    return false;
  auto renumber = [gone](std::size_t& i) { i -= i > gone ? 1 : 0; };
  for (auto& d : c.distributions) {
    for (auto& i : d.placement) renumber(i);
    for (auto& r : d.ranges) renumber(r.shard);
    for (auto& l : d.lists) renumber(l.shard);
    if (d.default_shard) renumber(*d.default_shard);
  }
  if (c.catalog_shard) renumber(*c.catalog_shard);
  renumber(c.scatter.combine_shard);
  if (c.unlisted_shard == gone) c.unlisted_shard = 0;  // (unused: the policy is not shard:)
  renumber(c.unlisted_shard);
  c.shards.erase(c.shards.begin() + static_cast<std::ptrdiff_t>(gone));
  return true;
}

}  // namespace

void apply_catalog(const CatalogState& state, config::Config& config, MoveView& view) {
  for (const auto& sh : state.shards)  // (after the file's, in the order they were added)
    if (!config.find_shard(sh.name)) config.shards.push_back(sh);
  auto dist_of = [&](const std::string& name) -> std::optional<std::size_t> {
    for (std::size_t d = 0; d < config.distributions.size(); ++d)
      if (config.distributions[d].name == name) return d;
    return std::nullopt;
  };
  // DROP INDEX: an index of the console's (no line in the file) the catalog no longer
  // has. (Its entries' distribution stays, unused: the others keep their numbers.)
  std::erase_if(config.indexes, [&](const config::Index& ix) {
    return ix.line == 0 &&
           std::none_of(state.indexes.begin(), state.indexes.end(), [&](const auto& i) { return i.name == ix.name; });
  });
  for (const auto& ix : state.indexes)  // (CREATE INDEX; before the placement of their entries)
    if (std::none_of(config.indexes.begin(), config.indexes.end(), [&](const auto& i) { return i.name == ix.name; }))
      if (auto why = config::add_index(config, ix); !why.empty())
        spdlog::error("catalog: index {} is not valid here ({}); left out", ix.name, why);
  for (const auto& [name, bounds] : state.ranges) {  // (before the placement: it may add partitions)
    auto d = dist_of(name);
    if (!d || config.distributions[*d].method != config::Method::range || bounds.empty()) continue;
    auto& ranges = config.distributions[*d].ranges;
    ranges.resize(bounds.size());  // (new ones get their shard from the placement)
    for (std::size_t i = 0; i < bounds.size(); ++i) ranges[i].upto = bounds[i];
  }
  for (const auto& [name, parts] : state.hash_parts) {  // (SPLIT PARTITION; before the placement too)
    auto d = dist_of(name);
    if (!d || config.distributions[*d].method != config::Method::hash) continue;
    if (auto why = routing::check_hash_parts(parts); !why.empty()) {
      spdlog::error("catalog: the hash partitions of distribution {} are not valid ({}); kept the file's", name, why);
      continue;
    }
    auto& dist = config.distributions[*d];
    dist.hash_parts = parts;
    dist.partitions = static_cast<int>(parts.size());
    dist.placement.resize(parts.size(), 0);  // (new ones get their shard from the placement)
  }
  for (const auto& p : state.placement) {
    auto d = dist_of(p.distribution);
    auto s = config.find_shard(p.shard);
    if (!d || !s || p.partition >= partitions_of(config.distributions[*d])) continue;
    shard_slot(config.distributions[*d], p.partition) = *s;
  }
  for (const auto& name : state.dropped)  // (DROP SHARD refused while anything named it)
    if (auto s = config.find_shard(name); s && !remove_shard(config, *s))
      spdlog::warn("catalog: shard {} was dropped but the configuration still names it; kept", name);
  view.epoch = state.epoch;
  view.views.assign(config.shards.size(), {});
  for (const auto& m : state.moves) {
    auto d = dist_of(m.distribution);
    auto src = config.find_shard(m.source), tgt = config.find_shard(m.target);
    if (!d || !src || !tgt || m.state == "planned") continue;
    MoveView::Part part{*d, m.partition, 0, m.id};
    view.moving = true;
    if (m.state == "cutover") view.held.push_back(part);
    // Before the cutover the target holds a copy; after it the source holds leftovers.
    part.shard = m.state == "cleanup" ? *src : *tgt;
    view.hidden.push_back(part);
    for (const auto& [table, key] : config.distributions[*d].tables)
      view.views[part.shard][table] = "splitpoint_m" + std::to_string(m.id);
  }
}

const char* const kCatalogChannel = "splitpoint_topology";
const char* const kUnfinishedMoves = "state NOT IN ('done', 'failed', 'cancelled')";

Catalog::Catalog(Proxy& server, const config::Config& config)
    : server_(server), config_(config), proxy_id_(server.instance_id()) {
  dsn_ = config_.catalog_shard ? shard_dsn(config_, config_.shards[*config_.catalog_shard]) : config_.catalog_dsn;
}

Catalog::~Catalog() { stop(); }

std::unique_ptr<pqxx::connection> Catalog::connect_catalog() const { return std::make_unique<pqxx::connection>(dsn_); }

pqxx::connection& Catalog::admin_connection(std::unique_lock<std::mutex>& lock) {
  lock = std::unique_lock(admin_mu_);
  if (!admin_ || !admin_->is_open()) admin_ = connect_catalog();
  return *admin_;
}

void Catalog::create_schema(pqxx::connection& c) {
  pqxx::work w(c);
  // Two proxies starting at once: one creates and seeds, the other waits and reads.
  w.exec("SELECT pg_advisory_xact_lock(hashtext('splitpoint catalog'))");
  w.exec("SET LOCAL client_min_messages = warning");
  w.exec(kSchema);
  w.commit();
}

// First start: the YAML's placement becomes the catalog's. Later starts keep the
// catalog's and only add distributions it does not know yet.
void Catalog::seed(pqxx::connection& c) {
  pqxx::work w(c);
  w.exec("SELECT pg_advisory_xact_lock(hashtext('splitpoint catalog'))");
  if (w.exec("SELECT 1 FROM splitpoint.topology").empty()) w.exec("INSERT INTO splitpoint.topology VALUES (true, 1)");
  bool added = false;
  for (const auto& d : config_.distributions) {
    auto known = w.exec_params("SELECT count(*) FROM splitpoint.placement WHERE distribution = $1", d.name);
    auto have = known[0][0].as<std::size_t>();
    const bool changed_online =  // (split or merged online: the catalog's partitions win over the file's)
        !w.exec_params("SELECT 1 FROM splitpoint.ranges WHERE distribution = $1 UNION ALL SELECT 1 FROM "
                       "splitpoint.hash_partitions WHERE distribution = $1 LIMIT 1",
                       d.name)
             .empty();
    if (have != 0 && have != partitions_of(d) && !changed_online)
      throw CatalogError("SPA01", "the catalog has " + std::to_string(have) + " partitions of distribution \"" + d.name +
                                      "\", the configuration " + std::to_string(partitions_of(d)));
    if (have != 0) continue;
    auto copy = d;
    for (std::size_t p = 0; p < partitions_of(d); ++p)
      w.exec_params("INSERT INTO splitpoint.placement VALUES ($1, $2, $3)", d.name, static_cast<int>(p),
                    config_.shards[shard_slot(copy, p)].name);
    added = true;
  }
  if (added) {
    w.exec("UPDATE splitpoint.topology SET epoch = epoch + 1");
    w.exec(std::string("NOTIFY ") + kCatalogChannel);
  }
  w.commit();
}

CatalogState Catalog::read_state(pqxx::connection& c) {
  CatalogState s;
  pqxx::work w(c, "read topology");
  w.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
  auto top = w.exec("SELECT epoch, ddl FROM splitpoint.topology");
  s.epoch = top[0][0].as<std::int64_t>();
  s.ddl = top[0][1].as<std::int64_t>();
  for (const auto& r : w.exec("SELECT name, host, port, database, \"user\", coalesce(password, ''), pool_size FROM "
                              "splitpoint.shards ORDER BY added, name")) {
    config::Shard sh;
    sh.name = r[0].as<std::string>();
    sh.host = r[1].as<std::string>();
    sh.port = r[2].as<std::uint16_t>();
    sh.database = r[3].as<std::string>();
    sh.user = r[4].as<std::string>();
    sh.password = r[5].as<std::string>();
    sh.pool_size = r[6].as<int>();
    s.shards.push_back(std::move(sh));
  }
  for (const auto& r : w.exec("SELECT name FROM splitpoint.dropped_shards")) s.dropped.push_back(r[0].as<std::string>());
  for (const auto& r : w.exec("SELECT distribution, upto FROM splitpoint.ranges ORDER BY distribution, partition"))
    s.ranges[r[0].as<std::string>()].push_back(r[1].is_null() ? std::nullopt
                                                              : std::optional<std::string>(r[1].as<std::string>()));
  for (const auto& r : w.exec("SELECT distribution, modulus, remainder FROM splitpoint.hash_partitions ORDER BY "
                              "distribution, partition"))
    s.hash_parts[r[0].as<std::string>()].push_back({r[1].as<std::uint32_t>(), r[2].as<std::uint32_t>()});
  for (const auto& r : w.exec("SELECT name, \"table\", array_to_string(columns, ','), is_unique FROM "
                              "splitpoint.catalog_indexes ORDER BY created, name")) {
    config::Index ix;
    ix.name = r[0].as<std::string>();
    ix.table = r[1].as<std::string>();
    const auto columns = r[2].as<std::string>();  // (plain identifiers: no comma in one)
    for (std::size_t p = 0, q = 0; p <= columns.size(); p = q + 1) {
      q = std::min(columns.find(',', p), columns.size());
      ix.columns.push_back(columns.substr(p, q - p));
    }
    ix.unique = r[3].as<bool>();
    s.indexes.push_back(std::move(ix));
  }
  for (const auto& r : w.exec("SELECT distribution, partition, shard FROM splitpoint.placement"))
    s.placement.push_back({r[0].as<std::string>(), r[1].as<std::uint32_t>(), r[2].as<std::string>()});
  for (const auto& r : w.exec(std::string("SELECT ") + kMoveColumns + " FROM splitpoint.moves WHERE " + kUnfinishedMoves +
                              " ORDER BY id"))
    s.moves.push_back(move_row(r));
  std::int64_t by_state[std::size(kMoveStates)] = {};
  for (const auto& r : w.exec("SELECT state, count(*) FROM splitpoint.moves GROUP BY state"))
    for (std::size_t i = 0; i < std::size(kMoveStates); ++i)
      if (r[0].as<std::string>() == kMoveStates[i]) by_state[i] = r[1].as<std::int64_t>();
  for (std::size_t i = 0; i < std::size(kMoveStates); ++i) metrics_.moves_by_state[i] = by_state[i];
  {
    std::lock_guard lock(metrics_.lag_mu);
    metrics_.lag_by_move.clear();
    for (const MoveRow& m : s.moves) metrics_.lag_by_move.emplace_back(m.id, m.lag_bytes.value_or(0));
  }
  auto p = w.exec("SELECT count(*) FILTER (WHERE lease_until > now()), count(*) FILTER (WHERE lease_until <= now()) "
                  "FROM splitpoint.proxies");
  metrics_.proxies_live = p[0][0].as<std::int64_t>();
  metrics_.proxies_expired = p[0][1].as<std::int64_t>();
  w.commit();
  return s;
}

void Catalog::renew_lease(pqxx::connection& c) {
  const auto sent = std::chrono::steady_clock::now();
  pqxx::nontransaction w(c);
  w.exec_params(
      "INSERT INTO splitpoint.proxies (id, address, epoch, lease_until) VALUES ($1, $2, $3, now() + $4::int * "
      "interval '1 millisecond') ON CONFLICT (id) DO UPDATE SET epoch = excluded.epoch, lease_until = "
      "excluded.lease_until",
      proxy_id_, config_.listen.host + ":" + std::to_string(config_.listen.port), acked_epoch_,
      static_cast<int>(config_.moves.lease.count()));
  // The catalog counts the lease from when it got the renewal, later than `sent`: a
  // proxy that fences itself at sent + lease is fenced before the catalog lets go.
  lease_renewed_ = sent;
}

void Catalog::start(config::Config& config, MoveView& view) {
  auto c = connect_catalog();
  // A catalog made by an older splitpoint gets its new columns under exclusive locks,
  // which can deadlock with another proxy's follower: PostgreSQL aborts one side, which
  // tries again.
  for (int attempt = 1;; ++attempt) {
    try {
      create_schema(*c);
      break;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "40P01" || attempt == 5) throw;
      spdlog::warn("catalog: {} (attempt {} of 5)", e.what(), attempt);
    }
  }
  seed(*c);
  renew_lease(*c);
  auto state = read_state(*c);
  applied_epoch_ = acked_epoch_ = state.epoch;
  seen_ddl_ = state.ddl;
  renew_lease(*c);
  metrics_.epoch = state.epoch;
  {
    std::lock_guard lock(mu_);
    state_ = state;
  }
  apply_catalog(state, config, view);
  spdlog::info("catalog: proxy {} at topology epoch {}", proxy_id_, state.epoch);
}

config::Config Catalog::effective_config() const {
  auto config = config_;
  MoveView unused;
  std::lock_guard lock(mu_);
  apply_catalog(state_, config, unused);
  return config;
}

void Catalog::overlay(config::Config& config, MoveView& view) const {
  std::lock_guard lock(mu_);
  apply_catalog(state_, config, view);
  view.fenced = fenced_;
}

void Catalog::run() {
  follower_ = std::thread([this] { follow(); });
  mover_ = std::thread([this] { mover_loop(); });
  auto_split_ = std::thread([this] { auto_split_loop(); });
}

void Catalog::stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  if (follower_.joinable()) follower_.join();
  if (mover_.joinable()) mover_.join();
  if (auto_split_.joinable()) auto_split_.join();
  {
    std::lock_guard lock(droppers_mu_);
    for (auto& t : droppers_)
      if (t.joinable()) t.join();
  }
  try {  // leave at once instead of letting the lease run out
    auto c = connect_catalog();
    pqxx::nontransaction w(*c);
    w.exec_params("DELETE FROM splitpoint.proxies WHERE id = $1", proxy_id_);
  } catch (const std::exception&) {
  }
}

void Catalog::nap(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stop_.load(); });
}

// Reads the epoch every moves.poll (at once on a NOTIFY); a new epoch becomes a new
// runtime. A lease that could not be renewed in time fences this proxy.
void Catalog::follow() {
  std::unique_ptr<pqxx::connection> c;
  while (!stop_) {
    try {
      if (!c) {
        c = connect_catalog();
        pqxx::nontransaction(*c).exec(std::string("LISTEN ") + kCatalogChannel);
      }
      follow_once(*c);
      // (An acknowledgement held back by a running statement is looked at again soon.)
      const auto wait = acked_epoch_ < applied_epoch_ ? std::min(config_.moves.poll, std::chrono::milliseconds(10))
                                                      : config_.moves.poll;
      c->await_notification(0, static_cast<long>(std::chrono::duration_cast<std::chrono::microseconds>(wait).count()));
      c->get_notifs();
    } catch (const std::exception& e) {
      spdlog::warn("catalog: {}", e.what());
      c.reset();
      nap(config_.moves.poll);
    }
    const bool lapsed = std::chrono::steady_clock::now() - lease_renewed_ > config_.moves.lease;
    if (lapsed != fenced_) {
      fenced_ = lapsed;
      spdlog::warn(lapsed ? "catalog: lease lapsed; statements on sharded tables wait until the catalog is back"
                          : "catalog: lease renewed; serving again");
      server_.apply_topology();
    }
  }
}

void Catalog::follow_once(pqxx::connection& c) {
  if (ddl_pending_.exchange(false)) {
    pqxx::work w(c, "ddl");
    seen_ddl_ = w.exec("UPDATE splitpoint.topology SET ddl = ddl + 1 RETURNING ddl")[0][0].as<std::int64_t>();
    w.exec(std::string("NOTIFY ") + kCatalogChannel);
    w.commit();
  }
  auto state = read_state(c);
  if (state.ddl != seen_ddl_) {  // DDL through another proxy: what this one knows of the tables is old
    seen_ddl_ = state.ddl;
    if (auto rt = server_.runtime()) rt->forget_table_definitions();
  }
  if (state.epoch != applied_epoch_ || fenced_) {
    {
      std::lock_guard lock(mu_);
      state_ = std::move(state);
      applied_epoch_ = state_.epoch;
    }
    fenced_ = false;
    server_.apply_topology();
  }
  // Acknowledged once no statement that took its moves under an older epoch still runs
  // (a read that began before a copy would meet the copied rows unhidden).
  acked_epoch_ = std::min(applied_epoch_, server_.epoch_in_use());
  metrics_.epoch = acked_epoch_;
  renew_lease(c);
}

std::int64_t Catalog::update_move(pqxx::connection& c, const MoveRow& m, bool bump_epoch, const std::string& extra_sql) {
  pqxx::work w(c);
  std::int64_t epoch = 0;
  if (bump_epoch) epoch = w.exec("UPDATE splitpoint.topology SET epoch = epoch + 1 RETURNING epoch")[0][0].as<std::int64_t>();
  w.exec_params(
      "UPDATE splitpoint.moves SET state = $2, rows_copied = $3, lag_bytes = $4, hold_ms = $5, error = NULLIF($6, ''), "
      "rows_total = $8, copy_started = CASE WHEN $2 = 'copying' THEN coalesce(copy_started, now()) END, "
      "attempts = $7, updated = now() WHERE id = $1",
      m.id, m.state, m.rows_copied, m.lag_bytes, m.hold_ms, m.error, m.attempts, m.rows_total);
  if (!extra_sql.empty()) w.exec(extra_sql);
  if (bump_epoch) w.exec(std::string("NOTIFY ") + kCatalogChannel);
  w.commit();
  return epoch;
}

bool Catalog::wait_for_acks(pqxx::connection& c, std::int64_t epoch, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pqxx::nontransaction w(c);
    auto r = w.exec_params("SELECT count(*) FROM splitpoint.proxies WHERE lease_until > now() AND epoch < $1", epoch);
    if (r[0][0].as<std::int64_t>() == 0) return true;
    if (std::chrono::steady_clock::now() >= until || stop_) return false;
    nap(std::chrono::milliseconds(5));
  }
}

std::int64_t Catalog::plan_move(const std::string& distribution, std::uint32_t partition, const std::string& target,
                                const std::string& reason) {
  const auto config = effective_config();
  const config::Distribution* d = movable_distribution(config, distribution);
  if (d->method == config::Method::list && d->default_shard && partition == d->lists.size())
    throw CatalogError("SPA01", "partition " + distribution + ":" + std::to_string(partition) +
                                    " is the list distribution's default (every unlisted value): it stays on its shard");
  if (partition >= partitions_of(*d))
    throw CatalogError("SPA01", "distribution \"" + distribution + "\" has no partition " + std::to_string(partition));
  if (!config.find_shard(target)) throw CatalogError("SPA01", "unknown shard \"" + target + "\"");
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::work w(*c);
  w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");
  auto id = insert_move(w, distribution, partition, target, reason);
  w.exec(std::string("NOTIFY ") + kCatalogChannel);
  w.commit();
  cv_.notify_all();
  return id;
}

// A planned move, queued behind the distribution's unfinished ones (they run in order).
std::int64_t Catalog::insert_move(pqxx::transaction_base& w, const std::string& distribution, std::uint32_t partition,
                                  const std::string& target, const std::string& reason) {
  const std::string part = distribution + ":" + std::to_string(partition);
  auto busy = w.exec_params(std::string("SELECT id FROM splitpoint.moves WHERE distribution = $1 AND partition = $2 AND ") +
                                kUnfinishedMoves,
                            distribution, static_cast<int>(partition));
  if (!busy.empty())
    throw CatalogError("SPA01", "move " + busy[0][0].as<std::string>() + " of partition " + part + " is unfinished");
  auto src = w.exec_params("SELECT shard FROM splitpoint.placement WHERE distribution = $1 AND partition = $2",
                           distribution, static_cast<int>(partition));
  const std::string source = src[0][0].as<std::string>();
  if (source == target) throw CatalogError("SPA01", "partition " + part + " is on shard \"" + target + "\" already");
  return w.exec_params("INSERT INTO splitpoint.moves (distribution, partition, source, target, reason) VALUES ($1, $2, "
                       "$3, $4, NULLIF($5, '')) RETURNING id",
                       distribution, static_cast<int>(partition), source, target, reason)[0][0]
      .as<std::int64_t>();
}

void Catalog::cancel_move(std::int64_t id) {
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::work w(*c);
  auto r = w.exec_params("SELECT state FROM splitpoint.moves WHERE id = $1 FOR UPDATE", id);
  if (r.empty()) throw CatalogError("SPA01", "no move " + std::to_string(id));
  auto state = r[0][0].as<std::string>();
  if (state == "cleanup" || state == "done" || state == "failed" || state == "cancelled")
    throw CatalogError("SPA01", "move " + std::to_string(id) + " is " + state + "; it can no longer be cancelled");
  w.exec_params("UPDATE splitpoint.moves SET cancel = true, updated = now() WHERE id = $1", id);
  w.commit();
}

std::vector<MoveRow> Catalog::moves(bool all) {
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::nontransaction w(*c);
  std::vector<MoveRow> out;
  for (const auto& r : w.exec(std::string("SELECT ") + kMoveColumns + " FROM splitpoint.moves " +
                              (all ? "" : std::string("WHERE ") + kUnfinishedMoves) + " ORDER BY id"))
    out.push_back(move_row(r));
  return out;
}

std::vector<Catalog::ProxyRow> Catalog::proxies() {
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::nontransaction w(*c);
  std::vector<ProxyRow> out;
  for (const auto& r : w.exec("SELECT id, address, epoch, lease_until::text, lease_until > now() FROM "
                              "splitpoint.proxies ORDER BY started, id"))
    out.push_back({r[0].as<std::string>(), r[1].as<std::string>(), r[3].as<std::string>(), r[2].as<std::int64_t>(),
                   r[4].as<bool>()});
  return out;
}

}  // namespace splitpoint::server
