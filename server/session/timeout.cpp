// timeouts.query (an extension, as PgBouncer's query_timeout; docs/configuration.md):
// a statement the current backend has owed answers for longer than the timeout is
// cancelled there (a CancelRequest, as a client's); PostgreSQL's 57014 then reaches the
// client with a message naming the shard and the timeout. A backend that does not
// answer the cancel within timeouts.server_connect either (a blackholed shard: no FIN,
// no RST) is closed, never pooled again, and the client's statements get 08006; the
// client's connection goes on (a transaction block is failed). A write on several
// shards is bounded the same way on each (read_bounded in route.cpp). SPEC §2
// timeouts, docs/reliability.md.
//
// The cost when it is on: one timer per session, made on first use; a statement only
// notes when the backend started owing (QueryClock::since), and the timer, armed when
// it is not already, looks at that when it fires: at most one wake-up per timeout
// interval however many statements run. Off (0), nothing is armed or made.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using Clock = std::chrono::steady_clock;

namespace {

std::string duration_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s" : std::to_string(d.count()) + "ms";
}

}  // namespace

void Session::start_query_timer() {
  auto& q = query_clock_;
  q.since = Clock::now();
  const auto due = q.since + runtime_->config.timeouts.query;
  if (q.armed && q.timer->expiry() <= due) return;  // it looks at `since` when it fires
  if (!q.timer) q.timer = std::make_unique<asio::steady_timer>(stream_.socket().get_executor());
  arm_query_timer(due);  // (armed later: the wait for a cancel's answer, which ended)
}

// Replaces a pending wait, whose handler then sees operation_aborted and does nothing.
void Session::arm_query_timer(Clock::time_point at) {
  query_clock_.armed = true;
  query_clock_.timer->expires_at(at);
  query_clock_.timer->async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (!self || ec) return;
    self->query_clock_.armed = false;
    self->on_query_timer();
  });
}

// The timer fired: nothing owed (it stops), owed for less than the timeout (it waits the
// rest), owed too long (cancel, then the grace of timeouts.server_connect), or the
// cancelled statement still unanswered after that grace (the backend is dropped).
void Session::on_query_timer() {
  auto& q = query_clock_;
  const auto limit = runtime_->config.timeouts.query;
  if (q.since == Clock::time_point{} || !cur() || !pump_.active() || fe_.expect.empty() || limit.count() == 0) {
    q.since = {};
    return;
  }
  const auto now = Clock::now();
  if (timed_out_statement_cancelled()) {
    spdlog::warn("[{}] shard {} did not answer the cancel within timeouts.server_connect: closing its connection",
                 id_, pools_[cur_]->target().shard);
    q.dropped = true;
    error_code ignored;
    cur()->socket.close(ignored);  // the pump answers the client (answer_dropped_statement)
    return;
  }
  if (now < q.since + limit) {
    arm_query_timer(q.since + limit);
    return;
  }
  cancel_timed_out_statement();
  q.cancelled = q.since;
  arm_query_timer(now + runtime_->config.timeouts.server_connect);
}

void Session::cancel_timed_out_statement() {
  spdlog::warn("[{}] statement on shard {} unanswered after timeouts.query ({}): cancelling it", id_,
               pools_[cur_]->target().shard, duration_text(runtime_->config.timeouts.query));
  cancel_statement_on(cur_, *cur());
}

void Session::cancel_statement_on(std::size_t shard, Backend& b) {
  const auto& e = runtime_->shards[shard]->hosts().endpoint(b.host);  // (a standby's, SPEC §10)
  b.cancel_sent = true;  // never handed to another session: the cancel could land there
  asio::co_spawn(stream_.socket().get_executor(),
                 send_cancel(e.host, e.port, b.process_id, b.secret_key, runtime_->config.timeouts.server_connect),
                 asio::detached);
}

bool Session::rewrite_timeout_error(std::string_view body, std::string& out) {
  auto e = proto::ErrorFields::decode(body);
  if (!e || e->get('C') != sqlstate::query_canceled) return false;
  const std::string message = "canceling statement due to timeouts.query (" +
                              duration_text(runtime_->config.timeouts.query) + ") on shard \"" +
                              pools_[cur_]->target().shard + "\"";
  for (auto& [code, value] : e->fields)
    if (code == 'M') value = message;
  e->encode(out, 'E');
  return true;
}

// Each statement still owed to the client (a Query, or an extended batch up to its
// Sync) gets 08006 and its ReadyForQuery; a batch whose Sync is still to come is
// skipped up to it, as after any error. Inside a transaction block the block fails.
awaitable<void> Session::answer_dropped_statement(std::size_t shard) {
  query_clock_.dropped = false;
  query_clock_.since = {};
  const std::string message = "shard \"" + pools_[shard]->target().shard + "\" did not answer within timeouts.query (" +
                              duration_text(runtime_->config.timeouts.query) +
                              ") nor to the cancel; its connection was closed";
  spdlog::warn("[{}] {}", id_, message);
  int owed = 0;
  for (const Expect& e : fe_.expect) owed += e.type == 'Z' && !e.swallow;
  fe_.expect.clear();
  if (fe_.sent_after_sync) {
    fe_.skip_until_sync = true;
    fe_.batch_failed = true;
    fe_.sent_after_sync = false;
  }
  release_shard(shard, false);
  if (in_transaction()) co_await fail_block();
  std::string out;
  const auto error = proto::ErrorFields::make("ERROR", sqlstate::connection_failure, message);
  for (int i = 0; i < std::max(owed, fe_.skip_until_sync ? 1 : 0); ++i) {
    error.encode(out, 'E');
    metrics_.error(sqlstate::connection_failure);
    if (i < owed) proto::ReadyForQuery{fe_.client_txn}.encode(out);
  }
  if (co_await stream_.write(out)) {
    closing_ = true;
    stream_.close();
  }
}

}  // namespace splitpoint::server
