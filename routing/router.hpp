// Statement routing (SPEC §3): finds each statement's shard key with PostgreSQL's own
// parser (libpg_query) and maps key -> logical partition -> shard. Pure and
// synchronous: no I/O; what it needs from the shards' catalogs it asks for through
// `ShapeLookup` and, when missing, says so (RouteKind::need_shapes) so the caller can
// fetch it and ask again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.hpp"
#include "routing/copy.hpp"
#include "routing/session_command.hpp"

namespace splitpoint::routing {

// A sharded table as the shards' catalog describes it.
struct TableShape {
  std::vector<std::string> columns;  // attnum order, dropped columns excluded
  std::vector<std::string> types;    // format_type(): "bigint", "text", "character varying(20)", "uuid", ...
  std::string table;                 // the name it was looked up by
  // Columns whose default draws from a sequence (serial, identity, DEFAULT nextval(...)):
  // the proxy fills them in INSERTs from one shard's sequence (SPEC §3).
  std::vector<std::string> sequence_columns;
};
// Returns the shape of a table (unqualified, lower-case name), or nullptr if not known yet.
using ShapeLookup = std::function<const TableShape*(std::string_view table)>;

enum class RouteKind {
  shards,       // run on `shards`; one shard = forward unchanged; several = scatter/broadcast
  any_shard,    // reference-table read, catalog query, SELECT without tables: any one shard
  all_shards,   // DDL, reference-table writes, keyless UPDATE/DELETE: every shard
  local,        // answered by the proxy itself (see `local`)
  error,        // refuse with sqlstate/message (and position for syntax errors)
  need_shapes,  // learn `missing_tables` from a shard's catalog, then route again
};

enum class StatementClass { read, write, ddl, transaction, utility };

// prepare: PREPARE TRANSACTION; finish_prepared: COMMIT PREPARED / ROLLBACK PREPARED
// (Route::gid says which transaction).
enum class TxnCommand {
  none, begin, commit, rollback, savepoint, release_savepoint, rollback_to_savepoint, prepare, finish_prepared
};

// SET/RESET/SHOW of splitpoint.<name> (SPEC §1), never sent to a shard.
struct LocalCommand {
  enum class Kind { set, set_local, reset, show } kind = Kind::show;
  std::string name;   // after "splitpoint.", lower-case; "all" for SHOW ALL / RESET ALL
  std::string value;  // for set
};

// One logical partition a statement touches, for per-partition metrics.
struct PartitionHit {
  std::size_t distribution = 0;
  std::uint32_t partition = 0;
  std::uint32_t rows = 0;  // INSERT ... VALUES: rows of the statement that go to this partition
};

// An INSERT ... VALUES into a sharded table without its key — the column left out of
// the column list, or DEFAULT in its place — or without a value of another column whose
// default draws from a sequence (TableShape::sequence_columns): the rows whose value of
// `column` the proxy generates from the column's own default (SPEC §3). Carried by the
// SPR01 error route; the server fills the values in (insert_with_keys) and routes the
// statement again.
struct KeyRequest {
  std::string table;    // as the distribution lists it
  std::string column;
  bool column_omitted = false;  // the column list lacks it: appended, a key for every row
  std::size_t position = 0;     // else: the key's position in the rows
  std::vector<std::size_t> rows;  // the rows that get a key
  // The rows' items are nextval('<sequence>'), written in the statement: drawn from that
  // sequence (else from the column's default).
  std::string sequence;
};

struct Route {
  RouteKind kind = RouteKind::any_shard;
  StatementClass cls = StatementClass::read;
  bool reference_write = false;  // a write to a reference table: every shard applies the same rows
  TxnCommand txn = TxnCommand::none;
  struct TxnOptions {
    bool chain = false;  // COMMIT AND CHAIN / ROLLBACK AND CHAIN
    bool start = false;  // START TRANSACTION, not BEGIN (the CommandComplete tag)
  };
  TxnOptions txn_options;
  std::vector<std::size_t> shards;          // sorted, unique; set for kind == shards
  std::vector<PartitionHit> partitions;     // partitions the key(s) mapped to
  std::vector<std::string> key_values;      // key values seen (text form), for hot-key stats
  std::optional<std::size_t> distribution;  // the distribution the statement's tables belong to
  // INSERT ... VALUES whose rows live on several shards: one statement per shard
  // (already rewritten; parameters keep their numbers). Empty otherwise.
  std::vector<std::pair<std::size_t, std::string>> per_shard_sql;
  // With per_shard_sql: the shard of each row, in the statement's order (RETURNING rows
  // are given back in that order, as PostgreSQL gives them).
  std::vector<std::size_t> row_shards;
  // UPDATE ... SET key = <value> that must not move rows: per_shard_sql holds, for each
  // target but the value's own shard (`owner`), the same UPDATE made to fail with
  // kKeyGuardMarker in its message on any row it matches there (key_guard(), kept in
  // `names`; null otherwise).
  struct KeyGuard {
    std::string table, column;
    std::size_t owner = 0;
  };
  std::optional<LocalCommand> local;        // kind == local
  std::string sqlstate;                     // kind == error
  std::string message;
  int position = 0;                         // 1-based cursor position for syntax errors, 0 = none
  std::vector<std::string> missing_tables;  // kind == need_shapes
  // Hints found in the statement text (SPEC §1): deadline=, partial=, ...
  std::vector<std::pair<std::string, std::string>> hints;
  // The text's SET/RESET, DISCARD, DEALLOCATE and LISTEN statements, in order (null when
  // it has none): session state the caller carries over to other backends
  // (routing/session_command.hpp). Found once per text: such a text's plan is not
  // shared by texts that differ only in literals.
  std::shared_ptr<const std::vector<SessionCommandInfo>> session_commands;
  // The text's first statement is COPY ... FROM: its options, for the caller that splits
  // the rows by key (null otherwise).
  std::shared_ptr<const CopyFrom> copy_from;
  // The text creates a temporary object or a WITH HOLD cursor that outlives its
  // transaction: it lives on the backend, so the session keeps that backend (as after
  // LISTEN).
  bool pins_session = false;
  // What the statement writes. standby_safe: only SELECTs a hot standby answers as the
  // primary would (no row locks, nothing that writes): what `reads: replica` may send to
  // a replica (SPEC §10). sequences: SELECTs whose only writes are sequence functions
  // (nextval, setval, currval, lastval): when any shard could answer it, it goes to the
  // one whose sequences the proxy draws keys from (SPEC §3: `scatter.combine`'s shard),
  // so that the values are unique across shards; it does not make later reads of that
  // shard wait for a standby to catch up (read-your-writes, SPEC §10).
  // catalog: an any_shard read of the system catalogs (SPEC §14), standby-safe, that the
  // session sends to one designated shard, the combine shard, so that OIDs stay valid
  // from one statement to the next, unless its transaction block already runs on
  // another (Session::single_target).
  enum class Reads : std::uint8_t { writes, standby_safe, sequences, catalog };
  Reads reads = Reads::writes;
  bool replica_safe() const { return reads == Reads::standby_safe || reads == Reads::catalog; }
  // A read of sharded tables that are not co-located (joined, or united, other than on
  // one distribution's key): only the combine step answers it, never a merge.
  bool needs_combine = false;
  // The statement does not parse: PostgreSQL's own error (with every field) comes from
  // running it on one shard, where it fails before doing anything.
  bool syntax_error = false;
  // SQL-level PREPARE name AS query / EXECUTE name (args), each alone in its text.
  enum class SqlPrepared : std::uint8_t { none, prepare, execute };
  SqlPrepared sql_prepared = SqlPrepared::none;
  // A cursor command alone in its text (names->cursor and what goes with it): the
  // proxy answers those of a cursor over several shards itself (server/session/execute/cursor.cpp).
  enum class Cursor : std::uint8_t { none, declare, fetch, close };
  Cursor cursor = Cursor::none;
  // EXPLAIN alone in its text: over several shards each shard's plan is shown (a header
  // line before each in the text format).
  enum class Explain : std::uint8_t { none, text, other_format };
  Explain explain = Explain::none;
  // What names the statement, for sql_prepared, for txn prepare / finish_prepared and
  // for savepoints, and a key guard (set for those, null otherwise). Rare, so out of line: copying a Route on the hot
  // path copies a null pointer.
  struct Names {
    std::string prepared_name;   // PREPARE / EXECUTE: the statement's name
    std::string prepared_query;  // PREPARE: its query, deparsed (to route its EXECUTEs)
    // EXECUTE: the arguments (nullopt when one of them is not a constant)
    std::optional<std::vector<std::optional<std::string>>> execute_args;
    std::string gid;             // PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED
    std::string savepoint;       // SAVEPOINT / RELEASE / ROLLBACK TO: its name
    std::string cursor;          // DECLARE / FETCH / MOVE / CLOSE: the cursor ("" for CLOSE ALL)
    std::string cursor_query;    // DECLARE: its query, deparsed
    bool cursor_hold = false;    // DECLARE ... WITH HOLD
    bool cursor_plain = true;    // DECLARE: neither BINARY nor SCROLL
    bool fetch_forward = true;   // FETCH / MOVE [FORWARD] n, ALL, NEXT (a count >= 0)
    std::int64_t fetch_count = 0;
    bool move = false;
    std::optional<KeyGuard> key_guard;  // see KeyGuard
  };
  std::shared_ptr<const Names> names;
  const KeyGuard* key_guard() const { return names && names->key_guard ? &*names->key_guard : nullptr; }
  // The shards a statement of kind `shards` or `all_shards` runs on, out of
  // `shard_count`: every one for all_shards (or an empty list, or `every`), else `shards`.
  std::vector<std::size_t> target_shards(std::size_t shard_count, bool every = false) const {
    if (!every && kind != RouteKind::all_shards && !shards.empty()) return shards;
    std::vector<std::size_t> all(shard_count);
    for (std::size_t s = 0; s < shard_count; ++s) all[s] = s;
    return all;
  }
  // kind == error (SPR01) for an INSERT whose keys the proxy may generate.
  std::shared_ptr<const KeyRequest> generate_keys;
  // kind == error (SPR01) for an INSERT ... SELECT into a sharded table whose rows the
  // proxy reads and inserts itself (routing::insert_select_parts).
  bool pull_insert = false;
  // Global secondary indexes (SPEC §12, server/session/execute/global_index.cpp).
  struct Lookup {
    std::size_t index = 0;                                    // in config.indexes
    std::vector<std::pair<std::size_t, std::string>> values;  // (entries' shard, value)
    std::size_t distribution = 0;                             // the table's
    std::string key_type;                                     // its key's, as format_type() names it
  };
  struct GlobalIndexes {
    // It writes a table with a global index: the proxy applies the changes the shards
    // logged to the index's entries in the same transaction.
    bool writes = false;
    // A read of every shard that an index narrows: each value looked up with the shard
    // that holds its entries; the session asks those for the rows' keys and runs the
    // statement on the keys' shards only.
    std::shared_ptr<const Lookup> lookup;
  };
  GlobalIndexes indexes;
};

// Session-level routing inputs.
struct SessionRouting {
  std::optional<std::size_t> shard;  // SET splitpoint.shard
  // The session's standard_conforming_strings (off: backslashes escape in '...').
  bool standard_conforming_strings = true;
};

// Bound parameters of an extended-protocol Bind.
struct BoundParams {
  std::span<const std::optional<std::string_view>> values;  // nullopt = NULL
  std::span<const std::int16_t> formats;                    // as in Bind: 0, 1 or n entries
  std::span<const std::int32_t> types;                      // from Parse (0 = unspecified)
};

// The analysis of one statement shape, reusable for every execution of it.
class Plan;

class Router {
 public:
  explicit Router(const config::Config& config);
  ~Router();

  // Analyses a statement (one Parse, or a simple-protocol cache miss). Never null;
  // a statement that does not parse gives a plan that routes to its syntax error.
  // The same text with the same parameter types gets the same plan from a bounded
  // cache, without being parsed again.
  std::shared_ptr<const Plan> plan(std::string_view sql, std::span<const std::int32_t> param_types,
                                   bool standard_strings = true) const;

  // Routes one execution of a planned statement with its bound parameters.
  Route route(const Plan& plan, const BoundParams& params, const SessionRouting& session,
              const ShapeLookup& shapes) const;

  // Simple protocol: routes a query text. Statements that differ only in literal
  // values share one cached plan (bounded by `cache_bytes`).
  Route route_simple(std::string_view sql, const SessionRouting& session, const ShapeLookup& shapes);

  // Tables whose shape a DDL statement may have changed (to forget cached shapes).
  std::vector<std::string> tables_changed_by(const Plan& plan) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitpoint::routing
