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
#include <map>
#include <set>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/topology.hpp"
#include "server/cluster/indexes.hpp"
#include "server/cluster/proxy.hpp"
#include "server/net/wire.hpp"
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

}  // namespace

awaitable<void> Session::route_through_index(routing::Route& route) {
  const config::Config& cfg = runtime_->config;
  const routing::Route::Lookup& l = *route.indexes.lookup;
  const config::Index& ix = cfg.indexes[l.index];
  if (!server_.indexes().ready(ix.name)) co_return;  // (built or checked again: every shard)
  std::map<std::size_t, std::string> by_shard;  // the values each entries' shard is asked for
  for (const auto& [shard, value] : l.values)
    by_shard[shard] += (by_shard[shard].empty() ? "" : ", ") + quote_literal(value);
  co_await pump_.drain();
  const routing::ColumnType key_type = routing::column_type(l.key_type);
  std::set<std::size_t> shards;
  for (const auto& [shard, values] : by_shard) {
    auto reply = co_await run_on(shard, "SELECT DISTINCT " + ident(ix.key_column) + "::text FROM splitpoint." +
                                            ident(ix.name + "_entries") + " WHERE " + ident(ix.columns.front()) +
                                            " IN (" + values + ")");
    if (reply.lost || !reply.error.empty()) co_return;  // (every shard, as without the index)
    auto keys = first_column(reply.messages);
    if (!keys) co_return;
    for (const auto& key : *keys) {
      auto p = runtime_->topology->partition_of(l.distribution, key_type, key);
      if (p.status != routing::PartitionOf::Status::ok) co_return;
      shards.insert(runtime_->topology->shard_of(l.distribution, p.partition));
    }
  }
  server_.metrics().index_event(l.index, shards.empty() ? Metrics::IndexEvent::lookup_empty
                                                         : Metrics::IndexEvent::lookup_found);
  route.kind = RouteKind::shards;
  route.shards.assign(shards.begin(), shards.end());
  // No row has the value: one shard answers (no rows, the statement's description).
  if (route.shards.empty()) route.shards = {pick_any_shard()};
}

awaitable<bool> Session::indexed_write(const proto::Frame& f, const routing::Route& route) {
  txn_.maintaining_index = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{txn_.maintaining_index};
  const bool own = !in_transaction();
  if (own) {
    if (!co_await run_unseen("BEGIN")) co_return false;
    txn_.own = true;
  }
  // COPY talks with the client while it runs: its answer goes out as it comes (an error
  // of the entries then follows its CommandComplete).
  const bool hold_answer = !route.copy_from;
  ClientStream::Quiet quiet;
  ClientStream::Capture capture;
  stream_.quiet(&quiet);
  if (hold_answer) stream_.capture(&capture);
  bool go_on = co_await handle_query(f);
  if (go_on && !closing_) co_await pump_.drain();
  stream_.capture(nullptr);
  std::string answer;  // the statement's answer but its ReadyForQuery
  bool failed = quiet.errors > 0;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view whole) {
    if (type == 'E') failed = true;
    if (type != 'Z') answer.append(whole);
  });
  std::string error;
  if (go_on && !closing_ && !failed && fe_.client_txn != 'E') {
    txn_.applying_index = true;
    error = co_await apply_index_changes();
    txn_.applying_index = false;
  }
  stream_.quiet(nullptr);
  if (!go_on || closing_) co_return false;
  if (!error.empty()) {
    answer.clear();
    proto::Writer(answer, 'E').bytes(error).finish();
    if (fe_.client_txn != 'E') co_await fail_block();
  }
  co_await stream_.write(answer);
  if (own && !co_await run_unseen(failed || !error.empty() || fe_.client_txn == 'E' ? "ROLLBACK" : "COMMIT"))
    co_return false;
  co_await send_ready();
  co_return !closing_;
}

// The extended protocol's Execute of such a write (its Bind made it a portal of the
// proxy's, bind_scatter, which answered every earlier message of the batch first). The
// statement runs with its parameters as a write of the proxy's own (MultiShardWrite)
// inside the transaction: the client's block, or outside one the batch's, which the
// client's Sync ends on every shard it reached (end_implicit_transaction: COMMIT, or
// two-phase commit) as PostgreSQL's implicit transaction of an extended batch. Then its
// entries, as in the simple protocol; the client gets the statement's answer, or the
// first error and then nothing until Sync (the batch rolls back there).
awaitable<bool> Session::indexed_execute(const routing::Route& route, const ScatterRequest& req) {
  txn_.maintaining_index = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{txn_.maintaining_index};
  if (!in_transaction()) begin_implicit_block();
  ClientStream::Capture capture;
  stream_.capture(&capture);
  bool go_on = co_await run_on_shards(route, req.sql, &req);
  stream_.capture(nullptr);
  if (!go_on || closing_) co_return false;
  bool failed = fe_.skip_until_sync;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view) { failed = failed || type == 'E'; });
  std::string error;
  if (!failed && fe_.client_txn != 'E') {
    const char status = fe_.client_txn;
    txn_.applying_index = true;
    error = co_await apply_index_changes();
    txn_.applying_index = false;
    if (closing_) co_return false;
    // (The entries' statements end with the ReadyForQuery of a block: the batch's own
    // transaction is still no block of the client's.)
    if (txn_.implicit && fe_.client_txn == 'T') fe_.client_txn = status;
  }
  if (!error.empty()) {
    capture.data.clear();
    proto::Writer(capture.data, 'E').bytes(error).finish();
    fe_.skip_until_sync = true;
    co_await fail_block();
  }
  co_await stream_.write(capture.data);
  co_return !closing_;
}

awaitable<std::string> Session::apply_index_changes() {
  const config::Config& cfg = runtime_->config;
  IndexKeeper& keeper = server_.indexes();
  std::map<std::string, std::vector<Change>> changes;  // by index
  for (std::size_t s = 0; s < pools_.size(); ++s) {
    if (!in_transaction_on(s) || !keeper.logs_on(s)) continue;
    // This transaction's changes there, each value a row of its own (n: the change, o:
    // the value's place), taken out of the log.
    auto reply = co_await run_on(
        s,
        "WITH d AS (DELETE FROM splitpoint.index_changes WHERE txid = pg_catalog.txid_current_if_assigned() "
        "RETURNING index_name, op, vals), n AS (SELECT row_number() OVER () AS n, * FROM d) "
        "SELECT n.n, n.index_name, n.op, u.v FROM n, unnest(n.vals) WITH ORDINALITY AS u(v, o) ORDER BY n.n, u.o");
    if (reply.lost) co_return error_body(sqlstate::connection_failure, "shard \"" + pools_[s]->target().shard + "\" was lost while its index changes were read");
    if (!reply.error.empty()) co_return reply.error;
    std::string last;
    for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
      auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
      if (!row || row->values.size() != 4 || !row->values[0] || !row->values[1] || !row->values[2]) return;
      const std::string n(*row->values[0]);
      auto& list = changes[std::string(*row->values[1])];
      if (n != last) list.push_back(Change{(*row->values[2])[0], {}});
      last = n;
      list.back().vals.push_back(row->values[3] ? std::optional<std::string>(*row->values[3]) : std::nullopt);
    });
  }
  for (const config::Index& ix : cfg.indexes) {
    auto it = changes.find(ix.name);
    if (it == changes.end()) continue;
    const std::string entries = "splitpoint." + ident(ix.name + "_entries");
    std::string cols;
    for (const auto& c : ix.columns) cols += ident(c) + ", ";
    cols += ident(ix.key_column);
    std::vector<std::string> statements;
    // (A NULL is in no index, as in PostgreSQL's.)
    auto indexed = [&](const Change& c) {
      return c.vals.size() == ix.columns.size() + 1 &&
             std::all_of(c.vals.begin(), c.vals.end(), [](const auto& v) { return v.has_value(); });
    };
    // What went away first (an UPDATE's old values), then each claim on its own, so a
    // unique index's refusal is PostgreSQL's error from the one shard that owns the value.
    std::string firsts, tuples;
    for (const Change& c : it->second) {
      if (!indexed(c)) continue;
      if (c.op == 'd') {
        firsts += (firsts.empty() ? "" : ", ") + quote_literal(*c.vals.front());
        tuples += (tuples.empty() ? "" : ", ") + tuple(c.vals);
      }
    }
    if (!tuples.empty()) {
      // The entry of an UPDATE committed just before on the row's shard may not be
      // committed yet on its own (two-phase commit ends shard by shard): claiming it
      // first waits for that transaction, so the DELETE then sees it.
      statements.push_back("INSERT INTO " + entries + " (" + cols + ") VALUES " + tuples + " ON CONFLICT DO NOTHING");
      statements.push_back("DELETE FROM " + entries + " WHERE " + ident(ix.columns.front()) + " IN (" + firsts +
                           ") AND (" + cols + ") IN (" + tuples + ")");
    }
    for (const Change& c : it->second) {
      if (indexed(c) && c.op == 'i') statements.push_back("INSERT INTO " + entries + " (" + cols + ") VALUES " + tuple(c.vals));
    }
    const auto index_no = static_cast<std::size_t>(&ix - cfg.indexes.data());
    for (const auto& sql : statements) {
      ClientStream::Capture capture;
      stream_.capture(&capture);
      const bool go_on = co_await run_one(sql);
      stream_.capture(nullptr);
      if (!go_on || closing_) co_return error_body(sqlstate::connection_failure, "the session ended");
      std::string error = first_error(capture.data);
      if (error.empty()) {
        server_.metrics().index_event(index_no, Metrics::IndexEvent::entry_write);
        continue;
      }
      // The index is the table's, as the client sees it: its schema and name, not the entries'.
      if (auto fields = proto::ErrorFields::decode(error)) {
        const auto dot = ix.table.find('.');
        for (auto& [code, value] : fields->fields) {
          if (code == 's') value = dot == std::string::npos ? "public" : ix.table.substr(0, dot);
          if (code == 't') value = dot == std::string::npos ? ix.table : ix.table.substr(dot + 1);
          if (code == 'P') value.clear();
        }
        std::erase_if(fields->fields, [](const auto& f) { return f.first == 'P'; });
        std::string out;
        fields->encode(out, 'E');
        error = out.substr(5);  // (the body: past the type byte and length)
      }
      co_return error;
    }
  }
  co_return std::string();
}

}  // namespace splitpoint::server
