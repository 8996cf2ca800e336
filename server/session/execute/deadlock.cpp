// Deadlocks across shards (timeouts.deadlock): the session's side of the search in
// server/txn/deadlocks.hpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/net/pool.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

// The backends of the session's transaction, and those a multi-shard read is running
// on (taken for the read alone where the transaction had none on that shard).
std::vector<std::pair<std::size_t, Backend*>> Session::backends_in_use() {
  std::vector<std::pair<std::size_t, Backend*>> out;
  for (std::size_t shard = 0; shard < held_.size(); ++shard)
    if (held_[shard]) out.emplace_back(shard, held_[shard].get());
  for (const auto& [shard, b] : cancel_.scatter_on_shards())
    if (std::none_of(out.begin(), out.end(), [&](const auto& u) { return u.second == b; })) out.emplace_back(shard, b);
  return out;
}

void Session::list_held(std::vector<deadlocks::Holding>& out) {
  for (auto [shard, b] : backends_in_use()) {
    // (a standby's backend takes no lock a primary's transaction waits for)
    if (b->process_id == 0 || b->host != pools_[shard]->target().host_index) continue;
    deadlocks::Holding h;
    h.held = {id_, txn_.seq, shard, {}, b->process_id};
    h.pool = pools_[shard];
    h.session = weak_from_this();
    h.worker = &worker_;
    out.push_back(std::move(h));
  }
}

void Session::break_deadlock(std::size_t shard, std::int32_t pid, std::uint64_t txn, std::string detail) {
  if (closing_ || txn != txn_.seq) return;  // that transaction ended: nothing of it waits any more
  Backend* b = nullptr;
  for (auto [s, in_use] : backends_in_use())
    if (s == shard && in_use->process_id == pid) b = in_use;
  if (!b) return;  // the backend went back: it waits no more
  txn_.deadlock_pid = pid;
  txn_.deadlock_detail = std::move(detail);
  server_.metrics().deadlock_broken();
  spdlog::warn("[{}] deadlock across shards: cancelling this session's statement on shard {}", id_,
               pools_[shard]->target().shard);
  cancel_statement_on(shard, *b);
}

deadlocks::SessionHooks session_deadlock_hooks() {
  return {[](Worker& w, std::vector<deadlocks::Holding>& out) {
            for (Session* s : w.sessions) s->list_held(out);
          },
          [](const deadlocks::Holding& h, std::string detail) {
            asio::post(h.worker->context, [s = h.session, shard = h.held.shard, pid = h.held.pid, txn = h.held.txn,
                                           detail = std::move(detail)]() mutable {
              if (auto session = s.lock()) session->break_deadlock(shard, pid, txn, std::move(detail));
            });
          }};
}

bool Session::rewrite_deadlock_error(const Backend& b, std::string_view body, std::string& out) {
  if (b.process_id != txn_.deadlock_pid) return false;
  auto e = proto::ErrorFields::decode(body);
  if (!e || e->get('C') != sqlstate::query_canceled) return false;
  auto& fields = e->fields;
  // PostgreSQL's own place in its source (F, L, R) is the cancel's, not a deadlock's.
  std::erase_if(fields, [](const auto& f) { return f.first == 'F' || f.first == 'L' || f.first == 'R' || f.first == 'D'; });
  for (auto& [code, value] : fields) {
    if (code == 'C') value = sqlstate::deadlock_detected;
    if (code == 'M') value = "deadlock detected";
  }
  fields.emplace_back('D', txn_.deadlock_detail);
  fields.emplace_back('H', "The transactions wait for each other on different shards, where no PostgreSQL sees the "
                           "whole cycle; splitpoint cancelled this one. See splitpoint's log for the sessions.");
  e->encode(out, 'E');
  txn_.deadlock_pid = 0;
  return true;
}

std::string Session::shard_error(const Backend& b, std::string_view body) {
  std::string rewritten;
  if (txn_.deadlock_pid && rewrite_deadlock_error(b, body, rewritten)) return rewritten.substr(5);  // (its header)
  return std::string(body);
}

}  // namespace splitpoint::server
