#include "server/server.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "server/cluster/health.hpp"
#include "server/ops/http.hpp"
#include "server/session/session.hpp"
#include "server/txn/deadlocks.hpp"
#include "server/txn/two_phase.hpp"

namespace splitpoint::server {

Server::Server(std::shared_ptr<const Runtime> runtime, std::string config_path)
    : Proxy(std::move(runtime), std::move(config_path)) {}

Server::~Server() {
  // Teardown order matters. Sessions die with their worker's pending coroutines and
  // use the registry, the cancel keys, the metrics and the pools on the way out; a
  // backend's socket belongs to whichever worker opened it (Proxy::tear_down).
  signals_.reset();
  acceptor_.reset();
  metrics_acceptor_.reset();
  tear_down();
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
  start_catalog();
  start_indexes();
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
  asio::co_spawn(main_ctx, deadlocks::search_loop(*this, session_deadlock_hooks()), asio::detached);
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
  while (client_count().load() > 0 && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(50));
    co_await timer.async_wait(use_nothrow);
  }
  if (client_count().load() > 0) spdlog::warn("shutdown timeout: closing {} client connections", client_count().load());
  error_code ignored;
  metrics_acceptor_->close(ignored);
  for (auto& w : workers_) w->context.stop();
}

void Server::begin_shutdown() {
  Proxy::begin_shutdown();
  error_code ignored;
  acceptor_->close(ignored);
  for (auto& w : workers_) {
    asio::post(w->context, [w = w.get()] {
      for (auto* s : w->sessions) s->on_shutdown();
    });
  }
}

}  // namespace splitpoint::server
