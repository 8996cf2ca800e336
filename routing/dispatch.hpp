// Which executor runs a routed statement, and in what order the proxy's special cases
// are tried (issue #46): decided here from the route alone, for the simple Query and
// the Bind alike, so that the session has one dispatch (server/session/route.cpp) and
// tests/unit/routing/dispatch_test.cpp pins the order.
//
// A statement's Steps are tried in order. Most steps answer the statement; those
// marked "may pass on" can find, with the session's state, that it is not theirs after
// all (a COMMIT of a block on one shard, a cursor on one shard, a sequence read with no
// key drawn), and the next step is tried. The last step is always one of the three
// ways to run it on shards: one_shard, scatter_read or several_shards.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "routing/router.hpp"

namespace splitpoint::routing {

enum class Executor : std::uint8_t {
  copy_in,         // COPY ... FROM STDIN into a sharded or reference table, split by key (CopyIn)
  transaction,     // BEGIN/COMMIT/ROLLBACK, two-phase commands, savepoints (may pass on)
  shard_error,     // a text PostgreSQL cannot parse: one shard reports it, with every field
  sequence_read,   // currval/lastval of keys the proxy drew (may pass on)
  generate_keys,   // an INSERT without its key: keys drawn, then a multi-shard write
  pull_insert,     // INSERT ... SELECT whose rows leave their shard: pulled through the proxy
  cursor,          // DECLARE/FETCH/MOVE/CLOSE over several shards (may pass on)
  reject,          // the router's refusal, or PostgreSQL's own error where it would refuse
  local,           // SET/SHOW/RESET splitpoint.*: answered by the proxy
  sql_execute,     // SQL EXECUTE: to the shard holding the statement (may pass on)
  deallocate,      // SQL DEALLOCATE of a statement no shard holds (may pass on)
  sql_prepare,     // SQL PREPARE of a name the client already has: 42P05 (may pass on)
  one_shard,       // one shard, or any one: the pump forwards it
  scatter_read,    // a read on several shards: ScatterRead (merge or combine step)
  several_shards,  // a write or utility statement on several shards (MultiShardWrite)
};
std::string_view executor_name(Executor e);

enum class Protocol : std::uint8_t { simple, extended };

class Steps {
 public:
  void add(Executor e) { steps_[n_++] = e; }
  const Executor* begin() const { return steps_.data(); }
  const Executor* end() const { return steps_.data() + n_; }
  std::size_t size() const { return n_; }
  Executor last() const { return steps_[n_ - 1]; }

 private:
  std::array<Executor, 16> steps_{};
  std::uint8_t n_ = 0;
};

// `shards`: how many shards the topology has.
Steps dispatch(const Route& route, std::size_t shards, Protocol protocol);

}  // namespace splitpoint::routing
