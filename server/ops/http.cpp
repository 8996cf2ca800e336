#include "server/ops/http.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "server/cluster/proxy.hpp"
#include "server/txn/two_phase.hpp"

namespace splitpoint::server {

namespace {

constexpr std::size_t kMaxRequest = 8192;
constexpr auto kRequestTimeout = std::chrono::seconds(5);

// A shard is reachable if a pool holds a connection to it, or a TCP connect succeeds.
awaitable<bool> shard_reachable(const ShardPools& shard) {
  for (auto& pool : shard.all()) {
    auto s = pool->stats();
    if (s.idle + s.active > 0) co_return true;
  }
  using namespace asio::experimental::awaitable_operators;
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, endpoints] =
      co_await resolver.async_resolve(shard.shard().host, std::to_string(shard.shard().port), use_nothrow);
  if (rec) co_return false;
  tcp::socket socket(ex);
  asio::steady_timer timer(ex, std::chrono::seconds(1));
  auto r = co_await (asio::async_connect(socket, endpoints, use_nothrow) || timer.async_wait(use_nothrow));
  co_return r.index() == 0 && !std::get<0>(std::get<0>(r));
}

awaitable<void> handle(Proxy& server, tcp::socket socket) {
  using namespace asio::experimental::awaitable_operators;
  auto ex = co_await asio::this_coro::executor;
  std::string req;
  asio::steady_timer timer(ex, kRequestTimeout);
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < kMaxRequest) {
    char buf[1024];
    auto r = co_await (socket.async_read_some(asio::buffer(buf), use_nothrow) || timer.async_wait(use_nothrow));
    if (r.index() != 0) co_return;
    auto [ec, n] = std::get<0>(r);
    if (ec) co_return;
    req.append(buf, n);
  }
  std::string_view line(req);
  line = line.substr(0, line.find("\r\n"));
  auto sp1 = line.find(' ');
  auto sp2 = line.find(' ', sp1 + 1);
  std::string_view method = line.substr(0, sp1);
  std::string_view path = sp1 == std::string_view::npos ? "" : line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));

  int status = 200;
  std::string body, type = "text/plain; charset=utf-8";
  if (method != "GET" && method != "HEAD") {
    status = 405;
    body = "method not allowed\n";
  } else if (path == "/metrics") {
    body = server.render_metrics();
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else if (path == "/healthz") {
    body = "ok\n";
  } else if (path == "/readyz") {
    auto rt = server.runtime();
    std::string missing;
    for (auto& shard : rt->shards)
      if (!co_await shard_reachable(*shard)) missing += (missing.empty() ? "" : ", ") + shard->shard().name;
    if (missing.empty()) {
      body = "ready\n";
    } else {
      status = 503;
      body = "unreachable shards: " + missing + "\n";
    }
    // Not a readiness failure: everything but a write to several shards in one
    // transaction works, so the note is in the body and the status stays.
    if (rt->config.cross_shard_writes == config::CrossShardWrites::two_phase)
      for (auto& name : two_phase::shards_without_prepared_transactions(*rt))
        body += "warning: " + two_phase::no_prepared_transactions(name) + "\n";
  } else {
    status = 404;
    body = "not found\n";
  }
  const char* reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed"
                                                                                       : "Service Unavailable";
  std::string resp = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (method != "HEAD") resp += body;
  co_await asio::async_write(socket, asio::buffer(resp), use_nothrow);
  error_code ignored;
  socket.shutdown(tcp::socket::shutdown_both, ignored);
}

}  // namespace

awaitable<void> serve_http(Proxy& server, tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      continue;
    }
    asio::co_spawn(acceptor.get_executor(), handle(server, std::move(socket)), asio::detached);
  }
}

}  // namespace splitpoint::server
