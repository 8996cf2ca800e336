// Backend I/O for scatter-gather that does not depend on the session: acquiring the
// shards' connections together under the statement's deadline, and deciding at the
// deadline which shards had already sent their whole answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/framing.hpp"
#include "server/net/asio.hpp"
#include "server/net/pool.hpp"

namespace splitpoint::server {

// Acquires connections from several pools at once. An idle connection is taken at once
// (no coroutine: the usual case); the others each run as a coroutine bounded by the
// deadline (a connect to a stopped server does not hold up the others), and one still
// running when the caller stops waiting gives its connection back to the pool when it
// completes, so two scatter statements can never hold each other's connections for
// longer than their deadlines.
class ParallelAcquire {
 public:
  using Clock = std::chrono::steady_clock;
  ParallelAcquire(asio::any_io_executor ex, Clock::time_point deadline);
  ~ParallelAcquire();
  ParallelAcquire(const ParallelAcquire&) = delete;
  ParallelAcquire& operator=(const ParallelAcquire&) = delete;

  void start(std::size_t slot, std::shared_ptr<Pool> pool);
  // Returns once an acquisition has completed that was not taken yet, all have been
  // taken, or the deadline has passed.
  awaitable<void> wait();
  // The completed acquisition of `slot` (once), with how long it waited.
  std::optional<AcquireResult> take(std::size_t slot, Clock::duration& waited);
  // Acquisitions started and not completed yet.
  std::size_t pending() const;
  // Stops waiting for the rest; what they acquire later goes back to its pool.
  void abandon();

 struct State;  // shared with the acquisitions, which may outlive this object

 private:
  std::shared_ptr<State> st_;
};

// After a statement's deadline: reads what `b`'s socket already holds without waiting
// for the server (only briefly while more keeps arriving), and says whether b.read_buf
// (from offset `from`) now holds the rest of the response up to its `ready_frames`-th
// ReadyForQuery, with at most `max_rows` DataRows. A shard for which this is true has
// finished.
awaitable<bool> read_finished_response(Backend& b, std::size_t from, int ready_frames, std::uint64_t max_rows,
                                       const protocol::FrameLimits& limits);

// Runs one simple-protocol statement on `b` and returns its first row (nullopt if
// there was none or the connection failed).
awaitable<std::optional<std::vector<std::optional<std::string>>>> first_row_on(Backend& b, std::string_view sql,
                                                                               const protocol::FrameLimits& limits);

// The database's default collation as routing::Collation::named() takes it: the libc
// locale name (pg_database.datcollate), or "icu:<locale>" when the database's
// provider is ICU (PostgreSQL 15+, datlocprovider 'i'), from a row of
// kDatabaseCollationQuery.
extern const char* const kDatabaseCollationQuery;
std::string database_collation(const std::optional<std::vector<std::optional<std::string>>>& row);

}  // namespace splitpoint::server
