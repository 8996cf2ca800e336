// The analysis of one statement shape (routing/router.hpp's `Plan`): everything the
// parse tree says about routing, kept so an execution only has to look at its values.
// Internal to routing/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "routing/router.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

// Where a key value comes from at execution time.
struct ValueSource {
  enum class Kind : std::uint8_t { constant, param, slot, null };
  Kind kind = Kind::null;
  bool is_array = false;  // an array to expand (`= ANY('{1,2}')`, `= ANY($1)`)
  bool negate = false;    // slot only: a unary minus stood before the literal
  int index = 0;          // param: 0-based parameter number; slot: literal index in the text
  int location = -1;      // constant: byte offset of its literal in the text (for slots)
  std::string text;       // constant: the literal's value
};

// A condition on distribution keys, as a formula over key leaves. Leaves name the
// occurrence (a sharded table as it appears in the statement) whose key they constrain;
// at execution a formula projects onto each occurrence as a set of partitions.
struct KeyCond {
  enum class Op : std::uint8_t { all, in, range, and_, or_ };
  Op op = Op::all;
  int occ = -1;                      // in / range
  std::vector<ValueSource> values;   // in: any of these (arrays expand)
  std::optional<ValueSource> lower;  // range: nullopt = unbounded
  std::optional<ValueSource> upper;
  bool lower_inclusive = true;
  bool upper_inclusive = true;
  bool null_matches = false;  // in: a NULL value matches NULL keys (IS NULL), not for `=`
  bool salt = false;          // in: the leaf is on the occurrence's salt column, not its key (config::Salt)
  std::vector<KeyCond> kids;  // and_ / or_
};

// A sharded table as it appears in the statement (each FROM item is one occurrence).
struct Occurrence {
  std::string table;
  std::size_t distribution = 0;
  std::string key_column;
};

// rows of `to` that matter to the result all have to.key equal to some from.key of a
// row of `from` that matters (a join or correlation on the key), so to's partitions are
// within from's.
struct KeyEdge {
  int from = 0;
  int to = 0;
};

// INSERT ... VALUES into a sharded table: where each row's key comes from.
// An item nextval('sequence') of an INSERT's VALUES row (InsertRows::nextvals). (Out
// of InsertRows: clang cannot use a nested class's member initializers there.)
struct NextvalItem {
  std::size_t row = 0, item = 0;
  std::string sequence;
};

struct InsertRows {
  int occ = -1;
  std::optional<std::size_t> key_index;  // position in the VALUES rows; nullopt: from the table's shape
  std::vector<std::string> columns;      // the statement's column list (empty: none given)
  // Per row, per item: the item's value source, or nullopt for DEFAULT / an expression.
  std::vector<std::vector<std::optional<ValueSource>>> rows;
  // (row, item) of each DEFAULT: where the key, or a column whose default draws from a
  // sequence, is DEFAULT, the proxy generates the value (SPEC §3).
  std::vector<std::pair<std::size_t, std::size_t>> defaults;
  // Each nextval('sequence') item (a string literal, maybe cast to regclass): the proxy
  // draws the value from that sequence's copy on one shard.
  std::vector<NextvalItem> nextvals;
  // The column list leaves the key out: every row's key is generated.
  bool key_omitted = false;
  // A lone top-level INSERT: rows may be split into one statement per shard. Otherwise
  // (WITH ... INSERT, several statements in one text) all rows must go to one shard.
  bool splittable = false;
};

// Plan::insert_select: the target of an INSERT ... SELECT run on the shards.
struct PushedInsertSelect {
  int occ = -1;                      // the target
  std::vector<std::string> columns;  // its column list
};

// UPDATE ... SET key = <value> whose WHERE does not pin the key to that value (a lone
// UPDATE without FROM; Route::key_guard): the value's shard runs the statement, every
// other shard the WHERE reaches runs `guarded_sql` instead, the same UPDATE made to
// fail on any row it matches there (such a row would have to move to another shard).
struct KeyAssignment {
  int occ = -1;
  ValueSource value;
  std::string guarded_sql;
};

class Plan {
 public:
  // What an execution does with this plan.
  enum class Mode : std::uint8_t {
    fixed,  // `fixed` is the route whatever the values (errors, DDL, SET, BEGIN, ...)
    keyed,  // DML / SELECT: evaluate key conditions
  };
  Mode mode = Mode::fixed;
  Route fixed;  // fixed: the route; keyed: kind/cls/txn defaults
  // A shard hint / SET splitpoint.shard may replace the route (not for syntax errors,
  // transaction control, splitpoint.* commands or unsupported statements).
  bool shard_override = true;

  // keyed:
  std::vector<Occurrence> occs;
  std::vector<KeyCond> conds;  // each holds for the rows that matter; AND-ed
  std::vector<KeyEdge> edges;
  std::vector<std::size_t> pinned_shards;  // unlisted tables under `unlisted_tables: shard:<name>`
  bool writes_reference = false;           // INSERT/UPDATE/DELETE of a reference table
  std::vector<int> write_targets;          // occurrences UPDATE/DELETE write
  std::vector<int> insert_targets;         // occurrences INSERT writes (any form)
  // A SELECT of one table with a global index whose WHERE gives the index's first
  // column values (`=`, IN, = ANY): Route::lookup, when no key narrows it.
  struct IndexLookup {
    std::size_t index = 0;  // in config.indexes
    int occ = -1;
    std::vector<ValueSource> values;
  };
  std::optional<IndexLookup> lookup;
  std::vector<InsertRows> inserts;         // INSERT ... VALUES into sharded tables
  std::optional<KeyAssignment> key_assignment;
  // An INSERT ... SELECT run where its rows are (its key is a co-located table's): if
  // the statement turns out not co-located, or its column list leaves out a column whose
  // default draws from a sequence, its rows are pulled (Route::pull_insert).
  std::optional<PushedInsertSelect> insert_select;
  bool several_statements = false;         // the text holds more than one statement
  std::string packed_tree;                 // for rewriting a split INSERT
  std::string split_text;                  // the same, its text (read with standard strings)
  std::vector<std::int32_t> param_types;   // from Parse, for binary parameters

  // Statement-wide:
  std::vector<std::string> ddl_tables;  // tables_changed_by
  Hints hints;                          // from the statement's comments
  std::shared_ptr<const std::vector<SessionCommandInfo>> session_commands;  // Route::session_commands
  std::shared_ptr<const CopyFrom> copy_from;                                 // Route::copy_from
  bool pins_session = false;            // Route::pins_session
  Route::Reads reads = Route::Reads::writes;  // Route::reads
  bool reads_catalog = false;           // Route::Reads::catalog
  bool cacheable = true;                // may be shared by texts differing only in literals
  bool uses_slots = false;              // constants were turned into literal slots
  std::vector<int> slots_used;          // the literal indices those slots read
  std::size_t bytes = 0;                // rough memory footprint, for the cache bound
};

}  // namespace splitpoint::routing
