// One client connection: start-up and authentication, then routing each statement
// to the shard that owns its key and forwarding between the client and pooled
// backends. Two coroutines on the worker's thread share the state: the client loop
// (client -> backend) and, while a backend is current, the pump (backend -> client).
// Nothing here is touched from another thread except the cancel targets
// (CancelTargets, under its own mutex) and the epoch mark (CatalogEpoch::epoch).
//
// Session keeps the client loop, the dispatch and the state the hot path reads; its
// other concerns are parts of their own, each a class with its state, holding the
// session by reference (friends, as the executors are), declared next to their .cpp:
//
//   session.cpp            life cycle; Login (login.hpp): start-up, authentication,
//                          startup parameters; CancelTargets (cancel_targets.hpp)
//   route.cpp              the dispatch over routing::dispatch's steps, transactions,
//                          local commands (SET/SHOW splitpoint.*)
//   keys.cpp               generated keys and drawn values: KeyDrawing (keys.hpp)
//   moves.cpp              the catalog epoch followed, statements during a partition's
//                          move: CatalogEpoch (moves.hpp)
//   replicas.cpp           which host runs a statement: standbys for reads, the
//                          primary through a failover (SPEC §10): HostChoice (replicas.hpp)
//   texts.cpp              statement texts the proxy rewrites or builds
//   timeout.cpp            timeouts.query: a statement the current backend leaves
//                          unanswered is cancelled there, then its connection dropped:
//                          QueryTimeout (timeout.hpp)
//   pump.cpp               the single-shard forward: its executor, Pump (pump.hpp)
//   admin_console.cpp      the admin console (database "splitpoint"): admin_login, then
//                          its executor, AdminConsole (admin_console.hpp); the extended
//                          protocol of it in admin_extended.cpp
//   execute/               the executors of statements that are not one shard's:
//     forward.cpp          the client loop, prepared statements, backend state (SET
//                          replay, BEGIN on joining, SQL-level PREPARE)
//     two_phase.cpp        the transaction over shards, joining shards, two-phase commit
//                          as coordinator: ShardTransaction (execute/shard_transaction.hpp)
//     multi_shard_write.*  a write on several shards: MultiShardWrite
//     copy.cpp             COPY FROM STDIN split by key: CopyIn
//     insert_select.cpp    INSERT ... SELECT across shards
//     cursor.cpp           cursors over several shards
//     global_index.cpp     global indexes: IndexMaintenance (execute/global_index.hpp)
//     scatter.cpp          deadline and partial-result settings; hands a scatter read
//                          (execute/scatter_request.hpp) to its executor, ScatterRead
//                          (execute/scatter_read.hpp; its combine step in
//                          execute/scatter_combine.cpp)
//     rows.cpp             rows written per partition, from the shards' tags
//     deadlock.cpp         this session's side of the deadlock search (txn/deadlocks.hpp)
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/messages.hpp"
#include "routing/copy.hpp"
#include "routing/router.hpp"
#include "routing/session_command.hpp"
#include "server/net/asio.hpp"
#include "server/net/backend.hpp"
#include "server/txn/deadlocks.hpp"
#include "server/net/frontend.hpp"
#include "server/state/metrics.hpp"
#include "server/session/cancel_targets.hpp"
#include "server/session/execute/global_index.hpp"
#include "server/session/execute/scatter_request.hpp"
#include "server/session/execute/shard_transaction.hpp"
#include "server/session/keys.hpp"
#include "server/session/moves.hpp"
#include "server/session/pump.hpp"
#include "server/session/replicas.hpp"
#include "server/session/timeout.hpp"
#include "server/cluster/runtime.hpp"
#include "server/net/stream.hpp"

namespace splitpoint::server {

class Proxy;
class Catalog;
struct Worker;
class ScatterRead;
class CopyIn;

class Session : public std::enable_shared_from_this<Session> {
  // Executors of the session's statements: server/session/pump.hpp, server/session/execute/scatter_read.hpp,
  // server/session/execute/copy.cpp, server/session/execute/multi_shard_write.hpp, server/session/admin_console.hpp
  friend class ScatterRead;
  friend class CopyIn;
  friend class AdminConsole;
  friend class MultiShardWrite;
  friend class Pump;
  // Its parts: login.hpp, timeout.hpp, replicas.hpp, keys.hpp, moves.hpp,
  // execute/shard_transaction.hpp, execute/global_index.hpp
  friend class CatalogEpoch;
  friend class IndexMaintenance;
  friend class Login;
  friend class QueryTimeout;
  friend class HostChoice;
  friend class KeyDrawing;
  friend class ShardTransaction;

 public:
  Session(Proxy& server, Worker& worker, tcp::socket socket);
  ~Session();

  awaitable<void> run();

  // From any thread: a CancelRequest carrying this session's key arrived.
  void request_cancel(std::int32_t secret);        // sent in the background
  awaitable<void> forward_cancel(std::int32_t secret);  // sent, and answered by each shard
  // On this session's thread: the server is shutting down.
  void on_shutdown();

  // For SHOW CLIENTS, from any thread: fields fixed at login, plus whether a
  // statement is running.
  struct ClientInfo {
    std::uint64_t id = 0;
    std::string user, database, address, state;
    std::int64_t connected_unix = 0;
  };
  ClientInfo info() const;
  // The catalog epoch the running statement took its moves under (moves_.epoch, read
  // from any thread by Proxy::epoch_in_use); kIdle when none runs.
  static constexpr std::int64_t kIdle = CatalogEpoch::kIdle;
  // The deadlock search (server/txn/deadlocks.hpp), on this session's thread: the backends
  // it uses on its shards' primaries (held, or a running multi-shard read's), and
  // cancelling its wait on `shard` (backend `pid`, still in transaction `txn`) to break
  // a deadlock across shards; the client gets 40P01 with `detail` instead of 57014.
  void list_held(std::vector<deadlocks::Holding>& out);
  void break_deadlock(std::size_t shard, std::int32_t pid, std::uint64_t txn, std::string detail);

 private:
  static constexpr std::size_t kNoShard = ~std::size_t{0};

  // Results of a statement run by the proxy itself on one backend.
  struct Reply {
    std::string messages;  // RowDescription / DataRow / CommandComplete / notices as received
    std::string tag;       // CommandComplete tag (last)
    std::string error;     // ErrorResponse body, if any
    bool lost = false;     // connection broke
    bool truncated = false;  // more DataRows than run_on's max_rows came (not kept)
  };

  // ---- execute/forward.cpp
  awaitable<void> serve();
  void arm_idle_timer();
  bool in_use() const { return cur() || fe_.client_txn != 'I'; }  // a statement or a transaction: not idle
  awaitable<bool> handle_frame(const protocol::Frame& f);
  awaitable<bool> handle_describe(const protocol::Frame& f);
  awaitable<bool> handle_close(const protocol::Frame& f);
  awaitable<bool> handle_sync(const protocol::Frame& f);
  awaitable<bool> handle_execute(const protocol::Frame& f);
  awaitable<bool> protocol_violation(char type);  // FATAL 08P01, the session ends
  // Before the current backend changes inside an extended batch that wrote there.
  void leave_batch_shard(std::size_t shard);
  void forward_raw(const protocol::Frame& f, char expect);
  bool should_release() const;
  // Transaction pooling: the session keeps its backend to the end (LISTEN, temp tables:
  // state that lives on that backend). Session pooling keeps it anyway.
  void pin_backend() {
    pinned_ = pinned_ || runtime_->config.pool_mode == config::PoolMode::transaction;
    settings_.unreplayable = true;
  }
  // A backend held between transactions that the server closed meanwhile (restart,
  // pg_terminate_backend) goes back as broken, unless it held what cannot be replayed on
  // another; true when it did (execute/forward.cpp).
  bool drop_if_closed(std::size_t shard);
  void close_idle_connections_to(const std::string& database);
  std::size_t shard_to_prepare(const Prepared& p);
  void release_all(bool reusable);
  void release_shard(std::size_t shard, bool reusable);
  // A shard's transaction ended: back to the pool in transaction pooling (or when
  // broken); session pooling keeps it.
  void end_shard(std::size_t shard, bool ok);
  awaitable<void> detach_for_exit();
  Backend* cur() const { return cur_ == kNoShard ? nullptr : held_[cur_].get(); }
  // Inside a transaction block as the client sees it, including a BEGIN already sent
  // in this extended batch whose ReadyForQuery has not come back yet.
  bool in_transaction() const { return fe_.client_txn != 'I' || !txn_.begin_sql.empty(); }
  void ensure_prepared(const Prepared& p);
  void make_room(Backend& b);
  // Appends the Queries that bring backend `b` to this client's state before its
  // statement; returns how many (each owes a ReadyForQuery the client never sees).
  int sync_backend_state(Backend& b, std::string& out, bool join_transaction);
  // The shard takes part in the client's open transaction (BEGIN reached it).
  bool in_transaction_on(std::size_t shard) const { return held_[shard] && held_[shard]->status != 'I'; }
  // A CancelRequest for the statement backend `b` of `shard` runs, sent without waiting
  // for it (timeouts.query, a deadlock across shards).
  void cancel_statement_on(std::size_t shard, Backend& b);
  // ---- execute/deadlock.cpp: backend `b`'s 57014 after break_deadlock, as 40P01 (a
  // whole ErrorResponse) appended to `out`. False: not that backend or not a 57014.
  bool rewrite_deadlock_error(const Backend& b, std::string_view body, std::string& out);
  // An ErrorResponse body from backend `b` for an executor that reports it itself (a
  // write on several shards, a multi-shard read): as it came, or a deadlock victim's 40P01.
  std::string shard_error(const Backend& b, std::string_view body);
  std::vector<std::pair<std::size_t, Backend*>> backends_in_use();  // (shard, backend)
  void note_parameter_status(std::string_view body);     // one ParameterStatus body
  void note_parameter_statuses(std::string_view messages);  // whole messages, others skipped
  void apply_session_commands();

  // ---- execute/rows.cpp: rows written per partition, from the shards' CommandComplete
  RowShares row_shares(const routing::Route& route, std::size_t shard) const;
  void count_written(std::string_view tag);
  void count_reply_rows(const routing::Route& route, std::size_t shard, const Reply& reply);
  void count_copy_rows(std::size_t distribution, std::size_t shard, const std::vector<std::uint64_t>& partition_rows,
                       std::uint64_t rows);
  // ---- route.cpp
  void count_route(const routing::Route& route, RouteLabel label);
  static RouteLabel label_of(const routing::Route& route, bool multi);
  // handle_query and handle_bind: one dispatch each over routing::dispatch's steps.
  awaitable<bool> handle_query(const protocol::Frame& f);
  void before_shards(const routing::Route& route);
  awaitable<bool> run_query_on_shards(const protocol::Frame& f, routing::Route& route, std::string_view sql);
  awaitable<std::optional<bool>> transaction_control(const routing::Route& route, std::string_view sql);
  awaitable<bool> hold_begin(std::string_view sql, bool start);
  // An extended-protocol BEGIN that starts a batch is held as the simple one is.
  bool may_hold_begin(const routing::Route& route) const;
  awaitable<bool> hold_extended_begin(const routing::Route& route, std::string_view sql, std::string_view portal);
  // ROLLBACK TO / RELEASE SAVEPOINT on every shard that has the savepoint; nullopt: not
  // one of the transaction's (a shard answers, as PostgreSQL).
  awaitable<std::optional<bool>> savepoint_across_shards(const routing::Route& route, std::string_view sql);
  awaitable<std::optional<bool>> deallocate(routing::Route& route, const std::string& name);
  awaitable<bool> forward_query(const protocol::Frame& f, routing::Route& route, std::size_t target,
                                std::string_view sql);
  // EXECUTE name (...): routed as the prepared query with those arguments. False: refused.
  awaitable<bool> route_execute(routing::Route& route);
  // Before a PREPARE or EXECUTE on the current backend: replaces another session's
  // statement of that name there, and prepares this session's where it is missing.
  void sync_sql_prepared(const routing::Route& route);
  std::string note_session_commands(const std::vector<routing::SessionCommandInfo>& cmds, std::vector<SessionCmd>& into);
  awaitable<bool> handle_parse(const protocol::Frame& f);
  awaitable<bool> handle_bind(const protocol::Frame& f);
  awaitable<std::optional<bool>> bind_transaction_end(routing::Route& route, std::string_view portal);
  awaitable<bool> bind_scatter(const routing::Route& route, const protocol::Bind& bind, std::string sql,
                               const std::vector<std::int32_t>& types);
  awaitable<bool> bind_forward(const protocol::Frame& f, const routing::Route& route, std::size_t target,
                               const Prepared& p);
  awaitable<bool> bind_rewritten(const routing::Route& route, std::size_t target, const protocol::Bind& bind,
                                 std::string_view sql, const std::vector<std::int32_t>& types);
  // ---- admin_console.cpp: login to the admin console (database "splitpoint", SPEC §7)
  static constexpr const char* kAdminDatabase = "splitpoint";
  awaitable<bool> admin_login();
  // ---- execute/scatter.cpp
  awaitable<bool> scatter_read(const routing::Route& route, ScatterRequest req);
  static ScatterRequest request_of(const protocol::Bind& bind, std::string sql, const std::vector<std::int32_t>& types);
  awaitable<std::optional<std::size_t>> describe_columns(const std::string& sql, const std::vector<std::int32_t>& types,
                                                         Backend* on = nullptr);
  std::chrono::milliseconds scatter_deadline(const routing::Route& route) const;
  bool scatter_allows_partial(const routing::Route& route) const;
  std::optional<std::string> local_setting(std::string_view name) const;
  std::optional<std::chrono::milliseconds> local_setting_ms(std::string_view name) const;
  // ---- execute/copy.cpp
  awaitable<bool> handle_copy_in(const protocol::Frame& f, std::string sql, const routing::CopyStatement& cs);
  // (`keep`: the statement's shapes, see ShapeCache::find_kept; those fetched are added,
  // so that DDL in another session, which clears the cache, cannot take them away.)
  awaitable<bool> route_with_shapes(routing::Route& route, KeptShapes& keep,
                                    const std::function<routing::Route()>& again);
  awaitable<bool> fetch_shapes(const std::vector<std::string>& tables, KeptShapes& keep);
  void forget_table_definitions();  // after DDL: shapes and key sources read again
  // ---- execute/insert_select.cpp: INSERT ... SELECT whose rows are pulled (route.pull_insert)
  awaitable<bool> pull_insert_select(const routing::Route& route, KeptShapes& keep, std::string_view sql,
                                     const protocol::Bind* bind = nullptr,
                                     const std::vector<std::int32_t>* types = nullptr);
  // The SELECT's answer (RowDescription, DataRows, notices, error) as a read through the
  // proxy would give it, at most `max_rows` rows kept; false: refused (the client was told).
  awaitable<bool> read_for_insert(std::string_view select, const protocol::Bind* bind,
                                  const std::vector<std::int32_t>* types, std::size_t max_rows, std::string& answer,
                                  std::size_t& rows);
  // ---- execute/cursor.cpp: DECLARE ... CURSOR FOR a read of several shards, and the
  // FETCH / MOVE / CLOSE of such a cursor, answered by the proxy; nullopt: not one of
  // those (the statement goes on as any other). In the extended protocol (`bound`, the
  // Bind: psycopg 3's named cursors) they run at the Bind, answered by its portal.
  struct BoundCursor {
    const protocol::Bind& bind;
    const std::vector<std::int32_t>& types;
  };
  awaitable<std::optional<bool>> cursor_command(const routing::Route& route, const BoundCursor* bound = nullptr);
  awaitable<bool> declare_cursor(const routing::Route::Names& n, const BoundCursor* bound);
  awaitable<bool> fetch_cursor(const routing::Route::Names& n, const BoundCursor* bound);
  awaitable<bool> cursor_answer(const BoundCursor* bound, std::string description, std::string rows,
                                std::string_view error, std::string_view tag);
  awaitable<bool> bound_in_order();
  // ---- texts.cpp: a text of several statements no one shard runs whole, run
  // one statement at a time when PostgreSQL's answer is the same; nullopt: not so.
  bool several_statements_apart(const routing::Route& route, std::string_view sql) const;
  awaitable<std::optional<bool>> run_statements_apart(std::string_view sql, bool everywhere);
  // Either of them (run_statements_apart, or writes_shards_alone's one statement in
  // the proxy's own block); nullopt: neither, the statement goes on as any other.
  awaitable<std::optional<bool>> run_apart(const routing::Route& route, std::string_view sql);
  // A write outside a block on several shards, each able to prepare transactions (a
  // pool that has not read max_prepared_transactions yet opens a connection to read
  // it): one statement is one transaction in PostgreSQL, so it runs in a block of the
  // proxy's own and commits with two-phase commit (SPEC §5).
  awaitable<bool> writes_shards_alone(const routing::Route& route);
  void begin_implicit_block();
  // `parts` one after the other, each answered, then one ReadyForQuery; inside a block
  // of the proxy's own when `own_block` (COMMIT after the last, ROLLBACK after an error).
  // `routed`: the one part is a write the proxy rewrote, already routed so.
  awaitable<bool> run_parts(const std::vector<std::string_view>& parts, bool own_block,
                            const routing::Route* routed = nullptr);
  awaitable<bool> run_one(std::string_view statement);
  awaitable<bool> run_unseen(std::string_view verb);
  // An Execute with a row limit of a portal that reads several shards (the extended
  // protocol's cursor, e.g. JDBC's setFetchSize): the whole answer is read as for a
  // cursor, and each Execute takes the next `max_rows` rows (PortalSuspended) until
  // the last (CommandComplete).
  awaitable<bool> execute_in_pieces(std::string portal, ScatterRequest req, std::int32_t max_rows);
  awaitable<bool> execute_more(const std::string& portal, std::int32_t max_rows);
  // The shard the proxy's own reads of definitions and keys go to: scatter.combine.
  std::size_t combine_shard() const { return runtime_->config.combine_shard(); }
  // Where the combine step runs: scatter.combine's shard, or its database of its own.
  std::shared_ptr<Pool> combine_pool() const {
    return runtime_->combine ? runtime_->combine->get(who_.user, who_.password, who_.database)
                             : pools_[combine_shard()];
  }
  awaitable<bool> run_local(const routing::LocalCommand& c, std::string_view portal, bool extended);
  std::optional<std::pair<std::string, std::string>> local_answer(const routing::LocalCommand& c,
                                                                  Frontend::LocalPortal& answer);
  void show_last_scatter(std::string& description, std::string& rows) const;
  awaitable<bool> finish_transaction(const routing::Route& route, std::string_view sql);
  awaitable<void> answer(std::string messages, std::string_view error, std::string_view tag);
  awaitable<bool> prepare_transaction(std::string_view sql);
  awaitable<bool> finish_prepared(std::string_view sql);
  // Rolls the transaction back on every shard it reached and forgets it.
  awaitable<void> roll_back_everywhere();
  // The client's block failed with no savepoint to return to, and some shard of it
  // has not failed: release_aborted_block() rolls those back now, as PostgreSQL
  // releases a failed transaction's locks at the error (called before the client hears
  // of the error: the pump for a shard's error, fail_block() for the rest).
  bool block_aborted() const;
  awaitable<void> release_aborted_block();
  // An error the proxy answers fails the client's block (the shards do not know): the
  // proxy answers 25P02 until ROLLBACK, and the block's shards are let go at once when
  // block_aborted(). Call it before the error is written to the client.
  awaitable<void> fail_block();
  // The transaction is over on every shard: forget its state.
  void reset_transaction();
  // ---- execute/two_phase.cpp (transactions.cross_shard_writes: two_phase)
  // A write on several shards: its executor, MultiShardWrite (execute/multi_shard_write.hpp). With
  // `ext`, the statement runs in the extended protocol with its parameters.
  awaitable<bool> run_on_shards(const routing::Route& route, std::string_view sql,
                                const ScatterRequest* ext = nullptr);
  // `metered`: a client's statement (its wait for a connection is a metric), not the
  // proxy's own (catalog reads, COMMIT, two-phase commit).
  awaitable<Reply> run_on(std::size_t shard, std::string_view sql, const ScatterRequest* ext = nullptr,
                          bool metered = false, std::size_t max_rows = ~std::size_t{0});
  // The proxy's own statements on several shards at once (COMMIT, PREPARE TRANSACTION,
  // COMMIT PREPARED): each is sent before any answer is read, so they take one round
  // trip, not one each; the replies come back in the order given, with their shards.
  awaitable<std::vector<std::pair<std::size_t, Reply>>> run_on_each(
      std::vector<std::pair<std::size_t, std::string>> statements);
  // run_on's two halves: a statement sent to a shard whose answer is still to be read.
  struct Sent {
    std::size_t shard = 0;
    std::unique_ptr<Backend> borrowed;  // taken from the pool for this statement only
    Backend* backend = nullptr;
    int queries = 0;  // Query messages sent: session-state replays, then the statement
    Reply reply;      // lost (or the acquire error) when nothing can be read
  };
  // A backend of `shard` from its pools (hosts_.acquire_backend); `metered`: the wait and a
  // failure count in the shard's metrics, as for a client's statement.
  awaitable<AcquireResult> acquire_counted(std::size_t shard, bool metered);
  // `join`: a held backend not yet in the open transaction gets BEGIN before `sql`.
  awaitable<Sent> send_on(std::size_t shard, std::string_view sql, const ScatterRequest* ext, bool metered,
                          bool join = false);
  awaitable<Reply> read_reply(Sent& sent, bool metered, std::size_t max_rows);
  awaitable<bool> refused_in_failed_transaction(const routing::Route& route, bool extended);
  awaitable<bool> reject(std::string_view sqlstate, std::string message, bool extended, int position = 0);
  awaitable<bool> reject_unless_invalid(std::string_view sqlstate, std::string message, std::string_view sql,
                                        const ScatterRequest* ext);
  awaitable<bool> reject_with(const protocol::ErrorFields& fields, bool extended);
  bool check_write(const routing::Route& route, std::size_t shard, std::string& error);
  routing::ShapeLookup shape_lookup(KeptShapes& keep);
  std::optional<std::size_t> single_target(const routing::Route& route);
  std::size_t catalog_shard();

  // Output.
  // A shard's error that reaches the client: splitpoint_errors_total, and SPM01 from a
  // source's fence (a write of a proxy on an old epoch) as a fence rejection (SPEC §9).
  void count_shard_error(std::string_view sqlstate);
  awaitable<void> send_error(std::string_view severity, std::string_view sqlstate, std::string message,
                             bool ready_for_query);
  awaitable<void> send_ready();
  void set_cancel_target(Backend* b, std::size_t shard);

  // Who is connected: fixed at login.
  struct Client {
    std::string user, database;
    std::string password;  // plaintext, when known (for backend auth)
    std::string peer;
    std::int64_t connected_unix = 0;
    std::int32_t cancel_pid = 0, cancel_secret = 0;  // BackendKeyData given to the client
    bool counted = false, logged_in = false;
    bool admin = false;  // an admin console session
  };
  // The routed statement whose Sync is still to come (extended protocol).
  struct PendingSync {
    std::chrono::steady_clock::time_point started{};
    RouteLabel route = RouteLabel::single;
  };
  // Multi-shard reads: the last one's per-shard status, and an extended-protocol one
  // bound to a portal, answered by the proxy at Execute.
  struct ScatterState {
    struct Status {
      std::string shard, status;
      std::uint64_t rows = 0;
      double elapsed_ms = 0;
      std::string error;
      std::string host;  // host:port that answered (SPEC §10); empty when none did
    };
    std::vector<Status> last;  // SHOW splitpoint.last_scatter
    // (Behind pointers, as lookahead_: most sessions never have one, and an idle
    // session's size is its memory, docs/performance.md "Idle connections".)
    std::unique_ptr<std::pair<std::string, ScatterRequest>> portal;
    std::unique_ptr<routing::Route> route;
  };
  // The Bind right after a Parse, decoded and routed by handle_parse (to prepare the
  // statement on that Bind's shard); handle_bind reuses both instead of doing them again.
  // The Bind is known by where its body lies in cbuf_, which does not change while
  // serve() goes through what one read brought (lookahead_ is dropped after that).
  struct Lookahead {
    std::uint64_t parse_seq = 0;
    const char* bind_body = nullptr;
    protocol::Bind bind;
    routing::Route route;
  };
  struct IdleTimer {
    std::unique_ptr<asio::steady_timer> timer;
    bool timed_out = false;
    bool was_busy = false;  // the last look found a statement or transaction (arm_idle_timer)
  };

  Proxy& server_;
  Worker& worker_;
  ClientStream stream_;
  std::shared_ptr<const Runtime> runtime_;
  CatalogEpoch moves_{*this};  // moves.hpp
  std::uint64_t id_;
  protocol::FrameLimits limits_;
  WorkerMetrics& metrics_;
  Client who_;
  bool closing_ = false;

  // Client input. Waiting for the next message, an empty buffer holds no memory
  // (ClientStream::read_idle; with TLS it keeps at most kIdleInputBytes); a longer
  // message grows it.
  static constexpr std::size_t kIdleInputBytes = 2048;
  InputBuffer cbuf_;
  std::size_t cpos_ = 0;
  IdleTimer idle_;

  // What the client was promised, its prepared statements and transaction status.
  Frontend fe_;
  ClientSettings settings_;  // carried to every backend
  ShardTransaction txn_{*this};  // execute/shard_transaction.hpp
  KeyDrawing keys_{*this};       // keys.hpp
  IndexMaintenance index_{*this};  // execute/global_index.hpp
  PendingSync pending_;
  std::unique_ptr<Lookahead> lookahead_;
  ScatterState scatter_;

  // Backend side: pools and backends held per shard (several only inside a
  // transaction), the one the pump reads from, and the bytes for it.
  std::vector<std::shared_ptr<Pool>> pools_;
  std::vector<std::unique_ptr<Backend>> held_;
  std::size_t cur_ = kNoShard;
  std::string bout_;  // bytes for the current backend, written once per batch
  Pump pump_{*this};   // the single-shard forward (pump.hpp)
  QueryTimeout timeout_{*this};  // timeouts.query (timeout.hpp)
  bool pinned_ = false;  // LISTEN: keeps its backend until the end
  HostChoice hosts_{*this};  // replicas.hpp
  CancelTargets cancel_;  // cancel_targets.hpp: guarded by its own mutex
};

inline void QueryTimeout::start() {
  if (since_ == Clock::time_point{} && !s_.fe_.expect.empty() && s_.runtime_->config.timeouts.query.count() > 0)
    start_timer();
}

inline void HostChoice::may_write_on(std::size_t shard) {
  if (s_.runtime_->standbys) ryw_.unknown[shard] = 1;
}

inline bool IndexMaintenance::maintains_index(const routing::Route& route) const {
  return route.indexes.writes && !maintaining_ && s_.fe_.client_txn != 'E';
}

inline bool ShardTransaction::two_phase() const {
  return s_.runtime_->config.cross_shard_writes == config::CrossShardWrites::two_phase;
}

// The deadlock search's way to the sessions (server/txn/deadlocks.hpp), given by the
// process.
deadlocks::SessionHooks session_deadlock_hooks();

}  // namespace splitpoint::server
