// `users:` and the client-facing side: `listen`, `auth`, `tls`, trust's exposure
// (config/loader.hpp).
#include "config/loader.hpp"

namespace splitpoint::config::detail {

void Loader::load_users(const Fields& top) {
  const Entry* e = top.get("users");
  if (!e) return;
  auto items = sequence(*e);
  if (!items) return;
  std::map<std::string, int, std::less<>> seen;
  for (const Entry& item : *items) {
    auto f = mapping(item, {"name", "password", "password_file", "password_env", "admin", "allow"});
    if (!f) continue;
    User u;
    u.line = item.key_line;
    if (const Entry* n = required(*f, item.path, "name"); n) {
      if (auto v = text(*n)) {
        if (auto [pos, fresh] = seen.emplace(*v, n->line()); !fresh)
          error(*n,
                "duplicate user name " + quote(*v) + " (first at line " + std::to_string(pos->second) + ")");
        u.name = *v;
      }
    }
    assign(u.password, secret(*f, item.path, true));
    if (const Entry* a = f->get("admin")) assign(u.admin, boolean(*a));
    if (const Entry* a = f->get("allow")) u.allow = cidrs(*a);
    cfg_.users.push_back(std::move(u));
  }
}

// The client side and the process: endpoints, auth, TLS, limits, transactions.
void Loader::load_frontend(const Fields& f) {
  if (const Entry* e = f.get("listen")) assign(cfg_.listen, endpoint(*e));
  if (const Entry* e = f.get("metrics_listen")) assign(cfg_.metrics_listen, endpoint(*e));
  if (const Entry* e = f.get("pool_mode"))
    assign(cfg_.pool_mode,
           choice<PoolMode>(*e, {{"transaction", PoolMode::transaction}, {"session", PoolMode::session}}));
  if (const Entry* e = f.get("auth"))
    assign(cfg_.auth, choice<AuthMethod>(*e, {{"trust", AuthMethod::trust},
                                              {"password", AuthMethod::password},
                                              {"md5", AuthMethod::md5},
                                              {"scram-sha-256", AuthMethod::scram_sha_256},
                                              {"passthrough", AuthMethod::passthrough}}));
  if (const Entry* e = f.get("tls")) {
    if (auto t = mapping(*e, {"cert", "key"})) {
      const Entry* cert = required(*t, e->path, "cert");
      const Entry* key = required(*t, e->path, "key");
      auto c = cert ? text(*cert) : std::nullopt;
      auto k = key ? text(*key) : std::nullopt;
      if (c && k) cfg_.tls = Tls{*c, *k};
    }
  }
  if (const Entry* e = f.get("max_client_connections"))
    assign(cfg_.max_client_connections, integer(*e, 1, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* e = f.get("max_message_size"))
    assign(cfg_.max_message_size, size(*e, kMinMessageSize, kMaxMessageSize));
  if (const Entry* e = f.get("workers")) assign(cfg_.workers, integer(*e, 0, kMaxWorkers));
  if (const Entry* e = f.get("max_prepared_statements"))
    assign(cfg_.max_prepared_statements, integer(*e, 0, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* e = f.get("scheduling"))
    assign(cfg_.scheduling,
           choice<Scheduling>(*e, {{"normal", Scheduling::normal}, {"batch", Scheduling::batch}}));
  if (const Entry* e = f.get("log_level"))
    assign(cfg_.log_level, choice<std::string_view>(*e, {{"trace", "trace"},
                                                         {"debug", "debug"},
                                                         {"info", "info"},
                                                         {"warn", "warn"},
                                                         {"error", "error"},
                                                         {"off", "off"}}));
  if (const Entry* e = f.get("reads"))
    assign(cfg_.reads, choice<Reads>(*e, {{"primary", Reads::primary}, {"replica", Reads::replica}}));
  if (const Entry* e = f.get("max_replica_lag")) assign(cfg_.max_replica_lag, duration(*e, true));
  if (const Entry* e = f.get("health")) {
    if (auto h = mapping(*e, {"interval", "timeout", "ban"})) {
      if (const Entry* v = h->get("interval")) assign(cfg_.health.interval, duration(*v, false));
      if (const Entry* v = h->get("timeout")) assign(cfg_.health.timeout, duration(*v, false));
      if (const Entry* v = h->get("ban")) assign(cfg_.health.ban, duration(*v, false));
    }
  }
  if (const Entry* e = f.get("transactions")) {
    if (auto t = mapping(*e, {"cross_shard_writes"}))
      if (const Entry* c = t->get("cross_shard_writes"))
        assign(cfg_.cross_shard_writes,
               choice<CrossShardWrites>(
                   *c, {{"two_phase", CrossShardWrites::two_phase}, {"refuse", CrossShardWrites::refuse}}));
  }
}

// `auth_query:` (SPEC §14): required by `auth: passthrough`, refused without it.
void Loader::load_auth_query(const Fields& top) {
  const Entry* e = top.get("auth_query");
  if (cfg_.auth != AuthMethod::passthrough) {
    if (e) error(*e, "auth_query is used only with auth: passthrough");
    return;
  }
  if (!e) {
    const Entry* auth = top.get("auth");
    error(auth ? auth->line() : 0, "auth: passthrough needs auth_query (at least its user and password)");
    return;
  }
  auto f = mapping(*e, {"user", "password", "password_file", "password_env", "database", "query", "shard"});
  if (!f) return;
  AuthQuery q;
  q.line = e->line();
  if (const Entry* u = required(*f, e->path, "user")) assign(q.user, text(*u));
  assign(q.password, secret(*f, e->path, true));
  if (const Entry* d = f->get("database")) assign(q.database, text(*d));
  if (const Entry* v = f->get("query")) {
    assign(q.query, text(*v));
    if (q.query.find("$1") == std::string::npos) error(*v, e->path + ".query: needs $1 (the user name)");
  }
  if (const Entry* s = f->get("shard")) assign(q.shard, shard_ref(*s));
  cfg_.auth_query = std::move(q);
}

// SPEC §11: anyone who can reach a non-loopback listener could log in as any user,
// in clear text, with `auth: trust` and no TLS. Refused at start, --check and reload.
void Loader::check_trust_exposure(const Fields& top) {
  if (cfg_.auth != AuthMethod::trust || cfg_.tls || is_loopback_host(cfg_.listen.host)) return;
  const Entry* auth = top.get("auth");
  const Entry* listen = top.get("listen");
  error(auth ? auth->line() : listen ? listen->line() : 0,
        "auth: trust on listen " + cfg_.listen.host + ":" + std::to_string(cfg_.listen.port) +
            " (beyond loopback) without tls: anyone who can reach it could log in as any user; use a password "
            "method (scram-sha-256), configure tls, or listen on 127.0.0.1");
}

}  // namespace splitpoint::config::detail
