#include "server/net/stream.hpp"

#include "server/net/wire.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace splitpoint::server {

// PostgreSQL's output buffer (PqSendBuffer's initial size).
constexpr std::size_t kTextOutputBuffer = 8192;

awaitable<error_code> ClientStream::start_tls(asio::ssl::context& ctx) {
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, ctx);
  auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::server, use_nothrow);
  co_return ec;
}

awaitable<error_code> ClientStream::read_some(InputBuffer& buf, std::size_t min_chunk) {
  if (!deferred_.empty()) {  // the client may be waiting for them
    if (auto ec = co_await write({})) co_return ec;
  }
  // read_into() inline: one coroutine frame less per client message.
  std::span<char> space = buf.prepare(min_chunk);
  auto into = asio::buffer(space.data(), space.size());
  error_code ec;
  std::size_t n = 0;
  if (tls_) std::tie(ec, n) = co_await tls_->async_read_some(into, use_nothrow);
  else std::tie(ec, n) = co_await socket_.async_read_some(into, use_nothrow);
  buf.commit(n);
  if (bytes_in_) bytes_in_->add(n);
  co_return ec;
}

awaitable<error_code> ClientStream::read_idle(InputBuffer& buf) {
  if (!deferred_.empty()) {  // the client may be waiting for them
    if (auto ec = co_await write({})) co_return ec;
  }
  // Shared by the thread's sessions: filled and emptied with no suspension between.
  thread_local std::array<char, 16384> scratch;
  for (;;) {
    auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, use_nothrow);
    if (ec) co_return ec;
    for (;;) {
      const ssize_t n = ::recv(socket_.native_handle(), scratch.data(), scratch.size(), MSG_DONTWAIT);
      if (n > 0) {
        buf.append({scratch.data(), static_cast<std::size_t>(n)});
        if (bytes_in_) bytes_in_->add(static_cast<std::size_t>(n));
        co_return error_code{};
      }
      if (n == 0) co_return asio::error::eof;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;  // readable no more: wait again
      co_return error_code(errno, asio::error::get_system_category());
    }
  }
}

void ClientStream::defer(std::string_view data) {
  if (capture_ != nullptr) capture_->take(data);
  else deferred_.append(data);
}

awaitable<error_code> ClientStream::write(std::string_view data) {
  if (capture_ != nullptr) {
    capture_->take(data);
    co_return error_code{};
  }
  std::string kept;
  if (quiet_ != nullptr) {
    for_each_message(data, [&](char type, std::string_view, std::string_view whole) {
      if (type == 'E') ++quiet_->errors;
      if (type != 'Z') kept.append(whole);
    });
    // As PostgreSQL's output buffer while it runs one text: the answers go out when
    // 8 kB are waiting, or with the text's ReadyForQuery. A client sees nothing of a
    // text whose statement waits on a lock (isolationtester's wait check relies on it:
    // a first statement's result would end libpq's PQisBusy).
    if (!kept.empty() && deferred_.size() + kept.size() < kTextOutputBuffer) {
      deferred_.append(kept);
      co_return error_code{};
    }
    data = kept;
  }
  std::string first;  // what was deferred goes out first, in the same send(2)
  first.swap(deferred_);
  const std::size_t total = first.size() + data.size();
  if (total == 0) co_return error_code{};
  if (bytes_out_) bytes_out_->add(total);
  const std::array<asio::const_buffer, 2> both{asio::buffer(first), asio::buffer(data)};
  if (tls_) {
    auto [ec, n] = co_await asio::async_write(*tls_, both, use_nothrow);
    co_return ec;
  }
  std::size_t sent = 0;
  if (writes_waiting_ == 0) {
    error_code ec;
    sent = send_now(socket_, first, data, ec);
    if (ec || sent == total) co_return ec;
  }
  ++writes_waiting_;
  std::array<asio::const_buffer, 2> rest = both;
  const std::size_t from_first = std::min(sent, first.size());
  rest[0] += from_first;
  rest[1] += sent - from_first;
  auto [ec, n] = co_await asio::async_write(socket_, rest, use_nothrow);
  --writes_waiting_;
  co_return ec;
}

std::size_t send_now(tcp::socket& s, std::string_view first, std::string_view second, error_code& ec) {
  ec.clear();
  iovec iov[2];
  msghdr msg{};
  msg.msg_iov = iov;
  for (std::string_view piece : {first, second})
    if (!piece.empty()) iov[msg.msg_iovlen++] = {const_cast<char*>(piece.data()), piece.size()};
  for (;;) {
    ssize_t n = ::sendmsg(s.native_handle(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) ec = error_code(errno, asio::error::get_system_category());
    return 0;
  }
}

std::size_t send_now(tcp::socket& s, std::string_view data, error_code& ec) { return send_now(s, data, {}, ec); }

awaitable<error_code> send_all(tcp::socket& s, std::string_view data) {
  error_code ec;
  std::size_t sent = send_now(s, data, ec);
  if (ec || sent == data.size()) co_return ec;
  auto [wec, n] = co_await asio::async_write(s, asio::buffer(data.substr(sent)), use_nothrow);
  co_return wec;
}

void ClientStream::Capture::take(std::string_view messages) {
  for_each_message(messages, [&](char type, std::string_view, std::string_view whole) {
    if (type != 'D' || ++rows <= max_rows) data.append(whole);
  });
}

std::optional<std::string> ClientStream::certificate_hash() {
  if (!tls_) return std::nullopt;
  X509* cert = SSL_get_certificate(tls_->native_handle());
  int md_nid = NID_undef;
  if (cert == nullptr || X509_get_signature_info(cert, &md_nid, nullptr, nullptr, nullptr) != 1)
    return std::nullopt;
  const EVP_MD* md = md_nid == NID_md5 || md_nid == NID_sha1 ? EVP_sha256() : EVP_get_digestbynid(md_nid);
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (md == nullptr || X509_digest(cert, md, hash, &len) != 1) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(hash), len);
}

void ClientStream::close() {
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace splitpoint::server
