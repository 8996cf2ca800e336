// Routing decisions for each statement, transactions over several shards,
// multi-shard writes and the proxy's own commands (SET/SHOW splitpoint.*).
#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <cctype>
#include <charconv>
#include <span>
#include <sys/socket.h>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/dispatch.hpp"
#include "routing/pg_tree.hpp"
#include "routing/text_scan.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/moves.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"
#include "server/session/user_types.hpp"
#include "server/txn/two_phase.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::Executor;
using routing::RouteKind;
using routing::SessionCommand;
using routing::StatementClass;
using routing::TxnCommand;

namespace {

constexpr const char* kInFailedTransaction = "25P02";

// A shard's answers to a client's write on several shards (run_on), read as
// read_until_ready but bounded by timeouts.query as a single-shard statement's are
// (timeout.cpp): past it the statement is cancelled there (its 57014 is the
// shard's error), and the connection given up (false, as lost) if the cancel is not
// answered within timeouts.server_connect. `readies`: the caller's count of
// ReadyForQuery still owed, which `on_frame` keeps.
awaitable<bool> read_bounded(Backend& b, const int& readies, const proto::FrameLimits& limits,
                             const FrameHandler& on_frame, const config::Timeouts& t,
                             std::pair<std::string, std::uint16_t> at, const std::string& shard) {
  using namespace asio::experimental::awaitable_operators;
  asio::steady_timer timer(co_await asio::this_coro::executor, t.query);
  auto first = co_await (read_until_ready(b, readies, limits, on_frame) || timer.async_wait(use_nothrow));
  if (first.index() == 0) co_return std::get<0>(first);
  spdlog::warn("write on shard {} unanswered after timeouts.query: cancelling it", shard);
  b.cancel_sent = true;  // never pooled again: the cancel could land on a later statement
  co_await send_cancel(at.first, at.second, b.process_id, b.secret_key, t.server_connect);
  timer.expires_after(t.server_connect);
  auto second = co_await (read_until_ready(b, readies, limits, on_frame) || timer.async_wait(use_nothrow));
  if (second.index() == 0) co_return std::get<0>(second);
  spdlog::warn("shard {} did not answer the cancel within timeouts.server_connect: closing its connection", shard);
  co_return false;
}

}  // namespace

RouteLabel Session::label_of(const routing::Route& route, bool multi) {
  if (route.kind == RouteKind::all_shards) return RouteLabel::all;
  if (multi) return RouteLabel::multi;
  if (route.kind == RouteKind::any_shard) return RouteLabel::reference;
  return RouteLabel::single;
}

// Counts a routed statement: by route, per partition, and its keys for hot-key stats.
void Session::count_route(const routing::Route& route, RouteLabel label) {
  if (route.cls == StatementClass::ddl) user_types::note_ddl();  // (a type may be made or dropped)
  if (index_.applying()) return;  // (a global index's entries: splitpoint_index_entry_writes_total)
  metrics_.queries[static_cast<std::size_t>(label)].add();
  for (auto& hit : route.partitions) {
    auto i = runtime_->slots->slot(hit.distribution, hit.partition);
    if (i == PartitionSlots::kNone) continue;
    metrics_.partition_queries[i].add();  // rows written: from the shards' tags (execute/rows.cpp)
  }
  if (route.distribution)
    for (auto& key : route.key_values) metrics_.hot_key(*route.distribution, key);
}

// Where a catalog read goes: the combine shard, the same for every statement of every
// session, unless the session's transaction block runs on other shards only (pg_dump's
// REPEATABLE READ transaction reads every catalog there, from one snapshot).
std::size_t Session::catalog_shard() {
  const std::size_t c = runtime_->config.combine_shard();
  if (!in_transaction() || (c < held_.size() && held_[c] && held_[c]->status != 'I')) return c;
  for (std::size_t s = 0; s < held_.size(); ++s)
    if (in_transaction_on(s)) return s;
  return c;
}

std::optional<std::size_t> Session::single_target(const routing::Route& route) {
  switch (route.kind) {
    case RouteKind::any_shard:
      // (An extended-protocol BEGIN: where the block's catalog reads then go.)
      if (route.reads == routing::Route::Reads::catalog || route.txn == TxnCommand::begin) return catalog_shard();
      return hosts_.pick_any_shard();
    case RouteKind::shards:
      if (route.shards.size() == 1 && route.per_shard_sql.empty()) return route.shards.front();
      return std::nullopt;
    case RouteKind::all_shards:
      if (pools_.size() == 1) return std::size_t{0};
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// Inside a transaction only one shard may be written (SPEC §5).
bool Session::check_write(const routing::Route& route, std::size_t shard, std::string& error) {
  if (route.cls != StatementClass::write && route.cls != StatementClass::ddl) return true;
  if (!in_transaction()) return true;
  if (txn_.two_phase()) {
    txn_.note_written(shard);
    if (!txn_.write_shard) txn_.write_shard = shard;
    return true;
  }
  if (txn_.write_shard && *txn_.write_shard != shard) {
    error = "transaction would write to shard \"" + pools_[shard]->target().shard + "\" after writing to shard \"" +
            pools_[*txn_.write_shard]->target().shard + "\"; a transaction may write to one shard only";
    return false;
  }
  txn_.write_shard = shard;
  return true;
}

routing::ShapeLookup Session::shape_lookup(KeptShapes& keep) {
  return [this, &keep](std::string_view table) { return runtime_->shapes->find_kept(table, keep); };
}

// Learns the column order and types of tables from a shard's catalog.
awaitable<bool> Session::fetch_shapes(const std::vector<std::string>& tables, KeptShapes& keep) {
  if (pools_.empty()) co_return false;  // (the admin console's session: no shard to ask)
  std::string list;
  for (auto& t : tables) {
    if (!list.empty()) list += ",";
    list += quote_literal(t);
  }
  // (A table of another schema is known as "schema.name": the index entries' tables.)
  const std::string qualified = "n.nspname || '.' || c.relname";
  std::string sql =
      "SELECT CASE WHEN " + qualified + " IN (" + list + ") THEN " + qualified + " ELSE c.relname END, a.attname, "
      "pg_catalog.format_type(a.atttypid, a.atttypmod), a.attidentity <> '' OR "
      "coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false) "
      "FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
      "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
      "LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
      "WHERE a.attnum > 0 AND NOT a.attisdropped AND (" + qualified + " IN (" + list + ") OR (c.relname IN (" + list +
      ") AND (pg_catalog.pg_table_is_visible(c.oid) "
      // (A session whose search_path is empty, as pg_dump's set_config makes it: its
      // statements name schema public's tables with the schema.)
      "OR (pg_catalog.current_schemas(false) = '{}' AND c.relnamespace = 'public'::pg_catalog.regnamespace)))) "
      "ORDER BY 1, a.attnum";
  co_await pump_.drain();
  auto reply = co_await run_on(hosts_.pick_any_shard(), sql);
  if (reply.lost || !reply.error.empty()) co_return false;
  std::map<std::string, routing::TableShape> found;
  for (auto& t : tables) found[t];  // a table that does not exist gets an empty shape
  for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
    auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
    if (!row || row->values.size() != 4 || !row->values[0] || !row->values[1] || !row->values[2]) return;
    auto& shape = found[std::string(*row->values[0])];
    shape.columns.emplace_back(*row->values[1]);
    shape.types.emplace_back(*row->values[2]);
    if (row->values[3] && *row->values[3] == "t") shape.sequence_columns.emplace_back(*row->values[1]);
  });
  for (auto& entry : found) {
    const std::string& name = entry.first;  // (not a structured binding: clang 14 cannot capture one)
    std::erase_if(keep, [&](const auto& k) { return k->table == name; });
    keep.push_back(runtime_->shapes->put(name, std::move(entry.second)));
  }
  co_return true;
}

// Routes again after learning missing table shapes. False: an error was reported.
awaitable<bool> Session::route_with_shapes(routing::Route& route, KeptShapes& keep,
                                           const std::function<routing::Route()>& again) {
  for (int attempt = 0; route.kind == RouteKind::need_shapes && attempt < 2; ++attempt) {
    if (!co_await fetch_shapes(route.missing_tables, keep)) {
      route.kind = RouteKind::error;
      route.sqlstate = sqlstate::connection_failure;
      route.message = "cannot read the table definitions from the shards";
      break;
    }
    route = again();
  }
  if (route.kind == RouteKind::need_shapes) {
    route.kind = RouteKind::error;
    route.sqlstate = sqlstate::internal_error;
    route.message = "table definitions unavailable";
  }
  co_return true;
}

// Inside a failed transaction only ROLLBACK (or COMMIT, which rolls back) may run.
// A statement for the backend that is still answering earlier ones is left to it (it
// knows best); otherwise the proxy waits for those answers before judging.
awaitable<bool> Session::refused_in_failed_transaction(const routing::Route& route, bool extended) {
  // (A text that does not parse is reported as such, before the aborted block: a shard
  // of the transaction answers it.)
  if (route.txn == TxnCommand::rollback || route.txn == TxnCommand::commit ||
      route.txn == TxnCommand::rollback_to_savepoint || route.syntax_error)
    co_return false;
  if (!fe_.proxy_failed_txn && pump_.active() && (!fe_.expect.empty() || fe_.sent_after_sync)) {
    auto target = single_target(route);
    if (target && *target == cur_) co_return false;
    leave_batch_shard(target ? *target : kNoShard);
    co_await pump_.drain();
  }
  if (fe_.client_txn != 'E') co_return false;
  if (!fe_.proxy_failed_txn) {
    // The shard whose statement failed knows its block is aborted and answers as
    // PostgreSQL does (a Query that starts with ROLLBACK TO SAVEPOINT runs, say).
    auto target = single_target(route);
    if (target && held_[*target] && held_[*target]->status == 'E') co_return false;
  }
  co_await reject(kInFailedTransaction, "current transaction is aborted, commands ignored until end of transaction block",
                  extended);
  co_return true;
}

// A refusal of the router's (SPC01, SPR01) of a read or write, which PostgreSQL may
// reject first: reject_unless_invalid asks it.
static bool postgres_may_reject(const routing::Route& route) {
  return (route.sqlstate == sqlstate::cannot_merge || route.sqlstate == sqlstate::no_shard_key) &&
         (route.cls == StatementClass::read || route.cls == StatementClass::write);
}

// Refuses the statement the way PostgreSQL reports an error.
awaitable<bool> Session::reject(std::string_view code, std::string message, bool extended, int position) {
  auto fields = proto::ErrorFields::make("ERROR", code, message);
  if (position > 0) fields.fields.emplace_back('P', std::to_string(position));
  co_return co_await reject_with(fields, extended);
}

// The proxy's refusal of a statement, unless PostgreSQL refuses it anyway: then
// PostgreSQL's own error, which one PostgreSQL would have given first (an unknown
// column, FOR UPDATE with an aggregate, a type mismatch). EXPLAIN of the statement on
// one shard parses, analyses and plans it without running it. Only for a text of one
// statement (EXPLAIN applies to the first); a syntax error of the EXPLAIN itself (the
// statement was EXPLAIN already) counts for nothing. One round trip, on refusals only.
awaitable<bool> Session::reject_unless_invalid(std::string_view code, std::string message, std::string_view sql,
                                               const ScatterRequest* ext) {
  constexpr std::string_view kExplain = "EXPLAIN ";
  if (!routing::may_hold_several_statements(sql)) {
    co_await pump_.drain();
    if (closing_) co_return false;
    std::string probe_sql = std::string(kExplain) + std::string(sql);
    std::optional<ScatterRequest> probe;
    if (ext) {  // (its result formats are the statement's, not EXPLAIN's)
      probe = *ext;
      probe->sql = probe_sql;
      probe->result_formats.clear();
    }
    Reply reply = co_await run_on(hosts_.pick_any_shard(), probe_sql, probe ? &*probe : nullptr);
    auto fields = reply.error.empty() ? std::nullopt : proto::ErrorFields::decode(reply.error);
    if (fields && fields->get('C') != sqlstate::syntax_error) {
      for (auto& [k, v] : fields->fields) {
        int at = 0;
        if (k == 'P' && std::from_chars(v.data(), v.data() + v.size(), at).ec == std::errc() &&
            at > static_cast<int>(kExplain.size()))
          v = std::to_string(at - static_cast<int>(kExplain.size()));
      }
      co_return co_await reject_with(*fields, ext != nullptr);
    }
  }
  co_return co_await reject(code, std::move(message), ext != nullptr);
}

awaitable<bool> Session::reject_with(const proto::ErrorFields& fields, bool extended) {
  co_await pump_.drain();
  if (closing_) co_return false;
  std::string out;
  metrics_.error(fields.get('C'));
  fields.encode(out, 'E');
  if (in_transaction()) co_await fail_block();
  if (extended) {
    fe_.skip_until_sync = true;
  } else {
    proto::ReadyForQuery{fe_.client_txn}.encode(out);
  }
  co_await stream_.write(out);
  co_return true;
}

namespace {

// What follows the statement's name in `EXECUTE name ...` ("(1, 'x')", or ""), from the
// client's own text (its arguments as written); nullopt if the text does not read so
// (a Unicode-escaped name, say).
std::optional<std::string_view> after_execute_name(std::string_view sql) {
  std::size_t i = 0;
  const auto skip = [&] {
    for (;;) {
      while (i < sql.size() && std::isspace(static_cast<unsigned char>(sql[i]))) ++i;
      if (sql.substr(i, 2) == "--") {
        i = sql.find('\n', i);
        if (i == std::string_view::npos) i = sql.size();
      } else if (sql.substr(i, 2) == "/*") {
        int depth = 0;
        do {
          if (sql.substr(i, 2) == "/*") ++depth, i += 2;
          else if (sql.substr(i, 2) == "*/") --depth, i += 2;
          else ++i;
        } while (depth > 0 && i < sql.size());
      } else {
        return;
      }
    }
  };
  skip();
  static constexpr std::string_view kExecute = "execute";
  if (sql.size() - i < kExecute.size()) return std::nullopt;
  for (std::size_t k = 0; k < kExecute.size(); ++k)
    if (std::tolower(static_cast<unsigned char>(sql[i + k])) != kExecute[k]) return std::nullopt;
  i += kExecute.size();
  if (i < sql.size() && routing::is_identifier_char(sql[i])) return std::nullopt;
  skip();
  if (i < sql.size() && sql[i] == '"') {
    for (++i; i < sql.size(); ++i) {
      if (sql[i] != '"') continue;
      if (i + 1 < sql.size() && sql[i + 1] == '"') ++i;
      else break;
    }
    if (i >= sql.size()) return std::nullopt;
    ++i;
  } else {
    const std::size_t from = i;
    while (i < sql.size() && routing::is_identifier_char(sql[i])) ++i;
    if (i == from || sql.substr(from, 2) == "U&" || sql.substr(from, 2) == "u&") return std::nullopt;
  }
  return sql.substr(i);
}

// The database a statement needs no other session in: DROP DATABASE x, ALTER DATABASE x
// RENAME, CREATE DATABASE ... TEMPLATE x. PostgreSQL refuses them while any connection
// to x is open, the pool's idle ones too.
std::optional<std::string> database_it_needs_alone(std::string_view sql) {
  std::vector<std::string> w;
  std::size_t i = 0;
  while (i < sql.size() && w.size() < 64) {
    while (i < sql.size() && (std::isspace(static_cast<unsigned char>(sql[i])) || sql[i] == '=' || sql[i] == ';')) ++i;
    std::size_t j = i;
    std::string word;
    if (j < sql.size() && sql[j] == '"') {
      for (++j; j < sql.size() && sql[j] != '"'; ++j) word += sql[j];
      ++j;
    } else {
      for (; j < sql.size() && !std::isspace(static_cast<unsigned char>(sql[j])) && sql[j] != '=' && sql[j] != ';'; ++j)
        word += static_cast<char>(std::tolower(static_cast<unsigned char>(sql[j])));
    }
    if (j == i) break;
    w.push_back(std::move(word));
    i = j;
  }
  if (w.size() < 3 || w[1] != "database") return std::nullopt;
  if (w[0] == "drop") return w[2] == "if" && w.size() > 4 ? w[4] : w[2];
  if (w[0] == "alter" && w.size() > 3 && w[3] == "rename") return w[2];
  if (w[0] == "create")
    for (std::size_t k = 3; k + 1 < w.size(); ++k)
      if (w[k] == "template") return w[k + 1];
  return std::nullopt;
}

}  // namespace

void Session::close_idle_connections_to(const std::string& database) {
  for (auto& shard : runtime_->shards)
    for (auto& pool : shard->all())
      if (pool->target().database == database) pool->close_idle();
}

// The text is a TRUNCATE (its first word, past spaces) naming a table with a global
// index, or a TRUNCATE ... CASCADE (which may empty one that references those named).
static bool truncates_indexed(std::string_view sql, const routing::Topology& topo) {
  const auto start = sql.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || sql.size() - start < 8) return false;
  std::string word(sql.substr(start, 8));
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (word != "truncate") return false;
  auto tree = routing::ParseTree::parse(sql);
  bool indexed = false;
  for (std::size_t i = 0; tree.ok() && i < tree.tree()->n_stmts; ++i) {
    const PgQuery__Node* n = tree.tree()->stmts[i]->stmt;
    indexed = indexed || (routing::is(n, PG_QUERY__NODE__NODE_TRUNCATE_STMT) &&
                          n->truncate_stmt->behavior == PG_QUERY__DROP_BEHAVIOR__DROP_CASCADE);
    routing::for_each_range_var(&tree.tree()->stmts[i]->base, [&](const PgQuery__RangeVar* rv) {
      indexed = indexed || topo.indexed(routing::Topology::table_name(routing::sv(rv->schemaname), routing::sv(rv->relname)));
    });
  }
  return indexed;
}

awaitable<bool> Session::handle_query(const proto::Frame& f) {
  lookahead_.reset();  // (a Query may change how the next Bind routes: SET splitpoint.*)
  auto q = proto::Query::decode(f.body);
  if (!q) {
    co_await detach_for_exit();
    co_await send_error("FATAL", sqlstate::protocol_violation, "invalid Query message", false);
    co_return false;
  }
  std::string_view sql = q->sql;
  KeptShapes keep;
  auto lookup = shape_lookup(keep);
  auto& router = *runtime_->router;
  auto route = router.route_simple(sql, settings_.routing, lookup);
  // The checks before these calls spare most statements two coroutine frames.
  if (route.kind == RouteKind::need_shapes)
    co_await route_with_shapes(route, keep, [&] { return router.route_simple(sql, settings_.routing, lookup); });
  moves_.take_moves();  // (a partition in cutover: SPEC §9)
  if (moves_.view && !co_await moves_.wait_for_moves(route, false, [&] { return runtime_->router->route_simple(sql, settings_.routing, lookup); }))
    co_return !closing_;

  if (route.cls == StatementClass::utility || route.cls == StatementClass::ddl)
    if (auto db = database_it_needs_alone(sql)) close_idle_connections_to(*db);
  if (route.cls == StatementClass::ddl && !runtime_->config.indexes.empty() && truncates_indexed(sql, *runtime_->topology))
    route.indexes.writes = true;  // (the entries of an indexed table it empties go too)
  if (index_.maintains_index(route)) co_return co_await index_.indexed_write(f, route);
  const bool spread = route.kind == RouteKind::all_shards || route.shards.size() > 1;
  if (several_statements_apart(route, sql) || (route.cls == StatementClass::write && spread && !in_transaction())) {
    auto done = co_await run_apart(route, sql);  // (texts.cpp)
    if (done) co_return *done;
  }
  if ((pump_.active() || fe_.client_txn == 'E') && co_await refused_in_failed_transaction(route, false))
    co_return !closing_;
  keys_.forget_drawn_lastval(route);
  if (route.indexes.lookup) co_await index_.route_through_index(route);
  bool before_done = false;  // before_shards, once
  auto ready = [&] {
    if (!before_done) before_shards(route);
    before_done = true;
  };
  // The order of the proxy's special cases is the router's (routing/dispatch.hpp); a
  // step that passes on lets the next one try.
  for (Executor step : routing::dispatch(route, pools_.size(), routing::Protocol::simple)) {
    switch (step) {
      case Executor::copy_in: {
        const auto& cs = route.copy_from->statement;
        if (!cs) co_return co_await reject(sqlstate::feature_not_supported, route.copy_from->error, false);
        co_return co_await handle_copy_in(f, std::string(sql), *cs);
      }
      case Executor::transaction:
        if (auto done = co_await transaction_control(route, sql)) co_return *done;
        break;
      case Executor::shard_error:
        route.kind = RouteKind::any_shard;
        route.cls = StatementClass::utility;
        break;
      case Executor::sequence_read:
        if (auto text = keys_.answer_from_drawn(route, sql)) co_return co_await run_on_shards(route, *text);
        break;
      case Executor::generate_keys:
        co_return co_await keys_.insert_with_generated_keys(route, keep, sql);
      case Executor::pull_insert:
        co_return co_await pull_insert_select(route, keep, sql);
      case Executor::cursor:
        if (auto done = co_await cursor_command(route)) co_return *done;
        break;
      case Executor::reject:
        if (postgres_may_reject(route)) co_return co_await reject_unless_invalid(route.sqlstate, route.message, sql, nullptr);
        co_return co_await reject(route.sqlstate, route.message, false, route.position);
      case Executor::local:
        co_await pump_.drain();
        co_return co_await run_local(*route.local, {}, false);
      case Executor::sql_execute:
        ready();
        if (!co_await route_execute(route)) co_return !closing_;
        // EXECUTE of a prepared write to an indexed table: as the statement itself would.
        if (index_.maintains_index(route)) co_return co_await index_.indexed_write(f, route);
        break;
      case Executor::deallocate:
        ready();
        if (auto done = co_await deallocate(route, route.session_commands->front().name)) co_return *done;
        break;
      case Executor::sql_prepare: {
        ready();
        // PostgreSQL's answer where the backend has it; the proxy's where it does not.
        if (!fe_.sql_prepared.count(route.names->prepared_name)) break;
        auto target = single_target(route);
        if (!target || !held_[*target] || !held_[*target]->sql_prepared.count(route.names->prepared_name))
          co_return co_await reject("42P05", "prepared statement \"" + route.names->prepared_name + "\" already exists",
                                    false);
        break;
      }
      case Executor::one_shard:
      case Executor::scatter_read:
      case Executor::several_shards:
        ready();
        co_return co_await run_query_on_shards(f, route, sql);
    }
  }
  co_return true;  // (the last step always answers)
}

// What a statement about to run on shards does to the session first: DDL forgets the
// table shapes; temporary objects and WITH HOLD cursors pin the backend.
void Session::before_shards(const routing::Route& route) {
  if (route.cls == StatementClass::ddl) forget_table_definitions();
  if (route.pins_session) pin_backend();
}

// The simple Query's way onto shards: the one target's backend (the pump), a scatter
// read, or every shard named (the route as the steps before may have changed it).
awaitable<bool> Session::run_query_on_shards(const proto::Frame& f, routing::Route& route, std::string_view sql) {
  auto target = single_target(route);
  if (!target) {
    if (route.cls == StatementClass::read && route.explain == routing::Route::Explain::none) {
      ScatterRequest req;
      req.sql = std::string(sql);
      co_return co_await scatter_read(route, std::move(req));
    }
    co_return co_await run_on_shards(route, sql);
  }
  const bool ok = co_await forward_query(f, route, *target, sql);
  // A SAVEPOINT went to this shard as the client sent it; the others get it before
  // their next statement of the transaction.
  if (route.txn == TxnCommand::savepoint && in_transaction() && cur()) {
    txn_.savepoints.push_back(route.names->savepoint);
    cur()->savepoints = txn_.savepoints.size();
  }
  co_return ok;
}

// BEGIN, COMMIT/ROLLBACK, PREPARE TRANSACTION / COMMIT PREPARED and savepoints of a
// simple Query, where the proxy answers them (set: handle_query's result) rather than
// the shard the route names (nullopt).
awaitable<std::optional<bool>> Session::transaction_control(const routing::Route& route, std::string_view sql) {
  // Outside a transaction block COMMIT/ROLLBACK go to a shard like any statement, so
  // PostgreSQL answers (its WARNING, or its error for AND CHAIN).
  if ((route.txn == TxnCommand::commit || route.txn == TxnCommand::rollback) && in_transaction())
    co_return co_await finish_transaction(route, sql);
  if (route.txn == TxnCommand::prepare || route.txn == TxnCommand::finish_prepared) {
    if (two_phase::txid_of(route.names->gid))
      co_return co_await reject(sqlstate::feature_not_supported,
                                "transaction identifier \"" + route.names->gid + "\" is reserved for splitpoint's own two-phase "
                                "commit",
                                false);
    if (route.txn == TxnCommand::prepare && in_transaction()) co_return co_await prepare_transaction(sql);
    if (route.txn == TxnCommand::finish_prepared && !in_transaction() && pools_.size() > 1)
      co_return co_await finish_prepared(sql);
    // Otherwise one shard answers as PostgreSQL: the WARNING for PREPARE TRANSACTION
    // outside a block, the error for COMMIT PREPARED inside one.
  }
  if (route.txn == TxnCommand::begin && fe_.client_txn == 'I') co_return co_await hold_begin(sql, route.txn_options.start);
  if ((route.txn == TxnCommand::rollback_to_savepoint || route.txn == TxnCommand::release_savepoint) &&
      in_transaction()) {
    co_return co_await savepoint_across_shards(route, sql);
  }
  co_return std::nullopt;
}

// BEGIN is held until the first statement that routes; each shard joins with its text.
awaitable<bool> Session::hold_begin(std::string_view sql, bool start) {
  co_await pump_.drain();
  txn_.begin_sql = std::string(sql);
  fe_.client_txn = 'T';
  std::string out;
  proto::CommandComplete{start ? "START TRANSACTION" : "BEGIN"}.encode(out);
  proto::ReadyForQuery{fe_.client_txn}.encode(out);
  co_await stream_.write(out);
  co_return true;
}

// The extended protocol's BEGIN, when it starts a batch (nothing in flight, no backend,
// outside any block), is held too: the proxy answers its ParseComplete (handle_parse),
// BindComplete and, at its Execute, CommandComplete (a local portal), and the block joins
// each shard at its first statement there. So a block with nothing but BEGIN so far has
// no backend and follows a cutover (follow_runtime), as the simple BEGIN's does: its
// first statement routes by the placement in force (pgbench -M extended / prepared
// through REBALANCE). A BEGIN inside a pipeline's running batch goes to its shard as
// before: what precedes it there is in its transaction.
bool Session::may_hold_begin(const routing::Route& route) const {
  return route.txn == TxnCommand::begin && fe_.client_txn == 'I' && !in_transaction() && !cur() &&
         !pump_.active() && !fe_.sent_after_sync && fe_.expect.empty() && bout_.empty() && !fe_.copy_in;
}

awaitable<bool> Session::hold_extended_begin(const routing::Route& route, std::string_view sql,
                                             std::string_view portal) {
  txn_.begin_sql = std::string(sql);
  fe_.client_txn = 'T';
  const char* tag = route.txn_options.start ? "START TRANSACTION" : "BEGIN";
  fe_.local_portal.emplace(Frontend::LocalPortal{std::string(portal), {}, {}, tag});
  std::string out;
  proto::encode_bind_complete(out);
  co_await stream_.write(out);
  co_return true;
}

awaitable<std::optional<bool>> Session::savepoint_across_shards(const routing::Route& route, std::string_view sql) {
  const std::string& name = route.names->savepoint;
  auto last = std::find(txn_.savepoints.rbegin(), txn_.savepoints.rend(), name);
  if (last == txn_.savepoints.rend()) co_return std::nullopt;
  const std::size_t i = static_cast<std::size_t>(txn_.savepoints.rend() - last) - 1;
  const bool rollback = route.txn == TxnCommand::rollback_to_savepoint;
  co_await pump_.drain();
  if (closing_) co_return false;
  std::string error, notices;
  for (std::size_t s = 0; s < held_.size() && error.empty(); ++s) {
    if (!in_transaction_on(s) || held_[s]->savepoints <= i) continue;
    auto reply = co_await run_on(s, sql);
    append_notices_and_status(reply.messages, notices);
    if (reply.lost || !reply.error.empty())
      error = !reply.error.empty() ? reply.error : error_body(sqlstate::connection_failure, "connection lost");
  }
  // What is left of the stack: ROLLBACK TO keeps the savepoint, RELEASE drops it (a
  // failed one changes nothing).
  const std::size_t keep = rollback ? i + 1 : i;
  if (error.empty()) txn_.savepoints.resize(keep);
  for (auto& b : held_)
    if (b && error.empty()) b->savepoints = std::min(b->savepoints, keep);
  std::string out = notices;
  if (!error.empty()) {
    proto::Writer(out, 'E').bytes(error).finish();
    fe_.fail_block();
  } else {
    if (rollback) {  // the block is usable again, as in PostgreSQL
      fe_.client_txn = 'T';
      fe_.proxy_failed_txn = false;
    }
    proto::CommandComplete{rollback ? "ROLLBACK" : "RELEASE"}.encode(out);
  }
  proto::ReadyForQuery{fe_.client_txn}.encode(out);
  co_await stream_.write(out);
  co_return true;
}

// DEALLOCATE name: answered here (set: the statement is done, with handle_query's
// result), or nullopt: `route` now says where it goes.
awaitable<std::optional<bool>> Session::deallocate(routing::Route& route, const std::string& name) {
  // DEALLOCATE of a protocol-level prepared statement (libpq/libpqxx unprepare):
  // on the backends it lives under another name, so forget it here and answer.
  // Of a SQL-level one: on the backend that holds it if the session holds that
  // backend, else forgotten here (a pooled backend's copy is replaced when needed).
  bool answer_here = false;
  if (auto it = fe_.prepared.find(name); it != fe_.prepared.end() && !it->second.server_name.empty()) {
    fe_.prepared.erase(it);
    answer_here = true;
  } else if (auto sq = fe_.sql_prepared.find(name); sq != fe_.sql_prepared.end()) {
    answer_here = true;
    for (std::size_t s = 0; s < held_.size() && answer_here; ++s) {
      if (!held_[s]) continue;
      auto there = held_[s]->sql_prepared.find(name);
      if (there == held_[s]->sql_prepared.end() || there->second != sq->second.token) continue;
      held_[s]->sql_prepared.erase(there);
      route.kind = RouteKind::shards;
      route.shards = {s};
      answer_here = false;
    }
    fe_.sql_prepared.erase(sq);
  } else if (runtime_->config.pool_mode == config::PoolMode::transaction) {
    // Not this session's: another session's statement of that name on a pooled
    // backend is not this one's to drop.
    co_return co_await reject("26000", "prepared statement \"" + name + "\" does not exist", false);
  }
  if (answer_here) {
    co_await pump_.drain();
    std::string out;
    proto::CommandComplete{"DEALLOCATE"}.encode(out);
    proto::ReadyForQuery{fe_.client_txn}.encode(out);
    co_await stream_.write(out);
    co_return true;
  }
  co_return std::nullopt;
}

// A Query for one shard: the pump forwards it, the expected-answer queue follows it.
awaitable<bool> Session::forward_query(const proto::Frame& f, routing::Route& route, std::size_t target,
                                       std::string_view sql) {
  std::string error;
  if (!check_write(route, target, error)) co_return co_await reject(sqlstate::cross_shard_write, error, false);
  auto started = std::chrono::steady_clock::now();
  auto label = label_of(route, false);
  count_route(route, label);
  std::optional<std::size_t> standby;
  if (runtime_->standbys) standby = co_await hosts_.read_host(target, route);
  if (!standby && route.reads == routing::Route::Reads::writes) hosts_.may_write_on(target);
  if (!co_await pump_.use_shard(target, standby)) {
    if (closing_) co_return false;
    co_await send_ready();
    co_return true;
  }
  hosts_.count_target(label);
  if (route.sql_prepared != routing::Route::SqlPrepared::none) sync_sql_prepared(route);
  // SQL EXECUTE of a statement the client prepared with the protocol (in PostgreSQL both
  // kinds share one namespace): on the backend it has the proxy's name for it, and is
  // made sure of there first, with a Sync of its own so that an error in that Parse
  // cannot have the backend skip the Query.
  const Prepared* parsed = nullptr;
  std::optional<std::string_view> args;
  if (route.sql_prepared == routing::Route::SqlPrepared::execute && !fe_.sql_prepared.count(route.names->prepared_name))
    if (auto it = fe_.prepared.find(route.names->prepared_name); it != fe_.prepared.end() && !it->second.server_name.empty())
      if ((args = after_execute_name(sql))) parsed = &it->second;
  if (parsed) {
    const std::size_t owed = fe_.expect.size();
    ensure_prepared(*parsed);
    if (fe_.expect.size() != owed) {
      proto::encode_sync(bout_);
      Expect sync{'Z', true};
      sync.is_sync = true;
      fe_.expect.push_back(std::move(sync));
    }
    proto::Query{"EXECUTE " + routing::quote_ident(parsed->server_name) + std::string(*args)}.encode(bout_);
  } else {
    proto::Writer(bout_, 'Q').bytes(f.body).finish();  // (f may be one statement of a text: texts.cpp)
  }
  cur()->unnamed_owner = {0, 0};  // (a Query drops the unnamed statement there)
  Expect e{'Z'};
  e.started = started;
  if (route.sql_prepared == routing::Route::SqlPrepared::prepare) {
    static std::atomic<std::uint64_t> tokens{0};
    std::vector<std::int32_t> no_types;
    e.sql_prepare = SqlPrepared{route.names->prepared_name, std::string(sql),
                                runtime_->router->plan(route.names->prepared_query, no_types, settings_.routing.standard_conforming_strings),
                                ++tokens};
  }
  e.route = label;
  e.query_in_batch = fe_.sent_after_sync;
  e.rows = row_shares(route, target);
  // Each SET/RESET statement is recorded with its own text (never the whole Query:
  // replaying `SET ...; INSERT ...` would run the INSERT again on the next backend).
  // The router's plan says whether the text has any (no scan of other texts).
  std::string restore = route.session_commands ? note_session_commands(*route.session_commands, e.commands) : std::string();
  const bool in_batch = e.query_in_batch;
  fe_.expect.push_back(std::move(e));
  // Inside a block the RESET's value is needed at once (the session's settings follow
  // at COMMIT). Outside one the backend gets the session's script again before its next
  // statement, once the text succeeded (ClientSettings::apply): a failed text undoes
  // its RESET.
  if (!restore.empty() && in_transaction()) {
    proto::Query{restore}.encode(bout_);
    Expect injected{'Z', true};
    injected.query_in_batch = in_batch;
    fe_.expect.push_back(std::move(injected));
  }
  fe_.sent_after_sync = false;
  co_return true;
}

// The SET/RESET/DISCARD/DEALLOCATE/LISTEN statements of a text the current backend is
// about to run: what they do to the proxy's own records now, and the commands `into`
// the Expect whose success makes them part of the session's state. Returns the SQL
// that must follow the text: RESET of a parameter the client gave at start-up goes
// back to that value in PostgreSQL, not to the server's default.
std::string Session::note_session_commands(const std::vector<routing::SessionCommandInfo>& cmds,
                                           std::vector<SessionCmd>& into) {
  std::string restore;
  auto restore_startup = [&](std::string_view name) {
    for (auto& [k, v] : settings_.startup)
      if (name.empty() || k == name) restore += set_config_sql(k, v);
  };
  for (const routing::SessionCommandInfo& cmd : cmds) {
    if (cmd.kind == SessionCommand::reset || cmd.kind == SessionCommand::reset_all ||
        cmd.kind == SessionCommand::discard_all)
      restore_startup(cmd.kind == SessionCommand::reset ? std::string_view(cmd.name) : std::string_view());
    switch (cmd.kind) {
      case SessionCommand::none:
      case SessionCommand::set_local:
      case SessionCommand::deallocate:
        break;
      case SessionCommand::listen:
        pin_backend();
        break;
      case SessionCommand::discard_all:
        fe_.cursors.clear();  // (DISCARD ALL closes every cursor)
        [[fallthrough]];
      case SessionCommand::deallocate_all:
        fe_.forget_prepared(*cur());
        into.push_back({cmd.kind, {}, {}});
        break;
      default:
        into.push_back({cmd.kind, cmd.name, cmd.text});
        break;
    }
  }
  return restore;
}

// A Parse is prepared where the statement will run if its Bind is already here; else
// anywhere (or on the transaction's backend). A Bind that reads several shards, or an
// INSERT the proxy rewrites (keys it draws, rows it pulls), needs no Parse on any shard
// first: each shard gets its statement from the Bind, and the Parse is answered here
// when nothing is in flight on the backend the session holds (its answers must not
// overtake earlier ones). (On that backend, the Parse would also fail the transaction
// there, so that the statement's own error came back as 25P02.) So is the Parse of a
// held BEGIN (hold_extended_begin), and of a statement whose Bind a cutover will hold
// (wait_for_moves): taking no backend, a block on no shard yet follows the cutover
// (follow_runtime), and the Bind prepares the statement where it routes then.
awaitable<bool> Session::handle_parse(const proto::Frame& f) {
  proto::Reader r(f.body);
  auto name = r.cstr();
  auto rest = r.rest();
  auto parse = proto::Parse::decode(f.body);
  if (!r.ok() || !parse) {
    co_await detach_for_exit();
    co_await send_error("FATAL", sqlstate::protocol_violation, "invalid Parse message", false);
    co_return false;
  }
  if (!name.empty() && fe_.prepared.count(std::string(name)))
    co_return co_await reject("42P05", "prepared statement \"" + std::string(name) + "\" already exists", true);
  Prepared p;
  p.server_name = name.empty() ? std::string() : statement_name_for(rest);
  p.parse_rest.assign(rest);
  p.param_types = std::move(parse->param_types);
  p.plan = runtime_->router->plan(parse->query, p.param_types, settings_.routing.standard_conforming_strings);
  p.parse_seq = ++fe_.parse_seq;
  p.parsed_at = std::chrono::steady_clock::now();
  auto& slot = fe_.prepared[std::string(name)] = std::move(p);
  if (name.empty()) ++fe_.unnamed_seq;

  if (!cur() || (fe_.expect.empty() && bout_.empty())) {
    std::size_t shard = kNoShard;
    std::optional<std::size_t> standby;
    std::size_t pos = cpos_ + f.size;
    bool answer_here = false;
    for (;;) {
      auto next = proto::decode_frame(std::string_view(cbuf_).substr(pos), proto::Direction::frontend, limits_);
      if (next.status != proto::FrameStatus::ok || next.frame.type == 'S' || next.frame.type == 'P') break;
      if (next.frame.type == 'B') {
        auto bind = proto::Bind::decode(next.frame.body);
        if (bind && bind->statement == name) {
          KeptShapes keep;
          routing::BoundParams params{bind->params, bind->param_formats, slot.param_types};
          auto route = runtime_->router->route(*slot.plan, params, settings_.routing, shape_lookup(keep));
          moves_.take_moves();
          const bool held = fe_.client_txn != 'E' && moves_.view && held_by_moves(*moves_.view, route);
          if (may_hold_begin(route) || held) {
            answer_here = true;  // (or held: hold_extended_begin)
          } else if (auto t = single_target(route); t && !index_.maintains_index(route)) {  // (else run at Execute)
            shard = *t;
            if (runtime_->standbys && !cur()) standby = co_await hosts_.read_host(shard, route);
          } else {
            const bool scatter_read = route.kind == RouteKind::shards && route.cls == StatementClass::read;
            answer_here = fe_.client_txn != 'E' && route.txn == TxnCommand::none &&
                          (scatter_read || route.generate_keys || route.pull_insert || index_.maintains_index(route));
          }
          lookahead_.reset(new Lookahead{slot.parse_seq, next.frame.body.data(), std::move(*bind), std::move(route)});
        }
        break;
      }
      pos += next.frame.size;
    }
    if (shard == kNoShard) shard = shard_to_prepare(slot);
    if (answer_here) {
      // Preparing it on one shard first would be a round trip for nothing (a later
      // one-shard Bind prepares it where it runs, as after pooling).
      std::string out;
      proto::encode_parse_complete(out);
      stream_.defer(out);
      co_return true;
    }
    if (!cur() && !co_await pump_.use_shard(shard, standby)) {
      fe_.skip_until_sync = true;
      co_return !closing_;
    }
  }
  Backend* b = cur();
  if (name.empty()) {
    bout_.append(std::string_view(cbuf_).substr(cpos_, f.size));
    b->unnamed_owner = {id_, fe_.unnamed_seq};
    fe_.expect.push_back(Expect{'1'});  // text "" = the unnamed statement
    fe_.expect.back().parse_seq = slot.parse_seq;
  } else {
    if (b->prepared.has(slot.server_name)) {
      // Same text already prepared here: re-create it so the client's Parse gets its
      // own ParseComplete in order.
      proto::Close{'S', slot.server_name}.encode(bout_);
      Expect close{'3', true};
      close.name = slot.server_name;
      fe_.expect.push_back(std::move(close));
      b->prepared.erase(slot.server_name);
    }
    make_room(*b);
    proto::Writer w(bout_, 'P');
    w.cstr(slot.server_name).bytes(slot.parse_rest).finish();
    Expect e{'1'};
    e.name = slot.server_name;
    e.text = std::string(name);
    e.parse_seq = slot.parse_seq;
    fe_.expect.push_back(std::move(e));
    b->prepared.made(slot.server_name);
  }
  fe_.sent_after_sync = true;
  co_return true;
}

// Where a statement prepared ahead of its Bind (PQprepare, a driver's statement cache)
// is parsed: where a Bind without values would send it (a hint, SET splitpoint.shard,
// constant keys), so that the shard that prepares it is one where it can run; else the
// catalog shard, so that its Describe names types made by CREATE TYPE by the OIDs the
// client's catalog reads find there (docs/compatibility.md, "Tools").
std::size_t Session::shard_to_prepare(const Prepared& p) {
  KeptShapes keep;
  const routing::BoundParams none{{}, {}, p.param_types};
  auto route = runtime_->router->route(*p.plan, none, settings_.routing, shape_lookup(keep));
  if (auto t = single_target(route)) return *t;
  return cur_ != kNoShard ? cur_ : catalog_shard();
}

awaitable<bool> Session::handle_bind(const proto::Frame& f) {
  // The Parse just before decoded and routed this very Bind to choose its shard.
  std::unique_ptr<Lookahead> ahead;
  if (lookahead_ && lookahead_->bind_body == f.body.data()) ahead = std::move(lookahead_);
  lookahead_.reset();
  std::optional<proto::Bind> bind;
  if (ahead) bind = std::move(ahead->bind);
  else bind = proto::Bind::decode(f.body);
  if (!bind) {
    co_await detach_for_exit();
    co_await send_error("FATAL", sqlstate::protocol_violation, "invalid Bind message", false);
    co_return false;
  }
  if (!fe_.portals.empty()) fe_.portals.erase(std::string(bind->portal));  // (a new portal of that name)
  auto it = fe_.prepared.find(std::string(bind->statement));
  if (it == fe_.prepared.end()) {  // (an unknown statement: PostgreSQL reports it)
    if (!cur() && !co_await pump_.use_shard(hosts_.pick_any_shard())) {
      fe_.skip_until_sync = true;
      co_return !closing_;
    }
    forward_raw(f, '2');
    co_return true;
  }
  // A copy: awaiting below may run the pump, which can forget a skipped Parse.
  const Prepared p = it->second;
  const std::vector<std::int32_t>& types = p.param_types;
  KeptShapes keep;
  auto lookup = shape_lookup(keep);
  routing::BoundParams params{bind->params, bind->param_formats, types};
  auto& router = *runtime_->router;
  routing::Route route;
  if (ahead && ahead->parse_seq == p.parse_seq) route = std::move(ahead->route);
  else route = router.route(*p.plan, params, settings_.routing, lookup);
  if (route.kind == RouteKind::need_shapes)
    co_await route_with_shapes(route, keep, [&] { return router.route(*p.plan, params, settings_.routing, lookup); });
  moves_.take_moves();
  if (moves_.view && !co_await moves_.wait_for_moves(route, true, [&] { return runtime_->router->route(*p.plan, params, settings_.routing, lookup); }))
    co_return !closing_;

  if ((pump_.active() || fe_.client_txn == 'E') && co_await refused_in_failed_transaction(route, true))
    co_return !closing_;
  if (may_hold_begin(route)) co_return co_await hold_extended_begin(route, p.query(), bind->portal);
  keys_.forget_drawn_lastval(route);
  if (route.indexes.lookup) co_await index_.route_through_index(route);
  // As handle_query: the router's order of the special cases.
  for (Executor step : routing::dispatch(route, pools_.size(), routing::Protocol::extended)) {
    switch (step) {
      case Executor::transaction:
        if (route.txn == TxnCommand::commit || route.txn == TxnCommand::rollback) {
          if (auto done = co_await bind_transaction_end(route, bind->portal)) co_return *done;
        } else if (two_phase::txid_of(route.names->gid) || pools_.size() > 1) {
          // The extended protocol takes a client's two-phase commit with one shard only.
          co_return co_await reject(sqlstate::feature_not_supported,
                                    "PREPARE TRANSACTION / COMMIT PREPARED through splitpoint over several shards "
                                    "need the simple query protocol",
                                    true);
        }
        break;
      case Executor::sequence_read:
        if (auto text = keys_.answer_from_drawn(route, p.query()))
          if (auto target = single_target(route)) co_return co_await bind_rewritten(route, *target, *bind, *text, types);
        break;
      case Executor::generate_keys:
        co_return co_await keys_.insert_with_generated_keys(route, keep, p.query(), &*bind, &types);
      case Executor::pull_insert:
        co_return co_await pull_insert_select(route, keep, p.query(), &*bind, &types);
      case Executor::reject:
        if (route.syntax_error && cur()) {
          // The Parse went to this backend and fails there too: PostgreSQL reports it
          // once and skips this Bind.
          forward_raw(f, '2');
          co_return true;
        }
        if (postgres_may_reject(route)) {
          const ScatterRequest req = request_of(*bind, std::string(p.query()), types);
          co_return co_await reject_unless_invalid(route.sqlstate, route.message, req.sql, &req);
        }
        co_return co_await reject(route.sqlstate, route.message, true, route.position);
      case Executor::cursor: {
        const BoundCursor bound{*bind, types};
        if (auto done = co_await cursor_command(route, &bound)) co_return *done;
        break;
      }
      case Executor::local:
        if (!co_await bound_in_order()) co_return !closing_;
        co_return co_await run_local(*route.local, bind->portal, true);
      case Executor::one_shard:
      case Executor::scatter_read:
      case Executor::several_shards: {
        before_shards(route);
        auto target = single_target(route);
        if (!target) co_return co_await bind_scatter(route, *bind, std::string(p.query()), types);
        co_return co_await bind_forward(f, route, *target, p);
      }
      default:  // (steps of the simple protocol only)
        break;
    }
  }
  co_return true;  // (the last step always answers)
}

// An extended-protocol COMMIT/ROLLBACK of a transaction block: answered here (set:
// handle_bind's result) or nullopt: `route` now names the shard whose backend ends it.
awaitable<std::optional<bool>> Session::bind_transaction_end(routing::Route& route, std::string_view portal) {
  if (route.txn == TxnCommand::commit && fe_.client_txn != 'E' && !fe_.proxy_failed_txn && txn_.written.size() > 1) {
    // Written on several shards: two-phase commit, answered here.
    co_await pump_.drain();
    auto error = co_await txn_.commit_two_phase();
    if (error.empty()) apply_session_commands();
    else fe_.pending_commands.clear();
    reset_transaction();
    // As PostgreSQL, which fails a COMMIT at its Execute: BindComplete, then the error.
    fe_.local_portal.emplace(Frontend::LocalPortal{std::string(portal), {}, {}, "COMMIT", std::move(error)});
    std::string out;
    proto::encode_bind_complete(out);
    co_await stream_.write(out);
    co_return true;
  }
  {
    // Finish the other shards first; the client's own message ends the last one.
    co_await pump_.drain();
    std::optional<std::size_t> last = txn_.write_shard;
    for (std::size_t s = 0; s < held_.size(); ++s)
      if (in_transaction_on(s) && !last) last = s;
    bool failed = fe_.client_txn == 'E';
    for (std::size_t s = 0; s < held_.size(); ++s) {
      if (!in_transaction_on(s) || (s == last && !fe_.proxy_failed_txn)) continue;
      auto reply = co_await run_on(s, failed || route.txn == TxnCommand::rollback ? "ROLLBACK" : "COMMIT");
      end_shard(s, !reply.lost && reply.error.empty());
    }
    if (fe_.proxy_failed_txn) {
      // Every shard rolled back; the client's COMMIT/ROLLBACK is answered here.
      reset_transaction();
      fe_.local_portal.emplace(Frontend::LocalPortal{std::string(portal), {}, {}, "ROLLBACK"});
      std::string out;
      proto::encode_bind_complete(out);
      co_await stream_.write(out);
      co_return true;
    }
    route.kind = RouteKind::shards;
    route.shards = {last ? *last : hosts_.pick_any_shard()};
  }
  co_return std::nullopt;
}

// The statement of a Bind as the proxy runs it itself (no description unless asked).
ScatterRequest Session::request_of(const proto::Bind& bind, std::string sql,
                                            const std::vector<std::int32_t>& types) {
  ScatterRequest req;
  req.sql = std::move(sql);
  req.extended = true;
  req.describe = false;
  for (auto& v : bind.params) req.params.push_back(v ? std::optional<std::string>(*v) : std::nullopt);
  req.param_formats = bind.param_formats;
  req.result_formats = bind.result_formats;
  req.param_types = types;
  return req;
}

// A Bind for several shards: answered by the proxy at Execute; BindComplete now, in order.
awaitable<bool> Session::bind_scatter(const routing::Route& route, const proto::Bind& bind, std::string sql,
                                      const std::vector<std::int32_t>& types) {
  leave_batch_shard(kNoShard);
  if (route.cls != StatementClass::read && in_transaction() && !txn_.two_phase() && !single_target(route) &&
      !route.key_guard())  // (MultiShardWrite: the guarded shards write nothing)
    co_return co_await reject(sqlstate::cross_shard_write,
                              "statement would write to several shards inside a transaction; a transaction may "
                              "write to one shard only (transactions.cross_shard_writes: refuse)",
                              true);
  if (!co_await bound_in_order()) co_return !closing_;  // (an earlier statement of the batch failed meanwhile?)
  ScatterRequest req = request_of(bind, std::move(sql), types);
  if (!bind.statement.empty())
    if (auto p = fe_.prepared.find(std::string(bind.statement)); p != fe_.prepared.end())
      req.named_since = p->second.parsed_at;
  if (route.cls == StatementClass::ddl) forget_table_definitions();
  scatter_.portal = std::make_unique<std::pair<std::string, ScatterRequest>>(std::string(bind.portal), std::move(req));
  scatter_.route = std::make_unique<routing::Route>(route);
  std::string out;
  proto::encode_bind_complete(out);
  stream_.defer(out);
  co_return true;
}

// A statement the proxy rewrote (keys it drew, rows it pulled) for one shard: prepared
// there under a name of its own, as a client's named statement is (so the next such
// INSERT binds without a Parse), and bound as the client's portal; the client's Describe
// and Execute follow it there.
awaitable<bool> Session::bind_rewritten(const routing::Route& route, std::size_t target, const proto::Bind& bind,
                                        std::string_view sql, const std::vector<std::int32_t>& types) {
  Prepared p;
  p.parse_rest = parse_rest_of(sql, types);
  p.server_name = statement_name_for(p.parse_rest);
  p.param_types = types;
  proto::Bind named = bind;
  named.statement = p.server_name;
  std::string frame;
  named.encode(frame);
  co_return co_await bind_forward(proto::Frame{'B', std::string_view(frame).substr(5), frame.size()}, route, target, p);
}

// A Bind for one shard: the prepared statement made sure of on its backend, the Bind
// forwarded under the statement's server-side name.
awaitable<bool> Session::bind_forward(const proto::Frame& f, const routing::Route& route, std::size_t target,
                                      const Prepared& p) {
  if (index_.maintains_index(route)) {
    // A write to an indexed table: the proxy runs it at Execute, then its entries
    // (indexed_execute).
    auto bind = proto::Bind::decode(f.body);
    if (!bind) co_return co_await protocol_violation('B');
    co_return co_await bind_scatter(route, *bind, std::string(p.query()), p.param_types);
  }
  if (scatter_.portal && proto::Reader(f.body).cstr() == scatter_.portal->first)
    scatter_.portal.reset();  // (a Bind of that portal's name replaces it)
  leave_batch_shard(target);
  std::string error;
  if (!check_write(route, target, error)) co_return co_await reject(sqlstate::cross_shard_write, error, true);
  pending_.started = std::chrono::steady_clock::now();
  pending_.route = label_of(route, false);
  count_route(route, pending_.route);
  std::optional<std::size_t> standby;
  if (runtime_->standbys) standby = co_await hosts_.read_host(target, route);
  if (!standby && route.reads == routing::Route::Reads::writes) hosts_.may_write_on(target);
  if (!co_await pump_.use_shard(target, standby)) {
    fe_.skip_until_sync = true;
    co_return !closing_;
  }
  hosts_.count_target(pending_.route);
  // After attaching: the client's own BEGIN starts the transaction on this backend.
  if (route.txn == TxnCommand::begin) txn_.begin_sql = p.query();
  ensure_prepared(p);
  if (!in_transaction() && (route.cls == StatementClass::write || route.cls == StatementClass::ddl))
    txn_.batch_wrote = true;
  if (p.server_name.empty()) {
    bout_.append(std::string_view(cbuf_).substr(cpos_, f.size));
  } else {
    proto::Reader r(f.body);
    auto portal = r.cstr();
    r.cstr();
    auto rest = r.rest();
    proto::Writer w(bout_, 'B');
    w.cstr(portal).cstr(p.server_name).bytes(rest).finish();
  }
  fe_.expect.push_back(Expect{'2'});
  fe_.expect.back().rows = row_shares(route, target);
  // Kept for the batch's Sync: the session's state once the batch succeeded.
  if (route.session_commands) note_session_commands(*route.session_commands, fe_.batch_commands);
  fe_.sent_after_sync = true;
  co_return true;
}

awaitable<bool> Session::route_execute(routing::Route& route) {
  // The statement: one of SQL PREPARE, or one prepared with the protocol (in PostgreSQL
  // both share one namespace; forward_query gives the latter the backend's name).
  std::shared_ptr<const routing::Plan> plan;
  std::vector<std::int32_t> types;
  if (auto it = fe_.sql_prepared.find(route.names->prepared_name); it != fe_.sql_prepared.end()) {
    plan = it->second.plan;
  } else if (auto p = fe_.prepared.find(route.names->prepared_name);
             p != fe_.prepared.end() && !p->second.server_name.empty()) {
    plan = p->second.plan;
    types = p->second.param_types;
  } else {
    // In session pooling the backend is the session's own: PostgreSQL answers. In
    // transaction pooling a pooled backend may hold another session's statement of
    // that name, which must never run for this one.
    if (runtime_->config.pool_mode == config::PoolMode::session) co_return true;
    co_await reject("26000", "prepared statement \"" + route.names->prepared_name + "\" does not exist", false);
    co_return false;
  }
  if (!route.names->execute_args) {
    if (pools_.size() == 1) co_return true;
    co_await reject(sqlstate::feature_not_supported,
                    "EXECUTE through splitpoint takes constant arguments only (they route the statement)", false);
    co_return false;
  }
  std::vector<std::optional<std::string_view>> values;
  for (auto& a : *route.names->execute_args) values.push_back(a ? std::optional<std::string_view>(*a) : std::nullopt);
  KeptShapes keep;
  auto lookup = shape_lookup(keep);
  const routing::BoundParams params{values, {}, types};
  auto& router = *runtime_->router;
  routing::Route r = router.route(*plan, params, settings_.routing, lookup);
  if (r.kind == RouteKind::need_shapes)
    co_await route_with_shapes(r, keep, [&] { return router.route(*plan, params, settings_.routing, lookup); });
  if (r.kind != RouteKind::error && !single_target(r)) {
    co_await reject(sqlstate::feature_not_supported,
                    "EXECUTE of a prepared statement that runs on several shards is not supported through splitpoint; "
                    "use the extended query protocol",
                    false);
    co_return false;
  }
  r.sql_prepared = route.sql_prepared;
  r.names = std::move(route.names);
  r.per_shard_sql.clear();
  route = std::move(r);
  co_return true;
}

// COMMIT / ROLLBACK (and AND CHAIN) in the simple protocol, inside a transaction block:
// every shard that joined the transaction finishes it, the written shard last, so a
// failed commit there is what the client sees. Notices raised while committing
// (deferred constraint triggers) reach the client in order, before the tag.
awaitable<bool> Session::finish_transaction(const routing::Route& route, std::string_view sql) {
  co_await pump_.drain();
  if (closing_) co_return false;
  bool rollback = route.txn == TxnCommand::rollback || fe_.client_txn == 'E';
  const char* verb = rollback ? "ROLLBACK" : "COMMIT";
  std::string error, tag = verb, notices;
  std::vector<std::size_t> order;
  if (!rollback && txn_.written.size() > 1) {
    error = co_await txn_.commit_two_phase(&notices);
  } else {
    for (std::size_t s = 0; s < held_.size(); ++s)
      if (in_transaction_on(s) && (!txn_.write_shard || s != *txn_.write_shard)) order.push_back(s);
    if (txn_.write_shard && in_transaction_on(*txn_.write_shard)) order.push_back(*txn_.write_shard);
  }
  // AND CHAIN: the last shard runs the client's own text, so the new transaction there
  // keeps the characteristics of the old one; shards that join later get the BEGIN.
  // All at once (run_on_each): one round trip however many shards joined.
  const bool chain = route.txn_options.chain;
  std::vector<std::pair<std::size_t, std::string>> statements;
  for (std::size_t i = 0; i < order.size(); ++i)
    statements.emplace_back(order[i], chain && i + 1 == order.size() ? sql : std::string_view(verb));
  auto replies = co_await run_on_each(std::move(statements));
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const auto& [s, reply] = replies[i];
    const bool last = i + 1 == replies.size();
    if (!reply.error.empty() && error.empty()) error = reply.error;
    if (!reply.tag.empty()) tag = reply.tag;
    append_notices_and_status(reply.messages, notices);
    if (!(chain && last && in_transaction_on(s))) end_shard(s, !reply.lost);
  }
  // SETs made inside the transaction count once it committed.
  if (!rollback && error.empty()) apply_session_commands();
  else fe_.pending_commands.clear();
  std::string begin = txn_.begin_sql.empty() ? std::string("BEGIN") : txn_.begin_sql;
  reset_transaction();
  if (chain && error.empty()) {
    txn_.begin_sql = std::move(begin);
    fe_.client_txn = 'T';
  }
  co_await answer(std::move(notices), error, tag);
  co_return true;
}

// The NotificationResponses an idle backend the session holds has sent since it was
// last read, taken from the front of what it sent (what is already in the socket; the
// rest stays for whoever reads it next). The pump reads only the current backend, and
// none while a block's BEGIN is held: a LISTEN session's notification that came then
// waits there.
static std::string take_notifications(Backend& b, const proto::FrameLimits& limits) {
  std::string out;
  if (b.status != 'I' || !b.socket.is_open()) return out;
  for (;;) {
    std::span<char> space = b.read_buf.prepare(16384);
    const ssize_t n = ::recv(b.socket.native_handle(), space.data(), space.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    b.read_buf.commit(static_cast<std::size_t>(n));
  }
  for (;;) {
    auto r = proto::decode_frame(b.read_buf, proto::Direction::backend, limits);
    if (r.status != proto::FrameStatus::ok || r.frame.type != 'A') break;
    out.append(std::string_view(b.read_buf).substr(0, r.frame.size));
    b.read_buf.erase(0, r.frame.size);
  }
  return out;
}

// The end of a statement the proxy ran for the client: what the shards said besides
// the result (notices, ParameterStatus), then the error (an ErrorResponse body) or the
// tag, then, outside a block, the notifications its held backends have for it (as
// PostgreSQL, which sends those that came during a transaction before the
// ReadyForQuery that ends it), then ReadyForQuery.
awaitable<void> Session::answer(std::string messages, std::string_view error, std::string_view tag) {
  note_parameter_statuses(messages);
  if (!error.empty()) {
    proto::Writer w(messages, 'E');
    w.bytes(error).finish();
  } else {
    proto::CommandComplete{tag}.encode(messages);
  }
  if (fe_.client_txn == 'I')
    for (std::size_t s = 0; s < held_.size(); ++s)
      if (held_[s] && !(s == cur_ && pump_.active())) messages += take_notifications(*held_[s], limits_);
  proto::ReadyForQuery{fe_.client_txn}.encode(messages);
  co_await stream_.write(messages);
}

// PREPARE TRANSACTION 'gid' of the client's own two-phase commit: the transaction's
// shard prepares it (joining it first if nothing ran yet); a transaction on several
// shards cannot be one prepared transaction and is rolled back.
awaitable<bool> Session::prepare_transaction(std::string_view sql) {
  co_await pump_.drain();
  if (closing_) co_return false;
  std::vector<std::size_t> joined;
  for (std::size_t s = 0; s < held_.size(); ++s)
    if (in_transaction_on(s)) joined.push_back(s);
  if (joined.size() > 1 || txn_.written.size() > 1 || fe_.proxy_failed_txn) {
    const bool failed = fe_.client_txn == 'E';
    co_await roll_back_everywhere();
    if (!failed)
      co_return co_await reject(sqlstate::feature_not_supported,
                                "PREPARE TRANSACTION of a transaction on several shards is not supported through "
                                "splitpoint; it was rolled back",
                                false);
    // As PostgreSQL: PREPARE TRANSACTION of a failed block rolls it back.
    co_await answer({}, {}, "ROLLBACK");
    co_return true;
  }
  const std::size_t s = joined.empty() ? hosts_.pick_any_shard() : joined.front();
  if (joined.empty() && !co_await txn_.join_transaction(s)) {
    co_await roll_back_everywhere();
    co_return co_await reject(sqlstate::connection_failure,
                              "shard \"" + pools_[s]->target().shard + "\" could not take the transaction", false);
  }
  auto reply = co_await run_on(s, sql);
  end_shard(s, !reply.lost);
  if (reply.error.empty() && reply.tag == "PREPARE TRANSACTION") apply_session_commands();
  else fe_.pending_commands.clear();
  reset_transaction();
  std::string notices;
  append_notices_and_status(reply.messages, notices);
  co_await answer(std::move(notices), reply.error, reply.tag);
  co_return true;
}

// COMMIT PREPARED / ROLLBACK PREPARED 'gid' over several shards: the one that holds
// the prepared transaction finishes it; the others do not know the gid (42704).
awaitable<bool> Session::finish_prepared(std::string_view sql) {
  co_await pump_.drain();
  if (closing_) co_return false;
  Reply reply;
  for (std::size_t s = 0; s < pools_.size(); ++s) {
    reply = co_await run_on(s, sql);
    auto e = proto::ErrorFields::decode(reply.error);
    if (!reply.lost && !(e && e->get('C') == "42704")) break;
  }
  if (reply.lost && reply.error.empty())
    reply.error = error_body(sqlstate::connection_failure, "lost the connection to a shard");
  std::string notices;
  append_notices_and_status(reply.messages, notices);
  co_await answer(std::move(notices), reply.error, reply.tag);
  co_return true;
}

awaitable<void> Session::roll_back_everywhere() {
  co_await pump_.drain();
  for (std::size_t s = 0; s < held_.size(); ++s) {
    if (!in_transaction_on(s)) continue;
    auto reply = co_await run_on(s, "ROLLBACK");
    end_shard(s, !reply.lost && reply.error.empty());
  }
  fe_.pending_commands.clear();
  reset_transaction();
}

// An error aborts the whole transaction block when there is no savepoint to roll back
// to, and PostgreSQL releases the transaction's locks then, not at the client's
// ROLLBACK. The block's shards that did not fail are rolled back at once (their
// backends go back to the pool in transaction pooling), so that what it locked there is
// free: a deadlock victim's rows most of all (deadlocks.cpp cancels it on one shard).
// A failed shard keeps its aborted block (which holds no lock) for the client's
// ROLLBACK; until then the proxy answers 25P02 for statements that route elsewhere
// (in_failed_transaction), as before.
bool Session::block_aborted() const {
  if (fe_.client_txn != 'E' || !txn_.savepoints.empty() || txn_.implicit) return false;
  for (const auto& b : held_)
    if (b && b->status == 'T') return true;
  return false;
}

awaitable<void> Session::fail_block() {
  fe_.fail_block();
  if (block_aborted()) co_await release_aborted_block();
}

awaitable<void> Session::release_aborted_block() {
  std::vector<std::pair<std::size_t, std::string>> statements;
  for (std::size_t s = 0; s < held_.size(); ++s)
    if (held_[s] && held_[s]->status == 'T') statements.emplace_back(s, "ROLLBACK");
  auto replies = co_await run_on_each(std::move(statements));
  for (const auto& [s, reply] : replies) end_shard(s, !reply.lost && reply.error.empty());
}

void Session::reset_transaction() {
  ++txn_.seq;
  txn_.deadlock_pid = 0;
  txn_.deadlock_detail.clear();
  txn_.savepoints.clear();
  txn_.implicit = false;
  txn_.own = false;
  fe_.client_txn = 'I';
  fe_.proxy_failed_txn = false;
  txn_.begin_sql.clear();
  txn_.write_shard.reset();
  txn_.written.clear();
  settings_.local_txn.clear();
  std::erase_if(fe_.cursors, [](const auto& c) { return !c.second.hold; });  // (a cursor without HOLD ends here)
  fe_.portals.clear();
  if (txn_.ddl) {
    txn_.ddl = false;
    forget_table_definitions();
  }
}

// Runs one simple-protocol statement on a shard outside the pump (which must not
// be reading that backend) and collects what it answered.
awaitable<Session::Reply> Session::run_on(std::size_t shard, std::string_view sql, const ScatterRequest* ext,
                                          bool metered, std::size_t max_rows) {
  Sent sent = co_await send_on(shard, sql, ext, metered);
  co_return co_await read_reply(sent, metered, max_rows);
}

awaitable<std::vector<std::pair<std::size_t, Session::Reply>>> Session::run_on_each(
    std::vector<std::pair<std::size_t, std::string>> statements) {
  std::vector<Sent> sent;
  sent.reserve(statements.size());
  for (auto& [shard, sql] : statements) {
    Sent one = co_await send_on(shard, sql, nullptr, false);
    sent.push_back(std::move(one));
  }
  std::vector<std::pair<std::size_t, Reply>> replies;
  replies.reserve(sent.size());
  for (auto& one : sent) {
    Reply reply = co_await read_reply(one, false, ~std::size_t{0});
    replies.emplace_back(one.shard, std::move(reply));
  }
  co_return replies;
}

awaitable<AcquireResult> Session::acquire_counted(std::size_t shard, bool metered) {
  const auto waited_from = std::chrono::steady_clock::now();
  std::optional<std::size_t> primary;
  auto r = co_await hosts_.acquire_backend(shard, primary);
  if (metered && shard < kMaxShards) {
    metrics_.shards[shard].pool_wait.observe_since(waited_from);
    if (!r.backend) metrics_.shards[shard].connect_errors.add();
  }
  co_return r;
}

awaitable<Session::Sent> Session::send_on(std::size_t shard, std::string_view sql, const ScatterRequest* ext,
                                          bool metered, bool join) {
  Sent sent;
  sent.shard = shard;
  hosts_.may_write_on(shard);  // (the proxy's own statements too: BEGIN, COMMIT, a write on every shard)
  if (drop_if_closed(shard)) {
    // Held for the transaction (its BEGIN goes with this statement): its replacement is too.
    auto r = co_await acquire_counted(shard, metered);
    if (!r.backend) {
      sent.reply.lost = true;
      sent.reply.error = error_body(r.sqlstate, r.message);
      co_return sent;
    }
    held_[shard] = std::move(r.backend);
  }
  sent.backend = held_[shard].get();
  if (!sent.backend) {
    auto r = co_await acquire_counted(shard, metered);
    if (!r.backend) {
      sent.reply.lost = true;
      sent.reply.error = error_body(r.sqlstate, r.message);
      co_return sent;
    }
    sent.borrowed = std::move(r.backend);
    sent.backend = sent.borrowed.get();
  }
  Backend& b = *sent.backend;
  std::string out;
  sent.queries = 1 + sync_backend_state(b, out, join);
  // A Query drops the unnamed statement, a Parse of it replaces it: ensure_prepared parses
  // the client's again.
  b.unnamed_owner = {0, 0};
  if (!ext) {
    proto::Query{sql}.encode(out);
  } else {
    // A split INSERT keeps the client's parameter numbers but uses only some of them.
    proto::Parse{"", sql, parameter_types_for(sql, ext->param_types, ext->param_formats, ext->params.size())}
        .encode(out);
    ext->bind(ext->result_formats).encode(out);
    proto::Describe{'P', ""}.encode(out);
    proto::Execute{"", 0}.encode(out);
    proto::encode_sync(out);
  }
  auto [wec, n] = co_await asio::async_write(b.socket, asio::buffer(out), use_nothrow);
  sent.reply.lost = static_cast<bool>(wec);
  co_return sent;
}

awaitable<Session::Reply> Session::read_reply(Sent& sent, bool metered, std::size_t max_rows) {
  Reply& reply = sent.reply;
  const std::size_t shard = sent.shard;
  if (!sent.backend) co_return std::move(reply);  // no connection: the acquire error
  Backend& b = *sent.backend;
  int queries = sent.queries;
  // Only the last Query's answer is the statement's (the first may replay session state).
  const FrameHandler on_frame = [&](char type, std::string_view message, std::string_view body) {
    if (type == 'Z') {
      --queries;
      return;
    }
    if (queries != 1) return;
    if (type == 'D' && max_rows-- == 0) {
      reply.truncated = true;
      ++max_rows;  // (stays 0)
      return;
    }
    if (type == 'E') reply.error = shard_error(b, body);
    if (type == 'C') reply.tag.assign(body.substr(0, body.find('\0')));
    if (type != 'A' && type != '1' && type != '2') reply.messages.append(message);
  };
  const auto& timeouts = runtime_->config.timeouts;
  if (!reply.lost && metered && timeouts.query.count() > 0) {
    const auto& e = runtime_->shards[shard]->hosts().endpoint(b.host);
    reply.lost = !co_await read_bounded(b, queries, limits_, on_frame, timeouts, {e.host, e.port},
                                        pools_[shard]->target().shard);
  } else if (!reply.lost) {
    reply.lost = !co_await read_until_ready(b, queries, limits_, on_frame);
  }
  if (sent.borrowed) hosts_.give_back(shard, std::move(sent.borrowed), !reply.lost);
  if (reply.lost && held_[shard]) {
    error_code ignored;
    held_[shard]->socket.close(ignored);
  }
  co_return std::move(reply);
}

// SET / RESET / SHOW splitpoint.<name>: the proxy's own session settings, in the simple
// protocol (answered now) and the extended one (run at Bind, answered by the portal's
// Describe and Execute, as PostgreSQL runs a SET at Execute: the batch cannot observe
// the difference).
awaitable<bool> Session::run_local(const routing::LocalCommand& c, std::string_view portal, bool extended) {
  Frontend::LocalPortal answer;
  answer.name = portal;
  if (auto error = local_answer(c, answer))
    co_return co_await reject(error->first, error->second, extended);
  std::string out;
  if (extended) {
    proto::encode_bind_complete(out);
    fe_.local_portal = std::move(answer);
  } else {
    out = answer.description + answer.rows;
    proto::CommandComplete{answer.tag}.encode(out);
    proto::ReadyForQuery{fe_.client_txn}.encode(out);
  }
  co_await stream_.write(out);
  co_return true;
}

// Applies `c` and fills `answer`; (SQLSTATE, message) when it is refused.
std::optional<std::pair<std::string, std::string>> Session::local_answer(const routing::LocalCommand& c,
                                                                          Frontend::LocalPortal& answer) {
  using Kind = routing::LocalCommand::Kind;
  static const std::vector<std::string> known = {"shard", "deadline", "partial_results", "reads", "last_scatter"};
  using Refusal = std::pair<std::string, std::string>;
  if (c.kind != Kind::show || c.name != "all") {
    if (std::find(known.begin(), known.end(), c.name) == known.end())
      return Refusal{sqlstate::invalid_parameter_value, "unrecognized configuration parameter \"splitpoint." + c.name + "\""};
  }
  auto find = [&](const std::string& n) {
    return std::find_if(settings_.local.begin(), settings_.local.end(), [&](auto& p) { return p.first == n; });
  };
  switch (c.kind) {
    case Kind::set:
    case Kind::set_local: {
      if (c.name == "last_scatter") return Refusal{"55P02", "parameter \"splitpoint.last_scatter\" cannot be changed"};
      if (c.name == "shard") {
        auto s = runtime_->config.find_shard(c.value);
        if (!s) return Refusal{sqlstate::no_partition, "unknown shard \"" + c.value + "\""};
        settings_.routing.shard = *s;
      }
      if ((c.name == "deadline" && !config::parse_duration(c.value)) ||
          (c.name == "partial_results" && c.value != "allow" && c.value != "deny") ||
          (c.name == "reads" && c.value != "primary" && c.value != "replica"))
        return Refusal{sqlstate::invalid_parameter_value,
                       "invalid value for parameter \"splitpoint." + c.name + "\": \"" + c.value + "\""};
      auto& settings = c.kind == Kind::set_local ? settings_.local_txn : settings_.local;
      if (c.kind == Kind::set_local && fe_.client_txn == 'I') {
        // As PostgreSQL: SET LOCAL outside a transaction block has no effect.
        proto::ErrorFields::make("WARNING", "25P01", "SET LOCAL can only be used in transaction blocks")
            .encode(answer.rows, 'N');
      } else {
        auto it = std::find_if(settings.begin(), settings.end(), [&](auto& p) { return p.first == c.name; });
        if (it != settings.end()) it->second = c.value;
        else settings.emplace_back(c.name, c.value);
      }
      answer.tag = "SET";
      return std::nullopt;
    }
    case Kind::reset:
      if (c.name == "shard" || c.name == "all") settings_.routing.shard.reset();
      if (c.name == "all") settings_.local.clear();
      else if (auto it = find(c.name); it != settings_.local.end()) settings_.local.erase(it);
      answer.tag = "RESET";
      return std::nullopt;
    case Kind::show:
      break;
  }
  answer.tag = "SHOW";
  if (c.name == "last_scatter") {
    show_last_scatter(answer.description, answer.rows);
    return std::nullopt;
  }
  auto current = local_setting(c.name);
  std::string value = current ? *current : "";
  if (!current) {
    if (c.name == "deadline") value = std::to_string(runtime_->config.scatter.deadline.count()) + "ms";
    if (c.name == "partial_results")
      value = runtime_->config.scatter.partial_results == config::PartialResults::allow ? "allow" : "deny";
    if (c.name == "reads") value = runtime_->config.reads == config::Reads::replica ? "replica" : "primary";
  }
  proto::RowDescription rd;
  proto::FieldDescription fd;
  std::string column = "splitpoint." + c.name;
  fd.name = column;
  fd.type_oid = 25;  // text
  fd.type_size = -1;
  fd.type_modifier = -1;
  rd.fields.push_back(fd);
  rd.encode(answer.description);
  proto::DataRow row;
  row.values.emplace_back(value);
  row.encode(answer.rows);
  return std::nullopt;
}

// SHOW splitpoint.last_scatter: one row per shard of the last multi-shard statement.
void Session::show_last_scatter(std::string& description, std::string& out) const {
  proto::RowDescription rd;
  const char* names[] = {"shard", "status", "rows", "elapsed_ms", "error", "host"};
  const std::int32_t types[] = {25, 25, 20, 701, 25, 25};  // text, text, int8, float8, text, text
  for (int i = 0; i < 6; ++i) {
    proto::FieldDescription fd;
    fd.name = names[i];
    fd.type_oid = types[i];
    fd.type_size = types[i] == 25 ? -1 : 8;
    fd.type_modifier = -1;
    rd.fields.push_back(fd);
  }
  rd.encode(description);
  for (auto& s : scatter_.last) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f", s.elapsed_ms);
    std::string rows = std::to_string(s.rows);
    proto::DataRow row;
    row.values = {std::string_view(s.shard), std::string_view(s.status), std::string_view(rows), std::string_view(ms),
                  s.error.empty() ? std::nullopt : std::optional<std::string_view>(s.error),
                  s.host.empty() ? std::nullopt : std::optional<std::string_view>(s.host)};
    row.encode(out);
  }
}

}  // namespace splitpoint::server
