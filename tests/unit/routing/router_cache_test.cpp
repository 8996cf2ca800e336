// The simple-protocol plan cache (SPEC §3: texts that differ only in literal values
// share one plan): a hit must route exactly as a fresh parse of the same text.
#include <atomic>
#include <thread>

#include "routing/analyze.hpp"
#include "routing/literal_slots.hpp"
#include "routing/plan_cache.hpp"
#include "tests/unit/routing/router_fixture.hpp"

using namespace splitpoint::routing;
using namespace splitpoint::routing::test;

namespace {

// Replaces each "{}" of `tmpl` with the next value.
std::string fill(std::string_view tmpl, const std::vector<std::string>& values) {
  std::string out;
  std::size_t v = 0;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl.substr(i, 2) == "{}" && v < values.size()) {
      out += values[v++];
      ++i;
    } else {
      out += tmpl[i];
    }
  }
  return out;
}

void check_same(const Route& hit, const Route& fresh) {
  CHECK(hit.kind == fresh.kind);
  CHECK(hit.cls == fresh.cls);
  CHECK(hit.shards == fresh.shards);
  CHECK(hit.key_values == fresh.key_values);
  CHECK(hit.distribution == fresh.distribution);
  CHECK(hit.sqlstate == fresh.sqlstate);
  CHECK(hit.message == fresh.message);
  // (A hit cuts a split INSERT from its text, a fresh parse may deparse it: the same
  // statements, not the same spelling.)
  REQUIRE(hit.per_shard_sql.size() == fresh.per_shard_sql.size());
  for (std::size_t i = 0; i < hit.per_shard_sql.size(); ++i) {
    CHECK(hit.per_shard_sql[i].first == fresh.per_shard_sql[i].first);
    CHECK(parse_json(hit.per_shard_sql[i].second) == parse_json(fresh.per_shard_sql[i].second));
  }
  CHECK(hit.hints == fresh.hints);
  REQUIRE(hit.partitions.size() == fresh.partitions.size());
  for (std::size_t i = 0; i < hit.partitions.size(); ++i) {
    CHECK(hit.partitions[i].distribution == fresh.partitions[i].distribution);
    CHECK(hit.partitions[i].partition == fresh.partitions[i].partition);
  }
}

}  // namespace

TEST_CASE("a cache hit routes like a fresh parse, for many literal variations", "[router][cache]") {
  Fixture cached;  // route_simple: the first text of each shape fills the cache
  Fixture fresh;   // Router::plan + route: always a parse of the very text
  const char* templates[] = {
      "SELECT * FROM users WHERE id = {}",
      "SELECT * FROM users WHERE id = -{}",
      "SELECT * FROM users WHERE id = - {} AND name = {}",
      "SELECT * FROM users WHERE id = '{}'",
      "SELECT * FROM users WHERE id = E'{}'",
      "SELECT * FROM users WHERE id = $${}$$",
      "SELECT * FROM users WHERE id = $q${}$q$",
      "SELECT * FROM users WHERE id = {}::bigint",
      "SELECT * FROM users WHERE id IN ({}, {})",
      "SELECT * FROM users WHERE id = {} OR id = {}",
      "SELECT * FROM users WHERE id = ANY('{{}}')",
      "SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = {} LIMIT {}",
      "SELECT * FROM sessions WHERE token = '{}'",
      "SELECT * FROM events WHERE id BETWEEN {} AND {}",
      "SELECT * FROM events WHERE id >= {}",
      "SELECT * FROM stores WHERE region = '{}'",
      "UPDATE users SET name = '{}' WHERE id = {}",
      "DELETE FROM orders WHERE user_id = {}",
      "INSERT INTO users (id, name) VALUES ({}, 'x'), ({}, 'y')",
      "INSERT INTO orders VALUES (1, {}, {})",
      "SELECT * FROM users WHERE id = {} /* splitpoint: deadline={}ms */",
      "/* splitpoint: shard=s{} */ SELECT * FROM users WHERE id = {}",
      "SELECT * FROM users WHERE id = {} -- splitpoint: key={}",
  };
  const std::vector<std::vector<std::string>> values = {
      {"1", "2"},     {"42", "0"},       {"7", "1"},        {"123456789012", "5"}, {"2500", "1999"},
      {"0", "1"},     {"99", "100"},     {"1000", "999"},   {"-3", "4"},           {"17", "31"},
      {"jp", "eu"},   {"us", "fr"},      {"1e3", "5"},      {"0042", "42"},        {"it''s", "x"},
      {"abc", "1.5"}, {"2147483648", "3"},
  };
  for (const char* tmpl : templates) {
    for (const auto& v : values) {
      std::vector<std::string> vals = v;
      // The shard hint must name a configured shard to be a fair comparison either way.
      if (std::string_view(tmpl).find("shard=s{}") != std::string_view::npos) vals[0] = vals[0] == "1" ? "1" : "0";
      const std::string sql = fill(tmpl, vals);
      INFO(sql);
      Route hit = cached.simple(sql);
      Route exact = fresh.prepared(sql);
      check_same(hit, exact);
    }
  }
}

TEST_CASE("typical statements are cacheable, their keys read from literal slots", "[router][cache]") {
  splitpoint::config::Config config = load_config();
  Topology topo(config);
  struct Case {
    const char* sql;
    std::size_t slots;  // literals the plan reads its keys from
  } cases[] = {{"SELECT * FROM users WHERE id = 42", 1},
               {"SELECT * FROM users WHERE id = -42", 1},
               {"SELECT * FROM users WHERE id IN (1, '2', E'3', $$4$$)", 4},
               {"INSERT INTO users (id, name) VALUES (1, 'a'), (2, 'b')", 2},
               {"SELECT * FROM events WHERE id BETWEEN 1 AND 5", 2},
               {"UPDATE users SET name = 'x' WHERE id = 5", 1},
               {"SELECT * FROM users WHERE id = ANY('{1,2}')", 1},
               {"BEGIN", 0},
               {"CREATE TABLE t (a int)", 0},
               {"SELECT 1", 0}};
  for (const Case& c : cases) {
    const char* sql = c.sql;
    INFO(sql);
    std::shared_ptr<Plan> plan = analyze(sql, {}, topo);
    CHECK(plan->cacheable);
    ScannedText scan;
    REQUIRE(scan_text(sql, scan));
    std::shared_ptr<Plan> shared = with_literal_slots(*plan, sql, scan);
    REQUIRE(shared);
    CHECK(shared->slots_used.size() == c.slots);
  }
  // Not cached: errors, splitpoint.* values, keys whose literal the scanner cannot read exactly.
  for (const char* sql : {"SELEC 1", "SET splitpoint.deadline = '1s'", "SELECT * FROM users WHERE id = 'a'\n'b'",
                          "SELECT * FROM users WHERE id = E'\\x41'", "SELECT * FROM users WHERE id = 007"}) {
    INFO(sql);
    std::shared_ptr<Plan> plan = analyze(sql, {}, topo);
    ScannedText scan;
    scan_text(sql, scan);
    CHECK((!plan->cacheable || with_literal_slots(*plan, sql, scan) == nullptr));
  }
}

TEST_CASE("the plan cache stays within its byte budget", "[router][cache]") {
  splitpoint::config::Config config = load_config();
  Topology topo(config);
  const std::size_t budget = 64 * 1024;
  PlanCache cache(budget);
  std::shared_ptr<Plan> plan = analyze("SELECT * FROM users WHERE id = 1", {}, topo);
  for (int i = 0; i < 5000; ++i) {
    std::string key = "select * from t" + std::to_string(i) + " where id = \0";
    cache.insert(key, std::hash<std::string>{}(key), plan);
    CHECK(cache.bytes() <= budget);
  }
  CHECK(cache.entries() > 10);
  // Recently used entries survive; the oldest went first.
  std::string last = "select * from t4999 where id = \0";
  CHECK(cache.find(last, std::hash<std::string>{}(last)) != nullptr);
  std::string first = "select * from t0 where id = \0";
  CHECK(cache.find(first, std::hash<std::string>{}(first)) == nullptr);
}

TEST_CASE("route_simple from several threads", "[router][cache]") {
  Fixture f;
  std::vector<std::size_t> expect(500);
  for (int k = 0; k < 500; ++k) expect[k] = user_shard(std::to_string(k));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (int k = 0; k < 500; ++k) {
          Route r = f.router.route_simple(
              (t % 2 ? "select * from users where id = " : "SELECT * FROM users WHERE id = ") + std::to_string(k),
              f.session, f.lookup);
          if (r.shards != std::vector<std::size_t>{expect[k]}) ++wrong;
        }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("mutated statements never crash and the cache agrees with a fresh parse", "[router][cache]") {
  Fixture cached, fresh;
  const std::vector<std::string> seeds = {
      "SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = 42 AND o.total > 5",
      "INSERT INTO users (id, name) VALUES (1, 'a'), (2, E'b\\'c'), (3, $$d$$) ON CONFLICT DO NOTHING",
      "WITH x AS (SELECT * FROM orders WHERE user_id IN (1, 2)) SELECT * FROM x WHERE user_id = -3",
      "UPDATE users SET name = 'x' WHERE id = ANY('{1,2,3}') /* splitpoint: key=5 */",
      "SELECT * FROM events WHERE id BETWEEN 1 AND 1500 OR id >= 3000; SELECT 1",
      "DELETE FROM stores WHERE region = 'jp' -- splitpoint: shard=s1\n RETURNING *",
  };
  std::uint32_t seed = 12345;
  auto rnd = [&](std::uint32_t n) {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 8) % n;
  };
  const std::string alphabet = " '\"$-/*;(),=0123456789abcxyzEIN\\{}";
  for (int i = 0; i < 3000; ++i) {
    std::string sql = seeds[rnd(static_cast<std::uint32_t>(seeds.size()))];
    for (int m = 0, n = 1 + static_cast<int>(rnd(3)); m < n; ++m) {
      std::size_t at = rnd(static_cast<std::uint32_t>(sql.size()));
      switch (rnd(3)) {
        case 0: sql[at] = alphabet[rnd(static_cast<std::uint32_t>(alphabet.size()))]; break;
        case 1: sql.erase(at, 1 + rnd(4)); break;
        default: sql.insert(at, 1, alphabet[rnd(static_cast<std::uint32_t>(alphabet.size()))]); break;
      }
    }
    INFO(sql);
    Route a = cached.simple(sql);
    Route b = fresh.prepared(sql);
    CHECK(a.kind == b.kind);
    CHECK(a.shards == b.shards);
    CHECK(a.message == b.message);
    CHECK(a.per_shard_sql == b.per_shard_sql);
  }
}

TEST_CASE("statements of different shapes, interleaved, route as each does alone", "[router][cache]") {
  // An evaluation keeps its working sets from one statement to the next on its thread
  // (routing/evaluate.cpp): what one statement left there must not leak into the next.
  Fixture cached;
  Fixture fresh;
  const char* templates[] = {
      "SELECT * FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = {}",
      "SELECT * FROM users WHERE id = {}",
      "SELECT * FROM users WHERE id = {} OR id = {}",
      "SELECT * FROM events WHERE id BETWEEN {} AND {}",
      "INSERT INTO users (id, name) VALUES ({}, 'x'), ({}, 'y')",
      "SELECT * FROM users WHERE name = '{}'",
      "SELECT * FROM stores WHERE region = '{}'",
      "SELECT 1",
  };
  const std::vector<std::vector<std::string>> values = {{"1", "2"}, {"42", "0"}, {"-3", "4"}, {"1000", "999"}, {"jp", "eu"}};
  for (int round = 0; round < 3; ++round)
    for (const auto& v : values)
      for (const char* tmpl : templates) {
        const std::string sql = fill(tmpl, v);
        INFO(sql);
        check_same(cached.simple(sql), fresh.prepared(sql));
      }
}

TEST_CASE("hot-key statistics see an integer key in one form", "[router][cache]") {
  Fixture f;
  const std::pair<const char*, const char*> cases[] = {
      {"SELECT * FROM users WHERE id = 42", "42"},        {"SELECT * FROM users WHERE id = '0042'", "42"},
      {"SELECT * FROM users WHERE id = '+42'", "42"},     {"SELECT * FROM users WHERE id = ' 42 '", "42"},
      {"SELECT * FROM users WHERE id = -42", "-42"},      {"SELECT * FROM users WHERE id = -0", "0"},
      {"SELECT * FROM users WHERE id = '-007'", "-7"},    {"SELECT * FROM users WHERE id = 0", "0"},
  };
  for (int round = 0; round < 2; ++round)  // the second time from the cache
    for (const auto& [sql, key] : cases) {
      INFO(sql);
      CHECK(f.simple(sql).key_values == std::vector<std::string>{key});
    }
}
