// The session's side of scatter-gather reads (SPEC §4): the deadline and partial-result
// settings of a statement, and the hand-over to its executor (server/session/execute/scatter_read.hpp).
#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <charconv>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/net/scatter_io.hpp"
#include "server/session/execute/scatter_read.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

std::optional<std::chrono::milliseconds> parse_ms(std::string_view v) {
  if (auto d = config::parse_duration(v)) return *d;
  return std::nullopt;
}

}  // namespace

// Deadline: hint > SET LOCAL > SET > config, capped by scatter.max_deadline.
std::chrono::milliseconds Session::scatter_deadline(const routing::Route& route) const {
  const auto& sc = runtime_->config.scatter;
  std::optional<std::chrono::milliseconds> d;
  for (auto& [k, v] : route.hints)
    if (k == "deadline") d = parse_ms(v);
  if (!d) d = local_setting_ms("deadline");
  if (!d) d = sc.deadline;
  return std::min(*d, sc.max_deadline);
}

bool Session::scatter_allows_partial(const routing::Route& route) const {
  for (auto& [k, v] : route.hints)
    if (k == "partial") return v == "allow";
  if (auto v = local_setting("partial_results")) return *v == "allow";
  return runtime_->config.scatter.partial_results == config::PartialResults::allow;
}

std::optional<std::string> Session::local_setting(std::string_view name) const {
  // SET LOCAL values (kept until the transaction ends) win over SET values.
  for (auto& [k, v] : settings_.local_txn)
    if (k == name) return v;
  for (auto& [k, v] : settings_.local)
    if (k == name) return v;
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> Session::local_setting_ms(std::string_view name) const {
  if (auto v = local_setting(name)) return parse_ms(*v);
  return std::nullopt;
}

// The statement's executor (server/session/execute/scatter_read.hpp) does the work.
awaitable<bool> Session::scatter_read(const routing::Route& route, ScatterRequest req) {
  ScatterRead read(*this, route, std::move(req));
  const bool ok = co_await read.run();
  if (!ok || !read.wants_combine()) co_return ok;
  // The merger refused the shards' column types: the combine step answers instead.
  routing::Route combined = route;
  combined.needs_combine = true;
  ScatterRead again(*this, combined, read.take_request(), read.started());
  co_return co_await again.run();
}

// Number of result columns of `sql` (one Parse + Describe on `on`, else on any shard).
awaitable<std::optional<std::size_t>> Session::describe_columns(const std::string& sql,
                                                                const std::vector<std::int32_t>& types, Backend* on) {
  std::size_t shard = hosts_.pick_any_shard();
  std::unique_ptr<Backend> borrowed;
  Backend* b = on != nullptr ? on : held_[shard].get();
  if (!b) {
    auto r = co_await pools_[shard]->acquire(runtime_->config.timeouts.client_login);
    if (!r.backend) co_return std::nullopt;
    borrowed = std::move(r.backend);
    b = borrowed.get();
  }
  std::string out;
  proto::Parse{"", sql, types}.encode(out);
  proto::Describe{'S', ""}.encode(out);
  proto::encode_sync(out);
  std::optional<std::size_t> columns;
  bool ok = !std::get<0>(co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow));
  if (ok)
    ok = co_await read_until_ready(*b, 1, limits_, [&](char type, std::string_view, std::string_view body) {
      if (type == 'T')
        if (auto rd = proto::RowDescription::decode(body)) columns = rd->fields.size();
    });
  if (borrowed) hosts_.give_back(shard, std::move(borrowed), ok);
  co_return columns;
}

}  // namespace splitpoint::server
