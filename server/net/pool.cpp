#include "server/net/pool.hpp"

#include <algorithm>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "protocol/sqlstate.hpp"

namespace splitpoint::server {

// A queued acquirer. Shared with the pool's other threads (release(), a connect
// finishing): they fill `backend` or `error`, or set `retry`, and wake the timer on the
// waiter's own executor.
struct Pool::Waiter {
  explicit Waiter(asio::any_io_executor ex) : executor(ex), timer(ex) {}
  asio::any_io_executor executor;
  asio::steady_timer timer;
  std::chrono::steady_clock::time_point deadline;
  std::unique_ptr<Backend> backend;
  std::optional<AcquireResult> error;    // its connect failed: what it answers
  std::optional<AcquireResult> refused;  // its connect got 53300: answered if nothing comes
  bool connecting = false;  // a connect started for it has not finished
  bool retry = false;       // resumed after PAUSE: try again
  bool done = false;
  int passed_over = 0;  // times a later waiter got a connection first (next_waiter)
};

// Which waiter gets a released connection: among the first few, the first one on the
// connection's own thread (no move of the socket, no wake-up of another thread);
// else, or once the first waiter has been passed over twice, the first.
std::deque<std::shared_ptr<Pool::Waiter>>::iterator Pool::next_waiter(Backend& b) {
  constexpr std::size_t kLookAhead = 4;
  auto first = waiters_.begin();
  if ((*first)->passed_over >= 2) return first;
  for (auto it = first; it != waiters_.end() && it - first < static_cast<std::ptrdiff_t>(kLookAhead); ++it) {
    if (b.runs_on((*it)->executor)) {
      for (auto p = first; p != it; ++p) ++(*p)->passed_over;
      return it;
    }
  }
  return first;
}

// A connection released this recently is handed out without the peek (a system call
// per transaction under load); one that broke in between is reported as lost, as one
// that breaks between the peek and the query always was.
constexpr std::chrono::milliseconds kPeekAfter{10};

std::unique_ptr<Backend> Pool::take_idle(const asio::any_io_executor& ex) {
  const auto now = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  while (!paused_ && !idle_.empty()) {
    // The most recently used connection already on the caller's thread, else the most
    // recently used one, moved there.
    auto it = idle_.end();
    while (it != idle_.begin() && !(*std::prev(it))->runs_on(ex)) --it;
    it = it == idle_.begin() ? std::prev(idle_.end()) : std::prev(it);
    auto b = std::move(*it);
    idle_.erase(it);
    lock.unlock();
    if (b->runs_on(ex)) {
      error_code ignored;
      b->socket.cancel(ignored);  // its watch (watch_idle); move_to's release cancels it too
    }
    if ((now - b->released_at < kPeekAfter || b->looks_healthy()) && b->move_to(ex)) return b;
    b.reset();  // closed by the server (restart, idle timeout): drop it
    lock.lock();
    --open_;
  }
  return nullptr;
}

// A client that needs a connection queues as a waiter, and when the pool may grow a
// connect is started for it in the background. Whatever comes first serves it: a
// connection another client releases, or its own connect (which, if the client was
// served meanwhile, goes to the next waiter or stays idle). So a shard slow to accept
// (its postmaster busy forking under load) delays only the clients nothing else can
// serve, and fails a client only when its own connect fails while it still waits.
awaitable<AcquireResult> Pool::acquire(std::chrono::milliseconds wait_timeout) {
  auto ex = co_await asio::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + wait_timeout;
  for (;;) {
    if (auto b = take_idle(ex)) co_return AcquireResult{std::move(b), {}, {}};
    auto waiter = std::make_shared<Waiter>(ex);
    waiter->deadline = deadline;
    bool open = false;
    {
      std::lock_guard lock(mu_);
      if (!paused_ && !idle_.empty()) continue;  // released since take_idle() looked
      waiter->timer.expires_at(deadline);
      waiters_.push_back(waiter);
      open = !paused_ && open_ < max_size_;
      if (open) count_connect(*waiter);
    }
    if (open) start_connect(waiter);
    for (;;) {
      co_await waiter->timer.async_wait(use_nothrow);
      std::lock_guard lock(mu_);
      if (waiter->done) break;
      // Its own connect is bounded by timeouts.server_connect: its outcome is this
      // client's (as a timeout or refused connection must be, for failover).
      if (waiter->connecting) {
        waiter->timer.expires_at(std::chrono::steady_clock::time_point::max());
        continue;
      }
      if (std::chrono::steady_clock::now() < deadline) {  // woken by its connect's end
        waiter->timer.expires_at(deadline);
        continue;
      }
      std::erase(waiters_, waiter);
      if (waiter->refused) co_return std::move(*waiter->refused);
      co_return AcquireResult{nullptr, sqlstate::too_many_connections,
                              "timeout waiting for a connection to shard \"" + target_.shard + "\""};
    }
    if (waiter->error) co_return std::move(*waiter->error);
    if (waiter->backend) {
      if (waiter->backend->move_to(ex)) co_return AcquireResult{std::move(waiter->backend), {}, {}};
      waiter->backend.reset();
      std::lock_guard lock(mu_);
      --open_;
    }
    // retry after PAUSE, or the handed connection could not move here: again
  }
}

void Pool::count_connect(Waiter& w) {
  // Called with mu_ held.
  ++open_;
  ++opening_;
  w.connecting = true;
}

void Pool::start_connect(std::shared_ptr<Waiter> origin) {
  auto ex = origin->executor;
  asio::co_spawn(ex, connect_for(shared_from_this(), std::move(origin)), asio::detached);
}

// `self` keeps the pool alive. Runs on the origin's executor.
awaitable<void> Pool::connect_for(std::shared_ptr<Pool> self, std::shared_ptr<Waiter> origin) {
  auto r = co_await connect_backend(target_);
  bool read_max_prepared = false;
  {
    std::lock_guard lock(mu_);
    if (r.backend && !reading_max_prepared_ && max_prepared_transactions_.value_or(0) == 0)
      read_max_prepared = reading_max_prepared_ = true;
  }
  if (read_max_prepared) {
    // Not a ParameterStatus parameter: one query, on the pool's first connection
    // (and on each new one while it reads 0).
    auto q = co_await simple_query(*r.backend, "SHOW max_prepared_transactions", target_.connect_timeout);
    std::lock_guard lock(mu_);
    reading_max_prepared_ = false;
    if (q.ok() && !q.rows.empty() && !q.rows[0].empty() && q.rows[0][0]) {
      try {
        max_prepared_transactions_ = std::stoi(*q.rows[0][0]);
      } catch (const std::exception&) {
      }
    }
    if (q.lost) r = ConnectResult{nullptr, q.error_code, "shard \"" + target_.shard + "\": " + q.error_message};
  }
  std::lock_guard lock(mu_);
  --opening_;
  origin->connecting = false;
  const bool waiting = !origin->done;  // else served by a release, or gone (PAUSE's retry)
  if (r.backend) {
    if (!server_parameters_) server_parameters_ = r.backend->parameters;
    if (waiting && !paused_) {
      std::erase(waiters_, origin);
      hand_over(std::move(origin), std::move(r.backend));
      co_return;
    }
    put_back(std::move(r.backend));
    if (waiting) origin->timer.cancel();  // (paused) it waits again, up to its deadline
    co_return;
  }
  --open_;
  if (!waiting) {  // no client gets this error: the log is where it shows
    spdlog::warn("pool of shard \"{}\": a connect failed after its client was served otherwise: {}",
                 target_.shard, r.message);
    co_return;
  }
  AcquireResult failed{nullptr, r.sqlstate, r.message, r.restarting};
  // Refused for want of connections (53300: max_connections, or its user's connection
  // limit) while the pool's other connections are in use: it waits for one of them up to
  // its deadline, as in a full pool, and gets that error only if none comes.
  if (r.sqlstate == sqlstate::too_many_connections && open_ > 0 && !paused_ &&
      std::chrono::steady_clock::now() < origin->deadline) {
    origin->refused = std::move(failed);
    origin->timer.cancel();  // it waits again, up to its deadline
    co_return;
  }
  std::erase(waiters_, origin);
  origin->error = std::move(failed);
  hand_over(std::move(origin), nullptr);
}

void Pool::hand_over(std::shared_ptr<Waiter> w, std::unique_ptr<Backend> backend) {
  // Called with mu_ held.
  w->done = true;
  w->backend = std::move(backend);
  asio::post(w->executor, [w] { w->timer.cancel(); });
}

void Pool::release(std::unique_ptr<Backend> backend, bool reusable) {
  std::shared_ptr<Waiter> connect_for_waiter;
  {
    std::lock_guard lock(mu_);
    // (Never one inside a transaction or with answers unread: its next user would run
    // in another client's transaction.)
    if (reusable && backend && !backend->cancel_sent && backend->status == 'I' && backend->read_buf.empty()) {
      put_back(std::move(backend));
      return;
    }
    backend.reset();
    --open_;
    // The freed place: a connect for the first waiter that has none of its own.
    if (paused_) return;
    auto it = std::find_if(waiters_.begin(), waiters_.end(), [](const auto& w) { return !w->connecting; });
    if (it == waiters_.end()) return;
    connect_for_waiter = *it;
    count_connect(*connect_for_waiter);
  }
  start_connect(std::move(connect_for_waiter));
}

void Pool::put_back(std::unique_ptr<Backend> backend) {
  // Called with mu_ held.
  if (!paused_ && !waiters_.empty()) {
    auto it = next_waiter(*backend);
    auto w = std::move(*it);
    waiters_.erase(it);
    hand_over(std::move(w), std::move(backend));
    return;
  }
  backend->released_at = std::chrono::steady_clock::now();
  watch_idle(*backend);
  idle_.push_back(std::move(backend));
}

// An idle connection the server closes (restart, pg_terminate_backend, idle timeout) or
// writes to (its FATAL before closing) is dropped then, not found later by a client (as
// PgBouncer watches its idle server sockets). The wait costs no system call: the socket
// is in the reactor's epoll set already. take_idle cancels it.
void Pool::watch_idle(Backend& b) {
  b.socket.async_wait(tcp::socket::wait_read, [weak = weak_from_this(), p = &b](error_code ec) {
    if (ec == asio::error::operation_aborted) return;
    if (auto self = weak.lock()) self->drop_idle(p);
  });
}

void Pool::drop_idle(const Backend* b) {
  std::unique_ptr<Backend> closed;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(idle_.begin(), idle_.end(), [&](const auto& i) { return i.get() == b; });
    if (it == idle_.end()) return;  // taken meanwhile (by address: at worst another one is peeked)
    if ((*it)->looks_healthy()) {
      watch_idle(**it);
      return;
    }
    closed = std::move(*it);
    idle_.erase(it);
    --open_;
  }
  spdlog::debug("pool of shard \"{}\": the server closed an idle connection; dropped", target_.shard);
}

void Pool::close_idle() {
  std::vector<std::unique_ptr<Backend>> closed;
  {
    std::lock_guard lock(mu_);
    closed.swap(idle_);
    open_ -= static_cast<int>(closed.size());
  }
}

void Pool::set_paused(bool paused) {
  std::lock_guard lock(mu_);
  paused_ = paused;
  if (paused) return;
  // Everyone queued during the pause tries again.
  while (!waiters_.empty()) {
    auto w = waiters_.front();
    waiters_.pop_front();
    w->retry = true;
    hand_over(std::move(w), nullptr);
  }
}

bool Pool::paused() const {
  std::lock_guard lock(mu_);
  return paused_;
}

std::optional<ParameterList> Pool::server_parameters() const {
  std::lock_guard lock(mu_);
  return server_parameters_;
}

std::optional<ParameterList> Pool::startup_parameters(const std::string& script) const {
  std::lock_guard lock(mu_);
  auto it = startup_parameters_.find(script);
  if (it == startup_parameters_.end()) return std::nullopt;
  return it->second;
}

void Pool::remember_startup_parameters(const std::string& script, ParameterList reported) {
  std::lock_guard lock(mu_);
  if (startup_parameters_.size() >= 256) startup_parameters_.clear();  // a bound, not a policy
  startup_parameters_[script] = std::move(reported);
}

std::optional<int> Pool::max_prepared_transactions() const {
  std::lock_guard lock(mu_);
  return max_prepared_transactions_;
}

void Pool::set_max_prepared_transactions(int value) {
  std::lock_guard lock(mu_);
  max_prepared_transactions_ = value;
}

PoolStats Pool::stats() const {
  std::lock_guard lock(mu_);
  PoolStats s;
  s.idle = static_cast<int>(idle_.size());
  s.opening = opening_;
  s.waiting = static_cast<int>(waiters_.size());
  s.active = open_ - s.idle - s.opening;
  return s;
}

}  // namespace splitpoint::server
