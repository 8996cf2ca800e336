#include "server/backend.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "protocol/framing.hpp"
#include "protocol/md5.hpp"
#include "protocol/messages.hpp"
#include "protocol/scram.hpp"
#include "protocol/sqlstate.hpp"
#include "server/stream.hpp"

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

awaitable<ConnectResult> connect_and_login(const BackendTarget& t) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, endpoints] = co_await resolver.async_resolve(t.host, std::to_string(t.port), use_nothrow);
  if (rec) co_return failure(sqlstate::cannot_connect, "could not resolve \"" + t.host + "\": " + rec.message());
  tcp::socket socket(ex);
  auto [cec, ep] = co_await asio::async_connect(socket, endpoints, use_nothrow);
  if (cec)
    co_return failure(sqlstate::cannot_connect, "could not connect to shard \"" + t.shard + "\" at " +
                                                    t.host + ":" + std::to_string(t.port) + ": " + cec.message());
  socket.set_option(tcp::no_delay(true));
  auto conn = std::make_unique<Backend>(std::move(socket), ep.protocol());

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
      co_return failure(sqlstate::connection_failure,
                        "shard \"" + t.shard + "\" closed the connection during start-up");
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
            proto::PasswordMessage{proto::md5::response(proto::md5::verifier(t.user, t.password), auth->md5_salt)}
                .encode(out);
            break;
          case proto::AuthCode::sasl: {
            scram = std::make_unique<proto::scram::ClientExchange>(t.password);
            auto first = scram->client_first();
            proto::SASLInitialResponse{proto::scram::kMechanism, std::string_view(first)}.encode(out);
            break;
          }
          case proto::AuthCode::sasl_continue: {
            auto final_msg = scram ? scram->handle_server_first(auth->data) : std::nullopt;
            if (!final_msg) co_return failure(sqlstate::invalid_password, "SCRAM exchange with shard failed");
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
        co_return failure(code, "shard \"" + t.shard + "\": " + msg);
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
