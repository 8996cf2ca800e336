// A move's preparation: connections, its tables, the row filter of its partition, the
// fence trigger and the publication (server/cluster/move.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/cluster/move.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;

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
    // The key, and a salted distribution's salt column, must be in the replica identity
    // (a publication's row filter reads only those columns of an UPDATE or a DELETE).
    std::vector<std::string> types;
    for (const std::string& column : {key, dist_->salt ? dist_->salt->column : std::string()}) {
      if (column.empty()) continue;
      pqxx::nontransaction w(*src_);
      auto r = w.exec_params(
          "SELECT format_type(a.atttypid, NULL), c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = "
          "c.oid AND (i.indisprimary AND c.relreplident = 'd' OR i.indisreplident) AND a.attnum = ANY (i.indkey)) "
          "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid WHERE c.oid = to_regclass($1) AND a.attname = $2",
          table, column);
      if (r.empty()) break;  // not created on this shard (or without its salt column)
      const bool identity = r[0][1].as<std::string>() == "f" || r[0][2].as<bool>();
      if (!identity)
        throw Abort("table \"" + table + "\": its replica identity must include the " +
                    (column == key ? "key" : "salt") + " column \"" + column +
                    "\" (a primary key that includes it, or REPLICA IDENTITY FULL)");
      types.push_back(r[0][0].as<std::string>());
    }
    if (types.empty()) continue;
    if (dist_->salt && types.size() < 2)
      throw Abort("table \"" + table + "\" has no salt column \"" + dist_->salt->column + "\"");
    pqxx::nontransaction t(*tgt_);
    if (t.exec_params("SELECT to_regclass($1)", table)[0][0].is_null())
      throw Abort("table \"" + table + "\" does not exist on shard \"" + m_.target + "\"");
    tables_.push_back({table, key, types[0], dist_->salt ? types[1] : std::string()});
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
      // A salted distribution's: (key, bucket int4), hashed as the router hashes them.
      std::string helper = dist_->salt ? "salted_" : "hash_";
      for (char c : t.key_type) helper += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      pqxx::nontransaction w(*side);
      w.exec("CREATE TABLE IF NOT EXISTS splitpoint." + helper + " (k " + t.key_type +
             (dist_->salt ? ", b int4) PARTITION BY HASH (k, b)" : ") PARTITION BY HASH (k)"));
      helpers_[{side, t.key_type}] = w.exec("SELECT 'splitpoint." + helper + "'::regclass::oid")[0][0].as<std::string>();
    }
}

namespace {

std::string literal(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

// A salted row's bucket in SQL, as routing::Topology::bucket_of computes it: the salt
// value's hash-partition hash (its type's extended hash with HASH_PARTITION_SEED, plus
// the constant hash_combine64 adds to a first column), unsigned, modulo the buckets;
// NULL in bucket 0, and so is every key outside `salt.keys` when it lists some.
std::string Move::salt_bucket(const Table& t, const std::string& row, pqxx::connection& side) const {
  const config::Salt& salt = *dist_->salt;
  const std::string v = row + q(side, salt.column);
  const std::string& ty = t.salt_type;
  const std::string h = ty == "uuid" ? "uuid_hash_extended(" + v + ", 8816678312871386365)"
                        : ty == "smallint" || ty == "integer" || ty == "bigint"
                            ? "hashint8extended(" + v + "::int8, 8816678312871386365)"
                            : "hashtextextended(" + v + "::text, 8816678312871386365)";
  std::string b = "coalesce((((" + h + "::numeric + 5305509591434766563) % 18446744073709551616 + " +
                  "18446744073709551616) % 18446744073709551616 % " + std::to_string(salt.buckets) + ")::int4, 0)";
  if (salt.keys.empty()) return b;
  std::string keys;
  for (const std::string& k : salt.keys) keys += (keys.empty() ? "" : ", ") + literal(k) + "::" + t.key_type;
  return "CASE WHEN " + row + q(side, t.key) + " IN (" + keys + ") THEN " + b + " ELSE 0 END";
}

// The SQL condition "this row is in the moving partition", valid on `side`.
std::string Move::filter(const Table& t, const std::string& row, pqxx::connection& side) const {
  const std::string key_expr = row + q(side, t.key);
  if (dist_->method == config::Method::hash) {
    // The partition's own modulus and remainder (mixed once SPLIT PARTITION split some).
    const config::HashPartition hp = dist_->hash_partition(m_.partition);
    return "satisfies_hash_partition(" + helpers_.at({&side, t.key_type}) + "::oid, " + std::to_string(hp.modulus) +
           ", " + std::to_string(hp.remainder) + ", " + key_expr +
           (dist_->salt ? ", " + salt_bucket(t, row, side) : std::string()) + ")";
  }
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
  auto new_in = filter(t, "NEW.", *src_), old_in = filter(t, "OLD.", *src_);
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
      // (Named as the table without its schema: routing/hide_rows.cpp reads through it.)
      const std::string view = name_ + "." + side->quote_name(t.name.substr(t.name.find('.') + 1));
      w.exec("CREATE VIEW " + view + " WITH (security_invoker = true) AS SELECT * FROM " + q(*side, t.name) +
             " WHERE NOT coalesce(" + in_partition(t, *side) + ", false)");
      w.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON " + view + " TO PUBLIC");
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

}  // namespace splitpoint::server::moving
