// The frontend bookkeeping of one client session, with no I/O: what the current
// backend still owes the client and in which order (the expected-answer queue), the
// client's prepared statements, the transaction status the client was told,
// PostgreSQL's "after an error, skip until Sync" rule, and the session settings the
// proxy replays on every backend it hands the client. Session (server/session/session.hpp)
// tells it what it sent (Expect entries) and feeds it every backend message
// (on_backend); it answers whether the message reaches the client and what finished.
// Like Envoy's PostgreSQL decoder it knows nothing of sockets: it is unit tested in
// tests/unit/server/frontend_test.cpp (pipelines, errors mid-batch, injected
// statements, COPY IN), and linked into unit_tests without the rest of server/.
//
// Wire details: https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-EXT-QUERY
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "routing/router.hpp"
#include "routing/session_command.hpp"
#include "server/state/metrics.hpp"

namespace splitpoint::server {

// SET script hashes (BackendState::applied_state). Fresh backends run with their own
// defaults (kStateDefault): a session with no SETs needs no reset.
inline constexpr std::uint64_t kStateDefault = 0;
inline constexpr std::uint64_t kStateUnknown = ~std::uint64_t{0};

// The named statements one backend connection holds (server-side names), with when
// each was made and last used. At most `max_prepared_statements` are kept: before one
// more is made, the least recently used are closed there (make_room). A portal made
// from a closed statement goes on (PostgreSQL 15 keeps its plan, whatever the protocol
// documentation says), and a Bind sent before the Close runs before it.
class ServerStatements {
 public:
  using Clock = std::chrono::steady_clock;

  bool has(const std::string& name) const { return held_.count(name) > 0; }
  std::size_t size() const { return held_.size(); }
  // When the proxy made it here; nullopt when it is not held.
  std::optional<Clock::time_point> made_at(const std::string& name) const;
  // A Bind or Describe of it sent now; false (and nothing noted) when it is not held.
  bool use(const std::string& name);
  // Its Parse sent now.
  void made(const std::string& name);
  void erase(const std::string& name) { held_.erase(name); }
  void clear() { held_.clear(); }
  // Names to Close before one more statement is made, so that at most `limit` are held
  // (0: no limit), least recently used first; forgotten here.
  std::vector<std::string> make_room(std::size_t limit);
  // A Close of it that the connection skipped (an error earlier in its batch): still
  // held, as if unused since it was made.
  void kept(const std::string& name) { held_.try_emplace(name); }

 private:
  struct Use {
    std::uint64_t last = 0;  // tick_ of its last use
    Clock::time_point made{};
  };
  std::unordered_map<std::string, Use> held_;
  std::uint64_t tick_ = 0;
};

// A backend connection's protocol state, as the bookkeeping sees it (Backend adds the
// socket and its buffers).
struct BackendState {
  char status = 'I';  // transaction status of the last ReadyForQuery
  // Inside the session's transaction: how many of its savepoints (ShardTransaction::
  // savepoints, from the outermost) this connection has; 0 outside a transaction.
  std::size_t savepoints = 0;
  // Session state last applied (hash of the session's SET script); 0 = unknown.
  std::uint64_t applied_state = 0;
  // Set when a session-mode client left it: the next user runs DISCARD ALL first.
  bool needs_discard = false;
  // The prepared statements this connection holds, under their server-side names.
  ServerStatements prepared;
  // SQL-level prepared statements here (PREPARE name): name -> which PREPARE it was
  // (SqlPrepared::token), so another session's statement of the same name is replaced.
  std::unordered_map<std::string, std::uint64_t> sql_prepared;
  // Which session's unnamed statement is currently parsed here: (session id, parse seq).
  std::pair<std::uint64_t, std::uint64_t> unnamed_owner{0, 0};
};

// A statement of a Query that changes session state, replayed on other backends.
struct SessionCmd {
  routing::SessionCommand kind = routing::SessionCommand::none;
  std::string name;  // SET/RESET: the parameter
  std::string text;  // the statement itself
};

// A SQL-level prepared statement (PREPARE name AS ...), re-prepared on each backend
// an EXECUTE of it lands on.
struct SqlPrepared {
  std::string name;
  std::string text;                           // the client's PREPARE statement
  std::shared_ptr<const routing::Plan> plan;  // of its query, to route EXECUTE
  std::uint64_t token = 0;                    // unique per PREPARE in the process
};

// A cursor over several shards, held by the proxy (server/session/execute/cursor.cpp).
struct ProxyCursor {
  std::string description;        // its RowDescription message (a portal's: if Describe asked for it)
  std::vector<std::string> rows;  // its DataRow messages
  std::size_t position = 0;       // PostgreSQL's: 0 before the first row, rows + 1 after the last
  bool hold = false;              // WITH HOLD: outlives its transaction
};

// A client's prepared statement, kept across backends under a server-side name.
struct Prepared {
  std::string server_name;  // empty for the unnamed statement
  std::string parse_rest;   // Parse body after the name: query + parameter types
  std::vector<std::int32_t> param_types;  // the types in parse_rest, decoded
  std::shared_ptr<const routing::Plan> plan;
  std::uint64_t parse_seq = 0;  // distinguishes re-Parses of the same name
  std::chrono::steady_clock::time_point parsed_at{};  // when the client sent the Parse
  std::string_view query() const { return std::string_view(parse_rest.c_str()); }
};

// One response the current backend owes, in order: ParseComplete '1', BindComplete
// '2', CloseComplete '3', or ReadyForQuery 'Z' (for a Sync or a Query).
struct Expect {
  char type = 'Z';
  bool swallow = false;  // injected by the proxy: the client never sees the response
  bool failed = false;   // an ErrorResponse arrived for this Sync/Query
  std::string name;      // Parse, Close: server statement name
  std::string text;      // client's Parse: its name
  std::vector<SessionCmd> commands;  // Query: the SET/RESET/DISCARD... statements in it
  // 'Z' of a Query sent while an extended batch was open (no Sync yet): PostgreSQL
  // skips that Query when the batch fails.
  bool query_in_batch = false;
  bool is_sync = false;         // 'Z' of a Sync (PostgreSQL ignores Syncs during COPY IN)
  std::uint64_t parse_seq = 0;  // client's Parse: which Parse of that name it was
  // Sync/Query: when the statement started and how it was routed (metrics).
  std::chrono::steady_clock::time_point started{};
  RouteLabel route = RouteLabel::single;
  // A write's Query 'Z' or Bind '2': the partitions its rows are counted in.
  RowShares rows;
  // Query 'Z' of a PREPARE: the statement, kept once it succeeded.
  std::optional<SqlPrepared> sql_prepare;
};

class Frontend {
 public:
  // What one backend message means for the client.
  struct Verdict {
    bool to_client = true;
    bool unexpected = false;      // not what the queue expected (a bug: logged)
    bool injected_failed = false;  // a statement the proxy injected failed (logged)
    bool client_error = false;     // an ErrorResponse the client sees (counted)
    bool count_tag = false;        // a CommandComplete of the client's (rows written)
    // ReadyForQuery of the client's Sync/Query: when it started and how it was routed.
    bool finished = false;
    std::chrono::steady_clock::time_point started{};
    RouteLabel route = RouteLabel::single;
    bool idle = false;  // ...and the transaction ended: apply pending_commands, reset it
  };

  // A message from the current backend `b` (type and body, framing already checked).
  Verdict on_backend(char type, std::string_view body, BackendState& b);

  // After an error PostgreSQL skips everything up to the next Sync: those answers never
  // come. A client Parse that was skipped created nothing. On an error the Queries sent
  // inside the failed batch are skipped too.
  void drop_until_sync(bool error, BackendState& b);

  // The proxy found an error itself inside a block: the backends do not know, so the
  // proxy answers until ROLLBACK/COMMIT.
  void fail_block() {
    client_txn = 'E';
    proxy_failed_txn = true;
  }
  // DEALLOCATE ALL / DISCARD ALL: no prepared statement is left, here or on `b`.
  void forget_prepared(BackendState& b);

  std::deque<Expect> expect;                                  // what the backend owes, in order
  std::unordered_map<std::string, Prepared> prepared;         // "" = the unnamed statement
  std::unordered_map<std::string, SqlPrepared> sql_prepared;  // PREPARE name
  std::unordered_map<std::string, ProxyCursor> cursors;       // DECLARE over several shards
  // Portals of reads of several shards executed with a row limit (Execute max_rows):
  // their rows, handed out an Execute at a time (server/session/execute/cursor.cpp). They end at the
  // Sync of their implicit transaction, with their block, or at Close.
  std::unordered_map<std::string, ProxyCursor> portals;
  std::uint64_t unnamed_seq = 0;
  std::uint64_t parse_seq = 0;
  char client_txn = 'I';  // status reported in ReadyForQuery
  bool proxy_failed_txn = false;
  bool skip_until_sync = false;  // after an error found by the proxy in an extended batch
  bool batch_failed = false;     // an error went to the client since its last Sync
  // An error of the batch the client is still sending (no Sync of it seen yet): as
  // PostgreSQL, what it sends until its Sync is skipped (Session::handle_frame).
  bool open_batch_failed = false;
  bool copy_in = false;          // an extended-protocol COPY FROM STDIN is running
  bool sent_after_sync = false;  // messages sent since the last Sync/Query
  bool last_tag_rollback = false;
  RowShares portal_rows;  // the write portal whose BindComplete came last
  std::vector<SessionCmd> pending_commands;  // completed inside a transaction
  std::vector<SessionCmd> batch_commands;    // Bound in this extended batch, for its Sync
  // A portal the proxy answers itself (an extended-protocol COMMIT/ROLLBACK, SET / RESET
  // / SHOW splitpoint.*): what its Describe (empty: NoData) and Execute answer.
  struct LocalPortal {
    std::string name;
    std::string description;  // a RowDescription message, or empty
    std::string rows;         // DataRow (and NoticeResponse) messages before the tag
    std::string tag;
    std::string error;  // an ErrorResponse body: Execute answers it instead of the tag
  };
  std::optional<LocalPortal> local_portal;

 private:
  Verdict on_ready_for_query(std::string_view body, BackendState& b);
  // Output of a Query the proxy sent itself (state replay, BEGIN): never the client's.
  bool in_injected_query() const {
    return !expect.empty() && expect.front().type == 'Z' && expect.front().swallow && !expect.front().is_sync;
  }
};

// The values the proxy drew for a session (server/session/keys.cpp) stand in for its own
// nextval calls: `SELECT currval(...)` / `SELECT lastval()` return them (the text
// rewritten to give them, on the shard the read goes to), until the session's own
// sequence calls, or a write that may call nextval on a shard, take over.
struct DrawnValues {
  std::vector<std::pair<std::string, std::string>> last_of;  // sequence (regclass text), its last value
  std::optional<std::string> lastval;
};

// The session's settings, carried to every backend it uses: the client's startup
// parameters and SETs as one script (replayed when a backend's applied_state differs
// from `hash`), the proxy's own (SET splitpoint.*), and the sequence state it keeps for
// the session (DrawnValues).
struct ClientSettings {
  std::vector<std::pair<std::string, std::string>> startup;  // replayed as set_config
  std::vector<std::pair<std::string, std::string>> sets;     // parameter -> SET statement
  std::string script;
  std::uint64_t hash = kStateDefault;
  std::vector<std::pair<std::string, std::string>> local;      // SET splitpoint.*
  std::vector<std::pair<std::string, std::string>> local_txn;  // SET LOCAL splitpoint.*
  routing::SessionRouting routing;  // what the proxy's own reading of SQL depends on
  DrawnValues drawn;                // currval/lastval of the values the proxy drew
  // A statement left state on a backend that cannot be replayed on another (temporary
  // tables, LISTEN, advisory locks: route.pins_session), in either pool mode: losing
  // that backend is the client's error, as losing its server would be.
  bool unreplayable = false;

  // The commands of a finished transaction; true if one reset the backend (RESET ALL,
  // DISCARD ALL, RESET of a startup parameter), which then has its own defaults, not
  // the client's: it gets the session's script again before its next statement.
  bool apply(std::vector<SessionCmd>& commands);
  void rebuild_script();
};

}  // namespace splitpoint::server
