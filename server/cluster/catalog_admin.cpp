// ADD SHARD, REBALANCE, DROP SHARD, SPLIT RANGE, MERGE RANGE, PRESPLIT, SPLIT and MERGE PARTITION (SPEC §9):
// changes of the catalog that the admin console asks for. Blocking; the console runs them
// off the Asio threads.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <pqxx/pqxx>
#include <sstream>

#include "routing/presplit.hpp"
#include "routing/topology.hpp"
#include "server/cluster/catalog.hpp"
#include "server/cluster/indexes.hpp"
#include "config/indexes.hpp"

namespace splitpoint::server {

namespace {

// A topology change made in `w`, published: the epoch one higher, every follower told
// (NOTIFY), committed. Returns the new epoch.
std::int64_t publish(pqxx::work& w) {
  const auto epoch = w.exec("UPDATE splitpoint.topology SET epoch = epoch + 1 RETURNING epoch")[0][0].as<std::int64_t>();
  w.exec(std::string("NOTIFY ") + kCatalogChannel);
  w.commit();
  return epoch;
}

std::string shell_quote(const std::string& v) {
  std::string q = "'";
  for (char c : v) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A PostgreSQL client program (pg_dump, psql): from PATH, else PostgreSQL 15's.
std::string pg_program(const std::string& name) {
  if (std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0) return name;
  return "/usr/lib/postgresql/15/bin/" + name;
}

// libpq's environment for one side of a pipe.
std::string pg_env(const config::Config& config, const config::Shard& s) {
  return "PGHOST=" + shell_quote(s.host) + " PGPORT=" + std::to_string(s.port) + " PGDATABASE=" +
         shell_quote(s.database) + " PGUSER=" + shell_quote(s.user) + " PGPASSWORD=" + shell_quote(shard_password(config, s)) +
         " PGCONNECT_TIMEOUT=10";
}

// Runs `pg_dump ARGS` on `from` into psql on `to`; throws with pg_dump's or psql's words.
void dump_into(const config::Config& config, const config::Shard& from, const config::Shard& to,
               const std::string& args) {
  char path[] = "/tmp/splitpoint-add-shard-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  const std::string cmd = "set -o pipefail; " + pg_env(config, from) + " " + pg_program("pg_dump") + " " + args +
                          " | " + pg_env(config, to) + " " + pg_program("psql") + " -X -q -v ON_ERROR_STOP=1 >/dev/null";
  const int status = std::system(("bash -c " + shell_quote(cmd) + " 2>" + shell_quote(path)).c_str());
  std::ifstream in(path);
  std::stringstream err;
  err << in.rdbuf();
  unlink(path);
  if (status != 0) throw CatalogError("SPA01", "copying the schema to the new shard failed: " + err.str());
}

}  // namespace

void Catalog::add_shard(const std::string& name, const std::vector<std::pair<std::string, std::string>>& options) {
  const auto config = effective_config();
  if (config.find_shard(name)) throw CatalogError("SPA01", "shard \"" + name + "\" exists already");
  if (config_.find_shard(name))  // dropped, but the file would still define it
    throw CatalogError("SPA01", "shard \"" + name + "\" was dropped and is still in the configuration file; add it "
                                "under another name");
  const config::Shard& first = config.shards.front();
  config::Shard s = first;
  s.name = name;
  s.line = 0;
  for (const auto& [k, v] : options) {
    if (k == "host") s.host = v;
    else if (k == "port") s.port = static_cast<std::uint16_t>(std::stoi(v));
    else if (k == "database") s.database = v;
    else if (k == "user") s.user = v;
    else if (k == "password") s.password = v;
    else if (k == "pool_size") s.pool_size = std::stoi(v);
    else throw CatalogError("42601", "unknown ADD SHARD option \"" + k + "\" (host, port, database, user, password, pool_size)");
  }
  try {
    pqxx::connection probe(shard_dsn(config, s));
  } catch (const std::exception& e) {
    throw CatalogError("SPA01", "cannot connect to the new shard: " + std::string(e.what()));
  }
  // The tables that exist on the first shard: every sharded and reference table.
  std::vector<std::string> tables, reference;
  {
    pqxx::connection c(shard_dsn(config, first));
    pqxx::nontransaction w(c);
    auto exists = [&](const std::string& t) { return !w.exec_params("SELECT to_regclass($1)", t)[0][0].is_null(); };
    for (const auto& d : config.distributions)
      for (const auto& [t, key] : d.tables)
        if (exists(t)) tables.push_back(t);
    for (const auto& t : config.reference_tables)
      if (exists(t)) {
        tables.push_back(t);
        reference.push_back(t);
      }
  }
  auto table_args = [](const std::vector<std::string>& v) {
    std::string a;
    for (const auto& t : v) a += " --table=" + shell_quote(t);
    return a;
  };
  if (!tables.empty()) dump_into(config, first, s, "--schema-only" + table_args(tables));
  if (!reference.empty()) dump_into(config, first, s, "--data-only" + table_args(reference));
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::work w(*c);
  w.exec("UPDATE splitpoint.topology SET epoch = epoch + 1");
  w.exec_params("DELETE FROM splitpoint.dropped_shards WHERE name = $1", s.name);
  w.exec_params("INSERT INTO splitpoint.shards (name, host, port, database, \"user\", password, pool_size) VALUES "
                "($1, $2, $3, $4, $5, NULLIF($6, ''), $7)",
                s.name, s.host, static_cast<int>(s.port), s.database, s.user, s.password, s.pool_size);
  w.exec(std::string("NOTIFY ") + kCatalogChannel);
  w.commit();
  spdlog::info("catalog: shard {} added ({} tables, {} reference tables copied)", name, tables.size(), reference.size());
}

std::vector<MoveRow> Catalog::rebalance(const std::string& distribution, bool dry_run) {
  const auto config = effective_config();
  const config::Distribution* d = movable_distribution(config, distribution);
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  pqxx::work w(*c);
  w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");
  if (!w.exec_params(std::string("SELECT 1 FROM splitpoint.moves WHERE distribution = $1 AND ") + kUnfinishedMoves,
                     distribution)
           .empty())
    throw CatalogError("SPA01", "distribution \"" + distribution + "\" has unfinished moves (SHOW MOVES)");
  std::map<std::string, std::vector<std::uint32_t>> on;  // shard -> its partitions
  for (const auto& s : config.shards) on[s.name];
  for (const auto& r : w.exec_params("SELECT partition, shard FROM splitpoint.placement WHERE distribution = $1 "
                                     "ORDER BY partition",
                                     distribution))
    on[r[1].as<std::string>()].push_back(r[0].as<std::uint32_t>());
  // Every shard gets floor(P/N); the P mod N extra partitions stay with the shards that
  // hold most already, so nothing moves that need not.
  const std::size_t n = on.size(), p = partitions_of(*d);
  std::vector<std::pair<std::string, std::size_t>> order;
  for (const auto& [s, parts] : on) order.emplace_back(s, parts.size());
  std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::map<std::string, std::size_t> want;
  for (std::size_t i = 0; i < order.size(); ++i) want[order[i].first] = p / n + (i < p % n ? 1 : 0);
  std::vector<MoveRow> planned;
  for (auto& [to, parts_to] : on) {
    while (parts_to.size() < want[to]) {
      auto from = std::max_element(on.begin(), on.end(), [&](auto& a, auto& b) {
        return a.second.size() - std::min(a.second.size(), want[a.first]) <
               b.second.size() - std::min(b.second.size(), want[b.first]);
      });
      MoveRow m;
      m.distribution = distribution;
      m.partition = from->second.back();
      m.source = from->first;
      m.target = to;
      m.state = dry_run ? "" : "planned";
      from->second.pop_back();
      parts_to.push_back(m.partition);
      planned.push_back(m);
    }
  }
  if (dry_run) return planned;
  for (auto& m : planned) m.id = insert_move(w, m.distribution, m.partition, m.target);
  w.exec(std::string("NOTIFY ") + kCatalogChannel);
  w.commit();
  cv_.notify_all();
  return planned;
}

void Catalog::drop_shard(const std::string& name) {
  const auto config = effective_config();
  const auto index = config.find_shard(name);
  if (!index) throw CatalogError("SPA01", "unknown shard \"" + name + "\"");
  const std::string shard = "shard \"" + name + "\" ";
  if (config.catalog_shard == index) throw CatalogError("SPA01", shard + "holds the catalog (catalog:)");
  if (config.scatter.combines_on(*index))
    throw CatalogError("SPA01", shard + "runs the combine step (scatter.combine: point it at another shard first)");
  if (config.unlisted_tables == config::UnlistedPolicy::shard && config.unlisted_shard >= *index)
    // (Listed after the dropped one, that shard would be renumbered, and the statements
    // sessions prepared on unlisted tables keep its number.)
    throw CatalogError("SPA01", shard + (config.unlisted_shard == *index ? "holds" : "is listed before the shard of") +
                                    " the unlisted tables (unlisted_tables: shard:" +
                                    config.shards[config.unlisted_shard].name + ")");
  for (const auto& d : config.distributions)
    if (d.default_shard == index)
      throw CatalogError("SPA01", shard + "is the default of list distribution \"" + d.name + "\"");
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  std::int64_t epoch = 0;
  {
    pqxx::work w(*c);
    w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");  // (orders it with every other change)
    auto busy = w.exec_params(std::string("SELECT id, distribution || ':' || partition FROM splitpoint.moves WHERE "
                                          "(source = $1 OR target = $1) AND ") + kUnfinishedMoves + " ORDER BY id",
                              name);
    if (!busy.empty())
      throw CatalogError("SPA01", "move " + busy[0][0].as<std::string>() + " of partition " +
                                      busy[0][1].as<std::string>() + " involves " + shard +
                                      "and is unfinished (SHOW MOVES)");
    auto held = w.exec_params("SELECT count(*), min(distribution || ':' || partition) FROM splitpoint.placement "
                              "WHERE shard = $1",
                              name);
    if (const auto n = held[0][0].as<std::int64_t>(); n > 0)
      throw CatalogError("SPA01", shard + "still holds " + std::to_string(n) + " partition" + (n == 1 ? "" : "s") +
                                      " (" + held[0][1].as<std::string>() +
                                      (n == 1 ? "" : ", ...") + "); move them off first (MOVE PARTITION)");
    w.exec_params("DELETE FROM splitpoint.shards WHERE name = $1", name);
    w.exec_params("INSERT INTO splitpoint.dropped_shards (name) VALUES ($1) ON CONFLICT DO NOTHING", name);
    epoch = publish(w);
  }
  spdlog::info("catalog: shard {} dropped at topology epoch {}", name, epoch);
  // Proxies still behind after a lease have fenced themselves.
  if (!wait_for_acks(*c, epoch, config_.moves.lease))
    spdlog::warn("catalog: not every proxy acknowledged epoch {} within a lease", epoch);
}

void Catalog::create_index(config::Index ix) {
  auto config = effective_config();
  const std::string why = config::add_index(config, ix);
  if (!why.empty()) {
    const bool taken = why.find("already") != std::string::npos, table = why.find("not a table") != std::string::npos;
    throw CatalogError(taken ? "42P07" : table ? "42P01" : "22023", why);
  }
  const config::Index& made = config.indexes.back();
  const config::Distribution& entries = config.distributions[made.distribution];
  std::string columns = "{";
  for (std::size_t i = 0; i < made.columns.size(); ++i) columns += (i ? "," : "") + made.columns[i];
  columns += "}";
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  std::int64_t epoch = 0;
  {
    pqxx::work w(*c);
    w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");  // (orders it with every other change)
    if (!w.exec_params("SELECT 1 FROM splitpoint.catalog_indexes WHERE name = $1", made.name).empty())
      throw CatalogError("42P07", "index \"" + made.name + "\" already exists");
    w.exec_params("INSERT INTO splitpoint.catalog_indexes (name, \"table\", columns, is_unique) VALUES ($1, $2, $3, $4)",
                  made.name, made.table, columns, made.unique);
    w.exec_params("DELETE FROM splitpoint.placement WHERE distribution = $1", entries.name);
    for (std::size_t p = 0; p < entries.placement.size(); ++p)
      w.exec_params("INSERT INTO splitpoint.placement VALUES ($1, $2, $3)", entries.name, static_cast<int>(p),
                    config.shards[entries.placement[p]].name);
    epoch = publish(w);
  }
  spdlog::info("catalog: index {} on {} created at topology epoch {}", made.name, made.table, epoch);
  if (!wait_for_acks(*c, epoch, config_.moves.lease))
    spdlog::warn("catalog: not every proxy acknowledged epoch {} within a lease", epoch);
}

void Catalog::drop_index(const std::string& name) {
  for (const auto& ix : config_.indexes)
    if (ix.name == name)
      throw CatalogError("SPA01", "index \"" + name + "\" is the configuration file's (indexes:): remove it there");
  const auto config = effective_config();
  auto it = std::find_if(config.indexes.begin(), config.indexes.end(), [&](const auto& ix) { return ix.name == name; });
  if (it == config.indexes.end()) throw CatalogError("42704", "index \"" + name + "\" does not exist");
  const config::Index ix = *it;
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  std::int64_t epoch = 0;
  {
    pqxx::work w(*c);
    w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");
    auto busy = w.exec_params(std::string("SELECT id FROM splitpoint.moves WHERE distribution = $1 AND ") +
                                  kUnfinishedMoves + " ORDER BY id",
                              "splitpoint." + name);
    if (!busy.empty())
      throw CatalogError("SPA01", "move " + busy[0][0].as<std::string>() + " of the index's entries is unfinished (SHOW MOVES)");
    w.exec_params("DELETE FROM splitpoint.catalog_indexes WHERE name = $1", name);
    w.exec_params("DELETE FROM splitpoint.placement WHERE distribution = $1", "splitpoint." + name);
    epoch = publish(w);
  }
  spdlog::info("catalog: index {} dropped at topology epoch {}", name, epoch);
  // Once no proxy maintains it: its trigger, entries and logged changes on every shard.
  if (!wait_for_acks(*c, epoch, config_.moves.lease))
    spdlog::warn("catalog: not every proxy acknowledged epoch {} within a lease", epoch);
  IndexKeeper::remove(config, ix);
}

namespace {

// A range distribution's ranges as the catalog has them (its own bounds once split or
// merged, else the file's), each range's shard an index into `shards` (names).
std::vector<config::Range> catalog_ranges(pqxx::transaction_base& w, const config::Distribution& file,
                                          std::vector<std::string>& shards) {
  const std::string& name = file.name;
  std::vector<config::Range> ranges;
  auto bounds = w.exec_params("SELECT upto FROM splitpoint.ranges WHERE distribution = $1 ORDER BY partition", name);
  if (bounds.empty()) ranges = file.ranges;
  for (const auto& b : bounds)
    ranges.push_back({b[0].is_null() ? std::nullopt : std::optional<std::string>(b[0].as<std::string>()), 0});
  auto placed =
      w.exec_params("SELECT partition, shard FROM splitpoint.placement WHERE distribution = $1 ORDER BY partition", name);
  if (placed.size() != ranges.size())
    throw CatalogError("SPA01", "the catalog places " + std::to_string(placed.size()) + " partitions of distribution \"" +
                                    name + "\" but has " + std::to_string(ranges.size()) + " ranges");
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto shard = placed[i][1].as<std::string>();
    auto at = std::find(shards.begin(), shards.end(), shard);
    ranges[i].shard = static_cast<std::size_t>(at - shards.begin());
    if (at == shards.end()) shards.push_back(shard);
  }
  return ranges;
}

// The catalog's ranges and placement of the distribution become `ranges`.
void write_ranges(pqxx::transaction_base& w, const std::string& name, const std::vector<config::Range>& ranges,
                  const std::vector<std::string>& shards) {
  w.exec_params("DELETE FROM splitpoint.ranges WHERE distribution = $1", name);
  w.exec_params("DELETE FROM splitpoint.placement WHERE distribution = $1", name);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    w.exec_params("INSERT INTO splitpoint.ranges VALUES ($1, $2, $3)", name, static_cast<int>(i), ranges[i].upto);
    w.exec_params("INSERT INTO splitpoint.placement VALUES ($1, $2, $3)", name, static_cast<int>(i),
                  shards[ranges[i].shard]);
  }
}

RangeRow range_row(const std::vector<config::Range>& ranges, std::uint32_t p, const std::vector<std::string>& shards) {
  RangeRow r;
  r.partition = p;
  if (p > 0) r.lower = ranges[p - 1].upto;
  r.upper = ranges[p].upto;
  r.shard = shards[ranges[p].shard];
  return r;
}

}  // namespace

const config::Distribution& Catalog::changeable(const std::string& name, config::Method method,
                                                const std::string& what) const {
  for (const auto& d : config_.distributions) {
    if (d.name != name) continue;
    if (d.method == method) return d;
    static constexpr const char* kMethods[] = {"a hash one (SPLIT PARTITION dist:part splits its partitions)",
                                               "a range one (SPLIT RANGE and MERGE RANGE change its ranges)",
                                               "a list one"};
    throw CatalogError("SPA01", what + " needs a " + (method == config::Method::hash ? "hash" : "range") +
                                    " distribution; \"" + name + "\" is " + kMethods[static_cast<int>(d.method)]);
  }
  throw CatalogError("SPA01", "unknown distribution \"" + name + "\"");
}

std::int64_t Catalog::change_partitions(const std::string& distribution, const std::string& what,
                                        const std::function<void(pqxx::transaction_base&)>& change) {
  std::unique_lock<std::mutex> lock;
  auto* c = &admin_connection(lock);
  std::int64_t epoch = 0;
  {
    pqxx::work w(*c);
    w.exec("SELECT epoch FROM splitpoint.topology FOR UPDATE");  // (the compare-and-set: orders every change)
    auto busy = w.exec_params(std::string("SELECT id, partition FROM splitpoint.moves WHERE distribution = $1 AND ") +
                                  kUnfinishedMoves + " ORDER BY id",
                              distribution);
    if (!busy.empty())
      throw CatalogError("SPA01", "move " + busy[0][0].as<std::string>() + " of partition " + distribution + ":" +
                                      busy[0][1].as<std::string>() + " is unfinished (SHOW MOVES); " + what +
                                      " changes the partitions a move selects its rows by, so it waits until the "
                                      "distribution's moves finish");
    change(w);
    epoch = publish(w);
  }
  cv_.notify_all();
  if (!wait_for_acks(*c, epoch, config_.moves.lease))
    spdlog::warn("catalog: not every proxy acknowledged epoch {} within a lease", epoch);
  return epoch;
}

std::vector<RangeRow> Catalog::change_range(const std::string& distribution, const std::string& value, bool split) {
  const std::string what = split ? "SPLIT RANGE" : "MERGE RANGE";
  const config::Distribution& file = changeable(distribution, config::Method::range, what);
  std::vector<RangeRow> made;
  const auto epoch = change_partitions(distribution, what, [&](pqxx::transaction_base& w) {
    std::vector<std::string> shards;
    const auto ranges = catalog_ranges(w, file, shards);
    const auto change = split ? routing::split_range(ranges, value) : routing::merge_range(ranges, value);
    if (!change.error.empty()) throw CatalogError("SPA01", what + " " + distribution + ": " + change.error);
    const auto p = change.partition;
    if (!split && ranges[p].shard != ranges[p + 1].shard)
      throw CatalogError("SPA01", "partitions " + distribution + ":" + std::to_string(p) + " (on shard \"" +
                                      shards[ranges[p].shard] + "\") and " + distribution + ":" + std::to_string(p + 1) +
                                      " (on shard \"" + shards[ranges[p + 1].shard] +
                                      "\") are on different shards: MOVE PARTITION one of them to the other's shard first");
    write_ranges(w, distribution, change.ranges, shards);
    made.push_back(range_row(change.ranges, p, shards));
    if (split) made.push_back(range_row(change.ranges, p + 1, shards));
  });
  spdlog::info("catalog: {} {} AT {}: partition {} {}, topology epoch {}", what, distribution, value,
               made[0].partition, split ? "split in two" : "merged with the next", epoch);
  return made;
}

namespace {

// PRESPLIT's keys: the first column of `sample` on the first shard, else the key column
// of every table of the distribution on every shard (those the shard has).
std::vector<std::string> presplit_keys(const config::Config& config, const config::Distribution& d,
                                       const std::string& sample) {
  std::vector<std::string> keys;
  auto read = [&](pqxx::transaction_base& w, const std::string& sql) {
    for (const auto& row : w.exec(sql))
      if (!row[0].is_null()) keys.push_back(row[0].as<std::string>());
  };
  for (const auto& s : config.shards) {
    pqxx::connection c(shard_dsn(config, s));
    if (!sample.empty()) {
      // (The console's admin types it; it runs as the shard's user: read only.)
      try {
        pqxx::read_transaction r(c);
        read(r, sample);
      } catch (const pqxx::sql_error& e) {
        throw CatalogError(e.sqlstate().empty() ? "SPA01" : e.sqlstate(), "PRESPLIT's sample: " + std::string(e.what()));
      }
      return keys;
    }
    pqxx::nontransaction w(c);
    for (const auto& [table, column] : d.tables) {
      if (w.exec_params("SELECT to_regclass($1)", table)[0][0].is_null()) continue;
      read(w, "SELECT " + w.quote_name(column) + "::text FROM " + table);
    }
  }
  return keys;
}

}  // namespace

Catalog::PresplitResult Catalog::presplit(const std::string& distribution, std::uint32_t n, const std::string& sample) {
  const config::Distribution& file = changeable(distribution, config::Method::range, "PRESPLIT");
  if (n < 2) throw CatalogError("22023", "PRESPLIT " + distribution + " INTO " + std::to_string(n) + ": at least 2");
  const auto keys = presplit_keys(effective_config(), file, sample);
  PresplitResult out;
  std::vector<std::string> bounds;
  const auto epoch = change_partitions(distribution, "PRESPLIT", [&](pqxx::transaction_base& w) {
    std::vector<std::string> shards;
    const auto ranges = catalog_ranges(w, file, shards);
    auto split = routing::presplit_ranges(ranges, keys, n);
    if (!split.error.empty()) throw CatalogError("SPA01", "PRESPLIT " + distribution + ": " + split.error);
    write_ranges(w, distribution, split.ranges, shards);
    for (std::uint32_t p = 0; p < split.ranges.size(); ++p) out.ranges.push_back(range_row(split.ranges, p, shards));
    bounds = split.bounds;
  });
  std::string at;
  for (const auto& b : bounds) at += (at.empty() ? "" : ", ") + b;
  spdlog::info("catalog: PRESPLIT {} INTO {}: new bounds {} from {} keys, topology epoch {}", distribution, n, at,
               keys.size(), epoch);
  out.moves = rebalance(distribution, false);
  return out;
}

namespace {

// A hash distribution as the catalog has it (its own moduli once split, else the file's),
// and the shard of each partition.
config::Distribution catalog_hash(pqxx::transaction_base& w, const config::Distribution& file,
                                  std::vector<std::string>& shards) {
  config::Distribution d = file;
  for (const auto& r : w.exec_params("SELECT shard FROM splitpoint.placement WHERE distribution = $1 ORDER BY partition",
                                     d.name))
    shards.push_back(r[0].as<std::string>());
  for (const auto& r : w.exec_params("SELECT modulus, remainder FROM splitpoint.hash_partitions WHERE "
                                     "distribution = $1 ORDER BY partition",
                                     d.name))
    d.hash_parts.push_back({r[0].as<std::uint32_t>(), r[1].as<std::uint32_t>()});
  if (!d.hash_parts.empty()) d.partitions = static_cast<int>(d.hash_parts.size());
  if (shards.size() != static_cast<std::size_t>(d.partitions))
    throw CatalogError("SPA01", "the catalog places " + std::to_string(shards.size()) + " partitions of distribution \"" +
                                    d.name + "\" but has " + std::to_string(d.partitions) + " hash partitions");
  return d;
}

void write_hash_parts(pqxx::transaction_base& w, const std::string& name,
                      const std::vector<config::HashPartition>& parts, const std::vector<std::string>& shards) {
  w.exec_params("DELETE FROM splitpoint.hash_partitions WHERE distribution = $1", name);
  w.exec_params("DELETE FROM splitpoint.placement WHERE distribution = $1", name);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    w.exec_params("INSERT INTO splitpoint.hash_partitions VALUES ($1, $2, $3, $4)", name, static_cast<int>(p),
                  static_cast<int>(parts[p].modulus), static_cast<int>(parts[p].remainder));
    w.exec_params("INSERT INTO splitpoint.placement VALUES ($1, $2, $3)", name, static_cast<int>(p), shards[p]);
  }
}

}  // namespace

std::vector<HashPartRow> Catalog::split_partition(const std::string& distribution, std::uint32_t partition) {
  const config::Distribution& file = changeable(distribution, config::Method::hash, "SPLIT PARTITION");
  std::vector<HashPartRow> made;
  const auto epoch = change_partitions(distribution, "SPLIT PARTITION", [&](pqxx::transaction_base& w) {
    std::vector<std::string> shards;
    const config::Distribution d = catalog_hash(w, file, shards);
    const auto split = routing::split_hash_partition(d, partition);
    if (!split.error.empty()) throw CatalogError("SPA01", "SPLIT PARTITION: " + split.error);
    shards.push_back(shards[partition]);
    write_hash_parts(w, distribution, split.parts, shards);
    for (const std::uint32_t p : {partition, split.added})
      made.push_back({p, split.parts[p].modulus, split.parts[p].remainder, shards[p]});
  });
  spdlog::info("catalog: SPLIT PARTITION {}:{}: now modulus {} remainder {}, new partition {} remainder {}, topology "
               "epoch {}",
               distribution, partition, made[0].modulus, made[0].remainder, made[1].partition, made[1].remainder,
               epoch);
  return made;
}

std::vector<HashPartRow> Catalog::merge_partition(const std::string& distribution, std::uint32_t partition) {
  const config::Distribution& file = changeable(distribution, config::Method::hash, "MERGE PARTITION");
  std::vector<HashPartRow> made;
  std::uint32_t removed = 0;
  const auto epoch = change_partitions(distribution, "MERGE PARTITION", [&](pqxx::transaction_base& w) {
    std::vector<std::string> shards;
    const config::Distribution d = catalog_hash(w, file, shards);
    const auto merge = routing::merge_hash_partition(d, partition);
    if (!merge.error.empty()) throw CatalogError("SPA01", "MERGE PARTITION: " + merge.error);
    const auto name = [&](std::uint32_t p) {
      return distribution + ":" + std::to_string(p) + " (on shard \"" + shards[p] + "\")";
    };
    if (shards[merge.kept] != shards[merge.removed])
      throw CatalogError("SPA01", "partitions " + name(merge.kept) + " and " + name(merge.removed) +
                                      " are on different shards: MOVE PARTITION one of them to the other's shard first");
    shards.erase(shards.begin() + merge.removed);
    write_hash_parts(w, distribution, merge.parts, shards);
    removed = merge.removed;
    made.push_back({merge.kept, merge.parts[merge.kept].modulus, merge.parts[merge.kept].remainder, shards[merge.kept]});
  });
  spdlog::info("catalog: MERGE PARTITION {}:{}: partitions {} and {} now one, modulus {} remainder {}, topology epoch {}",
               distribution, partition, made[0].partition, removed, made[0].modulus, made[0].remainder, epoch);
  return made;
}

}  // namespace splitpoint::server
