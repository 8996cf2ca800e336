#include "server/state/metrics.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <sstream>

#include "routing/topology.hpp"

namespace splitpoint::server {

namespace pm = prometheus;

void LocalHistogram::observe(double seconds) {
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  buckets_[i].add();
  count_.add();
  sum_.store(sum_.load(std::memory_order_relaxed) + seconds, std::memory_order_relaxed);
}

void LocalHistogram::observe_since(std::chrono::steady_clock::time_point start) {
  observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void WorkerMetrics::error(std::string_view sqlstate) {
  std::lock_guard lock(errors_mu);
  if (errors.size() < 256 || errors.count(std::string(sqlstate))) ++errors[std::string(sqlstate)];
  else ++errors["other"];
}

void WorkerMetrics::hot_key(std::size_t distribution, std::string_view key) {
  std::lock_guard lock(hot_mu);
  if (distribution < hot.size()) hot[distribution].add(key);
  if (distribution < trend.size()) trend[distribution].add(key);
}

std::uint64_t rows_written_by(std::string_view tag) {
  tag = tag.substr(0, tag.find('\0'));
  auto sp = tag.rfind(' ');
  if (sp == std::string_view::npos) return 0;
  auto verb = tag.substr(0, tag.find(' '));
  if (verb != "INSERT" && verb != "UPDATE" && verb != "DELETE" && verb != "MERGE" && verb != "COPY") return 0;
  std::uint64_t n = 0;
  auto digits = tag.substr(sp + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  return ec == std::errc() && end == digits.data() + digits.size() ? n : 0;
}

void WorkerMetrics::add_rows(const RowShares& shares, std::uint64_t rows) {
  if (rows == 0 || shares.empty()) return;
  if (shares.size() == 1) {
    if (shares[0].index < partition_writes.size()) partition_writes[shares[0].index].add(rows);
    return;
  }
  unsigned __int128 total = 0;
  for (auto& s : shares) total += s.weight;
  if (total == 0) return;
  std::vector<std::uint64_t> part(shares.size());
  std::vector<std::uint64_t> rest(shares.size());
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    unsigned __int128 x = static_cast<unsigned __int128>(rows) * shares[i].weight;
    part[i] = static_cast<std::uint64_t>(x / total);
    rest[i] = static_cast<std::uint64_t>(x % total);
    given += part[i];
  }
  // The rows left by rounding down go to the largest remainders, earlier shares first.
  std::vector<std::size_t> order(shares.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rest[a] > rest[b]; });
  for (std::size_t k = 0; given < rows && k < order.size(); ++k, ++given) ++part[order[k]];
  for (std::size_t i = 0; i < shares.size(); ++i)
    if (part[i] && shares[i].index < partition_writes.size()) partition_writes[shares[i].index].add(part[i]);
}

Metrics::Metrics(std::size_t workers, const config::Config& config, const PartitionSlots& slots) {
  for (std::size_t i = 0; i < workers; ++i)
    workers_.push_back(std::make_unique<WorkerMetrics>(slots.capacity(), config.distributions.size()));
}

RowShares Metrics::row_shares(const routing::Route& route, std::size_t shard, const routing::Topology& topo,
                              const PartitionSlots& slots) const {
  RowShares shares;
  // Tables of two distributions: which one was written is not known here.
  if (route.cls != routing::StatementClass::write || route.reference_write || !route.distribution) return shares;
  bool weighted = true;
  for (auto& hit : route.partitions) {
    if (hit.distribution >= topo.config().distributions.size() || topo.shard_of(hit.distribution, hit.partition) != shard)
      continue;
    auto i = slots.slot(hit.distribution, hit.partition);
    if (i == PartitionSlots::kNone) continue;
    shares.push_back({i, hit.rows});
    weighted = weighted && hit.rows > 0;
  }
  if (!weighted)
    for (auto& s : shares) s.weight = 1;
  if (shares.empty() && route.partitions.empty() && route.kind == routing::RouteKind::all_shards &&
      *route.distribution < topo.config().distributions.size()) {
    // UPDATE/DELETE without the key: its rows are somewhere in the shard's partitions.
    auto d = *route.distribution;
    for (std::uint32_t p = 0; p < topo.partition_count(d); ++p) {
      auto i = slots.slot(d, p);
      if (topo.shard_of(d, p) == shard && i != PartitionSlots::kNone) shares.push_back({i, 1});
    }
  }
  return shares;
}

namespace {

pm::ClientMetric::Label label(std::string name, std::string value) { return {std::move(name), std::move(value)}; }

pm::MetricFamily family(std::string name, std::string help, pm::MetricType type) {
  pm::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void add_counter(pm::MetricFamily& f, std::vector<pm::ClientMetric::Label> labels, double v) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = v;
  f.metric.push_back(std::move(m));
}

void add_gauge(pm::MetricFamily& f, std::vector<pm::ClientMetric::Label> labels, double v) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

// One histogram summed over several (every worker's, say).
pm::ClientMetric histogram_of(const std::vector<const LocalHistogram*>& parts, std::vector<pm::ClientMetric::Label> labels) {
  pm::ClientMetric m;
  m.label = std::move(labels);
  std::vector<std::uint64_t> counts(LocalHistogram::kBounds.size() + 1, 0);
  for (const LocalHistogram* h : parts) {
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += h->bucket(i);
    m.histogram.sample_count += h->count();
    m.histogram.sample_sum += h->sum();
  }
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    double bound = i < LocalHistogram::kBounds.size() ? LocalHistogram::kBounds[i]
                                                      : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  return m;
}

// Sums one histogram over every worker.
template <class Get>
pm::ClientMetric histogram(const std::vector<std::unique_ptr<WorkerMetrics>>& workers, Get get,
                           std::vector<pm::ClientMetric::Label> labels) {
  std::vector<const LocalHistogram*> parts;
  for (auto& w : workers) parts.push_back(&get(*w));
  return histogram_of(parts, std::move(labels));
}

const char* route_name(std::size_t r) {
  static const char* names[] = {"single", "multi", "all", "reference", "admin"};
  return names[r];
}

const char* reason_name(std::size_t r) {
  static const char* names[] = {"timeout", "error", "unreachable"};
  return names[r];
}

}  // namespace

// Sums a per-worker value over the workers.
template <typename Get>
double Metrics::sum(Get get) const {
  double v = 0;
  for (auto& w : workers_) v += static_cast<double>(get(*w));
  return v;
}

std::string Metrics::render(const config::Config& config, const PartitionSlots& slots,
                            const std::vector<PoolGauge>& pools, const MoveMetrics* moves) const {
  std::vector<pm::MetricFamily> out;
  render_connections(out, pools);
  render_statements(out, config);
  render_partitions(out, config, slots);
  render_totals(out);
  render_indexes(out, config);
  if (moves) render_moves(out, *moves);
  std::ostringstream text;
  pm::TextSerializer().Serialize(text, out);
  return text.str();
}

void Metrics::render_connections(std::vector<pm::MetricFamily>& out, const std::vector<PoolGauge>& pools) const {
  auto clients = family("splitpoint_client_connections", "Client connections by state.", pm::MetricType::Gauge);
  double total = sum([](auto& w) { return w.clients.get(); });
  double active = sum([](auto& w) { return w.clients_active.get(); });
  add_gauge(clients, {label("state", "active")}, active);
  add_gauge(clients, {label("state", "idle")}, total - active);
  out.push_back(std::move(clients));

  auto servers = family("splitpoint_server_connections", "Backend connections by shard and state.",
                        pm::MetricType::Gauge);
  auto waiting = family("splitpoint_pool_waiting_clients", "Clients queued for a backend connection.",
                        pm::MetricType::Gauge);
  for (auto& p : pools) {
    add_gauge(servers, {label("shard", p.shard), label("state", "idle")}, p.idle);
    add_gauge(servers, {label("shard", p.shard), label("state", "active")}, p.active);
    add_gauge(servers, {label("shard", p.shard), label("state", "opening")}, p.opening);
    add_gauge(waiting, {label("shard", p.shard)}, p.waiting);
  }
  out.push_back(std::move(servers));
  out.push_back(std::move(waiting));

  auto lag = family("splitpoint_replica_lag_seconds", "Replay lag of each standby, as the last health check saw it.",
                    pm::MetricType::Gauge);
  auto lag_bytes = family("splitpoint_replica_lag_bytes", "WAL bytes each standby's replay is behind its primary.",
                          pm::MetricType::Gauge);
  auto bans = family("splitpoint_host_bans_total", "Hosts banned after a failed check or connection, by reason.",
                     pm::MetricType::Counter);
  auto failovers = family("splitpoint_failovers_total", "Times a shard's primary moved to another host.",
                          pm::MetricType::Counter);
  for (auto& p : pools) {
    if (p.hosts.empty()) continue;
    add_counter(failovers, {label("shard", p.shard)}, static_cast<double>(p.failovers));
    for (auto& h : p.hosts) {
      const std::string host = h.host + ":" + std::to_string(h.port);
      if (h.role == "standby" && h.lag_s) add_gauge(lag, {label("shard", p.shard), label("host", host)}, *h.lag_s);
      if (h.role == "standby" && h.lag_bytes)
        add_gauge(lag_bytes, {label("shard", p.shard), label("host", host)}, static_cast<double>(*h.lag_bytes));
      for (std::size_t r = 0; r < kBanReasons; ++r)
        add_counter(bans, {label("shard", p.shard), label("host", host), label("reason", kBanReasonNames[r])},
                    static_cast<double>(h.bans[r]));
    }
  }
  out.push_back(std::move(lag));
  out.push_back(std::move(lag_bytes));
  out.push_back(std::move(bans));
  out.push_back(std::move(failovers));
}

// Statements by route, and per shard: latency, pool waits, connect errors, missing shards.
void Metrics::render_statements(std::vector<pm::MetricFamily>& out, const config::Config& config) const {
  auto queries = family("splitpoint_queries_total", "Statements by route.", pm::MetricType::Counter);
  auto duration = family("splitpoint_query_duration_seconds", "Statement latency through the proxy by route.",
                         pm::MetricType::Histogram);
  for (std::size_t r = 0; r < kRouteLabels; ++r) {
    const double replica = sum([r](auto& w) { return w.replica_queries[r].get(); });
    add_counter(queries, {label("route", route_name(r)), label("target", "primary")},
                sum([r](auto& w) { return w.queries[r].get(); }) - replica);
    add_counter(queries, {label("route", route_name(r)), label("target", "replica")}, replica);
    duration.metric.push_back(
        histogram(workers_, [r](const WorkerMetrics& w) -> const LocalHistogram& { return w.duration[r]; },
                  {label("route", route_name(r))}));
  }
  out.push_back(std::move(queries));
  out.push_back(std::move(duration));

  auto shard_q = family("splitpoint_shard_query_duration_seconds", "Time a shard took per statement.",
                        pm::MetricType::Histogram);
  auto pool_wait = family("splitpoint_pool_wait_seconds", "Time spent waiting for a backend connection.",
                          pm::MetricType::Histogram);
  auto connect_errors = family("splitpoint_server_connect_errors_total", "Failed connections to a shard.",
                               pm::MetricType::Counter);
  auto missing = family("splitpoint_scatter_missing_total", "Shards missing from multi-shard statements.",
                        pm::MetricType::Counter);
  for (std::size_t s = 0; s < config.shards.size() && s < kMaxShards; ++s) {
    const auto& name = config.shards[s].name;
    shard_q.metric.push_back(histogram(
        workers_, [s](const WorkerMetrics& w) -> const LocalHistogram& { return w.shards[s].query; },
        {label("shard", name)}));
    pool_wait.metric.push_back(histogram(
        workers_, [s](const WorkerMetrics& w) -> const LocalHistogram& { return w.shards[s].pool_wait; },
        {label("shard", name)}));
    add_counter(connect_errors, {label("shard", name)},
                sum([s](auto& w) { return w.shards[s].connect_errors.get(); }));
    for (std::size_t r = 0; r < kMissingReasons; ++r)
      add_counter(missing, {label("shard", name), label("reason", reason_name(r))},
                  sum([s, r](auto& w) { return w.shards[s].missing[r].get(); }));
  }
  out.push_back(std::move(shard_q));
  out.push_back(std::move(pool_wait));
  out.push_back(std::move(connect_errors));
  out.push_back(std::move(missing));
}

void Metrics::render_partitions(std::vector<pm::MetricFamily>& out, const config::Config& config,
                                const PartitionSlots& slots) const {
  auto pq = family("splitpoint_partition_queries_total", "Statements per logical partition.", pm::MetricType::Counter);
  auto pw = family("splitpoint_partition_writes_total", "Rows written per logical partition.", pm::MetricType::Counter);
  auto skew_f = family("splitpoint_partition_skew",
                       "Busiest partition's share of queries divided by an even share (1 = even).",
                       pm::MetricType::Gauge);
  for (auto& row : partitions(config, slots)) {
    auto p = std::to_string(row.partition);
    add_counter(pq, {label("distribution", row.distribution), label("partition", p)}, double(row.queries));
    add_counter(pw, {label("distribution", row.distribution), label("partition", p)}, double(row.writes));
  }
  for (std::size_t d = 0; d < config.distributions.size(); ++d)
    add_gauge(skew_f, {label("distribution", config.distributions[d].name)}, skew(config, slots, d));
  out.push_back(std::move(pq));
  out.push_back(std::move(pw));
  out.push_back(std::move(skew_f));
}

// Errors, bytes, combine steps, reloads, two-phase commits.
void Metrics::render_totals(std::vector<pm::MetricFamily>& out) const {
  auto errors = family("splitpoint_errors_total", "Errors sent to clients by SQLSTATE.", pm::MetricType::Counter);
  std::map<std::string, std::uint64_t> by_code;
  for (auto& w : workers_) {
    std::lock_guard lock(w->errors_mu);
    for (auto& [code, n] : w->errors) by_code[code] += n;
  }
  for (auto& [code, n] : by_code) add_counter(errors, {label("sqlstate", code)}, double(n));
  out.push_back(std::move(errors));

  auto bytes = family("splitpoint_bytes_total", "Bytes from (in) and to (out) clients.", pm::MetricType::Counter);
  add_counter(bytes, {label("direction", "in")}, sum([](auto& w) { return w.bytes_in.get(); }));
  add_counter(bytes, {label("direction", "out")}, sum([](auto& w) { return w.bytes_out.get(); }));
  out.push_back(std::move(bytes));

  auto combines = family("splitpoint_combines_total", "Multi-shard reads answered by the combine step (SPEC 4.1).",
                         pm::MetricType::Counter);
  add_counter(combines, {}, sum([](auto& w) { return w.combines.get(); }));
  out.push_back(std::move(combines));
  auto moved = family("splitpoint_combine_rows_total", "Partial rows the combine step moved to the combine database.",
                      pm::MetricType::Counter);
  add_counter(moved, {}, sum([](auto& w) { return w.combine_rows.get(); }));
  out.push_back(std::move(moved));

  auto reloads = family("splitpoint_config_reloads_total", "Configuration reloads by result.", pm::MetricType::Counter);
  add_counter(reloads, {label("result", "success")}, double(reloads_ok_.load()));
  add_counter(reloads, {label("result", "failure")}, double(reloads_failed_.load()));
  out.push_back(std::move(reloads));

  auto tpc = family("splitpoint_two_phase_total",
                    "Two-phase commits by outcome; recovered_*: prepared transactions resolved by recovery.",
                    pm::MetricType::Counter);
  static const char* const kOutcomes[kTwoPhaseOutcomes] = {"committed", "rolled_back", "unknown",
                                                            "recovered_committed", "recovered_rolled_back"};
  for (std::size_t i = 0; i < kTwoPhaseOutcomes; ++i)
    add_counter(tpc, {label("outcome", kOutcomes[i])}, double(two_phase_[i].load()));
  out.push_back(std::move(tpc));

  auto deadlocks = family("splitpoint_deadlocks_total",
                          "Deadlocks across shards the proxy broke by cancelling one session's statement (40P01).",
                          pm::MetricType::Counter);
  add_counter(deadlocks, {}, double(deadlocks_.load()));
  out.push_back(std::move(deadlocks));
}

void Metrics::render_indexes(std::vector<pm::MetricFamily>& out, const config::Config& config) const {
  if (config.indexes.empty()) return;
  auto lookups = family("splitpoint_index_lookups_total",
                        "Reads routed through a global index, by index and whether the lookup found a row.",
                        pm::MetricType::Counter);
  auto writes = family("splitpoint_index_entry_writes_total",
                       "Statements on global index entries (claims, inserts, deletes) made with their rows, by index.", pm::MetricType::Counter);
  for (std::size_t i = 0; i < config.indexes.size() && i < config::kMaxIndexes; ++i) {
    const auto& name = config.indexes[i].name;
    add_counter(lookups, {label("index", name), label("result", "found")},
                double(index_[i][static_cast<std::size_t>(IndexEvent::lookup_found)].load()));
    add_counter(lookups, {label("index", name), label("result", "empty")},
                double(index_[i][static_cast<std::size_t>(IndexEvent::lookup_empty)].load()));
    add_counter(writes, {label("index", name)}, double(index_[i][static_cast<std::size_t>(IndexEvent::entry_write)].load()));
  }
  out.push_back(std::move(lookups));
  out.push_back(std::move(writes));
}

std::vector<Metrics::PartitionRow> Metrics::partitions(const config::Config& config,
                                                       const PartitionSlots& slots) const {
  routing::Topology topo(config);
  std::vector<PartitionRow> rows;
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    for (std::uint32_t p = 0; p < topo.partition_count(d); ++p) {
      PartitionRow row{config.distributions[d].name, p, config.shards[topo.shard_of(d, p)].name};
      for (auto i : slots.slots(d, p)) {
        for (auto& w : workers_) {
          row.queries += w->partition_queries[i].get();
          row.writes += w->partition_writes[i].get();
        }
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

std::vector<Metrics::HotKeyRow> Metrics::hot_keys(const config::Config& config, std::size_t per_distribution) const {
  std::vector<HotKeyRow> rows;
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    std::unordered_map<std::string, HotKeys::Entry> merged;
    for (auto& w : workers_) {
      std::lock_guard lock(w->hot_mu);
      if (d >= w->hot.size()) continue;
      for (auto& e : w->hot[d].top()) {
        auto& m = merged[e.key];
        m.key = e.key;
        m.count += e.count;
        m.error += e.error;
      }
    }
    std::vector<HotKeys::Entry> v;
    for (auto& [k, e] : merged) v.push_back(e);
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.count > b.count || (a.count == b.count && a.key < b.key); });
    for (std::size_t i = 0; i < v.size() && i < per_distribution; ++i)
      rows.push_back({config.distributions[d].name, v[i].key, v[i].count, v[i].error});
  }
  return rows;
}

std::vector<Metrics::KeyTrendRow> Metrics::key_trends(const config::Config& config) const {
  std::vector<KeyTrendRow> rows;
  for (std::size_t d = 0; d < config.distributions.size(); ++d) {
    KeyTrendRow row{config.distributions[d].name};
    for (auto& w : workers_) {
      std::lock_guard lock(w->hot_mu);
      if (d >= w->trend.size() || w->trend[d].offers() == 0) continue;
      const KeyTrend& t = w->trend[d];
      if (row.offers == 0 || compare_keys(t.top(), row.top) > 0) row.top = t.top();
      row.offers += t.offers();
      row.rising += t.rising();
      row.sample.insert(row.sample.end(), t.sample().begin(), t.sample().end());
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

double Metrics::skew(const config::Config& config, const PartitionSlots& slots, std::size_t distribution) const {
  std::uint64_t total = 0, busiest = 0;
  std::size_t n = 0;
  for (auto& row : partitions(config, slots)) {
    if (row.distribution != config.distributions[distribution].name) continue;
    ++n;
    total += row.queries;
    busiest = std::max(busiest, row.queries);
  }
  if (total == 0 || n == 0) return 0;
  return static_cast<double>(busiest) / static_cast<double>(total) * static_cast<double>(n);
}

// SPEC §9: the catalog as this proxy last read it, and its own mover's work.
void Metrics::render_moves(std::vector<pm::MetricFamily>& out, const MoveMetrics& m) {
  auto epoch = family("splitpoint_topology_epoch", "Catalog epoch this proxy runs.", pm::MetricType::Gauge);
  add_gauge(epoch, {}, double(m.epoch.load()));
  out.push_back(std::move(epoch));
  auto proxies = family("splitpoint_proxies", "Proxies registered in the catalog, by lease state.", pm::MetricType::Gauge);
  add_gauge(proxies, {label("state", "live")}, double(m.proxies_live.load()));
  add_gauge(proxies, {label("state", "expired")}, double(m.proxies_expired.load()));
  out.push_back(std::move(proxies));
  auto moves = family("splitpoint_moves", "Partition moves in the catalog, by state.", pm::MetricType::Gauge);
  for (std::size_t i = 0; i < std::size(kMoveStates); ++i)
    add_gauge(moves, {label("state", kMoveStates[i])}, double(m.moves_by_state[i].load()));
  out.push_back(std::move(moves));
  auto lag = family("splitpoint_move_lag_bytes", "WAL each unfinished move's target has still to apply.",
                    pm::MetricType::Gauge);
  {
    std::lock_guard lock(m.lag_mu);
    for (const auto& [id, bytes] : m.lag_by_move) add_gauge(lag, {label("move", std::to_string(id))}, double(bytes));
  }
  out.push_back(std::move(lag));
  auto rows = family("splitpoint_move_rows_copied_total", "Rows copied by this proxy's moves.", pm::MetricType::Counter);
  add_counter(rows, {}, double(m.rows_copied.load()));
  out.push_back(std::move(rows));
  auto held = family("splitpoint_held_statements_total", "Statements that waited for a partition in cutover.",
                     pm::MetricType::Counter);
  add_counter(held, {}, double(m.held_statements.load()));
  out.push_back(std::move(held));
  auto holding = family("splitpoint_held_statements", "Statements held now for a partition in cutover.",
                        pm::MetricType::Gauge);
  add_gauge(holding, {}, double(m.holding.load()));
  out.push_back(std::move(holding));
  auto fence = family("splitpoint_fence_rejections_total",
                      "Writes a source shard's fence refused (SPM01 from the shard: a proxy on an old epoch).",
                      pm::MetricType::Counter);
  add_counter(fence, {}, double(m.fence_rejections.load()));
  out.push_back(std::move(fence));
  auto hold = family("splitpoint_cutover_hold_seconds", "How long each cutover held its partition.",
                     pm::MetricType::Histogram);
  auto h = histogram_of({&m.cutover_hold}, {});
  hold.metric.push_back(std::move(h));
  out.push_back(std::move(hold));
}

}  // namespace splitpoint::server
