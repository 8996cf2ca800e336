// splitpoint's configuration as plain structs (SPEC §2). Loading and validation live
// in config.cpp, the only file that includes yaml-cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/cidr.hpp"

namespace splitpoint::config {

using Duration = std::chrono::milliseconds;

enum class PoolMode { transaction, session };
// passthrough (SPEC §14): as md5 (SCRAM for a user whose secret is a SCRAM verifier),
// and a user not under `users:` is looked up with `auth_query`.
enum class AuthMethod { trust, password, md5, scram_sha_256, passthrough };
enum class Method { hash, range, list };
enum class UnlistedPolicy { reference, reject, shard };
enum class PartialResults { deny, allow };
enum class CrossShardWrites { refuse, two_phase };
enum class Reads { primary, replica };
enum class Scheduling { normal, batch };

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
};

struct Tls {
  std::string cert;
  std::string key;
};

// TLS from the proxy to a shard (SPEC §11), as libpq's sslmode / sslrootcert.
enum class ShardTlsMode { disable, require, verify_ca, verify_full };
struct ShardTls {
  ShardTlsMode mode = ShardTlsMode::disable;
  std::string ca;  // PEM file of trusted CAs; set (and readable at load) for verify-*
  bool operator==(const ShardTls&) const = default;
};

// A password is given as `password:`, or read at load (and at every reload) from
// `password_file:` (trailing newlines stripped) or `password_env:` (SPEC §11); either
// way it ends up here.
struct User {
  std::string name;
  std::string password;  // plaintext, or a SCRAM-SHA-256$... / md5... verifier
  bool admin = false;
  std::vector<Cidr> allow;  // client addresses that may log in as this user; empty = any
  int line = 0;
};

struct Shard {
  std::string name;
  std::string host = "127.0.0.1";
  std::uint16_t port = 5432;
  std::string database;  // empty: the client's database name
  std::string user;      // empty: the client's own user name
  std::string password;  // empty: the client's password from `users` (if plaintext)
  int pool_size = 20;
  // SPEC §10. `hosts:` lists the hosts that may be primary (the one where
  // pg_is_in_recovery() is false is; host/port is the first of them); without it the one
  // host/port. `replicas:` are standbys that serve reads only.
  std::vector<Endpoint> hosts;
  std::vector<Endpoint> replicas;
  ShardTls tls;  // for every host of the shard, and the catalog's and mover's connections
  int line = 0;
  // Every host of the shard, the possible primaries first: index = host number.
  std::vector<Endpoint> all_hosts() const;
};

struct Range {
  std::optional<std::string> upto;  // exclusive upper bound; nullopt = +infinity (last)
  std::size_t shard = 0;            // index into Config::shards
};

struct ListPartition {
  std::size_t shard = 0;
  std::vector<std::string> values;
};

// One hash partition: the keys whose row hash % modulus == remainder (PostgreSQL's
// FOR VALUES WITH (MODULUS m, REMAINDER r)).
struct HashPartition {
  std::uint32_t modulus = 0, remainder = 0;
  bool operator==(const HashPartition&) const = default;
};

// A salted hash distribution (SPEC §13, docs/operations.md "Salting hot keys"): a row's
// partition comes from (key, bucket), bucket = the salt column's hash-partition hash mod
// `buckets`; `keys` non-empty: only those key values are salted, the others in bucket 0.
struct Salt {
  std::string column;  // the same column name in every table of the distribution
  std::uint32_t buckets = 0;
  std::vector<std::string> keys;  // as written in the file
  int line = 0;
};

struct Distribution {
  std::string name;
  Method method = Method::hash;
  // hash: number of logical partitions and partition -> shard index (size == partitions)
  int partitions = 0;
  std::vector<std::size_t> placement;
  // hash, once SPLIT PARTITION changed it (the catalog's): each partition's modulus and
  // remainder, by number (size == partitions). Empty: uniform, partition p is
  // (partitions, p), as the file gives it.
  std::vector<HashPartition> hash_parts;
  HashPartition hash_partition(std::size_t p) const {
    return hash_parts.empty() ? HashPartition{static_cast<std::uint32_t>(partitions), static_cast<std::uint32_t>(p)}
                              : hash_parts[p];
  }
  // range: one logical partition per range, in order
  std::vector<Range> ranges;
  // list: one logical partition per shard entry, in file order; then the default
  std::vector<ListPartition> lists;
  std::optional<std::size_t> default_shard;
  std::vector<std::pair<std::string, std::string>> tables;  // table -> key column
  std::optional<Salt> salt;  // hash only
  int line = 0;
};

// A global secondary index (SPEC §12): `indexes:`. Its entries (the indexed columns'
// values and the row's key) are a table of the proxy's own, splitpoint.<name>_entries,
// hash-distributed by the first indexed column over the shards (the distribution
// `distribution`, added to `distributions` by the loader); the proxy maintains it in
// the same transaction as the row (server/session/execute/global_index.cpp) and
// builds it (server/cluster/indexes.cpp). docs/indexes.md.
inline constexpr std::size_t kMaxIndexes = 64;  // `indexes:` entries at most
struct Index {
  std::string name;                  // PostgreSQL's constraint name: users_email_key / users_email_idx
  std::string table;                 // a sharded table, as its distribution lists it
  std::vector<std::string> columns;  // one or more, none the table's key
  bool unique = false;
  std::string key_column;    // the table's distribution key (filled by the loader)
  std::size_t distribution = 0;  // index of the entries' own distribution
  std::string entries_table() const { return "splitpoint." + name + "_entries"; }
  int line = 0;
};

struct Scatter {
  Duration deadline{5000};
  Duration max_deadline{60000};
  PartialResults partial_results = PartialResults::deny;
  std::size_t max_buffered_rows = 1000000;
  // The combine step (SPEC §4.1): the shard whose database runs it, or a PostgreSQL of
  // its own given as a libpq connection string (`combine_dsn` as written, and what the
  // proxy connects with: a shard named "combine", pool_size 20); and the partial rows
  // one statement may move there before SPS02.
  std::size_t combine_shard = 0;
  std::string combine_dsn;
  std::optional<Shard> combine_database;
  bool combines_on(std::size_t shard) const { return !combine_database && combine_shard == shard; }
  std::size_t max_combine_rows = 10000000;
  // Rows an INSERT ... SELECT whose rows are pulled through the proxy may move (SPS02 beyond).
  std::size_t max_insert_select_rows = 10000;
};

struct Timeouts {
  Duration client_login{10000};
  Duration client_idle{0};  // 0 = never
  Duration server_connect{3000};
  // Extension: how long a statement waits for a shard that refuses connections the way
  // a restarting PostgreSQL does (refused, 57P03, closed during start-up), connecting
  // again with backoff, before its client gets the error. Not for a shard with standbys
  // to fail over to. 0 = fail at once.
  Duration shard_unavailable{10000};
  Duration shutdown{30000};
  // Extension (as PgBouncer's query_timeout): a statement on one shard unanswered this
  // long is cancelled there, and its connection dropped if the cancel does not answer
  // within server_connect. 0 = off.
  Duration query{0};
  // Extension: how often the proxy looks for deadlocks across shards (its sessions'
  // waits on each shard, joined); a cycle is broken by cancelling one waiter, which
  // gets 40P01. 0 = off.
  Duration deadlock{1000};
};

// Online moves (SPEC §9): the catalog's polling and leases, and how long a statement
// for a partition in cutover waits before SPM01.
struct Moves {
  Duration max_hold{5000};
  Duration poll{500};    // extension: how often each proxy reads the catalog's epoch
  Duration lease{10000}; // extension: a proxy silent this long is taken for dead
  bool verify = true;     // extension: compare counts and checksums during the cutover
  // SPEC §13: what the proxy holding the auto-split lease does with split advice that
  // held for auto_split_window (off: nothing; advise: logs what it would do; on: splits
  // and moves the hotter half), at most once per auto_split_interval.
  enum class AutoSplit : std::uint8_t { off, advise, on };
  AutoSplit auto_split = AutoSplit::off;
  // SPEC §13: the same for cold neighbours on one shard (merge_advice in
  // server/state/auto_split.hpp), at most one merge per auto_split_interval.
  AutoSplit auto_merge = AutoSplit::off;
  Duration auto_split_window{60000};
  Duration auto_split_interval{600000};
};

// Replicas and failover (SPEC §10): how often each host is checked (role, replay lag),
// how long one check may take, and the first ban of a failing host (doubled on each
// failure in a row, up to 32 times it).
struct Health {
  Duration interval{1000};
  Duration timeout{2000};
  Duration ban{2000};
};

// `auth_query:` (SPEC §14, with `auth: passthrough`): where and how a client's password
// verifier is read from PostgreSQL itself, as PgBouncer's auth_query. `$1` in the query
// is the user name (a quoted literal); its first column of its first row is the
// verifier (SCRAM-SHA-256$... or md5...); no row or NULL: no such user.
inline constexpr const char* kDefaultAuthQuery =
    "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = $1 AND rolcanlogin "
    "AND (rolvaliduntil IS NULL OR rolvaliduntil > now())";
struct AuthQuery {
  std::string user;
  std::string password;
  std::string database = "postgres";
  std::string query = kDefaultAuthQuery;
  std::size_t shard = 0;  // its primary answers
  int line = 0;
};

struct Config {
  Endpoint listen{"127.0.0.1", 6432};
  Endpoint metrics_listen{"127.0.0.1", 9930};
  PoolMode pool_mode = PoolMode::transaction;
  AuthMethod auth = AuthMethod::trust;
  std::optional<AuthQuery> auth_query;  // with auth: passthrough, and only then
  std::optional<Tls> tls;
  std::vector<User> users;
  std::vector<Shard> shards;
  std::vector<Distribution> distributions;
  std::vector<std::string> reference_tables;
  std::vector<Index> indexes;
  UnlistedPolicy unlisted_tables = UnlistedPolicy::reference;
  std::size_t unlisted_shard = 0;  // when unlisted_tables is shard:<name>
  Scatter scatter;
  // The shard whose sequences give the values the proxy draws (SPEC §3) and whose
  // database combines (unless scatter.combine_database): scatter.combine_shard, kept
  // within the shards.
  std::size_t combine_shard() const { return std::min(scatter.combine_shard, shards.size() - 1); }
  CrossShardWrites cross_shard_writes = CrossShardWrites::two_phase;
  Timeouts timeouts;
  std::optional<std::size_t> catalog_shard;  // `catalog:`: the shard whose database holds the topology
  std::string catalog_dsn;                   // `catalog:` as a libpq connection string: a database of its own
  bool has_catalog() const { return catalog_shard || !catalog_dsn.empty(); }
  Moves moves;
  Reads reads = Reads::primary;  // statements outside a transaction block (SPEC §10)
  Duration max_replica_lag{1000};
  Health health;  // extension
  // Extensions beyond SPEC §2 (documented in docs/configuration.md):
  std::size_t max_client_connections = 1000;
  std::size_t max_message_size = std::size_t{1} << 30;
  int workers = 0;  // 0 = one per hardware thread
  // Named statements one backend connection holds at most (0: no limit); the least
  // recently used are closed to make room.
  std::size_t max_prepared_statements = 200;
  Scheduling scheduling = Scheduling::normal;  // the Linux scheduling policy of the proxy's threads
  std::string log_level = "info";

  const User* find_user(std::string_view name) const;
  std::optional<std::size_t> find_shard(std::string_view name) const;
};

struct ConfigError {
  int line = 0;  // 1-based YAML line; 0 when it concerns the whole file
  std::string message;
};

struct LoadResult {
  std::optional<Config> config;     // set only when errors is empty
  std::vector<ConfigError> errors;  // every problem found, in line order
};

LoadResult load_file(const std::string& path);
LoadResult load_string(std::string_view yaml);
// Built-in default (SPEC §1): listen 127.0.0.1:6432, one shard at 127.0.0.1:5432,
// metrics on 127.0.0.1:9930.
Config default_config();

// "5s", "200ms", "2m", "1h", "0"; nullopt when malformed.
std::optional<Duration> parse_duration(std::string_view text);
// "1024", "64kB", "16MB", "1GB" (binary multiples, as PostgreSQL's units); nullopt when malformed.
std::optional<std::size_t> parse_size(std::string_view text);

}  // namespace splitpoint::config
