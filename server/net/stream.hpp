// A client connection that is plain TCP or TLS after an SSLRequest.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/net/asio.hpp"
#include "server/net/input_buffer.hpp"
#include "server/state/metrics.hpp"

namespace splitpoint::server {

class ClientStream {
 public:
  explicit ClientStream(tcp::socket socket) : socket_(std::move(socket)) {}

  // Switches to TLS; the handshake must complete before any further read.
  awaitable<error_code> start_tls(asio::ssl::context& ctx);

  // Reads what is available (at least one byte) into the free tail of `buf`, which
  // offers at least `min_chunk` bytes.
  awaitable<error_code> read_some(InputBuffer& buf, std::size_t min_chunk = 16384);
  // read_some for an empty `buf` that may stay so a long time (a client between
  // statements), holding no memory while it waits: plain TCP only. It waits for the
  // socket to be readable, then reads once into a buffer of the thread's and copies
  // what came into `buf`, sized to it. (The wait costs an epoll_ctl where a read that
  // waits costs a recv(2) that finds nothing: the same count of system calls.)
  awaitable<error_code> read_idle(InputBuffer& buf);
  awaitable<error_code> write(std::string_view data);
  // Bytes that go out with the next write, or before the next read: the proxy's own
  // answers to extended-protocol messages, which PostgreSQL too sends only at Sync,
  // Flush or a full buffer. One send(2), and one wake-up of the client, instead of one
  // per message.
  void defer(std::string_view data);

  // While set, what would go to the client is kept here instead: the proxy reads a
  // statement's answer itself (INSERT ... SELECT, server/session/execute/insert_select.cpp).
  // DataRows beyond `max_rows` are counted, not kept. Writes hold whole messages.
  struct Capture {
    std::string data;
    std::size_t max_rows = ~std::size_t{0};
    std::size_t rows = 0;
    void take(std::string_view messages);
  };
  void capture(Capture* into) { capture_ = into; }
  Capture* captured() const { return capture_; }  // (to put back after a capture of one's own)
  // While set, ReadyForQuery messages are not sent, and ErrorResponses are counted: the
  // statements of one client text run one by one (server/session/texts.cpp), answered
  // with one ReadyForQuery at the end.
  struct Quiet {
    int errors = 0;
  };
  void quiet(Quiet* q) { quiet_ = q; }

  tcp::socket& socket() { return socket_; }
  // Counts bytes read and written (splitpoint_bytes_total).
  void count_bytes(LocalCounter* in, LocalCounter* out) {
    bytes_in_ = in;
    bytes_out_ = out;
  }
  bool is_tls() const { return tls_ != nullptr; }
  // The tls-server-end-point channel binding data of this connection (RFC 5929 section
  // 4.1, SCRAM-SHA-256-PLUS): the hash of the certificate the proxy presented, with its
  // signature's hash algorithm (SHA-256 for MD5 and SHA-1), as PostgreSQL's
  // be_tls_get_certificate_hash. nullopt without TLS, or when the signature names no
  // hash (Ed25519): then -PLUS is not offered.
  std::optional<std::string> certificate_hash();
  // Aborts pending operations; safe to call more than once.
  void close();

 private:
  tcp::socket socket_;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls_;
  LocalCounter* bytes_in_ = nullptr;
  LocalCounter* bytes_out_ = nullptr;
  Capture* capture_ = nullptr;
  Quiet* quiet_ = nullptr;
  int writes_waiting_ = 0;  // writes suspended on a full socket (plain TCP)
  std::string deferred_;    // defer()
};

// One send(2) of as much of `data` as the socket takes now, without waiting: the bytes
// sent (0 with `ec` clear when the socket is full). What is sent here costs no
// completion handler, no turn of the event loop and no coroutine suspension, as a
// speculative async_write would. Only for a socket with no other write in flight, or
// the bytes could overtake that write's.
std::size_t send_now(tcp::socket& s, std::string_view data, error_code& ec);

// send_now of `first` then `second`, in one sendmsg(2).
std::size_t send_now(tcp::socket& s, std::string_view first, std::string_view second, error_code& ec);

// send_now, then an async_write of what the socket did not take.
awaitable<error_code> send_all(tcp::socket& s, std::string_view data);

// Appends up to one read's worth of bytes from any stream to `buf` (into at least
// `min_chunk` bytes of free space, as much as is there).
template <class Stream>
awaitable<error_code> read_into(Stream& s, InputBuffer& buf, std::size_t min_chunk) {
  std::span<char> space = buf.prepare(min_chunk);
  auto [ec, n] = co_await s.async_read_some(asio::buffer(space.data(), space.size()), use_nothrow);
  buf.commit(n);
  co_return ec;
}

}  // namespace splitpoint::server
