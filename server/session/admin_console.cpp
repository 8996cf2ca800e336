// The admin console (SPEC §7): database "splitpoint", users with `admin: true`,
// simple query protocol. Every answer is a result set of text columns.
#include <spdlog/spdlog.h>

#include <cctype>

#include "config/redact.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/dispatch.hpp"
#include "routing/merge/merge_plan.hpp"
#include <future>

#include "server/cluster/catalog.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/execute/scatter_read.hpp"
#include "server/session/admin_console.hpp"
#include "server/session/session.hpp"
#include "server/state/split_advice.hpp"
#include "server/cluster/indexes.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

constexpr std::size_t kHotKeysShown = 10;
constexpr const char* kAdminHelp =
    "unknown admin command; try SHOW SHARDS | POOLS | HOSTS | CLIENTS | PARTITIONS | HOT KEYS | SPLIT ADVICE | INDEXES | "
    "ROUTE <statement> | CHECK INDEX name [REPAIR] | "
    "CONFIG | "
    "TOPOLOGY | MOVES [ALL], RELOAD, PAUSE [shard], RESUME [shard], ADD SHARD name host=... port=..., DROP SHARD name, "
    "REBALANCE dist "
    "[DRY RUN], MOVE PARTITION dist:part TO shard, CANCEL MOVE id, SPLIT RANGE dist AT value, MERGE RANGE dist AT value, "
    "SPLIT PARTITION dist:part, MERGE PARTITION dist:part, PRESPLIT dist INTO n [FROM SAMPLE query], "
    "CREATE [UNIQUE] INDEX name ON table (column, ...), DROP INDEX name";

// Upper-cased words of a command, without a trailing semicolon.
std::vector<std::string> words_of(std::string_view sql, std::size_t max_words, std::string_view& rest) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (words.size() < max_words) {
    while (i < sql.size() && std::isspace(static_cast<unsigned char>(sql[i]))) ++i;
    std::size_t start = i;
    while (i < sql.size() && !std::isspace(static_cast<unsigned char>(sql[i])) && sql[i] != ';') ++i;
    if (i == start) break;
    std::string w(sql.substr(start, i - start));
    for (auto& c : w) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    words.push_back(std::move(w));
  }
  rest = sql.substr(std::min(i, sql.size()));
  return words;
}

// The command's first words are `expect` (upper-cased words, as words_of gives them).
bool command_is(const std::vector<std::string>& w, std::initializer_list<const char*> expect) {
  if (w.size() < expect.size()) return false;
  std::size_t i = 0;
  for (auto e : expect)
    if (w[i++] != e) return false;
  return true;
}

void admin_error(WorkerMetrics& metrics, std::string& out, std::string_view code, const std::string& message) {
  metrics.error(code);
  proto::ErrorFields::make("ERROR", code, message).encode(out, 'E');
}

// A result set of text columns.
class Table {
 public:
  explicit Table(std::vector<std::string> columns) : columns_(std::move(columns)) {}
  void row(std::vector<std::optional<std::string>> values) { rows_.push_back(std::move(values)); }
  void encode(std::string& out, std::string_view tag) const {
    proto::RowDescription rd;
    for (auto& c : columns_) {
      proto::FieldDescription f;
      f.name = c;
      f.type_oid = 25;
      f.type_size = -1;
      f.type_modifier = -1;
      rd.fields.push_back(f);
    }
    rd.encode(out);
    for (auto& r : rows_) {
      proto::DataRow d;
      for (auto& v : r) d.values.push_back(v ? std::optional<std::string_view>(*v) : std::nullopt);
      d.encode(out);
    }
    proto::CommandComplete{std::string(tag) + " " + std::to_string(rows_.size())}.encode(out);
  }

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<std::optional<std::string>>> rows_;
};

std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : std::string(sep)) + x;
  return s;
}

const char* kind_name(routing::RouteKind k) {
  switch (k) {
    case routing::RouteKind::shards: return "shards";
    case routing::RouteKind::any_shard: return "any shard";
    case routing::RouteKind::all_shards: return "all shards";
    case routing::RouteKind::local: return "proxy";
    case routing::RouteKind::error: return "error";
    case routing::RouteKind::need_shapes: return "needs table definitions";
  }
  return "?";
}

// SHOW CONFIG: the settings in force.
void show_config(const config::Config& c, std::string& out) {
  Table t({"key", "value"});
  auto dur = [](auto d) { return std::to_string(d.count()) + "ms"; };
  t.row({"listen", c.listen.host + ":" + std::to_string(c.listen.port)});
  t.row({"metrics_listen", c.metrics_listen.host + ":" + std::to_string(c.metrics_listen.port)});
  t.row({"pool_mode", c.pool_mode == config::PoolMode::transaction ? "transaction" : "session"});
  const char* auths[] = {"trust", "password", "md5", "scram-sha-256", "passthrough"};
  t.row({"auth", auths[static_cast<int>(c.auth)]});
  t.row({"tls", c.tls ? "on" : "off"});
  t.row({"users", std::to_string(c.users.size())});
  std::vector<std::string> shards;
  for (auto& s : c.shards) {
    std::string hosts;  // (SPEC §10) its hosts, when more than one
    if (s.all_hosts().size() > 1)
      for (auto& h : s.all_hosts()) hosts += (hosts.empty() ? " (" : ", ") + h.host + ":" + std::to_string(h.port);
    shards.push_back(s.name + (hosts.empty() ? "" : hosts + ")"));
  }
  t.row({"shards", join(shards)});
  for (auto& d : c.distributions) {
    const char* methods[] = {"hash", "range", "list"};
    std::vector<std::string> tables;
    for (auto& [tb, col] : d.tables) tables.push_back(tb + "(" + col + ")");
    t.row({"distribution " + d.name, std::string(methods[static_cast<int>(d.method)]) + "; tables " + join(tables)});
  }
  t.row({"reference_tables", join(c.reference_tables)});
  t.row({"scatter.deadline", dur(c.scatter.deadline)});
  t.row({"scatter.max_deadline", dur(c.scatter.max_deadline)});
  t.row({"scatter.partial_results", c.scatter.partial_results == config::PartialResults::allow ? "allow" : "deny"});
  t.row({"scatter.max_buffered_rows", std::to_string(c.scatter.max_buffered_rows)});
  t.row({"scatter.combine", c.scatter.combine_database ? config::redact_passwords(c.scatter.combine_dsn)
                            : c.shards.empty()          ? ""
                                                        : c.shards[c.scatter.combine_shard].name});
  t.row({"scatter.max_combine_rows", std::to_string(c.scatter.max_combine_rows)});
  t.row({"transactions.cross_shard_writes",
         c.cross_shard_writes == config::CrossShardWrites::two_phase ? "two_phase" : "refuse"});
  t.row({"catalog", c.catalog_shard                ? c.shards[*c.catalog_shard].name
                    : !c.catalog_dsn.empty() ? config::redact_passwords(c.catalog_dsn)
                                             : "(none: the file is the topology)"});
  t.row({"moves.max_hold", dur(c.moves.max_hold)});
  t.row({"moves.poll", dur(c.moves.poll)});
  t.row({"moves.lease", dur(c.moves.lease)});
  t.row({"moves.verify", c.moves.verify ? "on" : "off"});
  t.row({"reads", c.reads == config::Reads::replica ? "replica" : "primary"});
  t.row({"max_replica_lag", dur(c.max_replica_lag)});
  t.row({"health.interval", dur(c.health.interval)});
  t.row({"health.timeout", dur(c.health.timeout)});
  t.row({"health.ban", dur(c.health.ban)});
  t.row({"timeouts.client_login", dur(c.timeouts.client_login)});
  t.row({"timeouts.client_idle", dur(c.timeouts.client_idle)});
  t.row({"timeouts.server_connect", dur(c.timeouts.server_connect)});
  t.row({"timeouts.shard_unavailable", dur(c.timeouts.shard_unavailable)});
  t.row({"timeouts.shutdown", dur(c.timeouts.shutdown)});
  t.row({"timeouts.query", dur(c.timeouts.query)});
  t.row({"timeouts.deadlock", dur(c.timeouts.deadlock)});
  t.row({"max_client_connections", std::to_string(c.max_client_connections)});
  t.row({"max_message_size", std::to_string(c.max_message_size)});
  t.row({"max_prepared_statements", std::to_string(c.max_prepared_statements)});
  t.encode(out, "SHOW");
}

}  // namespace

awaitable<bool> Session::admin_login() {
  const UserAuth* user = runtime_->find_user(who_.user);
  if (!user || !user->admin) {
    spdlog::info("[{}] closed: user {} is not an admin", id_, who_.user);
    co_await send_error("FATAL", sqlstate::insufficient_privilege,
                        "permission denied to use the admin console (database \"splitpoint\")", false);
    co_return false;
  }
  who_.admin = true;
  std::string out;
  proto::Authentication{}.encode(out);
  for (auto [k, v] : {std::pair{"server_version", "15.0 (splitpoint admin)"}, {"server_encoding", "UTF8"},
                      {"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"},
                      {"standard_conforming_strings", "on"}, {"TimeZone", "UTC"}})
    proto::ParameterStatus{k, v}.encode(out);
  const auto key = server_.cancels().add(shared_from_this());
  who_.cancel_pid = key.pid;
  who_.cancel_secret = key.secret;
  proto::BackendKeyData{who_.cancel_pid, who_.cancel_secret}.encode(out);
  proto::ReadyForQuery{'I'}.encode(out);
  if (co_await stream_.write(out)) co_return false;
  who_.logged_in = true;
  metrics_.clients.add(1);
  server_.register_session(id_, shared_from_this(), moves_.epoch);
  spdlog::info("[{}] admin console login user={}", id_, who_.user);
  co_return true;
}

awaitable<void> AdminConsole::serve() {
  for (;;) {
    auto r = proto::decode_frame(std::string_view(s_.cbuf_).substr(s_.cpos_), proto::Direction::frontend, s_.limits_);
    if (r.status == proto::FrameStatus::error) {
      co_await s_.send_error("FATAL", sqlstate::protocol_violation, r.error, false);
      co_return;
    }
    if (r.status == proto::FrameStatus::need_more) {
      s_.cbuf_.erase(0, s_.cpos_);
      s_.cpos_ = 0;
      if (co_await s_.stream_.read_some(s_.cbuf_)) co_return;
      continue;
    }
    auto f = r.frame;
    std::string out;
    if (f.type == 'X') co_return;
    if (f.type == 'Q') {
      auto q = proto::Query::decode(f.body);
      std::string sql = q ? std::string(q->sql) : std::string();
      if (!co_await run_logged(sql, out)) co_return;
      proto::ReadyForQuery{'I'}.encode(out);
    } else if (f.type == 'S') {
      skip_until_sync_ = false;
      portals_.clear();  // (the batch's implicit transaction ends, and its portals)
      proto::ReadyForQuery{'I'}.encode(out);
    } else if (f.type == 'P' || f.type == 'B' || f.type == 'D' || f.type == 'E' || f.type == 'H' || f.type == 'C') {
      if (!co_await extended(f, out)) co_return;
    } else {
      co_await s_.send_error("FATAL", sqlstate::protocol_violation,
                          "invalid frontend message type " + std::to_string(static_cast<unsigned char>(f.type)),
                          false);
      co_return;
    }
    s_.cpos_ += f.size;
    if (!out.empty() && co_await s_.stream_.write(out)) co_return;
  }
}

awaitable<bool> AdminConsole::run_logged(std::string_view sql, std::string& out) {
  s_.metrics_.queries[static_cast<std::size_t>(RouteLabel::admin)].add();
  // SPEC §11: every admin action, once, with who and from where.
  spdlog::info("[{}] admin command user={} address={}: {}", s_.id_, s_.who_.user, s_.who_.peer,
               config::redact_passwords(sql));
  co_return co_await command(sql, out);
}

// SHOW ROUTE <statement>: how it would be routed and answered, without running it.
awaitable<void> AdminConsole::show_route(std::string_view sql, std::string& out) {
  auto rt = s_.server_.runtime();
  // The statement after SHOW ROUTE, routed without running it.
  std::string_view r2;
  words_of(sql, 2, r2);
  std::string stmt(r2);
  KeptShapes keep;
  auto lookup = s_.shape_lookup(keep);
  auto route = rt->router->route_simple(stmt, s_.settings_.routing, lookup);
  if (route.kind == routing::RouteKind::need_shapes) {
    co_await s_.fetch_shapes(route.missing_tables, keep);  // (the console has no pools: learnt by clients' statements)
    route = rt->router->route_simple(stmt, s_.settings_.routing, lookup);
  }
  std::vector<std::string> shards, parts;
  std::vector<std::size_t> ids = route.shards;
  if (route.kind == routing::RouteKind::all_shards) ids = route.target_shards(rt->config.shards.size());
  for (auto s : ids) shards.push_back(rt->config.shards[s].name);
  for (auto& p : route.partitions)
    parts.push_back(rt->config.distributions[p.distribution].name + ":" + std::to_string(p.partition));
  std::string merge = "none (one shard)";
  bool multi = route.kind == routing::RouteKind::all_shards ||
               (route.kind == routing::RouteKind::shards && route.shards.size() > 1);
  if (route.kind == routing::RouteKind::any_shard) merge = "none (any one shard)";
  if (multi && route.cls == routing::StatementClass::read) {
    KeptShapes keep;
    auto planned = rt->shapes->scatter_plans().plan(stmt, scatter_options(*rt, route, keep));
    if (planned->merge) merge = planned->merge->describe();
    else if (planned->combine) merge = planned->combine->describe();
    else merge = "refused: " + planned->error->sqlstate + " " + planned->error->message;
  } else if (multi) {
    merge = route.key_guard() ? "the new key's shard runs it, the others run it guarded (refused if a row would move)"
            : route.per_shard_sql.empty() ? "same statement on each shard; results combined"
                                          : "rows split into one statement per shard; results combined";
  }
  // The executors the session would try, in order (routing/dispatch.hpp).
  std::vector<std::string> steps;
  for (auto step : routing::dispatch(route, rt->config.shards.size(), routing::Protocol::simple))
    steps.emplace_back(routing::executor_name(step));
  Table t({"route", "shards", "partitions", "keys", "merge", "error", "steps"});
  t.row({kind_name(route.kind), join(shards), join(parts), join(route.key_values), merge,
         route.kind == routing::RouteKind::error ? std::optional<std::string>(route.sqlstate + " " + route.message)
         : route.kind == routing::RouteKind::need_shapes
             ? std::optional<std::string>("the columns of " + join(route.missing_tables) +
                                          " are not known to this proxy yet: a client's statement on them reads them")
             : std::nullopt,
         route.kind == routing::RouteKind::need_shapes ? std::nullopt : std::optional<std::string>(join(steps))});
  t.encode(out, "SHOW");
}

namespace {

// Runs blocking catalog work on a thread of its own and waits without blocking the
// worker; an exception comes back as CatalogError. (`f` by reference, a named local of
// the caller: GCC 12 mishandles temporaries with destructors in co_await'ed calls.)
template <typename F>
awaitable<std::variant<std::invoke_result_t<F>, CatalogError>> run_off_thread(const F& f) {
  using R = std::variant<std::invoke_result_t<F>, CatalogError>;
  auto done = std::async(std::launch::async, [f]() -> R {
    try {
      return R(std::in_place_index<0>, f());
    } catch (const CatalogError& e) {
      return R(std::in_place_index<1>, e);
    } catch (const std::exception& e) {
      return R(std::in_place_index<1>, CatalogError(std::string(sqlstate::internal_error), e.what()));
    }
  });
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    timer.expires_after(std::chrono::milliseconds(2));
    co_await timer.async_wait(use_nothrow);
  }
  co_return done.get();
}

// run_off_thread, with a failure answered as the command's error in `out` (nullopt).
template <typename F>
awaitable<std::optional<std::invoke_result_t<F>>> off_thread(const F& f, WorkerMetrics& metrics, std::string& out) {
  auto r = co_await run_off_thread(f);
  if (r.index() == 1) {
    admin_error(metrics, out, std::get<1>(r).sqlstate, std::get<1>(r).what());
    co_return std::nullopt;
  }
  co_return std::get<0>(std::move(r));
}

// The words of a command as written (names keep their case), without a trailing ';'.
std::vector<std::string> raw_words(std::string_view sql) {
  std::vector<std::string> out;
  std::size_t i = 0;
  for (;;) {
    while (i < sql.size() && (std::isspace(static_cast<unsigned char>(sql[i])) || sql[i] == ';')) ++i;
    std::size_t start = i;
    while (i < sql.size() && !std::isspace(static_cast<unsigned char>(sql[i])) && sql[i] != ';') ++i;
    if (i == start) return out;
    out.emplace_back(sql.substr(start, i - start));
  }
}

// A range partition's bounds for SHOW PARTITIONS (NULL: unbounded, or not a range).
std::pair<std::optional<std::string>, std::optional<std::string>> range_bounds(const config::Config& config,
                                                                               const std::string& distribution,
                                                                               std::uint32_t p) {
  for (const auto& d : config.distributions)
    if (d.name == distribution && d.method == config::Method::range && p < d.ranges.size())
      return {p > 0 ? d.ranges[p - 1].upto : std::nullopt, d.ranges[p].upto};
  return {};
}

// A hash partition's modulus and remainder for SHOW PARTITIONS (NULL: not a hash one).
std::pair<std::optional<std::string>, std::optional<std::string>> hash_bounds(const config::Config& config,
                                                                              const std::string& distribution,
                                                                              std::uint32_t p) {
  for (const auto& d : config.distributions)
    if (d.name == distribution && d.method == config::Method::hash && p < d.placement.size()) {
      const auto hp = d.hash_partition(p);
      return {std::to_string(hp.modulus), std::to_string(hp.remainder)};
    }
  return {};
}

std::optional<std::string> opt(const std::optional<std::int64_t>& v) {
  return v ? std::optional<std::string>(std::to_string(*v)) : std::nullopt;
}

}  // namespace

awaitable<void> presplit_command(std::string_view sql, Catalog& c, WorkerMetrics& metrics, std::string& out);
awaitable<void> index_command(std::string_view sql, Catalog& c, WorkerMetrics& metrics, std::string& out);

// SHOW TOPOLOGY, SHOW MOVES [ALL], ADD SHARD, REBALANCE dist [DRY RUN], MOVE PARTITION
// dist:part TO shard, CANCEL MOVE id, SPLIT/MERGE RANGE, PRESPLIT (SPEC §9). False: not one of them.
awaitable<bool> AdminConsole::catalog_command(const std::vector<std::string>& w, std::string_view sql, std::string& out) {
  auto is = [&](std::initializer_list<const char*> expect) { return command_is(w, expect); };
  if (!is({"SHOW", "TOPOLOGY"}) && !is({"SHOW", "MOVES"}) && !is({"MOVE", "PARTITION"}) && !is({"CANCEL", "MOVE"}) &&
      !is({"ADD", "SHARD"}) && !is({"DROP", "SHARD"}) && !is({"REBALANCE"}) && !is({"SPLIT", "RANGE"}) &&
      !is({"MERGE", "RANGE"}) && !is({"SPLIT", "PARTITION"}) && !is({"MERGE", "PARTITION"}) && !is({"PRESPLIT"}) &&
      !is({"CREATE", "INDEX"}) && !is({"CREATE", "UNIQUE", "INDEX"}) && !is({"DROP", "INDEX"}))
    co_return false;
  Catalog* catalog = s_.server_.catalog();
  auto error = [&](std::string_view code, const std::string& msg) { admin_error(s_.metrics_, out, code, msg); };
  if (!catalog && (w[0] == "CREATE" || is({"DROP", "INDEX"}))) {
    error("SPA01", "no catalog: the indexes are the configuration file's `indexes:` (set catalog: to create and drop "
                   "them on the admin console)");
    co_return true;
  }
  if (!catalog) {
    error("SPA01", "no catalog: the topology is the configuration file's (set catalog: to change it online)");
    co_return true;
  }
  const auto words = raw_words(sql);
  if (is({"SHOW", "TOPOLOGY"})) {
    auto list = [catalog] { return catalog->proxies(); };
    auto r = co_await off_thread(list, s_.metrics_, out);
    if (!r) co_return true;
    Table t({"proxy", "address", "epoch", "lease_until", "live", "this"});
    for (const auto& p : *r)
      t.row({p.id, p.address, std::to_string(p.epoch), p.lease_until, p.live ? "yes" : "no",
             p.id == catalog->proxy_id() ? "yes" : "no"});
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "MOVES"})) {
    const bool all = w.size() > 2 && w[2] == "ALL";
    auto list = [catalog, all] { return catalog->moves(all); };
    auto r = co_await off_thread(list, s_.metrics_, out);
    if (!r) co_return true;
    Table t({"id", "distribution", "partition", "source", "target", "state", "rows_copied", "rows_total", "eta_s",
             "lag_bytes", "hold_ms",
             "attempts", "owner", "error", "reason"});
    auto text = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional<std::string>(v); };
    for (const auto& m : *r)
      t.row({std::to_string(m.id), m.distribution, std::to_string(m.partition), m.source, m.target, m.state,
             std::to_string(m.rows_copied), opt(m.rows_total), opt(m.eta_s), opt(m.lag_bytes), opt(m.hold_ms),
             std::to_string(m.attempts), text(m.owner), text(m.error), text(m.reason)});
    t.encode(out, "SHOW");
  } else if (is({"SPLIT"}) || is({"MERGE"})) {
    co_await range_change(w, sql, *catalog, out);
  } else if (is({"PRESPLIT"})) {
    co_await presplit_command(sql, *catalog, s_.metrics_, out);
  } else if (w[0] == "CREATE" || is({"DROP", "INDEX"})) {
    co_await index_command(sql, *catalog, s_.metrics_, out);
    if (!out.empty() && out[0] == 'C') s_.server_.indexes().recheck();  // (this proxy's builder looks at once)
  } else {
    co_await topology_change(w, words, *catalog, out);
  }
  co_return true;
}

namespace {

// The value after AT: a quoted literal ('2024-01-01 00:00', '' for a quote) or the
// rest of the command as written, without a trailing ';'. nullopt: nothing, or a
// quote not closed.
std::optional<std::string> range_value(std::string_view rest) {
  while (!rest.empty() && (std::isspace(static_cast<unsigned char>(rest.back())) || rest.back() == ';'))
    rest.remove_suffix(1);
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
  if (rest.empty()) return std::nullopt;
  if (rest.front() != '\'') return std::string(rest);
  std::string v;
  for (std::size_t i = 1; i < rest.size(); ++i) {
    if (rest[i] != '\'') {
      v += rest[i];
    } else if (i + 1 < rest.size() && rest[i + 1] == '\'') {
      v += '\'';
      ++i;
    } else {
      return i + 1 == rest.size() ? std::optional<std::string>(v) : std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

awaitable<void> AdminConsole::range_change(const std::vector<std::string>& w, std::string_view sql, Catalog& c,
                                           std::string& out) {
  auto error = [&](std::string_view code, const std::string& msg) { admin_error(s_.metrics_, out, code, msg); };
  if (command_is(w, {"SPLIT", "PARTITION"}) || command_is(w, {"MERGE", "PARTITION"})) {
    const auto words = raw_words(sql);
    co_await hash_change(words, c, out, w[0] == "SPLIT");
    co_return;
  }
  const bool split = w[0] == "SPLIT";
  const std::string tag = split ? "SPLIT RANGE" : "MERGE RANGE";
  std::string_view rest;
  auto upper = words_of(sql, 4, rest);
  const auto raw = raw_words(sql);
  std::optional<std::string> value;
  if (upper.size() == 4 && upper[3] == "AT") value = range_value(rest);
  if (!value) {
    error(sqlstate::syntax_error, "usage: " + tag + " distribution AT value");
    co_return;
  }
  Catalog* catalog = &c;
  auto change = [catalog, dist = raw[2], v = *value, split] { return catalog->change_range(dist, v, split); };
  auto r = co_await off_thread(change, s_.metrics_, out);
  if (!r) co_return;
  Table t({"distribution", "partition", "lower", "upper", "shard"});
  for (const auto& row : *r) t.row({raw[2], std::to_string(row.partition), row.lower, row.upper, row.shard});
  t.encode(out, tag);
}

// PRESPLIT dist INTO n [FROM SAMPLE query]: every range afterwards, with the move queued
// for it (REBALANCE's), if any.
awaitable<void> presplit_command(std::string_view sql, Catalog& c, WorkerMetrics& metrics, std::string& out) {
  const char* usage = "usage: PRESPLIT distribution INTO n [FROM SAMPLE query]";
  std::string_view rest;
  auto upper = words_of(sql, 4, rest);
  const auto raw = raw_words(sql);
  std::string sample;
  bool ok = upper.size() == 4 && upper[2] == "INTO" && !upper[3].empty() && upper[3].size() <= 9 &&
            upper[3].find_first_not_of("0123456789") == std::string::npos;
  while (!rest.empty() && (std::isspace(static_cast<unsigned char>(rest.back())) || rest.back() == ';'))
    rest.remove_suffix(1);
  if (ok && !rest.empty()) {
    std::string_view query;
    auto from = words_of(rest, 2, query);
    ok = from.size() == 2 && from[0] == "FROM" && from[1] == "SAMPLE" && !query.empty();
    sample = std::string(query);
  }
  if (!ok) {
    admin_error(metrics, out, sqlstate::syntax_error, usage);
    co_return;
  }
  const auto n = static_cast<std::uint32_t>(std::stoul(upper[3]));
  if (n < 2) {
    admin_error(metrics, out, sqlstate::invalid_parameter_value, "PRESPLIT " + raw[1] + " INTO " + upper[3] +
                                                                         ": INTO needs at least 2 ranges");
    co_return;
  }
  Catalog* catalog = &c;
  auto run = [catalog, dist = raw[1], n, sample] { return catalog->presplit(dist, n, sample); };
  auto r = co_await off_thread(run, metrics, out);
  if (!r) co_return;
  Table t({"distribution", "partition", "lower", "upper", "shard", "move", "target"});
  for (const auto& row : r->ranges) {
    std::optional<std::string> move, target;
    for (const auto& m : r->moves)
      if (m.partition == row.partition) move = std::to_string(m.id), target = m.target;
    t.row({raw[1], std::to_string(row.partition), row.lower, row.upper, row.shard, move, target});
  }
  t.encode(out, "PRESPLIT");
}

namespace {

// PostgreSQL's folding of an unquoted identifier.
std::string folded(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// CREATE [UNIQUE] INDEX name ON table (column, ...); nullopt: not that.
std::optional<config::Index> index_definition(std::string_view sql) {
  const auto open = sql.find('('), close = sql.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  const std::string_view after = sql.substr(close + 1);
  if (after.find_first_not_of(" \t\r\n;") != std::string_view::npos) return std::nullopt;
  auto head = raw_words(sql.substr(0, open));
  config::Index ix;
  ix.unique = head.size() == 6 && folded(head[1]) == "unique";
  if (head.size() != (ix.unique ? 6u : 5u)) return std::nullopt;
  if (ix.unique) head.erase(head.begin() + 1);
  if (folded(head[0]) != "create" || folded(head[1]) != "index" || folded(head[3]) != "on") return std::nullopt;
  ix.name = folded(head[2]);
  ix.table = folded(head[4]);
  const std::string_view list = sql.substr(open + 1, close - open - 1);
  for (std::size_t p = 0; p <= list.size();) {
    const auto comma = std::min(list.find(',', p), list.size());
    auto col = raw_words(list.substr(p, comma - p));
    if (col.size() != 1) return std::nullopt;
    ix.columns.push_back(folded(col[0]));
    p = comma + 1;
  }
  if (ix.table.starts_with("public.")) ix.table = ix.table.substr(7);
  return ix;
}

}  // namespace

// CREATE [UNIQUE] INDEX name ON table (columns), DROP INDEX name (SPEC §12, with a catalog).
awaitable<void> index_command(std::string_view sql, Catalog& c, WorkerMetrics& metrics, std::string& out) {
  Catalog* catalog = &c;
  const auto words = raw_words(sql);
  if (!words.empty() && folded(words[0]) == "drop") {
    if (words.size() != 3) {
      admin_error(metrics, out, sqlstate::syntax_error, "usage: DROP INDEX name");
      co_return;
    }
    auto drop = [catalog, name = folded(words[2])] {
      catalog->drop_index(name);
      return 0;
    };
    if (co_await off_thread(drop, metrics, out)) proto::CommandComplete{"DROP INDEX"}.encode(out);
    co_return;
  }
  auto ix = index_definition(sql);
  if (!ix) {
    admin_error(metrics, out, sqlstate::syntax_error, "usage: CREATE [UNIQUE] INDEX name ON table (column, ...)");
    co_return;
  }
  auto create = [catalog, ix = *ix] {
    catalog->create_index(ix);
    return 0;
  };
  if (co_await off_thread(create, metrics, out)) proto::CommandComplete{"CREATE INDEX"}.encode(out);
}

namespace {

// "dist:part" as MOVE PARTITION and SPLIT PARTITION name a partition; nullopt: not that.
std::optional<std::pair<std::string, std::uint32_t>> partition_name(const std::string& word) {
  const auto colon = word.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= word.size() || word.size() - colon > 10 ||
      word.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return std::nullopt;
  return std::pair{word.substr(0, colon), static_cast<std::uint32_t>(std::stoul(word.substr(colon + 1)))};
}

}  // namespace

// SPLIT PARTITION dist:part answers both halves, MERGE PARTITION dist:part the merged
// partition (distribution, partition, modulus, remainder, shard), once every live proxy
// routes with them.
awaitable<void> AdminConsole::hash_change(const std::vector<std::string>& words, Catalog& c, std::string& out,
                                          bool split) {
  const std::string tag = split ? "SPLIT PARTITION" : "MERGE PARTITION";
  std::optional<std::pair<std::string, std::uint32_t>> part;
  if (words.size() == 3) part = partition_name(words[2]);
  if (!part) {
    admin_error(s_.metrics_, out, sqlstate::syntax_error, "usage: " + tag + " distribution:partition");
    co_return;
  }
  Catalog* catalog = &c;
  auto change = [catalog, part, split] {
    return split ? catalog->split_partition(part->first, part->second)
                 : catalog->merge_partition(part->first, part->second);
  };
  auto r = co_await off_thread(change, s_.metrics_, out);
  if (!r) co_return;
  Table t({"distribution", "partition", "modulus", "remainder", "shard"});
  for (const auto& row : *r)
    t.row({part->first, std::to_string(row.partition), std::to_string(row.modulus), std::to_string(row.remainder),
           row.shard});
  t.encode(out, tag);
}

// ADD SHARD name host=... port=... [database=...] [user=...] [password=...] [pool_size=...]
awaitable<void> AdminConsole::add_shard(const std::vector<std::string>& words, Catalog& c, std::string& out) {
  auto error = [&](std::string_view code, const std::string& msg) { admin_error(s_.metrics_, out, code, msg); };
  Catalog* catalog = &c;
  std::vector<std::pair<std::string, std::string>> options;
  for (std::size_t i = 3; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      error(sqlstate::syntax_error,
            "usage: ADD SHARD name host=... port=... [database=...] [user=...] [password=...] [pool_size=...]");
      co_return;
    }
    options.emplace_back(words[i].substr(0, eq), words[i].substr(eq + 1));
  }
  if (words.size() < 3) {
    error(sqlstate::syntax_error, "usage: ADD SHARD name host=... port=...");
    co_return;
  }
  auto name = words[2];
  auto add = [=] {
    catalog->add_shard(name, options);
    return 0;
  };
  auto r = co_await off_thread(add, s_.metrics_, out);
  if (!r) co_return;
  // Answered once this proxy routes with it (SHOW SHARDS next shows it).
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (int i = 0; i < 1000 && !s_.server_.runtime()->config.find_shard(name); ++i) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(use_nothrow);
  }
  proto::CommandComplete{"ADD SHARD"}.encode(out);
}

// ADD SHARD, DROP SHARD, REBALANCE, MOVE PARTITION, CANCEL MOVE: `w` upper-cased, `words` as written.
awaitable<void> AdminConsole::topology_change(const std::vector<std::string>& w, const std::vector<std::string>& words,
                                         Catalog& c, std::string& out) {
  auto is = [&](std::initializer_list<const char*> expect) { return command_is(w, expect); };
  auto error = [&](std::string_view code, const std::string& msg) { admin_error(s_.metrics_, out, code, msg); };
  Catalog* catalog = &c;
  if (is({"ADD", "SHARD"})) {
    co_await add_shard(words, c, out);
  } else if (is({"DROP", "SHARD"})) {
    if (words.size() != 3) {
      error(sqlstate::syntax_error, "usage: DROP SHARD name");
      co_return;
    }
    auto drop = [catalog, name = words[2]] {
      catalog->drop_shard(name);
      return 0;
    };
    auto r = co_await off_thread(drop, s_.metrics_, out);
    if (!r) co_return;
    proto::CommandComplete{"DROP SHARD"}.encode(out);
  } else if (is({"REBALANCE"})) {
    const bool dry = words.size() == 4 && (w.size() > 2 && w[2] == "DRY") && (words[3] == "RUN" || words[3] == "run");
    if (words.size() != 2 && !dry) {
      error(sqlstate::syntax_error, "usage: REBALANCE distribution [DRY RUN]");
      co_return;
    }
    auto dist = words[1];
    auto plan = [=] { return catalog->rebalance(dist, dry); };
    auto r = co_await off_thread(plan, s_.metrics_, out);
    if (!r) co_return;
    Table t({"move", "distribution", "partition", "source", "target"});
    for (const auto& m : *r)
      t.row({dry ? std::nullopt : std::optional<std::string>(std::to_string(m.id)), m.distribution,
             std::to_string(m.partition), m.source, m.target});
    t.encode(out, "REBALANCE");
  } else if (is({"MOVE", "PARTITION"})) {
    std::optional<std::pair<std::string, std::uint32_t>> named;
    if (words.size() == 5) named = partition_name(words[2]);
    if (!named || !(words[3] == "TO" || words[3] == "to")) {
      error(sqlstate::syntax_error, "usage: MOVE PARTITION distribution:partition TO shard");
      co_return;
    }
    auto dist = named->first;
    auto part = named->second;
    auto target = words[4];
    auto plan = [=] { return catalog->plan_move(dist, part, target); };
    auto r = co_await off_thread(plan, s_.metrics_, out);
    if (!r) co_return;
    Table t({"move"});
    t.row({std::to_string(*r)});
    t.encode(out, "MOVE");
  } else {
    if (words.size() != 3 || words[2].empty() || words[2].size() > 18 ||
        words[2].find_first_not_of("0123456789") != std::string::npos) {
      error(sqlstate::syntax_error, "usage: CANCEL MOVE id");
      co_return;
    }
    const std::int64_t id = std::stoll(words[2]);
    auto cancel = [=] {
      catalog->cancel_move(id);
      return 0;
    };
    auto r = co_await off_thread(cancel, s_.metrics_, out);
    if (!r) co_return;
    proto::CommandComplete{"CANCEL MOVE"}.encode(out);
  }
}

// SHOW SHARDS | POOLS | HOSTS | CLIENTS | PARTITIONS | HOT KEYS: the proxy's state as
// tables. False: not one of them.
bool AdminConsole::show_state(const std::vector<std::string>& w, std::string& out) {
  auto rt = s_.server_.runtime();
  auto is = [&](std::initializer_list<const char*> expect) { return command_is(w, expect); };
  if (is({"SHOW", "SHARDS"})) {
    Table t({"shard", "host", "port", "database", "user", "pool_size", "paused"});
    for (auto& sp : rt->shards) {
      auto& s = sp->shard();
      const auto& primary = sp->hosts().endpoint(sp->hosts().primary());  // (after a failover: the new one)
      t.row({s.name, primary.host, std::to_string(primary.port), s.database.empty() ? "(client's)" : s.database,
             s.user.empty() ? "(client's)" : s.user, std::to_string(s.pool_size), sp->paused() ? "yes" : "no"});
    }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "POOLS"})) {
    Table t({"shard", "user", "database", "idle", "active", "opening", "waiting", "max", "paused", "host"});
    auto all = rt->shards;
    if (rt->combine) all.push_back(rt->combine);  // scatter.combine's own database: shard "combine"
    for (auto& sp : all)
      for (auto& pool : sp->all()) {
        auto s = pool->stats();
        auto& tg = pool->target();
        t.row({tg.shard, tg.user, tg.database, std::to_string(s.idle), std::to_string(s.active),
               std::to_string(s.opening), std::to_string(s.waiting), std::to_string(pool->max_size()),
               pool->paused() ? "yes" : "no", tg.host + ":" + std::to_string(tg.port)});
      }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "HOSTS"})) {  // SPEC §10
    Table t({"shard", "host", "port", "role", "lag_s", "lag_bytes", "banned_s", "bans"});
    const auto now = ShardHosts::Clock::now();
    for (auto& sp : rt->shards)
      for (auto& h : sp->hosts().view(now)) {
        std::uint64_t bans = 0;
        for (auto n : h.bans) bans += n;
        char lag[32] = "", banned[32] = "";
        if (h.lag_s) std::snprintf(lag, sizeof lag, "%.3f", *h.lag_s);
        if (h.banned) std::snprintf(banned, sizeof banned, "%.1f", h.banned_for_s);
        using opt = std::optional<std::string>;
        t.row({sp->shard().name, h.host, std::to_string(h.port), h.role, h.lag_s ? opt(lag) : std::nullopt,
               h.lag_bytes ? opt(std::to_string(*h.lag_bytes)) : std::nullopt, h.banned ? opt(banned) : std::nullopt,
               std::to_string(bans)});
      }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "CLIENTS"})) {
    Table t({"id", "user", "database", "address", "state", "connected_unix"});
    for (auto& s : s_.server_.sessions()) {
      auto i = s->info();
      t.row({std::to_string(i.id), i.user, i.database, i.address, i.state, std::to_string(i.connected_unix)});
    }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "PARTITIONS"})) {
    Table t({"distribution", "partition", "shard", "queries", "rows_written", "lower", "upper", "modulus",
             "remainder"});
    for (auto& p : s_.server_.metrics().partitions(rt->config, *rt->slots)) {
      auto [lower, upper] = range_bounds(rt->config, p.distribution, p.partition);
      auto [modulus, remainder] = hash_bounds(rt->config, p.distribution, p.partition);
      t.row({p.distribution, std::to_string(p.partition), p.shard, std::to_string(p.queries), std::to_string(p.writes),
             lower, upper, modulus, remainder});
    }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "HOT", "KEYS"})) {
    Table t({"distribution", "key", "count", "max_error", "skew"});
    for (auto& k : s_.server_.metrics().hot_keys(rt->config, kHotKeysShown)) {
      std::size_t d = 0;
      while (d < rt->config.distributions.size() && rt->config.distributions[d].name != k.distribution) ++d;
      char skew[32];
      std::snprintf(skew, sizeof skew, "%.2f", s_.server_.metrics().skew(rt->config, *rt->slots, d));
      t.row({k.distribution, k.key, std::to_string(k.count), std::to_string(k.error), std::string(skew)});
    }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "SPLIT", "ADVICE"})) {
    Table t({"distribution", "partition", "shard", "reason", "share", "times_even", "advice"});
    auto& m = s_.server_.metrics();
    for (auto& a : split_advice(rt->config, m.partitions(rt->config, *rt->slots), m.hot_keys(rt->config, kHotKeysShown),
                                m.key_trends(rt->config))) {
      char share[32], even[32];
      std::snprintf(share, sizeof share, "%.2f", a.share);
      std::snprintf(even, sizeof even, "%.1f", a.even);
      t.row({a.distribution, a.partition ? std::optional(std::to_string(*a.partition)) : std::nullopt,
             a.shard.empty() ? std::nullopt : std::optional(a.shard), a.reason, std::string(share), std::string(even),
             a.advice});
    }
    t.encode(out, "SHOW");
  } else if (is({"SHOW", "INDEXES"})) {  // SPEC §12
    Table t({"index", "table", "columns", "unique", "state", "detail"});
    const auto states = s_.server_.indexes().statuses();
    for (std::size_t i = 0; i < rt->config.indexes.size() && i < states.size(); ++i) {
      const auto& ix = rt->config.indexes[i];
      std::string cols;
      for (const auto& c : ix.columns) cols += (cols.empty() ? "" : ", ") + c;
      t.row({ix.name, ix.table, cols, ix.unique ? "yes" : "no", states[i].current ? std::string(IndexKeeper::state_name(states[i].state)) : "checking",
             states[i].detail});
    }
    t.encode(out, "SHOW");
  } else {
    return false;
  }
  return true;
}

// Runs one admin command, appending its result (or an error) to `out`.
awaitable<bool> AdminConsole::command(std::string_view sql, std::string& out) {
  std::string_view rest;
  auto w = words_of(sql, 3, rest);
  auto rt = s_.server_.runtime();
  auto error = [&](std::string_view code, const std::string& msg) { admin_error(s_.metrics_, out, code, msg); };
  auto is = [&](std::initializer_list<const char*> expect) { return command_is(w, expect); };
  auto shard_arg = [&](std::size_t at) -> std::optional<std::string> {
    if (w.size() <= at) return std::nullopt;
    std::string_view r2;
    auto raw = words_of(sql, at + 1, r2);
    // The shard name as written (words_of upper-cases it).
    std::size_t p = 0;
    for (std::size_t i = 0; i < at; ++i) {
      while (p < sql.size() && std::isspace(static_cast<unsigned char>(sql[p]))) ++p;
      while (p < sql.size() && !std::isspace(static_cast<unsigned char>(sql[p]))) ++p;
    }
    while (p < sql.size() && std::isspace(static_cast<unsigned char>(sql[p]))) ++p;
    std::size_t e = p;
    while (e < sql.size() && !std::isspace(static_cast<unsigned char>(sql[e])) && sql[e] != ';') ++e;
    return std::string(sql.substr(p, e - p));
  };

  if (show_state(w, out)) {
  } else if (is({"SHOW", "CONFIG"})) {
    show_config(rt->config, out);
  } else if (is({"SHOW", "ROUTE"})) {
    co_await show_route(sql, out);
  } else if (is({"CHECK", "INDEX"})) {  // SPEC §12
    auto name = shard_arg(2);
    std::string tail(rest);
    for (auto& c : tail) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const bool repair = tail.find("REPAIR") != std::string::npos;
    auto* keeper = &s_.server_.indexes();
    const std::string index = name.value_or("");
    auto run = [keeper, index, repair] { return keeper->check(index, repair); };
    if (auto r = co_await off_thread(run, s_.metrics_, out)) {
      Table t({"index", "rows", "entries", "missing", "orphans", "repaired", "examples"});
      std::string examples;
      for (const auto& e : r->examples) examples += (examples.empty() ? "" : "; ") + e;
      t.row({index, std::to_string(r->rows), std::to_string(r->entries), std::to_string(r->missing),
             std::to_string(r->orphans), std::to_string(r->repaired), examples});
      t.encode(out, "CHECK INDEX");
    }
  } else if (co_await catalog_command(w, sql, out)) {
  } else if (is({"RELOAD"})) {
    std::string err;
    if (s_.server_.reload(err)) proto::CommandComplete{"RELOAD"}.encode(out);
    else error(sqlstate::invalid_parameter_value, "configuration rejected, the old one stays in force: " + err);
  } else if (is({"PAUSE"}) || is({"RESUME"})) {
    bool pause = w[0] == "PAUSE";
    auto name = shard_arg(1);
    bool found = !name;
    for (auto& sp : rt->shards)
      if (!name || sp->shard().name == *name) {
        sp->set_paused(pause);
        found = true;
      }
    if (!found) error(sqlstate::invalid_parameter_value, "unknown shard \"" + *name + "\"");
    else proto::CommandComplete{pause ? "PAUSE" : "RESUME"}.encode(out);
  } else if (w.empty()) {
    proto::encode_empty_query(out);
  } else {
    error(sqlstate::syntax_error, kAdminHelp);
  }
  co_return true;
}

}  // namespace splitpoint::server
