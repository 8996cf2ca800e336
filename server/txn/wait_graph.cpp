#include "server/txn/wait_graph.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace splitpoint::server::wait_graph {

bool some_session_on_several_backends(const std::vector<Held>& held) {
  std::set<std::pair<std::string, std::uint64_t>> seen;
  for (const Held& h : held)
    if (!seen.insert({h.proxy, h.session}).second) return true;
  return false;
}

namespace {

// A node: a session (proxy, session), or a process no session's (session 0, server, pid).
using Node = std::tuple<std::string, std::uint64_t, std::string, std::int32_t>;
Node waiter_of(const Edge& e) { return e.waiter ? Node{e.waiter_proxy, e.waiter, "", 0} : Node{"", 0, e.server, e.waiter_pid}; }
Node holder_of(const Edge& e) { return e.holder ? Node{e.holder_proxy, e.holder, "", 0} : Node{"", 0, e.server, e.holder_pid}; }

using Graph = std::map<Node, std::vector<Edge>>;  // by waiter, in node order

Graph edges_of(const std::vector<Held>& held, const std::vector<Wait>& waits) {
  std::map<std::pair<std::string, std::int32_t>, const Held*> owner;
  for (const Held& h : held) owner[{h.server, h.pid}] = &h;
  auto session = [&](const std::string& server, std::int32_t pid) {
    auto it = owner.find({server, pid});
    return it == owner.end() ? nullptr : it->second;
  };
  Graph g;
  for (const Wait& w : waits) {
    const Held* waiter = session(w.server, w.pid);
    for (std::int32_t b : w.blockers) {
      const Held* holder = session(w.server, b);
      Edge e{waiter ? waiter->session : 0, holder ? holder->session : 0, waiter ? waiter->shard : w.shard, w.server,
             w.pid, b, waiter ? waiter->proxy : "", holder ? holder->proxy : ""};
      if (waiter_of(e) == holder_of(e)) continue;
      auto& out = g[waiter_of(e)];
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

// Simple cycles through `start` over nodes ordered after it (each cycle is found once,
// from its first node), depth first; the first PostgreSQL cannot see.
struct Search {
  const Graph& g;
  Node start;
  std::size_t steps_left;
  std::vector<Edge> path;
  std::set<Node> on_path;

  bool from(const Node& node) {
    auto it = g.find(node);
    if (it == g.end()) return false;
    for (const Edge& e : it->second) {
      if (steps_left == 0) return false;
      --steps_left;
      const Node next = holder_of(e);
      if (next < start || on_path.count(next)) {
        if (next != start) continue;
        path.push_back(e);
        if (hidden_from_postgres(path)) return true;
        path.pop_back();
        continue;
      }
      path.push_back(e);
      on_path.insert(next);
      if (from(next)) return true;
      on_path.erase(next);
      path.pop_back();
    }
    return false;
  }
};

std::string session_label(std::uint64_t session, const std::string& proxy) {
  return "session " + std::to_string(session) + (proxy.empty() ? "" : " of proxy " + proxy);
}

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
    const std::string where = " waits on shard \"" + shard + "\"";
    if (e.waiter == 0)
      out += "process " + std::to_string(e.waiter_pid) + where;
    else
      out += session_label(e.waiter, e.waiter_proxy) + where + " (process " + std::to_string(e.waiter_pid) + ")";
    out += " for " + (e.holder == 0 ? "process " + std::to_string(e.holder_pid)
                                     : session_label(e.holder, e.holder_proxy) + " (process " +
                                           std::to_string(e.holder_pid) + ")");
  }
  return out;
}

}  // namespace splitpoint::server::wait_graph
