#include "server/server.hpp"

#include "server/two_phase.hpp"

#include <openssl/rand.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <spdlog/spdlog.h>

#include "server/catalog.hpp"
#include "server/deadlocks.hpp"
#include "server/health.hpp"
#include "server/http.hpp"
#include "server/session.hpp"

namespace splitpoint::server {

// ---- cancel keys ----

std::int32_t CancelRegistry::add(const std::shared_ptr<Session>& s) {
  for (;;) {
    std::int32_t pid = 0;
    RAND_bytes(reinterpret_cast<unsigned char*>(&pid), sizeof pid);
    pid &= 0x7fffffff;
    if (pid == 0) continue;
    auto& stripe = stripes_[pid % kStripes];
    std::lock_guard lock(stripe.mu);
    if (stripe.map.emplace(pid, s).second) return pid;
  }
}

void CancelRegistry::remove(std::int32_t pid) {
  auto& stripe = stripes_[pid % kStripes];
  std::lock_guard lock(stripe.mu);
  stripe.map.erase(pid);
}

std::shared_ptr<Session> CancelRegistry::find(std::int32_t pid) {
  if (pid <= 0) return nullptr;
  auto& stripe = stripes_[pid % kStripes];
  std::lock_guard lock(stripe.mu);
  auto it = stripe.map.find(pid);
  return it == stripe.map.end() ? nullptr : it->second.lock();
}

// ---- server ----

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

Server::Server(std::shared_ptr<const Runtime> runtime, std::string config_path)
    : runtime_(std::move(runtime)), config_path_(std::move(config_path)), instance_id_(random_instance_id()) {
  int n = runtime_.load()->config.workers;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  metrics_ = std::make_unique<Metrics>(static_cast<std::size_t>(n), runtime_.load()->config, *runtime_.load()->slots);
  for (int i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->index = static_cast<std::size_t>(i);
    workers_.back()->metrics = &metrics_->worker(static_cast<std::size_t>(i));
  }
}

// Same shards in the same order and the same distributions (method, partitions,
// tables): a statement's plan means the same in both.
static bool same_layout(const config::Config& a, const config::Config& b) {
  if (a.shards.size() != b.shards.size() || a.distributions.size() != b.distributions.size()) return false;
  for (std::size_t i = 0; i < a.shards.size(); ++i)
    if (a.shards[i].name != b.shards[i].name) return false;
  for (std::size_t i = 0; i < a.distributions.size(); ++i) {
    const auto &x = a.distributions[i], &y = b.distributions[i];
    if (x.name != y.name || x.method != y.method || x.partitions != y.partitions || x.hash_parts != y.hash_parts ||
        x.tables != y.tables || x.ranges.size() != y.ranges.size() || x.lists.size() != y.lists.size())
      return false;
  }
  return a.reference_tables == b.reference_tables;
}

void Server::store_runtime(std::shared_ptr<const Runtime> rt) {
  moves_active_.store(rt && rt->moves->active(), std::memory_order_relaxed);
  const auto epoch = rt ? rt->moves->epoch : 0;
  runtime_.store(std::move(rt));
  epoch_.store(epoch, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
}

void Server::apply_topology() {
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

Server::~Server() {
  // Teardown order matters. Sessions die with their worker's pending coroutines and
  // use the registry, the cancel keys, the metrics and the pools on the way out; a
  // backend's socket belongs to whichever worker opened it. So: end every worker's
  // coroutines while all contexts still exist, then drop the pools (idle backends),
  // then destroy the contexts.
  if (catalog_) catalog_->stop();
  signals_.reset();
  acceptor_.reset();
  metrics_acceptor_.reset();
  for (auto& w : workers_) w->context.shutdown_services();
  runtime_.store(nullptr);
  workers_.clear();
}

static tcp::endpoint resolve_listen(const config::Endpoint& e) {
  error_code ec;
  auto addr = asio::ip::make_address(e.host, ec);
  if (!ec) return {addr, e.port};
  asio::io_context ctx;
  tcp::resolver resolver(ctx);
  auto results = resolver.resolve(e.host, std::to_string(e.port));
  return *results.begin();
}

// `scheduling: batch`: this thread, and every thread made after it (they inherit the
// policy), under SCHED_BATCH, whose wake-ups do not preempt the process running on the
// CPU (docs/performance.md, "The proxy's threads under SCHED_BATCH").
static void apply_scheduling(config::Scheduling scheduling) {
  if (scheduling == config::Scheduling::normal) return;
  sched_param param{};
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0)
    spdlog::warn("scheduling: batch: sched_setscheduler failed: {}", std::strerror(errno));
}

int Server::run() {
  apply_scheduling(runtime()->config.scheduling);
  if (runtime()->config.has_catalog()) {
    // The catalog's placement before the first client: a proxy never routes by a
    // YAML placement the catalog has moved on from.
    catalog_ = std::make_unique<Catalog>(*this, runtime()->config);
    auto config = runtime()->config;
    auto view = std::make_shared<MoveView>();
    catalog_->start(config, *view);
    store_runtime(make_runtime(std::move(config), runtime().get(), std::move(view), true));
    catalog_->run();
  }
  auto rt = runtime();
  auto& main_ctx = workers_.front()->context;
  acceptor_ = std::make_unique<tcp::acceptor>(main_ctx);
  auto endpoint = resolve_listen(rt->config.listen);
  acceptor_->open(endpoint.protocol());
  acceptor_->set_option(tcp::acceptor::reuse_address(true));
  acceptor_->bind(endpoint);
  acceptor_->listen(asio::socket_base::max_listen_connections);
  spdlog::info("splitpoint listening on {}:{} with {} worker threads", endpoint.address().to_string(),
               acceptor_->local_endpoint().port(), workers_.size());

  metrics_acceptor_ = std::make_unique<tcp::acceptor>(main_ctx);
  auto metrics_endpoint = resolve_listen(rt->config.metrics_listen);
  metrics_acceptor_->open(metrics_endpoint.protocol());
  metrics_acceptor_->set_option(tcp::acceptor::reuse_address(true));
  metrics_acceptor_->bind(metrics_endpoint);
  metrics_acceptor_->listen();
  asio::co_spawn(main_ctx, serve_http(*this, *metrics_acceptor_), asio::detached);
  spdlog::info("metrics on http://{}:{}/metrics", metrics_endpoint.address().to_string(),
               metrics_acceptor_->local_endpoint().port());

  signals_ = std::make_unique<asio::signal_set>(main_ctx, SIGTERM, SIGINT, SIGHUP);
  asio::co_spawn(main_ctx, handle_signals(), asio::detached);
  asio::co_spawn(main_ctx, accept_loop(), asio::detached);
  asio::co_spawn(main_ctx, two_phase::recovery_loop(*this), asio::detached);
  asio::co_spawn(main_ctx, health_loop(*this), asio::detached);
  asio::co_spawn(main_ctx, deadlocks::search_loop(*this), asio::detached);
  rt.reset();  // (a runtime kept here would keep the pools of shards dropped or redefined since)

  std::vector<std::thread> threads;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (auto& w : workers_) guards.push_back(asio::make_work_guard(w->context));
  for (std::size_t i = 1; i < workers_.size(); ++i)
    threads.emplace_back([w = workers_[i].get()] { w->context.run(); });
  main_ctx.run();
  for (auto& w : workers_) w->context.stop();
  for (auto& t : threads) t.join();
  spdlog::info("splitpoint stopped");
  return 0;
}

awaitable<void> Server::accept_loop() {
  for (;;) {
    auto& w = *workers_[next_worker_];
    next_worker_ = (next_worker_ + 1) % workers_.size();
    auto [ec, socket] = co_await acceptor_->async_accept(w.context, use_nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_->is_open()) co_return;
      spdlog::warn("accept: {}", ec.message());
      continue;
    }
    spawn_session(w, std::move(socket));
  }
}

void Server::spawn_session(Worker& w, tcp::socket socket) {
  asio::post(w.context, [this, &w, s = std::move(socket)]() mutable {
    auto session = std::make_shared<Session>(*this, w, std::move(s));
    asio::co_spawn(w.context, session->run(), asio::detached);
  });
}

awaitable<void> Server::handle_signals() {
  for (;;) {
    auto [ec, signo] = co_await signals_->async_wait(use_nothrow);
    if (ec) co_return;
    if (signo == SIGHUP) {
      std::string error;
      reload(error);
      continue;
    }
    spdlog::info("received signal {}, shutting down", signo);
    begin_shutdown();
    break;
  }
  // Let open transactions finish up to timeouts.shutdown, then stop.
  auto ex = co_await asio::this_coro::executor;
  auto deadline = std::chrono::steady_clock::now() + runtime()->config.timeouts.shutdown;
  asio::steady_timer timer(ex);
  while (clients_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(50));
    co_await timer.async_wait(use_nothrow);
  }
  if (clients_.load() > 0) spdlog::warn("shutdown timeout: closing {} client connections", clients_.load());
  error_code ignored;
  metrics_acceptor_->close(ignored);
  for (auto& w : workers_) w->context.stop();
}

void Server::begin_shutdown() {
  shutting_down_ = true;
  error_code ignored;
  acceptor_->close(ignored);
  for (auto& w : workers_) {
    asio::post(w->context, [w = w.get()] {
      for (auto* s : w->sessions) s->on_shutdown();
    });
  }
}

bool Server::reload(std::string& error) {
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

void Server::register_session(std::uint64_t id, const std::shared_ptr<Session>& s) {
  std::lock_guard lock(sessions_mu_);
  sessions_[id] = {s, s.get()};
}

void Server::unregister_session(std::uint64_t id) {
  std::lock_guard lock(sessions_mu_);
  sessions_.erase(id);
}

std::vector<std::shared_ptr<Session>> Server::sessions() {
  std::lock_guard lock(sessions_mu_);
  std::vector<std::shared_ptr<Session>> v;
  for (auto& [id, r] : sessions_)
    if (auto s = r.session.lock()) v.push_back(std::move(s));
  return v;
}

std::int64_t Server::epoch_in_use() {
  // After the runtime was stored (pairs with the fence in Session::take_moves): a session
  // whose mark is not seen here takes that runtime's moves.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::int64_t oldest = epoch();
  std::lock_guard lock(sessions_mu_);
  for (auto& [id, r] : sessions_) oldest = std::min(oldest, r.alive->statement_epoch());
  return oldest;
}

std::string Server::render_metrics() {
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
