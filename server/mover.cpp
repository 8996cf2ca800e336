// Partition moves (SPEC §9), run by the mover thread of whichever proxy claims them.
// How a partition's rows are selected, and why (docs/operations.md): a row filter on
// the shards' ordinary tables. Hash partitions use PostgreSQL's own
// satisfies_hash_partition() with the partition's own modulus and remainder (mixed once
// SPLIT PARTITION split some) against a small hash-partitioned helper table per key
// type (splitpoint.hash_<type>, no rows), so source, target, the proxy and PostgreSQL
// agree on every row; range partitions use key >= lower AND key < upper. The same
// filter selects the rows for the publication, the fence trigger, the verification,
// the cleanup and the views that hide rows a shard holds but does not own.
//
// States: planned -> copying (publication, fence trigger and views exist; the slot and
// the subscription copy and stream) -> catching_up -> cutover (the partition is held
// on every proxy, the fence refuses writes to it on the source, the target's copy is
// verified — the scans before the hold, the keys that differed or were written since
// under it — the placement flips) -> cleanup (the source's rows are deleted) -> done.
// Before the flip any failure, a cancel or a dead mover rolls everything back.
#include <spdlog/spdlog.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <future>
#include <map>
#include <optional>
#include <set>

#include "server/catalog.hpp"

namespace splitpoint::server {

namespace {

using namespace std::chrono_literals;
constexpr int kLockSpace = 0x5350;  // advisory lock key space of the fences ("SP")

struct Table {
  std::string name, key, key_type;
};

// Keys (as text) of one table of the distribution, for a comparison key by key.
using KeySet = std::set<std::string>;

struct Abort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Move {
 public:
  Move(Catalog& catalog, MoveRow row, std::string previous_owner)
      : cat_(catalog), m_(std::move(row)), previous_owner_(std::move(previous_owner)), cfg_(catalog.effective_config()),
        name_("splitpoint_m" + std::to_string(m_.id)) {}
  void run();

 private:
  void connect();
  void load_tables();
  void create_helpers();
  std::string filter(const Table& t, const std::string& key_expr, pqxx::connection& side) const;
  // filter() on the table's own key column.
  std::string in_partition(const Table& t, pqxx::connection& side) const { return filter(t, q(side, t.key), side); }
  std::int64_t partition_rows(pqxx::connection& side);
  void drop_fences();
  void delete_marks();
  void prepare();
  void start_copy();
  void wait_copied();
  void catch_up();
  bool cutover();
  void flip(std::chrono::steady_clock::time_point held_from);
  void cleanup();
  void roll_back(const std::string& state, const std::string& why);
  void drop_views();
  bool cancelled();
  void set_state(const std::string& state, bool bump, const std::string& extra = "");
  void wait_acks(std::chrono::milliseconds timeout);
  std::string fence_function(std::size_t i, bool refuse_all);
  std::optional<std::vector<KeySet>> verify_before_hold();
  std::optional<int> bucket_shift(const Table& t);
  static std::string bucket_ranges(const std::string& key, int shift, const std::vector<std::string>& buckets);
  void verify_held(std::optional<std::vector<KeySet>> keys);
  bool take_logged(std::vector<KeySet>& keys, std::size_t max);
  std::vector<KeySet> differing_keys(const std::vector<KeySet>& keys);
  using Sums = std::map<std::optional<std::string>, std::string>;
  Sums sums(pqxx::connection& side, const Table& t, const std::string& group, const std::string& and_where);
  // f(target) on another thread and f(source) on this one, at once: {source's, target's}.
  template <class F>
  auto both(F f) {
    auto target = std::async(std::launch::async, [&] { return f(*tgt_); });
    auto source = f(*src_);
    return std::pair{std::move(source), target.get()};
  }
  void delete_rows(pqxx::connection& side);
  void drop_subscription();
  void drop_publication();
  void exec(pqxx::connection& c, const std::string& sql);
  void exec_locking(const std::string& table, const std::string& sql, bool until_done);
  std::string q(pqxx::connection& c, const std::string& ident) const { return c.quote_name(ident); }

  Catalog& cat_;
  MoveRow m_;
  std::string previous_owner_;
  const config::Config cfg_;  // (with the catalog's shards)
  std::string name_;  // of the publication, slot, subscription, view schema
  const config::Distribution* dist_ = nullptr;
  std::unique_ptr<pqxx::connection> catalog_, src_, tgt_;
  std::vector<Table> tables_;
  std::map<std::pair<pqxx::connection*, std::string>, std::string> helpers_;  // (side, key type) -> oid
  std::int64_t epoch_ = 0;
};

void Move::exec(pqxx::connection& c, const std::string& sql) {
  pqxx::nontransaction w(c);
  w.exec(sql);
}

void Move::connect() {
  catalog_ = cat_.connect_catalog();
  for (const auto& d : cfg_.distributions)
    if (d.name == m_.distribution) dist_ = &d;
  auto src = cfg_.find_shard(m_.source), tgt = cfg_.find_shard(m_.target);
  if (!dist_ || !src || !tgt) throw Abort("the configuration no longer has its distribution or shards");
  if (m_.partition >= partitions_of(*dist_)) throw Abort("the distribution no longer has the partition");
  src_ = std::make_unique<pqxx::connection>(shard_dsn(cfg_, cfg_.shards[*src]));
  tgt_ = std::make_unique<pqxx::connection>(shard_dsn(cfg_, cfg_.shards[*tgt]));
  // If this proxy dies, PostgreSQL ends its statements within a second instead of
  // running them to completion (a long count on the source would hold its lock, and
  // the other proxy's roll back queues DROP TRIGGER, and every reader, behind it).
  for (auto* c : {src_.get(), tgt_.get()})
    exec(*c, "SET client_min_messages = warning; SET client_connection_check_interval = 1000");
}

// The distribution's tables that exist on the source, their key types, and the
// replica identity logical replication needs for a row filter on the key.
void Move::load_tables() {
  tables_.clear();
  for (const auto& [table, key] : dist_->tables) {
    pqxx::nontransaction w(*src_);
    auto r = w.exec_params(
        "SELECT format_type(a.atttypid, NULL), c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = "
        "c.oid AND (i.indisprimary AND c.relreplident = 'd' OR i.indisreplident) AND a.attnum = ANY (i.indkey)) "
        "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid WHERE c.oid = to_regclass($1) AND a.attname = $2",
        table, key);
    if (r.empty()) continue;  // not created on this shard
    const bool identity = r[0][1].as<std::string>() == "f" || r[0][2].as<bool>();
    if (!identity)
      throw Abort("table \"" + table + "\": its replica identity must include the key column \"" + key +
                  "\" (a primary key that includes it, or REPLICA IDENTITY FULL)");
    pqxx::nontransaction t(*tgt_);
    if (t.exec_params("SELECT to_regclass($1)", table)[0][0].is_null())
      throw Abort("table \"" + table + "\" does not exist on shard \"" + m_.target + "\"");
    tables_.push_back({table, key, r[0][0].as<std::string>()});
  }
  if (tables_.empty()) throw Abort("no table of distribution \"" + m_.distribution + "\" exists on the source");
  create_helpers();
}

// The helper tables of the key types on both sides (before any transaction is open on
// them: filter() then runs no query).
void Move::create_helpers() {
  for (auto* side : {src_.get(), tgt_.get()}) {
    pqxx::nontransaction w(*side);
    w.exec("CREATE SCHEMA IF NOT EXISTS splitpoint");
    w.exec("CREATE TABLE IF NOT EXISTS splitpoint.move_marks (move bigint PRIMARY KEY, attempt int NOT NULL, at "
           "timestamptz NOT NULL)");
    w.exec("DELETE FROM splitpoint.move_marks WHERE move = " + std::to_string(m_.id));
    // Keys the fence trigger saw written since the last check before a cutover (the
    // application's users write it, through the trigger; losing it in a crash is fine).
    w.exec("CREATE UNLOGGED TABLE IF NOT EXISTS splitpoint.move_changes (move bigint NOT NULL, tab int NOT NULL, "
           "key text)");
    w.exec("CREATE INDEX IF NOT EXISTS move_changes_move ON splitpoint.move_changes (move, tab)");
    w.exec("GRANT USAGE ON SCHEMA splitpoint TO PUBLIC");
    w.exec("GRANT INSERT ON splitpoint.move_changes TO PUBLIC");
    w.exec("DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id));
  }
  if (dist_->method != config::Method::hash) return;
  for (auto* side : {src_.get(), tgt_.get()})
    for (const auto& t : tables_) {
      std::string helper = "hash_";
      for (char c : t.key_type) helper += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      pqxx::nontransaction w(*side);
      w.exec("CREATE TABLE IF NOT EXISTS splitpoint." + helper + " (k " + t.key_type + ") PARTITION BY HASH (k)");
      helpers_[{side, t.key_type}] = w.exec("SELECT 'splitpoint." + helper + "'::regclass::oid")[0][0].as<std::string>();
    }
}

// The SQL condition "this key is in the moving partition", valid on `side`.
std::string Move::filter(const Table& t, const std::string& key_expr, pqxx::connection& side) const {
  if (dist_->method == config::Method::hash) {
    // The partition's own modulus and remainder (mixed once SPLIT PARTITION split some).
    const config::HashPartition hp = dist_->hash_partition(m_.partition);
    return "satisfies_hash_partition(" + helpers_.at({&side, t.key_type}) + "::oid, " + std::to_string(hp.modulus) +
           ", " + std::to_string(hp.remainder) + ", " + key_expr + ")";
  }
  auto literal = [](const std::string& v) {
    std::string out = "'";
    for (char c : v) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  };
  if (dist_->method == config::Method::list) {
    // The partition's values, cast to the key's type: equal as the router compares them
    // (numbers by value, text exactly). NULL is in no listed partition.
    std::string values;
    for (const std::string& v : dist_->lists[m_.partition].values)
      values += (values.empty() ? "" : ", ") + literal(v) + "::" + t.key_type;
    return values.empty() ? "false" : "(" + key_expr + " IN (" + values + "))";
  }
  std::string cond;
  const auto& ranges = dist_->ranges;
  if (m_.partition > 0 && ranges[m_.partition - 1].upto)
    cond = key_expr + " >= " + literal(*ranges[m_.partition - 1].upto) + "::" + t.key_type;
  if (ranges[m_.partition].upto)
    cond += (cond.empty() ? "" : " AND ") + key_expr + " < " + literal(*ranges[m_.partition].upto) + "::" + t.key_type;
  return cond.empty() ? "true" : "(" + cond + ")";
}

// The fence on the source: writes to the moving partition pass while they can take the
// move's advisory lock shared; the cutover takes it exclusively (waiting for every open
// transaction that wrote the partition), and after the flip the fence refuses always.
std::string Move::fence_function(std::size_t i, bool refuse_all) {
  const Table& t = tables_[i];
  const auto key = q(*src_, t.key);
  auto new_in = filter(t, "NEW." + key, *src_), old_in = filter(t, "OLD." + key, *src_);
  // With moves.verify, the keys written are logged for the check under the hold.
  const std::string log = "INSERT INTO splitpoint.move_changes VALUES (" + std::to_string(m_.id) + ", " +
                          std::to_string(i) + ", ";
  const std::string log_keys = !cfg_.moves.verify || refuse_all ? ""
                               : "    IF n THEN " + log + "NEW." + key + "::text); END IF;\n"
                                 "    IF o AND NOT (n AND NEW." + key + " IS NOT DISTINCT FROM OLD." + key + ") THEN " +
                                     log + "OLD." + key + "::text); END IF;\n";
  return "CREATE OR REPLACE FUNCTION splitpoint." + name_ + "_fence_" + std::to_string(i) +
         "() RETURNS trigger LANGUAGE plpgsql AS $f$\nDECLARE\n  n boolean;\n  o boolean;\nBEGIN\n"
         "  IF coalesce(current_setting('splitpoint.mover', true), '') = 'on' THEN\n"
         "    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;\n    RETURN NEW;\n  END IF;\n"
         "  n := TG_OP <> 'DELETE' AND coalesce(" + new_in + ", false);\n"
         "  o := TG_OP <> 'INSERT' AND coalesce(" + old_in + ", false);\n"
         "  IF n OR o THEN\n"
         "    IF " + (refuse_all ? "true" : "false") + " OR NOT pg_try_advisory_xact_lock_shared(" +
         std::to_string(kLockSpace) + ", " + std::to_string(m_.id) + ") THEN\n"
         "      RAISE EXCEPTION 'partition %:% is moving to shard %; retry', " + "'" + m_.distribution + "', " +
         std::to_string(m_.partition) + ", '" + m_.target + "' USING ERRCODE = 'SPM01';\n"
         "    END IF;\n" + log_keys + "  END IF;\n"
         "  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;\n  RETURN NEW;\nEND\n$f$";
}

void Move::prepare() {
  load_tables();
  // Leftovers of an earlier attempt on the target are not the target's rows.
  delete_rows(*tgt_);
  for (auto* side : {src_.get(), tgt_.get()}) {
    pqxx::work w(*side);
    w.exec("SET LOCAL client_min_messages = warning");
    w.exec("DROP SCHEMA IF EXISTS " + name_ + " CASCADE");
    w.exec("CREATE SCHEMA " + name_);
    w.exec("GRANT USAGE ON SCHEMA " + name_ + " TO PUBLIC");
    for (const auto& t : tables_) {
      w.exec("CREATE VIEW " + name_ + "." + q(*side, t.name) + " WITH (security_invoker = true) AS SELECT * FROM " +
             q(*side, t.name) + " WHERE NOT coalesce(" + in_partition(t, *side) + ", false)");
      w.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON " + name_ + "." + q(*side, t.name) + " TO PUBLIC");
    }
    w.commit();
  }
  std::string tables;
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    const auto& t = tables_[i];
    exec(*src_, fence_function(i, false));
    exec_locking(t.name,
                 "DROP TRIGGER IF EXISTS " + name_ + "_fence ON " + q(*src_, t.name) + "; CREATE TRIGGER " + name_ +
                     "_fence BEFORE INSERT OR UPDATE OR DELETE ON " + q(*src_, t.name) +
                     " FOR EACH ROW EXECUTE FUNCTION splitpoint." + name_ + "_fence_" + std::to_string(i) + "()",
                 false);
    tables += (i ? ", " : "") + q(*src_, t.name) + " WHERE (" + in_partition(t, *src_) + ")";
  }
  drop_publication();  // (an earlier attempt's)
  // The move's row of splitpoint.move_marks travels with the partition's rows: the
  // cutover's barrier.
  tables += ", splitpoint.move_marks WHERE (move = " + std::to_string(m_.id) + ")";
  exec(*src_, "CREATE PUBLICATION " + name_ + " FOR TABLE " + tables + " WITH (publish = 'insert, update, delete')");
}

void Move::start_copy() {
  {
    pqxx::nontransaction w(*src_);
    if (w.exec_params("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1", name_).empty())
      w.exec_params("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name_);
  }
  const auto& s = cfg_.shards[*cfg_.find_shard(m_.source)];
  pqxx::nontransaction w(*tgt_);
  if (!w.exec_params("SELECT 1 FROM pg_subscription WHERE subname = $1", name_).empty()) return;
  // (The slot exists already: a subscription to the same cluster could not create it.)
  w.exec("CREATE SUBSCRIPTION " + name_ + " CONNECTION " + w.quote(shard_dsn(cfg_, s)) + " PUBLICATION " + name_ +
         " WITH (create_slot = false, slot_name = " + w.quote(name_) + ", copy_data = true)");
}

// Until the subscription has copied every table. Progress, once a second, from the
// target's pg_stat_progress_copy (the COPY of each table's initial sync); the rows
// counted once at the end.
void Move::wait_copied() {
  std::map<std::int64_t, std::int64_t> copied;  // table's oid on the target -> rows of its COPY
  auto last_update = std::chrono::steady_clock::now() - 1h;
  for (;;) {
    if (cancelled()) throw Abort("cancelled");
    auto r = pqxx::nontransaction(*tgt_).exec_params(
        "SELECT count(*) FILTER (WHERE r.srsubstate <> 'r'), count(*), (SELECT coalesce(sum(apply_error_count + "
        "sync_error_count), 0) FROM pg_stat_subscription_stats st WHERE st.subname = $1) FROM pg_subscription_rel r "
        "JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1",
        name_);
    if (r[0][2].as<std::int64_t>() > 0) throw Abort("logical replication reported errors on the target (see its log)");
    const bool ready = r[0][0].as<std::int64_t>() == 0 && r[0][1].as<std::size_t>() == tables_.size() + 1;  // (and the marks)
    if (ready || std::chrono::steady_clock::now() - last_update > 1s) {
      std::int64_t n = 0;
      if (ready) {
        n = partition_rows(*tgt_);
      } else {
        for (const auto& row : pqxx::nontransaction(*tgt_).exec_params(
                 "SELECT p.relid::bigint, p.tuples_processed FROM pg_stat_progress_copy p JOIN pg_subscription_rel r "
                 "ON r.srrelid = p.relid JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1 AND "
                 "r.srsubstate IN ('i', 'd')",
                 name_))
          copied[row[0].as<std::int64_t>()] = row[1].as<std::int64_t>();
        for (const auto& [table, rows] : copied) n += rows;
      }
      cat_.metrics().rows_copied += static_cast<std::uint64_t>(std::max<std::int64_t>(0, n - m_.rows_copied));
      m_.rows_copied = n;
      set_state(m_.state, false);
      last_update = std::chrono::steady_clock::now();
    }
    if (ready) return;
    cat_.nap(100ms);
    if (cat_.stopping()) throw Abort("the proxy is stopping");
  }
}

void Move::catch_up() {
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    if (cancelled()) throw Abort("cancelled");
    pqxx::nontransaction w(*src_);
    auto r = w.exec_params(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE "
        "slot_name = $1",
        name_);
    m_.lag_bytes = r.empty() || r[0][0].is_null() ? 0 : r[0][0].as<std::int64_t>();
    set_state(m_.state, false);
    if (*m_.lag_bytes < (1 << 20) || std::chrono::steady_clock::now() > until) return;
    cat_.nap(100ms);
  }
}

// The partition's rows on one side, every table of the distribution.
std::int64_t Move::partition_rows(pqxx::connection& side) {
  pqxx::nontransaction w(side);
  std::int64_t n = 0;
  for (const auto& t : tables_)
    n += w.exec("SELECT count(*) FROM " + q(side, t.name) + " WHERE " + in_partition(t, side))[0][0].as<std::int64_t>();
  return n;
}

// Per group of the partition's rows of `t` on `side` (a NULL group is nullopt): their
// count and the sum of their hashes.
Move::Sums Move::sums(pqxx::connection& side, const Table& t, const std::string& group, const std::string& and_where) {
  pqxx::nontransaction w(side);
  auto r = w.exec("SELECT (" + group + ")::text, count(*) || ' ' || sum(hashtextextended(x::text, 0)) FROM " +
                  q(side, t.name) + " x WHERE " + filter(t, "x." + q(side, t.key), side) + and_where + " GROUP BY 1");
  Sums out;
  for (const auto& row : r)
    out[row[0].is_null() ? std::nullopt : std::optional(row[0].as<std::string>())] = row[1].as<std::string>();
  return out;
}

namespace {

std::vector<std::optional<std::string>> differing(const std::map<std::optional<std::string>, std::string>& a,
                                                  const std::map<std::optional<std::string>, std::string>& b) {
  std::vector<std::optional<std::string>> out;
  for (const auto& [k, v] : a)
    if (auto it = b.find(k); it == b.end() || it->second != v) out.push_back(k);
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(k);
  return out;
}

// Keys compared one by one: under the hold, and before it (where a table scan is the
// alternative, so more may be).
constexpr std::size_t kMaxKeysUnderHold = 10000;
constexpr std::size_t kMaxKeysBeforeHold = 200000;

std::size_t count(const std::vector<KeySet>& keys) {
  std::size_t n = 0;
  for (const auto& k : keys) n += k.size();
  return n;
}

}  // namespace

// Moves the keys the fence trigger logged into `keys` (the log starts again). False: a
// NULL key, or more than `max` keys in all.
bool Move::take_logged(std::vector<KeySet>& keys, std::size_t max) {
  pqxx::nontransaction w(*src_);
  for (const auto& row : w.exec("DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id) +
                                " RETURNING tab, key")) {
    const auto tab = row[0].as<std::size_t>();
    if (row[1].is_null() || tab >= keys.size()) return false;
    keys[tab].insert(row[1].as<std::string>());
  }
  return count(keys) <= max;
}

// Of `keys`, those whose rows differ between the two sides (both compared at once; an
// index lookup per key where the key column has an index).
std::vector<KeySet> Move::differing_keys(const std::vector<KeySet>& keys) {
  std::vector<KeySet> out(tables_.size());
  for (std::size_t i = 0; i < tables_.size() && i < keys.size(); ++i) {
    if (keys[i].empty()) continue;
    const auto& t = tables_[i];
    std::string array;
    for (const auto& k : keys[i]) {
      array += array.empty() ? "{\"" : ",\"";
      for (char c : k) array += c == '"' || c == '\\' ? std::string{'\\', c} : std::string(1, c);
      array += '"';
    }
    array += '}';
    auto sides = both([&](pqxx::connection& side) {
      return sums(side, t, "x." + q(side, t.key),
                  " AND x." + q(side, t.key) + " = ANY (" + side.quote(array) + "::" + t.key_type + "[])");
    });
    for (const auto& k : differing(sides.first, sides.second)) out[i].insert(*k);  // (no NULL among them)
  }
  return out;
}

// Buckets of keys for the scans before the hold. An integer key that a btree index on
// the source leads with is bucketed by its high bits (key >> shift, about 1024 buckets
// from the smallest key to the largest): a bucket is then a key range, which the index
// finds, so the second look, at the buckets that differ, reads only those. nullopt:
// any other key, bucketed by a hash of its text; that look scans the table again.
std::optional<int> Move::bucket_shift(const Table& t) {
  if (t.key_type != "bigint" && t.key_type != "integer" && t.key_type != "smallint") return std::nullopt;
  pqxx::nontransaction w(*src_);
  auto r = w.exec_params(
      "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam JOIN "
      "pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = to_regclass($1) AND "
      "a.attname = $2 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indisvalid LIMIT 1",
      t.name, t.key);
  if (r.empty()) return std::nullopt;
  auto range = w.exec("SELECT min(" + q(*src_, t.key) + ")::bigint, max(" + q(*src_, t.key) + ")::bigint FROM " +
                      q(*src_, t.name));
  if (range[0][0].is_null()) return std::nullopt;
  const auto lo = range[0][0].as<std::int64_t>(), hi = range[0][1].as<std::int64_t>();
  int shift = 0;
  while ((hi >> shift) - static_cast<__int128>(lo >> shift) >= 1024) ++shift;
  return shift;
}

// The condition "in one of `buckets`" (key >> shift), as key ranges (adjacent buckets
// joined) that an index scan reads.
std::string Move::bucket_ranges(const std::string& key, int shift, const std::vector<std::string>& buckets) {
  std::vector<std::int64_t> b;
  for (const auto& s : buckets) b.push_back(std::stoll(s));
  std::sort(b.begin(), b.end());
  auto bound = [&](__int128 v) {
    v = std::clamp<__int128>(v, INT64_MIN, INT64_MAX);
    return std::to_string(static_cast<std::int64_t>(v)) + "::bigint";
  };
  std::string out;
  for (std::size_t i = 0; i < b.size();) {
    std::size_t j = i;
    while (j + 1 < b.size() && b[j + 1] == b[j] + 1) ++j;
    const __int128 unit = static_cast<__int128>(1) << shift;
    out += std::string(out.empty() ? "" : " OR ") + "(" + key + " >= " + bound(b[i] * unit) + " AND " + key +
           " <= " + bound((b[j] + static_cast<__int128>(1)) * unit - 1) + ")";
    i = j + 1;
  }
  return " AND (" + out + ")";
}

// Before a cutover attempt (moves.verify), VDiff-style but with the scans outside the
// hold. The partition's rows on both sides, at once, per bucket of keys (bucket_shift),
// then key by key in the buckets that differ. Writes go on
// meanwhile (the fence trigger logs their keys from the start), so a key that differs
// may be lagging: those keys and the logged ones are compared again, key by key (a few
// rounds, each with the keys written during the one before), and what still differs is
// left for the hold, with the keys written since. nullopt: too many keys, or a NULL
// key; the hold compares every row.
std::optional<std::vector<KeySet>> Move::verify_before_hold() {
  exec(*src_, "DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id));
  using Clock = std::chrono::steady_clock;
  Clock::duration scans{};
  std::size_t buckets_differing = 0;
  std::vector<KeySet> suspects(tables_.size());
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    const auto started = Clock::now();
    const auto& t = tables_[i];
    const std::string key = "x." + q(*src_, t.key);
    const auto shift = bucket_shift(t);
    const std::string bucket = shift ? key + " >> " + std::to_string(*shift) : "hashtextextended(" + key + "::text, 0) & 1023";
    auto buckets = both([&](pqxx::connection& side) { return sums(side, t, bucket, ""); });
    std::vector<std::string> differ;
    for (const auto& b : differing(buckets.first, buckets.second)) {
      if (!b) return std::nullopt;
      differ.push_back(*b);
    }
    buckets_differing += differ.size();
    if (!differ.empty()) {
      std::string in;
      if (shift) {
        in = bucket_ranges(key, *shift, differ);
      } else {
        for (const auto& b : differ) in += (in.empty() ? "" : ", ") + b;
        in = " AND (" + bucket + ") IN (" + in + ")";
      }
      auto keys = both([&](pqxx::connection& side) { return sums(side, t, key, in); });
      for (const auto& k : differing(keys.first, keys.second)) {
        if (!k) return std::nullopt;
        suspects[i].insert(*k);
      }
    }
    scans += Clock::now() - started;
  }
  // Each round compares the keys written during the one before: fewer, and faster.
  const auto started = Clock::now();
  int round = 0;
  while (round < 4) {
    if (!take_logged(suspects, kMaxKeysBeforeHold)) return std::nullopt;
    const bool few = count(suspects) <= 100;
    suspects = differing_keys(suspects);
    ++round;
    if (few) break;
  }
  const auto rounds = Clock::now() - started;
  auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  spdlog::info("move {}: checked before the hold: {} ms of scans ({} buckets differed), {} rounds over written keys in "
               "{} ms, {} keys left",
               m_.id, ms(scans), buckets_differing, round, ms(rounds), count(suspects));
  return suspects;
}

// Under the hold, the target caught up: the same rows on both sides, or the move fails.
void Move::verify_held(std::optional<std::vector<KeySet>> keys) {
  if (keys && !take_logged(*keys, kMaxKeysUnderHold)) keys.reset();
  bool same = true;
  if (keys) {
    same = count(differing_keys(*keys)) == 0;
  } else {
    for (std::size_t i = 0; same && i < tables_.size(); ++i) {  // (one group: the whole partition)
      auto sides = both([&](pqxx::connection& side) { return sums(side, tables_[i], "0", ""); });
      same = sides.first == sides.second;
    }
  }
  if (!same) throw Abort("verification failed: the target's rows differ from the source's");
  if (keys) spdlog::info("move {}: verified: {} keys compared under the hold", m_.id, count(*keys));
  else spdlog::info("move {}: verified: every row compared under the hold", m_.id);
}

// One attempt: false when it had to give up (the partition is released, writes go on
// on the source, and the move tries again).
bool Move::cutover() {
  std::optional<std::vector<KeySet>> suspects;
  if (cfg_.moves.verify) suspects = verify_before_hold();
  ++m_.attempts;
  set_state("cutover", true);
  const auto held_from = std::chrono::steady_clock::now();
  const auto hold = cfg_.moves.max_hold;
  auto give_up = [&](const std::string& why) {
    spdlog::warn("move {}: cutover attempt {} given up: {}", m_.id, m_.attempts, why);
    try {  // (a lock that timed out left the session's lock_timeout set: the cleanup must wait, not fail)
      exec(*src_, "SET lock_timeout = 0");
      exec(*src_, "SELECT pg_advisory_unlock_all()");
    } catch (const std::exception&) {
    }
    set_state("catching_up", true);
    return false;
  };
  if (!cat_.wait_for_acks(*catalog_, epoch_, hold / 3)) return give_up("not every proxy holds the partition yet");
  // A statement routed just before its proxy took the epoch may still be on its way to
  // the source: a moment for it to arrive and take the fence's lock shared (then the
  // lock below waits for it instead of the fence refusing it).
  cat_.nap(50ms);
  try {
    exec(*src_, "SET lock_timeout = " + std::to_string(std::max<long long>(1, hold.count() / 3)));
    exec(*src_, "SELECT pg_advisory_lock(" + std::to_string(kLockSpace) + ", " + std::to_string(m_.id) + ")");
    exec(*src_, "SET lock_timeout = 0");
  } catch (const pqxx::sql_error& e) {
    return give_up(std::string("open transactions on the partition: ") + e.what());
  }
  const auto locked = std::chrono::steady_clock::now();
  // Writes to the partition are fenced. A mark committed on the source now (with
  // synchronous_commit on, so the WAL goes out at once) reaches the target after every
  // earlier commit: when it is there, the target has caught up.
  const std::string mark = std::to_string(m_.id) + ", " + std::to_string(m_.attempts);
  exec(*src_, "BEGIN; SET LOCAL synchronous_commit = on; INSERT INTO splitpoint.move_marks VALUES (" + mark +
                  ", now()) ON CONFLICT (move) DO UPDATE SET attempt = excluded.attempt, at = excluded.at; COMMIT");
  for (;;) {
    pqxx::nontransaction w(*tgt_);
    if (!w.exec("SELECT 1 FROM splitpoint.move_marks WHERE (move, attempt) = (" + mark + ")").empty()) break;
    if (std::chrono::steady_clock::now() - held_from > hold * 4 / 5) return give_up("the target did not catch up in time");
    cat_.nap(1ms);
  }
  // Then the same rows on both sides; a difference now is a failed copy, not lag.
  if (cfg_.moves.verify) verify_held(suspects);
  const auto verified = std::chrono::steady_clock::now();
  flip(held_from);
  auto ms = [](auto a, auto b) { return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count(); };
  spdlog::info("move {}: cutover: {} ms to hold and lock, {} ms to catch up and verify, {} ms to flip", m_.id, ms(held_from, locked),
               ms(locked, verified), ms(verified, std::chrono::steady_clock::now()));
  return true;
}

void Move::flip(std::chrono::steady_clock::time_point held_from) {
  for (std::size_t i = 0; i < tables_.size(); ++i) exec(*src_, fence_function(i, true));
  set_state("cleanup", true,
            "UPDATE splitpoint.placement SET shard = " + catalog_->quote(m_.target) + " WHERE distribution = " +
                catalog_->quote(m_.distribution) + " AND partition = " + std::to_string(m_.partition));
  // (Held statements go on as each proxy reads the new epoch, a NOTIFY away.)
  m_.hold_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - held_from).count();
  set_state("cleanup", false);
  exec(*src_, "SELECT pg_advisory_unlock_all()");
  drop_subscription();  // (the fence refuses every write it could still bring)
  cat_.metrics().cutover_hold.observe(static_cast<double>(*m_.hold_ms) / 1000.0);
  spdlog::info("move {}: {}:{} now on {} (held {} ms)", m_.id, m_.distribution, m_.partition, m_.target, *m_.hold_ms);
}

// The partition's rows of every table on `side`, deleted a range of pages at a time (a
// TID range scan each: one pass over the table in all, and no long transaction), then
// the pages added since the start. After each range a pause as long as the range took:
// the rows are hidden or not yet owned, so this is not urgent, and leaves the cores to
// the application half the time.
void Move::delete_rows(pqxx::connection& side) {
  constexpr std::int64_t kPages = 1024;
  for (const auto& t : tables_) {
    const auto pages = pqxx::nontransaction(side)
                           .exec_params("SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::bigint",
                                        t.name)[0][0]
                           .as<std::int64_t>();
    auto tid = [](std::int64_t page) { return "'(" + std::to_string(page) + ",0)'::tid"; };
    for (std::int64_t from = 0;; from += kPages) {
      const bool last = from + kPages > pages;
      const std::string where = in_partition(t, side) + " AND ctid >= " + tid(from) +
                                (last ? "" : " AND ctid < " + tid(from + kPages));
      const auto started = std::chrono::steady_clock::now();
      pqxx::work w(side);
      w.exec("SET LOCAL splitpoint.mover = 'on'");
      w.exec("DELETE FROM " + q(side, t.name) + " WHERE " + where);
      w.commit();
      if (last) break;
      cat_.nap(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started));
    }
  }
}

void Move::cleanup() {
  drop_subscription();              // (already gone unless the mover stopped just after the flip)
  wait_acks(cfg_.moves.lease * 2);  // nobody routes the partition to the source any more
  // A grace period for transactions that began before the flip and still route by the
  // old placement: the fence refuses their writes to the partition until the rows go.
  cat_.nap(cfg_.moves.lease);
  delete_rows(*src_);
  drop_fences();
  drop_publication();
  delete_marks();
  set_state("done", true);
  drop_views();
}

// Once no proxy reads through the move's views: every live one runs the epoch without
// them, and a statement routed just before it (waiting for a backend, say) had a lease's
// time to be sent. In the background, so the next move need not wait.
void Move::drop_views() {
  wait_acks(cfg_.moves.lease * 2);
  cat_.drop_later({shard_dsn(cfg_, cfg_.shards[*cfg_.find_shard(m_.source)]),
                   shard_dsn(cfg_, cfg_.shards[*cfg_.find_shard(m_.target)])},
                  name_);
}

// The application's tables leave the publication first, then it goes: a write that
// looked the publication up just before a plain DROP PUBLICATION can fail with "cache
// lookup failed for publication" (XX000, seen under load).
void Move::drop_publication() {
  pqxx::nontransaction w(*src_);
  if (w.exec_params("SELECT 1 FROM pg_publication WHERE pubname = $1", name_).empty()) return;
  w.exec("ALTER PUBLICATION " + name_ + " SET TABLE splitpoint.move_marks");
  // A write that read the table's publications before the ALTER may look this one up
  // after a DROP right behind it (seen once more under load, test_split_range): a moment
  // for such writes to finish.
  cat_.nap(500ms);
  w.exec("DROP PUBLICATION " + name_);
}

void Move::drop_subscription() {
  pqxx::nontransaction w(*tgt_);
  if (!w.exec_params("SELECT 1 FROM pg_subscription WHERE subname = $1", name_).empty()) {
    try {
      w.exec("DROP SUBSCRIPTION " + name_);  // drops the slot on the source too
    } catch (const pqxx::sql_error&) {  // the source is unreachable: keep its slot for later
      w.exec("ALTER SUBSCRIPTION " + name_ + " DISABLE");
      w.exec("ALTER SUBSCRIPTION " + name_ + " SET (slot_name = NONE)");
      w.exec("DROP SUBSCRIPTION " + name_);
    }
  }
  for (int attempt = 0; attempt < 50; ++attempt) {  // (a walsender may still be letting go)
    try {
      pqxx::nontransaction s(*src_);
      s.exec_params("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                    name_);
      return;
    } catch (const pqxx::sql_error&) {
      cat_.nap(100ms);
    }
  }
}

// `sql` (one transaction on the source) takes a lock on `table` that its writers wait
// for (CREATE and DROP TRIGGER), and while it waits every statement on the table waits
// behind it: so it waits half a second at a time, 20 times, then fails (55P03) or, with
// `until_done`, waits as long as it takes. An autovacuum of the table holds a
// conflicting lock and gives it up to a waiter of deadlock_timeout: once one is seen,
// the attempts wait that long.
void Move::exec_locking(const std::string& table, const std::string& sql, bool until_done) {
  std::int64_t timeout_ms = 500;
  for (int attempt = 0;; ++attempt) {
    const bool last = attempt >= 19;
    try {
      pqxx::work w(*src_);
      w.exec("SET LOCAL lock_timeout = " + std::to_string(last && until_done ? 0 : timeout_ms));
      w.exec(sql);
      w.commit();
      return;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "55P03" || (last && !until_done) || cat_.stopping()) throw;  // (lock_not_available)
    }
    auto r = pqxx::nontransaction(*src_).exec_params(
        "SELECT (extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000)::bigint + 500 FROM "
        "pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.relation = to_regclass($1) AND l.granted AND "
        "a.backend_type = 'autovacuum worker' LIMIT 1",
        table);
    if (!r.empty()) {
      if (timeout_ms != r[0][0].as<std::int64_t>()) spdlog::info("move {}: an autovacuum of {} is in the way", m_.id, table);
      timeout_ms = r[0][0].as<std::int64_t>();
    }
    cat_.nap(200ms);
  }
}

void Move::drop_fences() {
  for (std::size_t i = 0; i < tables_.size(); ++i) {
    exec_locking(tables_[i].name, "DROP TRIGGER IF EXISTS " + name_ + "_fence ON " + q(*src_, tables_[i].name), true);
    exec(*src_, "DROP FUNCTION IF EXISTS splitpoint." + name_ + "_fence_" + std::to_string(i) + "()");
  }
}

void Move::delete_marks() {
  for (auto* side : {src_.get(), tgt_.get()})
    exec(*side, "DELETE FROM splitpoint.move_marks WHERE move = " + std::to_string(m_.id) +
                    "; DELETE FROM splitpoint.move_changes WHERE move = " + std::to_string(m_.id));
}

// Before the flip: the source still owns every row, so undo everything else.
void Move::roll_back(const std::string& state, const std::string& why) {
  spdlog::warn("move {}: rolling back ({})", m_.id, why);
  m_.error = why;
  try {
    exec(*src_, "SELECT pg_advisory_unlock_all()");
  } catch (const std::exception&) {
  }
  drop_subscription();
  drop_publication();
  drop_fences();
  delete_rows(*tgt_);
  delete_marks();
  set_state(state, true);
  drop_views();
}

bool Move::cancelled() {
  pqxx::nontransaction w(*catalog_);
  return w.exec_params("SELECT cancel FROM splitpoint.moves WHERE id = $1", m_.id)[0][0].as<bool>();
}

void Move::set_state(const std::string& state, bool bump, const std::string& extra) {
  if (state != m_.state) spdlog::info("move {}: {}", m_.id, state);
  m_.state = state;
  auto epoch = cat_.update_move(*catalog_, m_, bump, extra);
  if (bump) epoch_ = epoch;
}

void Move::wait_acks(std::chrono::milliseconds timeout) {
  if (!cat_.wait_for_acks(*catalog_, epoch_, timeout)) spdlog::warn("move {}: a live proxy did not acknowledge epoch {}", m_.id, epoch_);
}

void Move::run() {
  connect();
  if (m_.state == "cleanup") {
    load_tables();
    cleanup();
    return;
  }
  try {
    if (m_.state != "planned") {
      load_tables();
      throw Abort("its mover (proxy " + previous_owner_ + ") stopped during " + m_.state);
    }
    prepare();
    m_.rows_total = partition_rows(*src_);
    set_state("copying", true);
    if (!cat_.wait_for_acks(*catalog_, epoch_, cfg_.moves.lease * 2))
      throw Abort("a live proxy did not acknowledge the move");
    start_copy();
    wait_copied();
    set_state("catching_up", false);
    for (;;) {
      catch_up();
      if (cutover()) break;
      if (m_.attempts >= 5) throw Abort("cutover failed " + std::to_string(m_.attempts) + " times");
      cat_.nap(500ms);
    }
  } catch (const std::exception& e) {
    const std::string why = e.what();
    if (m_.state == "cleanup") throw;  // flipped: the target owns the rows, cleanup is retried
    roll_back(why == "cancelled" ? "cancelled" : "failed", why == "cancelled" ? "" : why);
    return;
  }
  cleanup();
}

}  // namespace

void Catalog::drop_later(std::vector<std::string> dsns, std::string schema) {
  std::lock_guard lock(droppers_mu_);
  droppers_.emplace_back([this, dsns = std::move(dsns), schema = std::move(schema)] {
    nap(config_.moves.lease);
    if (stop_) return;  // (the next start's sweep drops it)
    for (const auto& dsn : dsns) {
      try {
        pqxx::connection c(dsn);
        pqxx::nontransaction w(c);
        w.exec("SET client_min_messages = warning");
        w.exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
      } catch (const std::exception& e) {
        spdlog::warn("catalog: cannot drop {} yet: {}", schema, e.what());
      }
    }
  });
}

// View schemas of moves finished a while ago that a stopped proxy left behind (its
// drop_later did not run).
void Catalog::sweep_views() {
  auto config = effective_config();
  auto c = connect_catalog();
  pqxx::nontransaction w(*c);
  auto done = w.exec_params("SELECT 'splitpoint_m' || id FROM splitpoint.moves WHERE state IN ('done', 'failed', "
                     "'cancelled') AND updated < now() - $1::int * interval '1 millisecond'",
                            static_cast<int>(config_.moves.lease.count() * 2));
  std::set<std::string> finished;
  for (const auto& r : done) finished.insert(r[0].as<std::string>());
  for (const auto& s : config.shards) {
    try {
      pqxx::connection sc(shard_dsn(config, s));
      pqxx::nontransaction sw(sc);
      for (const auto& r : sw.exec("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'splitpoint\\_m%'"))
        if (finished.count(r[0].as<std::string>())) {
          sw.exec("SET client_min_messages = warning");
          sw.exec("DROP SCHEMA IF EXISTS " + r[0].as<std::string>() + " CASCADE");
        }
    } catch (const std::exception& e) {
      spdlog::warn("catalog: view sweep on shard {}: {}", s.name, e.what());
    }
  }
}

void Catalog::mover_loop() {
  std::unique_ptr<pqxx::connection> c;
  auto swept = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!stop_) {
    if (std::chrono::steady_clock::now() - swept > config_.moves.lease * 3) {  // (when idle)
      swept = std::chrono::steady_clock::now();
      try {
        sweep_views();
      } catch (const std::exception& e) {
        spdlog::warn("catalog: view sweep: {}", e.what());
      }
    }
    try {
      if (!c) c = connect_catalog();
      pqxx::work w(*c);
      auto r = w.exec_params(
          "WITH c AS (SELECT id, owner AS previous FROM splitpoint.moves m WHERE state NOT IN ('done', 'failed', "
          "'cancelled') AND (owner IS NULL OR owner = $1 OR NOT EXISTS (SELECT 1 FROM splitpoint.proxies p WHERE p.id "
          "= m.owner AND p.lease_until > now())) AND NOT EXISTS (SELECT 1 FROM splitpoint.moves o WHERE o.distribution = "
          "m.distribution AND o.id < m.id AND o.state NOT IN ('done', 'failed', 'cancelled')) "
          "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
          "UPDATE splitpoint.moves m SET owner = $1 FROM c WHERE m.id = c.id RETURNING m.id, m.distribution, "
          "m.partition, m.source, m.target, m.state, m.owner, m.error, m.rows_copied, m.lag_bytes, m.hold_ms, "
          "m.attempts, coalesce(c.previous, ''), (SELECT epoch FROM splitpoint.topology)",
          proxy_id_);
      w.commit();
      // A proxy behind the catalog's epoch would move by ranges a SPLIT/MERGE RANGE has
      // changed since: the move waits (claimed) until this proxy has caught up.
      if (r.empty() || r[0][13].as<std::int64_t>() > epoch()) {
        nap(config_.moves.poll);
        continue;
      }
      MoveRow m;
      m.id = r[0][0].as<std::int64_t>();
      m.distribution = r[0][1].as<std::string>();
      m.partition = r[0][2].as<std::uint32_t>();
      m.source = r[0][3].as<std::string>();
      m.target = r[0][4].as<std::string>();
      m.state = r[0][5].as<std::string>();
      m.rows_copied = r[0][8].as<std::int64_t>();
      m.attempts = r[0][11].as<int>();
      spdlog::info("move {}: {}:{} from {} to {}, state {}", m.id, m.distribution, m.partition, m.source, m.target,
                   m.state);
      Move(*this, m, r[0][12].as<std::string>()).run();
    } catch (const std::exception& e) {
      spdlog::warn("mover: {}", e.what());
      c.reset();
      nap(config_.moves.poll * 4);
    }
  }
}

}  // namespace splitpoint::server
