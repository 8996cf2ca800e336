// An immutable snapshot of what a loaded configuration needs at run time: the config,
// users' credentials ready for the handshake, and the backend pools. SIGHUP builds a
// new one; sessions keep the snapshot they started with.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "protocol/scram.hpp"
#include "routing/merge/scatter_plan.hpp"
#include "routing/router.hpp"
#include "routing/topology.hpp"
#include "server/net/asio.hpp"
#include "server/state/hosts.hpp"
#include "server/state/partition_slots.hpp"
#include "server/net/pool.hpp"

namespace splitpoint::server {

struct UserAuth {
  std::string name;
  bool admin = false;
  std::string plaintext;                            // empty when only a verifier is known
  std::string md5;                                  // "md5..." verifier, if derivable
  std::optional<protocol::scram::Verifier> scram;   // if derivable
  std::vector<config::Cidr> allow;                  // SPEC §11; empty = any address
};

// The pools of one shard, one per (host, backend user, database), and its hosts'
// health (SPEC §10).
class ShardPools {
 public:
  ShardPools(config::Shard shard, std::chrono::milliseconds connect_timeout, const config::Health& health,
             std::shared_ptr<ShardHosts> hosts = nullptr)
      : shard_(std::move(shard)),
        connect_timeout_(connect_timeout),
        hosts_(hosts ? std::move(hosts) : std::make_shared<ShardHosts>(shard_, health)) {}
  // The pool on host `host` (a number of ShardHosts); by default the primary's.
  std::shared_ptr<Pool> get(const std::string& client_user, const std::string& client_password,
                            const std::string& client_database, std::optional<std::size_t> host = std::nullopt);
  const config::Shard& shard() const { return shard_; }
  ShardHosts& hosts() const { return *hosts_; }
  const std::shared_ptr<ShardHosts>& hosts_ptr() const { return hosts_; }
  std::vector<std::shared_ptr<Pool>> all() const;
  void set_paused(bool paused);
  bool paused() const;
  // Same server, credentials and size: pools can be kept across a reload.
  bool same_definition(const config::Shard& other, std::chrono::milliseconds connect_timeout,
                       const config::Health& health) const;
  // The clients that took pools here (as `get`'s arguments) while the shard has no
  // configured user, up to kMaxIdentities: two-phase recovery connects as them
  // (server/txn/two_phase.cpp), as only a transaction's owner may finish it.
  struct Identity {
    std::string user, password, database;
    bool operator==(const Identity&) const = default;
  };
  static constexpr std::size_t kMaxIdentities = 64;
  std::vector<Identity> identities() const;

 private:
  config::Shard shard_;
  std::chrono::milliseconds connect_timeout_;
  std::shared_ptr<ShardHosts> hosts_;
  mutable std::mutex mu_;
  std::map<std::tuple<std::size_t, std::string, std::string>, std::shared_ptr<Pool>> pools_;
  std::vector<Identity> identities_;
  bool paused_ = false;
};

// The shapes one statement has looked up (ShapeCache::find_kept): it keeps using them
// when the cache is cleared meanwhile.
using KeptShapes = std::vector<std::shared_ptr<const routing::TableShape>>;

// Shapes of sharded tables learned from a shard's catalog (column order and types),
// shared by all sessions, and the scatter plans made with them. Written rarely (first
// use of a table, after DDL).
class ShapeCache {
 public:
  // How multi-shard reads are answered, by statement text (cleared with the shapes).
  routing::ScatterPlanner& scatter_plans() { return scatter_plans_; }
  std::shared_ptr<const routing::TableShape> find(std::string_view table) const;
  // For one statement: the shape `keep` already holds for `table` (a cache cleared in
  // between does not change it: a statement may look a table up more than once), else
  // the cached one, then kept. Null when not known.
  const routing::TableShape* find_kept(std::string_view table, KeptShapes& keep) const;
  std::shared_ptr<const routing::TableShape> put(const std::string& table, routing::TableShape shape);
  void clear();
  // The database's collation (pg_database.datcollate), for merging text; "" = unknown.
  std::string collation() const;
  void set_collation(std::string c);

 private:
  std::string collation_;
  routing::ScatterPlanner scatter_plans_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const routing::TableShape>, std::less<>> shapes_;
};

// Keys the proxy generates for INSERTs that leave them out (SPEC §3), and values of other
// columns whose default draws from a sequence, per database, table and column (or per
// sequence, for nextval('s') written in a statement): how — the column's own default,
// read once from a shard's catalog — and a block of values drawn from it ahead, so most
// such INSERTs cost no extra round trip. Values come from one place (the combine shard's
// sequence), so they are unique across shards and proxies, and increase within each
// proxy's blocks.
class KeyCache {
 public:
  struct Source {
    std::string sql;         // "SELECT <default> FROM pg_catalog.generate_series(1, " + n + ")"; "": no default
    bool overriding = false;  // GENERATED ALWAYS AS IDENTITY: OVERRIDING SYSTEM VALUE
    std::string sequence;     // the sequence the values come from, as a regclass reads it ("": none)
  };
  std::optional<Source> source(const std::string& key) const;
  void set_source(const std::string& key, Source s);
  // Up to n values drawn earlier, oldest first.
  std::vector<std::string> take(const std::string& key, std::size_t n);
  void add(const std::string& key, std::vector<std::string> values, std::size_t from);
  // Values taken and not used, oldest first: taken first again.
  void put_back(const std::string& key, std::vector<std::string> values);
  void clear();

 private:
  mutable std::mutex mu_;
  std::map<std::string, Source, std::less<>> sources_;
  std::map<std::string, std::deque<std::string>, std::less<>> blocks_;
};

// What the moves in progress mean for the data path at one catalog epoch (SPEC §9).
struct MoveView {
  struct Part {
    std::size_t distribution = 0;
    std::uint32_t partition = 0;
    std::size_t shard = 0;  // hidden: the shard holding rows it does not own
    std::int64_t move = 0;
  };
  std::int64_t epoch = 0;
  bool fenced = false;       // this proxy's catalog lease lapsed: sharded statements wait
  bool moving = false;       // a move is past `planned`: DDL on every shard waits for it
  std::vector<Part> held;    // in cutover: statements for these partitions wait
  std::vector<Part> hidden;  // rows of `partition` on `shard`, which does not own them
  // Per shard: sharded table -> schema of the view that hides those rows.
  std::vector<std::map<std::string, std::string, std::less<>>> views;
  bool active() const { return fenced || moving || !held.empty() || !hidden.empty(); }
};

struct Runtime {
  config::Config config;
  // Runtimes of one lineage differ only in placement and moves (catalog epochs), so a
  // session may move to a newer one between transactions; a reload starts a lineage.
  std::uint64_t lineage = 0;
  std::shared_ptr<const MoveView> moves = std::make_shared<MoveView>();
  std::shared_ptr<routing::Router> router;  // shared: its plan cache is internally locked
  std::shared_ptr<routing::Topology> topology;  // key -> partition -> shard, for COPY
  std::shared_ptr<const PartitionSlots> slots;  // the partitions' counters (metrics)
  std::shared_ptr<ShapeCache> shapes = std::make_shared<ShapeCache>();
  std::shared_ptr<KeyCache> keys = std::make_shared<KeyCache>();
  std::unordered_map<std::string, UserAuth> users;
  std::vector<std::shared_ptr<ShardPools>> shards;  // index = config shard index
  std::shared_ptr<ShardPools> combine;  // scatter.combine as a connection string; null: on a shard
  std::shared_ptr<asio::ssl::context> tls;          // null without `tls`
  bool standbys = false;  // some shard has a host besides its primary (SPEC §10)

  // After DDL: table shapes and key sources are read again from the shards.
  void forget_table_definitions() const {
    shapes->clear();
    keys->clear();
  }

  const UserAuth* find_user(const std::string& name) const {
    auto it = users.find(name);
    return it == users.end() ? nullptr : &it->second;
  }
};

// Builds a runtime; pools of unchanged shards are taken over from `previous`.
// `continue_lineage` (a new catalog epoch, same configuration file) also keeps its
// lineage and its shapes. Throws std::runtime_error when TLS files cannot be loaded.
std::shared_ptr<const Runtime> make_runtime(config::Config config, const Runtime* previous,
                                            std::shared_ptr<const MoveView> moves = nullptr,
                                            bool continue_lineage = false);

}  // namespace splitpoint::server
