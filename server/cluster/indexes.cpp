// Global secondary indexes' builder (server/cluster/indexes.hpp).
#include "server/cluster/indexes.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <pqxx/pqxx>

#include "routing/topology.hpp"
#include "server/cluster/catalog.hpp"
#include "server/cluster/proxy.hpp"

namespace splitpoint::server {

namespace {

std::string ident(const std::string& s) { return "\"" + s + "\""; }

// The table as SQL: schema.name from the config's "schema.name" or "name".
std::string table_sql(const std::string& table) {
  const auto dot = table.find('.');
  return dot == std::string::npos ? ident(table) : ident(table.substr(0, dot)) + "." + ident(table.substr(dot + 1));
}

std::string trigger_name(const config::Index& ix) { return "splitpoint_" + ix.name; }

// The row trigger's function: each change of an indexed column or of the key, as text,
// in the change log under the writing transaction's id.
std::string trigger_function(const config::Index& ix) {
  auto vals = [&](const char* row) {
    std::string out = "ARRAY[";
    for (const auto& c : ix.columns) out += std::string(row) + "." + ident(c) + "::text, ";
    return out + row + "." + ident(ix.key_column) + "::text]";
  };
  auto tuple = [&](const char* row) {
    std::string out = "(";
    for (const auto& c : ix.columns) out += std::string(row) + "." + ident(c) + ", ";
    return out + row + "." + ident(ix.key_column) + ")";
  };
  const std::string log = "INSERT INTO splitpoint.index_changes (index_name, op, vals) VALUES ('" + ix.name + "', ";
  return "CREATE OR REPLACE FUNCTION splitpoint." + ident(ix.name + "_changes") +
         "() RETURNS trigger LANGUAGE plpgsql AS $splitpoint$\nBEGIN\n"
         "  IF TG_OP = 'INSERT' THEN\n    " + log + "'i', " + vals("NEW") + ");\n"
         "  ELSIF TG_OP = 'DELETE' THEN\n    " + log + "'d', " + vals("OLD") + ");\n"
         "  ELSIF " + tuple("OLD") + " IS DISTINCT FROM " + tuple("NEW") + " THEN\n    " +
         log + "'d', " + vals("OLD") + ");\n    " + log + "'i', " + vals("NEW") + ");\n"
         "  END IF;\n  RETURN NULL;\nEND\n$splitpoint$";
}

}  // namespace

std::string_view IndexKeeper::state_name(State s) {
  switch (s) {
    case State::absent: return "absent";
    case State::building: return "building";
    case State::ready: return "ready";
    case State::failed: return "failed";
  }
  return "?";
}

void IndexKeeper::start() {
  if (proxy_.runtime()->config.indexes.empty()) return;
  thread_ = std::thread([this] { loop(); });
}

void IndexKeeper::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool IndexKeeper::ready(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = status_.find(name);
  return it != status_.end() && it->second.state == State::ready && it->second.checked == generation_;
}

void IndexKeeper::recheck() {
  {
    std::lock_guard lock(mu_);
    recheck_ = true;
    ++generation_;
  }
  wake_.notify_all();
}

std::vector<IndexKeeper::Status> IndexKeeper::statuses() const {
  std::lock_guard lock(mu_);
  std::vector<Status> out;
  for (const auto& ix : proxy_.runtime()->config.indexes) {
    auto it = status_.find(ix.name);
    Status st = it != status_.end() ? it->second : Status{};
    st.current = st.checked == generation_;
    st.name = ix.name;
    st.table = ix.table;
    out.push_back(std::move(st));
  }
  return out;
}

void IndexKeeper::loop() {
  while (true) {
    bool settled = false;
    try {
      settled = pass();
    } catch (const std::exception& e) {
      spdlog::warn("indexes: {}", e.what());
    }
    std::unique_lock lock(mu_);
    // Not settled: soon again. Settled: now and then (a shard's table made again
    // behind the proxy's back), or at once after DDL through the proxy.
    wake_.wait_for(lock, settled ? std::chrono::seconds(5) : std::chrono::milliseconds(200),
                   [&] { return stop_ || recheck_; });
    if (stop_) return;
    recheck_ = false;
  }
}

bool IndexKeeper::pass() {
  const auto rt = proxy_.runtime();
  const config::Config& cfg = rt->config;
  bool settled = true;
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    generation = generation_;
  }
  for (std::size_t s = 0; s < cfg.shards.size() && s < kShards; ++s) {
    if (logs_[s].load(std::memory_order_acquire)) continue;
    pqxx::connection c(shard_dsn(cfg, cfg.shards[s]));
    pqxx::work w(c);
    w.exec("CREATE SCHEMA IF NOT EXISTS splitpoint");
    w.exec("CREATE TABLE IF NOT EXISTS splitpoint.index_changes (txid bigint NOT NULL DEFAULT txid_current(), "
           "index_name text NOT NULL, op \"char\" NOT NULL, vals text[] NOT NULL)");
    w.exec("CREATE INDEX IF NOT EXISTS index_changes_txid ON splitpoint.index_changes (txid)");
    w.commit();
    logs_[s].store(true, std::memory_order_release);
  }
  for (const config::Index& ix : cfg.indexes) {
    Status st;
    {
      std::lock_guard lock(mu_);
      st = status_[ix.name];
    }
    // The table on every shard, and whether the trigger is there.
    std::vector<std::uint32_t> oids;
    bool triggers = true, built = true;
    std::string missing;
    for (const auto& shard : cfg.shards) {
      pqxx::connection c(shard_dsn(cfg, shard));
      pqxx::nontransaction w(c);
      // (The trigger's comment says the build finished: a proxy started again adopts it.)
      auto r = w.exec("SELECT c.oid, t.oid IS NOT NULL, pg_catalog.obj_description(t.oid, 'pg_trigger') = 'built' "
                      "FROM (SELECT to_regclass(" + w.quote(table_sql(ix.table)) + ")::oid AS oid) c "
                      "LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = c.oid AND t.tgname = " +
                      w.quote(trigger_name(ix)));
      if (r.empty() || r[0][0].is_null()) {
        missing += (missing.empty() ? "" : ", ") + shard.name;
        continue;
      }
      oids.push_back(r[0][0].as<std::uint32_t>());
      triggers = triggers && r[0][1].as<bool>();
      built = built && !r[0][2].is_null() && r[0][2].as<bool>();
    }
    if (!missing.empty()) {
      st.state = State::absent;
      st.detail = "table \"" + ix.table + "\" missing on shard(s) " + missing;
      st.oids.clear();
      settled = false;
    } else if (st.oids.empty() && st.state == State::absent && triggers && built) {
      st.state = State::ready;  // built before this proxy started
      st.detail = "built earlier";
      st.oids = std::move(oids);
    } else if (st.oids != oids || (!triggers && st.state != State::failed) || st.state == State::absent) {
      st.state = State::building;
      st.detail.clear();
      {
        std::lock_guard lock(mu_);
        status_[ix.name] = st;
      }
      try {
        build(cfg, ix, st);
      } catch (const std::exception& e) {
        st.state = State::absent;  // (tried again on the next pass)
        st.detail = std::string("build interrupted: ") + e.what();
        settled = false;
      }
      st.oids = std::move(oids);
      if (st.state != State::ready && st.state != State::failed) st.oids.clear();
      spdlog::info("index {}: {} {}", ix.name, state_name(st.state), st.detail);
    }
    st.checked = generation;
    std::lock_guard lock(mu_);
    status_[ix.name] = st;
  }
  // Changes no session will take: logged by transactions that have ended without a
  // session of the proxy taking them (writes that bypassed it, partitions a move
  // copied or cleaned up).
  if (settled)
    for (std::size_t s = 0; s < cfg.shards.size() && s < kShards; ++s) {
      pqxx::connection c(shard_dsn(cfg, cfg.shards[s]));
      pqxx::nontransaction w(c);
      w.exec("DELETE FROM splitpoint.index_changes WHERE txid < txid_snapshot_xmin(txid_current_snapshot())");
    }
  return settled;
}

namespace {

using ShardConnections = std::vector<std::unique_ptr<pqxx::connection>>;

// The indexed columns' and the key's types, as the table declares them (the entries
// compare as the table's own columns do); nullopt and `why` when one is missing.
std::optional<std::vector<std::string>> column_types(pqxx::connection& c, const config::Index& ix, std::string& why) {
  pqxx::nontransaction w(c);
  std::vector<std::string> cols = ix.columns, types;
  cols.push_back(ix.key_column);
  for (const auto& col : cols) {
    auto r = w.exec("SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute WHERE attrelid = " +
                    w.quote(table_sql(ix.table)) + "::regclass AND attname = " + w.quote(col) + " AND NOT attisdropped");
    if (r.empty()) {
      why = "table \"" + ix.table + "\" has no column \"" + col + "\"";
      return std::nullopt;
    }
    types.push_back(r[0][0].as<std::string>());
  }
  return types;
}

std::string entries_sql(const config::Index& ix) { return "splitpoint." + ident(ix.name + "_entries"); }

// "email", "id": the entries' columns.
std::string entry_columns(const config::Index& ix) {
  std::string out;
  for (const auto& c : ix.columns) out += ident(c) + ", ";
  return out + ident(ix.key_column);
}

// The entries (made if missing) emptied, then the trigger on every shard, its comment
// cleared (not built yet).
void install(ShardConnections& conns, const config::Index& ix, const std::vector<std::string>& types) {
  std::string definition, pkey;
  for (std::size_t i = 0; i < ix.columns.size(); ++i) {
    definition += ident(ix.columns[i]) + " " + types[i] + " NOT NULL, ";
    pkey += (i ? ", " : "") + ident(ix.columns[i]);
  }
  definition += ident(ix.key_column) + " " + types.back() + " NOT NULL";
  if (!ix.unique) pkey += ", " + ident(ix.key_column);
  for (auto& c : conns) {
    pqxx::work w(*c);
    w.exec("SET LOCAL lock_timeout = '5s'");
    w.exec("CREATE TABLE IF NOT EXISTS " + entries_sql(ix) + " (" + definition + ", CONSTRAINT " + ident(ix.name) +
           " PRIMARY KEY (" + pkey + "))");
    w.exec("TRUNCATE " + entries_sql(ix));
    w.commit();
  }
  for (auto& c : conns) {
    pqxx::work w(*c);
    w.exec("SET LOCAL lock_timeout = '5s'");
    w.exec(trigger_function(ix));
    w.exec("CREATE OR REPLACE TRIGGER " + ident(trigger_name(ix)) + " AFTER INSERT OR UPDATE OR DELETE ON " +
           table_sql(ix.table) + " FOR EACH ROW EXECUTE FUNCTION splitpoint." + ident(ix.name + "_changes") + "()");
    w.exec("COMMENT ON TRIGGER " + ident(trigger_name(ix)) + " ON " + table_sql(ix.table) + " IS NULL");
    w.commit();
  }
}

// Values of `rows` (VALUES tuples of the entries, on shard `t`) claimed by another row
// already: at most 5, as text.
std::string duplicates(pqxx::work& w, const config::Index& ix, const std::string& rows) {
  std::string on, named;
  for (const auto& c : ix.columns) on += (on.empty() ? "" : " AND ") + ("e." + ident(c) + " = v." + ident(c));
  auto dup = w.exec("SELECT v." + ident(ix.columns.front()) + "::text FROM (VALUES " + rows + ") AS v(" +
                    entry_columns(ix) + ") JOIN " + entries_sql(ix) + " e ON " + on + " WHERE e." +
                    ident(ix.key_column) + "::text <> v." + ident(ix.key_column) + " LIMIT 5");
  for (const auto& d : dup) named += (named.empty() ? "" : ", ") + d[0].as<std::string>();
  return named;
}

}  // namespace

void IndexKeeper::remove(const config::Config& cfg, const config::Index& ix) {
  for (const auto& shard : cfg.shards) {
    pqxx::connection c(shard_dsn(cfg, shard));
    pqxx::work w(c);
    w.exec("SET LOCAL lock_timeout = '5s'");
    if (!w.exec("SELECT to_regclass(" + w.quote(table_sql(ix.table)) + ")").front()[0].is_null())
      w.exec("DROP TRIGGER IF EXISTS " + ident(trigger_name(ix)) + " ON " + table_sql(ix.table));
    w.exec("DROP FUNCTION IF EXISTS splitpoint." + ident(ix.name + "_changes") + "()");
    w.exec("DROP TABLE IF EXISTS " + entries_sql(ix));
    if (!w.exec("SELECT to_regclass('splitpoint.index_changes')").front()[0].is_null())
      w.exec("DELETE FROM splitpoint.index_changes WHERE index_name = " + w.quote(ix.name));
    w.commit();
  }
}

// The entries emptied, the trigger on every shard, then every shard's rows copied in,
// each shard's read FOR SHARE until its entries are written.
void IndexKeeper::build(const config::Config& cfg, const config::Index& ix, Status& st) {
  const auto rt = proxy_.runtime();
  ShardConnections conns;
  for (const auto& shard : cfg.shards) conns.push_back(std::make_unique<pqxx::connection>(shard_dsn(cfg, shard)));
  auto types = column_types(*conns.front(), ix, st.detail);
  if (!types) {
    st.state = State::failed;
    return;
  }
  const routing::ColumnType first = routing::column_type(types->front());
  if (!first.hash_type) {
    st.state = State::failed;
    st.detail = "column \"" + ix.columns.front() + "\" is of type " + types->front() +
                ": the first indexed column must be of a type splitpoint hashes (integers, text, varchar, uuid)";
    return;
  }
  install(conns, ix, *types);
  std::string select = "SELECT ", not_null;
  for (std::size_t i = 0; i < ix.columns.size(); ++i) {
    select += ident(ix.columns[i]) + "::text, ";
    not_null += (i ? " AND " : "") + ident(ix.columns[i]) + " IS NOT NULL";
  }
  select += ident(ix.key_column) + "::text FROM " + table_sql(ix.table) + " WHERE " + not_null + " FOR SHARE";
  std::size_t copied = 0;
  for (const auto& shard : cfg.shards) {
    pqxx::connection source(shard_dsn(cfg, shard));  // (the targets' connections write meanwhile)
    pqxx::work read(source);
    read.exec("SET LOCAL lock_timeout = '5s'");
    auto rows = read.exec(select);
    std::vector<std::string> values(conns.size());  // per shard that owns them
    for (const auto& row : rows) {
      auto part = rt->topology->partition_of(ix.distribution, first, row[0].as<std::string>());
      std::string& to = values[rt->topology->shard_of(ix.distribution, part.partition)];
      std::string tuple;
      for (pqxx::row::size_type i = 0; i < row.size(); ++i) tuple += (i ? ", " : "") + read.quote(row[i].as<std::string>());
      to += (to.empty() ? "(" : ", (") + tuple + ")";
    }
    for (std::size_t t = 0; t < conns.size(); ++t) {
      if (values[t].empty()) continue;
      pqxx::work w(*conns[t]);
      w.exec("SET LOCAL lock_timeout = '5s'");
      w.exec("INSERT INTO " + entries_sql(ix) + " (" + entry_columns(ix) + ") VALUES " + values[t] +
             " ON CONFLICT DO NOTHING");
      const std::string dup = ix.unique ? duplicates(w, ix, values[t]) : std::string();
      if (!dup.empty()) {
        w.abort();
        read.abort();
        // Neither maintained nor used: the trigger dropped, the entries emptied.
        for (auto& c : conns) {
          pqxx::work undo(*c);
          undo.exec("DROP TRIGGER IF EXISTS " + ident(trigger_name(ix)) + " ON " + table_sql(ix.table));
          undo.exec("TRUNCATE " + entries_sql(ix));
          undo.commit();
        }
        st.state = State::failed;
        st.detail = "could not create unique index \"" + ix.name + "\": a value is in several rows: " + dup;
        return;
      }
      w.commit();
    }
    copied += rows.size();
    read.commit();
  }
  for (auto& c : conns) {
    pqxx::work w(*c);
    w.exec("COMMENT ON TRIGGER " + ident(trigger_name(ix)) + " ON " + table_sql(ix.table) + " IS 'built'");
    w.commit();
  }
  st.state = State::ready;
  st.detail = std::to_string(copied) + " rows indexed by the build";
}

IndexKeeper::Check IndexKeeper::check(const std::string& name, bool repair) const {
  const auto rt = proxy_.runtime();
  const config::Config& cfg = rt->config;
  const config::Index* found = nullptr;
  for (const auto& ix : cfg.indexes)
    if (ix.name == name) found = &ix;
  if (!found) throw CatalogError("42704", "index \"" + name + "\" does not exist (SHOW INDEXES lists those of the configuration)");
  const config::Index& ix = *found;
  std::string values, not_null;
  for (std::size_t i = 0; i < ix.columns.size(); ++i) {
    values += "(" + ident(ix.columns[i]) + ")::text, ";
    not_null += (i ? " AND " : "") + ident(ix.columns[i]) + " IS NOT NULL";
  }
  values += "(" + ident(ix.key_column) + ")::text";
  ShardConnections conns;
  for (const auto& shard : cfg.shards) conns.push_back(std::make_unique<pqxx::connection>(shard_dsn(cfg, shard)));
  using Tuple = std::vector<std::string>;
  std::map<Tuple, std::size_t> entries;  // -> the shard it is on
  std::set<Tuple> rows, misplaced;
  for (std::size_t s = 0; s < conns.size(); ++s) {
    pqxx::nontransaction w(*conns[s]);
    for (const auto& r : w.exec("SELECT " + values + " FROM " + entries_sql(ix))) {
      Tuple t;
      for (const auto& f : r) t.push_back(f.as<std::string>());
      entries.emplace(t, s);
    }
  }
  const routing::ColumnType first = [&] {
    std::string why;
    auto types = column_types(*conns.front(), ix, why);
    return routing::column_type(types ? types->front() : "");
  }();
  for (auto& c : conns) {
    pqxx::nontransaction w(*c);
    for (const auto& r : w.exec("SELECT " + values + " FROM " + table_sql(ix.table) + " WHERE " + not_null)) {
      Tuple t;
      for (const auto& f : r) t.push_back(f.as<std::string>());
      rows.insert(std::move(t));
    }
  }
  Check out;
  out.rows = rows.size();
  out.entries = entries.size();
  auto owner = [&](const Tuple& t) {
    auto p = rt->topology->partition_of(ix.distribution, first, t.front());
    return rt->topology->shard_of(ix.distribution, p.partition);
  };
  auto show = [](const Tuple& t) {
    std::string s;
    for (const auto& v : t) s += (s.empty() ? "(" : ", ") + v;
    return s + ")";
  };
  std::vector<std::string> fixes(conns.size());
  for (const auto& [t, shard] : entries) {
    const bool orphan = !rows.count(t) || shard != owner(t);
    if (!orphan) continue;
    ++out.orphans;
    if (out.examples.size() < 10) out.examples.push_back("orphan " + show(t));
    if (!repair) continue;
    pqxx::nontransaction w(*conns[shard]);
    std::string tuple;
    for (const auto& v : t) tuple += (tuple.empty() ? "" : ", ") + w.quote(v);
    w.exec("DELETE FROM " + entries_sql(ix) + " WHERE (" + entry_columns(ix) + ") = (" + tuple + ")");
    ++out.repaired;
  }
  for (const auto& t : rows) {
    auto it = entries.find(t);
    if (it != entries.end() && it->second == owner(t)) continue;
    ++out.missing;
    if (out.examples.size() < 10) out.examples.push_back("missing " + show(t));
    if (!repair) continue;
    pqxx::nontransaction w(*conns[owner(t)]);
    std::string tuple;
    for (const auto& v : t) tuple += (tuple.empty() ? "" : ", ") + w.quote(v);
    auto r = w.exec("INSERT INTO " + entries_sql(ix) + " (" + entry_columns(ix) + ") VALUES (" + tuple +
                    ") ON CONFLICT DO NOTHING");
    out.repaired += r.affected_rows();
  }
  return out;
}

}  // namespace splitpoint::server
