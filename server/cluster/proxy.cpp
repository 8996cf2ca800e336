#include "server/cluster/proxy.hpp"

#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "server/cluster/catalog.hpp"
#include "server/cluster/indexes.hpp"

namespace splitpoint::server {

// ---- cancel keys ----

CancelRegistry::Key CancelRegistry::add(const std::shared_ptr<Session>& s, std::int32_t pid) {
  for (;;) {
    Key k{pid, 0};
    if (k.pid <= 0) RAND_bytes(reinterpret_cast<unsigned char*>(&k.pid), sizeof k.pid);
    RAND_bytes(reinterpret_cast<unsigned char*>(&k.secret), sizeof k.secret);
    k.pid &= 0x7fffffff;
    if (k.pid == 0) continue;
    auto& stripe = stripes_[k.pid % kStripes];
    std::lock_guard lock(stripe.mu);
    if (stripe.map.emplace(packed(k), s).second) return k;
  }
}

void CancelRegistry::remove(Key k) {
  if (k.pid <= 0) return;
  auto& stripe = stripes_[k.pid % kStripes];
  std::lock_guard lock(stripe.mu);
  stripe.map.erase(packed(k));
}

std::shared_ptr<Session> CancelRegistry::find(Key k) {
  if (k.pid <= 0) return nullptr;
  auto& stripe = stripes_[k.pid % kStripes];
  std::lock_guard lock(stripe.mu);
  auto it = stripe.map.find(packed(k));
  return it == stripe.map.end() ? nullptr : it->second.lock();
}

// ---- the proxy ----

namespace {

std::string random_instance_id() {
  unsigned char b[4];
  RAND_bytes(b, sizeof b);
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  char out[128];
  std::snprintf(out, sizeof out, "%s:%d:%02x%02x%02x%02x", host, static_cast<int>(getpid()), b[0], b[1], b[2], b[3]);
  return out;
}

}  // namespace

Proxy::Proxy(std::shared_ptr<const Runtime> runtime, std::string config_path)
    : runtime_(std::move(runtime)), config_path_(std::move(config_path)), instance_id_(random_instance_id()) {
  indexes_ = std::make_unique<IndexKeeper>(*this);
  int n = runtime_.load()->config.workers;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  metrics_ = std::make_unique<Metrics>(static_cast<std::size_t>(n), runtime_.load()->config, *runtime_.load()->slots);
  for (int i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->index = static_cast<std::size_t>(i);
    workers_.back()->metrics = &metrics_->worker(static_cast<std::size_t>(i));
  }
}

Proxy::~Proxy() = default;

void Proxy::start_catalog() {
  if (!runtime()->config.has_catalog()) return;
  catalog_ = std::make_unique<Catalog>(*this, runtime()->config);
  auto config = runtime()->config;
  auto view = std::make_shared<MoveView>();
  catalog_->start(config, *view);
  store_runtime(make_runtime(std::move(config), runtime().get(), std::move(view), true));
  catalog_->run();
}

void Proxy::start_indexes() { indexes_->start(); }

void Proxy::tear_down() {
  if (catalog_) catalog_->stop();
  indexes_->stop();
  for (auto& w : workers_) w->context.shutdown_services();
  runtime_.store(nullptr);
  workers_.clear();
}

// Same shards in the same order and the same distributions (method, partitions,
// tables): a statement's plan means the same in both.
static bool same_salt(const config::Distribution& x, const config::Distribution& y) {
  if (!x.salt || !y.salt) return !x.salt && !y.salt;
  return x.salt->column == y.salt->column && x.salt->buckets == y.salt->buckets && x.salt->keys == y.salt->keys;
}

static bool same_layout(const config::Config& a, const config::Config& b) {
  if (a.shards.size() != b.shards.size() || a.distributions.size() != b.distributions.size()) return false;
  for (std::size_t i = 0; i < a.shards.size(); ++i)
    if (a.shards[i].name != b.shards[i].name) return false;
  for (std::size_t i = 0; i < a.distributions.size(); ++i) {
    const auto &x = a.distributions[i], &y = b.distributions[i];
    if (x.name != y.name || x.method != y.method || x.partitions != y.partitions || x.hash_parts != y.hash_parts ||
        x.tables != y.tables || x.ranges.size() != y.ranges.size() || x.lists.size() != y.lists.size() ||
        !same_salt(x, y))  // (the plans read a salt column too)
      return false;
  }
  return a.reference_tables == b.reference_tables;
}

void Proxy::store_runtime(std::shared_ptr<const Runtime> rt) {
  moves_active_.store(rt && rt->moves->active(), std::memory_order_relaxed);
  const auto epoch = rt ? rt->moves->epoch : 0;
  runtime_.store(std::move(rt));
  epoch_.store(epoch, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
}

void Proxy::apply_topology() {
  if (!catalog_) return;
  auto old = runtime();
  auto config = old->config;
  auto view = std::make_shared<MoveView>();
  catalog_->overlay(config, *view);
  try {
    store_runtime(make_runtime(std::move(config), old.get(), std::move(view), true));
  } catch (const std::exception& e) {
    spdlog::error("catalog: cannot apply topology epoch: {}", e.what());
  }
}

bool Proxy::reload(std::string& error) {
  auto result = config::load_file(config_path_);
  if (!result.config) {
    metrics_->config_reload(false);
    for (auto& e : result.errors) {
      spdlog::error("reload rejected: {}:{}: {}", config_path_, e.line, e.message);
      if (!error.empty()) error += "; ";
      error += e.message;
    }
    return false;
  }
  try {
    auto old = runtime();
    auto view = std::make_shared<MoveView>();
    if (catalog_) catalog_->overlay(*result.config, *view);
    // With a catalog, sessions must follow its epochs after a reload too: when the file
    // keeps the shards and distributions, their plans stay valid.
    const bool same = catalog_ && same_layout(old->config, *result.config);
    store_runtime(make_runtime(std::move(*result.config), old.get(), std::move(view), same));
  } catch (const std::exception& e) {
    metrics_->config_reload(false);
    spdlog::error("reload rejected: {}", e.what());
    error = e.what();
    return false;
  }
  metrics_->config_reload(true);
  spdlog::info("configuration reloaded from {}", config_path_);
  return true;
}

void Proxy::register_session(std::uint64_t id, const std::shared_ptr<Session>& s,
                             const std::atomic<std::int64_t>& statement_epoch) {
  std::lock_guard lock(sessions_mu_);
  sessions_[id] = {s, &statement_epoch};
}

void Proxy::unregister_session(std::uint64_t id) {
  std::lock_guard lock(sessions_mu_);
  sessions_.erase(id);
}

std::vector<std::shared_ptr<Session>> Proxy::sessions() {
  std::lock_guard lock(sessions_mu_);
  std::vector<std::shared_ptr<Session>> v;
  for (auto& [id, r] : sessions_)
    if (auto s = r.session.lock()) v.push_back(std::move(s));
  return v;
}

std::int64_t Proxy::epoch_in_use() {
  // After the runtime was stored (pairs with the fence in CatalogEpoch::take_moves): a session
  // whose mark is not seen here takes that runtime's moves.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::int64_t oldest = epoch();
  std::lock_guard lock(sessions_mu_);
  for (auto& [id, r] : sessions_) oldest = std::min(oldest, r.statement_epoch->load(std::memory_order_relaxed));
  return oldest;
}

std::string Proxy::render_metrics() {
  auto rt = runtime();
  std::vector<PoolGauge> pools;
  for (auto& shard : rt->shards) {
    PoolGauge g;
    g.shard = shard->shard().name;
    for (auto& pool : shard->all()) {
      auto s = pool->stats();
      g.idle += s.idle;
      g.active += s.active;
      g.opening += s.opening;
      g.waiting += s.waiting;
    }
    if (shard->hosts().has_standbys()) {
      g.hosts = shard->hosts().view(ShardHosts::Clock::now());
      g.failovers = shard->hosts().failovers();
    }
    pools.push_back(std::move(g));
  }
  return metrics_->render(rt->config, *rt->slots, pools, catalog_ ? &catalog_->metrics() : nullptr);
}

}  // namespace splitpoint::server
