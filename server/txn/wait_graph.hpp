// Deadlocks across shards (timeouts.deadlock; server/txn/deadlocks.hpp runs the search):
// the sessions' lock waits on every shard, joined into one graph of sessions. Pure: no
// I/O, tested on its own.
//
// PostgreSQL finds a deadlock inside one server. Two transactions that lock rows on two
// shards in opposite orders wait for each other with neither shard seeing a cycle: on
// each, the other half is idle in transaction. The proxy knows which backend serves which
// session on each shard, so each server's "process P waits for processes Q..." becomes
// "session A waits for session B there", and a cycle of sessions is a deadlock. Where
// each session of a cycle waits through the very process the previous one waits for,
// the cycle is one of processes on one server: that PostgreSQL sees it and breaks it
// itself (deadlock_timeout), so it is left alone. Processes are told apart by server
// (host:port) and process id: two shards on one PostgreSQL are one server. Sessions of
// other proxies (their transactions on several shards, published: server/txn/deadlocks.hpp)
// join the graph as this proxy's do; a process that is no known session's (a direct
// client's, another proxy's one-shard transaction) is a node of its own, so a chain of
// waits through it is followed too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace splitpoint::server::wait_graph {

// A backend a session holds: its shard, its server (host:port) and process id there,
// the session's transaction then (a number that changes when a transaction ends), and
// whose session it is ("" = this proxy's, else the other proxy's id). Session ids are
// 1 and up.
struct Held {
  std::uint64_t session = 0;
  std::uint64_t txn = 0;
  std::size_t shard = 0;
  std::string server;
  std::int32_t pid = 0;
  std::string proxy;
};

// What a server said about one process (of `shard`'s database): it waits for a lock
// that `blockers` hold or wait ahead of it for (pg_blocking_pids).
struct Wait {
  std::string server;
  std::int32_t pid = 0;
  std::vector<std::int32_t> blockers;
  std::size_t shard = 0;
};

// Session `waiter` waits on `shard` (`server`) for session `holder`: the waiter's
// process `waiter_pid` for the holder's `holder_pid`. Session 0 is a process that is no
// known session's (identified by its pid); the proxies are Held::proxy.
struct Edge {
  std::uint64_t waiter = 0, holder = 0;
  std::size_t shard = 0;
  std::string server;
  std::int32_t waiter_pid = 0, holder_pid = 0;
  std::string waiter_proxy, holder_proxy;
  bool operator==(const Edge&) const = default;
};

// Whether some session holds two backends or more: a cycle PostgreSQL cannot see passes
// through such a session (it waits through one process while the others wait for
// another), so without one there is nothing to look for.
bool some_session_on_several_backends(const std::vector<Held>& held);

// A cycle of waits between sessions that no PostgreSQL sees whole (above), each edge's
// holder the next edge's waiter, the last's the first's; empty if there is none.
// `max_steps` bounds the search (graphs here are small; a pathological one is left).
std::vector<Edge> find_cycle(const std::vector<Held>& held, const std::vector<Wait>& waits,
                             std::size_t max_steps = 100000);

// The cycle for the client and the log, one line per wait:
// `session 12 waits on shard "s1" (process 4567) for session 13 (process 4568)`; another
// proxy's session is `session 13 of proxy <id>`, a process no session's is `process 4568`.
std::string describe(const std::vector<Edge>& cycle, const std::vector<std::string>& shard_names);

}  // namespace splitpoint::server::wait_graph
