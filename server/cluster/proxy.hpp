// This proxy as its parts see it: the current runtime and its generation, the catalog
// it follows, its metrics, the cancel keys, the logged-in sessions and the worker
// threads' contexts. The process (server/server.hpp) owns one and drives it (listener,
// signals, threads, shutdown); sessions, the control plane and the transaction
// coordinator below the process hold a Proxy&.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server/cluster/runtime.hpp"
#include "server/net/asio.hpp"
#include "server/state/metrics.hpp"

namespace splitpoint::server {

class Session;
class Catalog;
class IndexKeeper;

// Maps the cancel keys splitpoint gives clients (BackendKeyData: process id and secret)
// to their sessions. Keyed by both: in session pooling a client is given its backend's
// pid, and two shards' backends may share one. Touched at login, logout and cancel
// only; striped so no lock is global.
class CancelRegistry {
 public:
  struct Key {
    std::int32_t pid = 0, secret = 0;
  };
  // Registers a session under `pid` (0: a fresh random one) and a fresh random secret.
  Key add(const std::shared_ptr<Session>& s, std::int32_t pid = 0);
  void remove(Key k);
  std::shared_ptr<Session> find(Key k);

 private:
  static constexpr int kStripes = 16;
  static std::uint64_t packed(Key k) {
    return std::uint64_t{static_cast<std::uint32_t>(k.pid)} << 32 | static_cast<std::uint32_t>(k.secret);
  }
  struct Stripe {
    std::mutex mu;
    std::unordered_map<std::uint64_t, std::weak_ptr<Session>> map;
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

class Proxy {
 public:
  Proxy(std::shared_ptr<const Runtime> runtime, std::string config_path);
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;
  ~Proxy();

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
  // Global secondary indexes (SPEC §12): their state, and their builder's thread.
  IndexKeeper& indexes() { return *indexes_; }
  // The current runtime has moves in progress (or a lapsed lease): sessions check them.
  bool moves_active() const { return moves_active_.load(std::memory_order_relaxed); }
  // The catalog epoch of the current runtime (0 without a catalog); stored after it.
  std::int64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // From the catalog's thread: the oldest epoch a running statement took its moves
  // under (CatalogEpoch::take_moves), or the current one; the epoch this proxy acknowledges.
  std::int64_t epoch_in_use();

  Metrics& metrics() { return *metrics_; }
  // The workers, for work done on each one's thread (the deadlock search).
  std::vector<Worker*> worker_list() const {
    std::vector<Worker*> out;
    for (auto& w : workers_) out.push_back(w.get());
    return out;
  }

  // Logged-in sessions, for SHOW CLIENTS (touched at login and logout only), with the
  // epoch each one's running statement took its moves under (epoch_in_use).
  void register_session(std::uint64_t id, const std::shared_ptr<Session>& s,
                        const std::atomic<std::int64_t>& statement_epoch);
  void unregister_session(std::uint64_t id);
  std::vector<std::shared_ptr<Session>> sessions();
  std::string render_metrics();

 protected:
  // With a catalog configured: its placement before the first client (a proxy never
  // routes by a YAML placement the catalog has moved on from), then its follower.
  void start_catalog();
  void start_indexes();
  void begin_shutdown() { shutting_down_ = true; }
  // Teardown (the process's destructor): the catalog stopped, every worker's coroutines
  // ended while all contexts still exist, then the pools dropped, then the contexts.
  void tear_down();

  std::vector<std::unique_ptr<Worker>> workers_;

 private:
  void store_runtime(std::shared_ptr<const Runtime> rt);

  std::atomic<std::shared_ptr<const Runtime>> runtime_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> moves_active_{false};
  std::atomic<std::int64_t> epoch_{0};
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<IndexKeeper> indexes_;
  std::string config_path_;
  std::unique_ptr<Metrics> metrics_;
  std::mutex sessions_mu_;
  struct Registered {
    std::weak_ptr<Session> session;
    const std::atomic<std::int64_t>* statement_epoch;  // the session's, until it unregisters
  };
  std::unordered_map<std::uint64_t, Registered> sessions_;
  CancelRegistry cancels_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<std::int64_t> clients_{0};
  std::atomic<std::uint64_t> next_session_id_{0};
  std::string instance_id_;
};

}  // namespace splitpoint::server
