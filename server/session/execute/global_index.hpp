// A session's global indexes (execute/global_index.cpp, SPEC §12): a read an index
// narrows runs on the shards of the keys it finds (Route::lookup); a write to a table
// with a global index: the statement, then the changes it logged applied to the
// index's entries, in one transaction (the proxy's own outside a block).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/framing.hpp"
#include "routing/router.hpp"
#include "server/net/asio.hpp"
#include "server/session/execute/scatter_request.hpp"

namespace splitpoint::server {

class Session;
struct IndexWrite;  // execute/global_index.cpp

class IndexMaintenance {
 public:
  explicit IndexMaintenance(Session& s) : s_(s) {}

  awaitable<void> route_through_index(routing::Route& route);
  awaitable<bool> indexed_write(const protocol::Frame& f, const routing::Route& route);
  // The same in the extended protocol: a Bind of such a write is a portal the proxy
  // answers (bind_scatter), and its Execute runs here; `req`: the statement and its
  // parameters. Outside a block the batch becomes one transaction to its Sync
  // (maintains_index: inline, after Session, session.hpp).
  bool maintains_index(const routing::Route& route) const;
  awaitable<bool> indexed_execute(const routing::Route& route, const ScatterRequest& req);
  // The index entries' own statements are running (not counted as the client's).
  bool applying() const { return applying_; }

 private:
  // This transaction's logged changes on the shards it is in, applied; the error (an
  // ErrorResponse body) that stopped them, or empty. `sql`: the statement that wrote
  // (its ON CONFLICT judged by a global unique index, a TRUNCATE); `answer`: its answer,
  // made what one PostgreSQL would have answered where an ON CONFLICT took rows back
  // (their value held on another shard) or updated the row holding it there instead.
  awaitable<std::string> apply_index_changes(std::string_view sql = {}, std::string* answer = nullptr);
  awaitable<std::string> read_index_changes(IndexWrite& w);
  awaitable<std::string> write_index_entries(IndexWrite& w, std::size_t index);
  // A claim refused for a row the statement inserted: the row taken back, and for DO
  // UPDATE the row holding the value updated instead.
  awaitable<std::string> resolve_conflict(IndexWrite& w, std::size_t index,
                                          const std::vector<std::optional<std::string>>& vals);
  awaitable<std::string> run_index_statement(const std::string& sql, std::size_t index, std::string* answer);

  Session& s_;
  // Inside indexed_write: the statement runs as any other; then its entries'
  // statements, not counted as the client's.
  bool maintaining_ = false, applying_ = false;
};

}  // namespace splitpoint::server
