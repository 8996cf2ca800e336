// The process: worker threads (one io_context each), the listener, signals,
// configuration reloads, the cancel-key registry and graceful shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server/asio.hpp"
#include "server/metrics.hpp"
#include "server/runtime.hpp"

namespace splitpoint::server {

class Session;
class Catalog;

// Maps the cancel keys splitpoint gives clients to their sessions. Touched at login,
// logout and cancel only; striped so no lock is global.
class CancelRegistry {
 public:
  // Registers a session under a fresh random process id; returns it.
  std::int32_t add(const std::shared_ptr<Session>& s);
  void remove(std::int32_t pid);
  std::shared_ptr<Session> find(std::int32_t pid);

 private:
  static constexpr int kStripes = 16;
  struct Stripe {
    std::mutex mu;
    std::unordered_map<std::int32_t, std::weak_ptr<Session>> map;
  };
  Stripe stripes_[kStripes];
};

// An io_context whose services (and the coroutines they hold) can be shut down
// without destroying it: backend sockets move between workers, so every context must
// still exist while any of them tears down its sessions.
class WorkerContext : public asio::io_context {
 public:
  using asio::io_context::io_context;
  void shutdown_services() { shutdown(); }
};

// One thread with its io_context and the sessions running on it.
struct Worker {
  std::size_t index = 0;
  WorkerMetrics* metrics = nullptr;
  // Declared before the context: destroying the context destroys the sessions'
  // coroutine frames, and each session removes itself from this set.
  std::unordered_set<Session*> sessions;  // touched only on this worker's thread
  WorkerContext context{1};
};

class Server {
 public:
  Server(std::shared_ptr<const Runtime> runtime, std::string config_path);
  ~Server();

  // Runs until shutdown completes. Returns the process exit code.
  int run();

  std::shared_ptr<const Runtime> runtime() const { return runtime_.load(); }
  CancelRegistry& cancels() { return cancels_; }
  bool shutting_down() const { return shutting_down_.load(std::memory_order_relaxed); }
  std::atomic<std::int64_t>& client_count() { return clients_; }
  std::uint64_t next_session_id() { return next_session_id_.fetch_add(1) + 1; }
  // This proxy among others (the catalog's proxies, the deadlock search's published
  // sessions): "<hostname>:<pid>:<8 random hex digits>", made at start.
  const std::string& instance_id() const { return instance_id_; }

  // Re-reads the config file; a bad file is rejected and the old config stays.
  bool reload(std::string& error);
  // A new catalog epoch (or lease state): the same configuration with the catalog's
  // placement and moves, in the same lineage.
  void apply_topology();
  // Bumped whenever a new runtime is stored: sessions compare it between statements.
  std::uint64_t runtime_generation() const { return generation_.load(std::memory_order_acquire); }
  // A shard's primary moved (SPEC §10): sessions take the new one's pools between
  // transactions.
  void primary_changed() { generation_.fetch_add(1, std::memory_order_release); }
  Catalog* catalog() { return catalog_.get(); }
  // The current runtime has moves in progress (or a lapsed lease): sessions check them.
  bool moves_active() const { return moves_active_.load(std::memory_order_relaxed); }
  // The catalog epoch of the current runtime (0 without a catalog); stored after it.
  std::int64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // From the catalog's thread: the oldest epoch a running statement took its moves
  // under (Session::take_moves), or the current one; the epoch this proxy acknowledges.
  std::int64_t epoch_in_use();

  Metrics& metrics() { return *metrics_; }
  // The workers, for work done on each one's thread (the deadlock search).
  std::vector<Worker*> worker_list() const {
    std::vector<Worker*> out;
    for (auto& w : workers_) out.push_back(w.get());
    return out;
  }

  // Logged-in sessions, for SHOW CLIENTS (touched at login and logout only).
  void register_session(std::uint64_t id, const std::shared_ptr<Session>& s);
  void unregister_session(std::uint64_t id);
  std::vector<std::shared_ptr<Session>> sessions();
  std::string render_metrics();

 private:
  awaitable<void> accept_loop();
  awaitable<void> handle_signals();
  void begin_shutdown();
  void spawn_session(Worker& w, tcp::socket socket);

  void store_runtime(std::shared_ptr<const Runtime> rt);

  std::atomic<std::shared_ptr<const Runtime>> runtime_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> moves_active_{false};
  std::atomic<std::int64_t> epoch_{0};
  std::unique_ptr<Catalog> catalog_;
  std::string config_path_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<tcp::acceptor> metrics_acceptor_;
  std::unique_ptr<asio::signal_set> signals_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex sessions_mu_;
  struct Registered {
    std::weak_ptr<Session> session;
    const Session* alive;  // until it unregisters, in its destructor: read under sessions_mu_
  };
  std::unordered_map<std::uint64_t, Registered> sessions_;
  CancelRegistry cancels_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<std::int64_t> clients_{0};
  std::atomic<std::uint64_t> next_session_id_{0};
  std::string instance_id_;
  std::size_t next_worker_ = 0;
};

}  // namespace splitpoint::server
