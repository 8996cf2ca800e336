#include "server/stream.hpp"

namespace splitpoint::server {

awaitable<error_code> ClientStream::start_tls(asio::ssl::context& ctx) {
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, ctx);
  auto [ec] = co_await tls_->async_handshake(asio::ssl::stream_base::server, use_nothrow);
  co_return ec;
}

awaitable<error_code> ClientStream::read_some(InputBuffer& buf, std::size_t min_chunk) {
  auto before = buf.size();
  auto ec = tls_ ? co_await read_into(*tls_, buf, min_chunk) : co_await read_into(socket_, buf, min_chunk);
  if (bytes_in_) bytes_in_->add(buf.size() - before);
  co_return ec;
}

awaitable<error_code> ClientStream::write(std::string_view data) {
  if (bytes_out_) bytes_out_->add(data.size());
  if (tls_) {
    auto [ec, n] = co_await asio::async_write(*tls_, asio::buffer(data), use_nothrow);
    co_return ec;
  }
  auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data), use_nothrow);
  co_return ec;
}

void ClientStream::close() {
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace splitpoint::server
