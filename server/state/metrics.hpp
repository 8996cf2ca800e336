// Metrics (SPEC §8), declared in one place. The statement path only touches counters
// of its own worker thread (plain load + store on relaxed atomics: no locked
// read-modify-write, no shared cache line); a scrape sums every worker and renders
// with prometheus-cpp's text serializer.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "routing/router.hpp"
#include "routing/topology.hpp"
#include "server/state/hosts.hpp"
#include "server/state/hot_keys.hpp"
#include "server/state/key_trend.hpp"
#include "server/state/partition_slots.hpp"

namespace prometheus {
struct MetricFamily;
}

namespace splitpoint::server {

// queries_total{route}: how a statement was routed.
enum class RouteLabel : std::uint8_t { single, multi, all, reference, admin };
inline constexpr std::size_t kRouteLabels = 5;
enum class MissingReason : std::uint8_t { timeout, error, unreachable };
inline constexpr std::size_t kMissingReasons = 3;
inline constexpr std::size_t kMaxShards = 64;  // shards beyond this are not broken down

// Written by one thread only.
class LocalCounter {
 public:
  void add(std::uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  std::uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

class LocalGauge {
 public:
  void add(std::int64_t n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  std::int64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> v_{0};
};

class LocalHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   5.0};
  void observe(double seconds);
  void observe_since(std::chrono::steady_clock::time_point start);
  std::uint64_t bucket(std::size_t i) const { return buckets_[i].get(); }
  std::uint64_t count() const { return count_.get(); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::array<LocalCounter, kBounds.size() + 1> buckets_;
  LocalCounter count_;
  std::atomic<double> sum_{0};
};

struct ShardCounters {
  LocalHistogram query;     // shard_query_duration_seconds
  LocalHistogram pool_wait; // pool_wait_seconds
  LocalCounter connect_errors;
  std::array<LocalCounter, kMissingReasons> missing;
};

// Where the rows one shard reports for a write are counted (partition_writes_total,
// SHOW PARTITIONS rows_written): flat partition indexes and their weights.
struct RowShare {
  std::size_t index = 0;
  std::uint64_t weight = 1;
};
using RowShares = std::vector<RowShare>;

// Rows a CommandComplete tag reports written ("INSERT 0 n", "UPDATE n", "DELETE n",
// "MERGE n", "COPY n"); 0 for any other tag. A trailing NUL is ignored.
std::uint64_t rows_written_by(std::string_view tag);

struct WorkerMetrics {
  explicit WorkerMetrics(std::size_t partitions, std::size_t distributions)
      : partition_queries(partitions), partition_writes(partitions), hot(distributions), trend(distributions) {}

  std::array<LocalCounter, kRouteLabels> queries;
  std::array<LocalCounter, kRouteLabels> replica_queries;  // of `queries`, those a standby answered
  std::array<LocalHistogram, kRouteLabels> duration;
  LocalCounter bytes_in, bytes_out;
  LocalCounter combines, combine_rows;  // combine steps run, partial rows they moved
  LocalGauge clients, clients_active;  // logged-in clients / those holding a backend
  std::array<ShardCounters, kMaxShards> shards;
  std::vector<LocalCounter> partition_queries;  // by PartitionSlots slot
  std::vector<LocalCounter> partition_writes;

  void error(std::string_view sqlstate);
  void hot_key(std::size_t distribution, std::string_view key);
  // Adds `rows` to the shares' partitions in proportion to their weights (largest
  // remainder, ties to the earlier share): the partitions' counts sum to `rows`.
  void add_rows(const RowShares& shares, std::uint64_t rows);

  // SQLSTATE -> count; guarded because the scrape reads the map.
  mutable std::mutex errors_mu;
  std::unordered_map<std::string, std::uint64_t> errors;
  mutable std::mutex hot_mu;
  std::vector<HotKeys> hot;  // per distribution
  std::vector<KeyTrend> trend;  // per distribution, under hot_mu too
};

// The catalog's and the mover's figures (SPEC §9), written by their threads.
inline constexpr const char* kMoveStates[8] = {"planned", "copying", "catching_up", "cutover",
                                               "cleanup", "done",    "failed",      "cancelled"};
struct MoveMetrics {
  std::atomic<std::int64_t> epoch{0};
  std::atomic<std::int64_t> proxies_live{0}, proxies_expired{0};
  std::atomic<std::int64_t> moves_by_state[std::size(kMoveStates)] = {};
  std::atomic<std::uint64_t> rows_copied{0};
  std::atomic<std::uint64_t> held_statements{0};      // statements that waited on a cutover
  std::atomic<std::int64_t> holding{0};               // statements held now
  std::atomic<std::uint64_t> fence_rejections{0};     // SPM01 from a source shard's fence
  // WAL each unfinished move's target has still to apply, as the catalog last said
  // (move id, bytes); written by the catalog's follower.
  mutable std::mutex lag_mu;
  std::vector<std::pair<std::int64_t, std::int64_t>> lag_by_move;
  LocalHistogram cutover_hold;                        // written by the mover thread only
};

// Point-in-time values the scrape asks the server for.
struct PoolGauge {
  std::string shard;
  int idle = 0, active = 0, opening = 0, waiting = 0;
  // SPEC §10, for shards with more than one host: what the health checks saw.
  std::vector<ShardHosts::View> hosts;
  std::uint64_t failovers = 0;
};

class Metrics {
 public:
  // `slots`: the first runtime's (its capacity sizes the per-partition counters).
  Metrics(std::size_t workers, const config::Config& config, const PartitionSlots& slots);
  WorkerMetrics& worker(std::size_t i) { return *workers_[i]; }
  // The partitions of a write statement on `shard` its rows are counted in (docs/metrics.md):
  // the partitions its keys mapped to on that shard, weighted by their INSERT ... VALUES
  // rows when every one is known, else evenly; a keyless UPDATE/DELETE of one
  // distribution: every partition of that distribution on the shard, evenly. Empty for
  // reads, reference-table writes and writes no distribution owns.
  RowShares row_shares(const routing::Route& route, std::size_t shard, const routing::Topology& topo,
                       const PartitionSlots& slots) const;

  void config_reload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).fetch_add(1, std::memory_order_relaxed); }

  // Two-phase commits (transactions.cross_shard_writes: two_phase), by outcome; the
  // recovered ones count prepared transactions (one per shard), the others commits.
  enum class TwoPhase { committed, rolled_back, unknown, recovered_committed, recovered_rolled_back };
  static constexpr std::size_t kTwoPhaseOutcomes = 5;
  void two_phase(TwoPhase o) { two_phase_[static_cast<std::size_t>(o)].fetch_add(1, std::memory_order_relaxed); }
  // A deadlock across shards broken (server/txn/deadlocks.hpp).
  void deadlock_broken() { deadlocks_.fetch_add(1, std::memory_order_relaxed); }
  // Global indexes (SPEC §12), by the index's place in config.indexes: reads routed
  // through a lookup (whether it found a row), and entries written or deleted.
  enum class IndexEvent { lookup_found, lookup_empty, entry_write };
  static constexpr std::size_t kIndexEvents = 3;
  void index_event(std::size_t index, IndexEvent e, std::uint64_t n = 1) {
    if (index < config::kMaxIndexes) index_[index][static_cast<std::size_t>(e)].fetch_add(n, std::memory_order_relaxed);
  }

  // Prometheus text exposition; `config` names shards and distributions.
  std::string render(const config::Config& config, const PartitionSlots& slots, const std::vector<PoolGauge>& pools,
                     const MoveMetrics* moves = nullptr) const;

  struct PartitionRow {
    std::string distribution;
    std::uint32_t partition = 0;
    std::string shard;
    std::uint64_t queries = 0, writes = 0;
  };
  std::vector<PartitionRow> partitions(const config::Config& config, const PartitionSlots& slots) const;
  struct HotKeyRow {
    std::string distribution;
    std::string key;
    std::uint64_t count = 0, error = 0;
  };
  std::vector<HotKeyRow> hot_keys(const config::Config& config, std::size_t per_distribution) const;
  // Each distribution's key trend (KeyTrend), summed over the workers: offers and rising
  // keys added, the largest key, the samples put together.
  struct KeyTrendRow {
    std::string distribution;
    std::uint64_t offers = 0, rising = 0;
    std::string top;
    std::vector<std::string> sample;
  };
  std::vector<KeyTrendRow> key_trends(const config::Config& config) const;
  // Busiest partition's share of queries divided by an even share (1/partitions):
  // 1 = perfectly even, `partitions` = everything on one partition. 0 without traffic.
  double skew(const config::Config& config, const PartitionSlots& slots, std::size_t distribution) const;

 private:
  template <typename Get>
  double sum(Get get) const;
  void render_connections(std::vector<prometheus::MetricFamily>& out, const std::vector<PoolGauge>& pools) const;
  void render_statements(std::vector<prometheus::MetricFamily>& out, const config::Config& config) const;
  void render_partitions(std::vector<prometheus::MetricFamily>& out, const config::Config& config,
                         const PartitionSlots& slots) const;
  void render_totals(std::vector<prometheus::MetricFamily>& out) const;
  void render_indexes(std::vector<prometheus::MetricFamily>& out, const config::Config& config) const;
  static void render_moves(std::vector<prometheus::MetricFamily>& out, const MoveMetrics& m);

  std::vector<std::unique_ptr<WorkerMetrics>> workers_;
  std::atomic<std::uint64_t> reloads_ok_{0}, reloads_failed_{0};
  std::atomic<std::uint64_t> two_phase_[kTwoPhaseOutcomes] = {};
  std::atomic<std::uint64_t> deadlocks_{0};
  std::atomic<std::uint64_t> index_[config::kMaxIndexes][kIndexEvents] = {};
};

}  // namespace splitpoint::server
