// A client connection that is plain TCP or TLS after an SSLRequest.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/asio.hpp"
#include "server/metrics.hpp"

namespace splitpoint::server {

class ClientStream {
 public:
  explicit ClientStream(tcp::socket socket) : socket_(std::move(socket)) {}

  // Switches to TLS; the handshake must complete before any further read.
  awaitable<error_code> start_tls(asio::ssl::context& ctx);

  // Reads what is available (at least one byte) into the free tail of `buf`,
  // growing it by at least `min_chunk`.
  awaitable<error_code> read_some(std::string& buf, std::size_t min_chunk = 16384);
  awaitable<error_code> write(std::string_view data);

  tcp::socket& socket() { return socket_; }
  // Counts bytes read and written (splitpoint_bytes_total).
  void count_bytes(LocalCounter* in, LocalCounter* out) {
    bytes_in_ = in;
    bytes_out_ = out;
  }
  bool is_tls() const { return tls_ != nullptr; }
  // Aborts pending operations; safe to call more than once.
  void close();

 private:
  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
  LocalCounter* bytes_in_ = nullptr;
  LocalCounter* bytes_out_ = nullptr;
};

// Appends up to one read's worth of bytes from any stream to `buf`.
template <class Stream>
awaitable<error_code> read_into(Stream& s, std::string& buf, std::size_t min_chunk) {
  std::size_t old = buf.size();
  if (buf.capacity() - old < min_chunk) buf.reserve(old + min_chunk);
  buf.resize(buf.capacity());
  auto [ec, n] = co_await s.async_read_some(asio::buffer(buf.data() + old, buf.size() - old), use_nothrow);
  buf.resize(old + n);
  co_return ec;
}

}  // namespace splitpoint::server
