// Routing speed (DESIGN.md convention 7, SPEC §3 "repeated statements must not pay for
// a full parse"): simple-protocol cache hits and misses, and prepared-plan routing.
// Target: a cache hit in at most 1 µs.
#include <benchmark/benchmark.h>

#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "routing/router.hpp"

using namespace splitpoint;
using namespace splitpoint::routing;

namespace {

constexpr const char* kConfig = R"(
shards:
  - name: s0
  - name: s1
distributions:
  - name: by_user
    method: hash
    partitions: 64
    tables:
      users: id
      orders: user_id
  - name: by_id_range
    method: range
    ranges:
      - { upto: 1000, shard: s0 }
      - { shard: s1 }
    tables:
      events: id
reference_tables: [countries]
)";

struct Setup {
  Setup() : config(*config::load_string(kConfig).config), router(config) {
    shapes["users"] = {{"id", "name"}, {"bigint", "text"}};
    shapes["orders"] = {{"id", "user_id", "total"}, {"bigint", "bigint", "numeric"}};
    shapes["events"] = {{"id", "payload"}, {"integer", "text"}};
    lookup = [this](std::string_view t) -> const TableShape* {
      auto it = shapes.find(std::string(t));
      return it == shapes.end() ? nullptr : &it->second;
    };
    for (int i = 0; i < 1024; ++i) keys.push_back(std::to_string(i * 7919 + 13));
  }
  config::Config config;
  Router router;
  std::map<std::string, TableShape> shapes;
  ShapeLookup lookup;
  SessionRouting session;
  std::vector<std::string> keys;
};

Setup& setup() {
  static Setup s;
  return s;
}

// Texts that differ only in literal values: one parse, then cache hits.
void hit(benchmark::State& state, const std::string& prefix, const std::string& suffix) {
  Setup& s = setup();
  std::vector<std::string> texts;
  for (const std::string& k : s.keys) texts.push_back(prefix + k + suffix);
  std::size_t i = 0;
  for (auto _ : state) {
    Route r = s.router.route_simple(texts[i++ & 1023], s.session, s.lookup);
    benchmark::DoNotOptimize(r);
  }
}

void BM_SimpleHit_Select(benchmark::State& state) { hit(state, "SELECT id, name FROM users WHERE id = ", ""); }
void BM_SimpleHit_Join(benchmark::State& state) {
  hit(state, "SELECT u.name, o.total FROM users u JOIN orders o ON o.user_id = u.id WHERE u.id = ",
      " ORDER BY o.id LIMIT 10");
}
void BM_SimpleHit_Update(benchmark::State& state) {
  hit(state, "UPDATE users SET name = 'x' WHERE id = ", " /* splitpoint: deadline=200ms */");
}
void BM_SimpleHit_Insert(benchmark::State& state) { hit(state, "INSERT INTO users (id, name) VALUES (", ", 'bob')"); }
void BM_SimpleHit_Range(benchmark::State& state) { hit(state, "SELECT * FROM events WHERE id BETWEEN 5 AND ", ""); }

// Every text a new shape (another alias): scan, parse, analysis, cache insert.
void BM_SimpleMiss_Select(benchmark::State& state) {
  Setup& s = setup();
  std::size_t i = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::string alias = "u" + std::to_string(i++);
    std::string sql = "SELECT " + alias + ".name FROM users " + alias + " WHERE " + alias + ".id = 42";
    state.ResumeTiming();
    Route r = s.router.route_simple(sql, s.session, s.lookup);
    benchmark::DoNotOptimize(r);
  }
}

// Extended protocol: the plan is made once at Parse; each Bind only routes.
void BM_Prepared_Route(benchmark::State& state) {
  Setup& s = setup();
  auto plan = s.router.plan("SELECT id, name FROM users WHERE id = $1", {});
  std::size_t i = 0;
  for (auto _ : state) {
    std::optional<std::string_view> v = std::string_view(s.keys[i++ & 1023]);
    BoundParams params{std::span(&v, 1), {}, {}};
    Route r = s.router.route(*plan, params, s.session, s.lookup);
    benchmark::DoNotOptimize(r);
  }
}

void BM_Prepared_Plan(benchmark::State& state) {
  Setup& s = setup();
  for (auto _ : state) {
    auto plan = s.router.plan("SELECT id, name FROM users WHERE id = $1", {});
    benchmark::DoNotOptimize(plan);
  }
}

}  // namespace

BENCHMARK(BM_SimpleHit_Select);
BENCHMARK(BM_SimpleHit_Join);
BENCHMARK(BM_SimpleHit_Update);
BENCHMARK(BM_SimpleHit_Insert);
BENCHMARK(BM_SimpleHit_Range);
BENCHMARK(BM_SimpleMiss_Select);
BENCHMARK(BM_Prepared_Route);
BENCHMARK(BM_Prepared_Plan);
BENCHMARK(BM_SimpleHit_Select)->Threads(4);

BENCHMARK_MAIN();
