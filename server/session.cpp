#include "server/session.hpp"

#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <functional>

#include "protocol/buffer.hpp"
#include "protocol/md5.hpp"
#include "protocol/messages.hpp"
#include "protocol/scram.hpp"
#include "protocol/sqlstate.hpp"
#include "server/server.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::SessionCommand;

namespace {

// Fresh backends run with their own defaults; a session with no SETs needs no reset.
constexpr std::uint64_t kStateDefault = 0;
constexpr std::uint64_t kStateUnknown = ~std::uint64_t{0};

std::string quote_literal(std::string_view v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

bool is_guc_name(std::string_view n) {
  if (n.empty() || n.size() > 63) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

std::string statement_name_for(std::string_view parse_rest) {
  // Equal query text and parameter types share one server-side statement.
  auto h = std::hash<std::string_view>{}(parse_rest);
  char buf[32];
  std::snprintf(buf, sizeof buf, "sp_%016zx_%zu", h, parse_rest.size());
  return buf;
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

}  // namespace

Session::Session(Server& server, Worker& worker, tcp::socket socket)
    : server_(server), worker_(worker), stream_(std::move(socket)), runtime_(server.runtime()),
      id_(server.next_session_id()) {
  limits_.max_message_size = runtime_->config.max_message_size;
  worker_.sessions.insert(this);
}

Session::~Session() {
  worker_.sessions.erase(this);
  if (cancel_pid_) server_.cancels().remove(cancel_pid_);
  if (counted_) server_.client_count().fetch_sub(1);
}

awaitable<void> Session::run() {
  auto self = shared_from_this();
  auto ex = co_await asio::this_coro::executor;
  error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);

  asio::steady_timer login_timer(ex, runtime_->config.timeouts.client_login);
  login_timer.async_wait([this, self](error_code ec) {
    if (ec) return;
    login_timed_out_ = true;
    stream_.close();
  });
  bool ok = co_await login();
  login_timer.cancel();
  if (login_timed_out_) spdlog::info("[{}] closed: login timeout", id_);
  if (ok) co_await serve();
  co_await detach_for_exit();
  stream_.close();
}

// ---------------------------------------------------------------------------
// Start-up and authentication
// https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-START-UP

awaitable<std::optional<proto::Frame>> Session::read_startup_frame() {
  for (;;) {
    auto r = proto::decode_startup_frame(std::string_view(cbuf_).substr(cpos_));
    if (r.status == proto::FrameStatus::ok) {
      cpos_ += r.frame.size;
      co_return r.frame;
    }
    if (r.status == proto::FrameStatus::error) {
      co_await send_error("FATAL", sqlstate::protocol_violation, r.error, false);
      co_return std::nullopt;
    }
    if (co_await stream_.read_some(cbuf_, 1024)) co_return std::nullopt;
  }
}

awaitable<bool> Session::login() {
  std::optional<proto::StartupMessage> startup;
  for (int round = 0; round < 3 && !startup; ++round) {
    auto frame = co_await read_startup_frame();
    if (!frame) co_return false;
    auto code = proto::startup_code(frame->body);
    if (!code) co_return false;
    if (*code == proto::kSSLRequestCode) {
      if (runtime_->tls && !stream_.is_tls()) {
        // Anything sent after SSLRequest before the handshake would be read as if it
        // had been encrypted (CVE-2021-23214): refuse it.
        if (cpos_ != cbuf_.size()) {
          spdlog::warn("[{}] closed: data after SSLRequest before TLS handshake", id_);
          co_return false;
        }
        cbuf_.clear();
        cpos_ = 0;
        if (co_await stream_.write("S")) co_return false;
        if (auto ec = co_await stream_.start_tls(*runtime_->tls)) {
          spdlog::info("[{}] closed: TLS handshake failed: {}", id_, ec.message());
          co_return false;
        }
      } else {
        if (co_await stream_.write("N")) co_return false;
      }
      continue;
    }
    if (*code == proto::kGSSENCRequestCode) {
      if (co_await stream_.write("N")) co_return false;
      continue;
    }
    if (*code == proto::kCancelRequestCode) {
      if (auto c = proto::CancelRequest::decode(frame->body))
        if (auto target = server_.cancels().find(c->process_id)) target->request_cancel(c->secret_key);
      co_return false;  // the server closes a cancel connection without a reply
    }
    std::uint32_t major = static_cast<std::uint32_t>(*code) >> 16, minor = *code & 0xffff;
    if (major != 3) {
      co_await send_error("FATAL", sqlstate::feature_not_supported,
                          "unsupported frontend protocol " + std::to_string(major) + "." +
                              std::to_string(minor) + ": server supports 3.0 to 3.0",
                          false);
      co_return false;
    }
    std::string body(frame->body);
    if (minor != 0) {
      std::string patched;
      proto::Writer(patched, 0).i32(proto::kProtocolV3).finish();
      body.replace(0, 4, patched.substr(4, 4));
    }
    startup = proto::StartupMessage::decode(body);
    if (!startup) {
      co_await send_error("FATAL", sqlstate::protocol_violation, "invalid startup packet layout", false);
      co_return false;
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
      if (co_await stream_.write(out)) co_return false;
    }
  }
  if (!startup) co_return false;

  for (auto& [k, v] : startup->parameters) {
    if (k == "user") {
      user_ = v;
    } else if (k == "database") {
      database_ = v;
    } else if (k == "replication") {
      co_await send_error("FATAL", sqlstate::feature_not_supported, "splitpoint does not support replication connections",
                          false);
      co_return false;
    } else if (k == "options" || k.rfind("_pq_.", 0) == 0) {
      // -c options are not replayed; a driver's protocol options are declined above.
    } else if (is_guc_name(k)) {
      startup_params_.emplace_back(k, v);
    }
  }
  if (user_.empty()) {
    co_await send_error("FATAL", sqlstate::invalid_authorization, "no PostgreSQL user name specified in startup packet",
                        false);
    co_return false;
  }
  if (database_.empty()) database_ = user_;

  counted_ = true;
  auto clients = server_.client_count().fetch_add(1) + 1;
  if (clients > static_cast<std::int64_t>(runtime_->config.max_client_connections)) {
    co_await send_error("FATAL", sqlstate::too_many_connections, "sorry, too many clients already", false);
    co_return false;
  }
  if (server_.shutting_down()) {
    co_await send_error("FATAL", "57P03", "the database system is shutting down", false);
    co_return false;
  }

  if (!co_await authenticate()) co_return false;

  pool_ = runtime_->shards.front()->get(user_, client_password_, database_);
  auto params = pool_->server_parameters();
  if (!params) {
    // First client for this pool: open a connection to learn the server's settings
    // (and to report a bad backend configuration at login rather than later).
    auto r = co_await pool_->acquire(runtime_->config.timeouts.server_connect);
    if (!r.backend) {
      co_await send_error("FATAL", r.sqlstate, r.message, false);
      co_return false;
    }
    params = r.backend->parameters;
    pool_->release(std::move(r.backend), true);
  }

  rebuild_state_script();
  cancel_pid_ = server_.cancels().add(shared_from_this());
  RAND_bytes(reinterpret_cast<unsigned char*>(&cancel_secret_), sizeof cancel_secret_);

  std::string out;
  proto::Authentication{}.encode(out);  // AuthenticationOk
  for (auto& [name, value] : *params) {
    std::string_view v = value;
    for (auto& [k, cv] : startup_params_)
      if (k == name) v = cv;
    proto::ParameterStatus{name, v}.encode(out);
  }
  proto::BackendKeyData{cancel_pid_, cancel_secret_}.encode(out);
  proto::ReadyForQuery{'I'}.encode(out);
  if (co_await stream_.write(out)) co_return false;
  spdlog::debug("[{}] login user={} database={}", id_, user_, database_);
  co_return true;
}

awaitable<std::optional<std::string>> Session::read_password_message() {
  for (;;) {
    auto r = proto::decode_frame(std::string_view(cbuf_).substr(cpos_), proto::Direction::frontend, limits_);
    if (r.status == proto::FrameStatus::error) co_return std::nullopt;
    if (r.status == proto::FrameStatus::ok) {
      cpos_ += r.frame.size;
      if (r.frame.type != 'p') co_return std::nullopt;
      co_return std::string(r.frame.body);
    }
    if (co_await stream_.read_some(cbuf_, 1024)) co_return std::nullopt;
  }
}

awaitable<bool> Session::authenticate() {
  const auto& cfg = runtime_->config;
  const UserAuth* user = runtime_->find_user(user_);
  if (user) client_password_ = user->plaintext;
  auto fail = [this]() -> awaitable<bool> {
    spdlog::info("[{}] closed: authentication failed for user {}", id_, user_);
    co_await send_error("FATAL", sqlstate::invalid_password,
                        "password authentication failed for user \"" + user_ + "\"", false);
    co_return false;
  };
  std::string out;
  switch (cfg.auth) {
    case config::AuthMethod::trust:
      co_return true;
    case config::AuthMethod::password: {
      proto::Authentication{proto::AuthCode::cleartext_password}.encode(out);
      if (co_await stream_.write(out)) co_return false;
      auto body = co_await read_password_message();
      if (!body) co_return false;
      auto pw = proto::PasswordMessage::decode(*body);
      if (!pw || !user) co_return co_await fail();
      bool good = false;
      if (!user->plaintext.empty()) good = pw->password == user->plaintext;
      else if (user->scram) {
        auto v = proto::scram::make_verifier(pw->password, user->scram->salt, user->scram->iterations);
        good = v.stored_key == user->scram->stored_key;
      } else if (!user->md5.empty()) {
        good = proto::md5::verifier(user_, pw->password) == user->md5;
      }
      if (!good) co_return co_await fail();
      client_password_ = std::string(pw->password);
      co_return true;
    }
    case config::AuthMethod::md5: {
      char salt[4];
      RAND_bytes(reinterpret_cast<unsigned char*>(salt), 4);
      proto::Authentication a{proto::AuthCode::md5_password};
      a.md5_salt = std::string_view(salt, 4);
      a.encode(out);
      if (co_await stream_.write(out)) co_return false;
      auto body = co_await read_password_message();
      if (!body) co_return false;
      auto pw = proto::PasswordMessage::decode(*body);
      if (!pw || !user || user->md5.empty()) co_return co_await fail();
      if (pw->password != proto::md5::response(user->md5, std::string_view(salt, 4))) co_return co_await fail();
      co_return true;
    }
    case config::AuthMethod::scram_sha_256: {
      proto::Authentication a{proto::AuthCode::sasl};
      a.mechanisms = {proto::scram::kMechanism};
      a.encode(out);
      if (co_await stream_.write(out)) co_return false;
      auto body = co_await read_password_message();
      if (!body) co_return false;
      auto init = proto::SASLInitialResponse::decode(*body);
      if (!init || init->mechanism != proto::scram::kMechanism || !init->data) {
        co_await send_error("FATAL", sqlstate::protocol_violation, "malformed SASL message", false);
        co_return false;
      }
      std::optional<proto::scram::Verifier> verifier;
      if (user && user->scram) verifier = user->scram;
      proto::scram::ServerExchange exchange(verifier, fake_scram_secret(), user_);
      auto first = exchange.handle_client_first(*init->data);
      if (!first) {
        co_await send_error("FATAL", sqlstate::protocol_violation, "malformed SCRAM message", false);
        co_return false;
      }
      out.clear();
      proto::Authentication cont{proto::AuthCode::sasl_continue};
      cont.data = *first;
      cont.encode(out);
      if (co_await stream_.write(out)) co_return false;
      body = co_await read_password_message();
      if (!body) co_return false;
      auto resp = proto::SASLResponse::decode(*body);
      if (!resp) co_return false;
      auto final_msg = exchange.handle_client_final(resp->data);
      if (!final_msg) co_return co_await fail();
      out.clear();
      proto::Authentication fin{proto::AuthCode::sasl_final};
      fin.data = *final_msg;
      fin.encode(out);
      if (co_await stream_.write(out)) co_return false;
      co_return true;
    }
  }
  co_return false;
}

// ---------------------------------------------------------------------------
// Serving

awaitable<void> Session::serve() {
  auto self = shared_from_this();
  auto ex = co_await asio::this_coro::executor;
  const auto idle_timeout = runtime_->config.timeouts.client_idle;
  bool skip_until_sync = false;  // after a failed attach, as after an error
  for (;;) {
    for (;;) {
      auto r = proto::decode_frame(std::string_view(cbuf_).substr(cpos_), proto::Direction::frontend, limits_);
      if (r.status == proto::FrameStatus::need_more) break;
      if (r.status == proto::FrameStatus::error) {
        spdlog::info("[{}] closed: {}", id_, r.error);
        co_await detach_for_exit();
        co_await send_error("FATAL", sqlstate::protocol_violation, r.error, false);
        co_return;
      }
      const auto& f = r.frame;
      if (f.type == 'X') co_return;
      if (skip_until_sync) {
        cpos_ += f.size;
        if (f.type == 'S') {
          skip_until_sync = false;
          std::string out;
          proto::ReadyForQuery{'I'}.encode(out);
          if (co_await stream_.write(out)) co_return;
        }
        continue;
      }
      if (!backend_ && !co_await attach_backend()) {
        if (closing_) co_return;
        cpos_ += f.size;
        if (f.type == 'Q') {
          std::string out;
          proto::ReadyForQuery{'I'}.encode(out);
          if (co_await stream_.write(out)) co_return;
        } else if (f.type != 'S') {
          skip_until_sync = true;
        } else {
          std::string out;
          proto::ReadyForQuery{'I'}.encode(out);
          if (co_await stream_.write(out)) co_return;
        }
        continue;
      }
      if (!forward(f)) {
        co_await detach_for_exit();
        co_await send_error("FATAL", sqlstate::protocol_violation,
                            "invalid frontend message type " + std::to_string(static_cast<unsigned char>(f.type)),
                            false);
        co_return;
      }
      cpos_ += f.size;
    }
    if (!bout_.empty() && backend_) {
      auto [ec, n] = co_await asio::async_write(backend_->socket, asio::buffer(bout_), use_nothrow);
      bout_.clear();
      if (ec) {
        backend_lost_ = true;
        co_await detach_for_exit();
        co_await send_error("FATAL", sqlstate::connection_failure, "server connection lost: " + ec.message(), false);
        co_return;
      }
    }
    if (closing_) co_return;
    if (server_.shutting_down() && !backend_) {
      co_await send_error("FATAL", sqlstate::admin_shutdown, "terminating connection due to administrator command",
                          false);
      co_return;
    }
    if (cpos_ > 0) {
      cbuf_.erase(0, cpos_);
      cpos_ = 0;
    }
    bool timed = idle_timeout.count() > 0 && !backend_;
    if (timed) {
      if (!idle_timer_) idle_timer_ = std::make_unique<asio::steady_timer>(ex);
      idle_timer_->expires_after(idle_timeout);
      idle_timer_->async_wait([this, self](error_code ec) {
        if (ec) return;
        idle_timed_out_ = true;
        error_code ignored;
        stream_.socket().cancel(ignored);
      });
    }
    auto ec = co_await stream_.read_some(cbuf_);
    if (timed) idle_timer_->cancel();
    if (idle_timed_out_) {
      spdlog::info("[{}] closed: idle timeout", id_);
      co_await send_error("FATAL", sqlstate::idle_session_timeout,
                          "terminating connection due to idle-session timeout", false);
      co_return;
    }
    if (ec == asio::error::operation_aborted && server_.shutting_down() && !backend_) {
      co_await send_error("FATAL", sqlstate::admin_shutdown, "terminating connection due to administrator command",
                          false);
      co_return;
    }
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted)
        spdlog::debug("[{}] client read: {}", id_, ec.message());
      co_return;
    }
  }
}

awaitable<bool> Session::attach_backend() {
  // Wait for a connection as long as a login may take.
  auto r = co_await pool_->acquire(runtime_->config.timeouts.client_login);
  if (!r.backend) {
    spdlog::warn("[{}] no backend: {}", id_, r.message);
    co_await send_error("ERROR", r.sqlstate, r.message, false);
    co_return false;
  }
  set_cancel_target(r.backend.get());
  {
    std::lock_guard lock(cancel_mu_);
    backend_ = std::move(r.backend);
  }
  txn_status_ = 'I';
  if (backend_->needs_discard || backend_->applied_state != state_hash_) {
    std::string script = backend_->needs_discard ? "DISCARD ALL;" : "RESET ALL;";
    script += state_script_;
    proto::Query{script}.encode(bout_);
    expect_.push_back(Expect{'Z', true});
    if (backend_->needs_discard) {
      backend_->prepared.clear();
      backend_->unnamed_owner = {0, 0};
    }
    backend_->needs_discard = false;
    backend_->applied_state = state_hash_;
  }
  if (!pump_exit_) pump_exit_ = std::make_unique<asio::steady_timer>(co_await asio::this_coro::executor);
  pump_exit_->expires_at(asio::steady_timer::time_point::max());
  pump_active_ = true;
  asio::co_spawn(co_await asio::this_coro::executor, pump(), asio::detached);
  co_return true;
}

void Session::set_cancel_target(Backend* b) {
  std::lock_guard lock(cancel_mu_);
  cancel_backend_ = b;
  if (b) {
    cancel_host_ = pool_->target().host;
    cancel_port_ = pool_->target().port;
  }
}

void Session::request_cancel(std::int32_t secret) {
  std::string host;
  std::uint16_t port = 0;
  std::int32_t pid = 0, key = 0;
  {
    std::lock_guard lock(cancel_mu_);
    if (secret != cancel_secret_ || !cancel_backend_) return;
    // From now on this backend is never handed to another client.
    cancel_backend_->cancel_sent = true;
    host = cancel_host_;
    port = cancel_port_;
    pid = cancel_backend_->process_id;
    key = cancel_backend_->secret_key;
  }
  spdlog::info("[{}] forwarding cancel request", id_);
  asio::co_spawn(stream_.socket().get_executor(),
                 send_cancel(host, port, pid, key, runtime_->config.timeouts.server_connect), asio::detached);
}

void Session::on_shutdown() {
  if (!backend_ || (expect_.empty() && !sent_after_sync_ && txn_status_ == 'I')) {
    error_code ignored;
    stream_.socket().cancel(ignored);
  }
}

void Session::ensure_prepared(const std::string& server_name, std::string_view parse_rest) {
  if (backend_->prepared.count(server_name)) return;
  proto::Writer w(bout_, 'P');
  w.cstr(server_name).bytes(parse_rest).finish();
  Expect e{'1', true};
  e.name = server_name;
  expect_.push_back(std::move(e));
  backend_->prepared.insert(server_name);
}

void Session::ensure_unnamed_prepared() {
  std::pair<std::uint64_t, std::uint64_t> mine{id_, unnamed_seq_};
  if (unnamed_parse_rest_.empty() || backend_->unnamed_owner == mine) return;
  proto::Writer w(bout_, 'P');
  w.cstr("").bytes(unnamed_parse_rest_).finish();
  expect_.push_back(Expect{'1', true});
  backend_->unnamed_owner = mine;
}

// Appends one client message (rewritten where needed) to bout_. False: not a
// message a client may send now.
bool Session::forward(const proto::Frame& f) {
  auto whole = std::string_view(cbuf_).substr(cpos_, f.size);
  switch (f.type) {
    case 'Q': {
      auto q = proto::Query::decode(f.body);
      bout_.append(whole);
      Expect e{'Z'};
      if (q) {
        auto cmd = routing::classify_session_command(q->sql);
        switch (cmd.kind) {
          case SessionCommand::none:
          case SessionCommand::set_local:
            break;
          case SessionCommand::listen:
            pinned_ = true;
            break;
          case SessionCommand::deallocate_all:
          case SessionCommand::discard_all:
            prepared_.clear();
            unnamed_parse_rest_.clear();
            backend_->prepared.clear();
            backend_->unnamed_owner = {0, 0};
            e.command = cmd.kind;
            break;
          default:
            e.command = cmd.kind;
            e.name = std::move(cmd.name);
            e.text = std::string(q->sql);
            break;
        }
      }
      expect_.push_back(std::move(e));
      sent_after_sync_ = false;
      return true;
    }
    case 'P': {
      proto::Reader r(f.body);
      auto name = r.cstr();
      auto rest = r.rest();
      if (!r.ok()) return false;
      if (name.empty()) {
        bout_.append(whole);
        unnamed_parse_rest_.assign(rest);
        backend_->unnamed_owner = {id_, ++unnamed_seq_};
        expect_.push_back(Expect{'1'});
      } else {
        auto server_name = statement_name_for(rest);
        if (backend_->prepared.count(server_name)) {
          // Same text already prepared here: re-create it so the client's Parse gets
          // its own ParseComplete in order.
          proto::Writer c(bout_, 'C');
          c.u8('S').cstr(server_name).finish();
          expect_.push_back(Expect{'3', true});
        }
        proto::Writer w(bout_, 'P');
        w.cstr(server_name).bytes(rest).finish();
        Expect e{'1'};
        e.name = server_name;
        expect_.push_back(std::move(e));
        backend_->prepared.insert(server_name);
        prepared_[std::string(name)] = Prepared{std::move(server_name), std::string(rest)};
      }
      sent_after_sync_ = true;
      return true;
    }
    case 'B': {
      proto::Reader r(f.body);
      auto portal = r.cstr();
      auto statement = r.cstr();
      auto rest = r.rest();
      if (!r.ok()) return false;
      auto it = statement.empty() ? prepared_.end() : prepared_.find(std::string(statement));
      if (it == prepared_.end()) {
        if (statement.empty()) ensure_unnamed_prepared();
        bout_.append(whole);
      } else {
        ensure_prepared(it->second.server_name, it->second.parse_rest);
        proto::Writer w(bout_, 'B');
        w.cstr(portal).cstr(it->second.server_name).bytes(rest).finish();
      }
      expect_.push_back(Expect{'2'});
      sent_after_sync_ = true;
      return true;
    }
    case 'D': {
      auto d = proto::Describe::decode(f.body);
      if (!d) return false;
      auto it = d->kind == 'S' && !d->name.empty() ? prepared_.find(std::string(d->name)) : prepared_.end();
      if (it == prepared_.end()) {
        if (d->kind == 'S' && d->name.empty()) ensure_unnamed_prepared();
        bout_.append(whole);
      } else {
        ensure_prepared(it->second.server_name, it->second.parse_rest);
        proto::Describe{'S', it->second.server_name}.encode(bout_);
      }
      sent_after_sync_ = true;
      return true;
    }
    case 'C': {
      auto c = proto::Close::decode(f.body);
      if (!c) return false;
      auto it = c->kind == 'S' && !c->name.empty() ? prepared_.find(std::string(c->name)) : prepared_.end();
      if (it == prepared_.end()) {
        bout_.append(whole);
      } else {
        proto::Close{'S', it->second.server_name}.encode(bout_);
        backend_->prepared.erase(it->second.server_name);
        prepared_.erase(it);
      }
      expect_.push_back(Expect{'3'});
      sent_after_sync_ = true;
      return true;
    }
    case 'S':
      bout_.append(whole);
      expect_.push_back(Expect{'Z'});
      sent_after_sync_ = false;
      return true;
    case 'E':
    case 'H':
    case 'd':
    case 'c':
    case 'f':
      bout_.append(whole);
      if (f.type == 'E' || f.type == 'H') sent_after_sync_ = true;
      return true;
    default:
      return false;
  }
}

// Handles one backend message; true if it goes to the client.
bool Session::process_backend_frame(char type, std::string_view body) {
  auto in_injected_query = [this] { return !expect_.empty() && expect_.front().type == 'Z' && expect_.front().swallow; };
  auto drop_until_sync = [this] {
    while (!expect_.empty() && expect_.front().type != 'Z') {
      if (expect_.front().type == '1' && !expect_.front().name.empty())
        backend_->prepared.erase(expect_.front().name);
      expect_.pop_front();
    }
  };
  switch (type) {
    case '1':
    case '2':
    case '3': {
      if (expect_.empty() || expect_.front().type != type) {
        spdlog::error("[{}] unexpected backend message '{}'", id_, type);
        return true;
      }
      bool swallow = expect_.front().swallow;
      expect_.pop_front();
      return !swallow;
    }
    case 'E': {
      bool swallow = in_injected_query();
      if (swallow) {
        auto e = proto::ErrorFields::decode(body);
        spdlog::warn("[{}] session state replay failed: {}", id_, e ? std::string(e->get('M')) : "?");
      }
      drop_until_sync();
      if (!expect_.empty()) expect_.front().failed = true;
      return !swallow;
    }
    case 'Z': {
      drop_until_sync();
      if (body.size() == 1) txn_status_ = body[0];
      if (expect_.empty()) {
        spdlog::error("[{}] unexpected ReadyForQuery", id_);
        return true;
      }
      Expect e = std::move(expect_.front());
      expect_.pop_front();
      if (e.swallow) return false;
      if (!e.failed && e.command != SessionCommand::none) pending_commands_.push_back(std::move(e));
      if (txn_status_ == 'I') {
        if (last_tag_rollback_) pending_commands_.clear();
        apply_session_commands();
      }
      return true;
    }
    case 'C':
      if (in_injected_query()) return false;
      last_tag_rollback_ = body.rfind("ROLLBACK", 0) == 0;
      return true;
    case 'A':
      return true;
    default:
      return !in_injected_query();
  }
}

void Session::apply_session_commands() {
  if (pending_commands_.empty()) return;
  bool backend_reset = false;
  for (auto& c : pending_commands_) {
    auto it = std::find_if(sets_.begin(), sets_.end(), [&](auto& p) { return p.first == c.name; });
    switch (c.command) {
      case SessionCommand::set:
        if (it != sets_.end()) it->second = c.text;
        else sets_.emplace_back(c.name, c.text);
        break;
      case SessionCommand::reset:
        if (it != sets_.end()) sets_.erase(it);
        break;
      case SessionCommand::reset_all:
      case SessionCommand::discard_all:
        sets_.clear();
        backend_reset = true;  // the backend now has its own defaults, not the client's
        break;
      default:
        break;
    }
  }
  pending_commands_.clear();
  rebuild_state_script();
  if (backend_) backend_->applied_state = backend_reset ? kStateUnknown : state_hash_;
}

void Session::rebuild_state_script() {
  state_script_.clear();
  for (auto& [k, v] : startup_params_) state_script_ += "SET " + k + " TO " + quote_literal(v) + ";";
  for (auto& [k, stmt] : sets_) state_script_ += stmt + ";";
  if (state_script_.empty()) {
    state_hash_ = kStateDefault;
  } else {
    state_hash_ = std::hash<std::string>{}(state_script_) | 1;
    if (state_hash_ == kStateUnknown) state_hash_ ^= 2;
  }
}

bool Session::should_release() const {
  return backend_ && expect_.empty() && !sent_after_sync_ && txn_status_ == 'I' && !pinned_ && !closing_ &&
         runtime_->config.pool_mode == config::PoolMode::transaction;
}

void Session::release_backend(bool reusable) {
  std::unique_ptr<Backend> b;
  {
    std::lock_guard lock(cancel_mu_);
    b = std::move(backend_);
    cancel_backend_ = nullptr;
  }
  if (!b) return;
  if (!b->read_buf.empty()) reusable = false;
  pool_->release(std::move(b), reusable);
}

awaitable<void> Session::pump() {
  auto self = shared_from_this();
  Backend* b = backend_.get();
  std::string& in = b->read_buf;
  for (;;) {
    auto ec = co_await read_into(b->socket, in, 16384);
    if (ec || backend_.get() != b) break;
    std::size_t pos = 0, plain_end = 0;
    bool filtered = false;
    bool bad = false;
    for (;;) {
      auto r = proto::decode_frame(std::string_view(in).substr(pos), proto::Direction::backend, limits_);
      if (r.status == proto::FrameStatus::need_more) break;
      if (r.status == proto::FrameStatus::error) {
        bad = true;
        break;
      }
      bool keep = process_backend_frame(r.frame.type, r.frame.body);
      if (keep && !filtered) {
        plain_end = pos + r.frame.size;
      } else if (keep) {
        cout_.append(in, pos, r.frame.size);
      } else if (!filtered) {
        filtered = true;
        cout_.assign(in, 0, plain_end);
      }
      pos += r.frame.size;
    }
    if (bad) {
      spdlog::error("[{}] malformed message from backend", id_);
      break;
    }
    std::string_view data = filtered ? std::string_view(cout_) : std::string_view(in).substr(0, plain_end);
    if (!data.empty()) {
      if (auto wec = co_await stream_.write(data)) {
        closing_ = true;  // client gone; the client loop sees it on its next read
        stream_.close();
      }
    }
    cout_.clear();
    in.erase(0, pos);
    if (closing_) break;
    if (should_release()) {
      release_backend(true);
      pump_active_ = false;
      pump_exit_->cancel();
      if (server_.shutting_down()) on_shutdown();
      co_return;
    }
    if (server_.shutting_down() && expect_.empty() && txn_status_ == 'I') on_shutdown();
  }
  // Backend gone or broken (or we are closing and cancelled it).
  pump_active_ = false;
  pump_exit_->cancel();
  if (!closing_ && backend_.get() == b) {
    spdlog::warn("[{}] lost server connection", id_);
    backend_lost_ = true;
    release_backend(false);
    expect_.clear();
    closing_ = true;
    std::string out;
    proto::ErrorFields::make("FATAL", sqlstate::connection_failure, "server connection lost").encode(out, 'E');
    co_await stream_.write(out);
    stream_.close();
  }
}

// Stops the pump and gives the backend back (clean and idle) or closes it.
awaitable<void> Session::detach_for_exit() {
  closing_ = true;
  if (!backend_) co_return;
  bool clean = expect_.empty() && !sent_after_sync_ && txn_status_ == 'I' && !pinned_ && !backend_lost_;
  if (pump_active_) {
    error_code ignored;
    backend_->socket.cancel(ignored);
    co_await pump_exit_->async_wait(use_nothrow);
  }
  if (clean) {
    backend_->needs_discard = true;  // session mode: the next client starts fresh
    backend_->applied_state = kStateUnknown;
  }
  release_backend(clean);
}

awaitable<void> Session::send_error(std::string_view severity, std::string_view sqlstate, std::string message,
                                    bool ready_for_query) {
  std::string out;
  proto::ErrorFields::make(severity, sqlstate, message).encode(out, 'E');
  if (ready_for_query) proto::ReadyForQuery{'I'}.encode(out);
  co_await stream_.write(out);
}

}  // namespace splitpoint::server
