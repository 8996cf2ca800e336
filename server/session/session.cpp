#include "server/session/session.hpp"
#include "server/session/admin_console.hpp"
#include "server/session/cancel_targets.hpp"
#include "server/session/login.hpp"

#include <malloc.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <tuple>

#include <functional>

#include "protocol/buffer.hpp"
#include "protocol/md5.hpp"
#include "protocol/messages.hpp"
#include "protocol/scram.hpp"
#include "server/session/auth_query.hpp"
#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/net/wire.hpp"
#include "server/state/heap_trim.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::SessionCommand;

namespace {

bool is_guc_name(std::string_view n) {
  if (n.empty() || n.size() > 63) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

// PostgreSQL's reading of the startup `options` (pg_split_opts, then the -c / --
// switches): words split at unescaped whitespace, a backslash takes the next byte
// literally; `-c name=value`, `-cname=value` and `--name=value`, dashes in the name
// read as underscores. Other switches are ignored.
std::vector<std::pair<std::string, std::string>> parse_startup_options(std::string_view options) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < options.size(); ++i) {
    char c = options[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    if (c == '\\' && i + 1 < options.size()) c = options[++i];
    word.push_back(c);
    in_word = true;
  }
  if (in_word) words.push_back(std::move(word));
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::string setting;
    if (words[i] == "-c" && i + 1 < words.size()) setting = words[++i];
    else if (words[i].rfind("-c", 0) == 0 && words[i].size() > 2) setting = words[i].substr(2);
    else if (words[i].rfind("--", 0) == 0) setting = words[i].substr(2);
    else continue;
    auto eq = setting.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = setting.substr(0, eq);
    for (char& ch : name)
      if (ch == '-') ch = '_';
    out.emplace_back(std::move(name), setting.substr(eq + 1));
  }
  return out;
}

// Per-process secret for the fake SCRAM salt of unknown users.
const std::string& fake_scram_secret() {
  static const std::string secret = [] {
    std::string s(32, '\0');
    RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), 32);
    return s;
  }();
  return secret;
}

// After a session started or ended on this worker's thread: a burst of ended sessions
// gives their heap back to the system (TrimPolicy).
void note_sessions(std::size_t live) {
  thread_local TrimPolicy policy;
  if (policy.note(live)) malloc_trim(0);
}

}  // namespace

Session::Session(Proxy& server, Worker& worker, tcp::socket socket)
    : server_(server), worker_(worker), stream_(std::move(socket)), runtime_(server.runtime()),
      id_(server.next_session_id()), metrics_(*worker.metrics) {
  stream_.count_bytes(&metrics_.bytes_in, &metrics_.bytes_out);
  error_code ec;
  auto ep = stream_.socket().remote_endpoint(ec);
  if (!ec) who_.peer = ep.address().to_string() + ":" + std::to_string(ep.port());
  who_.connected_unix = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count();
  limits_.max_message_size = runtime_->config.max_message_size;
  worker_.sessions.insert(this);
  note_sessions(worker_.sessions.size());
}

Session::~Session() {
  worker_.sessions.erase(this);
  note_sessions(worker_.sessions.size());
  if (who_.cancel_pid) server_.cancels().remove({who_.cancel_pid, who_.cancel_secret});
  if (who_.counted) server_.client_count().fetch_sub(1);
  if (who_.logged_in) {
    metrics_.clients.add(-1);
    server_.unregister_session(id_);
  }
}

awaitable<void> Session::run() {
  auto self = shared_from_this();
  error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);

  Login login(*this);
  const bool ok = co_await login.run();
  // (Not `co_await (who_.admin ? a() : b())`: GCC 12 destroys the wrong temporary.)
  if (ok && who_.admin) {
    AdminConsole console(*this);
    co_await console.serve();
  } else if (ok) {
    co_await serve();
  }
  co_await detach_for_exit();
  stream_.close();
}

// ---------------------------------------------------------------------------
// Start-up and authentication
// https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-START-UP

awaitable<std::optional<proto::Frame>> Login::read_startup_frame() {
  for (;;) {
    auto r = proto::decode_startup_frame(std::string_view(s_.cbuf_).substr(s_.cpos_));
    if (r.status == proto::FrameStatus::ok) {
      s_.cpos_ += r.frame.size;
      co_return r.frame;
    }
    if (r.status == proto::FrameStatus::error) {
      co_await s_.send_error("FATAL", sqlstate::protocol_violation, r.error, false);
      co_return std::nullopt;
    }
    if (co_await s_.stream_.read_some(s_.cbuf_, 1024)) co_return std::nullopt;
  }
}

// The startup packet, after SSLRequest (TLS), GSSENCRequest (declined) and a protocol
// version to negotiate; nullopt: the connection ends (a CancelRequest ends it too).
awaitable<std::optional<proto::StartupMessage>> Login::read_startup() {
  std::optional<proto::StartupMessage> startup;
  for (int round = 0; round < 3 && !startup; ++round) {
    auto frame = co_await read_startup_frame();
    if (!frame) co_return std::nullopt;
    auto code = proto::startup_code(frame->body);
    if (!code) co_return std::nullopt;
    if (*code == proto::kSSLRequestCode) {
      if (s_.runtime_->tls && !s_.stream_.is_tls()) {
        // Anything sent after SSLRequest before the handshake would be read as if it
        // had been encrypted (CVE-2021-23214): refuse it.
        if (s_.cpos_ != s_.cbuf_.size()) {
          spdlog::warn("[{}] closed: data after SSLRequest before TLS handshake", s_.id_);
          co_return std::nullopt;
        }
        s_.cbuf_.clear();
        s_.cpos_ = 0;
        if (co_await s_.stream_.write("S")) co_return std::nullopt;
        if (auto ec = co_await s_.stream_.start_tls(*s_.runtime_->tls)) {
          spdlog::info("[{}] closed: TLS handshake failed: {}", s_.id_, ec.message());
          co_return std::nullopt;
        }
      } else {
        if (co_await s_.stream_.write("N")) co_return std::nullopt;
      }
      continue;
    }
    if (*code == proto::kGSSENCRequestCode) {
      if (co_await s_.stream_.write("N")) co_return std::nullopt;
      continue;
    }
    if (*code == proto::kCancelRequestCode) {
      if (auto c = proto::CancelRequest::decode(frame->body))
        if (auto target = s_.server_.cancels().find({c->process_id, c->secret_key}))
          co_await target->forward_cancel(c->secret_key);
      co_return std::nullopt;  // the server closes a cancel connection without a reply
    }
    std::uint32_t major = static_cast<std::uint32_t>(*code) >> 16, minor = *code & 0xffff;
    if (major != 3) {
      co_await s_.send_error("FATAL", sqlstate::feature_not_supported,
                          "unsupported frontend protocol " + std::to_string(major) + "." +
                              std::to_string(minor) + ": server supports 3.0 to 3.0",
                          false);
      co_return std::nullopt;
    }
    std::string body(frame->body);
    if (minor != 0) {
      std::string patched;
      proto::Writer(patched, 0).i32(proto::kProtocolV3).finish();
      body.replace(0, 4, patched.substr(4, 4));
    }
    startup = proto::StartupMessage::decode(body);
    if (!startup) {
      co_await s_.send_error("FATAL", sqlstate::protocol_violation, "invalid startup packet layout", false);
      co_return std::nullopt;
    }
    if (minor != 0) {
      // NegotiateProtocolVersion: we speak 3.0 and no protocol options.
      // https://www.postgresql.org/docs/15/protocol-message-formats.html
      std::string out;
      proto::Writer w(out, 'v');
      w.i32(proto::kProtocolV3);
      std::vector<std::string_view> options;
      for (auto& [k, v] : startup->parameters)
        if (k.rfind("_pq_.", 0) == 0) options.push_back(k);
      w.i32(static_cast<std::int32_t>(options.size()));
      for (auto o : options) w.cstr(o);
      w.finish();
      if (co_await s_.stream_.write(out)) co_return std::nullopt;
    }
  }
  co_return startup;
}

// The startup packet's user, database and settings; admission (client limit, shutdown).
awaitable<bool> Login::take_startup(const proto::StartupMessage& startup) {

  for (auto& [k, v] : startup.parameters) {
    if (k == "user") {
      s_.who_.user = v;
    } else if (k == "database") {
      s_.who_.database = v;
    } else if (k == "replication") {
      co_await s_.send_error("FATAL", sqlstate::feature_not_supported, "splitpoint does not support replication connections",
                          false);
      co_return false;
    } else if (k == "options") {
      // `-c name=value` / `--name=value` (PGOPTIONS): applied as PostgreSQL applies them.
      for (auto& [name, value] : parse_startup_options(v))
        if (is_guc_name(name)) set_startup_param(name, value);
    } else if (k.rfind("_pq_.", 0) == 0) {
      // A driver's protocol options are declined above.
    } else if (is_guc_name(k)) {
      set_startup_param(k, v);
    }
  }
  if (s_.who_.user.empty()) {
    co_await s_.send_error("FATAL", sqlstate::invalid_authorization, "no PostgreSQL user name specified in startup packet",
                        false);
    co_return false;
  }
  if (s_.who_.database.empty()) s_.who_.database = s_.who_.user;

  s_.who_.counted = true;
  auto clients = s_.server_.client_count().fetch_add(1) + 1;
  if (clients > static_cast<std::int64_t>(s_.runtime_->config.max_client_connections)) {
    co_await s_.send_error("FATAL", sqlstate::too_many_connections, "sorry, too many clients already", false);
    co_return false;
  }
  if (s_.server_.shutting_down()) {
    co_await s_.send_error("FATAL", "57P03", "the database system is shutting down", false);
    co_return false;
  }

  co_return true;
}

// After authentication: the pools, the server's settings and the client's, the
// cancel key, and the client's ReadyForQuery.
awaitable<bool> Login::greet() {
  for (auto& shard : s_.runtime_->shards) s_.pools_.push_back(shard->get(s_.who_.user, s_.who_.password, s_.who_.database));
  s_.held_.resize(s_.pools_.size());
  s_.hosts_.resize(s_.pools_.size());
  auto params = s_.pools_.front()->server_parameters();
  if (!params) {
    // First client for this pool: open a connection to learn the server's settings
    // (and to report a bad backend configuration at login rather than later).
    auto r = co_await s_.pools_.front()->acquire(s_.runtime_->config.timeouts.server_connect);
    if (!r.backend) {
      co_await s_.send_error("FATAL", r.sqlstate, r.message, false);
      co_return false;
    }
    params = r.backend->parameters;
    s_.pools_.front()->release(std::move(r.backend), true);
  }

  s_.settings_.rebuild_script();
  // The client's own settings: a bad value fails the login as PostgreSQL fails it, and
  // the reported values are the server's spelling of them ("sql,dmy" -> "SQL, DMY").
  ParameterList reported = *params;
  if (!s_.settings_.startup.empty()) {
    if (auto known = s_.pools_.front()->startup_parameters(s_.settings_.script)) {
      reported = std::move(*known);
    } else {
      if (!co_await apply_startup_params(reported)) co_return false;
      s_.pools_.front()->remember_startup_parameters(s_.settings_.script, reported);
    }
  }
  // Session pooling: the catalog shard's backend is the session's from its login, and
  // the client is given its pid, so that pg_backend_pid(), a notification's sender and
  // pg_stat_activity agree with BackendKeyData (isolationtester relies on it). The
  // secret stays the proxy's: a CancelRequest reaches this session, which cancels there.
  std::int32_t pid = 0;
  if (s_.runtime_->config.pool_mode == config::PoolMode::session) {
    const std::size_t shard = s_.catalog_shard();
    std::optional<std::size_t> primary;
    if (auto r = co_await s_.hosts_.acquire_backend(shard, primary); r.backend) {
      pid = r.backend->process_id;
      s_.held_[shard] = std::move(r.backend);
    }
  }
  const auto key = s_.server_.cancels().add(s_.shared_from_this(), pid);
  s_.who_.cancel_pid = key.pid;
  s_.who_.cancel_secret = key.secret;

  std::string out;
  proto::Authentication{}.encode(out);  // AuthenticationOk
  for (auto& [name, value] : reported) {
    proto::ParameterStatus{name, value}.encode(out);
    if (name == "standard_conforming_strings") s_.settings_.routing.standard_conforming_strings = value != "off";
  }
  proto::BackendKeyData{s_.who_.cancel_pid, s_.who_.cancel_secret}.encode(out);
  proto::ReadyForQuery{'I'}.encode(out);
  if (co_await s_.stream_.write(out)) co_return false;
  spdlog::debug("[{}] login user={} database={}", s_.id_, s_.who_.user, s_.who_.database);
  s_.who_.logged_in = true;
  s_.metrics_.clients.add(1);
  s_.server_.register_session(s_.id_, s_.shared_from_this(), s_.moves_.epoch);
  co_return true;
}

// Within timeouts.client_login, or the connection is closed.
awaitable<bool> Login::run() {
  asio::steady_timer timer(co_await asio::this_coro::executor, s_.runtime_->config.timeouts.client_login);
  timer.async_wait([this, self = s_.shared_from_this()](error_code ec) {
    if (ec) return;
    timed_out_ = true;
    s_.stream_.close();
  });
  const bool ok = co_await exchange();
  timer.cancel();
  if (timed_out_) spdlog::info("[{}] closed: login timeout", s_.id_);
  co_return ok;
}

awaitable<bool> Login::exchange() {
  auto startup = co_await read_startup();
  if (!startup) co_return false;
  const bool taken = co_await take_startup(*startup);
  if (!taken) co_return false;
  // SPEC §11: the user's `allow:` CIDRs, before authentication (as pg_hba.conf).
  if (const UserAuth* u = s_.runtime_->find_user(s_.who_.user); u && !u->allow.empty()) {
    error_code ec;
    const auto ep = s_.stream_.socket().remote_endpoint(ec);
    const std::string host = ec ? std::string("?") : ep.address().to_string();
    if (!config::allowed(u->allow, host)) {
      spdlog::info("[{}] closed: host {} is not in user {}'s allow list", s_.id_, host, s_.who_.user);
      co_await s_.send_error("FATAL", sqlstate::invalid_authorization,
                          "no allow entry for host \"" + host + "\", user \"" + s_.who_.user + "\", database \"" +
                              s_.who_.database + "\", " + (s_.stream_.is_tls() ? "SSL on" : "SSL off"),
                          false);
      co_return false;
    }
  }
  const bool authenticated = co_await authenticate();
  if (!authenticated) co_return false;
  if (s_.who_.database == Session::kAdminDatabase) co_return co_await s_.admin_login();
  co_return co_await greet();
}

// A parameter from the startup packet; a later one of the same name wins, as in
// PostgreSQL (options are read after the packet's own parameters).
void Login::set_startup_param(std::string name, std::string value) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& [k, v] : s_.settings_.startup)
    if (k == name) {
      v = std::move(value);
      return;
    }
  s_.settings_.startup.emplace_back(std::move(name), std::move(value));
}

// Runs the startup parameters on a backend and reads back the values of those the
// server reports (ParameterStatus), in its spelling. False: the login failed (sent).
awaitable<bool> Login::apply_startup_params(ParameterList& reported) {
  // (as Session::sync_backend_state: a pooled backend may carry another client's role)
  std::string sql = "SET SESSION AUTHORIZATION DEFAULT;RESET ALL;" + s_.settings_.script + "SELECT ";
  std::vector<std::size_t> read;  // indices into `reported`
  for (std::size_t i = 0; i < reported.size(); ++i) {
    std::string lower = reported[i].first;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (auto& kv : s_.settings_.startup)
      if (kv.first == lower) {
        sql += (read.empty() ? "" : ", ") + std::string("pg_catalog.current_setting(") +
               quote_literal(reported[i].first) + ")";
        read.push_back(i);
      }
  }
  if (read.empty()) sql += "1";
  auto reply = co_await s_.run_on(0, sql);
  if (reply.lost || !reply.error.empty()) {
    auto e = proto::ErrorFields::decode(reply.error);
    std::string out;
    if (e && !reply.lost) {
      for (auto& [code, value] : e->fields)
        if (code == 'S' || code == 'V') value = "FATAL";
      e->encode(out, 'E');
      s_.metrics_.error(e->get('C'));
      spdlog::info("[{}] closed: startup parameter refused: {}", s_.id_, e->get('M'));
      co_await s_.stream_.write(out);
    } else {
      co_await s_.send_error("FATAL", sqlstate::connection_failure, "cannot apply the startup parameters", false);
    }
    co_return false;
  }
  for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
    auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
    if (!row || row->values.size() != read.size()) return;
    for (std::size_t j = 0; j < read.size(); ++j)
      if (row->values[j]) reported[read[j]].second = std::string(*row->values[j]);
  });
  co_return true;
}

// The client's answer to an authentication request. Anything else is a protocol
// violation, reported as PostgreSQL does before closing.
awaitable<std::optional<std::string>> Login::read_password_message(std::string_view expected) {
  for (;;) {
    auto r = proto::decode_frame(std::string_view(s_.cbuf_).substr(s_.cpos_), proto::Direction::frontend, s_.limits_);
    if (r.status == proto::FrameStatus::error) {
      spdlog::info("[{}] closed: {} during authentication", s_.id_, r.error);
      co_await s_.send_error("FATAL", sqlstate::protocol_violation, r.error, false);
      co_return std::nullopt;
    }
    if (r.status == proto::FrameStatus::ok) {
      s_.cpos_ += r.frame.size;
      if (r.frame.type != 'p') {
        spdlog::info("[{}] closed: unexpected message during authentication", s_.id_);
        co_await s_.send_error("FATAL", sqlstate::protocol_violation,
                            "expected " + std::string(expected) + ", got message type " +
                                std::to_string(static_cast<unsigned char>(r.frame.type)),
                            false);
        co_return std::nullopt;
      }
      co_return std::string(r.frame.body);
    }
    if (co_await s_.stream_.read_some(s_.cbuf_, 1024)) co_return std::nullopt;
  }
}

awaitable<bool> Login::authentication_failed() {
  spdlog::info("[{}] closed: authentication failed for user {}", s_.id_, s_.who_.user);
  co_await s_.send_error("FATAL", sqlstate::invalid_password,
                      "password authentication failed for user \"" + s_.who_.user + "\"", false);
  co_return false;
}

awaitable<bool> Login::authenticate() {
  const auto& cfg = s_.runtime_->config;
  const UserAuth* user = s_.runtime_->find_user(s_.who_.user);
  std::optional<UserAuth> looked_up;  // auth: passthrough, a user not in the file
  auto method = cfg.auth;
  if (method == config::AuthMethod::passthrough) {
    if (!user) {
      auto found = co_await look_up_verifier(*s_.runtime_, s_.who_.user);
      if (!found.error.empty()) {
        spdlog::warn("[{}] auth_query for user {} failed: {}", s_.id_, s_.who_.user, found.error);
        co_await s_.send_error("FATAL", sqlstate::connection_failure,
                            "could not look up the password of user \"" + s_.who_.user + "\" (see the proxy's log)",
                            false);
        co_return false;
      }
      if (found.verifier) looked_up = passthrough_user(s_.who_.user, *found.verifier);
      if (looked_up) user = &*looked_up;
    }
    // An unknown user goes through a SCRAM exchange that fails at its end, as PostgreSQL's.
    method = user && !user->md5.empty() ? config::AuthMethod::md5 : config::AuthMethod::scram_sha_256;
  }
  if (user) s_.who_.password = user->plaintext.empty() ? user->md5 : user->plaintext;
  auto fail = [this] { return authentication_failed(); };
  std::string out;
  // As PostgreSQL: md5 with only a SCRAM verifier stored authenticates with SCRAM.
  if (method == config::AuthMethod::md5 && user && user->md5.empty() && user->scram)
    method = config::AuthMethod::scram_sha_256;
  switch (method) {
    case config::AuthMethod::trust:
      co_return true;
    case config::AuthMethod::password: {
      proto::Authentication{proto::AuthCode::cleartext_password}.encode(out);
      if (co_await s_.stream_.write(out)) co_return false;
      auto body = co_await read_password_message("password response");
      if (!body) co_return false;
      auto pw = proto::PasswordMessage::decode(*body);
      if (!pw || !user) co_return co_await fail();
      bool good = false;
      if (!user->plaintext.empty()) good = equal_secret(pw->password, user->plaintext);
      else if (user->scram) {
        auto v = proto::scram::make_verifier(pw->password, user->scram->salt, user->scram->iterations);
        good = equal_secret(v.stored_key, user->scram->stored_key);
      } else if (!user->md5.empty()) {
        good = equal_secret(proto::md5::verifier(s_.who_.user, pw->password), user->md5);
      }
      if (!good) co_return co_await fail();
      s_.who_.password = std::string(pw->password);
      co_return true;
    }
    case config::AuthMethod::md5: {
      char salt[4];
      RAND_bytes(reinterpret_cast<unsigned char*>(salt), 4);
      proto::Authentication a{proto::AuthCode::md5_password};
      a.md5_salt = std::string_view(salt, 4);
      a.encode(out);
      if (co_await s_.stream_.write(out)) co_return false;
      auto body = co_await read_password_message("password response");
      if (!body) co_return false;
      auto pw = proto::PasswordMessage::decode(*body);
      if (!pw || !user || user->md5.empty()) co_return co_await fail();
      if (!equal_secret(pw->password, proto::md5::response(user->md5, std::string_view(salt, 4))))
        co_return co_await fail();
      co_return true;
    }
    case config::AuthMethod::scram_sha_256:
      co_return co_await authenticate_scram(user);
    case config::AuthMethod::passthrough:
      break;  // (resolved above to md5 or SCRAM by the user's verifier)
  }
  co_return false;
}

// SASL with SCRAM-SHA-256, and SCRAM-SHA-256-PLUS for a client on TLS: channel binding
// to the proxy's certificate (SPEC §11, RFC 5929 tls-server-end-point), as PostgreSQL.
// A malformed or unfitting SCRAM message, or channel binding data that differs, is a
// protocol violation (08P01, as PostgreSQL); a wrong proof or an unknown user: 28P01.
awaitable<bool> Login::authenticate_scram(const UserAuth* user) {
  std::optional<proto::scram::Verifier> verifier;
  if (user && user->scram) verifier = user->scram;
  proto::scram::ServerExchange exchange(verifier, fake_scram_secret(), s_.who_.user, s_.stream_.certificate_hash());
  std::string out;
  proto::Authentication a{proto::AuthCode::sasl};
  a.mechanisms = exchange.mechanisms();
  a.encode(out);
  if (co_await s_.stream_.write(out)) co_return false;
  auto body = co_await read_password_message("SASL response");
  if (!body) co_return false;
  auto init = proto::SASLInitialResponse::decode(*body);
  if (!init || !init->data) {
    co_await s_.send_error("FATAL", sqlstate::protocol_violation, "malformed SASL message", false);
    co_return false;
  }
  auto first = exchange.handle_client_first(*init->data, init->mechanism);
  if (!first) {
    spdlog::info("[{}] closed: {} (user {})", s_.id_, exchange.error(), s_.who_.user);
    co_await s_.send_error("FATAL", sqlstate::protocol_violation, exchange.error(), false);
    co_return false;
  }
  out.clear();
  proto::Authentication cont{proto::AuthCode::sasl_continue};
  cont.data = *first;
  cont.encode(out);
  if (co_await s_.stream_.write(out)) co_return false;
  body = co_await read_password_message("SASL response");
  if (!body) co_return false;
  auto resp = proto::SASLResponse::decode(*body);
  if (!resp) co_return false;
  auto final_msg = exchange.handle_client_final(resp->data);
  if (!final_msg && exchange.error() == proto::scram::kBindingCheckFailed) {
    spdlog::info("[{}] closed: {} (user {})", s_.id_, exchange.error(), s_.who_.user);
    co_await s_.send_error("FATAL", sqlstate::protocol_violation, exchange.error(), false);
    co_return false;
  }
  if (!final_msg) {
    spdlog::debug("[{}] SCRAM refused: {}", s_.id_, exchange.error());
    co_return co_await authentication_failed();
  }
  // Without the password, the shards are logged in to with the client's key (they must
  // store the same verifier).
  if (user->plaintext.empty()) s_.who_.password = exchange.client_key();
  out.clear();
  proto::Authentication fin{proto::AuthCode::sasl_final};
  fin.data = *final_msg;
  fin.encode(out);
  co_return !co_await s_.stream_.write(out);
}


// ---------------------------------------------------------------------------
// Cancel and shutdown

Session::ClientInfo Session::info() const {
  ClientInfo i;
  i.id = id_;
  i.user = who_.user;
  i.database = who_.database;
  i.address = who_.peer;
  i.connected_unix = who_.connected_unix;
  i.state = who_.admin ? "admin" : pump_.active() ? "active" : "idle";
  return i;
}

void Session::set_cancel_target(Backend* b, std::size_t shard) {
  if (!b) return cancel_.set(nullptr, {}, 0);
  const auto& e = runtime_->shards[shard]->hosts().endpoint(b->host);  // (a standby's, SPEC §10)
  cancel_.set(b, e.host, e.port);
}

void CancelTargets::set(Backend* b, const std::string& host, std::uint16_t port) {
  std::lock_guard lock(mu_);
  backend_ = b;
  if (b) {
    host_ = host;
    port_ = port;
  }
}

void CancelTargets::forget(const Backend* b) {
  std::lock_guard lock(mu_);
  if (backend_ == b) backend_ = nullptr;
}

void CancelTargets::add_scatter(Backend* b, const std::string& host, std::uint16_t port,
                                std::optional<std::size_t> shard) {
  std::lock_guard lock(mu_);
  scatter_.push_back({b, host, port, shard});
}

void CancelTargets::clear_scatter() {
  std::lock_guard lock(mu_);
  scatter_.clear();
}

bool CancelTargets::scatter_running() {
  std::lock_guard lock(mu_);
  return !scatter_.empty();
}

std::vector<std::pair<std::size_t, Backend*>> CancelTargets::scatter_on_shards() {
  std::vector<std::pair<std::size_t, Backend*>> out;
  std::lock_guard lock(mu_);
  for (const auto& t : scatter_)
    if (t.shard) out.emplace_back(*t.shard, t.backend);
  return out;
}

std::vector<CancelTargets::To> CancelTargets::take() {
  // The backend the pump reads from, or every backend of a multi-shard statement.
  std::vector<To> to;
  std::lock_guard lock(mu_);
  auto add = [&](Backend* b, const std::string& host, std::uint16_t port) {
    // From now on this backend is never handed to another client.
    b->cancel_sent = true;
    to.push_back({host, port, b->process_id, b->secret_key});
  };
  if (backend_) add(backend_, host_, port_);
  for (auto& t : scatter_) add(t.backend, t.host, t.port);
  return to;
}

void Session::request_cancel(std::int32_t secret) {
  if (secret != who_.cancel_secret) return;  // (fixed at login)
  auto to = cancel_.take();
  if (to.empty()) return;
  spdlog::info("[{}] forwarding cancel request to {} backend(s)", id_, to.size());
  for (auto& t : to)
    asio::co_spawn(stream_.socket().get_executor(),
                   send_cancel(t.host, t.port, t.pid, t.key, runtime_->config.timeouts.server_connect), asio::detached);
}

// A client's CancelRequest: its connection closes only once every shard it concerns has
// processed the cancel (each bounded by timeouts.server_connect), as PostgreSQL closes it
// only after signalling the backend, so a client that waits for that close (asyncpg)
// never sees its cancel land on its next statement.
awaitable<void> Session::forward_cancel(std::int32_t secret) {
  if (secret != who_.cancel_secret) co_return;
  auto to = cancel_.take();
  if (to.empty()) co_return;
  spdlog::info("[{}] forwarding cancel request to {} backend(s)", id_, to.size());
  for (auto& t : to) co_await send_cancel(t.host, t.port, t.pid, t.key, runtime_->config.timeouts.server_connect);
}

void Session::on_shutdown() {
  if (!cur() || (fe_.expect.empty() && !fe_.sent_after_sync && fe_.client_txn == 'I')) {
    error_code ignored;
    stream_.socket().cancel(ignored);
  }
}

awaitable<void> Session::send_error(std::string_view severity, std::string_view sqlstate, std::string message,
                                    bool ready_for_query) {
  std::string out;
  proto::ErrorFields::make(severity, sqlstate, message).encode(out, 'E');
  metrics_.error(sqlstate);
  if (ready_for_query) proto::ReadyForQuery{fe_.client_txn}.encode(out);
  co_await stream_.write(out);
}

awaitable<void> Session::send_ready() {
  std::string out;
  proto::ReadyForQuery{fe_.client_txn}.encode(out);
  co_await stream_.write(out);
}

}  // namespace splitpoint::server
