// `shards:` (hosts, replicas, TLS to the shards, databases given as connection
// strings) and `catalog:` (config/loader.hpp).
#include "config/loader.hpp"

namespace splitpoint::config::detail {

// A shard's `tls: {mode: disable|require|verify-ca|verify-full, ca: FILE}` (SPEC §11), as
// libpq's sslmode and sslrootcert. The CA file must be readable now: a typo would
// otherwise only show at the first connection.
void Loader::load_shard_tls(ShardTls& tls, const Entry& e) {
  auto f = mapping(e, {"mode", "ca"});
  if (!f) return;
  const Entry* m = required(*f, e.path, "mode");
  auto mode = m ? choice<ShardTlsMode>(*m, {{"disable", ShardTlsMode::disable},
                                            {"require", ShardTlsMode::require},
                                            {"verify-ca", ShardTlsMode::verify_ca},
                                            {"verify-full", ShardTlsMode::verify_full}})
                : std::nullopt;
  if (!mode) return;  // ca: cannot be judged without it
  tls.mode = *mode;
  const bool verify = tls.mode == ShardTlsMode::verify_ca || tls.mode == ShardTlsMode::verify_full;
  if (const Entry* c = f->get("ca")) {
    auto file = text(*c);
    if (!file) return;
    if (!verify) {
      error(*c, "only used with mode verify-ca or verify-full (require encrypts without checking the certificate)");
      return;
    }
    if (auto problem = unreadable(*file)) error(*c, *problem);
    else tls.ca = *file;
  } else if (verify) {
    error(f->line, e.path + ": mode " + std::string(tls.mode == ShardTlsMode::verify_ca ? "verify-ca" : "verify-full") +
                       " needs ca: (the PEM file of the certificate authorities to trust)");
  }
}

void Loader::load_shards(const Fields& top) {
  const Entry* e = top.get("shards");
  if (!e) {
    error(0, "shards: no shards configured; at least one is required");
    return;
  }
  auto items = sequence(*e);
  if (!items) return;
  if (items->empty()) error(e->key_line, "shards: no shards configured; at least one is required");
  std::map<std::string, int, std::less<>> seen;
  for (const Entry& item : *items) {
    auto f = mapping(item, {"name", "host", "port", "hosts", "replicas", "database", "user", "password",
                            "password_file", "password_env", "pool_size", "tls"});
    if (!f) continue;
    Shard s;
    s.line = item.key_line;
    if (const Entry* n = required(*f, item.path, "name"); n) {
      if (auto v = name(*n)) {
        if (auto [pos, fresh] = seen.emplace(*v, n->line()); !fresh)
          error(*n,
                "duplicate shard name " + quote(*v) + " (first at line " + std::to_string(pos->second) + ")");
        s.name = *v;
      }
    }
    if (const Entry* v = f->get("host")) assign(s.host, text(*v));
    if (const Entry* v = f->get("port")) assign(s.port, integer(*v, 1, 65535));
    if (const Entry* v = f->get("database")) assign(s.database, text(*v));
    if (const Entry* v = f->get("user")) assign(s.user, text(*v));
    assign(s.password, secret(*f, item.path, false));
    if (const Entry* v = f->get("pool_size")) assign(s.pool_size, integer(*v, 1, INT_MAX));
    if (const Entry* v = f->get("hosts")) {
      if (f->get("host") || f->get("port")) error(*v, "give either hosts or host/port, not both");
      s.hosts = hosts(*v);
      if (!s.hosts.empty()) {
        s.host = s.hosts.front().host;
        s.port = s.hosts.front().port;
      }
    }
    if (const Entry* v = f->get("replicas")) s.replicas = hosts(*v);
    if (const Entry* v = f->get("tls")) load_shard_tls(s.tls, *v);
    cfg_.shards.push_back(std::move(s));
  }
}

// `catalog:` (SPEC §9): a shard's name, or a libpq connection string (key=value
// pairs or a postgres:// URI) for a database of its own, which no shard's traffic uses.
void Loader::load_catalog(const Entry& e) {
  auto s = text(e);
  if (!s) return;
  if (!is_dsn(*s)) return assign(cfg_.catalog_shard, shard_named(*s, e.line(), e.path));
  cfg_.catalog_dsn = *s;
  // Any libpq option may be given (libpq makes the connection), but a typo is found now.
  char* why = nullptr;
  if (PQconninfoOption* parsed = PQconninfoParse(s->c_str(), &why)) return PQconninfoFree(parsed);
  error(e, "not a libpq connection string: " + libpq_message(why));
}

// `scatter.combine` as a libpq connection string (SPEC §4.1: "a separate PostgreSQL"):
// the proxy connects there itself, with what a shard entry gives. Unset parts default as
// a shard's do: the client's user, password and database, port 5432.
std::optional<Shard> Loader::dsn_database(const Entry& e, const std::string& dsn) {
  char* why = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(PQconninfoParse(dsn.c_str(), &why),
                                                                      &PQconninfoFree);
  if (!parsed) {
    error(e, "not a libpq connection string: " + libpq_message(why));
    return std::nullopt;
  }
  Shard s;
  s.name = "combine";
  s.line = e.line();
  std::string sslmode = "disable", ca;
  bool ok = true;
  for (const PQconninfoOption* o = parsed.get(); o->keyword; ++o) {
    if (!o->val || !*o->val) continue;
    const std::string_view k = o->keyword;
    const std::string v = o->val;
    if (k == "host" && v.find(',') == std::string::npos) {
      s.host = v;
    } else if (k == "port") {
      int port = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
      if (ec != std::errc{} || end != v.data() + v.size() || port < 1 || port > 65535) {
        error(e, "port " + quote(v) + " is not a port number");
        ok = false;
      }
      s.port = static_cast<std::uint16_t>(port);
    } else if (k == "dbname") {
      s.database = v;
    } else if (k == "user") {
      s.user = v;
    } else if (k == "password") {
      s.password = v;
    } else if (k == "sslmode") {
      sslmode = v;
    } else if (k == "sslrootcert") {
      ca = v;
    } else if (k != "connect_timeout" && k != "application_name") {
      error(e, "connection option " + std::string(k) + (k == "host" ? " with several hosts" : "") +
                   " is not supported here (host, port, dbname, user, password, sslmode, sslrootcert)");
      ok = false;
    }
  }
  static const std::pair<std::string_view, ShardTlsMode> modes[] = {{"disable", ShardTlsMode::disable},
                                                                    {"require", ShardTlsMode::require},
                                                                    {"verify-ca", ShardTlsMode::verify_ca},
                                                                    {"verify-full", ShardTlsMode::verify_full}};
  auto mode = std::find_if(std::begin(modes), std::end(modes), [&](auto& m) { return m.first == sslmode; });
  if (mode == std::end(modes)) {
    error(e, "sslmode " + quote(sslmode) + ": expected one of disable | require | verify-ca | verify-full");
    return std::nullopt;
  }
  s.tls.mode = mode->second;
  const bool verify = s.tls.mode == ShardTlsMode::verify_ca || s.tls.mode == ShardTlsMode::verify_full;
  if (verify != !ca.empty()) {
    error(e, verify ? "sslmode " + sslmode + " needs sslrootcert (the PEM file of the certificate authorities to trust)"
                    : "sslrootcert is only used with sslmode verify-ca or verify-full");
    return std::nullopt;
  }
  if (verify) {
    if (auto problem = unreadable(ca)) {
      error(e, *problem);
      return std::nullopt;
    }
    s.tls.ca = ca;
  }
  if (!ok) return std::nullopt;
  return s;
}

// The catalog and the mover connect to shards on their own, with no client whose
// database and credentials they could borrow.
void Loader::check_catalog_shards(int line) {
  for (const auto& s : cfg_.shards)
    if (s.database.empty() || s.user.empty())
      error(s.line ? s.line : line, "with catalog:, shard " + quote(s.name) + " needs database and user");
}

}  // namespace splitpoint::config::detail
