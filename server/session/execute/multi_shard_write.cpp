// The multi-shard write executor (server/session/execute/multi_shard_write.hpp).
#include "server/session/execute/multi_shard_write.hpp"

#include <algorithm>
#include <charconv>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/key_guard.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::RouteKind;

namespace {

// Splits "INSERT 0 5" / "UPDATE 3" / "CREATE TABLE" into verb and row count.
std::pair<std::string, std::optional<long long>> split_tag(std::string_view tag) {
  auto sp = tag.rfind(' ');
  if (sp != std::string_view::npos) {
    long long n = 0;
    auto digits = tag.substr(sp + 1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc() && p == digits.data() + digits.size()) return {std::string(tag.substr(0, sp)), n};
  }
  return {std::string(tag), std::nullopt};
}

}  // namespace

awaitable<bool> Session::run_on_shards(const routing::Route& route, std::string_view sql, const ScatterRequest* ext) {
  MultiShardWrite write(*this, route, sql, ext);
  co_return co_await write.run();
}

MultiShardWrite::MultiShardWrite(Session& session, const routing::Route& route, std::string_view sql,
                                 const ScatterRequest* ext)
    : s_(session), route_(route), sql_(sql), ext_(ext), targets_(route.target_shards(session.pools_.size())) {
  // SET key = <value>: the guarded shards first, so that a row that would move stops
  // the statement before the value's own shard applies it.
  if (route.key_guard())
    std::stable_partition(targets_.begin(), targets_.end(), [&](std::size_t s) { return guarded(s); });
}

bool MultiShardWrite::guarded(std::size_t shard) const {
  return route_.key_guard() && shard != route_.key_guard()->owner;
}

bool MultiShardWrite::writes_on(std::size_t shard) const {
  return route_.cls != routing::StatementClass::read && !guarded(shard);
}

awaitable<bool> MultiShardWrite::run() {
  in_block_ = s_.in_transaction();
  const auto writers = std::count_if(targets_.begin(), targets_.end(), [&](std::size_t s) { return writes_on(s); });
  if (in_block_ && writers > 1 && !s_.txn_.two_phase())
    co_return co_await s_.reject(sqlstate::cross_shard_write,
                                 "statement would write to " + std::to_string(targets_.size()) +
                                     " shards inside a transaction; a transaction may write to one shard only",
                                 ext_ != nullptr);
  co_await s_.pump_.drain();
  if (s_.closing_) co_return false;
  if (in_block_) {
    bool ok = true;
    if (!co_await join_block(ok)) co_return ok;
  }
  const auto started = std::chrono::steady_clock::now();
  // (One target: a statement the proxy runs itself for one shard, an indexed write in
  // the extended protocol or a rewritten INSERT, is a one-shard statement.)
  const auto label = Session::label_of(route_, route_.kind != RouteKind::all_shards && targets_.size() > 1);
  s_.count_route(route_, label);
  for (auto s : targets_) {
    if (!guarded(s) && route_.key_guard() && !failed_.empty()) break;  // (a row would move: not applied)
    co_await run_on(s);
  }
  co_await answer();
  if (route_.cls == routing::StatementClass::ddl && !in_block_) s_.forget_table_definitions();  // (now committed)
  s_.metrics_.duration[static_cast<std::size_t>(label)].observe_since(started);
  co_return true;
}

// two_phase (or one shard): every target joins the transaction, committed together. Its
// backend is held now and gets BEGIN with the statement (run_on), but where a guarded
// shard's failure may stop the statement before it reaches the others: BEGIN now.
awaitable<bool> MultiShardWrite::join_block(bool& ok) {
  // (Transactions that write one shard only: a guarded UPDATE writes its value's shard.)
  const auto* guard = route_.key_guard();
  std::string error;
  if (guard && !s_.txn_.two_phase() && std::find(targets_.begin(), targets_.end(), guard->owner) != targets_.end() &&
      !s_.check_write(route_, guard->owner, error)) {
    ok = co_await s_.reject(sqlstate::cross_shard_write, error, ext_ != nullptr);
    co_return false;
  }
  for (auto s : targets_) {
    bool joined = false;
    if (guard) joined = co_await s_.txn_.join_transaction(s);
    else joined = co_await s_.txn_.hold_backend(s);
    if (!joined) {
      s_.fe_.fail_block();
      ok = co_await s_.reject(sqlstate::connection_failure,
                              "shard \"" + s_.pools_[s]->target().shard + "\" could not join the transaction",
                              ext_ != nullptr);
      co_return false;
    }
    if (!writes_on(s)) continue;  // (reads only; a guarded one fails rather than write)
    s_.txn_.note_written(s);
    if (!s_.txn_.write_shard) s_.txn_.write_shard = s;
  }
  co_return true;
}

awaitable<void> MultiShardWrite::run_on(std::size_t shard) {
  std::string_view stmt = sql_;
  for (auto& [s, text] : route_.per_shard_sql)
    if (s == shard) stmt = text;
  auto hidden = s_.moves_.hide_foreign_rows(shard, route_, stmt);
  if (hidden) stmt = *hidden;
  const auto started = std::chrono::steady_clock::now();
  // In a block, a shard that has not joined it gets BEGIN with the statement (one round
  // trip, join_block held its backend).
  auto sent = co_await s_.send_on(shard, stmt, ext_, true, in_block_);
  auto reply = co_await s_.read_reply(sent, true, ~std::size_t{0});
  if (shard < kMaxShards) {
    s_.metrics_.shards[shard].query.observe_since(started);
    if (!reply.error.empty() || reply.lost) {
      auto reason = reply.lost ? MissingReason::unreachable : MissingReason::error;
      s_.metrics_.shards[shard].missing[static_cast<std::size_t>(reason)].add();
    }
  }
  fold(shard, reply);
}

void MultiShardWrite::fold(std::size_t shard, const Session::Reply& reply) {
  const std::string& name = s_.pools_[shard]->target().shard;
  if (!reply.error.empty() || reply.lost) {
    if (first_error_.empty()) first_error_ = reply.lost ? std::string() : reply.error;
    failed_ += (failed_.empty() ? "" : ", ") + name;
    return;
  }
  const bool first_copy = applied_.empty();
  s_.count_reply_rows(route_, shard, reply);
  if (!guarded(shard)) applied_ += (applied_.empty() ? "" : ", ") + name;  // (a guarded one changes nothing)
  // A reference table's copies all hold the same rows: one shard's answer is the answer.
  if (route_.reference_write && !first_copy) return;
  std::size_t i = 0;  // the statement whose answer this message belongs to
  auto result = [&]() -> Result& {
    if (results_.size() <= i) results_.resize(i + 1);
    return results_[i];
  };
  for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view whole) {
    Result& r = result();
    if (type == 'T' || type == 'n') {
      // One description; in the extended protocol only if the client asked (Describe).
      if (r.described || (ext_ && !ext_->describe)) return;
      r.described = true;
    }
    if (type == 'C' || type == 'I') {
      r.ended = true;
      r.empty_query = type == 'I';
      auto [verb, n] = split_tag(body.substr(0, body.find('\0')));
      r.verb = verb;
      if (n) {
        r.total += *n;
        r.counted = true;
      }
      ++i;
      return;
    }
    if (type == 'D' && route_.explain == routing::Route::Explain::text && !r.explained_shard.count(shard)) {
      r.explained_shard.insert(shard);  // (each shard's plan under a line naming it)
      proto::DataRow{{std::string_view("splitpoint: shard " + name)}}.encode(r.rows);
    }
    if (type == 'D' && !route_.row_shards.empty()) {
      if (r.returned.size() <= shard) r.returned.resize(shard + 1);
      r.returned[shard].emplace_back(whole);
      return;
    }
    if (type == 'N' || type == 'S') {  // the same notice from every shard is shown once
      if (std::find(notices_seen_.begin(), notices_seen_.end(), body) != notices_seen_.end()) return;
      notices_seen_.emplace_back(body);
    }
    r.rows.append(whole);
  });
}

std::string several_shards_error(std::string_view first_error, std::string_view what, const std::string& failed,
                                 const std::string& applied) {
  auto original = proto::ErrorFields::decode(first_error);
  std::string out;
  if (original && applied.empty()) {
    std::erase_if(original->fields, [](const auto& f) { return f.first == 'P' || f.first == 'W'; });
    std::string hint = "splitpoint: the " + std::string(what) + " failed on shard(s) " + failed +
                       " and was applied on no shard";
    auto h = std::find_if(original->fields.begin(), original->fields.end(), [](const auto& f) { return f.first == 'H'; });
    if (h != original->fields.end()) h->second += "\n" + hint;
    else original->fields.emplace_back('H', std::move(hint));
    original->encode(out, 'E');
    return out;
  }
  const std::string code = original ? std::string(original->get('C')) : std::string(sqlstate::connection_failure);
  std::string message = std::string(what) + " failed on shard(s) " + failed +
                        (applied.empty() ? "; it was applied on no shard" : "; it was applied on shard(s) " + applied) +
                        ": " + (original ? std::string(original->get('M')) : std::string("connection lost"));
  proto::ErrorFields::make("ERROR", code, message).encode(out, 'E');
  return out;
}

// Applied on some shards, failed on others: the error names both, with the first
// shard's own error; inside a block only ROLLBACK can end it.
void MultiShardWrite::fail(std::string& out) const {
  auto original = proto::ErrorFields::decode(first_error_);
  std::string code = original ? std::string(original->get('C')) : std::string(sqlstate::connection_failure);
  if (original && targets_.size() == 1 && !route_.key_guard()) {  // (a rewritten statement for one shard)
    // PostgreSQL's own error, every field of it but a position in a text the client did not send.
    std::erase_if(original->fields, [](const auto& f) { return f.first == 'P'; });
    original->encode(out, 'E');
    s_.count_shard_error(code);
    return;
  }
  if (original && route_.key_guard() && original->get('M').find(routing::kKeyGuardMarker) != std::string_view::npos) {
    const auto& g = *route_.key_guard();
    proto::ErrorFields::make("ERROR", "SPR01",
                             "cannot update the distribution key \"" + g.column + "\" of table \"" + g.table +
                                 "\": a row it matches on shard(s) " + failed_ + " would have to move to shard \"" +
                                 s_.pools_[g.owner]->target().shard +
                                 "\"; delete it and insert it again instead (nothing was changed)")
        .encode(out, 'E');
    s_.count_shard_error("SPR01");
    return;
  }
  // (In the proxy's own block or a batch's implicit one it is rolled back everywhere.)
  out += several_shards_error(first_error_, "statement", failed_,
                              s_.txn_.own || s_.txn_.implicit ? std::string() : applied_);
  s_.count_shard_error(code);
}

// Row i of the statement came back as the next row of its shard's answer — unless a
// shard returned fewer rows than it got (ON CONFLICT DO NOTHING skipped some): then
// which is which is unknown, and the rows go shard after shard.
void MultiShardWrite::append_returned(const Result& r, std::string& out) const {
  const auto& returned = r.returned;
  if (returned.empty()) return;
  std::vector<std::size_t> expected(returned.size()), next(returned.size());
  bool in_order = true;
  for (std::size_t s : route_.row_shards) {
    if (s < expected.size()) ++expected[s];
    else in_order = false;  // a shard that returned nothing
  }
  for (std::size_t s = 0; s < returned.size(); ++s) in_order = in_order && returned[s].size() == expected[s];
  if (!in_order) {
    for (const auto& rows : returned)
      for (const auto& row : rows) out += row;
    return;
  }
  for (std::size_t s : route_.row_shards) out += returned[s][next[s]++];
}

awaitable<void> MultiShardWrite::answer() {
  std::string out;
  if (!failed_.empty()) {
    fail(out);
    if (ext_) s_.fe_.skip_until_sync = true;
    if (in_block_) co_await s_.fail_block();
  } else {
    for (const Result& r : results_) {
      out += r.rows;
      append_returned(r, out);
      if (!r.ended) continue;  // (what came after the last statement's end: notices)
      if (r.empty_query) {
        proto::encode_empty_query(out);
        continue;
      }
      std::string tag = r.verb;
      if (r.counted) tag += (r.verb == "INSERT" ? " 0 " : " ") + std::to_string(r.total);
      proto::CommandComplete{tag}.encode(out);
    }
  }
  if (!ext_) proto::ReadyForQuery{s_.fe_.client_txn}.encode(out);
  co_await s_.stream_.write(out);
}

}  // namespace splitpoint::server
