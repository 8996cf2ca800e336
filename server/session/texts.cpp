// A simple-protocol text of several statements that no one shard can run whole (psql
// -c "SELECT ...; SELECT ...", a query tool sending its editor's text), or that reads
// and would otherwise run whole on every shard (a keyless UPDATE among reads, whose
// rows would come back once per shard, unmerged: a wrong answer until now): PostgreSQL runs
// its statements one after the other in one implicit transaction (unless the text has
// its own BEGIN/COMMIT), answers each, stops at the first error, and ends with one
// ReadyForQuery. The proxy does the same, each statement through the usual path (a read
// of several shards is merged or combined, a statement of one shard goes there, a write
// of several shards is a two-phase commit), with one ReadyForQuery at the end:
//   - reads outside a block run as they are (their implicit transaction makes no
//     difference to them under READ COMMITTED: each statement takes its own snapshot);
//   - a text that writes outside a block runs inside a block of the proxy's own
//     (BEGIN first, COMMIT after the last statement, ROLLBACK after an error; their
//     answers are not the client's), so it is applied whole or not at all;
//   - the text's own BEGIN, COMMIT/END and ROLLBACK run as statements of it.
// A text with a SQL PREPARE or EXECUTE among its statements is split the same way over
// one shard too (the router refuses it whole: it follows each prepared statement, which
// it can only for a statement of its own). Not split (refused as before,
// docs/routing.md): SAVEPOINT and the two-phase verbs, COPY, cursors, and a write
// outside a block in a text that also has its own BEGIN/COMMIT; a syntax error anywhere fails the whole text before any of it
// runs, as in PostgreSQL (a shard answers it).
// One statement that writes on several shards outside a block runs the same way, in a
// block of the proxy's own (writes_shards_alone): it too is one transaction.
#include "protocol/messages.hpp"
#include "routing/session_command.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::RouteKind;
using routing::StatementClass;
using routing::TxnCommand;

// A text that holds a SQL PREPARE or EXECUTE among other statements: the router refuses
// it whole (it keeps each prepared statement to route its EXECUTEs, which it can only
// when the statement is alone), so it runs apart, over one shard too.
static bool sql_prepared_among_others(const routing::Route& route) {
  return route.kind == RouteKind::error && route.sqlstate == "0A000" &&
         route.message.starts_with("PREPARE and EXECUTE must be sent as a statement of their own");
}

bool Session::several_statements_apart(const routing::Route& route, std::string_view sql) const {
  if (sql_prepared_among_others(route)) return routing::may_hold_several_statements(sql);
  if (pools_.size() < 2) return false;
  const bool apart = (route.kind == RouteKind::error && route.sqlstate == "SPC01") ||
                     (route.kind == RouteKind::shards && route.shards.size() > 1) ||
                     route.kind == RouteKind::all_shards;
  return apart && routing::may_hold_several_statements(sql);
}

// `everywhere`: the text as a whole would run on every shard (MultiShardWrite), which
// is right for writes and DDL (their rows and counts are summed) but not for a read
// among them (each shard's rows would come back unmerged): such a text is split only
// when it reads.
awaitable<std::optional<bool>> Session::run_statements_apart(std::string_view sql, bool everywhere) {
  const auto parts = routing::split_statements(sql, settings_.routing.standard_conforming_strings);
  if (parts.size() < 2) co_return std::nullopt;
  // What the text does to the block, statement by statement.
  KeptShapes keep;
  auto lookup = shape_lookup(keep);
  bool block = in_transaction(), own_block_verbs = false, writes_outside = false, reads = false;
  for (const auto& part : parts) {
    auto route = runtime_->router->route_simple(part, settings_.routing, lookup);
    reads = reads || route.cls == StatementClass::read;
    if (route.syntax_error || route.copy_from || route.cursor != routing::Route::Cursor::none)
      co_return std::nullopt;
    switch (route.txn) {
      case TxnCommand::none:
        writes_outside = writes_outside || (!block && route.cls != StatementClass::read);
        break;
      case TxnCommand::begin:
        block = own_block_verbs = true;
        break;
      case TxnCommand::commit:
      case TxnCommand::rollback:
        if (route.txn_options.chain) co_return std::nullopt;
        block = false;
        own_block_verbs = true;
        break;
      default:
        co_return std::nullopt;
    }
  }
  if ((writes_outside && own_block_verbs) || (everywhere && !reads)) co_return std::nullopt;
  co_return co_await run_parts(parts, writes_outside);
}

awaitable<std::optional<bool>> Session::run_apart(const routing::Route& route, std::string_view sql) {
  if (several_statements_apart(route, sql)) {
    auto done = co_await run_statements_apart(sql, route.kind == RouteKind::all_shards);
    if (done) co_return done;
  }
  if (route.cls != StatementClass::write || in_transaction() || routing::may_hold_several_statements(sql))
    co_return std::nullopt;
  const bool alone = co_await writes_shards_alone(route);
  if (!alone) co_return std::nullopt;
  const std::vector<std::string_view> whole{sql};
  co_return co_await run_parts(whole, true);
}

awaitable<bool> Session::writes_shards_alone(const routing::Route& route) {
  // (An INSERT whose keys the proxy draws or whose rows it pulls is asked about again
  // once rewritten, with its keys: run_rewritten_insert.)
  if (pools_.size() < 2 || in_transaction() || !txn_.two_phase() || route.cls != StatementClass::write ||
      route.txn != TxnCommand::none || route.syntax_error || route.key_guard() || route.generate_keys ||
      route.pull_insert || route.explain != routing::Route::Explain::none)
    co_return false;
  if (route.kind != RouteKind::shards && route.kind != RouteKind::all_shards) co_return false;
  const std::vector<std::size_t> targets = route.target_shards(pools_.size());
  if (targets.size() < 2) co_return false;
  for (auto s : targets) {
    if (pools_[s]->max_prepared_transactions() || held_[s]) continue;
    // Not read yet: a new connection of the pool reads it (Pool::connect_for).
    const bool held = co_await txn_.hold_backend(s);
    if (held) release_shard(s, true);
  }
  // A shard that cannot prepare transactions (or whose setting is still unknown): shard
  // by shard, as before, rather than an error at COMMIT.
  co_return std::all_of(targets.begin(), targets.end(), [&](std::size_t s) {
    auto n = pools_[s]->max_prepared_transactions();
    return n && *n > 0;
  });
}

awaitable<bool> Session::run_parts(const std::vector<std::string_view>& parts, bool own_block,
                                   const routing::Route* routed) {
  ClientStream::Quiet quiet;
  stream_.quiet(&quiet);
  bool go_on = !own_block || co_await run_unseen("BEGIN");
  txn_.own = own_block;
  for (std::size_t i = 0; go_on && i < parts.size() && quiet.errors == 0; ++i) {
    if (routed) {
      go_on = co_await run_on_shards(*routed, parts[i]);
      go_on = go_on && !closing_;
    } else {
      go_on = co_await run_one(parts[i]);
    }
  }
  if (go_on && own_block) go_on = co_await run_unseen(quiet.errors == 0 ? "COMMIT" : "ROLLBACK");
  stream_.quiet(nullptr);
  if (!go_on) co_return false;
  co_await send_ready();
  co_return !closing_;
}

// One statement of the text as a Query of its own, answered before the next one.
awaitable<bool> Session::run_one(std::string_view statement) {
  std::string frame;
  proto::Query{statement}.encode(frame);
  auto decoded = proto::decode_frame(frame, proto::Direction::frontend, limits_);
  bool go_on = co_await handle_query(decoded.frame);
  if (go_on && !closing_) co_await pump_.drain();
  co_return go_on && !closing_;
}

// The proxy's own BEGIN / COMMIT / ROLLBACK around a text that writes: the client sees
// only an error of it (a COMMIT that fails), not its tag.
awaitable<bool> Session::run_unseen(std::string_view verb) {
  ClientStream::Capture capture;
  auto* outer = stream_.captured();
  stream_.capture(&capture);
  const bool go_on = co_await run_one(verb);
  stream_.capture(outer);
  std::string errors;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view whole) {
    if (type == 'E' || type == 'N') errors.append(whole);
  });
  if (!errors.empty() && go_on) co_await stream_.write(errors);  // (counted as the text's error)
  co_return go_on;
}

}  // namespace splitpoint::server
