#include "server/wait_graph.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace splitpoint::server::wait_graph {

bool some_session_on_several_backends(const std::vector<Held>& held) {
  std::set<std::uint64_t> seen;
  for (const Held& h : held)
    if (!seen.insert(h.session).second) return true;
  return false;
}

namespace {

using Graph = std::map<std::uint64_t, std::vector<Edge>>;  // by waiter, in session order

Graph edges_of(const std::vector<Held>& held, const std::vector<Wait>& waits) {
  std::map<std::pair<std::string, std::int32_t>, const Held*> owner;
  for (const Held& h : held) owner[{h.server, h.pid}] = &h;
  Graph g;
  for (const Wait& w : waits) {
    auto waiter = owner.find({w.server, w.pid});
    if (waiter == owner.end()) continue;
    for (std::int32_t b : w.blockers) {
      auto holder = owner.find({w.server, b});
      if (holder == owner.end() || holder->second->session == waiter->second->session) continue;
      Edge e{waiter->second->session, holder->second->session, waiter->second->shard, w.server, w.pid, b};
      auto& out = g[e.waiter];
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    }
  }
  return g;
}

// Some session of the cycle waits through another process than the one the previous
// session waits for.
bool hidden_from_postgres(const std::vector<Edge>& cycle) {
  for (std::size_t i = 0; i < cycle.size(); ++i) {
    const Edge& in = cycle[i];
    const Edge& out = cycle[(i + 1) % cycle.size()];
    if (in.server != out.server || in.holder_pid != out.waiter_pid) return true;
  }
  return false;
}

// Simple cycles through `start` over sessions numbered above it (each cycle is found
// once, from its smallest session), depth first; the first PostgreSQL cannot see.
struct Search {
  const Graph& g;
  std::uint64_t start;
  std::size_t steps_left;
  std::vector<Edge> path;
  std::set<std::uint64_t> on_path;

  bool from(std::uint64_t node) {
    auto it = g.find(node);
    if (it == g.end()) return false;
    for (const Edge& e : it->second) {
      if (steps_left == 0) return false;
      --steps_left;
      if (e.holder < start || on_path.count(e.holder)) {
        if (e.holder != start) continue;
        path.push_back(e);
        if (hidden_from_postgres(path)) return true;
        path.pop_back();
        continue;
      }
      path.push_back(e);
      on_path.insert(e.holder);
      if (from(e.holder)) return true;
      on_path.erase(e.holder);
      path.pop_back();
    }
    return false;
  }
};

}  // namespace

std::vector<Edge> find_cycle(const std::vector<Held>& held, const std::vector<Wait>& waits, std::size_t max_steps) {
  const Graph g = edges_of(held, waits);
  std::size_t steps = max_steps;
  for (const auto& [start, out] : g) {
    Search s{g, start, steps, {}, {start}};
    if (s.from(start)) return s.path;
    steps = s.steps_left;
    if (steps == 0) break;
  }
  return {};
}

std::string describe(const std::vector<Edge>& cycle, const std::vector<std::string>& shard_names) {
  std::string out;
  for (const Edge& e : cycle) {
    if (!out.empty()) out += '\n';
    const std::string shard = e.shard < shard_names.size() ? shard_names[e.shard] : std::to_string(e.shard);
    out += "session " + std::to_string(e.waiter) + " waits on shard \"" + shard + "\" (process " +
           std::to_string(e.waiter_pid) + ") for session " + std::to_string(e.holder) + " (process " +
           std::to_string(e.holder_pid) + ")";
  }
  return out;
}

}  // namespace splitpoint::server::wait_graph
