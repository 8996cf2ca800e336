// The streaming merge of a scatter-gather SELECT (SPEC §4): shards' DataRows in, the
// client's DataRows out, following a MergePlan (merge_plan.hpp). Pure and synchronous;
// the executor owns the sockets and drives it:
//
//   auto m = Merger::create(plan, shards, fields, options);   // or a MergeError to send
//   for (;;) {
//     Merger::Step s = m->next();
//     switch (s.kind) {
//       case Merger::Step::Kind::emit:     send DataRow(s.row) to the client; break;
//       case Merger::Step::Kind::need_row: read the next message of shard s.shard (any
//                                          shard still sending if kAnyShard): DataRow ->
//                                          m->push(i, body); CommandComplete -> m->end_of_shard(i);
//                                          break;
//       case Merger::Step::Kind::done:     cancel/drain shards not yet ended; send
//                                          CommandComplete "SELECT m->rows_emitted()"; return;
//       case Merger::Step::Kind::error:    cancel shards; send ErrorResponse(m->error()); return;
//     }
//   }
//
// Contract: after need_row, call push() or end_of_shard() exactly once (for the shard
// asked for, or any shard not yet ended when kAnyShard), then next(). A `row` view stays
// valid until the next call to any member. `done` can come before every shard has
// ended (LIMIT reached): the rest is not needed.
//
// Memory: a sorted merge holds one row per shard; GROUP BY combines groups as they
// stream by; only a final sort (ORDER BY an aggregate, say) and hashed DISTINCT (after
// aggregation, or `SELECT DISTINCT *`) keep rows, and both fail with SPS02 beyond
// max_buffered_rows.
//
// Values: text and binary formats. Orders and equality are PostgreSQL's for the types in
// value.hpp; a merge that must compare another type is refused at create() with 0A000.
// Combined aggregates print exactly as PostgreSQL would (numeric scale, float8 shortest
// round-trip text) — except that float sums add the shards' partial sums, a different
// summation order than one server's, so the last bits of a float8 sum or avg may differ
// (inherent to any parallel float sum; PostgreSQL's own parallel aggregation does the same).
// It also verifies every shard's rows arrive in the plan's order and fails (XX000) rather
// than mis-merge if they do not (e.g. a column collation the proxy was not told about:
// text compares under MergerOptions::collation unless COLLATE or column_collations say
// otherwise; min/max have no such check). docs/scatter-gather.md has the full rules.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol/messages.hpp"
#include "routing/merge/merge_plan.hpp"

namespace splitpoint::routing {

// The statement's bound parameters (as in Bind), for $n in LIMIT/OFFSET and HAVING.
// Read during create() only.
struct MergeParams {
  std::span<const std::optional<std::string_view>> values;  // nullopt = NULL
  std::span<const std::int16_t> formats;                    // 0, 1 or one per parameter
  std::span<const std::int32_t> types;                      // parameter type OIDs (0 = unknown)
};

struct MergerOptions {
  std::size_t max_buffered_rows = 1000000;  // scatter.max_buffered_rows
  // The database's collation (pg_database.datcollate), for text columns without COLLATE.
  std::string collation = "C";
  // Optional, per shard column: the column's own collation when it is not the
  // database's (pg_attribute.attcollation of a table column declared COLLATE "x");
  // "" = the database's. Text is otherwise compared under `collation`.
  std::vector<std::string> column_collations;
  // The session's extra_float_digits; <= 0 prints floats rounded, so float sums and
  // float sort keys cannot be combined exactly and are refused.
  int extra_float_digits = 1;
  MergeParams params;
};

class Merger {
 public:
  static constexpr std::size_t kAnyShard = static_cast<std::size_t>(-1);

  struct Step {
    enum class Kind : std::uint8_t { emit, need_row, done, error };
    Kind kind = Kind::done;
    std::size_t shard = 0;  // need_row
    std::string_view row;   // emit: a DataRow body ('D' message without type and length)
  };

  // `shard_fields` is the shards' RowDescription (the executor checks they all agree);
  // its format codes are those the shards were asked for (MergePlan::shard_result_formats).
  static std::variant<std::unique_ptr<Merger>, MergeError> create(const MergePlan& plan, std::size_t shard_count,
                                                                  std::span<const protocol::FieldDescription> shard_fields,
                                                                  const MergerOptions& options);
  ~Merger();
  Merger(const Merger&) = delete;
  Merger& operator=(const Merger&) = delete;

  Step next();
  void push(std::size_t shard, std::string_view data_row_body);
  void end_of_shard(std::size_t shard);

  // Rows go to the client exactly as the shards send them (a concatenation without
  // combining, DISTINCT, LIMIT/OFFSET or hidden columns): after need_row, the executor
  // may send a shard's DataRow on itself and call passed() instead of push().
  bool passes_through() const;
  void passed(std::size_t shard, std::string_view data_row_body);

  std::uint64_t rows_emitted() const;
  const MergeError& error() const;

  struct Impl;  // routing/merge/merger_impl.hpp, internal
  explicit Merger(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace splitpoint::routing
