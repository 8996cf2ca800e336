// One authenticated connection to a PostgreSQL server, and how it is opened.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "protocol/framing.hpp"
#include "server/net/asio.hpp"
#include "server/net/frontend.hpp"
#include "server/net/input_buffer.hpp"

namespace splitpoint::server {

// Where and as whom to connect; one per pool.
struct BackendTarget {
  std::string shard;
  std::size_t host_index = 0;  // which of the shard's hosts (ShardHosts)
  std::string host;
  std::uint16_t port = 5432;
  std::string user;
  std::string password;
  std::string database;
  std::chrono::milliseconds connect_timeout{3000};
  config::ShardTls tls;  // SPEC §11
};

using ParameterList = std::vector<std::pair<std::string, std::string>>;

// BackendState (server/net/frontend.hpp): its transaction status, prepared statements and
// session state as the session's bookkeeping sees them.
class Backend : public BackendState {
 public:
  Backend(tcp::socket socket, tcp protocol) : socket(std::move(socket)), protocol(protocol) {}

  tcp::socket socket;
  tcp protocol;                      // of the socket, to re-create it on another thread
  InputBuffer read_buf;              // bytes read but not yet consumed
  std::int32_t process_id = 0;       // BackendKeyData, for CancelRequest
  std::int32_t secret_key = 0;
  ParameterList parameters;          // ParameterStatus seen at start-up
  std::size_t host = 0;              // BackendTarget::host_index of its pool

  // When it last went back to its pool (Pool::take_idle).
  std::chrono::steady_clock::time_point released_at{};
  // A CancelRequest was sent while a session held it: never give it to another
  // session, the cancel could still land on that session's query.
  std::atomic<bool> cancel_sent{false};

  // No pending bytes and not closed by the server (a cheap non-blocking peek).
  bool looks_healthy();

  // Whether its socket is driven by the event loop of `ex` (the worker thread whose
  // session uses it), and moving it there (two epoll_ctl calls). A socket read on one
  // worker but registered with another's loop has every completion posted across
  // threads: a wake-up of the other thread and back, per read. No operation may be
  // pending on it. False if the socket could not be moved (then it is closed).
  bool runs_on(const asio::any_io_executor& ex);
  bool move_to(const asio::any_io_executor& ex);
};

struct ConnectResult {
  std::unique_ptr<Backend> backend;
  std::string sqlstate;  // set on failure
  std::string message;
  // Refused as a restarting PostgreSQL refuses (nothing listening, 57P03, 57P01, closed
  // during start-up): worth connecting again soon (HostChoice::acquire_backend).
  bool restarting = false;
};

// Connects (with TLS per target.tls), authenticates (trust, cleartext, md5,
// scram-sha-256) and reads up to the first ReadyForQuery, all under
// target.connect_timeout.
awaitable<ConnectResult> connect_backend(const BackendTarget& target);

// What a simple Query answered: the text rows of its last result, its last
// CommandComplete tag, the first error.
struct QueryResult {
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::string tag;
  std::string error_code, error_message;  // empty when it succeeded
  bool lost = false;                      // connection broke or timed out: close it
  bool ok() const { return !lost && error_code.empty(); }
};

// Reads a backend's answers up to its `readies`-th ReadyForQuery (whose status it
// records), handing every message to `on_frame` as (type, whole message, body) before it
// is consumed. False if the connection broke or sent a malformed message.
using FrameHandler = std::function<void(char type, std::string_view message, std::string_view body)>;
awaitable<bool> read_until_ready(Backend& b, int readies, const protocol::FrameLimits& limits,
                                 const FrameHandler& on_frame);

// Runs `sql` (one Query message, possibly several statements) on an idle backend and
// reads up to its ReadyForQuery, all within `timeout`.
awaitable<QueryResult> simple_query(Backend& b, std::string_view sql, std::chrono::milliseconds timeout);

// Sends a CancelRequest for (pid, key) to host:port on a fresh connection.
awaitable<void> send_cancel(std::string host, std::uint16_t port, std::int32_t pid, std::int32_t key,
                            std::chrono::milliseconds timeout);

}  // namespace splitpoint::server
