// A bounded pool of backend connections for one (shard, user, database).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include "server/net/asio.hpp"
#include "server/net/backend.hpp"

namespace splitpoint::server {

struct AcquireResult {
  std::unique_ptr<Backend> backend;
  std::string sqlstate;  // set on failure
  std::string message;
  bool restarting = false;  // its connect was refused as by a restarting server (ConnectResult)
};

struct PoolStats {
  int idle = 0;
  int active = 0;   // handed out
  int opening = 0;  // being connected
  int waiting = 0;  // clients queued for a connection
};

class Pool : public std::enable_shared_from_this<Pool> {
 public:
  Pool(BackendTarget target, int max_size) : target_(std::move(target)), max_size_(max_size) {}

  // Takes an idle connection, or queues for one up to `wait_timeout`, with a connect
  // started in the background if below max_size: the first connection released or
  // opened serves it (pool.cpp). A failed connect fails the client it was started for
  // (if that one still waits). Runs on the caller's executor.
  awaitable<AcquireResult> acquire(std::chrono::milliseconds wait_timeout);
  // An idle connection that looks healthy, or nullptr: acquire()'s first step
  // without a coroutine frame, for the hot path (one per transaction). Its socket
  // runs on `ex` (the caller's worker): one already there is preferred, another is
  // moved (Backend::move_to).
  std::unique_ptr<Backend> take_idle(const asio::any_io_executor& ex);
  // Returns a connection. `reusable` false (dirty, broken, cancelled) closes it.
  void release(std::unique_ptr<Backend> backend, bool reusable);

  // ParameterStatus values of the first connection opened, for clients' start-up.
  std::optional<ParameterList> server_parameters() const;
  // What a client whose startup parameters make `script` (their SET script) is told
  // at start-up, once a login has learnt it from a backend (Login::greet): one round
  // trip per distinct set of startup parameters, not per login. At most 256 are kept.
  std::optional<ParameterList> startup_parameters(const std::string& script) const;
  void remember_startup_parameters(const std::string& script, ParameterList reported);

  // The server's max_prepared_transactions (SHOW, on the first connection the pool
  // opens, and again on each new one while it is 0: changing it restarts PostgreSQL,
  // which closes every connection); nullopt until read. 0 means this shard cannot take
  // part in two-phase commit (server/session/execute/two_phase.cpp).
  std::optional<int> max_prepared_transactions() const;
  void set_max_prepared_transactions(int value);

  // Closes every idle connection (a client's DROP DATABASE of the pool's database must
  // not find them in its way).
  void close_idle();

  // PAUSE: no connection is handed out until resumed; acquirers wait (with their
  // deadline), statements already running finish.
  void set_paused(bool paused);
  bool paused() const;

  const BackendTarget& target() const { return target_; }
  int max_size() const { return max_size_; }
  PoolStats stats() const;

 private:
  struct Waiter;
  void hand_over(std::shared_ptr<Waiter> w, std::unique_ptr<Backend> backend);
  void put_back(std::unique_ptr<Backend> backend);  // to a waiter, else idle
  void watch_idle(Backend& b);        // (with mu_ held)
  void drop_idle(const Backend* b);
  void count_connect(Waiter& w);
  void start_connect(std::shared_ptr<Waiter> origin);
  awaitable<void> connect_for(std::shared_ptr<Pool> self, std::shared_ptr<Waiter> origin);
  std::deque<std::shared_ptr<Waiter>>::iterator next_waiter(Backend& b);

  const BackendTarget target_;
  const int max_size_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Backend>> idle_;  // most recently used last
  int open_ = 0;     // idle + handed out + being opened
  int opening_ = 0;  // connects in flight (counted in open_)
  std::deque<std::shared_ptr<Waiter>> waiters_;
  std::optional<ParameterList> server_parameters_;
  std::unordered_map<std::string, ParameterList> startup_parameters_;
  std::optional<int> max_prepared_transactions_;
  bool reading_max_prepared_ = false;  // one connection reads it at a time
  bool paused_ = false;
};

}  // namespace splitpoint::server
