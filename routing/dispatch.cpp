#include "routing/dispatch.hpp"

#include "routing/copy.hpp"
#include "routing/session_command.hpp"

namespace splitpoint::routing {

std::string_view executor_name(Executor e) {
  switch (e) {
    case Executor::copy_in: return "copy_in";
    case Executor::transaction: return "transaction";
    case Executor::shard_error: return "shard_error";
    case Executor::sequence_read: return "sequence_read";
    case Executor::generate_keys: return "generate_keys";
    case Executor::pull_insert: return "pull_insert";
    case Executor::cursor: return "cursor";
    case Executor::reject: return "reject";
    case Executor::local: return "local";
    case Executor::sql_execute: return "sql_execute";
    case Executor::deallocate: return "deallocate";
    case Executor::sql_prepare: return "sql_prepare";
    case Executor::one_shard: return "one_shard";
    case Executor::scatter_read: return "scatter_read";
    case Executor::several_shards: return "several_shards";
  }
  return "?";
}

namespace {

// COPY FROM STDIN into a sharded table is split by key; into a reference table it goes
// to every shard. Any other COPY goes to one shard, where PostgreSQL answers it.
bool copies_in(const Route& route, std::size_t shards) {
  if (shards < 2 || route.kind != RouteKind::all_shards || route.cls != StatementClass::write ||
      !(route.distribution || route.reference_write) || !route.copy_from)
    return false;
  const auto& statement = route.copy_from->statement;
  return !statement || statement->from_stdin;  // (no statement: the splitter refuses it)
}

Executor terminal(const Route& route, std::size_t shards) {
  switch (route.kind) {
    case RouteKind::any_shard:
      return Executor::one_shard;
    case RouteKind::shards:
      if (route.shards.size() == 1 && route.per_shard_sql.empty()) return Executor::one_shard;
      break;
    case RouteKind::all_shards:
      if (shards == 1) return Executor::one_shard;
      break;
    default:
      break;
  }
  return route.cls == StatementClass::read && route.explain == Route::Explain::none ? Executor::scatter_read
                                                                                     : Executor::several_shards;
}

bool starts_with_deallocate(const Route& route) {
  if (!route.session_commands || route.session_commands->empty()) return false;
  const auto& first = route.session_commands->front();
  return first.kind == SessionCommand::deallocate && first.statement == 0;  // (a text that starts with it)
}

}  // namespace

Steps dispatch(const Route& route, std::size_t shards, Protocol protocol) {
  const bool simple = protocol == Protocol::simple;
  Steps steps;
  if (simple && copies_in(route, shards)) {
    steps.add(Executor::copy_in);
    return steps;
  }
  if (simple ? route.txn != TxnCommand::none
             : route.txn == TxnCommand::commit || route.txn == TxnCommand::rollback ||
                   route.txn == TxnCommand::prepare || route.txn == TxnCommand::finish_prepared)
    steps.add(Executor::transaction);
  if (simple && route.syntax_error) {
    // PostgreSQL parses the whole text before running any of it: on a shard it fails at
    // once, with PostgreSQL's own error and every field of it (HINT, DETAIL, ...).
    steps.add(Executor::shard_error);
    steps.add(Executor::one_shard);
    return steps;
  }
  if (route.reads == Route::Reads::sequences) steps.add(Executor::sequence_read);
  if (route.generate_keys) {
    steps.add(Executor::generate_keys);
    return steps;
  }
  if (route.pull_insert) {
    steps.add(Executor::pull_insert);
    return steps;
  }
  if (route.cursor != Route::Cursor::none && shards > 1) steps.add(Executor::cursor);
  if (route.kind == RouteKind::error || route.kind == RouteKind::local) {
    steps.add(route.kind == RouteKind::error ? Executor::reject : Executor::local);
    return steps;
  }
  if (simple && route.sql_prepared == Route::SqlPrepared::execute) steps.add(Executor::sql_execute);
  if (simple && starts_with_deallocate(route)) steps.add(Executor::deallocate);
  if (simple && route.sql_prepared == Route::SqlPrepared::prepare) steps.add(Executor::sql_prepare);
  steps.add(terminal(route, shards));
  return steps;
}

}  // namespace splitpoint::routing
