// What a session does about the catalog (moves.cpp, SPEC §9): it follows the newest
// runtime (topology epoch) between transactions, holds statements for a partition in
// cutover, and reads the distribution's tables through views on shards that hold rows
// they do not own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/cluster/runtime.hpp"
#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;

// Whether the moves `view` shows hold a statement routed as `route` (a partition it
// goes to is in cutover, or the proxy lost its catalog lease): CatalogEpoch::wait_for_moves.
bool held_by_moves(const MoveView& view, const routing::Route& route);

// The catalog epoch a session's statements run under. The catalog acknowledges an
// epoch only once no statement of an older one runs: a read that began before a move's
// copy must not meet the copied rows without the view that hides them.
class CatalogEpoch {
 public:
  static constexpr std::int64_t kIdle = INT64_MAX;
  explicit CatalogEpoch(Session& s) : s_(s) {}

  // Between transactions: the newest runtime of this one's lineage (a catalog epoch).
  void follow_runtime();
  // The server's runtime generation when the session last followed it.
  std::uint64_t generation() const { return generation_; }
  // Before a statement reaches the shards (and again while it is held): marks it running
  // under the current epoch, then takes the newest moves (`view`, null if none).
  void take_moves();
  void statement_ended() { epoch.store(kIdle, std::memory_order_release); }
  // Waits while the statement is for a partition in cutover (or the lease lapsed), up
  // to moves.max_hold, then routes it `again` with the new placement. False: refused
  // (SPM01, or DDL during a move), the error sent. Call when take_moves found moves.
  awaitable<bool> wait_for_moves(routing::Route& route, bool extended, const std::function<routing::Route()>& again);
  // The text to send to `shard` so that it leaves out rows it holds but does not own;
  // nullopt: `sql` as it is.
  std::optional<std::string> hide_foreign_rows(std::size_t shard, const routing::Route& route, std::string_view sql) const;

  // The moves the running statement reads through (null: none), and the epoch it took
  // them under (read from any thread by Proxy::epoch_in_use; kIdle when none runs).
  std::shared_ptr<const MoveView> view;
  std::atomic<std::int64_t> epoch{kIdle};

 private:
  void renumber_shards(const Runtime& next);  // DROP SHARD: per-shard state by name

  Session& s_;
  std::uint64_t generation_ = 0;  // of the server's runtime when the session's was taken
};

}  // namespace splitpoint::server
