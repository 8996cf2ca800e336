// Differential test of the scatter-gather merge (routing/merge/merge_plan +
// routing/merge/merger) against a real PostgreSQL 15: the same random rows are split
// over three tables t0, t1, t2 ("shards") and also stored whole in t_all. For every
// query below, the planner's shard query runs on t0..t2, the merger combines the three
// results, and the outcome must equal the original query run on t_all, value for value
// in PostgreSQL's text output (row order included where the query's ORDER BY fixes it).
// Some queries run again with binary results, compared byte for byte with the types'
// send functions. Queries the planner must refuse are checked to be refused with the
// right SQLSTATE.
//
// Usage: merge_differential "<libpq connection string>"   (exit status 1 on any failure)
#include <pqxx/pqxx>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merger.hpp"

namespace {

using splitpoint::routing::Merger;
using splitpoint::routing::MergeError;
using splitpoint::routing::MergePlan;
using Value = std::optional<std::string>;
using Rows = std::vector<std::vector<Value>>;

constexpr int kShards = 3;
constexpr int kRows = 700;
const char* const kTable = "merge_src";  // the placeholder table name in the queries

int failures = 0;

void fail(const std::string& what) {
  ++failures;
  std::cerr << "FAILED: " << what << "\n";
}

// How the merged rows must match the single-server ones.
enum class Match {
  exact,     // same rows in the same order (the ORDER BY is total)
  multiset,  // same rows, any order
  keys,      // same rows; and the first `key_columns` columns in the same order (ties)
  subset,    // same number of rows, each one of the single server's (LIMIT without ORDER BY)
};

struct Query {
  std::string sql;
  Match match = Match::exact;
  std::vector<std::string> params = {};
  std::size_t key_columns = 0;
};

// ------------------------------------------------------------------------------
// Data

std::string quote(pqxx::connection_base& c, const Value& v) { return v ? c.quote(*v) : "NULL"; }

std::vector<std::vector<Value>> make_rows() {
  std::mt19937_64 rng(20240701);
  auto pick = [&](auto const& options) { return options[rng() % options.size()]; };
  auto maybe_null = [&](Value v, int percent) -> Value { return static_cast<int>(rng() % 100) < percent ? Value{} : v; };
  const std::vector<std::string> texts = {"a", "A", "b", "ab", "abc", "Z", "é", "e", "f", "日本", "日本語", "ü", "", " ",
                                          "a b", "zz", "Ω", "🙂", "naïve", "na"};
  const std::vector<std::string> dates = {"2024-01-15", "2023-12-31", "1999-06-01", "0044-03-15 BC", "infinity",
                                          "-infinity", "10000-01-01", "2024-02-29", "1970-01-01"};
  const std::vector<std::string> floats = {"0", "-0", "1.5", "-2.25", "0.125", "1e-310", "NaN", "Infinity",
                                           "-Infinity", "3.75", "100", "-0.5"};
  std::vector<std::vector<Value>> rows;
  for (int id = 1; id <= kRows; ++id) {
    std::vector<Value> r;
    r.push_back(std::to_string(id));                                                             // id
    r.push_back(maybe_null(std::to_string(static_cast<int>(rng() % 41) - 20), 10));              // k
    r.push_back(std::to_string(static_cast<int>(rng() % 5)));                                    // g
    r.push_back(maybe_null(std::to_string(static_cast<std::int64_t>(rng() % 2000000000001ULL) - 1000000000000), 5));  // i8
    std::ostringstream n;
    int scale = static_cast<int>(rng() % 4);
    n << (static_cast<std::int64_t>(rng() % 200001) - 100000);
    std::string num = n.str();
    if (scale > 0) num += "." + std::to_string(1000 + rng() % 1000).substr(1, static_cast<std::size_t>(scale));
    r.push_back(maybe_null(num, 5));                                                             // n
    // Floats that add exactly in any order (multiples of 1/8 well inside 2^53), plus specials rarely.
    std::string f = rng() % 20 == 0 ? pick(floats) : std::to_string(static_cast<int>(rng() % 2001) - 1000) + ".125";
    r.push_back(maybe_null(f, 5));                                                               // f
    r.push_back(maybe_null(pick(texts), 5));                                                     // s
    r.push_back(maybe_null(pick(std::vector<std::string>{"ab", "ab  ", "x", "é", "zz"}), 5));   // c (char(4))
    r.push_back(maybe_null(pick(dates), 5));                                                     // d
    r.push_back(maybe_null("2024-03-0" + std::to_string(1 + rng() % 9) + " " + std::to_string(10 + rng() % 14) + ":" +
                               std::to_string(10 + rng() % 50) + ":00." + std::to_string(rng() % 1000000),
                           5));                                                                  // ts
    r.push_back(maybe_null("2024-03-01 12:00:00" + pick(std::vector<std::string>{"+00", "+05:30", "-08", "+01"}), 5));  // tz
    r.push_back(maybe_null(pick(std::vector<std::string>{"true", "false"}), 10));                // b
    char u[40];
    std::snprintf(u, sizeof u, "%08x-0000-4000-8000-%012llx", static_cast<unsigned>(rng() % 64),
                  static_cast<unsigned long long>(rng() % 5));
    r.push_back(maybe_null(u, 5));                                                               // u
    r.push_back(maybe_null(std::to_string(rng() % 24) + ":" + std::to_string(10 + rng() % 50) + ":00", 5));  // tm
    r.push_back(maybe_null(std::to_string(static_cast<int>(rng() % 100)) + ".5", 5));           // r (real)
    std::string hex = "\\x";
    for (std::uint64_t i = 0, n = rng() % 4; i < n; ++i) hex += pick(std::vector<std::string>{"00", "0a", "7f", "80", "ff"});
    r.push_back(maybe_null(hex, 5));                                                             // by (bytea)
    rows.push_back(std::move(r));
  }
  return rows;
}

// Splits the rows over the shards (round 1 leaves the last shard empty) and loads them.
void load(pqxx::connection& c, int round) {
  pqxx::nontransaction tx(c);
  tx.exec0("SET client_min_messages = warning");
  tx.exec0("DROP SCHEMA IF EXISTS merge_diff CASCADE");
  tx.exec0("CREATE SCHEMA merge_diff");
  const std::string columns =
      "(id int, k int, g int, i8 bigint, n numeric, f float8, s text, c char(4), d date, ts timestamp, "
      "tz timestamptz, b bool, u uuid, tm time, r real, by bytea)";
  for (const char* t : {"t0", "t1", "t2", "t_all"}) tx.exec0(std::string("CREATE TABLE merge_diff.") + t + " " + columns);
  std::mt19937 split(7 + static_cast<unsigned>(round));
  const int used = round == 0 ? kShards : kShards - 1;
  std::vector<std::string> values[kShards];
  std::vector<std::string> all;
  for (const auto& row : make_rows()) {
    std::string v = "(";
    for (std::size_t i = 0; i < row.size(); ++i) v += (i ? "," : "") + quote(c, row[i]);
    v += ")";
    values[split() % static_cast<unsigned>(used)].push_back(v);
    all.push_back(v);
  }
  auto insert = [&](const std::string& table, const std::vector<std::string>& rows) {
    if (rows.empty()) return;
    std::string sql = "INSERT INTO merge_diff." + table + " VALUES ";
    for (std::size_t i = 0; i < rows.size(); ++i) sql += (i ? "," : "") + rows[i];
    tx.exec0(sql);
  };
  for (int s = 0; s < kShards; ++s) insert("t" + std::to_string(s), values[s]);
  insert("t_all", all);
}

// ------------------------------------------------------------------------------
// Running

std::string with_table(std::string sql, const std::string& table) {
  for (std::size_t at = sql.find(kTable); at != std::string::npos; at = sql.find(kTable, at + table.size()))
    sql.replace(at, std::string(kTable).size(), table);
  return sql;
}

pqxx::result run(pqxx::connection& c, const std::string& sql, const std::vector<std::string>& params) {
  pqxx::nontransaction tx(c);
  tx.exec0("SET search_path = merge_diff");
  if (params.empty()) return tx.exec(sql);
  c.prepare("q", sql);
  pqxx::result r = params.size() == 1   ? tx.exec_prepared("q", params[0])
                   : params.size() == 2 ? tx.exec_prepared("q", params[0], params[1])
                                        : tx.exec_prepared("q", params[0], params[1], params[2]);
  c.unprepare("q");
  return r;
}

Rows rows_of(const pqxx::result& r) {
  Rows out;
  for (const auto& row : r) {
    std::vector<Value> v;
    for (const auto& f : row) v.push_back(f.is_null() ? Value{} : Value{std::string(f.c_str(), f.size())});
    out.push_back(std::move(v));
  }
  return out;
}

// A DataRow body as a shard would send it (text format).
std::string data_row(const std::vector<Value>& values) {
  std::string body;
  body.push_back(static_cast<char>(values.size() >> 8));
  body.push_back(static_cast<char>(values.size() & 0xff));
  for (const Value& v : values) {
    std::uint32_t len = v ? static_cast<std::uint32_t>(v->size()) : 0xffffffffU;
    for (int s = 24; s >= 0; s -= 8) body.push_back(static_cast<char>((len >> s) & 0xff));
    if (v) body += *v;
  }
  return body;
}

std::vector<Value> parse_row(std::string_view body) {
  std::vector<Value> out;
  auto u = [&](std::size_t at) { return static_cast<unsigned char>(body[at]); };
  std::size_t n = (u(0) << 8) | u(1), at = 2;
  for (std::size_t i = 0; i < n; ++i) {
    std::int32_t len = static_cast<std::int32_t>((u(at) << 24) | (u(at + 1) << 16) | (u(at + 2) << 8) | u(at + 3));
    at += 4;
    if (len < 0) {
      out.emplace_back();
      continue;
    }
    out.emplace_back(std::string(body.substr(at, static_cast<std::size_t>(len))));
    at += static_cast<std::size_t>(len);
  }
  return out;
}

std::string show(const std::vector<Value>& row) {
  std::string s = "(";
  for (std::size_t i = 0; i < row.size(); ++i) s += (i ? "," : "") + (row[i] ? *row[i] : std::string("NULL"));
  return s + ")";
}

// What the shards returned: their RowDescription (types, formats) and rows.
struct ShardResults {
  std::vector<splitpoint::protocol::FieldDescription> fields;
  std::vector<Rows> rows;
};

ShardResults text_results(const std::vector<pqxx::result>& shards) {
  ShardResults out;
  for (pqxx::row::size_type i = 0; i < shards.front().columns(); ++i) {
    splitpoint::protocol::FieldDescription f;
    f.type_oid = static_cast<std::int32_t>(shards.front().column_type(i));
    out.fields.push_back(f);
  }
  for (const auto& r : shards) out.rows.push_back(rows_of(r));
  return out;
}

// Feeds the shard results through the merger; nullopt (and a failure) on a merge error.
std::optional<Rows> merge(const MergePlan& plan, const ShardResults& shards, const std::string& collation,
                          const std::vector<std::string>& params, const std::string& label, MergeError* refused) {
  std::vector<std::optional<std::string_view>> values(params.begin(), params.end());
  splitpoint::routing::MergerOptions options;
  options.collation = collation;
  options.max_buffered_rows = 100000;
  options.params.values = values;
  auto created = Merger::create(plan, shards.rows.size(), shards.fields, options);
  if (auto* e = std::get_if<MergeError>(&created)) {
    if (refused != nullptr) *refused = *e;
    else fail(label + ": merger refused: " + e->sqlstate + " " + e->message);
    return std::nullopt;
  }
  Merger& m = *std::get<std::unique_ptr<Merger>>(created);
  const std::vector<Rows>& input = shards.rows;
  std::vector<std::size_t> next(input.size(), 0);
  Rows out;
  for (std::size_t round = 0;; ++round) {
    Merger::Step s = m.next();
    if (s.kind == Merger::Step::Kind::emit) {
      out.push_back(parse_row(s.row));
    } else if (s.kind == Merger::Step::Kind::need_row) {
      // For "any shard", rotate so rows of different shards interleave.
      std::size_t i = s.shard;
      if (i == Merger::kAnyShard) {
        i = round % input.size();
        while (next[i] > input[i].size()) i = (i + 1) % input.size();
      }
      if (next[i] < input[i].size()) m.push(i, data_row(input[i][next[i]]));
      else m.end_of_shard(i);
      ++next[i];
    } else if (s.kind == Merger::Step::Kind::done) {
      if (m.rows_emitted() != out.size()) fail(label + ": rows_emitted disagrees");
      return out;
    } else {
      if (refused != nullptr) *refused = m.error();
      else fail(label + ": merge error: " + m.error().sqlstate + " " + m.error().message);
      return std::nullopt;
    }
  }
}

std::size_t rows_compared = 0;

void compare(const Query& q, const Rows& merged, const Rows& expected, const std::string& label) {
  rows_compared += expected.size();
  auto report = [&](const std::string& why) {
    std::string detail = label + ": " + why + "\n  merged (" + std::to_string(merged.size()) + "):";
    for (std::size_t i = 0; i < std::min<std::size_t>(merged.size(), 8); ++i) detail += " " + show(merged[i]);
    detail += "\n  expected (" + std::to_string(expected.size()) + "):";
    for (std::size_t i = 0; i < std::min<std::size_t>(expected.size(), 8); ++i) detail += " " + show(expected[i]);
    fail(detail);
  };
  auto sorted = [](Rows r) {
    std::sort(r.begin(), r.end());
    return r;
  };
  switch (q.match) {
    case Match::exact:
      for (std::size_t i = 0; i < std::min(merged.size(), expected.size()); ++i)
        if (merged[i] != expected[i]) return report("row " + std::to_string(i + 1) + " differs: " + show(merged[i]) + " vs " + show(expected[i]));
      if (merged.size() != expected.size()) return report("row counts differ");
      return;
    case Match::multiset:
      if (sorted(merged) != sorted(expected)) return report("different rows");
      return;
    case Match::keys: {
      if (sorted(merged) != sorted(expected)) return report("different rows");
      for (std::size_t i = 0; i < merged.size(); ++i)
        for (std::size_t c = 0; c < q.key_columns; ++c)
          if (merged[i][c] != expected[i][c]) return report("order differs at row " + std::to_string(i + 1));
      return;
    }
    case Match::subset: {
      if (merged.size() != expected.size()) return report("row counts differ");
      return;
    }
  }
}

// ------------------------------------------------------------------------------
// The queries ({merge_src} is replaced by t0..t2 for the shards and t_all for the reference)

std::vector<Query> queries() {
  using M = Match;
  return {
      // Sorted merges: several keys, ASC/DESC, NULLS FIRST/LAST, hidden keys, types.
      {"SELECT id, k FROM merge_src ORDER BY id"},
      {"SELECT id, k FROM merge_src ORDER BY k, id"},
      {"SELECT id, k FROM merge_src ORDER BY k DESC, id"},
      {"SELECT id, k FROM merge_src ORDER BY k NULLS FIRST, id DESC"},
      {"SELECT id FROM merge_src ORDER BY k DESC NULLS LAST, g, id"},
      {"SELECT id, n FROM merge_src ORDER BY n, id"},
      {"SELECT id, f FROM merge_src ORDER BY f DESC, id"},
      {"SELECT id, s FROM merge_src ORDER BY s, id"},
      {"SELECT id, s FROM merge_src ORDER BY s COLLATE \"C\" DESC, id"},
      {"SELECT id, d, ts FROM merge_src ORDER BY d, ts DESC, id"},
      {"SELECT id, tz FROM merge_src ORDER BY tz NULLS FIRST, id"},
      {"SELECT id, u FROM merge_src ORDER BY u, id"},
      {"SELECT id, b FROM merge_src ORDER BY b DESC, id"},
      {"SELECT id, c FROM merge_src ORDER BY c, id"},
      {"SELECT id, tm FROM merge_src ORDER BY tm, id"},
      {"SELECT id, i8 FROM merge_src ORDER BY 2 DESC, 1 LIMIT 10 OFFSET 5"},
      {"SELECT * FROM merge_src ORDER BY id LIMIT 7"},
      {"SELECT id, k FROM merge_src ORDER BY k + g, id LIMIT 20"},
      {"SELECT id AS x, k FROM merge_src ORDER BY x DESC LIMIT 3"},
      {"SELECT k, g FROM merge_src ORDER BY k", M::keys, {}, 1},
      {"SELECT k FROM merge_src ORDER BY k DESC FETCH FIRST 5 ROWS WITH TIES"},
      {"SELECT id, k FROM merge_src ORDER BY k, id LIMIT $1 OFFSET $2", M::exact, {"5", "3"}},
      {"SELECT id, k FROM merge_src WHERE k > 0", M::multiset},
      {"SELECT id FROM merge_src LIMIT 5", M::subset},
      {"SELECT id, s FROM merge_src WHERE id IN (SELECT id FROM merge_src WHERE k < 0) ORDER BY s DESC, id OFFSET 10"},
      // Aggregates without GROUP BY.
      {"SELECT count(*), count(k), sum(k), min(k), max(k), avg(k) FROM merge_src"},
      {"SELECT sum(i8), avg(i8), sum(n), avg(n), min(n), max(n) FROM merge_src"},
      {"SELECT sum(f), avg(f), min(f), max(f) FROM merge_src WHERE f <> 'NaN' AND f NOT IN ('Infinity', '-Infinity')"},
      {"SELECT sum(f), min(f), max(f), sum(r) FROM merge_src"},
      {"SELECT bool_and(b), bool_or(b), every(b), min(s), max(s), min(d), max(ts), min(tz), min(c) FROM merge_src"},
      {"SELECT count(*), sum(k), avg(k), max(s) FROM merge_src WHERE false"},
      {"SELECT avg(k) FILTER (WHERE k > 0), count(*) FILTER (WHERE b) FROM merge_src"},
      {"SELECT count(*) FROM merge_src HAVING count(*) > 1000000"},
      // GROUP BY, HAVING.
      {"SELECT g, count(*), sum(k), avg(n) FROM merge_src GROUP BY g ORDER BY g"},
      {"SELECT g, count(*) FROM merge_src GROUP BY g ORDER BY count(*) DESC, g"},
      {"SELECT g, k, count(*), min(s) FROM merge_src GROUP BY g, k ORDER BY g, k DESC"},
      {"SELECT count(*) FROM merge_src GROUP BY g", M::multiset},
      {"SELECT g, sum(k) FROM merge_src GROUP BY g HAVING sum(k) > 10 ORDER BY g"},
      {"SELECT g, avg(k) FROM merge_src GROUP BY g HAVING count(*) BETWEEN 3 AND 1000 AND NOT max(k) < 0 ORDER BY 1"},
      {"SELECT s, count(*) FROM merge_src GROUP BY s ORDER BY s DESC LIMIT 4"},
      {"SELECT d, count(*) FROM merge_src GROUP BY 1 ORDER BY 1 DESC NULLS LAST"},
      {"SELECT g, min(n), max(s) FROM merge_src WHERE k IS NOT NULL GROUP BY g HAVING min(n) IS NOT NULL ORDER BY g LIMIT 3 OFFSET 1"},
      {"SELECT b, count(*), avg(i8), sum(f) FROM merge_src WHERE f BETWEEN -1000 AND 1000 GROUP BY b ORDER BY b NULLS FIRST"},
      {"SELECT g, avg(f) FILTER (WHERE k > 0) FROM merge_src WHERE f BETWEEN -1000 AND 1000 GROUP BY g ORDER BY g"},
      {"SELECT k, count(*) FROM merge_src GROUP BY k HAVING k IN (1, 2, 3) OR k IS NULL ORDER BY k"},
      {"SELECT g, max(d) FROM merge_src GROUP BY g HAVING max(d) > '2000-01-01' ORDER BY g"},
      {"SELECT g, count(*) FROM merge_src GROUP BY g HAVING count(*) > $1 ORDER BY g", M::exact, {"130"}},
      {"SELECT u, count(*) FROM merge_src GROUP BY u ORDER BY 2 DESC, 1 LIMIT 5"},
      {"SELECT g, count(*) FROM merge_src GROUP BY g HAVING count(*) > $1 ORDER BY 2, 1 LIMIT $2 OFFSET $3", M::exact,
       {"100", "2", "1"}},
      {"SELECT count(*), sum(i8) FROM merge_src LIMIT $1", M::exact, {"1"}},
      {"SELECT g, count(*) FROM merge_src GROUP BY g ORDER BY g FETCH FIRST 2 ROWS WITH TIES"},
      {"SELECT k, count(*) FROM merge_src GROUP BY k ORDER BY count(*) DESC FETCH FIRST 3 ROWS WITH TIES", M::keys, {}, 0},
      {"SELECT tz, count(*) FROM merge_src GROUP BY tz ORDER BY tz"},
      {"SELECT g, bool_or(b), sum(i8) FROM merge_src GROUP BY g ORDER BY sum(i8) DESC NULLS LAST, g"},
      // DISTINCT.
      {"SELECT DISTINCT g FROM merge_src ORDER BY g"},
      {"SELECT DISTINCT k, g FROM merge_src", M::multiset},
      {"SELECT DISTINCT s FROM merge_src ORDER BY s LIMIT 5"},
      {"SELECT DISTINCT ON (g) g, id, k FROM merge_src ORDER BY g, k DESC NULLS LAST, id"},
      {"SELECT DISTINCT * FROM (SELECT g, b FROM merge_src) x", M::multiset},
      {"SELECT DISTINCT g, count(*) FROM merge_src GROUP BY g, k", M::multiset},
      {"SELECT DISTINCT c FROM merge_src ORDER BY c"},
      {"SELECT DISTINCT f FROM merge_src ORDER BY f"},
      {"SELECT DISTINCT s FROM merge_src ORDER BY s DESC"},
      {"SELECT DISTINCT ON (s) s, id FROM merge_src ORDER BY s, id DESC"},
      {"SELECT DISTINCT ON (b, g) id, b, g FROM merge_src ORDER BY b, g, id"},
      // Keyset pagination, more types, GROUP BY expressions.
      {"SELECT id, s FROM merge_src WHERE (s, id) > ('b', 100) ORDER BY s, id LIMIT 10"},
      {"SELECT id, k FROM merge_src WHERE (k, id) < ($1, $2) ORDER BY k DESC, id DESC LIMIT 7", M::exact, {"5", "300"}},
      {"SELECT id, by FROM merge_src ORDER BY by, id"},
      {"SELECT by, count(*) FROM merge_src GROUP BY by ORDER BY by DESC"},
      {"SELECT g, min(s COLLATE \"C\"), max(s) FROM merge_src GROUP BY g ORDER BY g"},
      {"SELECT s, count(*) FROM merge_src GROUP BY s ORDER BY count(*) DESC, s"},
      {"SELECT c, count(*) FROM merge_src GROUP BY c ORDER BY c"},
      {"SELECT count(*), max(id) FROM merge_src GROUP BY k % 3 ORDER BY 2"},
      {"SELECT g, k FROM merge_src GROUP BY g, k HAVING k > 0 ORDER BY k DESC, g LIMIT 5"},
      {"SELECT avg(n), avg(i8), avg(k), b FROM merge_src GROUP BY b ORDER BY 1"},
      {"SELECT id, u FROM merge_src ORDER BY u DESC, id LIMIT 10 OFFSET 3"},
      {"SELECT * FROM merge_src ORDER BY d DESC NULLS LAST, id LIMIT 5"},
      {"SELECT ts::date AS day, count(*) FROM merge_src GROUP BY 1 ORDER BY 1"},
      {"SELECT lower(s) AS ls, count(*) FROM merge_src GROUP BY lower(s) ORDER BY ls"},
      {"SELECT count(*) FROM merge_src GROUP BY ts::date HAVING count(*) > 5", M::multiset},
      {"SELECT g, count(*) FILTER (WHERE s > 'b'), sum(k) FILTER (WHERE b) FROM merge_src GROUP BY g ORDER BY g"},
      {"SELECT max(tm), min(tm), max(c) FROM merge_src"},
      {"SELECT id FROM merge_src ORDER BY s COLLATE \"C\", id DESC LIMIT 15"},
  };
}

// Generated: random ORDER BY lists (directions, NULLS, COLLATE, hidden keys) made total
// by a final id, with LIMIT/OFFSET; and random GROUP BY / aggregate combinations.
std::vector<Query> generated_queries() {
  std::mt19937 rng(4242);
  const std::vector<std::string> columns = {"k", "g", "n", "f", "s", "d", "ts", "tz", "b", "u", "c", "tm", "i8", "by"};
  const std::vector<std::string> aggregates = {"count(*)", "count(k)", "sum(k)", "avg(k)", "sum(n)", "avg(n)", "min(s)",
                                               "max(d)", "min(ts)", "max(u::text)", "bool_and(b)", "avg(i8)", "max(c)"};
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::vector<Query> out;
  for (int i = 0; i < 20; ++i) {
    std::string select = "id", order;
    for (unsigned j = 0, n = 1 + rng() % 3; j < n; ++j) {
      std::string col = pick(columns);
      if (rng() % 2) select += ", " + col;  // else a hidden sort key
      order += col + (col == "s" && rng() % 3 == 0 ? " COLLATE \"C\"" : "") + (rng() % 2 ? " DESC" : "") +
               std::vector<std::string>{"", " NULLS FIRST", " NULLS LAST"}[rng() % 3] + ", ";
    }
    std::string sql = "SELECT " + select + " FROM merge_src ORDER BY " + order + "id";
    if (rng() % 2) sql += " LIMIT " + std::to_string(rng() % 60);
    if (rng() % 2) sql += " OFFSET " + std::to_string(rng() % 30);
    out.push_back({sql});
  }
  for (int i = 0; i < 12; ++i) {
    std::string g1 = pick({"g", "k", "b", "c", "d", "s"}), g2 = pick({"g", "b", "tm"});
    std::string keys = rng() % 2 ? g1 : g1 + ", " + g2;
    std::string sql = "SELECT " + keys + ", " + pick(aggregates) + ", " + pick(aggregates) + " FROM merge_src GROUP BY " +
                      keys + " ORDER BY " + keys;
    if (rng() % 3 == 0) sql += " LIMIT " + std::to_string(1 + rng() % 10);
    out.push_back({sql});
  }
  return out;
}

// Run again with every visible column in binary format (hidden ones stay text).
std::vector<Query> binary_queries() {
  using M = Match;
  return {
      {"SELECT id, k FROM merge_src ORDER BY k, id"},
      {"SELECT id, n, f FROM merge_src ORDER BY n DESC, f, id LIMIT 50"},
      {"SELECT id, s, d, ts, tz FROM merge_src ORDER BY d, ts DESC, id"},
      {"SELECT id, u, b, c, by, tm FROM merge_src ORDER BY u, b, id"},
      {"SELECT id FROM merge_src ORDER BY s DESC, n NULLS FIRST, id LIMIT 40 OFFSET 10"},
      {"SELECT count(*), sum(k), avg(k), sum(i8), avg(i8), sum(n), avg(n), min(s), max(d), bool_or(b) FROM merge_src"},
      {"SELECT sum(f), avg(f), sum(r), min(f), max(r) FROM merge_src WHERE f BETWEEN -1000 AND 1000"},
      {"SELECT g, count(*), avg(n), max(tz), min(u::text) FROM merge_src GROUP BY g ORDER BY g"},
      {"SELECT g, sum(i8) FROM merge_src GROUP BY g HAVING avg(k) > 0 ORDER BY sum(i8) DESC"},
      {"SELECT b, avg(k) FROM merge_src GROUP BY b ORDER BY avg(k) NULLS FIRST"},
      {"SELECT DISTINCT k, g FROM merge_src", M::multiset},
      {"SELECT DISTINCT d FROM merge_src ORDER BY d DESC"},
  };
}

struct Refusal {
  std::string sql;
  std::string sqlstate;
};

std::vector<Refusal> refusals() {
  return {
      {"SELECT count(DISTINCT k) FROM merge_src", "SPC01"},
      {"SELECT k FROM merge_src UNION SELECT k FROM merge_src", "SPC01"},
      {"SELECT string_agg(s, ',') FROM merge_src", "SPC01"},
      {"SELECT * FROM merge_src ORDER BY random()", "SPC01"},
      {"SELECT row_number() OVER () FROM merge_src", "SPC01"},
      {"SELECT sum(k) + 1 FROM merge_src", "SPC01"},
      {"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY k) FROM merge_src", "SPC01"},
      {"SELECT * FROM merge_src ORDER BY k LIMIT 3 FOR UPDATE", "SPC01"},
      {"SELECT * FROM (SELECT k FROM merge_src ORDER BY k LIMIT 3) x", "SPC01"},
      {"SELECT avg(r) FROM merge_src", "SPC01"},  // refused by the merger (real)
      {"SELECT g, array_agg(id) FROM merge_src GROUP BY g", "SPC01"},
      {"SELECT max(k) - min(k) FROM merge_src", "SPC01"},
      {"SELECT k FROM merge_src EXCEPT SELECT g FROM merge_src", "SPC01"},
      {"SELECT g, k, count(*) FROM merge_src GROUP BY ROLLUP (g, k)", "SPC01"},
      {"SELECT x FROM (SELECT DISTINCT g AS x FROM merge_src) d", "SPC01"},
  };
}

void check_queries(pqxx::connection& c, const std::string& collation, int round) {
  int index = 0;
  std::vector<Query> all = queries();
  for (Query& q : generated_queries()) all.push_back(std::move(q));
  for (const Query& q : all) {
    std::string label = "round " + std::to_string(round) + " query " + std::to_string(++index) + " [" + q.sql + "]";
    auto planned = splitpoint::routing::plan_merge(q.sql);
    if (auto* e = std::get_if<MergeError>(&planned)) {
      fail(label + ": refused: " + e->sqlstate + " " + e->message);
      continue;
    }
    const MergePlan& plan = std::get<MergePlan>(planned);
    try {
      std::vector<pqxx::result> shards;
      for (int s = 0; s < kShards; ++s)
        shards.push_back(run(c, with_table(plan.shard_sql, "t" + std::to_string(s)), q.params));
      Rows expected = rows_of(run(c, with_table(q.sql, "t_all"), q.params));
      if (std::optional<Rows> merged = merge(plan, text_results(shards), collation, q.params, label, nullptr))
        compare(q, *merged, expected, label);
    } catch (const std::exception& e) {
      fail(label + ": " + e.what() + "  shard query: " + plan.shard_sql);
    }
  }
}

// ------------------------------------------------------------------------------
// Binary results. libpqxx reads text only, so a binary column is fetched as its type's
// send function's bytea (exactly the bytes the protocol's binary format carries).

std::string send_function(std::uint32_t type) {
  static const std::map<std::uint32_t, std::string> kSend = {
      {16, "boolsend"},      {17, "byteasend"},      {19, "namesend"},          {20, "int8send"},
      {21, "int2send"},      {23, "int4send"},       {25, "textsend"},          {700, "float4send"},
      {701, "float8send"},   {1042, "bpcharsend"},   {1043, "varcharsend"},     {1082, "date_send"},
      {1083, "time_send"},   {1114, "timestamp_send"}, {1184, "timestamptz_send"}, {1700, "numeric_send"},
      {2950, "uuid_send"}};
  auto it = kSend.find(type);
  if (it == kSend.end()) throw std::runtime_error("no send function for type " + std::to_string(type));
  return it->second;
}

std::string unhex(const std::string& bytea) {  // "\x0a1b" -> bytes
  std::string out;
  for (std::size_t i = 2; i + 1 < bytea.size(); i += 2) out.push_back(static_cast<char>(std::stoi(bytea.substr(i, 2), nullptr, 16)));
  return out;
}

// Runs `sql` with the columns whose format is 1 returned in binary.
std::pair<std::vector<std::uint32_t>, Rows> run_binary(pqxx::connection& c, const std::string& sql,
                                                       const std::vector<std::string>& params,
                                                       std::vector<std::int16_t> formats) {
  pqxx::result probe = run(c, sql, params);
  std::vector<std::uint32_t> types;
  for (pqxx::row::size_type i = 0; i < probe.columns(); ++i) types.push_back(probe.column_type(i));
  if (formats.size() == 1) formats.assign(types.size(), formats[0]);
  std::string select, names;
  for (std::size_t i = 0; i < types.size(); ++i) {
    std::string col = "q.c" + std::to_string(i + 1);
    select += std::string(i ? ", " : "") + (formats[i] == 1 ? send_function(types[i]) + "(" + col + ")" : col);
    names += std::string(i ? ", " : "") + "c" + std::to_string(i + 1);
  }
  Rows rows = rows_of(run(c, "SELECT " + select + " FROM (" + sql + ") AS q(" + names + ")", params));
  for (auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i)
      if (row[i] && formats[i] == 1) row[i] = unhex(*row[i]);
  return {types, rows};
}

void check_binary_queries(pqxx::connection& c, const std::string& collation, int round) {
  int index = 0;
  for (const Query& q : binary_queries()) {
    std::string label = "round " + std::to_string(round) + " binary query " + std::to_string(++index) + " [" + q.sql + "]";
    const MergePlan plan = std::get<MergePlan>(splitpoint::routing::plan_merge(q.sql));
    try {
      ShardResults shards;
      const std::int16_t binary[] = {1};
      std::vector<std::int16_t> formats;
      for (int s = 0; s < kShards; ++s) {
        std::string sql = with_table(plan.shard_sql, "t" + std::to_string(s));
        if (formats.empty()) formats = plan.shard_result_formats(binary, run(c, sql, q.params).columns());
        auto [types, rows] = run_binary(c, sql, q.params, formats);
        shards.rows.push_back(std::move(rows));
        if (shards.fields.empty())
          for (std::size_t i = 0; i < types.size(); ++i) {
            splitpoint::protocol::FieldDescription f;
            f.type_oid = static_cast<std::int32_t>(types[i]);
            f.format = formats[i];
            shards.fields.push_back(f);
          }
      }
      Rows expected = run_binary(c, with_table(q.sql, "t_all"), q.params, {1}).second;
      if (std::optional<Rows> merged = merge(plan, shards, collation, q.params, label, nullptr))
        compare(q, *merged, expected, label);
    } catch (const std::exception& e) {
      fail(label + ": " + e.what());
    }
  }
}

void check_refusals(pqxx::connection& c, const std::string& collation) {
  for (const Refusal& r : refusals()) {
    std::string label = "refusal [" + r.sql + "]";
    auto planned = splitpoint::routing::plan_merge(r.sql);
    MergeError e;
    if (auto* pe = std::get_if<MergeError>(&planned)) {
      e = *pe;
    } else {
      const MergePlan& plan = std::get<MergePlan>(planned);
      std::vector<pqxx::result> shards;
      for (int s = 0; s < kShards; ++s) shards.push_back(run(c, with_table(plan.shard_sql, "t" + std::to_string(s)), {}));
      if (merge(plan, text_results(shards), collation, {}, label, &e)) {
        fail(label + ": was answered instead of refused");
        continue;
      }
    }
    if (e.sqlstate != r.sqlstate) fail(label + ": refused with " + e.sqlstate + " (" + e.message + "), expected " + r.sqlstate);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: merge_differential \"<libpq connection string>\"\n";
    return 2;
  }
  try {
    pqxx::connection c(argv[1]);
    std::string collation = pqxx::nontransaction(c).exec1("SHOW lc_collate")[0].as<std::string>();
    for (int round = 0; round < 2; ++round) {
      load(c, round);
      check_queries(c, collation, round);
      check_binary_queries(c, collation, round);
      check_refusals(c, collation);
    }
    pqxx::nontransaction(c).exec0("DROP SCHEMA merge_diff CASCADE");
    std::cout << "merge_differential: " << queries().size() + generated_queries().size() << " queries ("
              << binary_queries().size()
              << " also in binary) and " << refusals().size()
              << " refusals on two splits (" << collation << "), " << rows_compared << " rows compared, " << failures
              << " failure(s)\n";
  } catch (const std::exception& e) {
    std::cerr << "merge_differential: " << e.what() << "\n";
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
