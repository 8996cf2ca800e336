// The client loop, the pump, and what keeps a pooled backend indistinguishable from
// a dedicated one: prepared statements under server-side names and SET replay.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/server.hpp"
#include "server/session.hpp"
#include "routing/text_scan.hpp"
#include "server/session_util.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::SessionCommand;

awaitable<void> Session::serve() {
  auto self = shared_from_this();
  auto ex = co_await asio::this_coro::executor;
  pump_exit_ = std::make_unique<asio::steady_timer>(ex);
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
    co_await flush_to_backend();
    if (closing_) co_return;
    if (server_.shutting_down() && !cur() && client_txn_ == 'I') {
      co_await send_error("FATAL", sqlstate::admin_shutdown, "terminating connection due to administrator command",
                          false);
      co_return;
    }
    if (cpos_ > 0) {
      cbuf_.erase(0, cpos_);
      cpos_ = 0;
    }
    if (cbuf_.empty() && cbuf_.capacity() > kIdleInputBytes) cbuf_.shrink_to_fit();  // frees it
    bool timed = idle_timeout.count() > 0;
    if (timed) {
      if (!idle_timer_) idle_timer_ = std::make_unique<asio::steady_timer>(ex);
      arm_idle_timer();
    }
    auto ec = co_await stream_.read_some(cbuf_, cbuf_.empty() ? kIdleInputBytes : 16384);
    if (timed) idle_timer_->cancel();
    if (idle_timed_out_) {
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
// for the whole interval; while a statement runs it just looks again later.
void Session::arm_idle_timer() {
  idle_timer_->expires_after(runtime_->config.timeouts.client_idle);
  idle_timer_->async_wait([this, self = shared_from_this()](error_code ec) {
    if (ec) return;
    if (cur() || client_txn_ != 'I') {
      arm_idle_timer();
      return;
    }
    idle_timed_out_ = true;
    error_code ignored;
    stream_.socket().cancel(ignored);
  });
}

// One client message. False ends the session (the reason was already sent).
awaitable<bool> Session::handle_frame(const proto::Frame& f) {
  if (skip_until_sync_) {
    // After an error the proxy found itself, as PostgreSQL does after an error:
    // discard until Sync, then one ReadyForQuery.
    if (f.type == 'S') {
      skip_until_sync_ = false;
      batch_wrote_ = false;
      batch_commands_.clear();  // the batch failed: its SETs did not happen
      if (implicit_txn_) co_return co_await end_implicit_transaction();
      co_await send_ready();
    }
    co_return true;
  }
  if (server_.runtime_generation() != generation_ && (f.type == 'Q' || f.type == 'P' || f.type == 'B'))
    follow_runtime();  // (a new catalog epoch, taken between transactions)
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
    case 'S':
      co_return co_await handle_sync(f);
    case 'E':
      if (local_portal_ || scatter_portal_) co_return co_await handle_execute(f);
      [[fallthrough]];
    case 'H':
      if (!cur() && !co_await use_shard(pick_any_shard())) {
        skip_until_sync_ = true;
        co_return !closing_;
      }
      forward_raw(f, 0);
      co_return true;
    case 'd':
    case 'c':
    case 'f':
      if (f.type != 'd') copy_in_ = false;
      if (cur()) {
        bool open = sent_after_sync_;
        forward_raw(f, 0);
        sent_after_sync_ = open;
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
  if (d->kind == 'P' && local_portal_ && local_portal_->first == d->name) {
    std::string out;
    proto::encode_no_data(out);
    co_await stream_.write(out);
    co_return true;
  }
  if (d->kind == 'P' && scatter_portal_ && scatter_portal_->first == d->name) {
    scatter_portal_->second.describe = true;  // answered with the rows at Execute
    co_return true;
  }
  if (!cur() && !co_await use_shard(pick_any_shard())) {
    skip_until_sync_ = true;
    co_return !closing_;
  }
  auto it = d->kind == 'S' ? prepared_.find(std::string(d->name)) : prepared_.end();
  if (it == prepared_.end()) {
    forward_raw(f, 0);
  } else {
    ensure_prepared(it->second);
    proto::Describe{'S', it->second.server_name}.encode(bout_);
    sent_after_sync_ = true;
  }
  co_return true;
}

awaitable<bool> Session::handle_close(const proto::Frame& f) {
  auto c = proto::Close::decode(f.body);
  if (!c) co_return co_await protocol_violation(f.type);
  auto it = c->kind == 'S' ? prepared_.find(std::string(c->name)) : prepared_.end();
  if (!cur()) {
    // Nothing is owed by any backend: answer in order ourselves.
    if (it != prepared_.end()) prepared_.erase(it);
    std::string out;
    proto::encode_close_complete(out);
    co_await stream_.write(out);
    co_return true;
  }
  if (it == prepared_.end() || it->second.server_name.empty()) {
    if (it != prepared_.end()) prepared_.erase(it);
    forward_raw(f, '3');
  } else {
    proto::Close{'S', it->second.server_name}.encode(bout_);
    cur()->prepared.erase(it->second.server_name);
    expect_.push_back(Expect{'3'});
    sent_after_sync_ = true;
    prepared_.erase(it);
  }
  co_return true;
}

awaitable<bool> Session::handle_sync(const proto::Frame& f) {
  local_portal_.reset();
  if (scatter_portal_) {
    // Described but never executed: the description alone.
    auto req = std::move(scatter_portal_->second);
    scatter_portal_.reset();
    if (req.describe && scatter_route_->cls == routing::StatementClass::read) {
      req.emit_rows = false;
      if (!co_await scatter_read(*scatter_route_, std::move(req))) co_return false;
    }
  }
  batch_wrote_ = false;
  if (implicit_txn_) {
    for (auto& c : batch_commands_) pending_commands_.push_back(std::move(c));
    batch_commands_.clear();
    co_return co_await end_implicit_transaction();
  }
  if (!cur()) {
    batch_commands_.clear();
    co_await send_ready();
    co_return true;
  }
  if (copy_in_) {
    // PostgreSQL ignores a Sync that arrives during COPY IN.
    forward_raw(f, 0);
    sent_after_sync_ = true;
    co_return true;
  }
  forward_raw(f, 'Z');
  expect_.back().started = pending_started_;
  expect_.back().route = pending_route_;
  expect_.back().commands = std::move(batch_commands_);
  batch_commands_.clear();
  pending_started_ = {};
  co_return true;
}

// Execute of a portal the proxy answers itself (COMMIT/ROLLBACK, a multi-shard
// statement); any other goes to the current backend (or any shard's).
awaitable<bool> Session::handle_execute(const proto::Frame& f) {
  if (local_portal_) {
    auto e = proto::Execute::decode(f.body);
    if (e && e->portal == local_portal_->first) {
      std::string out;
      proto::CommandComplete{local_portal_->second}.encode(out);
      local_portal_.reset();
      co_await stream_.write(out);
      co_return true;
    }
  }
  if (scatter_portal_) {
    auto e = proto::Execute::decode(f.body);
    if (e && e->portal == scatter_portal_->first) {
      auto req = std::move(scatter_portal_->second);
      scatter_portal_.reset();
      if (scatter_route_->cls != routing::StatementClass::read)
        co_return co_await run_on_shards(*scatter_route_, req.sql, &req);
      co_return co_await scatter_read(*scatter_route_, std::move(req));
    }
  }
  if (!cur() && !co_await use_shard(pick_any_shard())) {
    skip_until_sync_ = true;
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
    expect_.push_back(Expect{expect});
    expect_.back().is_sync = f.type == 'S';
  }
  sent_after_sync_ = expect != 'Z';
}

awaitable<void> Session::flush_to_backend() {
  if (!bout_.empty() && cur()) {
    auto [ec, n] = co_await asio::async_write(cur()->socket, asio::buffer(bout_), use_nothrow);
    if (ec) {
      // The pump sees the broken connection too and tells the client.
      spdlog::warn("[{}] write to server failed: {}", id_, ec.message());
      error_code ignored;
      cur()->socket.close(ignored);
    }
  }
  bout_.clear();
  start_pump();
}

// The pump of a backend attach() made current starts once its first request is out.
// Started before, its first read would always find nothing (the request is not even
// sent) and cost a failed recv plus a turn of the event loop; started after, it finds
// the answer already there whenever the server answered while the proxy was busy or
// preempted (on a loaded machine, often).
void Session::start_pump() {
  if (!pump_pending_) return;
  pump_pending_ = false;
  asio::co_spawn(stream_.socket().get_executor(), pump(), asio::detached);
}

// The batch wrote on the current shard and goes on to `shard` before its Sync.
// PostgreSQL runs the whole batch as one transaction: BEGIN makes what ran here a
// transaction block (the shards joined next get BEGIN too) and the client's Sync ends
// them together (end_implicit_transaction). After an error here PostgreSQL skips it.
void Session::leave_batch_shard(std::size_t shard) {
  if (shard == cur_ || !sent_after_sync_ || !batch_wrote_ || !pump_active_ || in_transaction()) return;
  // A fence first: the answers to the client's Describe/Execute are not counted in
  // expect_, and everything before the fence's CloseComplete is theirs, not BEGIN's.
  proto::Close{'S', "sp_fence"}.encode(bout_);
  expect_.push_back(Expect{'3', true});
  proto::Query{"BEGIN"}.encode(bout_);
  Expect e{'Z', true};
  e.query_in_batch = true;
  expect_.push_back(std::move(e));
  cur()->unnamed_owner = {0, 0};  // a Query drops the unnamed statement
  begin_sql_ = "BEGIN";
  implicit_txn_ = true;
  write_shard_ = cur_;
  note_written(cur_);
  batch_wrote_ = false;
}

// Makes `shard` the current backend: waits until the current one owes nothing,
// then attaches. False if it failed (the error was reported to the client).
awaitable<bool> Session::use_shard(std::size_t shard, std::optional<std::size_t> standby) {
  if (cur_ == shard && pump_active_ && cur()->host == (standby ? *standby : pools_[shard]->target().host_index))
    co_return true;
  bool mid_batch = sent_after_sync_;
  leave_batch_shard(shard);
  if (pump_active_) co_await drain();
  else bout_.clear();  // what drain() does then, without a coroutine frame
  if (closing_) co_return false;
  if (mid_batch && batch_failed_) {
    // The previous shard failed inside this extended batch: discard until Sync.
    skip_until_sync_ = true;
    co_return false;
  }
  co_return co_await attach(shard, standby);
}

awaitable<bool> Session::attach(std::size_t shard, std::optional<std::size_t> standby) {
  // A backend held outside a transaction on another host than the statement wants
  // (a standby's after a read, or the old primary's after a failover) goes back.
  if (runtime_->standbys && held_[shard] && held_[shard]->status == 'I' && !pinned_ &&
      held_[shard]->host != (standby ? *standby : pools_[shard]->target().host_index))
    release_shard(shard, true);
  if (!held_[shard]) {
    const auto waited_from = std::chrono::steady_clock::now();
    AcquireResult r;
    if (!runtime_->standbys) r.backend = pools_[shard]->take_idle(stream_.socket().get_executor());  // no coroutine frame
    if (!r.backend) r = co_await acquire_backend(shard, standby);
    if (shard < kMaxShards) metrics_.shards[shard].pool_wait.observe_since(waited_from);
    if (!r.backend) {
      if (shard < kMaxShards) metrics_.shards[shard].connect_errors.add();
      metrics_.error(r.sqlstate);
      spdlog::warn("[{}] no backend: {}", id_, r.message);
      co_await send_error("ERROR", r.sqlstate, r.message, false);
      if (client_txn_ != 'I') client_txn_ = 'E';
      co_return false;
    }
    held_[shard] = std::move(r.backend);
  }
  Backend* b = held_[shard].get();
  cur_ = shard;
  set_cancel_target(b, shard);
  for (int n = sync_backend_state(*b, bout_, true); n > 0; --n) expect_.push_back(Expect{'Z', true});
  pump_active_ = true;
  active_.store(true, std::memory_order_relaxed);
  metrics_.clients_active.add(1);
  stop_pump_ = false;
  pump_exit_->expires_at(asio::steady_timer::time_point::max());
  pump_pending_ = true;  // started by flush_to_backend()
  co_return true;
}

// Waits until the current backend owes nothing and detaches the pump from it (it
// stays held inside a transaction, else it went back to the pool).
awaitable<void> Session::drain() {
  if (!pump_active_) {
    bout_.clear();
    co_return;
  }
  if (sent_after_sync_) {
    // Close the implicit transaction of an unfinished extended batch so it completes.
    proto::encode_sync(bout_);
    Expect e{'Z', true};
    e.is_sync = true;  // only its ReadyForQuery is ours: the batch's answers go to the client
    expect_.push_back(std::move(e));
    sent_after_sync_ = false;
  }
  co_await flush_to_backend();
  if (!pump_active_) co_return;
  stop_pump_ = true;
  if (expect_.empty()) {
    error_code ignored;
    cur()->socket.cancel(ignored);
  }
  co_await pump_exit_->async_wait(use_nothrow);
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
    b.prepared.clear();
    b.sql_prepared.clear();
    b.unnamed_owner = {0, 0};
    b.needs_discard = false;
    b.applied_state = kStateDefault;
  }
  if (b.applied_state != state_hash_) {
    proto::Query{"RESET ALL;" + state_script_}.encode(out);
    ++queries;
    b.applied_state = state_hash_;
  }
  if (b.status == 'I') b.savepoints = 0;
  if (join_transaction && in_transaction() && b.status == 'I') {
    proto::Query{begin_sql_.empty() ? std::string_view("BEGIN") : std::string_view(begin_sql_)}.encode(out);
    ++queries;
  }
  // Savepoints made since this shard last ran a statement of the transaction (or before
  // it joined): its work from now on comes after them, as on the shards that saw them.
  if (in_transaction() && (b.status != 'I' || join_transaction) && b.savepoints < savepoints_.size()) {
    std::string sql;
    for (std::size_t i = b.savepoints; i < savepoints_.size(); ++i)
      sql += (sql.empty() ? "SAVEPOINT " : "; SAVEPOINT ") + routing::quote_ident(savepoints_[i]);
    proto::Query{sql}.encode(out);
    ++queries;
    b.savepoints = savepoints_.size();
  }
  return queries;
}

void Session::sync_sql_prepared(const routing::Route& route) {
  auto& here = cur()->sql_prepared;
  const std::string& name = route.names->prepared_name;
  auto mine = sql_prepared_.find(name);
  auto there = here.find(name);
  if (there != here.end() && (mine == sql_prepared_.end() || there->second != mine->second.token)) {
    proto::Query{"DEALLOCATE " + routing::quote_ident(name)}.encode(bout_);
    expect_.push_back(Expect{'Z', true});
    here.erase(there);
    there = here.end();
  }
  if (route.sql_prepared == routing::Route::SqlPrepared::execute && mine != sql_prepared_.end() &&
      there == here.end()) {
    proto::Query{mine->second.text}.encode(bout_);
    expect_.push_back(Expect{'Z', true});
    here[name] = mine->second.token;
  }
}

void Session::ensure_prepared(const Prepared& p) {
  Backend* b = cur();
  if (p.server_name.empty()) {
    std::pair<std::uint64_t, std::uint64_t> mine{id_, unnamed_seq_};
    if (b->unnamed_owner == mine) return;
    proto::Writer w(bout_, 'P');
    w.cstr("").bytes(p.parse_rest).finish();
    b->unnamed_owner = mine;
  } else {
    if (b->prepared.count(p.server_name)) return;
    proto::Writer w(bout_, 'P');
    w.cstr(p.server_name).bytes(p.parse_rest).finish();
    b->prepared.insert(p.server_name);
  }
  Expect e{'1', true};
  e.name = p.server_name;
  expect_.push_back(std::move(e));
  sent_after_sync_ = true;
}

// Handles one backend message; true if it goes to the client.
// After an error PostgreSQL skips everything up to the next Sync: those responses
// never come. A client Parse that was skipped created nothing. On an error the Queries
// sent inside the failed batch are skipped too; on a ReadyForQuery they are what it
// answers.
void Session::drop_until_sync(bool error) {
  while (!expect_.empty() && (expect_.front().type != 'Z' || (error && expect_.front().query_in_batch))) {
    const Expect& e = expect_.front();
    if (e.type == '1' && !e.name.empty()) cur()->prepared.erase(e.name);
    if (e.type == '1' && !e.swallow) {
      // Only if the client has not parsed that name again since.
      auto it = prepared_.find(e.text);
      if (it != prepared_.end() && it->second.parse_seq == e.parse_seq) prepared_.erase(it);
    }
    expect_.pop_front();
  }
}

// The ReadyForQuery of the oldest Sync/Query owed: metrics, the client's transaction
// status, and the session state its statements changed.
bool Session::on_ready_for_query(std::string_view body) {
  drop_until_sync(false);
  portal_rows_.clear();
  char status = body.size() == 1 ? body[0] : 'E';
  cur()->status = status;
  if (expect_.empty()) {
    spdlog::error("[{}] unexpected ReadyForQuery", id_);
    return true;
  }
  Expect e = std::move(expect_.front());
  expect_.pop_front();
  if (e.swallow) return false;
  if (e.started != std::chrono::steady_clock::time_point{}) {
    metrics_.duration[static_cast<std::size_t>(e.route)].observe_since(e.started);
    if (cur_ < kMaxShards) metrics_.shards[cur_].query.observe_since(e.started);
  }
  batch_failed_ = false;
  // A block the proxy itself failed stays failed, whatever a shard that does not
  // know says, until ROLLBACK.
  client_txn_ = proxy_failed_txn_ && status == 'T' ? 'E' : status;
  if (!e.failed && e.sql_prepare) {
    // Not transactional in PostgreSQL: kept even if the transaction rolls back.
    cur()->sql_prepared[e.sql_prepare->name] = e.sql_prepare->token;
    std::string name = e.sql_prepare->name;
    sql_prepared_[name] = std::move(*e.sql_prepare);
  }
  if (!e.failed)
    for (auto& c : e.commands) pending_commands_.push_back(std::move(c));
  if (status == 'I') {
    if (last_tag_rollback_) pending_commands_.clear();
    apply_session_commands();
    reset_transaction();
  }
  return true;
}

bool Session::process_backend_frame(char type, std::string_view body) {
  // Output of a Query the proxy sent itself (state replay, BEGIN): never the client's.
  auto in_injected_query = [this] {
    return !expect_.empty() && expect_.front().type == 'Z' && expect_.front().swallow && !expect_.front().is_sync;
  };
  switch (type) {
    case '1':
    case '2':
    case '3': {
      if (expect_.empty() || expect_.front().type != type) {
        spdlog::error("[{}] unexpected backend message '{}'", id_, type);
        return true;
      }
      bool swallow = expect_.front().swallow;
      if (type == '2') portal_rows_ = std::move(expect_.front().rows);
      expect_.pop_front();
      return !swallow;
    }
    case 'E': {
      bool swallow = in_injected_query();
      if (swallow) {
        auto e = proto::ErrorFields::decode(body);
        spdlog::warn("[{}] injected statement failed: {}", id_, e ? std::string(e->get('M')) : "?");
      }
      drop_until_sync(true);
      portal_rows_.clear();
      if (!expect_.empty()) expect_.front().failed = true;
      if (!swallow) {
        batch_failed_ = true;
        auto fields = proto::ErrorFields::decode(body);
        metrics_.error(fields ? fields->get('C') : std::string_view("XX000"));
      }
      return !swallow;
    }
    case 'Z':
      return on_ready_for_query(body);
    case 'C':
      if (in_injected_query()) return false;
      last_tag_rollback_ = body.rfind("ROLLBACK", 0) == 0;
      count_written(body);
      return true;
    case 'A':
      return true;
    case 'S':
      note_parameter_status(body);
      return !in_injected_query();
    case 'G':
      if (!expect_.empty() && expect_.front().is_sync) {
        // COPY IN started by an Execute: the Syncs already sent arrive during COPY
        // and PostgreSQL ignores them; only a Sync after CopyDone/CopyFail counts.
        std::erase_if(expect_, [](const Expect& e) { return e.is_sync; });
        copy_in_ = true;
        sent_after_sync_ = true;
      }
      return true;
    default:
      return !in_injected_query();
  }
}

// The settings the proxy's own reading of SQL depends on, as the server reports them.
void Session::note_parameter_status(std::string_view body) {
  auto p = proto::ParameterStatus::decode(body);
  if (p && p->name == "standard_conforming_strings") routing_.standard_conforming_strings = p->value != "off";
}

void Session::note_parameter_statuses(std::string_view messages) {
  for_each_message(messages, [&](char type, std::string_view body, std::string_view) {
    if (type == 'S') note_parameter_status(body);
  });
}

void Session::apply_session_commands() {
  if (pending_commands_.empty()) return;
  bool backend_reset = false;
  for (auto& c : pending_commands_) {
    auto it = std::find_if(sets_.begin(), sets_.end(), [&](auto& p) { return p.first == c.name; });
    switch (c.kind) {
      case SessionCommand::set:
        if (it != sets_.end()) it->second = c.text;
        else sets_.emplace_back(c.name, c.text);
        break;
      case SessionCommand::reset:
        if (it != sets_.end()) sets_.erase(it);
        break;
      case SessionCommand::reset_all:
      case SessionCommand::discard_all:
        sets_.clear();
        backend_reset = true;  // the backend now has its own defaults, not the client's
        break;
      default:
        break;
    }
  }
  pending_commands_.clear();
  rebuild_state_script();
  if (cur()) cur()->applied_state = backend_reset ? kStateUnknown : state_hash_;
}

void Session::rebuild_state_script() {
  state_script_.clear();
  for (auto& [k, v] : startup_params_) state_script_ += set_config_sql(k, v);
  for (auto& [k, stmt] : sets_) state_script_ += stmt + ";";
  if (state_script_.empty()) {
    state_hash_ = kStateDefault;
  } else {
    state_hash_ = std::hash<std::string>{}(state_script_) | 1;
    if (state_hash_ == kStateUnknown) state_hash_ ^= 2;
  }
}

bool Session::should_release() const {
  return cur() && expect_.empty() && !sent_after_sync_ && cur()->status == 'I' && !pinned_ && !closing_ &&
         runtime_->config.pool_mode == config::PoolMode::transaction;
}

void Session::release_shard(std::size_t shard, bool reusable) {
  if (!held_[shard]) return;  // (held_ changes on this thread only)
  std::unique_ptr<Backend> b;
  {
    std::lock_guard lock(cancel_mu_);
    b = std::move(held_[shard]);
    if (cancel_backend_ == b.get()) cancel_backend_ = nullptr;
  }
  if (!b) return;
  if (!b->read_buf.empty() || b->status != 'I') reusable = false;
  give_back(shard, std::move(b), reusable);
}

void Session::end_shard(std::size_t shard, bool ok) {
  if (!ok || runtime_->config.pool_mode == config::PoolMode::transaction) release_shard(shard, ok);
}

void Session::release_all(bool reusable) {
  for (std::size_t s = 0; s < held_.size(); ++s) release_shard(s, reusable);
}

awaitable<void> Session::pump() {
  auto self = shared_from_this();
  const std::size_t shard = cur_;
  Backend* b = held_[shard].get();
  InputBuffer& in = b->read_buf;
  bool lost = false;
  for (;;) {
    // read_into() inline: one coroutine frame less per response.
    std::span<char> space = in.prepare(16384);
    auto [ec, n] = co_await b->socket.async_read_some(asio::buffer(space.data(), space.size()), use_nothrow);
    in.commit(n);
    if (ec) {
      lost = !(ec == asio::error::operation_aborted && (stop_pump_ || closing_));
      break;
    }
    std::size_t pos = 0, plain_end = 0;
    bool filtered = false;
    for (;;) {
      auto r = proto::decode_frame(std::string_view(in).substr(pos), proto::Direction::backend, limits_);
      if (r.status == proto::FrameStatus::need_more) break;
      if (r.status == proto::FrameStatus::error) {
        spdlog::error("[{}] malformed message from shard {}", id_, pools_[shard]->target().shard);
        lost = true;
        break;
      }
      bool keep = process_backend_frame(r.frame.type, r.frame.body);
      if (keep && !filtered) {
        plain_end = pos + r.frame.size;
      } else if (keep) {
        cout_.append(in, pos, r.frame.size);
      } else if (!filtered) {
        filtered = true;
        cout_.assign(in, 0, plain_end);
      }
      pos += r.frame.size;
    }
    if (lost) break;
    std::string_view data = filtered ? std::string_view(cout_) : std::string_view(in).substr(0, plain_end);
    if (!data.empty() && co_await stream_.write(data)) {
      closing_ = true;  // client gone; the client loop sees it on its next read
      stream_.close();
    }
    cout_.clear();
    in.erase(0, pos);
    if (closing_) break;
    bool owes_nothing = expect_.empty() && !sent_after_sync_;
    if (should_release()) {
      release_all(true);
      break;
    }
    if (stop_pump_ && owes_nothing) break;
    if (server_.shutting_down() && owes_nothing && client_txn_ == 'I') on_shutdown();
  }
  cur_ = kNoShard;
  pump_active_ = false;
  active_.store(false, std::memory_order_relaxed);
  metrics_.clients_active.add(-1);
  set_cancel_target(nullptr, 0);
  pump_exit_->cancel();
  if (lost && !closing_) {
    spdlog::warn("[{}] lost connection to shard {}", id_, pools_[shard]->target().shard);
    if (runtime_->standbys) host_failed(shard, b->host, BanReason::lost);
    backend_lost_ = true;
    release_shard(shard, false);
    expect_.clear();
    closing_ = true;
    std::string out;
    proto::ErrorFields::make("FATAL", sqlstate::connection_failure, "server connection lost").encode(out, 'E');
    co_await stream_.write(out);
    stream_.close();
  }
}

// Stops the pump and gives held backends back (clean and idle) or closes them.
awaitable<void> Session::detach_for_exit() {
  closing_ = true;
  bool clean = expect_.empty() && !sent_after_sync_ && !pinned_ && !backend_lost_;
  start_pump();
  if (pump_active_) {
    error_code ignored;
    cur()->socket.cancel(ignored);
    co_await pump_exit_->async_wait(use_nothrow);
  }
  for (std::size_t s = 0; s < held_.size(); ++s) {
    if (!held_[s]) continue;
    if (clean && held_[s]->status == 'I') {
      held_[s]->needs_discard = true;  // session mode: the next client starts fresh
      held_[s]->applied_state = kStateUnknown;
    }
    release_shard(s, clean);
  }
}

}  // namespace splitpoint::server
