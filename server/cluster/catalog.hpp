// The topology as data (SPEC §9): PostgreSQL tables in the `catalog:` shard's
// database, an epoch every change increments, proxies that register with a lease and
// follow changes, and the mover that runs partition moves. This is the control plane:
// slow, synchronous SQL through libpqxx on threads of its own. It reaches the data path
// only through the immutable Runtime it hands to Proxy::apply_topology.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "server/state/metrics.hpp"
#include "server/cluster/runtime.hpp"

namespace pqxx {  // libpqxx 6.4's connection, declared as its own headers do
class connect_direct;
template <typename Policy>
class basic_connection_base;
using connection = basic_connection_base<connect_direct>;
class transaction_base;
}  // namespace pqxx

namespace splitpoint::server {

class Proxy;
struct AutoSplitAction;

// An admin change the catalog refuses (SPEC §6 SPA01), or a failed catalog query.
struct CatalogError : std::runtime_error {
  CatalogError(std::string code, const std::string& message) : std::runtime_error(message), sqlstate(std::move(code)) {}
  std::string sqlstate;
};

// One row of splitpoint.moves.
struct MoveRow {
  std::int64_t id = 0;
  std::string distribution;
  std::uint32_t partition = 0;
  std::string source, target, state, owner, error;
  std::int64_t rows_copied = 0;
  std::optional<std::int64_t> lag_bytes, hold_ms;
  std::optional<std::int64_t> rows_total, eta_s;  // the partition's rows on the source; seconds left to copy
  int attempts = 0;
  std::string reason;  // why it was queued, when not by hand (an automatic split's figures)
};

// What the catalog says at one epoch.
struct CatalogState {
  std::int64_t epoch = 0;
  std::int64_t ddl = 0;  // DDL statements run through any proxy (their count)
  struct Place {
    std::string distribution;
    std::uint32_t partition = 0;
    std::string shard;
  };
  std::vector<Place> placement;
  std::vector<MoveRow> moves;  // those not finished (planned ... cleanup)
  std::vector<config::Shard> shards;  // added with ADD SHARD, in the order they were added
  std::vector<std::string> dropped;    // DROP SHARD: gone from the topology, the file's shards too
  // SPLIT/MERGE RANGE: the ranges' upper bounds (nullopt: unbounded) of the range
  // distributions whose ranges the catalog holds, by partition; the others keep the file's.
  std::map<std::string, std::vector<std::optional<std::string>>> ranges;
  // SPLIT PARTITION: each partition's modulus and remainder, by partition, of the hash
  // distributions split online; the others are uniform with the file's partitions.
  std::map<std::string, std::vector<config::HashPartition>> hash_parts;
  // CREATE INDEX on the admin console (SPEC §12): name, table, columns, unique; added
  // to the file's indexes, each with its entries' distribution.
  std::vector<config::Index> indexes;
};

// One range partition in the answer of SPLIT RANGE / MERGE RANGE.
struct RangeRow {
  std::uint32_t partition = 0;
  std::optional<std::string> lower, upper;  // nullopt: unbounded
  std::string shard;
};

// One hash partition in the answer of SPLIT PARTITION or MERGE PARTITION.
struct HashPartRow {
  std::uint32_t partition = 0, modulus = 0, remainder = 0;
  std::string shard;
};

// Logical partitions of a distribution, whatever its method, and where one's shard
// index is kept.
std::size_t partitions_of(const config::Distribution& d);
std::size_t& shard_slot(config::Distribution& d, std::size_t partition);
extern const char* const kCatalogChannel;
extern const char* const kUnfinishedMoves;  // SQL: a moves row not done, failed or cancelled
// The hash or range distribution of that name; CatalogError SPA01 otherwise.
const config::Distribution* movable_distribution(const config::Config& config, const std::string& name);  // LISTEN/NOTIFY channel of epoch changes

// The password the catalog and the mover use for a shard: its own, else the `users`
// entry of its user.
std::string shard_password(const config::Config& config, const config::Shard& shard);
// libpq connection string of a shard (the catalog and the mover connect on their own).
std::string shard_dsn(const config::Config& config, const config::Shard& shard);
// The partitions placement and move states of `state` applied to `config`; the moves'
// effect on the data path (held and hidden partitions). Unknown names are skipped.
void apply_catalog(const CatalogState& state, config::Config& config, MoveView& view);

class Catalog {
 public:
  Catalog(Proxy& server, const config::Config& config);
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // Creates the catalog's tables when missing, seeds them from the YAML on first start,
  // registers this proxy, and applies the catalog to `config` and `view`. Throws.
  void start(config::Config& config, MoveView& view);
  // Starts following the catalog and running moves; stop() ends both (and the lease).
  void run();
  void stop();
  // The last catalog state, applied to a configuration re-read on SIGHUP.
  void overlay(config::Config& config, MoveView& view) const;

  const std::string& proxy_id() const { return proxy_id_; }
  MoveMetrics& metrics() { return metrics_; }

  // Admin console (blocking: call off the Asio threads). Throw CatalogError.
  // `reason`: why, when not by hand (SHOW MOVES' reason).
  std::int64_t plan_move(const std::string& distribution, std::uint32_t partition, const std::string& target,
                         const std::string& reason = "");
  // ADD SHARD: `options` host=, port=, database=, user=, password=, pool_size= (missing
  // ones from the first shard). Copies the schema of every sharded and reference table
  // and the reference tables' rows from the first shard (pg_dump), then registers it.
  void add_shard(const std::string& name, const std::vector<std::pair<std::string, std::string>>& options);
  // REBALANCE: the fewest moves after which every shard holds floor or ceil(P/N) of the
  // distribution's partitions; queued unless `dry_run`.
  std::vector<MoveRow> rebalance(const std::string& distribution, bool dry_run);
  // DROP SHARD: refused (SPA01) while the shard holds a partition, the catalog, the
  // combine step, unlisted tables or a list's default, or is the source or target of an
  // unfinished move. Returns once every live proxy runs without it (or a lease passed).
  void drop_shard(const std::string& name);
  // SPLIT RANGE dist AT value (`split`) or MERGE RANGE dist AT value: one compare-and-set
  // transaction on the catalog's ranges and placement that bumps the epoch; refused (SPA01)
  // for a distribution that is not a range one, with unfinished moves, a value that is a
  // bound already (split) or not one (merge), or (merge) ranges on two shards. Returns the
  // partitions made, once every live proxy runs them (or a lease passed).
  std::vector<RangeRow> change_range(const std::string& distribution, const std::string& value, bool split);
  // PRESPLIT dist INTO n [FROM SAMPLE query] (#48): reads the keys (every table of the
  // distribution on every shard, key column as text; or the first column of `sample`,
  // run on the first shard), adds bounds at their n - 1 quantiles
  // (routing::presplit_ranges) in one compare-and-set transaction as SPLIT RANGE does,
  // then queues REBALANCE's moves so that the shards hold the ranges evenly. Refused
  // (SPA01) as SPLIT RANGE, and when the keys have fewer than n distinct values.
  struct PresplitResult {
    std::vector<RangeRow> ranges;  // every range afterwards
    std::vector<MoveRow> moves;    // queued
  };
  PresplitResult presplit(const std::string& distribution, std::uint32_t n, const std::string& sample);
  // SPLIT PARTITION dist:part: partition `partition` (modulus m, remainder r) of a hash
  // distribution becomes (2m, r) and a new partition, numbered next, (2m, r + m), both on
  // its shard; one compare-and-set transaction on splitpoint.hash_partitions and the
  // placement that bumps the epoch. Refused (SPA01) for a distribution that is not a hash
  // one, with unfinished moves, an unknown partition, or a modulus beyond
  // routing::kMaxHashModulus. Returns both halves once every live proxy runs them.
  std::vector<HashPartRow> split_partition(const std::string& distribution, std::uint32_t partition);
  // MERGE PARTITION (SPEC §9): partition p and its sibling, the two halves of a split
  // (routing::merge_hash_partition), become one, numbered the lower of the two; those
  // above the higher number are numbered one lower. Refused (SPA01) as SPLIT PARTITION,
  // and while the two are on different shards. Returns the merged partition.
  std::vector<HashPartRow> merge_partition(const std::string& distribution, std::uint32_t partition);
  // CREATE [UNIQUE] INDEX name ON table (columns) (SPEC §12): the index stored in the
  // catalog, its entries' distribution placed as a hash distribution's default; returns
  // once every live proxy runs it (each one's builder then builds it online, SHOW
  // INDEXES). Refused for an index of the file, a name taken (42P07), a table of no
  // distribution (42P01), a column that is the key.
  void create_index(config::Index ix);
  // DROP INDEX name: gone from the catalog and, once every live proxy runs without it,
  // its trigger, entries and change log on every shard. An index of the file: SPA01.
  void drop_index(const std::string& name);
  void cancel_move(std::int64_t id);
  std::vector<MoveRow> moves(bool all);
  struct ProxyRow {
    std::string id, address, lease_until;
    std::int64_t epoch = 0;
    bool live = false;
  };
  std::vector<ProxyRow> proxies();
  std::int64_t epoch() const { return metrics_.epoch.load(); }
  // A DDL statement ran through this proxy: the follower counts it in the catalog (within
  // moves.poll), and every proxy that sees the count change forgets its table shapes and
  // key sources, as this one did (a column added, dropped or retyped elsewhere).
  void schema_changed() { ddl_pending_ = true; }

  // For the mover (mover.cpp): a connection to the catalog, a change of one move's
  // row with an epoch increment when the data path must learn of it, and the wait
  // until every live proxy runs at least `epoch`.
  std::unique_ptr<pqxx::connection> connect_catalog() const;
  // The admin console's connection to the catalog, kept open, one command at a time
  // (`lock` holds it).
  pqxx::connection& admin_connection(std::unique_lock<std::mutex>& lock);
  std::int64_t update_move(pqxx::connection& c, const MoveRow& m, bool bump_epoch, const std::string& extra_sql = "");
  bool wait_for_acks(pqxx::connection& c, std::int64_t epoch, std::chrono::milliseconds timeout);
  // The file's configuration with the catalog's shards and placement, as last read.
  config::Config effective_config() const;
  bool stopping() const { return stop_.load(); }
  // Drops a move's view schema on these shards a lease from now, in the background.
  void drop_later(std::vector<std::string> dsns, std::string schema);
  // Sleeps up to `d` or until stop().
  void nap(std::chrono::milliseconds d);

 private:
  void create_schema(pqxx::connection& c);
  void seed(pqxx::connection& c);
  CatalogState read_state(pqxx::connection& c);
  void renew_lease(pqxx::connection& c);
  void follow();
  void follow_once(pqxx::connection& c);
  void mover_loop();
  // moves.auto_split and moves.auto_merge (SPEC §13, server/cluster/auto_split.cpp).
  void auto_split_loop();
  void auto_split_act(const AutoSplitAction& a, config::Moves::AutoSplit mode);
  void auto_merge_act(const AutoSplitAction& a, config::Moves::AutoSplit mode);
  void sweep_views();
  // The file's distribution of that name with method `method`; SPA01 otherwise (`what`
  // names the command).
  const config::Distribution& changeable(const std::string& name, config::Method method, const std::string& what) const;
  // One change of a distribution's partitions: under the topology row's lock, refused
  // (SPA01) while a move of the distribution is unfinished, `change` rewrites the
  // catalog's rows (or throws), the epoch increments. Returns the epoch once every live
  // proxy runs it (or a lease passed).
  std::int64_t change_partitions(const std::string& distribution, const std::string& what,
                                 const std::function<void(pqxx::transaction_base&)>& change);
  std::int64_t insert_move(pqxx::transaction_base& w, const std::string& distribution, std::uint32_t partition,
                           const std::string& target, const std::string& reason = "");

  Proxy& server_;
  config::Config config_;  // the YAML the catalog was seeded from; names shards
  std::string proxy_id_;
  std::string dsn_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;  // guards state_ and the nap condition
  std::condition_variable cv_;
  CatalogState state_;
  std::int64_t applied_epoch_ = 0;  // follower thread only: the runtime's
  std::int64_t seen_ddl_ = 0;       // follower thread only: CatalogState::ddl when shapes were last dropped
  std::atomic<bool> ddl_pending_{false};  // schema_changed() since the follower last looked
  std::int64_t acked_epoch_ = 0;    // follower thread only: written to the lease row
  std::chrono::steady_clock::time_point lease_renewed_;  // follower thread only
  std::atomic<bool> fenced_{false};  // written by the follower thread; read by overlay()
  MoveMetrics metrics_;
  std::thread follower_, mover_, auto_split_;
  std::mutex admin_mu_;
  std::unique_ptr<pqxx::connection> admin_;
  std::mutex droppers_mu_;
  std::vector<std::thread> droppers_;
};

}  // namespace splitpoint::server
