// The single-shard forward, the executor of every statement that one shard answers
// (SPEC §3): one of the session's backends is current, the client loop writes the
// client's messages to it (Session::forward_raw into bout_, then flush()), and the
// pump, a coroutine of its own on the session's thread, forwards the backend's answers
// to the client as they come, asking the Frontend (frontend.hpp) which of them the
// client is owed. One Pump per Session, made current again for each shard used:
//
//   use_shard()   make a shard's backend current: drain() the one before, then
//                 attach() (from the pool, brought to the client's state by
//                 Session::sync_backend_state)
//   flush()       the client's messages out; starts the pump on the first of a backend
//   run()         the pump: read, decode, forward (forward_frames), until nothing is
//                 owed and the backend goes back to the pool, or it is drained
//   detach()      no backend current; report_lost(): a lost backend ends the client's
//                 session with 08006
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/messages.hpp"
#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;
class Backend;

class Pump {
 public:
  explicit Pump(Session& s) : s_(s) {}

  // The timer drain() waits on; made on the session's executor before the first use.
  void bind(const asio::any_io_executor& ex) { exit_ = std::make_unique<asio::steady_timer>(ex); }

  // Makes `shard` the current backend (`standby`: a host of the shard's that answers
  // the read; else the primary): waits until the current one owes nothing, then
  // attaches. False if it failed (the error was reported to the client).
  awaitable<bool> use_shard(std::size_t shard, std::optional<std::size_t> standby = std::nullopt);
  // Waits until the current backend owes nothing and detaches the pump from it (it
  // stays held inside a transaction, else it went back to the pool).
  awaitable<void> drain();
  // Writes the session's bytes for the current backend, then starts the pump if it
  // is pending.
  awaitable<void> flush();
  void start();
  // The session ends: the pump stops reading at once.
  awaitable<void> stop_for_exit();

  // A backend is current (working for this client). Also read from other threads, for
  // SHOW CLIENTS.
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool lost() const { return lost_; }      // the current backend's connection broke

 private:
  awaitable<bool> attach(std::size_t shard, std::optional<std::size_t> standby);
  // The session's state on `b` (Session::sync_backend_state) ahead of what comes next,
  // its answers swallowed.
  void sync_state(Backend& b);
  awaitable<void> run();
  // The whole messages of `in` from the current backend: those the client is owed
  // go to `out` (a view into `in` when none was held back or replaced). Returns how
  // many bytes of `in` were read; nullopt: a malformed message.
  std::optional<std::size_t> forward_frames(std::string_view in, std::string_view& out);
  // One message from the current backend; true if it goes to the client. What it
  // means for the client is the Frontend's to say; the pump counts and logs it.
  bool process_backend_frame(char type, std::string_view body);
  void detach();  // no backend is current any more
  // The current backend's connection broke: the client's session ends with 08006.
  awaitable<void> report_lost(std::size_t shard, Backend* b);
  bool owes_nothing() const;  // the client waits for no answer of the current backend
  static bool is_fatal(std::string_view error_body);
  std::optional<protocol::ErrorFields> closed_idle_;  // a FATAL the server sent while owed nothing

  Session& s_;
  std::atomic<bool> active_{false};
  bool pending_ = false;  // attached, pump not started yet (start())
  bool stop_ = false;     // drain(): the pump must stop once nothing is owed
  bool lost_ = false;
  std::unique_ptr<asio::steady_timer> exit_;
  std::string out_;          // bytes for the client when responses are filtered
  std::string replacement_;  // a backend message rewritten for the client (timeouts.query's 57014)
};

}  // namespace splitpoint::server
