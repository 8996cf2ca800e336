// Global secondary indexes in a session (SPEC §12, docs/indexes.md): reads through
// them, and the writes that keep them.
//
// A read of every shard that an index narrows (Route::lookup): the entries' shards are
// asked for the keys of the rows with those values, and the statement, unchanged, runs
// on the shards of those keys only (it still applies its own WHERE there, so an entry
// that is stale never returns a row that does not match).
//
// A write to a table with a global index (Route::indexes.writes): the
// statement runs as any other, then the changes the shards' trigger logged for this
// transaction (server/cluster/indexes.hpp) are applied to the index's entries through
// the proxy's own routing, in the same transaction: one shard when the entry lives
// with its row, two-phase commit otherwise. Outside a block the proxy opens one of its
// own around the two (indexed_write); in the extended protocol the batch up to its
// Sync is that transaction (indexed_execute). The client sees the statement's answer,
// or the first error: a unique index's claim failing is PostgreSQL's own 23505 from the
// entries' primary key, which is named as the index, with the table's schema and name
// in place of the entries'.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/pg_tree.hpp"
#include "routing/topology.hpp"
#include "server/cluster/indexes.hpp"
#include "server/cluster/proxy.hpp"
#include "server/net/wire.hpp"
#include "server/session/execute/global_index.hpp"

#include "server/session/session.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::RouteKind;

namespace {

// One logged change: 'i' (a row's values appeared) or 'd' (went away); the indexed
// columns' values then the key, as text (nullopt: NULL).
struct Change {
  char op = 'i';
  std::vector<std::optional<std::string>> vals;
};

std::string ident(const std::string& s) { return "\"" + s + "\""; }

std::string tuple(const std::vector<std::optional<std::string>>& vals) {
  std::string out = "(";
  for (std::size_t i = 0; i < vals.size(); ++i) out += (i ? ", " : "") + quote_literal(*vals[i]);
  return out + ")";
}

// The first ErrorResponse of `messages` (its body), or empty.
std::string first_error(std::string_view messages) {
  std::string error;
  for_each_message(messages, [&](char type, std::string_view body, std::string_view) {
    if (type == 'E' && error.empty()) error.assign(body);
  });
  return error;
}

// What the statement that wrote tells the indexes: an INSERT's ON CONFLICT, the tables a
// TRUNCATE empties. Parsed here only when its text names either.
struct WriteShape {
  enum class Action { none, nothing, update };
  Action action = Action::none;
  std::string table;                // the INSERT's, as the topology names it
  std::vector<std::string> target;  // ON CONFLICT (a, b)
  std::string constraint;           // ON CONFLICT ON CONSTRAINT name
  std::vector<std::string> truncated;
  bool cascade = false;  // TRUNCATE ... CASCADE: it empties the tables referencing those too
  std::string sql;  // the statement (DO UPDATE: made an UPDATE of the row holding a value)
};

bool mentions(std::string_view sql, std::string_view word) {
  auto it = std::search(sql.begin(), sql.end(), word.begin(), word.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return it != sql.end();
}

std::string range_name(const PgQuery__Node* n) {
  if (!routing::is(n, PG_QUERY__NODE__NODE_RANGE_VAR)) return {};
  return routing::Topology::table_name(routing::sv(n->range_var->schemaname), routing::sv(n->range_var->relname));
}

WriteShape shape_of(std::string_view sql) {
  WriteShape w;
  if (sql.empty() || (!mentions(sql, "conflict") && !mentions(sql, "truncate"))) return w;
  auto tree = routing::ParseTree::parse(sql);
  if (!tree.ok()) return w;
  w.sql = sql;
  for (std::size_t i = 0; i < tree.tree()->n_stmts; ++i) {
    const PgQuery__Node* n = tree.tree()->stmts[i]->stmt;
    // PREPARE name AS INSERT ...: what an EXECUTE of it writes (Session::apply_index_changes).
    if (routing::is(n, PG_QUERY__NODE__NODE_PREPARE_STMT)) n = n->prepare_stmt->query;
    if (routing::is(n, PG_QUERY__NODE__NODE_TRUNCATE_STMT)) {
      for (std::size_t r = 0; r < n->truncate_stmt->n_relations; ++r)
        w.truncated.push_back(range_name(n->truncate_stmt->relations[r]));
      w.cascade = w.cascade || n->truncate_stmt->behavior == PG_QUERY__DROP_BEHAVIOR__DROP_CASCADE;
      continue;
    }
    if (!routing::is(n, PG_QUERY__NODE__NODE_INSERT_STMT) || n->insert_stmt->on_conflict_clause == nullptr) continue;
    const PgQuery__OnConflictClause* oc = n->insert_stmt->on_conflict_clause;
    w.action = oc->action == PG_QUERY__ON_CONFLICT_ACTION__ONCONFLICT_UPDATE ? WriteShape::Action::update
                                                                             : WriteShape::Action::nothing;
    PgQuery__Node relation{};
    relation.node_case = PG_QUERY__NODE__NODE_RANGE_VAR;
    relation.range_var = n->insert_stmt->relation;
    w.table = range_name(&relation);
    if (oc->infer == nullptr) continue;
    w.constraint = routing::sv(oc->infer->conname);
    for (std::size_t e = 0; e < oc->infer->n_index_elems; ++e)
      if (routing::is(oc->infer->index_elems[e], PG_QUERY__NODE__NODE_INDEX_ELEM))
        w.target.emplace_back(routing::sv(oc->infer->index_elems[e]->index_elem->name));
  }
  return w;
}

// The text whose shape a write has: an EXECUTE's, the PREPARE it runs (its ON CONFLICT).
std::string_view written_text(const Frontend& fe, const routing::Route& route, std::string_view sql) {
  if (route.sql_prepared != routing::Route::SqlPrepared::execute || !route.names) return sql;
  auto it = fe.sql_prepared.find(route.names->prepared_name);
  return it == fe.sql_prepared.end() ? sql : std::string_view(it->second.text);
}

// The ON CONFLICT's arbiter is this index (as PostgreSQL infers it: the constraint
// named, the same set of columns, or, without a target, any unique index).
bool judges(const WriteShape& w, const config::Index& ix) {
  if (!ix.unique || w.action == WriteShape::Action::none || w.table != ix.table) return false;
  if (!w.constraint.empty()) return w.constraint == ix.name;
  if (w.target.empty()) return true;
  std::set<std::string> target(w.target.begin(), w.target.end()), columns(ix.columns.begin(), ix.columns.end());
  return target == columns;
}

std::string qualified(const std::string& table) {
  const auto dot = table.find('.');
  return dot == std::string::npos ? ident(table) : ident(table.substr(0, dot)) + "." + ident(table.substr(dot + 1));
}

bool has_param(PgQuery__Node* const* nodes, std::size_t n) {
  bool found = false;
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i] != nullptr)
      routing::walk_nodes(&nodes[i]->base, [&](const PgQuery__Node* node) {
        found = found || routing::is(node, PG_QUERY__NODE__NODE_PARAM_REF);
        return !found;
      });
  return found;
}

// Each column named alone in `nodes` (not inside a subquery), `*` too, named as a
// column of `relation`: in the UPDATE the INSERT's DO UPDATE becomes, EXCLUDED is a
// relation of the FROM, and a bare name would be ambiguous. (The new nodes are the
// INSERT's tree's, freed with it: protobuf-c's allocator is malloc's.)
void qualify_columns(PgQuery__Node** nodes, std::size_t n, const std::string& relation) {
  std::function<bool(PgQuery__Node*&)> qualify = [&](PgQuery__Node*& slot) {
    if (routing::is(slot, PG_QUERY__NODE__NODE_SUB_LINK)) return false;
    if (!routing::is(slot, PG_QUERY__NODE__NODE_COLUMN_REF) || slot->column_ref->n_fields != 1) return true;
    PgQuery__ColumnRef* ref = slot->column_ref;
    auto* name = static_cast<PgQuery__String*>(std::malloc(sizeof(PgQuery__String)));
    pg_query__string__init(name);
    name->sval = strdup(relation.c_str());
    auto* node = static_cast<PgQuery__Node*>(std::malloc(sizeof(PgQuery__Node)));
    pg_query__node__init(node);
    node->node_case = PG_QUERY__NODE__NODE_STRING;
    node->string = name;
    auto** fields = static_cast<PgQuery__Node**>(std::malloc(2 * sizeof(PgQuery__Node*)));
    fields[0] = node;
    fields[1] = ref->fields[0];
    std::free(ref->fields);
    ref->fields = fields;
    ref->n_fields = 2;
    return false;
  };
  for (std::size_t i = 0; i < n; ++i)
    if (nodes[i] != nullptr && qualify(nodes[i])) routing::for_each_node_slot(&nodes[i]->base, qualify);
}

// The UPDATE that the DO UPDATE of `sql` is for the row of `table` with the values
// `equal` (column, value: its key and the indexed columns): its SET, its WHERE and the
// INSERT's RETURNING, EXCLUDED the proposed row (`row`, as to_jsonb gave it). nullopt
// where it cannot be written (a parameter in them: the extended protocol's values are
// not at hand there).
std::optional<std::string> do_update_as_update(const std::string& sql, const std::string& table,
                                               const std::vector<std::pair<std::string, std::string>>& equal,
                                               const std::string& row) {
  auto tree = routing::ParseTree::parse(sql);
  if (!tree.ok()) return std::nullopt;
  const PgQuery__InsertStmt* ins = nullptr;
  for (std::size_t i = 0; i < tree.tree()->n_stmts; ++i)
    if (routing::is(tree.tree()->stmts[i]->stmt, PG_QUERY__NODE__NODE_INSERT_STMT))
      ins = tree.tree()->stmts[i]->stmt->insert_stmt;
  if (ins == nullptr || ins->on_conflict_clause == nullptr) return std::nullopt;
  PgQuery__OnConflictClause* oc = ins->on_conflict_clause;
  PgQuery__Node* where = oc->where_clause;
  if (has_param(oc->target_list, oc->n_target_list) || has_param(&where, 1) ||
      has_param(ins->returning_list, ins->n_returning_list))
    return std::nullopt;
  const std::string alias = ins->relation->alias ? std::string(routing::sv(ins->relation->alias->aliasname)) : "";
  const std::string name = alias.empty() ? qualified(table) : ident(alias);
  const std::string bare = alias.empty() ? std::string(routing::sv(ins->relation->relname)) : alias;
  qualify_columns(oc->target_list, oc->n_target_list, bare);
  qualify_columns(&where, 1, bare);
  qualify_columns(ins->returning_list, ins->n_returning_list, bare);
  auto update = routing::ParseTree::parse(
      "UPDATE " + qualified(table) + (alias.empty() ? "" : " AS " + ident(alias)) +
      " SET splitpoint_set = 1 FROM pg_catalog.jsonb_populate_record(NULL::" + qualified(table) + ", " +
      quote_literal(row) + "::jsonb) AS excluded WHERE " + std::accumulate(equal.begin(), equal.end(), std::string(),
                                                                             [&](std::string out, const auto& e) {
                                                                               return out + name + "." + ident(e.first) +
                                                                                      " = " + quote_literal(e.second) +
                                                                                      " AND ";
                                                                             }) +
      "true");
  if (!update.ok() || update.tree()->n_stmts != 1) return std::nullopt;
  PgQuery__UpdateStmt* u = update.tree()->stmts[0]->stmt->update_stmt;
  PgQuery__BoolExpr* both = u->where_clause->bool_expr;
  // The INSERT's clauses lent to the UPDATE's tree while it is written out.
  const auto targets = std::make_pair(u->n_target_list, u->target_list);
  PgQuery__Node* const placeholder = both->args[both->n_args - 1];
  u->n_target_list = oc->n_target_list;
  u->target_list = oc->target_list;
  if (where != nullptr) both->args[both->n_args - 1] = where;
  u->n_returning_list = ins->n_returning_list;
  u->returning_list = ins->returning_list;
  auto text = routing::deparse(update.tree());
  std::tie(u->n_target_list, u->target_list) = targets;
  both->args[both->n_args - 1] = placeholder;
  u->n_returning_list = 0;
  u->returning_list = nullptr;
  return text;
}

}  // namespace

// The changes taken out of the log, by index; what an ON CONFLICT took back or updated.
struct IndexWrite {
  WriteShape shape;
  std::map<std::string, std::vector<Change>> changes;  // by index name
  // The rows taken back, (index, values): their trigger's 'd' is no entry of theirs.
  std::multiset<std::pair<std::string, std::vector<std::optional<std::string>>>> taken_back;
  std::size_t skipped = 0;  // rows taken back
  std::size_t updated = 0;  // rows a DO UPDATE updated in their place
  std::string rows;         // those updates' RETURNING rows
  std::set<std::string> inserted;  // keys of the rows the statement inserted
};

namespace {

// The statement's answer once some rows it inserted were taken back (ON CONFLICT judged
// by a global index) and others updated in their place: its tag counts the rows left and
// updated, and its RETURNING rows are the updates' when no inserted row is left (which
// rows of several were taken back the proxy cannot tell: refused, 0A000, the error
// returned).
std::string adjusted_answer(std::string& answer, const IndexWrite& w) {
  if (w.skipped == 0) return {};
  std::string out;
  bool rows = false;
  std::size_t left = 0;
  for_each_message(answer, [&](char type, std::string_view body, std::string_view) {
    if (type == 'D') rows = true;
    if (type != 'C' || !body.starts_with("INSERT ")) return;
    const std::string tag(body.substr(0, body.find('\0')));
    const std::size_t n = std::strtoull(tag.c_str() + tag.rfind(' ') + 1, nullptr, 10);
    left = n > w.skipped ? n - w.skipped : 0;
  });
  if (rows && left > 0)
    return error_body(sqlstate::feature_not_supported,
                      "INSERT ... ON CONFLICT ... RETURNING of several rows, some of whose values other shards hold, "
                      "is not supported");
  bool rows_out = false;
  for_each_message(answer, [&](char type, std::string_view body, std::string_view whole) {
    if (type == 'D') {
      if (!rows_out) out += w.rows;
      rows_out = true;
      return;
    }
    if (type != 'C' || !body.starts_with("INSERT ")) {
      out.append(whole);
      return;
    }
    if (!rows_out && rows) out += w.rows;
    rows_out = true;
    const std::string tag(body.substr(0, body.find('\0')));
    proto::Writer(out, 'C').cstr(tag.substr(0, tag.rfind(' ') + 1) + std::to_string(left + w.updated)).finish();
  });
  answer = std::move(out);
  return {};
}

}  // namespace

awaitable<void> IndexMaintenance::route_through_index(routing::Route& route) {
  const config::Config& cfg = s_.runtime_->config;
  const routing::Route::Lookup& l = *route.indexes.lookup;
  const config::Index& ix = cfg.indexes[l.index];
  if (!s_.server_.indexes().ready(ix.name)) co_return;  // (built or checked again: every shard)
  std::map<std::size_t, std::string> by_shard;  // the values each entries' shard is asked for
  for (const auto& [shard, value] : l.values)
    by_shard[shard] += (by_shard[shard].empty() ? "" : ", ") + quote_literal(value);
  co_await s_.pump_.drain();
  const routing::ColumnType key_type = routing::column_type(l.key_type);
  std::set<std::size_t> shards;
  for (const auto& [shard, values] : by_shard) {
    auto reply = co_await s_.run_on(shard, "SELECT DISTINCT " + ident(ix.key_column) + "::text FROM splitpoint." +
                                            ident(ix.name + "_entries") + " WHERE " + ident(ix.columns.front()) +
                                            " IN (" + values + ")");
    if (reply.lost || !reply.error.empty()) co_return;  // (every shard, as without the index)
    auto keys = first_column(reply.messages);
    if (!keys) co_return;
    for (const auto& key : *keys) {
      auto p = s_.runtime_->topology->partition_of(l.distribution, key_type, key);
      if (p.status != routing::PartitionOf::Status::ok) co_return;
      shards.insert(s_.runtime_->topology->shard_of(l.distribution, p.partition));
    }
  }
  s_.server_.metrics().index_event(l.index, shards.empty() ? Metrics::IndexEvent::lookup_empty
                                                         : Metrics::IndexEvent::lookup_found);
  route.kind = RouteKind::shards;
  route.shards.assign(shards.begin(), shards.end());
  // No row has the value: one shard answers (no rows, the statement's description).
  if (route.shards.empty()) route.shards = {s_.hosts_.pick_any_shard()};
}

awaitable<bool> IndexMaintenance::indexed_write(const proto::Frame& f, const routing::Route& route) {
  maintaining_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{maintaining_};
  const bool own = !s_.in_transaction();
  if (own) {
    if (!co_await s_.run_unseen("BEGIN")) co_return false;
    s_.txn_.own = true;
  }
  // The statement's text, kept: `f` points into the client's input buffer, which a COPY
  // reading its data may reallocate.
  const auto query = proto::Query::decode(f.body);
  const std::string sql = query ? std::string(query->sql) : std::string();
  // COPY talks with the client while it runs: its answer goes out as it comes (an error
  // of the entries then follows its CommandComplete).
  const bool hold_answer = !route.copy_from;
  ClientStream::Quiet quiet;
  ClientStream::Capture capture;
  s_.stream_.quiet(&quiet);
  if (hold_answer) s_.stream_.capture(&capture);
  bool go_on = co_await s_.handle_query(f);
  if (go_on && !s_.closing_) co_await s_.pump_.drain();
  s_.stream_.capture(nullptr);
  std::string answer;  // the statement's answer but its ReadyForQuery
  bool failed = quiet.errors > 0;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view whole) {
    if (type == 'E') failed = true;
    if (type != 'Z') answer.append(whole);
  });
  std::string error;
  if (go_on && !s_.closing_ && !failed && s_.fe_.client_txn != 'E') {
    applying_ = true;
    error = co_await apply_index_changes(written_text(s_.fe_, route, sql), &answer);
    applying_ = false;
  }
  s_.stream_.quiet(nullptr);
  if (!go_on || s_.closing_) co_return false;
  if (!error.empty()) {
    answer.clear();
    proto::Writer(answer, 'E').bytes(error).finish();
    if (s_.fe_.client_txn != 'E') co_await s_.fail_block();
  }
  co_await s_.stream_.write(answer);
  if (own && !co_await s_.run_unseen(failed || !error.empty() || s_.fe_.client_txn == 'E' ? "ROLLBACK" : "COMMIT"))
    co_return false;
  co_await s_.send_ready();
  co_return !s_.closing_;
}

// The extended protocol's Execute of such a write (its Bind made it a portal of the
// proxy's, bind_scatter, which answered every earlier message of the batch first). The
// statement runs with its parameters as a write of the proxy's own (MultiShardWrite)
// inside the transaction: the client's block, or outside one the batch's, which the
// client's Sync ends on every shard it reached (end_implicit_transaction: COMMIT, or
// two-phase commit) as PostgreSQL's implicit transaction of an extended batch. Then its
// entries, as in the simple protocol; the client gets the statement's answer, or the
// first error and then nothing until Sync (the batch rolls back there).
awaitable<bool> IndexMaintenance::indexed_execute(const routing::Route& route, const ScatterRequest& req) {
  maintaining_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{maintaining_};
  if (!s_.in_transaction()) s_.begin_implicit_block();
  ClientStream::Capture capture;
  s_.stream_.capture(&capture);
  bool go_on = co_await s_.run_on_shards(route, req.sql, &req);
  s_.stream_.capture(nullptr);
  if (!go_on || s_.closing_) co_return false;
  bool failed = s_.fe_.skip_until_sync;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view) { failed = failed || type == 'E'; });
  std::string error;
  if (!failed && s_.fe_.client_txn != 'E') {
    const char status = s_.fe_.client_txn;
    applying_ = true;
    error = co_await apply_index_changes(written_text(s_.fe_, route, req.sql), &capture.data);
    applying_ = false;
    if (s_.closing_) co_return false;
    // (The entries' statements end with the ReadyForQuery of a block: the batch's own
    // transaction is still no block of the client's.)
    if (s_.txn_.implicit && s_.fe_.client_txn == 'T') s_.fe_.client_txn = status;
  }
  if (!error.empty()) {
    capture.data.clear();
    proto::Writer(capture.data, 'E').bytes(error).finish();
    s_.fe_.skip_until_sync = true;
    co_await s_.fail_block();
  }
  co_await s_.stream_.write(capture.data);
  co_return !s_.closing_;
}

awaitable<std::string> IndexMaintenance::apply_index_changes(std::string_view sql, std::string* answer) {
  IndexWrite w;
  w.shape = shape_of(sql);
  std::string error = co_await read_index_changes(w);
  const config::Config& cfg = s_.runtime_->config;
  for (std::size_t i = 0; error.empty() && i < cfg.indexes.size(); ++i) error = co_await write_index_entries(w, i);
  // A TRUNCATE of an indexed table empties its entries in the same transaction; with
  // CASCADE, so does one of a table it emptied (no rows left on any shard).
  for (std::size_t i = 0; error.empty() && i < cfg.indexes.size(); ++i) {
    const auto& truncated = w.shape.truncated;
    bool emptied = std::find(truncated.begin(), truncated.end(), cfg.indexes[i].table) != truncated.end();
    for (std::size_t s = 0; !emptied && w.shape.cascade && s < s_.pools_.size(); ++s) {
      if (!s_.in_transaction_on(s)) break;
      auto reply = co_await s_.run_on(s, "SELECT 1 FROM " + qualified(cfg.indexes[i].table) + " LIMIT 1");
      if (!reply.error.empty() || reply.lost || reply.tag != "SELECT 0") break;
      emptied = s + 1 == s_.pools_.size();
    }
    if (emptied)
      error = co_await run_index_statement("DELETE FROM splitpoint." + ident(cfg.indexes[i].name + "_entries"), i, nullptr);
  }
  if (error.empty() && w.skipped > 0) {
    // The rows taken back logged their going: the other indexes' entries of them go too.
    w.shape = WriteShape{};
    error = co_await read_index_changes(w);
    for (std::size_t i = 0; error.empty() && i < cfg.indexes.size(); ++i) error = co_await write_index_entries(w, i);
  }
  if (error.empty() && answer) error = adjusted_answer(*answer, w);
  co_return error;
}

// This transaction's changes on every shard it is in, each value a row of its own (n:
// the change, o: the value's place), taken out of the log.
awaitable<std::string> IndexMaintenance::read_index_changes(IndexWrite& w) {
  IndexKeeper& keeper = s_.server_.indexes();
  w.changes.clear();
  for (std::size_t s = 0; s < s_.pools_.size(); ++s) {
    if (!s_.in_transaction_on(s) || !keeper.logs_on(s)) continue;
    auto reply = co_await s_.run_on(
        s,
        "WITH d AS (DELETE FROM splitpoint.index_changes WHERE txid = pg_catalog.txid_current_if_assigned() "
        "RETURNING index_name, op, vals), n AS (SELECT row_number() OVER () AS n, * FROM d) "
        "SELECT n.n, n.index_name, n.op, u.v FROM n, unnest(n.vals) WITH ORDINALITY AS u(v, o) ORDER BY n.n, u.o");
    if (reply.lost) co_return error_body(sqlstate::connection_failure, "shard \"" + s_.pools_[s]->target().shard + "\" was lost while its index changes were read");
    if (!reply.error.empty()) co_return reply.error;
    std::string last;
    for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
      auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
      if (!row || row->values.size() != 4 || !row->values[0] || !row->values[1] || !row->values[2]) return;
      const std::string n(*row->values[0]);
      auto& list = w.changes[std::string(*row->values[1])];
      if (n != last) list.push_back(Change{(*row->values[2])[0], {}});
      last = n;
      list.back().vals.push_back(row->values[3] ? std::optional<std::string>(*row->values[3]) : std::nullopt);
    });
  }
  for (auto& [index, list] : w.changes)
    std::erase_if(list, [&, &index = index](const Change& c) {
      if (c.op != 'd') return false;
      auto it = w.taken_back.find({index, c.vals});
      if (it == w.taken_back.end()) return false;
      w.taken_back.erase(it);
      return true;
    });
  co_return std::string();
}

// One index's changes applied to its entries: what went away first (an UPDATE's old
// values), then each claim on its own, so a unique index's refusal is PostgreSQL's
// error from the one shard that owns the value. Where the statement's ON CONFLICT is
// judged by this index, a claim refused takes back the row it was for (resolve_conflict):
// its value is held by another row, committed, or of a transaction the claim waited for.
// DO NOTHING: as PostgreSQL would have done nothing; DO UPDATE: that row is updated.
awaitable<std::string> IndexMaintenance::write_index_entries(IndexWrite& w, std::size_t index) {
  const config::Index& ix = s_.runtime_->config.indexes[index];
  auto it = w.changes.find(ix.name);
  if (it == w.changes.end()) co_return std::string();
  const std::string entries = "splitpoint." + ident(ix.name + "_entries");
  std::string cols;
  for (const auto& c : ix.columns) cols += ident(c) + ", ";
  cols += ident(ix.key_column);
  // (A NULL is in no index, as in PostgreSQL's.)
  auto indexed = [&](const Change& c) {
    return c.vals.size() == ix.columns.size() + 1 &&
           std::all_of(c.vals.begin(), c.vals.end(), [](const auto& v) { return v.has_value(); });
  };
  std::string firsts, tuples;
  std::set<std::string> updated;  // keys whose old values went away: an 'i' of them is an UPDATE's
  for (const Change& c : it->second) {
    if (c.op == 'd' && !c.vals.empty() && c.vals.back()) updated.insert(*c.vals.back());
    if (!indexed(c) || c.op != 'd') continue;
    firsts += (firsts.empty() ? "" : ", ") + quote_literal(*c.vals.front());
    tuples += (tuples.empty() ? "" : ", ") + tuple(c.vals);
  }
  if (!tuples.empty()) {
    // The entry of an UPDATE committed just before on the row's shard may not be
    // committed yet on its own (two-phase commit ends shard by shard): claiming it
    // first waits for that transaction, so the DELETE then sees it.
    for (const std::string& sql : {"INSERT INTO " + entries + " (" + cols + ") VALUES " + tuples + " ON CONFLICT DO NOTHING",
                                   "DELETE FROM " + entries + " WHERE " + ident(ix.columns.front()) + " IN (" + firsts +
                                       ") AND (" + cols + ") IN (" + tuples + ")"})
      if (auto error = co_await run_index_statement(sql, index, nullptr); !error.empty()) co_return error;
  }
  const bool judged = judges(w.shape, ix);
  for (const Change& c : it->second) {
    if (!indexed(c) || c.op != 'i') continue;
    const bool inserted = !updated.count(*c.vals.back());
    if (!judged || !inserted) {
      if (auto error = co_await run_index_statement("INSERT INTO " + entries + " (" + cols + ") VALUES " + tuple(c.vals), index, nullptr);
          !error.empty())
        co_return error;
      continue;
    }
    w.inserted.insert(*c.vals.back());
    std::string claimed;
    const std::string claim = "INSERT INTO " + entries + " (" + cols + ") VALUES " + tuple(c.vals) + " ON CONFLICT DO NOTHING RETURNING 1";
    if (auto error = co_await run_index_statement(claim, index, &claimed); !error.empty()) co_return error;
    if (first_column(claimed).value_or(std::vector<std::string>{}).empty())
      if (auto error = co_await resolve_conflict(w, index, c.vals); !error.empty()) co_return error;
  }
  co_return std::string();
}

awaitable<std::string> IndexMaintenance::resolve_conflict(IndexWrite& w, std::size_t index,
                                                 const std::vector<std::optional<std::string>>& vals) {
  const config::Index& ix = s_.runtime_->config.indexes[index];
  std::string match;  // the value's columns
  for (std::size_t k = 0; k < ix.columns.size(); ++k)
    match += (k ? " AND " : "") + ident(ix.columns[k]) + " = " + quote_literal(*vals[k]);
  const std::string where = ident(ix.key_column) + " = " + quote_literal(*vals.back()) + " AND " + match;
  const std::string table = qualified(ix.table);
  if (w.shape.action != WriteShape::Action::update) {
    if (auto error = co_await run_index_statement("DELETE FROM " + table + " WHERE " + where, index, nullptr); !error.empty())
      co_return error;
  } else {
    std::string got;  // the key of the row holding the value, then the proposed row
    if (auto e = co_await run_index_statement("SELECT " + ident(ix.key_column) + "::text FROM splitpoint." +
                                                  ident(ix.name + "_entries") + " WHERE " + match,
                                              index, &got);
        !e.empty())
      co_return e;
    const auto holder = first_column(got).value_or(std::vector<std::string>{});
    if (holder.size() == 1 && w.inserted.count(holder.front()))
      co_return error_body("21000", "ON CONFLICT DO UPDATE command cannot affect row a second time");
    // Its row may not be visible yet: its transaction committed the entry and is still
    // committing the row on the row's own shard (two-phase commit ends shard by shard),
    // which it will. (Never, in a snapshot older than that commit: 40001, as PostgreSQL.)
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (int tries = 0; holder.size() == 1; ++tries) {
      if (auto e = co_await run_index_statement("SELECT 1 FROM " + table + " WHERE " + ident(ix.key_column) + " = " +
                                                    quote_literal(holder.front()) + " AND " + match,
                                                index, &got);
          !e.empty())
        co_return e;
      if (!first_column(got).value_or(std::vector<std::string>{}).empty()) break;
      if (tries == 1000)
        co_return error_body("40001", "could not serialize access due to concurrent update");
      timer.expires_after(std::chrono::milliseconds(5));
      co_await timer.async_wait(use_nothrow);
    }
    if (auto e = co_await run_index_statement("DELETE FROM " + table + " AS splitpoint_row WHERE " + where +
                                                  " RETURNING pg_catalog.to_jsonb(splitpoint_row.*)::text",
                                              index, &got);
        !e.empty())
      co_return e;
    const auto row = first_column(got).value_or(std::vector<std::string>{});
    std::optional<std::string> update;
    if (holder.size() == 1 && row.size() == 1) {
      std::vector<std::pair<std::string, std::string>> equal{{ix.key_column, holder.front()}};
      for (std::size_t k = 0; k < ix.columns.size(); ++k) equal.emplace_back(ix.columns[k], *vals[k]);
      update = do_update_as_update(w.shape.sql, ix.table, equal, row.front());
    }
    if (!update)
      co_return error_body(sqlstate::feature_not_supported,
                           "INSERT ... ON CONFLICT DO UPDATE whose conflict is in the global index \"" + ix.name +
                               "\" with a row on another shard, with parameters in its SET, WHERE or RETURNING, is "
                               "not supported");
    if (auto e = co_await run_index_statement(*update, index, &got); !e.empty()) co_return e;
    for_each_message(got, [&](char type, std::string_view body, std::string_view whole) {
      if (type == 'D') w.rows.append(whole);
      if (type == 'C' && body.starts_with("UPDATE ")) w.updated += std::strtoull(body.data() + 7, nullptr, 10);
    });
  }
  w.taken_back.insert({ix.name, vals});
  ++w.skipped;
  co_return std::string();
}

// One statement of the index's upkeep through the proxy's routing; its error with the
// table's schema and name in place of the entries' (the index is the table's, as the
// client sees it), or empty. `returned`: it returned a row.
awaitable<std::string> IndexMaintenance::run_index_statement(const std::string& sql, std::size_t index, std::string* answer) {
  const config::Index& ix = s_.runtime_->config.indexes[index];
  ClientStream::Capture capture;
  s_.stream_.capture(&capture);
  const bool go_on = co_await s_.run_one(sql);
  s_.stream_.capture(nullptr);
  if (!go_on || s_.closing_) co_return error_body(sqlstate::connection_failure, "the session ended");
  std::string error = first_error(capture.data);
  if (error.empty()) {
    s_.server_.metrics().index_event(index, Metrics::IndexEvent::entry_write);
    if (answer) *answer = std::move(capture.data);
    co_return error;
  }
  if (auto fields = proto::ErrorFields::decode(error)) {
    const auto dot = ix.table.find('.');
    for (auto& [code, value] : fields->fields) {
      if (code == 's') value = dot == std::string::npos ? "public" : ix.table.substr(0, dot);
      if (code == 't') value = dot == std::string::npos ? ix.table : ix.table.substr(dot + 1);
    }
    std::erase_if(fields->fields, [](const auto& f) { return f.first == 'P'; });
    std::string out;
    fields->encode(out, 'E');
    error = out.substr(5);  // (the body: past the type byte and length)
  }
  co_return error;
}

}  // namespace splitpoint::server
