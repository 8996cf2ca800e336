// Cost of the metrics on the statement path (issue #5: updating metrics must not cost
// the hot path measurable throughput). What a single-shard statement does to the
// metrics, piece by piece and all together, on 1 and 2 threads that each own a worker's
// counters (as the proxy's worker threads do), next to a route-plan cache hit, the
// other per-statement work the proxy does; and what a scrape costs. Results and
// method: docs/performance.md, "Metrics cost".
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "routing/router.hpp"
#include "server/state/metrics.hpp"

using namespace splitpoint;

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
)";

constexpr std::size_t kWorkers = 2;

struct Setup {
  Setup()
      : config(*config::load_string(kConfig).config), router(config), topology(config), slots(topology),
        metrics(kWorkers, config, slots) {
    shapes["users"] = {{"id", "name"}, {"bigint", "text"}};
    lookup = [this](std::string_view t) -> const routing::TableShape* {
      auto it = shapes.find(std::string(t));
      return it == shapes.end() ? nullptr : &it->second;
    };
    for (int i = 0; i < 1024; ++i) {
      keys.push_back(std::to_string(i * 7919 + 13));
      texts.push_back("SELECT id, name FROM users WHERE id = " + keys.back());
    }
  }
  config::Config config;
  routing::Router router;
  routing::Topology topology;
  server::PartitionSlots slots;
  server::Metrics metrics;
  std::map<std::string, routing::TableShape> shapes;
  routing::ShapeLookup lookup;
  routing::SessionRouting session;
  std::vector<std::string> keys, texts;
};

Setup& setup() {
  static Setup s;
  return s;
}

// Each benchmark thread is one worker thread with its own counters.
server::WorkerMetrics& mine(const benchmark::State& state) {
  return setup().metrics.worker(static_cast<std::size_t>(state.thread_index()) % kWorkers);
}

constexpr auto kSingle = static_cast<std::size_t>(server::RouteLabel::single);

void BM_CounterAdd(benchmark::State& state) {
  auto& w = mine(state);
  for (auto _ : state) w.queries[kSingle].add();
}

void BM_HistogramObserve(benchmark::State& state) {
  auto& w = mine(state);
  double v = 0.0003;
  for (auto _ : state) {
    w.duration[kSingle].observe(v);
    v = v < 0.01 ? v * 1.5 : 0.0001;  // walk the buckets
  }
}

// observe_since as the proxy calls it: includes reading the clock.
void BM_HistogramObserveSince(benchmark::State& state) {
  auto& w = mine(state);
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) w.duration[kSingle].observe_since(start);
}

void BM_HotKeyOffer(benchmark::State& state) {
  auto& w = mine(state);
  auto& keys = setup().keys;
  std::size_t i = 0;
  for (auto _ : state) w.hot_key(0, keys[i++ & 1023]);
}

void BM_PartitionCounter(benchmark::State& state) {
  auto& s = setup();
  auto& w = mine(state);
  std::uint32_t p = 0;
  for (auto _ : state) {
    auto i = s.slots.slot(0, p++ & 63);
    w.partition_queries[i].add();
  }
}

// Everything one single-shard statement does to the metrics (Session::count_route,
// attach, the pump's ReadyForQuery, the client stream): queries_total, the partition
// counter, the hot-key offer, pool wait, statement and shard latency, bytes in and out,
// the active-client gauge up and down.
void statement_metrics(Setup& s, server::WorkerMetrics& w, std::size_t k) {
  auto started = std::chrono::steady_clock::now();
  w.queries[kSingle].add();
  auto i = s.slots.slot(0, static_cast<std::uint32_t>(k & 63));
  w.partition_queries[i].add();
  w.hot_key(0, s.keys[k & 1023]);
  w.shards[0].pool_wait.observe_since(started);
  w.clients_active.add(1);
  w.bytes_in.add(64);
  w.bytes_out.add(120);
  w.duration[kSingle].observe_since(started);
  w.shards[0].query.observe_since(started);
  w.clients_active.add(-1);
}

void BM_StatementMetrics(benchmark::State& state) {
  auto& s = setup();
  auto& w = mine(state);
  std::size_t k = 0;
  for (auto _ : state) statement_metrics(s, w, k++);
}

// For comparison: the route-plan cache hit every simple-protocol statement pays.
void BM_RouteCacheHit(benchmark::State& state) {
  auto& s = setup();
  std::size_t i = 0;
  for (auto _ : state) {
    auto r = s.router.route_simple(s.texts[i++ & 1023], s.session, s.lookup);
    benchmark::DoNotOptimize(r);
  }
}

void BM_RouteCacheHitPlusMetrics(benchmark::State& state) {
  auto& s = setup();
  auto& w = mine(state);
  std::size_t i = 0;
  for (auto _ : state) {
    auto r = s.router.route_simple(s.texts[i & 1023], s.session, s.lookup);
    benchmark::DoNotOptimize(r);
    statement_metrics(s, w, i++);
  }
}

// What per-worker counters avoid: one counter shared by every thread (a locked
// read-modify-write on a cache line that moves between cores).
std::atomic<std::uint64_t> shared_counter{0};
void BM_SharedAtomicCounter(benchmark::State& state) {
  for (auto _ : state) shared_counter.fetch_add(1, std::memory_order_relaxed);
}

// One scrape of /metrics (2 shards, 64 partitions, both workers summed), what the
// metrics thread does per GET; it never runs on a worker thread.
void BM_ScrapeRender(benchmark::State& state) {
  auto& s = setup();
  std::vector<server::PoolGauge> pools(2);
  pools[0].shard = "s0";
  pools[1].shard = "s1";
  for (auto _ : state) {
    auto text = s.metrics.render(s.config, s.slots, pools);
    benchmark::DoNotOptimize(text);
  }
}

}  // namespace

BENCHMARK(BM_CounterAdd)->Threads(1)->Threads(2);
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2);
BENCHMARK(BM_HistogramObserveSince)->Threads(1)->Threads(2);
BENCHMARK(BM_HotKeyOffer)->Threads(1)->Threads(2);
BENCHMARK(BM_PartitionCounter)->Threads(1)->Threads(2);
BENCHMARK(BM_StatementMetrics)->Threads(1)->Threads(2);
BENCHMARK(BM_RouteCacheHit)->Threads(1)->Threads(2);
BENCHMARK(BM_RouteCacheHitPlusMetrics)->Threads(1)->Threads(2);
BENCHMARK(BM_SharedAtomicCounter)->Threads(1)->Threads(2);
BENCHMARK(BM_ScrapeRender);

BENCHMARK_MAIN();
