// timeouts.query (timeout.cpp): a statement the current backend leaves unanswered is
// cancelled there, then its connection dropped. One timer per session, made on first
// use and armed only while the current backend owes answers; it fires at most once per
// timeout interval however many statements run, and looks at `since_` then.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;

class QueryTimeout {
 public:
  using Clock = std::chrono::steady_clock;
  explicit QueryTimeout(Session& s) : s_(s) {}

  // After a flush to the current backend: starts timing what it owes, if not already
  // (inline, after Session: session.hpp).
  void start();
  // The current backend owes nothing any more (the pump, at each answer).
  void owed_nothing() { since_ = {}; }
  // COPY IN: the shard waits for the client; the time counts from its last data.
  void client_sent() {
    if (since_ != Clock::time_point{}) since_ = Clock::now();
  }
  // The pump left its backend.
  void detached() {
    since_ = {};
    dropped_ = false;
  }
  // The statement timed out and the proxy cancelled it.
  bool cancelled() const { return cancelled_ == since_ && since_ != Clock::time_point{}; }
  // No answer to the cancel either: the pump ends that backend (answer_dropped).
  bool dropped() const { return dropped_; }
  // PostgreSQL's 57014 after the proxy's cancel, into `out` with a message that names
  // the shard and the timeout. False: not a 57014.
  bool rewrite_error(std::string_view body, std::string& out);
  // The backend did not answer the cancel either: its connection is closed and the
  // client's statements get 08006.
  awaitable<void> answer_dropped(std::size_t shard);

 private:
  void start_timer();
  void arm(Clock::time_point at);
  void on_timer();
  void cancel_statement();

  Session& s_;
  std::unique_ptr<asio::steady_timer> timer_;
  Clock::time_point since_{};      // owed answers since; {}: none owed
  Clock::time_point cancelled_{};  // the `since_` of the statement cancelled
  bool armed_ = false;
  bool dropped_ = false;
};

}  // namespace splitpoint::server
