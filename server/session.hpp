// One client connection: start-up and authentication, then forwarding between the
// client and a pooled backend. Two coroutines on the worker's thread share the state:
// the client loop (client -> backend) and, while a backend is attached, the pump
// (backend -> client). Nothing here is touched from another thread except the cancel
// target, which is guarded by cancel_mu_.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/framing.hpp"
#include "routing/session_command.hpp"
#include "server/asio.hpp"
#include "server/backend.hpp"
#include "server/runtime.hpp"
#include "server/stream.hpp"

namespace splitpoint::server {

class Server;
struct Worker;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server& server, Worker& worker, tcp::socket socket);
  ~Session();

  awaitable<void> run();

  // From any thread: a CancelRequest carrying this session's key arrived.
  void request_cancel(std::int32_t secret);
  // On this session's thread: the server is shutting down.
  void on_shutdown();

 private:
  // One response the backend owes us, in order: ParseComplete '1', BindComplete '2',
  // CloseComplete '3', or ReadyForQuery 'Z' (for a Sync or a Query).
  struct Expect {
    char type = 'Z';
    bool swallow = false;  // injected by us: the client never sees the response
    bool failed = false;   // an ErrorResponse arrived for this Sync/Query
    routing::SessionCommand command = routing::SessionCommand::none;
    std::string name;      // Parse: server statement name; SET/RESET: parameter
    std::string text;      // SET/RESET: statement text to replay
  };

  // Login.
  awaitable<bool> login();
  awaitable<std::optional<protocol::Frame>> read_startup_frame();
  awaitable<bool> authenticate();
  awaitable<std::optional<std::string>> read_password_message();

  // Serving.
  awaitable<void> serve();
  awaitable<bool> attach_backend();
  awaitable<void> pump();
  bool forward(const protocol::Frame& f);
  bool process_backend_frame(char type, std::string_view body);
  bool should_release() const;
  void release_backend(bool reusable);
  awaitable<void> detach_for_exit();

  // Prepared statements survive transaction pooling under server-side names.
  void ensure_prepared(const std::string& server_name, std::string_view parse_rest);
  void ensure_unnamed_prepared();
  void apply_session_commands();
  void rebuild_state_script();

  // Output.
  awaitable<void> send_error(std::string_view severity, std::string_view sqlstate, std::string message,
                             bool ready_for_query);
  void set_cancel_target(Backend* b);

  Server& server_;
  Worker& worker_;
  ClientStream stream_;
  std::shared_ptr<const Runtime> runtime_;
  std::uint64_t id_;
  std::int32_t cancel_pid_ = 0;
  std::int32_t cancel_secret_ = 0;
  protocol::FrameLimits limits_;
  bool counted_ = false;

  // Who is connected.
  std::string user_;
  std::string database_;
  std::string client_password_;  // plaintext, when known (for backend auth)
  std::vector<std::pair<std::string, std::string>> startup_params_;  // replayed as SET
  std::shared_ptr<Pool> pool_;

  // Client input.
  std::string cbuf_;
  std::size_t cpos_ = 0;

  // Backend side.
  std::unique_ptr<Backend> backend_;
  std::string bout_;                 // bytes for the backend, written once per batch
  std::string cout_;                 // bytes for the client when responses are filtered
  std::deque<Expect> expect_;
  bool sent_after_sync_ = false;     // messages sent since the last Sync/Query
  char txn_status_ = 'I';
  bool pump_active_ = false;
  std::unique_ptr<asio::steady_timer> pump_exit_;
  bool pinned_ = false;              // LISTEN: keeps its backend until the end
  bool closing_ = false;
  bool backend_lost_ = false;

  // Session state carried across backends.
  std::vector<std::pair<std::string, std::string>> sets_;  // parameter -> SET statement
  std::vector<Expect> pending_commands_;                    // completed inside a transaction
  bool last_tag_rollback_ = false;
  bool pending_reset_all_ = false;
  std::string state_script_;
  std::uint64_t state_hash_ = 0;

  struct Prepared {
    std::string server_name;
    std::string parse_rest;  // Parse body after the name: query + parameter types
  };
  std::unordered_map<std::string, Prepared> prepared_;
  std::string unnamed_parse_rest_;  // last unnamed Parse, replayed on another backend
  std::uint64_t unnamed_seq_ = 0;

  // Guards the cancel target against CancelRequests handled on other threads.
  std::mutex cancel_mu_;
  Backend* cancel_backend_ = nullptr;
  std::string cancel_host_;
  std::uint16_t cancel_port_ = 0;

  std::unique_ptr<asio::steady_timer> idle_timer_;
  bool idle_timed_out_ = false;
  bool login_timed_out_ = false;
};

}  // namespace splitpoint::server
