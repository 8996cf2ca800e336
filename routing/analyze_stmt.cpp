// Statement kinds (SPEC §3): what routes whatever the values (DDL, SET/SHOW,
// transaction control, utilities) and what needs its keys looked at.
#include <algorithm>
#include <cctype>

#include "routing/analyze.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

constexpr std::string_view kLocalPrefix = "splitpoint.";

Route make_route(RouteKind kind, StatementClass cls) {
  Route r;
  r.kind = kind;
  r.cls = cls;
  return r;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "splitpoint.deadline" -> "deadline"; nullopt for other parameters.
std::optional<std::string> local_name(const char* name) {
  std::string n = lower(sv(name));
  if (!n.starts_with(kLocalPrefix)) return std::nullopt;
  return n.substr(kLocalPrefix.size());
}

// The text of a SET argument as PostgreSQL would show it.
std::string set_value(PgQuery__Node* const* args, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    const PgQuery__Node* a = args[i];
    if (is(a, PG_QUERY__NODE__NODE_TYPE_CAST)) a = a->type_cast->arg;  // SET x = interval '1s'
    if (!is(a, PG_QUERY__NODE__NODE_A_CONST)) continue;
    const PgQuery__AConst* c = a->a_const;
    switch (c->val_case) {
      case PG_QUERY__A__CONST__VAL_IVAL: out += std::to_string(c->ival->ival); break;
      case PG_QUERY__A__CONST__VAL_FVAL: out += c->fval->fval; break;
      case PG_QUERY__A__CONST__VAL_SVAL: out += c->sval->sval; break;
      case PG_QUERY__A__CONST__VAL_BOOLVAL: out += c->boolval->boolval ? "on" : "off"; break;
      default: break;
    }
  }
  return out;
}

// Tables a DDL statement names, as ShapeLookup knows them.
void collect_ddl_tables(const PgQuery__Node* stmt, std::vector<std::string>& out) {
  auto add = [&](std::string name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
  };
  auto add_qualified = [&](const PgQuery__List* names) {  // DROP TABLE a.b / COMMENT ON TABLE b
    if (names == nullptr || names->n_items == 0) return;
    std::string_view rel = str_of(names->items[names->n_items - 1]);
    std::string_view schema = names->n_items >= 2 ? str_of(names->items[names->n_items - 2]) : std::string_view{};
    add(Topology::table_name(schema, rel));
  };
  for_each_range_var(&stmt->base, [&](const PgQuery__RangeVar* rv) {
    if (!sv(rv->relname).empty()) add(Topology::table_name(sv(rv->schemaname), rv->relname));
  });
  if (is(stmt, PG_QUERY__NODE__NODE_DROP_STMT) &&
      (stmt->drop_stmt->remove_type == PG_QUERY__OBJECT_TYPE__OBJECT_TABLE ||
       stmt->drop_stmt->remove_type == PG_QUERY__OBJECT_TYPE__OBJECT_FOREIGN_TABLE)) {
    for (std::size_t i = 0; i < stmt->drop_stmt->n_objects; ++i)
      if (is(stmt->drop_stmt->objects[i], PG_QUERY__NODE__NODE_LIST)) add_qualified(stmt->drop_stmt->objects[i]->list);
  }
  if (is(stmt, PG_QUERY__NODE__NODE_COMMENT_STMT) && stmt->comment_stmt->objtype == PG_QUERY__OBJECT_TYPE__OBJECT_TABLE &&
      is(stmt->comment_stmt->object, PG_QUERY__NODE__NODE_LIST))
    add_qualified(stmt->comment_stmt->object->list);
  if (is(stmt, PG_QUERY__NODE__NODE_RENAME_STMT) && stmt->rename_stmt->rename_type == PG_QUERY__OBJECT_TYPE__OBJECT_TABLE &&
      !sv(stmt->rename_stmt->newname).empty()) {
    const PgQuery__RangeVar* rv = stmt->rename_stmt->relation;
    add(Topology::table_name(rv != nullptr ? sv(rv->schemaname) : "", stmt->rename_stmt->newname));
  }
}

// A constant argument's text as PostgreSQL would read it; nullopt if not a constant.
std::optional<std::optional<std::string>> constant_text(const PgQuery__Node* n) {
  if (is(n, PG_QUERY__NODE__NODE_TYPE_CAST)) n = n->type_cast->arg;
  if (!is(n, PG_QUERY__NODE__NODE_A_CONST)) return std::nullopt;
  const PgQuery__AConst* c = n->a_const;
  if (c->isnull) return std::optional<std::string>{};
  switch (c->val_case) {
    case PG_QUERY__A__CONST__VAL_IVAL: return std::optional<std::string>(std::to_string(c->ival->ival));
    case PG_QUERY__A__CONST__VAL_FVAL: return std::optional<std::string>(sv(c->fval->fval));
    case PG_QUERY__A__CONST__VAL_SVAL: return std::optional<std::string>(sv(c->sval->sval));
    case PG_QUERY__A__CONST__VAL_BOOLVAL: return std::optional<std::string>(c->boolval->boolval ? "true" : "false");
    default: return std::nullopt;
  }
}

// PostgreSQL's CURSOR_OPT_* (nodes/parsenodes.h).
constexpr std::int32_t kCursorOptBinary = 0x0001;
constexpr std::int32_t kCursorOptScroll = 0x0002;
constexpr std::int32_t kCursorOptHold = 0x0020;  // DECLARE ... WITH HOLD

// FETCH / MOVE / CLOSE alone in its text: any backend, unless the cursor is the
// proxy's own (the session looks).
Route cursor_route(const PgQuery__Node* stmt) {
  Route r = make_route(RouteKind::any_shard, StatementClass::utility);
  auto names = std::make_shared<Route::Names>();
  if (is(stmt, PG_QUERY__NODE__NODE_FETCH_STMT)) {
    r.cursor = Route::Cursor::fetch;
    names->cursor = sv(stmt->fetch_stmt->portalname);
    names->fetch_forward = stmt->fetch_stmt->direction == PG_QUERY__FETCH_DIRECTION__FETCH_FORWARD &&
                           stmt->fetch_stmt->how_many >= 0;  // (FETCH -n goes backward)
    names->fetch_count = stmt->fetch_stmt->how_many;
    names->move = stmt->fetch_stmt->ismove;
  } else {
    r.cursor = Route::Cursor::close;
    names->cursor = sv(stmt->close_portal_stmt->portalname);
  }
  r.names = std::move(names);
  return r;
}

// One statement's node as SQL text (a PREPARE's or a DECLARE's query).
std::string deparse_statement(PgQuery__Node* stmt) {
  PgQuery__RawStmt raw = PG_QUERY__RAW_STMT__INIT;
  raw.stmt = stmt;
  PgQuery__RawStmt* stmts[1] = {&raw};
  PgQuery__ParseResult tree = PG_QUERY__PARSE_RESULT__INIT;
  tree.n_stmts = 1;
  tree.stmts = stmts;
  auto text = deparse(&tree);
  return text ? std::move(*text) : std::string();
}

Route sql_prepared_route(const PgQuery__Node* stmt) {
  Route r = make_route(RouteKind::any_shard, StatementClass::utility);
  auto names = std::make_shared<Route::Names>();
  r.names = names;
  if (is(stmt, PG_QUERY__NODE__NODE_PREPARE_STMT)) {
    r.sql_prepared = Route::SqlPrepared::prepare;
    names->prepared_name = sv(stmt->prepare_stmt->name);
    names->prepared_query = deparse_statement(stmt->prepare_stmt->query);
    return r;
  }
  const PgQuery__ExecuteStmt* e = stmt->execute_stmt;
  r.sql_prepared = Route::SqlPrepared::execute;
  names->prepared_name = sv(e->name);
  std::vector<std::optional<std::string>> args;
  for (std::size_t i = 0; i < e->n_params; ++i) {
    auto v = constant_text(e->params[i]);
    if (!v) return r;
    args.push_back(std::move(*v));
  }
  names->execute_args = std::move(args);
  return r;
}

// CREATE TEMP TABLE / VIEW / SEQUENCE, SELECT INTO TEMP, CREATE TEMP TABLE AS: a
// temporary object (RangeVar with relpersistence 't'), unless it is dropped at commit;
// DECLARE CURSOR WITH HOLD: a cursor that outlives its transaction.
bool creates_lasting_temp(const PgQuery__Node* stmt) {
  if (is(stmt, PG_QUERY__NODE__NODE_DECLARE_CURSOR_STMT)) return (stmt->declare_cursor_stmt->options & kCursorOptHold) != 0;
  if (is(stmt, PG_QUERY__NODE__NODE_CREATE_STMT) && stmt->create_stmt->oncommit == PG_QUERY__ON_COMMIT_ACTION__ONCOMMIT_DROP)
    return false;
  if (is(stmt, PG_QUERY__NODE__NODE_CREATE_TABLE_AS_STMT) && stmt->create_table_as_stmt->into != nullptr &&
      stmt->create_table_as_stmt->into->on_commit == PG_QUERY__ON_COMMIT_ACTION__ONCOMMIT_DROP)
    return false;
  bool temp = false;
  for_each_range_var(&stmt->base, [&](const PgQuery__RangeVar* rv) { temp = temp || sv(rv->relpersistence) == "t"; });
  return temp;
}

// A SELECT a hot standby answers as the primary would (SPEC §10): no row locks, no
// SELECT INTO, no data-modifying WITH, and none of the built-in functions that write or
// need the session's own earlier calls (advisory locks, xids, NOTIFY, large objects) —
// but sequence functions, which set `sequences` (such a SELECT is Reads::sequences), as
// does a read of a sequence's own columns (`SELECT last_value, is_called FROM s`, as
// pg_dump reads it: a table with such a column is then read on that one shard too). A
// user function that writes is not seen here: reads: primary (or a transaction block)
// for those.
bool standby_can_answer(const PgQuery__Node* stmt, bool& sequences) {
  static constexpr std::string_view kSequences[] = {"nextval", "setval", "currval", "lastval"};
  static constexpr std::string_view kWriters[] = {
      "txid_current", "pg_current_xact_id", "pg_notify", "pg_listening_channels", "pg_notification_queue_usage",
      "lo_create", "lo_creat", "lo_import", "lo_unlink", "lo_open", "lo_put", "lo_from_bytea", "set_config"};
  if (!is(stmt, PG_QUERY__NODE__NODE_SELECT_STMT)) return false;
  bool ok = stmt->select_stmt->n_locking_clause == 0 && stmt->select_stmt->into_clause == nullptr;
  walk_nodes(&stmt->base, [&](const PgQuery__Node* n) {
    switch (n->node_case) {
      case PG_QUERY__NODE__NODE_SELECT_STMT:
        ok = ok && n->select_stmt->n_locking_clause == 0 && n->select_stmt->into_clause == nullptr;
        break;
      case PG_QUERY__NODE__NODE_INSERT_STMT:
      case PG_QUERY__NODE__NODE_UPDATE_STMT:
      case PG_QUERY__NODE__NODE_DELETE_STMT:
      case PG_QUERY__NODE__NODE_MERGE_STMT:
        ok = false;
        break;
      case PG_QUERY__NODE__NODE_COLUMN_REF: {
        const std::string_view name = last_name(n->column_ref->fields, n->column_ref->n_fields);
        sequences = sequences || name == "last_value" || name == "is_called";
        break;
      }
      case PG_QUERY__NODE__NODE_FUNC_CALL: {
        const auto* f = n->func_call;
        const std::string_view name = last_name(f->funcname, f->n_funcname);
        if (name.starts_with("pg_advisory") || name.starts_with("pg_try_advisory")) ok = false;
        for (std::string_view w : kWriters) ok = ok && name != w;
        for (std::string_view w : kSequences) sequences = sequences || name == w;
        break;
      }
      default:
        break;
    }
    return ok;
  });
  return ok;
}

// A statement that reads the system catalogs (SPEC §14): a catalog table or view
// (pg_catalog, information_schema, an unqualified pg_*), a function that looks objects up
// (pg_get_*, format_type, obj_description, to_regclass, ...), a large-object function,
// or a cast to an OID type.
// OIDs differ from shard to shard, so such reads all go to one shard (Route::Reads::catalog): an
// OID one statement found is valid for the next, as psql's \d expects. So do what one
// server keeps for all its sessions and the client compares with the pid it was given
// (notifications; the backend's pid, the catalog shard's backend in session pooling).
bool reads_catalog(const PgQuery__Node* stmt) {
  static constexpr std::string_view kLookups[] = {
      "format_type", "obj_description", "col_description", "shobj_description", "to_regclass", "to_regtype",
      "to_regproc", "to_regprocedure", "to_regnamespace", "to_regrole", "to_regoper", "to_regoperator",
      "pg_backend_pid", "pg_notify", "pg_listening_channels", "pg_notification_queue_usage"};
  static constexpr std::string_view kOidTypes[] = {"oid", "regclass", "regtype", "regproc", "regprocedure",
                                                   "regnamespace", "regrole", "regoper", "regoperator",
                                                   "regconfig", "regdictionary", "regcollation"};
  bool found = false;
  for_each_range_var(&stmt->base, [&](const PgQuery__RangeVar* rv) {
    const std::string_view schema = sv(rv->schemaname), name = sv(rv->relname);
    found = found || schema == "pg_catalog" || schema == "information_schema" ||
            (schema.empty() && name.starts_with("pg_"));
  });
  walk_nodes(&stmt->base, [&](const PgQuery__Node* n) {
    if (found) return false;
    if (n->node_case == PG_QUERY__NODE__NODE_FUNC_CALL) {
      const std::string_view name = last_name(n->func_call->funcname, n->func_call->n_funcname);
      // (lo_*: large objects live in the catalog, pg_largeobject, on that one shard.)
      found = name.starts_with("pg_get_") || name.ends_with("_is_visible") || name.starts_with("lo_") ||
              std::find(std::begin(kLookups), std::end(kLookups), name) != std::end(kLookups);
    } else if (n->node_case == PG_QUERY__NODE__NODE_TYPE_CAST && n->type_cast->type_name != nullptr) {
      const auto* t = n->type_cast->type_name;
      const std::string_view name = last_name(t->names, t->n_names);
      found = std::find(std::begin(kOidTypes), std::end(kOidTypes), name) != std::end(kOidTypes);
    }
    return !found;
  });
  return found;
}

}  // namespace

void Analyzer::fixed(Route route) { fixed_routes_.push_back(std::move(route)); }

void Analyzer::error(std::string sqlstate, std::string message, bool overridable) {
  // The class the statement would have had, for when a shard hint overrides the error.
  Route r = make_route(RouteKind::error, writes_ ? StatementClass::write : StatementClass::read);
  r.sqlstate = std::move(sqlstate);
  r.message = std::move(message);
  if (!overridable) plan_.shard_override = false;
  fixed(std::move(r));
}

void Analyzer::statement(const PgQuery__Node* stmt, bool alone) {
  using SC = StatementClass;
  switch (stmt->node_case) {
    case PG_QUERY__NODE__NODE_SELECT_STMT:
      if (stmt->select_stmt->into_clause != nullptr) return ddl(stmt);  // SELECT INTO creates a table
      [[fallthrough]];
    case PG_QUERY__NODE__NODE_INSERT_STMT:
    case PG_QUERY__NODE__NODE_UPDATE_STMT:
    case PG_QUERY__NODE__NODE_DELETE_STMT:
      return keyed(stmt, alone);
    case PG_QUERY__NODE__NODE_MERGE_STMT: {
      // WHEN NOT MATCHED THEN INSERT may create rows with any key: only a reference
      // target can take it (everywhere).
      TableClass c = stmt->merge_stmt->relation
                         ? topo_.classify(sv(stmt->merge_stmt->relation->schemaname),
                                          stmt->merge_stmt->relation->relname)
                         : TableClass{};
      if (c.kind == TableClass::Kind::sharded)
        return error("SPR01", "MERGE into a sharded table is not supported; use INSERT ... ON CONFLICT", true);
      return keyed(stmt, alone);
    }
    case PG_QUERY__NODE__NODE_EXPLAIN_STMT:
      return statement(stmt->explain_stmt->query, alone);
    case PG_QUERY__NODE__NODE_DECLARE_CURSOR_STMT:
      if (alone) {  // the proxy may hold it (a read of several shards): its query as text
        auto names = std::make_shared<Route::Names>();
        names->cursor = sv(stmt->declare_cursor_stmt->portalname);
        const std::int32_t options = stmt->declare_cursor_stmt->options;
        names->cursor_hold = (options & kCursorOptHold) != 0;
        names->cursor_plain = (options & (kCursorOptBinary | kCursorOptScroll)) == 0;
        names->cursor_query = deparse_statement(stmt->declare_cursor_stmt->query);
        cursor_ = std::move(names);
        plan_.cacheable = false;
      }
      return statement(stmt->declare_cursor_stmt->query, false);
    case PG_QUERY__NODE__NODE_TRANSACTION_STMT:
      return transaction(stmt->transaction_stmt);
    case PG_QUERY__NODE__NODE_VARIABLE_SET_STMT:
      return variable_set(stmt->variable_set_stmt);
    case PG_QUERY__NODE__NODE_VARIABLE_SHOW_STMT:
      return variable_show(stmt->variable_show_stmt);
    case PG_QUERY__NODE__NODE_COPY_STMT:
      return copy(stmt->copy_stmt);
    // SQL-level prepared statements: any backend; the caller carries them over and
    // routes each EXECUTE by the prepared query with its arguments.
    // Among other statements neither could be followed: the PREPARE would stay behind on
    // a pooled backend, unknown to the proxy, and the EXECUTE would go to any shard.
    case PG_QUERY__NODE__NODE_PREPARE_STMT:
    case PG_QUERY__NODE__NODE_EXECUTE_STMT:
      plan_.cacheable = false;  // the name, the query and the arguments are all in the text
      if (!alone)
        return error("0A000", "PREPARE and EXECUTE must be sent as a statement of their own: the proxy keeps "
                              "each prepared statement to route its EXECUTEs", false);
      return fixed(sql_prepared_route(stmt));
    // Session-level utilities: any backend; the caller carries session state over.
    // Notifications: on the catalog shard (the combine shard), whoever sends or listens,
    // so that a NOTIFY reaches every LISTEN as on one server (pg_notify() too: reads_catalog).
    case PG_QUERY__NODE__NODE_LISTEN_STMT:
    case PG_QUERY__NODE__NODE_UNLISTEN_STMT:
    case PG_QUERY__NODE__NODE_NOTIFY_STMT: {
      Route r = make_route(RouteKind::shards, SC::utility);
      r.shards = {topo_.config().combine_shard()};
      return fixed(std::move(r));
    }
    case PG_QUERY__NODE__NODE_DEALLOCATE_STMT:
    case PG_QUERY__NODE__NODE_DISCARD_STMT:
    case PG_QUERY__NODE__NODE_LOAD_STMT:
    case PG_QUERY__NODE__NODE_CONSTRAINTS_SET_STMT:
      return fixed(make_route(RouteKind::any_shard, SC::utility));
    // Cursors: any backend (the one that declared it, in a block), unless the cursor is
    // the proxy's own (server/session/execute/cursor.cpp).
    case PG_QUERY__NODE__NODE_FETCH_STMT:
    case PG_QUERY__NODE__NODE_CLOSE_PORTAL_STMT:
      if (!alone) return fixed(make_route(RouteKind::any_shard, SC::utility));
      plan_.cacheable = false;  // the count is in the text
      return fixed(cursor_route(stmt));
    // Functions only (SPEC §3: one shard).
    case PG_QUERY__NODE__NODE_CALL_STMT:
    case PG_QUERY__NODE__NODE_DO_STMT:
      return fixed(make_route(RouteKind::any_shard, SC::read));
    // Maintenance that concerns every shard's copy.
    case PG_QUERY__NODE__NODE_VACUUM_STMT:
    case PG_QUERY__NODE__NODE_CLUSTER_STMT:
    case PG_QUERY__NODE__NODE_REINDEX_STMT:
    case PG_QUERY__NODE__NODE_CHECK_POINT_STMT:
      return fixed(make_route(RouteKind::all_shards, SC::utility));
    case PG_QUERY__NODE__NODE_LOCK_STMT:
      return fixed(lock_route(stmt->lock_stmt));
    default:
      return ddl(stmt);
  }
}

// LOCK: every shard, but tables that all live on one shard (unlisted_tables:
// shard:<name>, the proxy's own) are locked there only.
Route Analyzer::lock_route(const PgQuery__LockStmt* s) const {
  std::optional<std::size_t> shard;
  bool one_shard = s->n_relations > 0;
  for (std::size_t i = 0; i < s->n_relations && one_shard; ++i) {
    const PgQuery__Node* n = s->relations[i];
    if (!is(n, PG_QUERY__NODE__NODE_RANGE_VAR)) return make_route(RouteKind::all_shards, StatementClass::utility);
    const TableClass c = topo_.classify(sv(n->range_var->schemaname), n->range_var->relname);
    one_shard = c.kind == TableClass::Kind::pinned && (!shard || *shard == c.shard);
    shard = c.shard;
  }
  Route r = make_route(one_shard ? RouteKind::shards : RouteKind::all_shards, StatementClass::utility);
  if (one_shard) r.shards = {*shard};
  return r;
}

void Analyzer::ddl(const PgQuery__Node* stmt) {
  collect_ddl_tables(stmt, plan_.ddl_tables);
  fixed(make_route(RouteKind::all_shards, StatementClass::ddl));
}

void Analyzer::variable_set(const PgQuery__VariableSetStmt* s) {
  std::optional<std::string> name = local_name(s->name);
  if (!name) return fixed(make_route(RouteKind::any_shard, StatementClass::utility));
  Route r = make_route(RouteKind::local, StatementClass::utility);
  LocalCommand cmd;
  cmd.name = *name;
  switch (s->kind) {
    case PG_QUERY__VARIABLE_SET_KIND__VAR_SET_VALUE:
      cmd.kind = s->is_local ? LocalCommand::Kind::set_local : LocalCommand::Kind::set;
      cmd.value = set_value(s->args, s->n_args);
      break;
    default:  // RESET x, SET x TO DEFAULT
      cmd.kind = LocalCommand::Kind::reset;
      break;
  }
  r.local = std::move(cmd);
  plan_.cacheable = false;  // the value is a literal
  plan_.shard_override = false;
  fixed(std::move(r));
}

void Analyzer::variable_show(const PgQuery__VariableShowStmt* s) {
  std::optional<std::string> name = local_name(s->name);
  if (!name) return fixed(make_route(RouteKind::any_shard, StatementClass::utility));
  Route r = make_route(RouteKind::local, StatementClass::utility);
  r.local = LocalCommand{LocalCommand::Kind::show, *name, {}};
  plan_.shard_override = false;
  fixed(std::move(r));
}

void Analyzer::transaction(const PgQuery__TransactionStmt* s) {
  Route r = make_route(RouteKind::any_shard, StatementClass::transaction);
  switch (s->kind) {
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_BEGIN: r.txn = TxnCommand::begin; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_START:
      r.txn = TxnCommand::begin;
      r.txn_options.start = true;
      break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_COMMIT: r.txn = TxnCommand::commit; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_ROLLBACK: r.txn = TxnCommand::rollback; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_SAVEPOINT: r.txn = TxnCommand::savepoint; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_RELEASE: r.txn = TxnCommand::release_savepoint; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_ROLLBACK_TO: r.txn = TxnCommand::rollback_to_savepoint; break;
    // A client's own two-phase commit (XA): the session finds the shard (SPEC §5).
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_PREPARE: r.txn = TxnCommand::prepare; break;
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_COMMIT_PREPARED:
    case PG_QUERY__TRANSACTION_STMT_KIND__TRANS_STMT_ROLLBACK_PREPARED: r.txn = TxnCommand::finish_prepared; break;
    default: break;
  }
  if (r.txn == TxnCommand::prepare || r.txn == TxnCommand::finish_prepared) {
    auto names = std::make_shared<Route::Names>();
    names->gid = sv(s->gid);
    r.names = std::move(names);
    plan_.cacheable = false;  // the gid is a literal
  }
  if (r.txn == TxnCommand::savepoint || r.txn == TxnCommand::release_savepoint ||
      r.txn == TxnCommand::rollback_to_savepoint) {
    auto names = std::make_shared<Route::Names>();
    names->savepoint = sv(s->savepoint_name);
    r.names = std::move(names);
  }
  r.txn_options.chain = s->chain;
  plan_.shard_override = false;
  fixed(std::move(r));
}

// COPY t FROM STDIN: the caller splits the rows by key (SPEC §3); COPY t TO / COPY
// (query) TO reads like a SELECT.
void Analyzer::copy(const PgQuery__CopyStmt* s) {
  if (s->query != nullptr) return statement(s->query, false);
  if (s->relation == nullptr) return fixed(make_route(RouteKind::any_shard, StatementClass::utility));
  TableClass c = topo_.classify(sv(s->relation->schemaname), s->relation->relname);
  if (c.kind == TableClass::Kind::rejected)
    return error("SPR01", "table \"" + std::string(s->relation->relname) + "\" is not configured in splitpoint", true);
  if (!s->is_from) {  // COPY t TO: a read of the whole table
    Scope scope;
    table(s->relation, scope, nullptr);
    if (c.kind == TableClass::Kind::pinned) plan_.pinned_shards.push_back(c.shard);
    keyed_ = true;
    return;
  }
  writes_ = true;
  Route r = make_route(RouteKind::all_shards, StatementClass::write);
  if (c.kind == TableClass::Kind::sharded) r.distribution = c.distribution;  // the caller splits rows by key
  r.reference_write = c.kind == TableClass::Kind::reference || c.kind == TableClass::Kind::catalog;
  if (c.kind == TableClass::Kind::pinned) {
    r.kind = RouteKind::shards;
    r.shards = {c.shard};
  }
  fixed(std::move(r));
}

void Analyzer::keyed(const PgQuery__Node* stmt, bool alone) {
  std::size_t first_occ = plan_.occs.size();
  reference_target_ = false;
  relname_refs_.clear();
  cte_names_.clear();
  for_each_range_var(&stmt->base, [&](const PgQuery__RangeVar* rv) {
    if (sv(rv->schemaname).empty() && !sv(rv->relname).empty()) ++relname_refs_[rv->relname];
  });
  walk_nodes(&stmt->base, [&](const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_COMMON_TABLE_EXPR) && !sv(n->common_table_expr->ctename).empty())
      ++cte_names_[n->common_table_expr->ctename];
    return true;
  });
  Scope scope;
  dml(stmt, scope, alone, nullptr);
  keyed_ = true;
  safety_net(stmt, first_occ);
  // Each shard's copy of a reference table would get different rows.
  if (reference_target_ && plan_.occs.size() > first_occ)
    error("SPC01", "a reference table cannot be written from a sharded table's rows", true);
}

// Every table of the statement, found by a walk over the whole tree: a sharded table the
// analysis did not meet (a construct it does not follow) counts as unconstrained, so the
// statement can only reach more shards than needed, never fewer. Pinned and rejected
// unlisted tables are found here too.
void Analyzer::safety_net(const PgQuery__Node* stmt, std::size_t first_occ) {
  std::unordered_map<std::string, int> seen;  // sharded table -> occurrences met
  for (std::size_t i = first_occ; i < plan_.occs.size(); ++i) ++seen[plan_.occs[i].table];
  for_each_range_var(&stmt->base, [&](const PgQuery__RangeVar* rv) {
    if (sv(rv->relname).empty()) return;
    std::string_view schema = sv(rv->schemaname);
    TableClass c = topo_.classify(schema, rv->relname);
    bool maybe_cte = schema.empty() && cte_names_.count(rv->relname) != 0;
    std::string name = Topology::table_name(schema, rv->relname);
    if (c.kind == TableClass::Kind::sharded) {
      if (--seen[name] < 0) add_occurrence(name, c);
    } else if (c.kind == TableClass::Kind::pinned && !maybe_cte) {
      if (std::find(plan_.pinned_shards.begin(), plan_.pinned_shards.end(), c.shard) == plan_.pinned_shards.end())
        plan_.pinned_shards.push_back(c.shard);
    } else if (c.kind == TableClass::Kind::rejected && !maybe_cte) {
      error("SPR01", "table \"" + name + "\" is not configured in splitpoint (unlisted_tables: reject)", true);
    }
  });
}

// Combines the statements of one text into one plan.
void Analyzer::finish(std::size_t statement_count) {
  auto has = [&](auto pred) { return std::any_of(fixed_routes_.begin(), fixed_routes_.end(), pred); };
  for (const Route& r : fixed_routes_) {
    if (r.kind == RouteKind::error) return finish_with(r);
  }
  if (statement_count > 1 && has([](const Route& r) { return r.kind == RouteKind::local; })) {
    Route r = make_route(RouteKind::error, StatementClass::utility);
    r.sqlstate = "0A000";
    r.message = "SET/SHOW/RESET splitpoint.* must be sent as a statement of its own";
    plan_.shard_override = false;
    return finish_with(r);
  }
  StatementClass cls = writes_ ? StatementClass::write : StatementClass::read;
  if (fixed_routes_.size() == 1 && !keyed_) return finish_with(fixed_routes_.front());
  if (has([](const Route& r) { return r.cls == StatementClass::ddl; }))
    return finish_with(make_route(RouteKind::all_shards, StatementClass::ddl));
  if (has([](const Route& r) { return r.kind == RouteKind::all_shards; }))
    return finish_with(make_route(RouteKind::all_shards, keyed_ ? cls : fixed_routes_.front().cls));
  if (keyed_) {
    plan_.mode = Plan::Mode::keyed;
    plan_.fixed = make_route(RouteKind::shards, cls);
    return;
  }
  if (fixed_routes_.empty()) return finish_with(make_route(RouteKind::any_shard, StatementClass::utility));  // ";"
  // Several statements that each go anywhere (SET ...; BEGIN; ...): one backend.
  Route r = fixed_routes_.front();
  r.txn = TxnCommand::none;
  finish_with(r);
}

void Analyzer::finish_with(const Route& r) {
  plan_.mode = Plan::Mode::fixed;
  plan_.fixed = r;
  if (r.kind == RouteKind::error) plan_.cacheable = false;
}

}  // namespace splitpoint::routing

namespace splitpoint::routing {

namespace {

std::size_t cond_bytes(const KeyCond& k) {
  std::size_t n = sizeof(KeyCond);
  for (const ValueSource& v : k.values) n += sizeof(ValueSource) + v.text.size();
  for (const KeyCond& kid : k.kids) n += cond_bytes(kid);
  return n;
}

// EXPLAIN's FORMAT option: text (the default) or another.
Route::Explain explain_format(const PgQuery__ExplainStmt* e) {
  for (std::size_t i = 0; i < e->n_options; ++i) {
    const PgQuery__Node* o = e->options[i];
    if (!is(o, PG_QUERY__NODE__NODE_DEF_ELEM) || sv(o->def_elem->defname) != "format") continue;
    const std::string f = lower(str_of(o->def_elem->arg));
    return f.empty() || f == "text" ? Route::Explain::text : Route::Explain::other_format;
  }
  return Route::Explain::text;
}

// A rough footprint, for bounding the plan cache in bytes.
std::size_t plan_bytes(const Plan& p) {
  std::size_t n = sizeof(Plan) + p.packed_tree.size() + p.split_text.size() + p.fixed.message.size();
  for (const Occurrence& o : p.occs) n += sizeof(o) + o.table.size() + o.key_column.size();
  for (const KeyCond& k : p.conds) n += cond_bytes(k);
  n += p.edges.size() * sizeof(KeyEdge);
  for (const InsertRows& r : p.inserts)
    for (const auto& row : r.rows) n += sizeof(row) + row.size() * sizeof(std::optional<ValueSource>);
  for (const std::string& t : p.ddl_tables) n += sizeof(t) + t.size();
  if (p.key_assignment) n += p.key_assignment->guarded_sql.size() + p.key_assignment->value.text.size();
  return n;
}

// `SELECT [pg_catalog.]set_config('name', 'value', false | true)` (pg_dump's and many
// drivers' way to set a parameter): a SET or SET LOCAL of `name`, carried as SET is
// (SPEC §14), so that the session's next statements see it on any backend.
SessionCommandInfo set_config_call(const PgQuery__Node* stmt) {
  if (!is(stmt, PG_QUERY__NODE__NODE_SELECT_STMT)) return {};
  const auto* sel = stmt->select_stmt;
  if (sel->n_target_list != 1 || sel->n_from_clause != 0 || sel->where_clause != nullptr || sel->larg != nullptr ||
      !is(sel->target_list[0], PG_QUERY__NODE__NODE_RES_TARGET))
    return {};
  const PgQuery__Node* v = sel->target_list[0]->res_target->val;
  if (!is(v, PG_QUERY__NODE__NODE_FUNC_CALL) || v->func_call->n_args != 3 ||
      last_name(v->func_call->funcname, v->func_call->n_funcname) != "set_config")
    return {};
  auto text = [](const PgQuery__Node* a) -> std::optional<std::string_view> {
    if (!is(a, PG_QUERY__NODE__NODE_A_CONST) || a->a_const->val_case != PG_QUERY__A__CONST__VAL_SVAL) return std::nullopt;
    return sv(a->a_const->sval->sval);
  };
  const PgQuery__Node* local = v->func_call->args[2];
  auto name = text(v->func_call->args[0]);
  if (!name || !text(v->func_call->args[1]) || !is(local, PG_QUERY__NODE__NODE_A_CONST) ||
      local->a_const->val_case != PG_QUERY__A__CONST__VAL_BOOLVAL)
    return {};
  std::string lower(*name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {local->a_const->boolval->boolval ? SessionCommand::set_local : SessionCommand::set, std::move(lower)};
}

// The SET/RESET/DISCARD/DEALLOCATE/LISTEN statements (and set_config calls) of a text that
// holds some.
std::shared_ptr<const std::vector<SessionCommandInfo>> find_session_commands(std::string_view sql,
                                                                             bool standard_strings,
                                                                             const PgQuery__ParseResult& tree) {
  auto out = std::make_shared<std::vector<SessionCommandInfo>>();
  std::size_t i = 0;
  for (std::string_view stmt : split_statements(sql, standard_strings)) {
    SessionCommandInfo cmd = classify_session_command(stmt);
    if (cmd.kind == SessionCommand::none && i < tree.n_stmts) cmd = set_config_call(tree.stmts[i]->stmt);
    cmd.text = stmt;
    cmd.statement = i++;
    if (cmd.kind != SessionCommand::none) out->push_back(std::move(cmd));
  }
  return out;
}

}  // namespace

std::shared_ptr<Plan> analyze(std::string_view sql, std::span<const std::int32_t> param_types, const Topology& topo,
                              bool standard_strings) {
  auto plan = std::make_shared<Plan>();
  plan->param_types.assign(param_types.begin(), param_types.end());
  plan->hints = scan_hints(sql);
  ParseTree tree = ParseTree::parse(sql, standard_strings);
  if (!tree.ok()) {
    // PostgreSQL's own message and position (SPEC §6).
    Route& r = plan->fixed;
    r.kind = RouteKind::error;
    r.cls = StatementClass::utility;
    r.sqlstate = tree.error().sqlstate;
    r.message = tree.error().message;
    r.position = tree.error().position;
    r.syntax_error = true;
    plan->cacheable = false;
    plan->shard_override = false;
    return plan;
  }
  Analyzer analyzer(topo, *plan);
  const std::size_t n = tree.tree()->n_stmts;
  plan->several_statements = n > 1;
  bool session_commands = false;
  for (std::size_t i = 0; i < n; ++i) {
    const PgQuery__Node* stmt = tree.tree()->stmts[i]->stmt;
    if (stmt == nullptr) continue;
    switch (stmt->node_case) {
      case PG_QUERY__NODE__NODE_VARIABLE_SET_STMT:
      case PG_QUERY__NODE__NODE_DISCARD_STMT:
      case PG_QUERY__NODE__NODE_DEALLOCATE_STMT:
      case PG_QUERY__NODE__NODE_LISTEN_STMT:
      case PG_QUERY__NODE__NODE_PREPARE_STMT:
        session_commands = true;
        break;
      default:
        session_commands = session_commands || set_config_call(stmt).kind != SessionCommand::none;
        break;
    }
    if (creates_lasting_temp(stmt)) plan->pins_session = true;
    analyzer.statement(stmt, n == 1);
  }
  analyzer.guard_key_assignment(tree.packed());
  analyzer.finish(n);
  if (n == 1 && is(tree.tree()->stmts[0]->stmt, PG_QUERY__NODE__NODE_EXPLAIN_STMT))
    plan->fixed.explain = explain_format(tree.tree()->stmts[0]->stmt->explain_stmt);
  if (auto cursor = analyzer.declared_cursor()) {
    plan->fixed.cursor = Route::Cursor::declare;
    plan->fixed.names = std::move(cursor);
  }
  if (session_commands) {
    plan->session_commands = find_session_commands(sql, standard_strings, *tree.tree());
    plan->cacheable = false;  // their texts hold literals, replayed on other backends
  }
  if (n > 0 && is(tree.tree()->stmts[0]->stmt, PG_QUERY__NODE__NODE_COPY_STMT) &&
      tree.tree()->stmts[0]->stmt->copy_stmt->is_from) {
    auto from = std::make_shared<CopyFrom>();
    if (n == 1)
      from->statement = copy_statement(tree.tree()->stmts[0]->stmt->copy_stmt, &from->error);
    else
      from->error = "not a single COPY statement";
    plan->copy_from = std::move(from);
    plan->cacheable = false;  // its options are literals
  }
  bool reads_only = n > 0 && plan->fixed.cls != StatementClass::write && !plan->session_commands && !plan->pins_session;
  bool sequences = false;
  for (std::size_t i = 0; i < n && reads_only; ++i)
    reads_only = standby_can_answer(tree.tree()->stmts[i]->stmt, sequences);
  if (reads_only) plan->reads = sequences ? Route::Reads::sequences : Route::Reads::standby_safe;
  for (std::size_t i = 0; i < n && !plan->reads_catalog; ++i) plan->reads_catalog = reads_catalog(tree.tree()->stmts[i]->stmt);
  for (const InsertRows& rows : plan->inserts) {
    if (!rows.splittable || rows.rows.size() < 2) continue;
    plan->packed_tree = tree.packed();
    if (standard_strings) plan->split_text = sql;
  }
  plan->bytes = plan_bytes(*plan) + sql.size();
  return plan;
}

}  // namespace splitpoint::routing
