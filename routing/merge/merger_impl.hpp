// The merger's state (routing/merge/merger.hpp), shared by merger.cpp (the streaming pipeline)
// and merger_create.cpp (resolving a plan against the shards' columns). Internal.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "routing/merge/merge_aggregate.hpp"
#include "routing/merge/merge_having_eval.hpp"
#include "routing/merge/merge_rows.hpp"
#include "routing/merge/merger.hpp"

namespace splitpoint::routing {

struct Merger::Impl {
  // ---- resolved from the plan and the RowDescription (merger_create.cpp)
  std::size_t shards = 0;
  std::size_t columns = 0;  // per shard row
  std::size_t hidden = 0;   // the last `hidden` columns are not sent to the client
  std::deque<Collation> collations;               // stable addresses for codecs
  std::vector<ColumnCodec> codecs;                // per column, as the shards send it
  std::vector<merge_detail::ResultColumn> result; // per column, after combining (avg: numeric)
  std::vector<ColumnCodec> result_codecs;         // the same codecs, for DISTINCT
  std::vector<merge_detail::KeySpec> source_keys; // shards' order; empty = concatenate
  struct Aggregation {
    bool aggregate = false;
    bool grouped = false;  // aggregate with GROUP BY (groups are runs equal on source_keys)
    std::vector<merge_detail::AggSpec> specs;
    std::optional<merge_detail::GroupAccumulator> accumulator;
    std::optional<merge_detail::HavingEvaluator> having;
  } agg;
  // DISTINCT: the plan's, and the rows seen (merger.cpp)
  struct Distinct {
    MergePlan::Distinct mode = MergePlan::Distinct::none;
    std::vector<std::size_t> columns;
    std::string key, last;
    bool has_last = false;
    std::unordered_set<std::string> seen;
  } distinct;
  // the final sort, LIMIT/OFFSET and WITH TIES
  struct Bounds {
    std::vector<merge_detail::KeySpec> final_keys;  // buffered sort after combining
    std::vector<merge_detail::KeySpec> tie_keys;    // WITH TIES
    std::optional<std::uint64_t> limit;
    std::uint64_t offset = 0;
    bool with_ties = false;
    std::size_t max_buffered = 0;
  } bounds;
  int extra_float_digits = 1;

  // ---- streaming state (merger.cpp)
  enum class ShardState : std::uint8_t { want, has_row, ended };
  std::vector<ShardState> state;
  std::vector<merge_detail::Row> current;        // sorted merge: each shard's next row
  std::vector<merge_detail::KeySnapshot> last;   // each shard's previous row, for the order check
  std::vector<std::size_t> heap;                 // shards with a row, smallest first
  std::vector<std::size_t> wanted;               // sorted merge: shards whose next row is needed
  std::size_t ended = 0;
  std::size_t awaiting = kNobody;                // shard a push/end is expected from
  merge_detail::Row inbox;                       // concatenation: the row just pushed
  bool inbox_full = false;
  merge_detail::Row in;                          // the row being processed

  struct Group {  // the group being combined
    bool open = false;
    merge_detail::Row first;
    merge_detail::KeySnapshot keys;
    merge_detail::Row combined;
  } group;
  struct Buffer {  // rows held for the final sort
    std::vector<merge_detail::Row> rows;
    std::size_t at = 0;
    bool draining = false;
  } buffer;
  struct Emitted {  // OFFSET skipped, rows out, the last one (WITH TIES)
    std::uint64_t skipped = 0, emitted = 0;
    merge_detail::KeySnapshot last;
  } emit;
  std::string out;

  bool input_done = false;
  bool finished = false;
  std::optional<MergeError> error;
  std::string decode_error;

  static constexpr std::size_t kNobody = static_cast<std::size_t>(-2);

  bool fail(std::string sqlstate, std::string message) {
    if (!error) error = MergeError{std::move(sqlstate), std::move(message)};
    return false;
  }
};

}  // namespace splitpoint::routing
