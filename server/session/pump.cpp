#include "server/session/pump.hpp"

#include <spdlog/spdlog.h>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"
#include "server/session/user_types.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

awaitable<bool> Pump::use_shard(std::size_t shard, std::optional<std::size_t> standby) {
  Session& s = s_;
  if (s.cur_ == shard && active() && s.cur()->host == (standby ? *standby : s.pools_[shard]->target().host_index)) {
    // A RESET ALL, DISCARD ALL or RESET of a startup parameter left the backend with its
    // own defaults (ClientSettings::apply): the session's script first (not inside an
    // extended batch).
    if (s.cur()->applied_state != s.settings_.hash && !s.fe_.sent_after_sync) sync_state(*s.cur());
    co_return true;
  }
  bool mid_batch = s.fe_.sent_after_sync;
  s.leave_batch_shard(shard);
  if (active()) co_await drain();
  else s.bout_.clear();  // what drain() does then, without a coroutine frame
  if (s.closing_) co_return false;
  if ((mid_batch && s.fe_.batch_failed) || s.fe_.open_batch_failed) {
    // The previous shard failed inside this extended batch: discard until Sync.
    s.fe_.skip_until_sync = true;
    co_return false;
  }
  co_return co_await attach(shard, standby);
}

void Pump::sync_state(Backend& b) {
  for (int n = s_.sync_backend_state(b, s_.bout_, true); n > 0; --n) s_.fe_.expect.push_back(Expect{'Z', true});
}

awaitable<bool> Pump::attach(std::size_t shard, std::optional<std::size_t> standby) {
  Session& s = s_;
  // A backend held outside a transaction on another host than the statement wants
  // (a standby's after a read, or the old primary's after a failover) goes back.
  if (s.runtime_->standbys && s.held_[shard] && s.held_[shard]->status == 'I' && !s.pinned_ &&
      s.held_[shard]->host != (standby ? *standby : s.pools_[shard]->target().host_index))
    s.release_shard(shard, true);
  s.drop_if_closed(shard);
  if (!s.held_[shard]) {
    const auto waited_from = std::chrono::steady_clock::now();
    AcquireResult r;
    if (!s.runtime_->standbys) r.backend = s.pools_[shard]->take_idle(s.stream_.socket().get_executor());  // no coroutine frame
    if (!r.backend) r = co_await s.hosts_.acquire_backend(shard, standby);
    if (shard < kMaxShards) s.metrics_.shards[shard].pool_wait.observe_since(waited_from);
    if (!r.backend) {
      if (shard < kMaxShards) s.metrics_.shards[shard].connect_errors.add();
      s.metrics_.error(r.sqlstate);
      spdlog::warn("[{}] no backend: {}", s.id_, r.message);
      co_await s.send_error("ERROR", r.sqlstate, r.message, false);
      if (s.fe_.client_txn != 'I') s.fe_.client_txn = 'E';
      co_return false;
    }
    s.held_[shard] = std::move(r.backend);
  }
  Backend* b = s.held_[shard].get();
  if (const std::size_t catalog = s.catalog_shard(); catalog != shard) {
    // This shard's OIDs of types made by CREATE TYPE, to give the client the catalog
    // shard's (process_backend_frame; server/session/user_types.hpp).
    const std::string &here = s.pools_[shard]->target().shard, &there = s.pools_[catalog]->target().shard;
    if (!user_types::fresh(here, there)) {
      std::unique_ptr<Backend> borrowed;
      Backend* on_catalog = s.held_[catalog].get();
      if (!on_catalog) {
        auto r = co_await s.pools_[catalog]->acquire(s.runtime_->config.timeouts.client_login);
        borrowed = std::move(r.backend);
        on_catalog = borrowed.get();
      }
      // (Not in a failed transaction block: it would fail there.)
      if (on_catalog && on_catalog->status != 'E' && b->status != 'E')
        co_await user_types::learn(here, *b, there, *on_catalog, s.limits_);
      if (borrowed) {
        const bool reusable = borrowed->status == 'I';
        s.hosts_.give_back(catalog, std::move(borrowed), reusable);
      }
    }
  }
  s.cur_ = shard;
  s.set_cancel_target(b, shard);
  sync_state(*b);
  active_.store(true, std::memory_order_relaxed);
  s.metrics_.clients_active.add(1);
  stop_ = false;
  exit_->expires_at(asio::steady_timer::time_point::max());
  pending_ = true;  // started by flush()
  co_return true;
}

awaitable<void> Pump::drain() {
  Session& s = s_;
  if (!active()) {
    s.bout_.clear();
    co_return;
  }
  if (s.fe_.sent_after_sync) {
    // Close the implicit transaction of an unfinished extended batch so it completes;
    // one that wrote becomes a block first, which the client's Sync ends on every shard
    // the batch reached (PostgreSQL runs the whole batch as one transaction).
    s.leave_batch_shard(Session::kNoShard);
    proto::encode_sync(s.bout_);
    Expect e{'Z', true};
    e.is_sync = true;  // only its ReadyForQuery is ours: the batch's answers go to the client
    s.fe_.expect.push_back(std::move(e));
    s.fe_.sent_after_sync = false;
  }
  co_await flush();
  if (!active()) co_return;
  stop_ = true;
  if (s.fe_.expect.empty()) {
    error_code ignored;
    s.cur()->socket.cancel(ignored);
  }
  co_await exit_->async_wait(use_nothrow);
}

awaitable<void> Pump::flush() {
  Session& s = s_;
  if (!s.bout_.empty() && s.cur()) {
    s.timeout_.start();  // (before: a write into a full window to a silent shard is waiting too)
    auto ec = co_await send_all(s.cur()->socket, s.bout_);
    if (ec) {
      // The pump sees the broken connection too and tells the client.
      spdlog::warn("[{}] write to server failed: {}", s.id_, ec.message());
      error_code ignored;
      s.cur()->socket.close(ignored);
    }
  }
  s.bout_.clear();
  start();
}

// The pump of a backend attach() made current starts once its first request is out.
// Started before, its first read would always find nothing (the request is not even
// sent) and cost a failed recv plus a turn of the event loop; started after, it finds
// the answer already there whenever the server answered while the proxy was busy or
// preempted (on a loaded machine, often).
void Pump::start() {
  if (!pending_) return;
  pending_ = false;
  asio::co_spawn(s_.stream_.socket().get_executor(), run(), asio::detached);
}

awaitable<void> Pump::stop_for_exit() {
  start();
  if (!active()) co_return;
  error_code ignored;
  s_.cur()->socket.cancel(ignored);
  co_await exit_->async_wait(use_nothrow);
}

bool Pump::process_backend_frame(char type, std::string_view body) {
  Session& s = s_;
  auto v = s.fe_.on_backend(type, body, *s.cur());
  if (v.count_tag) s.count_written(body);
  if (type == 'S') s.note_parameter_status(body);
  if (v.finished) {
    if (v.started != std::chrono::steady_clock::time_point{}) {
      s.metrics_.duration[static_cast<std::size_t>(v.route)].observe_since(v.started);
      if (s.cur_ < kMaxShards) s.metrics_.shards[s.cur_].query.observe_since(v.started);
    }
    if (v.idle) {
      s.apply_session_commands();
      s.reset_transaction();
    }
  }
  if (v.client_error) {
    if (s.txn_.deadlock_pid && s.rewrite_deadlock_error(*s.cur(), body, replacement_)) {
      s.count_shard_error(sqlstate::deadlock_detected);
      return false;
    }
    auto fields = proto::ErrorFields::decode(body);
    s.count_shard_error(fields ? fields->get('C') : std::string_view("XX000"));
    if (s.timeout_.cancelled() && s.timeout_.rewrite_error(body, replacement_)) return false;
  }
  if (v.injected_failed) {
    auto e = proto::ErrorFields::decode(body);
    spdlog::warn("[{}] injected statement failed: {}", s.id_, e ? std::string(e->get('M')) : "?");
  }
  if (v.unexpected) spdlog::error("[{}] unexpected backend message '{}'", s.id_, type);
  if (v.to_client && user_types::names_user_type(type, body)) {
    // The catalog shard's OIDs (server/session/user_types.hpp).
    if (const std::size_t catalog = s.catalog_shard(); catalog != s.cur_) {
      user_types::rewrite(s.pools_[s.cur_]->target().shard, s.pools_[catalog]->target().shard, type, body, replacement_);
      return false;
    }
  }
  return v.to_client;
}

std::optional<std::size_t> Pump::forward_frames(std::string_view in, std::string_view& out) {
  std::size_t pos = 0, plain_end = 0;
  bool filtered = false;
  for (;;) {
    auto r = proto::decode_frame(in.substr(pos), proto::Direction::backend, s_.limits_);
    if (r.status == proto::FrameStatus::need_more) break;
    if (r.status == proto::FrameStatus::error) return std::nullopt;
    bool keep;
    if (r.frame.type == 'E' && owes_nothing() && is_fatal(r.frame.body)) {
      // The server ends an idle connection (shutdown, pg_terminate_backend): not the
      // client's to hear, unless losing it loses the client's state (run()).
      closed_idle_ = proto::ErrorFields::decode(r.frame.body).value_or(proto::ErrorFields{});
      keep = false;
    } else {
      keep = process_backend_frame(r.frame.type, r.frame.body);
    }
    if (keep && !filtered) {
      plain_end = pos + r.frame.size;
    } else if (keep) {
      out_.append(in.substr(pos, r.frame.size));
    } else {
      if (!filtered) out_.assign(in.substr(0, plain_end));
      filtered = true;
      out_ += replacement_;  // (usually empty)
      replacement_.clear();
    }
    pos += r.frame.size;
  }
  out = filtered ? std::string_view(out_) : in.substr(0, plain_end);
  return pos;
}

awaitable<void> Pump::run() {
  Session& s = s_;
  auto self = s.shared_from_this();
  const std::size_t shard = s.cur_;
  Backend* b = s.held_[shard].get();
  InputBuffer& in = b->read_buf;
  bool lost = false;
  for (;;) {
    // read_into() inline: one coroutine frame less per response.
    std::span<char> space = in.prepare(16384);
    auto [ec, n] = co_await b->socket.async_read_some(asio::buffer(space.data(), space.size()), use_nothrow);
    in.commit(n);
    if (ec && s.timeout_.dropped()) {
      co_await s.timeout_.answer_dropped(shard);  // (still current: the client loop waits)
      break;
    }
    if (ec) {
      lost = !(ec == asio::error::operation_aborted && (stop_ || s.closing_));
      break;
    }
    std::string_view data;
    std::optional<std::size_t> read = forward_frames(std::string_view(in), data);
    if (!read) {
      spdlog::error("[{}] malformed message from shard {}", s.id_, s.pools_[shard]->target().shard);
      lost = true;
      break;
    }
    if (s.fe_.expect.empty()) s.timeout_.owed_nothing();  // timeouts.query: nothing owed (before the client hears it)
    if (b->status == 'E' && s.block_aborted()) co_await s.release_aborted_block();
    if (!data.empty() && co_await s.stream_.write(data)) {
      s.closing_ = true;  // client gone; the client loop sees it on its next read
      s.stream_.close();
    }
    out_.clear();
    in.erase(0, *read);
    if (s.closing_) break;
    bool owes_nothing = s.fe_.expect.empty() && !s.fe_.sent_after_sync;
    if (s.should_release()) {
      s.release_all(true);
      break;
    }
    if (stop_ && owes_nothing) break;
    if (s.server_.shutting_down() && owes_nothing && s.fe_.client_txn == 'I') s.on_shutdown();
  }
  detach();
  if (lost && !s.closing_) {
    if (owes_nothing() && s.fe_.client_txn == 'I' && !s.settings_.unreplayable) {
      // Closed between transactions: the next statement takes another backend.
      spdlog::info("[{}] shard {} closed the session's idle connection ({}); a new one takes its place", s.id_,
                   s.pools_[shard]->target().shard, closed_idle_ ? std::string(closed_idle_->get('M')) : "EOF");
      s.release_shard(shard, false);
    } else {
      if (closed_idle_) {
        // Its FATAL is the client's after all (the transaction it was in is gone).
        std::string out;
        closed_idle_->encode(out, 'E');
        co_await s.stream_.write(out);
      }
      co_await report_lost(shard, b);
    }
  }
  closed_idle_.reset();
}

bool Pump::owes_nothing() const { return s_.fe_.expect.empty() && !s_.fe_.sent_after_sync; }

bool Pump::is_fatal(std::string_view error_body) {
  auto fields = proto::ErrorFields::decode(error_body);
  return fields && (fields->get('V') == "FATAL" || fields->get('S') == "FATAL" || fields->get('V') == "PANIC");
}

void Pump::detach() {
  Session& s = s_;
  s.cur_ = Session::kNoShard;
  s.timeout_.detached();
  active_.store(false, std::memory_order_relaxed);
  s.metrics_.clients_active.add(-1);
  s.set_cancel_target(nullptr, 0);
  exit_->cancel();
}

awaitable<void> Pump::report_lost(std::size_t shard, Backend* b) {
  Session& s = s_;
  spdlog::warn("[{}] lost connection to shard {}", s.id_, s.pools_[shard]->target().shard);
  if (s.runtime_->standbys) s.hosts_.host_failed(shard, b->host, BanReason::lost);
  lost_ = true;
  s.release_shard(shard, false);
  s.fe_.expect.clear();
  s.closing_ = true;
  std::string out;
  proto::ErrorFields::make("FATAL", sqlstate::connection_failure, "server connection lost").encode(out, 'E');
  co_await s.stream_.write(out);
  s.stream_.close();
}

}  // namespace splitpoint::server
