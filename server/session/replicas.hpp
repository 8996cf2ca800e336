// Which host of a shard runs a session's statement (replicas.cpp, SPEC §10): standbys
// for reads when `reads: replica` allows it and the standby is recent enough (within
// max_replica_lag and past this session's own writes there: read-your-writes), else
// the primary, followed through a failover; and the pool a backend goes back to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "routing/router.hpp"
#include "server/net/asio.hpp"
#include "server/net/pool.hpp"
#include "server/state/hosts.hpp"
#include "server/state/metrics.hpp"

namespace splitpoint::server {

class Session;
class Backend;

class HostChoice {
 public:
  explicit HostChoice(Session& s) : s_(s) {}

  // The standby that runs this read on `shard`; nullopt: the primary.
  awaitable<std::optional<std::size_t>> read_host(std::size_t shard, const routing::Route& route);
  std::shared_ptr<Pool> pool_on(std::size_t shard, std::size_t host);
  // Back to the pool of the host it came from.
  void give_back(std::size_t shard, std::unique_ptr<Backend> b, bool reusable);
  // A statement that may write (or commit) goes to `shard`'s primary: the next standby
  // read there must have replayed past it (inline, after Session: session.hpp).
  void may_write_on(std::size_t shard);
  void host_failed(std::size_t shard, std::size_t host, BanReason why);
  std::string host_label(std::size_t shard, std::size_t host) const;  // "host:port"
  // After pump_.use_shard(): counts the statement's target (queries_total{target}).
  void count_target(RouteLabel label);
  // `standby` is reset when the standby could not be reached (the primary answers).
  awaitable<AcquireResult> acquire_backend(std::size_t shard, std::optional<std::size_t>& standby);
  // The session's shards: `n` of them, or renumbered by DROP SHARD (`to[i]`: shard i's
  // new number, nullopt when it was dropped).
  void resize(std::size_t n) { ryw_.resize(n); }
  void renumber(const std::vector<std::optional<std::size_t>>& to, std::size_t n);
  // The shard a statement any shard can answer goes to: the current or a held one, SET
  // splitpoint.shard's, a block's combine shard, else the next in turn.
  std::size_t pick_any_shard();

 private:
  bool reads_from_standby(const routing::Route& route) const;  // hint > SET splitpoint.reads > config
  bool may_read_standby(std::size_t shard, const routing::Route& route) const;
  awaitable<bool> wait_for_primary(std::size_t shard);
  std::string no_primary_message(std::size_t shard) const;

  // Read-your-writes, per shard: the primary LSN a standby must have replayed before
  // it may answer this session, and whether the session used the primary since that
  // LSN was read (then it is read again before a standby read).
  struct ReadYourWrites {
    std::vector<std::uint64_t> lsn;
    std::vector<char> unknown;
    void resize(std::size_t n) {
      lsn.resize(n, 0);
      unknown.resize(n, 0);
    }
  };

  Session& s_;
  ReadYourWrites ryw_;
  std::size_t next_any_ = 0;
};

}  // namespace splitpoint::server
