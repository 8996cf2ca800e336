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
// notes when the backend started owing (QueryTimeout::since_), and the timer, armed when
// it is not already, looks at that when it fires: at most one wake-up per timeout
// interval however many statements run. Off (0), nothing is armed or made.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/session/timeout.hpp"

#include "server/session/session.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using Clock = std::chrono::steady_clock;

namespace {

std::string duration_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s" : std::to_string(d.count()) + "ms";
}

}  // namespace

void QueryTimeout::start_timer() {
  since_ = Clock::now();
  const auto due = since_ + s_.runtime_->config.timeouts.query;
  if (armed_ && timer_->expiry() <= due) return;  // it looks at `since` when it fires
  if (!timer_) timer_ = std::make_unique<asio::steady_timer>(s_.stream_.socket().get_executor());
  arm(due);  // (armed later: the wait for a cancel's answer, which ended)
}

// Replaces a pending wait, whose handler then sees operation_aborted and does nothing.
void QueryTimeout::arm(Clock::time_point at) {
  armed_ = true;
  timer_->expires_at(at);
  timer_->async_wait([weak = s_.weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (!self || ec) return;
    self->timeout_.armed_ = false;
    self->timeout_.on_timer();
  });
}

// The timer fired: nothing owed (it stops), owed for less than the timeout (it waits the
// rest), owed too long (cancel, then the grace of timeouts.server_connect), or the
// cancelled statement still unanswered after that grace (the backend is dropped).
void QueryTimeout::on_timer() {
  const auto limit = s_.runtime_->config.timeouts.query;
  if (since_ == Clock::time_point{} || !s_.cur() || !s_.pump_.active() || s_.fe_.expect.empty() || limit.count() == 0) {
    since_ = {};
    return;
  }
  const auto now = Clock::now();
  if (cancelled()) {
    spdlog::warn("[{}] shard {} did not answer the cancel within timeouts.server_connect: closing its connection",
                 s_.id_, s_.pools_[s_.cur_]->target().shard);
    dropped_ = true;
    error_code ignored;
    s_.cur()->socket.close(ignored);  // the pump answers the client (answer_dropped_statement)
    return;
  }
  if (now < since_ + limit) {
    arm(since_ + limit);
    return;
  }
  cancel_statement();
  cancelled_ = since_;
  arm(now + s_.runtime_->config.timeouts.server_connect);
}

void QueryTimeout::cancel_statement() {
  spdlog::warn("[{}] statement on shard {} unanswered after timeouts.query ({}): cancelling it", s_.id_,
               s_.pools_[s_.cur_]->target().shard, duration_text(s_.runtime_->config.timeouts.query));
  s_.cancel_statement_on(s_.cur_, *s_.cur());
}

void Session::cancel_statement_on(std::size_t shard, Backend& b) {
  const auto& e = runtime_->shards[shard]->hosts().endpoint(b.host);  // (a standby's, SPEC §10)
  b.cancel_sent = true;  // never handed to another session: the cancel could land there
  asio::co_spawn(stream_.socket().get_executor(),
                 send_cancel(e.host, e.port, b.process_id, b.secret_key, runtime_->config.timeouts.server_connect),
                 asio::detached);
}

bool QueryTimeout::rewrite_error(std::string_view body, std::string& out) {
  auto e = proto::ErrorFields::decode(body);
  if (!e || e->get('C') != sqlstate::query_canceled) return false;
  const std::string message = "canceling statement due to timeouts.query (" +
                              duration_text(s_.runtime_->config.timeouts.query) + ") on shard \"" +
                              s_.pools_[s_.cur_]->target().shard + "\"";
  for (auto& [code, value] : e->fields)
    if (code == 'M') value = message;
  e->encode(out, 'E');
  return true;
}

// Each statement still owed to the client (a Query, or an extended batch up to its
// Sync) gets 08006 and its ReadyForQuery; a batch whose Sync is still to come is
// skipped up to it, as after any error. Inside a transaction block the block fails.
awaitable<void> QueryTimeout::answer_dropped(std::size_t shard) {
  dropped_ = false;
  since_ = {};
  const std::string message = "shard \"" + s_.pools_[shard]->target().shard + "\" did not answer within timeouts.query (" +
                              duration_text(s_.runtime_->config.timeouts.query) +
                              ") nor to the cancel; its connection was closed";
  spdlog::warn("[{}] {}", s_.id_, message);
  int owed = 0;
  for (const Expect& e : s_.fe_.expect) owed += e.type == 'Z' && !e.swallow;
  s_.fe_.expect.clear();
  if (s_.fe_.sent_after_sync) {
    s_.fe_.skip_until_sync = true;
    s_.fe_.batch_failed = true;
    s_.fe_.sent_after_sync = false;
  }
  s_.release_shard(shard, false);
  if (s_.in_transaction()) co_await s_.fail_block();
  std::string out;
  const auto error = proto::ErrorFields::make("ERROR", sqlstate::connection_failure, message);
  for (int i = 0; i < std::max(owed, s_.fe_.skip_until_sync ? 1 : 0); ++i) {
    error.encode(out, 'E');
    s_.metrics_.error(sqlstate::connection_failure);
    if (i < owed) proto::ReadyForQuery{s_.fe_.client_txn}.encode(out);
  }
  if (co_await s_.stream_.write(out)) {
    s_.closing_ = true;
    s_.stream_.close();
  }
}

}  // namespace splitpoint::server
