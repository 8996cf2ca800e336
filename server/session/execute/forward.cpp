// The client loop, and what keeps a pooled backend indistinguishable from
// a dedicated one: prepared statements under server-side names and SET replay.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"
#include "routing/text_scan.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::SessionCommand;

awaitable<void> Session::serve() {
  auto self = shared_from_this();
  auto ex = co_await asio::this_coro::executor;
  pump_.bind(ex);
  const auto idle_timeout = runtime_->config.timeouts.client_idle;
  for (;;) {
    for (;;) {
      auto r = proto::decode_frame(std::string_view(cbuf_).substr(cpos_), proto::Direction::frontend, limits_);
      if (r.status == proto::FrameStatus::need_more) break;
      if (r.status == proto::FrameStatus::error) {
        spdlog::info("[{}] closed: {}", id_, r.error);
        co_await detach_for_exit();
        co_await send_error("FATAL", sqlstate::protocol_violation, r.error, false);
        co_return;
      }
      const auto f = r.frame;
      if (f.type == 'X') co_return;
      bool go_on = co_await handle_frame(f);
      cpos_ += f.size;
      if (!go_on || closing_) co_return;
    }
    lookahead_.reset();  // (it names a Bind by its place in cbuf_, which changes now)
    co_await pump_.flush();
    if (closing_) co_return;
    if (server_.shutting_down() && !cur() && fe_.client_txn == 'I') {
      co_await send_error("FATAL", sqlstate::admin_shutdown, "terminating connection due to administrator command",
                          false);
      co_return;
    }
    if (cpos_ > 0) {
      cbuf_.erase(0, cpos_);
      cpos_ = 0;
    }
    if (cbuf_.empty()) cbuf_.shrink_to_fit();  // frees it: an idle client holds no input buffer
    moves_.statement_ended();  // (what the proxy runs itself is done; a scatter portal takes moves again at Execute)
    bool timed = idle_timeout.count() > 0;
    if (timed) {
      if (!idle_.timer) idle_.timer = std::make_unique<asio::steady_timer>(ex);
      idle_.was_busy = in_use();
      arm_idle_timer();
    }
    auto ec = cbuf_.empty() && !stream_.is_tls() ? co_await stream_.read_idle(cbuf_)
                                                  : co_await stream_.read_some(cbuf_, cbuf_.empty() ? kIdleInputBytes : 16384);
    if (timed) idle_.timer->cancel();
    if (idle_.timed_out) {
      spdlog::info("[{}] closed: idle timeout", id_);
      co_await send_error("FATAL", sqlstate::idle_session_timeout,
                          "terminating connection due to idle-session timeout", false);
      co_return;
    }
    if (ec == asio::error::operation_aborted && server_.shutting_down() && !cur()) {
      co_await send_error("FATAL", sqlstate::admin_shutdown, "terminating connection due to administrator command",
                          false);
      co_return;
    }
    if (ec) {
      if (ec != asio::error::eof && ec != asio::error::operation_aborted)
        spdlog::debug("[{}] client read: {}", id_, ec.message());
      co_return;
    }
  }
}

// client_idle: closes the session once it has been idle (no backend, no transaction)
// for the whole interval; while a statement runs it just looks again later. A session
// busy at the last look may have become idle an instant ago (a statement that lasted
// a multiple of the interval): it gets one more whole interval, so it is closed after
// between one and two intervals of idleness, never fewer.
void Session::arm_idle_timer() {
  idle_.timer->expires_after(runtime_->config.timeouts.client_idle);
  idle_.timer->async_wait([this, self = shared_from_this()](error_code ec) {
    if (ec) return;
    const bool busy = in_use();
    if (busy || idle_.was_busy) {
      idle_.was_busy = busy;
      arm_idle_timer();
      return;
    }
    idle_.timed_out = true;
    error_code ignored;
    stream_.socket().cancel(ignored);
  });
}

// One client message. False ends the session (the reason was already sent).
awaitable<bool> Session::handle_frame(const proto::Frame& f) {
  if (fe_.skip_until_sync) {
    // After an error the proxy found itself, as PostgreSQL does after an error:
    // discard until Sync, then one ReadyForQuery.
    if (f.type == 'S') {
      fe_.skip_until_sync = false;
      fe_.open_batch_failed = false;
      txn_.batch_wrote = false;
      fe_.batch_commands.clear();  // the batch failed: its SETs did not happen
      scatter_.portal.reset();     // (bound, not executed: gone with the failed batch)
      if (txn_.implicit) co_return co_await txn_.end_implicit_transaction();
      // A block the batch opened itself (BEGIN in a Bind) failed on a shard the proxy
      // synced mid-batch: PostgreSQL says E at this Sync (libpq_pipeline's
      // `transaction`, tests/integration/test_pg_regress.sh).
      for (const auto& b : held_)
        if (b && b->status == 'E') fe_.client_txn = 'E';
      co_await send_ready();
    }
    co_return true;
  }
  if (fe_.open_batch_failed) {
    // A shard's error ended this batch while the client went on sending it: PostgreSQL
    // skips the rest up to Sync (the shard skips what it already has; the Sync ends it).
    if (f.type == 'P' || f.type == 'B' || f.type == 'D' || f.type == 'E' || f.type == 'C' || f.type == 'H')
      co_return true;
    fe_.open_batch_failed = false;
  }
  if (server_.runtime_generation() != moves_.generation() && (f.type == 'Q' || f.type == 'P' || f.type == 'B'))
    moves_.follow_runtime();  // (a new catalog epoch, taken between transactions)
  switch (f.type) {
    case 'Q':
      co_return co_await handle_query(f);
    case 'P':
      co_return co_await handle_parse(f);
    case 'B':
      co_return co_await handle_bind(f);
    case 'D':
      co_return co_await handle_describe(f);
    case 'C':
      co_return co_await handle_close(f);
    case 'S': {
      const bool go_on = co_await handle_sync(f);
      fe_.open_batch_failed = false;  // (an error the proxy's own Sync drew in ended that batch)
      co_return go_on;
    }
    case 'E':
      if (fe_.local_portal || scatter_.portal || !fe_.portals.empty()) co_return co_await handle_execute(f);
      [[fallthrough]];
    case 'H':
      if (!cur() && !co_await pump_.use_shard(hosts_.pick_any_shard())) {
        fe_.skip_until_sync = true;
        co_return !closing_;
      }
      forward_raw(f, 0);
      co_return true;
    case 'F':
      // A fast-path function call (libpq's lo_* functions, psql's \lo_*, JDBC's large
      // objects): on the one shard that holds the large objects, the catalog shard, as
      // any statement on pg_largeobject goes; answered like a Query (its ReadyForQuery).
      if (!co_await pump_.use_shard(runtime_->config.combine_shard())) co_return !closing_;
      forward_raw(f, 'Z');
      co_return true;
    case 'd':
    case 'c':
    case 'f':
      if (f.type != 'd') fe_.copy_in = false;
      // COPY IN: the shard waits for the client, timeouts.query counts from its last data.
      timeout_.client_sent();
      if (cur()) {
        bool open = fe_.sent_after_sync;
        forward_raw(f, 0);
        fe_.sent_after_sync = open;
      }
      co_return true;
    default:
      break;
  }
  co_return co_await protocol_violation(f.type);
}

awaitable<bool> Session::protocol_violation(char type) {
  co_await detach_for_exit();
  co_await send_error("FATAL", sqlstate::protocol_violation,
                      "invalid frontend message type " + std::to_string(static_cast<unsigned char>(type)), false);
  co_return false;
}

awaitable<bool> Session::handle_describe(const proto::Frame& f) {
  auto d = proto::Describe::decode(f.body);
  if (!d) co_return co_await protocol_violation(f.type);
  if (d->kind == 'P' && fe_.local_portal && fe_.local_portal->name == d->name) {
    std::string out = fe_.local_portal->description;
    if (out.empty()) proto::encode_no_data(out);
    co_await stream_.write(out);
    co_return true;
  }
  if (d->kind == 'P' && scatter_.portal && scatter_.portal->first == d->name) {
    scatter_.portal->second.describe = true;  // answered with the rows at Execute
    co_return true;
  }
  // A portal the proxy holds, or a cursor it holds (a cursor is a portal: psycopg 3
  // describes its named cursor after DECLARE).
  for (auto* held : {&fe_.portals, &fe_.cursors}) {
    if (d->kind != 'P' || !held->count(std::string(d->name))) continue;
    co_await pump_.drain();  // (its answer must not overtake earlier ones; the block may end meanwhile)
    if (auto it = held->find(std::string(d->name)); it != held->end()) {
      const std::string description = it->second.description;
      co_await stream_.write(description);
      co_return true;
    }
  }
  auto it = d->kind == 'S' ? fe_.prepared.find(std::string(d->name)) : fe_.prepared.end();
  if (!cur() && !co_await pump_.use_shard(it == fe_.prepared.end() ? hosts_.pick_any_shard() : shard_to_prepare(it->second))) {
    fe_.skip_until_sync = true;
    co_return !closing_;
  }
  it = d->kind == 'S' ? fe_.prepared.find(std::string(d->name)) : fe_.prepared.end();  // (the await may change it)
  if (it == fe_.prepared.end()) {
    forward_raw(f, 0);
  } else {
    ensure_prepared(it->second);
    proto::Describe{'S', it->second.server_name}.encode(bout_);
    fe_.sent_after_sync = true;
  }
  co_return true;
}

awaitable<bool> Session::handle_close(const proto::Frame& f) {
  auto c = proto::Close::decode(f.body);
  if (!c) co_return co_await protocol_violation(f.type);
  auto it = c->kind == 'S' ? fe_.prepared.find(std::string(c->name)) : fe_.prepared.end();
  if (c->kind == 'P') fe_.portals.erase(std::string(c->name));
  if (!cur()) {
    // Nothing is owed by any backend: answer in order ourselves.
    if (it != fe_.prepared.end()) fe_.prepared.erase(it);
    std::string out;
    proto::encode_close_complete(out);
    co_await stream_.write(out);
    co_return true;
  }
  if (it == fe_.prepared.end() || it->second.server_name.empty()) {
    if (it != fe_.prepared.end()) fe_.prepared.erase(it);
    forward_raw(f, '3');
  } else {
    proto::Close{'S', it->second.server_name}.encode(bout_);
    cur()->prepared.erase(it->second.server_name);
    Expect e{'3'};
    e.name = it->second.server_name;
    fe_.expect.push_back(std::move(e));
    fe_.sent_after_sync = true;
    fe_.prepared.erase(it);
  }
  co_return true;
}

namespace {

// A read of several shards bound to a named portal inside a block and not executed by
// its Sync: PostgreSQL keeps such a portal until Close or the block's end.
bool held_past_sync(const std::string& portal, bool emit_rows, const routing::Route& route, bool in_block) {
  return !portal.empty() && in_block && emit_rows && route.cls == routing::StatementClass::read &&
         route.explain == routing::Route::Explain::none;
}

}  // namespace

awaitable<bool> Session::handle_sync(const proto::Frame& f) {
  // A held BEGIN (hold_extended_begin) whose portal was never executed began nothing.
  if (fe_.local_portal && !cur() && (fe_.local_portal->tag == "BEGIN" || fe_.local_portal->tag == "START TRANSACTION"))
    reset_transaction();
  fe_.local_portal.reset();
  if (!in_transaction()) fe_.portals.clear();  // (their implicit transaction ends here)
  if (scatter_.portal) {
    auto req = std::move(scatter_.portal->second);
    auto portal = std::move(scatter_.portal->first);
    scatter_.portal.reset();
    if (held_past_sync(portal, req.emit_rows, *scatter_.route, in_transaction()) && !index_.maintains_index(*scatter_.route)) {
      // A named portal of a block outlives its Sync (asyncpg's cursor: Bind, Sync, then
      // Execute with a row limit, Sync, ...): its rows are read now and kept, as a
      // portal read in pieces (cursor.cpp); an error of the read comes at this Sync.
      if (!co_await execute_in_pieces(std::move(portal), std::move(req), 0)) co_return false;
      fe_.skip_until_sync = false;  // (a refusal's skip ends with this batch)
    } else if (req.describe && scatter_.route->cls == routing::StatementClass::read) {
      // Described but never executed: the description alone.
      req.emit_rows = false;
      if (!co_await scatter_read(*scatter_.route, std::move(req))) co_return false;
    }
  }
  txn_.batch_wrote = false;
  if (txn_.implicit) {
    for (auto& c : fe_.batch_commands) fe_.pending_commands.push_back(std::move(c));
    fe_.batch_commands.clear();
    co_return co_await txn_.end_implicit_transaction();
  }
  if (!cur()) {
    fe_.batch_commands.clear();
    fe_.batch_failed = false;
    co_await send_ready();
    co_return true;
  }
  if (fe_.copy_in) {
    // PostgreSQL ignores a Sync that arrives during COPY IN.
    forward_raw(f, 0);
    fe_.sent_after_sync = true;
    co_return true;
  }
  forward_raw(f, 'Z');
  fe_.expect.back().started = pending_.started;
  fe_.expect.back().route = pending_.route;
  fe_.expect.back().commands = std::move(fe_.batch_commands);
  fe_.batch_commands.clear();
  pending_.started = {};
  co_return true;
}

// Execute of a portal the proxy answers itself (COMMIT/ROLLBACK, a multi-shard
// statement); any other goes to the current backend (or any shard's).
awaitable<bool> Session::handle_execute(const proto::Frame& f) {
  if (fe_.local_portal) {
    auto e = proto::Execute::decode(f.body);
    if (e && e->portal == fe_.local_portal->name) {
      std::string out = std::move(fe_.local_portal->rows);
      if (!fe_.local_portal->error.empty()) {
        proto::Writer w(out, 'E');
        w.bytes(fe_.local_portal->error).finish();
        fe_.skip_until_sync = true;  // (as after any error in a batch)
      } else {
        proto::CommandComplete{fe_.local_portal->tag}.encode(out);
      }
      fe_.local_portal.reset();
      co_await stream_.write(out);
      co_return true;
    }
  }
  if (scatter_.portal) {
    auto e = proto::Execute::decode(f.body);
    if (e && e->portal == scatter_.portal->first) {
      auto req = std::move(scatter_.portal->second);
      auto portal = std::move(scatter_.portal->first);
      scatter_.portal.reset();
      moves_.take_moves();  // (a named portal may outlive its Sync: then nothing marks it running)
      if (index_.maintains_index(*scatter_.route)) {
        const routing::Route route = *scatter_.route;
        co_return co_await index_.indexed_execute(route, req);
      }
      if (scatter_.route->cls != routing::StatementClass::read || scatter_.route->explain != routing::Route::Explain::none) {
        // One transaction on several shards, as the Sync ends it (SPEC §5).
        const bool alone = co_await writes_shards_alone(*scatter_.route);
        if (alone) begin_implicit_block();
        co_return co_await run_on_shards(*scatter_.route, req.sql, &req);
      }
      if (e->max_rows > 0 && req.emit_rows)
        co_return co_await execute_in_pieces(std::move(portal), std::move(req), e->max_rows);
      co_return co_await scatter_read(*scatter_.route, std::move(req));
    }
  }
  if (!fe_.portals.empty()) {
    auto e = proto::Execute::decode(f.body);
    if (e && fe_.portals.count(std::string(e->portal))) {
      co_await pump_.drain();  // (its answer must not overtake earlier ones; the block may end meanwhile)
      if (fe_.portals.count(std::string(e->portal))) co_return co_await execute_more(std::string(e->portal), e->max_rows);
    }
  }
  if (!cur() && !co_await pump_.use_shard(hosts_.pick_any_shard())) {
    fe_.skip_until_sync = true;
    co_return !closing_;
  }
  forward_raw(f, 0);
  co_return true;
}

// Appends a client message unchanged for the current backend. `expect` is the
// response type it is owed ('1', '2', '3', 'Z'), or 0 for none.
void Session::forward_raw(const proto::Frame& f, char expect) {
  bout_.append(std::string_view(cbuf_).substr(cpos_, f.size));
  if (expect) {
    fe_.expect.push_back(Expect{expect});
    fe_.expect.back().is_sync = f.type == 'S';
  }
  fe_.sent_after_sync = expect != 'Z';
}

// The batch wrote on the current shard and goes on to `shard` before its Sync.
// PostgreSQL runs the whole batch as one transaction: BEGIN makes what ran here a
// transaction block (the shards joined next get BEGIN too) and the client's Sync ends
// them together (end_implicit_transaction). After an error here PostgreSQL skips it.
void Session::leave_batch_shard(std::size_t shard) {
  if (shard == cur_ || !fe_.sent_after_sync || !txn_.batch_wrote || !pump_.active() || in_transaction()) return;
  // A fence first: the answers to the client's Describe/Execute are not counted in
  // fe_.expect, and everything before the fence's CloseComplete is theirs, not BEGIN's.
  proto::Close{'S', "sp_fence"}.encode(bout_);
  fe_.expect.push_back(Expect{'3', true});
  proto::Query{"BEGIN"}.encode(bout_);
  Expect e{'Z', true};
  e.query_in_batch = true;
  fe_.expect.push_back(std::move(e));
  cur()->unnamed_owner = {0, 0};  // a Query drops the unnamed statement
  begin_implicit_block();
  txn_.write_shard = cur_;
  txn_.note_written(cur_);
  txn_.batch_wrote = false;
}

// The batch is one transaction from here to its Sync (end_implicit_transaction): the
// shards it goes to next get BEGIN.
void Session::begin_implicit_block() {
  txn_.begin_sql = "BEGIN";
  txn_.implicit = true;
}

// What DISCARD ALL leaves of a backend's state.
static void discarded(Backend& b) {
  b.prepared.clear();
  b.sql_prepared.clear();
  b.unnamed_owner = {0, 0};
  b.needs_discard = false;
  b.applied_state = kStateDefault;
}

// A backend another session-mode client left is reset first (DISCARD ALL refuses to
// run inside a transaction block, so it goes in a Query of its own, never together with
// the SETs); then the SET script is replayed if the backend has other settings; then,
// when the client is inside a transaction the backend has not joined (a fresh one from
// the pool, or in session mode one kept since the last transaction), BEGIN with the
// client's own text.
int Session::sync_backend_state(Backend& b, std::string& out, bool join_transaction) {
  int queries = 0;
  if (b.needs_discard) {
    proto::Query{"DISCARD ALL"}.encode(out);
    ++queries;
    discarded(b);
  }
  if (b.applied_state != settings_.hash) {
    // (RESET ALL leaves the role and the session authorization: another client's SET
    // ROLE or SET SESSION AUTHORIZATION would stay for this one; DISCARD ALL resets both
    // the same way)
    proto::Query{"SET SESSION AUTHORIZATION DEFAULT;RESET ALL;" + settings_.script}.encode(out);
    ++queries;
    b.applied_state = settings_.hash;
  }
  if (b.status == 'I') b.savepoints = 0;
  if (join_transaction && in_transaction() && b.status == 'I') {
    proto::Query{txn_.begin_sql.empty() ? std::string_view("BEGIN") : std::string_view(txn_.begin_sql)}.encode(out);
    ++queries;
  }
  // Savepoints made since this shard last ran a statement of the transaction (or before
  // it joined): its work from now on comes after them, as on the shards that saw them.
  if (in_transaction() && (b.status != 'I' || join_transaction) && b.savepoints < txn_.savepoints.size()) {
    std::string sql;
    for (std::size_t i = b.savepoints; i < txn_.savepoints.size(); ++i)
      sql += (sql.empty() ? "SAVEPOINT " : "; SAVEPOINT ") + routing::quote_ident(txn_.savepoints[i]);
    proto::Query{sql}.encode(out);
    ++queries;
    b.savepoints = txn_.savepoints.size();
  }
  return queries;
}

void Session::sync_sql_prepared(const routing::Route& route) {
  auto& here = cur()->sql_prepared;
  const std::string& name = route.names->prepared_name;
  auto mine = fe_.sql_prepared.find(name);
  auto there = here.find(name);
  if (there != here.end() && (mine == fe_.sql_prepared.end() || there->second != mine->second.token)) {
    proto::Query{"DEALLOCATE " + routing::quote_ident(name)}.encode(bout_);
    fe_.expect.push_back(Expect{'Z', true});
    here.erase(there);
    there = here.end();
  }
  if (route.sql_prepared == routing::Route::SqlPrepared::execute && mine != fe_.sql_prepared.end() &&
      there == here.end()) {
    proto::Query{mine->second.text}.encode(bout_);
    fe_.expect.push_back(Expect{'Z', true});
    here[name] = mine->second.token;
  }
}

void Session::ensure_prepared(const Prepared& p) {
  Backend* b = cur();
  if (p.server_name.empty()) {
    std::pair<std::uint64_t, std::uint64_t> mine{id_, fe_.unnamed_seq};
    if (b->unnamed_owner == mine) return;
    proto::Writer w(bout_, 'P');
    w.cstr("").bytes(p.parse_rest).finish();
    b->unnamed_owner = mine;
  } else {
    if (b->prepared.use(p.server_name)) return;
    make_room(*b);
    proto::Writer w(bout_, 'P');
    w.cstr(p.server_name).bytes(p.parse_rest).finish();
    b->prepared.made(p.server_name);
  }
  Expect e{'1', true};
  e.name = p.server_name;
  fe_.expect.push_back(std::move(e));
  fe_.sent_after_sync = true;
}

// Closes what the current backend gives up before it makes one more named statement
// (max_prepared_statements).
void Session::make_room(Backend& b) {
  for (auto& name : b.prepared.make_room(runtime_->config.max_prepared_statements)) {
    proto::Close{'S', name}.encode(bout_);
    Expect e{'3', true};
    e.name = std::move(name);
    fe_.expect.push_back(std::move(e));
  }
}

// The settings the proxy's own reading of SQL depends on, as the server reports them.
void Session::note_parameter_status(std::string_view body) {
  auto p = proto::ParameterStatus::decode(body);
  if (p && p->name == "standard_conforming_strings") settings_.routing.standard_conforming_strings = p->value != "off";
}

void Session::note_parameter_statuses(std::string_view messages) {
  for_each_message(messages, [&](char type, std::string_view body, std::string_view) {
    if (type == 'S') note_parameter_status(body);
  });
}

void Session::apply_session_commands() {
  if (fe_.pending_commands.empty()) return;
  const bool backend_reset = settings_.apply(fe_.pending_commands);
  if (cur()) cur()->applied_state = backend_reset ? kStateUnknown : settings_.hash;
}

bool Session::should_release() const {
  return cur() && fe_.expect.empty() && !fe_.sent_after_sync && cur()->status == 'I' && !pinned_ && !closing_ &&
         runtime_->config.pool_mode == config::PoolMode::transaction;
}

void Session::release_shard(std::size_t shard, bool reusable) {
  if (!held_[shard]) return;  // (held_ changes on this thread only)
  std::unique_ptr<Backend> b;
  b = std::move(held_[shard]);
  cancel_.forget(b.get());
  if (!b) return;
  if (!b->read_buf.empty() || b->status != 'I') reusable = false;
  hosts_.give_back(shard, std::move(b), reusable);
}

// (Session pooling keeps a backend between transactions; a transaction's other shards
// are held too. The pump watches only the current one, and drops it itself: Pump::run.)
bool Session::drop_if_closed(std::size_t shard) {
  Backend* b = held_[shard].get();
  if (!b || b->status != 'I' || settings_.unreplayable || (cur_ == shard && pump_.active()) || b->looks_healthy()) return false;
  spdlog::info("[{}] shard {} closed an idle connection; a new one takes its place", id_, pools_[shard]->target().shard);
  release_shard(shard, false);
  return true;
}

// (A pinned session keeps its backend past the transaction: temporary tables live there.)
void Session::end_shard(std::size_t shard, bool ok) {
  if (!ok || (runtime_->config.pool_mode == config::PoolMode::transaction && !pinned_)) release_shard(shard, ok);
}

void Session::release_all(bool reusable) {
  for (std::size_t s = 0; s < held_.size(); ++s) release_shard(s, reusable);
}

// Stops the pump and gives held backends back (clean and idle) or closes them.
awaitable<void> Session::detach_for_exit() {
  closing_ = true;
  bool clean = fe_.expect.empty() && !fe_.sent_after_sync && !pinned_ && !pump_.lost();
  co_await pump_.stop_for_exit();
  for (std::size_t s = 0; s < held_.size(); ++s) {
    if (!held_[s]) continue;
    bool reusable = clean;
    if (clean && held_[s]->status == 'I') {
      // Reset now, as PostgreSQL ends a session at its client's disconnect (and as
      // PgBouncer's server_reset_query): a session-level advisory lock the client left
      // would otherwise block other clients for as long as the backend idles in the
      // pool (the regression schedule's prepared_xacts leaves one that advisory_lock
      // then waits on).
      auto reply = co_await run_on(s, "DISCARD ALL");
      reusable = !reply.lost && reply.error.empty() && held_[s] && held_[s]->status == 'I';
      if (reusable) discarded(*held_[s]);
    }
    release_shard(s, reusable);
  }
}

}  // namespace splitpoint::server
