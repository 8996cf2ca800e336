#include "server/net/backend.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "protocol/buffer.hpp"
#include "protocol/framing.hpp"
#include "protocol/md5.hpp"
#include "protocol/messages.hpp"
#include "protocol/scram.hpp"
#include "protocol/sqlstate.hpp"
#include "server/net/stream.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

bool Backend::looks_healthy() {
  if (!socket.is_open()) return false;
  char c;
  ssize_t n = ::recv(socket.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

bool Backend::runs_on(const asio::any_io_executor& ex) {
  return &asio::query(socket.get_executor(), asio::execution::context) == &asio::query(ex, asio::execution::context);
}

bool Backend::move_to(const asio::any_io_executor& ex) {
  if (runs_on(ex)) return true;
  error_code ec;
  auto fd = socket.release(ec);
  if (ec) {
    socket.close(ec);
    return false;
  }
  tcp::socket moved(ex);
  moved.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return false;
  }
  socket = std::move(moved);
  return true;
}

namespace {

ConnectResult failure(std::string_view sqlstate, std::string message) {
  ConnectResult r;
  r.sqlstate = sqlstate;
  r.message = std::move(message);
  return r;
}

// `r`, marked as refused the way a restarting server refuses (ConnectResult::restarting).
ConnectResult restarting(ConnectResult r, bool yes) {
  r.restarting = yes;
  return r;
}

// Reads one backend frame into `frame` (body copied into `body`).
awaitable<bool> read_frame(tcp::socket& s, InputBuffer& buf, char& type, std::string& body) {
  proto::FrameLimits limits;
  for (;;) {
    auto r = proto::decode_frame(buf, proto::Direction::backend, limits);
    if (r.status == proto::FrameStatus::error) co_return false;
    if (r.status == proto::FrameStatus::ok) {
      type = r.frame.type;
      body.assign(r.frame.body);
      buf.erase(0, r.frame.size);
      co_return true;
    }
    if (co_await read_into(s, buf, 4096)) co_return false;
  }
}

// TLS to a shard (SPEC §11). After the handshake a relay takes over: the connection's
// Backend gets one end of a socketpair, plain, and two coroutines move bytes between
// the other end and the TLS stream. Nothing that reads and writes Backend::socket
// (login, forwarding, scatter, COPY, the raw recv of scatter_io) needs to know about
// TLS; the cost is one more pass of every byte through the kernel. The relay ends
// when either side closes, and closes the other.
struct TlsRelay {
  asio::ssl::context ctx;
  asio::ssl::stream<tcp::socket> tls;
  asio::local::stream_protocol::socket local;
  TlsRelay(asio::ssl::context c, tcp::socket s, const asio::any_io_executor& ex)
      : ctx(std::move(c)), tls(std::move(s), ctx), local(ex) {}
  void close() {
    error_code ignored;
    tls.lowest_layer().close(ignored);
    local.close(ignored);
  }
};

// One direction of the relay: `from` to `to` until either fails or closes.
template <class From, class To>
awaitable<void> pump(std::shared_ptr<TlsRelay> r, From& from, To& to) {
  std::array<char, 16384> buf;
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), use_nothrow);
    if (n > 0) {
      auto [wec, w] = co_await asio::async_write(to, asio::buffer(buf.data(), n), use_nothrow);
      if (wec) break;
    }
    if (ec) break;
  }
  r->close();
}

bool is_ip_address(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// SSLRequest, then the handshake with libpq's sslmode semantics: require encrypts
// without checking the certificate; verify-ca checks its chain against `ca`;
// verify-full also checks that it names the host (SAN dNSName or iPAddress, as
// X509_check_host / X509_check_ip). On success `socket` is replaced by the relay's
// plain end. https://www.postgresql.org/docs/15/protocol-flow.html#id-1.10.6.7.12
awaitable<std::optional<ConnectResult>> start_shard_tls(tcp::socket& socket, const BackendTarget& t) {
  auto ex = co_await asio::this_coro::executor;
  const std::string where = "shard \"" + t.shard + "\" at " + t.host + ":" + std::to_string(t.port);
  std::string req;
  proto::Writer(req, 0).i32(proto::kSSLRequestCode).finish();
  if (auto [ec, n] = co_await asio::async_write(socket, asio::buffer(req), use_nothrow); ec)
    co_return failure(sqlstate::connection_failure, where + ": " + ec.message());
  char answer = 0;
  if (auto [ec, n] = co_await asio::async_read(socket, asio::buffer(&answer, 1), use_nothrow); ec)
    co_return failure(sqlstate::connection_failure, where + " closed the connection after SSLRequest");
  if (answer != 'S')
    co_return failure(sqlstate::connection_failure,
                      where + " does not support TLS (SSLRequest refused), and its tls.mode requires it");

  asio::ssl::context ctx(asio::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);  // PostgreSQL's default minimum
  const bool verify = t.tls.mode == config::ShardTlsMode::verify_ca || t.tls.mode == config::ShardTlsMode::verify_full;
  if (verify) {
    error_code ec;
    ctx.load_verify_file(t.tls.ca, ec);
    if (ec) co_return failure(sqlstate::connection_failure, where + ": cannot load tls.ca \"" + t.tls.ca + "\": " + ec.message());
    ctx.set_verify_mode(asio::ssl::verify_peer);
  } else {
    ctx.set_verify_mode(asio::ssl::verify_none);
  }
  auto relay = std::make_shared<TlsRelay>(std::move(ctx), std::move(socket), ex);
  SSL* ssl = relay->tls.native_handle();
  const bool ip = is_ip_address(t.host);
  if (!ip) SSL_set_tlsext_host_name(ssl, t.host.c_str());  // SNI, as libpq's sslsni=1
  if (t.tls.mode == config::ShardTlsMode::verify_full) {
    const int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), t.host.c_str())
                       : SSL_set1_host(ssl, t.host.c_str());
    if (set != 1) co_return failure(sqlstate::connection_failure, where + ": cannot check the host name " + t.host);
  }
  auto [hec] = co_await relay->tls.async_handshake(asio::ssl::stream_base::client, use_nothrow);
  if (hec) {
    const long v = SSL_get_verify_result(ssl);
    std::string why = v != X509_V_OK ? std::string("certificate verify failed: ") + X509_verify_cert_error_string(v)
                                     : hec.message();
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
      why += " (the certificate does not name \"" + t.host + "\"; tls.mode is verify-full)";
    relay->close();
    co_return failure(sqlstate::connection_failure, where + ": TLS handshake failed: " + why);
  }
  asio::local::stream_protocol::socket plain(ex);
  error_code pec;
  asio::local::connect_pair(relay->local, plain, pec);
  if (pec) {
    relay->close();
    co_return failure(sqlstate::connection_failure, where + ": socketpair: " + pec.message());
  }
  tcp::socket backend_end(ex);
  backend_end.assign(tcp::v4(), plain.release(), pec);
  if (pec) {
    relay->close();
    co_return failure(sqlstate::connection_failure, where + ": " + pec.message());
  }
  socket = std::move(backend_end);
  asio::co_spawn(ex, pump(relay, relay->local, relay->tls), asio::detached);
  asio::co_spawn(ex, pump(relay, relay->tls, relay->local), asio::detached);
  co_return std::nullopt;
}

// TCP keepalive on a shard's TCP socket (before any TLS relay: its socketpair end is
// AF_UNIX): a shard that stops answering without closing (a partition, a frozen host)
// is found by the kernel instead of holding the connection forever. Probes after 30 s
// idle, then every 10 s; the third unanswered ends it (60 s after the shard's last
// word). TCP_USER_TIMEOUT ends it as well when data sent stays unacknowledged for idle
// + interval x count (60 s). Failures are ignored: the connection works without them.
// docs/reliability.md.
constexpr int kKeepaliveIdle = 30, kKeepaliveInterval = 10, kKeepaliveCount = 3;
constexpr unsigned kUserTimeoutMs = (kKeepaliveIdle + kKeepaliveInterval * kKeepaliveCount) * 1000;

void set_keepalive(tcp::socket& socket) {
  const int fd = socket.native_handle();
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepaliveIdle, sizeof kKeepaliveIdle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepaliveInterval, sizeof kKeepaliveInterval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepaliveCount, sizeof kKeepaliveCount);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &kUserTimeoutMs, sizeof kUserTimeoutMs);
}

// A password that is an md5 verifier is used as the verifier (auth: passthrough).
std::string md5_response(const BackendTarget& t, std::string_view salt) {
  return proto::md5::response(proto::md5::is_verifier(t.password) ? t.password : proto::md5::verifier(t.user, t.password),
                              salt);
}

awaitable<ConnectResult> connect_and_login(const BackendTarget& t) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, endpoints] = co_await resolver.async_resolve(t.host, std::to_string(t.port), use_nothrow);
  if (rec) co_return failure(sqlstate::cannot_connect, "could not resolve \"" + t.host + "\": " + rec.message());
  tcp::socket socket(ex);
  auto [cec, ep] = co_await asio::async_connect(socket, endpoints, use_nothrow);
  if (cec)
    co_return restarting(failure(sqlstate::cannot_connect, "could not connect to shard \"" + t.shard + "\" at " +
                                                               t.host + ":" + std::to_string(t.port) + ": " + cec.message()),
                         cec == asio::error::connection_refused);
  socket.set_option(tcp::no_delay(true));
  set_keepalive(socket);
  auto protocol = ep.protocol();
  if (t.tls.mode != config::ShardTlsMode::disable) {
    if (auto failed = co_await start_shard_tls(socket, t)) co_return std::move(*failed);
    protocol = tcp::v4();  // what the relay's end was assigned as
  }
  auto conn = std::make_unique<Backend>(std::move(socket), protocol);

  std::string out;
  proto::StartupMessage startup;
  startup.parameters = {{"user", t.user}, {"database", t.database}};
  startup.encode(out);
  if (auto [ec, n] = co_await asio::async_write(conn->socket, asio::buffer(out), use_nothrow); ec)
    co_return failure(sqlstate::connection_failure, "shard \"" + t.shard + "\": " + ec.message());

  std::unique_ptr<proto::scram::ClientExchange> scram;
  char type = 0;
  std::string body;
  for (;;) {
    if (!co_await read_frame(conn->socket, conn->read_buf, type, body))
      co_return restarting(failure(sqlstate::connection_failure, "shard \"" + t.shard + "\" closed the connection during start-up"),
                           true);
    out.clear();
    switch (type) {
      case 'R': {
        auto auth = proto::Authentication::decode(body);
        if (!auth) co_return failure(sqlstate::protocol_violation, "malformed authentication request");
        switch (auth->code) {
          case proto::AuthCode::ok:
            break;
          case proto::AuthCode::cleartext_password:
            proto::PasswordMessage{t.password}.encode(out);
            break;
          case proto::AuthCode::md5_password:
            proto::PasswordMessage{md5_response(t, auth->md5_salt)}.encode(out);
            break;
          case proto::AuthCode::sasl: {
            scram = std::make_unique<proto::scram::ClientExchange>(
                proto::scram::is_client_key(t.password) ? proto::scram::ClientExchange::with_client_key(t.password)
                                                        : proto::scram::ClientExchange(t.password));
            auto first = scram->client_first();
            proto::SASLInitialResponse{proto::scram::kMechanism, std::string_view(first)}.encode(out);
            break;
          }
          case proto::AuthCode::sasl_continue: {
            auto final_msg = scram ? scram->handle_server_first(auth->data) : std::nullopt;
            if (!final_msg)
              co_return failure(sqlstate::invalid_password,
                                "SCRAM exchange with shard \"" + t.shard + "\" failed: " + scram->error());
            proto::SASLResponse{*final_msg}.encode(out);
            break;
          }
          case proto::AuthCode::sasl_final:
            if (!scram || !scram->verify_server_final(auth->data))
              co_return failure(sqlstate::invalid_password, "shard \"" + t.shard + "\" sent a bad SCRAM signature");
            break;
        }
        if (!out.empty()) {
          if (auto [ec, n] = co_await asio::async_write(conn->socket, asio::buffer(out), use_nothrow); ec)
            co_return failure(sqlstate::connection_failure, ec.message());
        }
        break;
      }
      case 'S':
        if (auto p = proto::ParameterStatus::decode(body))
          conn->parameters.emplace_back(std::string(p->name), std::string(p->value));
        break;
      case 'K':
        if (auto k = proto::BackendKeyData::decode(body)) {
          conn->process_id = k->process_id;
          conn->secret_key = k->secret_key;
        }
        break;
      case 'E': {
        auto fields = proto::ErrorFields::decode(body);
        std::string code = fields ? std::string(fields->get('C')) : sqlstate::connection_failure;
        std::string msg = fields ? std::string(fields->get('M')) : "error during start-up";
        co_return restarting(failure(code, "shard \"" + t.shard + "\": " + msg), code == "57P03" || code == "57P01");
      }
      case 'Z':
        conn->host = t.host_index;
        co_return ConnectResult{std::move(conn), {}, {}};
      default:
        break;  // NoticeResponse, NegotiateProtocolVersion: nothing to do
    }
  }
}

}  // namespace

awaitable<ConnectResult> connect_backend(const BackendTarget& target) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, target.connect_timeout);
  auto result = co_await (connect_and_login(target) || timer.async_wait(use_nothrow));
  if (result.index() == 0) co_return std::move(std::get<0>(result));
  co_return failure(sqlstate::cannot_connect, "timeout connecting to shard \"" + target.shard + "\" at " +
                                                  target.host + ":" + std::to_string(target.port));
}

awaitable<bool> read_until_ready(Backend& b, int readies, const proto::FrameLimits& limits,
                                 const FrameHandler& on_frame) {
  while (readies > 0) {
    auto r = proto::decode_frame(b.read_buf, proto::Direction::backend, limits);
    if (r.status == proto::FrameStatus::error) co_return false;
    if (r.status == proto::FrameStatus::need_more) {
      if (co_await read_into(b.socket, b.read_buf, 16384)) co_return false;
      continue;
    }
    if (r.frame.type == 'Z') {
      b.status = r.frame.body.empty() ? 'E' : r.frame.body[0];
      --readies;
    }
    on_frame(r.frame.type, std::string_view(b.read_buf).substr(0, r.frame.size), r.frame.body);
    b.read_buf.erase(0, r.frame.size);
  }
  co_return true;
}

awaitable<QueryResult> simple_query(Backend& b, std::string_view sql, std::chrono::milliseconds timeout) {
  using namespace asio::experimental::awaitable_operators;
  QueryResult result;
  auto run = [&]() -> awaitable<void> {
    std::string out;
    proto::Query{sql}.encode(out);
    if (auto [ec, n] = co_await asio::async_write(b.socket, asio::buffer(out), use_nothrow); ec) {
      result.lost = true;
      co_return;
    }
    proto::FrameLimits limits;
    result.lost = !co_await read_until_ready(b, 1, limits, [&](char type, std::string_view, std::string_view body) {
      switch (type) {
        case 'T':
          result.rows.clear();
          break;
        case 'D':
          if (auto row = proto::DataRow::decode(body)) {
            auto& out_row = result.rows.emplace_back();
            for (auto& v : row->values) out_row.push_back(v ? std::optional<std::string>(*v) : std::nullopt);
          }
          break;
        case 'C':
          result.tag.assign(body.substr(0, body.find('\0')));
          break;
        case 'E':
          if (result.error_code.empty()) {
            if (auto e = proto::ErrorFields::decode(body)) {
              result.error_code = e->get('C');
              result.error_message = e->get('M');
            }
          }
          break;
        default:
          break;
      }
    });
  };
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  auto done = co_await (run() || timer.async_wait(use_nothrow));
  if (done.index() == 1) result.lost = true;
  if (result.lost && result.error_code.empty()) {
    result.error_code = sqlstate::connection_failure;
    result.error_message = "connection to the shard lost or timed out";
  }
  co_return result;
}

awaitable<void> send_cancel(std::string host, std::uint16_t port, std::int32_t pid, std::int32_t key,
                            std::chrono::milliseconds timeout) {
  using namespace asio::experimental::awaitable_operators;
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex, timeout);
  auto send = [&]() -> awaitable<void> {
    tcp::resolver resolver(ex);
    auto [rec, endpoints] = co_await resolver.async_resolve(host, std::to_string(port), use_nothrow);
    if (rec) co_return;
    tcp::socket s(ex);
    auto [cec, ep] = co_await asio::async_connect(s, endpoints, use_nothrow);
    if (cec) co_return;
    std::string out;
    proto::CancelRequest{pid, key}.encode(out);
    co_await asio::async_write(s, asio::buffer(out), use_nothrow);
    // The server closes the connection when it has processed the request.
    char c;
    co_await s.async_read_some(asio::buffer(&c, 1), use_nothrow);
  };
  co_await (send() || timer.async_wait(use_nothrow));
}

}  // namespace splitpoint::server
