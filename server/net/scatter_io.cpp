#include "server/net/scatter_io.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "protocol/messages.hpp"
#include "server/net/stream.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

struct ParallelAcquire::State {
  State(asio::any_io_executor ex, Clock::time_point d) : timer(ex), deadline(d), started(Clock::now()) {}
  asio::steady_timer timer;  // waits for the deadline; a completion cancels it
  Clock::time_point deadline;
  Clock::time_point started;
  struct Slot {
    std::shared_ptr<Pool> pool;
    std::optional<AcquireResult> result;
    Clock::time_point done_at{};
    bool taken = false;
  };
  std::vector<Slot> slots;
  std::size_t pending = 0;  // started, not completed
  std::size_t ready = 0;    // completed, not taken
  bool abandoned = false;
};

namespace {

awaitable<void> acquire_one(std::shared_ptr<ParallelAcquire::State> st, std::size_t slot, std::shared_ptr<Pool> pool,
                            std::chrono::milliseconds wait) {
  auto r = co_await pool->acquire(wait);
  if (st->abandoned) {
    if (r.backend) pool->release(std::move(r.backend), true);
    co_return;
  }
  st->slots[slot].result = std::move(r);
  st->slots[slot].done_at = ParallelAcquire::Clock::now();
  --st->pending;
  ++st->ready;
  st->timer.cancel();
}

}  // namespace

ParallelAcquire::ParallelAcquire(asio::any_io_executor ex, Clock::time_point deadline)
    : st_(std::make_shared<State>(ex, deadline)) {}

ParallelAcquire::~ParallelAcquire() { abandon(); }

void ParallelAcquire::start(std::size_t slot, std::shared_ptr<Pool> pool) {
  if (st_->slots.size() <= slot) st_->slots.resize(slot + 1);
  auto& s = st_->slots[slot] = State::Slot{pool};  // (again: after a standby failed, on the primary)
  if (auto b = pool->take_idle(st_->timer.get_executor())) {  // the usual case: no coroutine, no wait
    s.result = AcquireResult{std::move(b), {}, {}};
    s.done_at = Clock::now();
    ++st_->ready;
    return;
  }
  ++st_->pending;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(st_->deadline - Clock::now());
  asio::co_spawn(st_->timer.get_executor(),
                 acquire_one(st_, slot, std::move(pool), std::max(wait, std::chrono::milliseconds(1))),
                 asio::detached);
}

awaitable<void> ParallelAcquire::wait() {
  // No suspension between the check and async_wait: a completion cannot be missed.
  if (st_->ready > 0 || st_->pending == 0 || Clock::now() >= st_->deadline) co_return;
  st_->timer.expires_at(st_->deadline);
  co_await st_->timer.async_wait(use_nothrow);
}

std::optional<AcquireResult> ParallelAcquire::take(std::size_t slot, Clock::duration& waited) {
  if (slot >= st_->slots.size()) return std::nullopt;
  auto& s = st_->slots[slot];
  if (s.taken || !s.result) return std::nullopt;
  s.taken = true;
  --st_->ready;
  waited = s.done_at - st_->started;
  return std::move(s.result);
}

std::size_t ParallelAcquire::pending() const { return st_->pending; }

void ParallelAcquire::abandon() {
  if (!st_ || st_->abandoned) return;
  st_->abandoned = true;
  st_->timer.cancel();
  for (auto& s : st_->slots)  // completed but never taken
    if (!s.taken && s.result && s.result->backend) s.pool->release(std::move(s.result->backend), true);
}

awaitable<std::optional<std::vector<std::optional<std::string>>>> first_row_on(Backend& b, std::string_view sql,
                                                                               const proto::FrameLimits& limits) {
  std::string out;
  proto::Query{sql}.encode(out);
  std::optional<std::vector<std::optional<std::string>>> row;
  if (std::get<0>(co_await asio::async_write(b.socket, asio::buffer(out), use_nothrow))) co_return std::nullopt;
  bool ok = co_await read_until_ready(b, 1, limits, [&](char type, std::string_view, std::string_view body) {
    if (type != 'D' || row) return;
    if (auto d = proto::DataRow::decode(body)) {
      row.emplace();
      for (auto& v : d->values) row->push_back(v ? std::optional<std::string>(std::string(*v)) : std::nullopt);
    }
  });
  if (!ok) co_return std::nullopt;
  co_return row;
}

const char* const kDatabaseCollationQuery =
    "SELECT d.datcollate, pg_catalog.to_jsonb(d) ->> 'datlocprovider', "
    "coalesce(pg_catalog.to_jsonb(d) ->> 'daticulocale', pg_catalog.to_jsonb(d) ->> 'datlocale') "
    "FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()";

std::string database_collation(const std::optional<std::vector<std::optional<std::string>>>& row) {
  if (!row || row->empty() || !(*row)[0]) return "C";
  const std::string provider = row->size() > 1 && (*row)[1] ? *(*row)[1] : "c";
  const std::string locale = row->size() > 2 && (*row)[2] ? *(*row)[2] : "";
  if (provider == "i") return "icu:" + locale;  // ICU: datcollate is not the collation in use
  if (provider == "b") return locale == "C" || locale == "C.UTF-8" ? "C" : "builtin:" + locale;
  return *(*row)[0];
}

awaitable<bool> read_finished_response(Backend& b, std::size_t from, int ready_frames, std::uint64_t max_rows,
                                       const proto::FrameLimits& limits) {
  using Clock = std::chrono::steady_clock;
  // A server that finished but is still flushing a large answer keeps the socket
  // readable; one that has not finished stops. Waiting is bounded either way.
  const auto until = Clock::now() + std::chrono::milliseconds(50);
  std::size_t scanned = from;
  int ready = 0;
  std::uint64_t rows = 0;
  bool progress = false;
  for (;;) {
    for (;;) {
      auto r = proto::decode_frame(std::string_view(b.read_buf).substr(scanned), proto::Direction::backend, limits);
      if (r.status == proto::FrameStatus::error) co_return false;
      if (r.status == proto::FrameStatus::need_more) break;
      scanned += r.frame.size;
      if (r.frame.type == 'D' && ++rows > max_rows) co_return false;
      if (r.frame.type == 'Z' && ++ready >= ready_frames) co_return true;
    }
    bool got = false;
    for (;;) {
      auto space = b.read_buf.prepare(65536);
      ssize_t n = ::recv(b.socket.native_handle(), space.data(), space.size(), MSG_DONTWAIT);
      if (n <= 0) break;  // nothing more now, closed, or an error: the scan decides
      b.read_buf.commit(static_cast<std::size_t>(n));
      got = true;
    }
    if (got) {
      progress = true;
      continue;
    }
    if (!progress || Clock::now() >= until) co_return false;
    // More was arriving: give the server a moment to refill the socket.
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(5));
    Backend* bp = &b;
    t.async_wait([bp](error_code ec) {
      if (ec) return;
      error_code ignored;
      bp->socket.cancel(ignored);
    });
    co_await b.socket.async_wait(tcp::socket::wait_read, use_nothrow);
    t.cancel();
    progress = false;
  }
}

}  // namespace splitpoint::server
