// The search for deadlocks across shards (timeouts.deadlock; the graph: wait_graph.hpp;
// docs/transactions.md).
//
// Every timeouts.deadlock, on the main worker: each worker lists the backends its
// sessions hold (Session::list_held, on the worker's thread: nothing on the sessions'
// path is locked or timed for it). When some session holds two or more:
//
// - each server those backends are on is asked which processes of its database wait
//   for a lock and for whom:
//
//     SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity
//     WHERE wait_event_type = 'Lock' AND datname = current_database()
//
// - if some process waits, the proxy publishes its sessions on several shards
//   (their backends: proxy id, session, transaction, shard name, pid, when it first saw
//   the transaction) in the unlogged table splitpoint_spanning_sessions on the first
//   shard and reads the other proxies' fresh rows, in one statement, then asks the
//   servers of their backends as well (a proxy that published and then sees no wait or
//   no session on several shards deletes its rows once; with no such session, a look
//   asks nothing of anyone);
//
// on a connection of the search's own, one per pool asked through (as the pool's user:
// pg_stat_activity shows a backend's wait only to its own user or a privileged one),
// kept while that pool is asked and closed after a minute unused. A session pool full
// of deadlocked sessions is why it is not taken from the pool.
//
// A cycle found is looked for again at once; if the second look finds the same one with
// every session still in the same transaction, the youngest session's wait (by when its
// proxy first saw its transaction; then the highest proxy id and session id: every
// proxy picks the same) is cancelled by its own proxy (Session::break_deadlock, on its
// thread: a CancelRequest, as a client's), and that session's client gets 40P01 instead
// of 57014, as PostgreSQL cancels the transaction that closed the cycle rather than one
// that waited longer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/net/asio.hpp"
#include "server/txn/wait_graph.hpp"

namespace splitpoint::server {

class Proxy;
class Session;
class Pool;
struct Worker;

namespace deadlocks {

// A backend a session holds (on its shard's primary), as Session::list_held lists it.
struct Holding {
  wait_graph::Held held;  // its `server` is filled in by the search (from the pool)
  std::shared_ptr<Pool> pool;
  std::weak_ptr<Session> session;
  Worker* worker = nullptr;
};

// The search's way to the sessions, which live above it (server/session/execute/
// deadlock.cpp gives these): list what the sessions of a worker hold, on that worker's
// thread; cancel a holding's wait on its session's thread (Session::break_deadlock).
struct SessionHooks {
  void (*list_held)(Worker& w, std::vector<Holding>& out);
  void (*break_deadlock)(const Holding& h, std::string detail);
};

// Runs until the proxy shuts down; does nothing while timeouts.deadlock is 0.
awaitable<void> search_loop(Proxy& proxy, SessionHooks hooks);

}  // namespace deadlocks
}  // namespace splitpoint::server
