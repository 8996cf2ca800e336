// Combining the shards' partial aggregates of one group (routing/merge/merger.cpp) into the
// values one PostgreSQL would print. Internal to routing/.
//
//   count            partial counts (int8) summed                      -> int8
//   sum              partial sums summed in the partial's type, which is sum()'s result
//                    type already: int8 (of int2/int4), numeric (of int8/numeric),
//                    float4, float8; NULL when every partial is NULL
//   avg              sum of the sum partials / sum of the count partials: numeric_div's
//                    result (scale per select_div_scale) for int8/numeric sums, float8
//                    division for float8 sums; NULL when the count is 0
//   min / max        the least / greatest partial in the column type's order
//   bool_and / _or   AND / OR of the partials, NULLs ignored
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merge_rows.hpp"
#include "routing/merge/value.hpp"
#include "routing/merge/value_numeric.hpp"

namespace splitpoint::routing::merge_detail {

struct AggSpec {
  std::size_t column = 0;
  Combine combine = Combine::count;
  std::size_t count_column = 0;  // avg
  std::int16_t count_format = 0; // avg: the count partial's format
  std::uint32_t type = 0;        // the partial's type OID
  ColumnCodec codec;             // the partial's codec (format in = format out)
};

// nullopt if the merger can combine `spec` exactly, else why not.
std::optional<MergeError> check_aggregate(const AggSpec& spec, const std::vector<std::uint32_t>& types,
                                          int extra_float_digits);

// The type a combined aggregate column has for the client (avg's differs from its sum).
std::uint32_t result_type(const AggSpec& spec);

class GroupAccumulator {
 public:
  GroupAccumulator(const std::vector<AggSpec>& specs, int extra_float_digits)
      : specs_(specs), extra_float_digits_(extra_float_digits), acc_(specs.size()) {}

  void reset();
  // Adds one shard row's partials; false with `error` (SQLSTATE 22003 overflow, bad data).
  bool add(const Row& row, MergeError& error);
  // Builds the combined row: aggregate columns combined, the others from `first`.
  bool finish(const Row& first, std::size_t columns, Row& out, MergeError& error) const;

 private:
  struct Acc {
    bool any = false;        // a non-NULL partial was seen
    std::int64_t count = 0;  // count, and avg's count
    __int128 isum = 0;       // int8 sums
    Decimal dsum;            // numeric sums
    double fsum = 0;         // float8 (and float4, in float arithmetic) sums
    float f4sum = 0;
    bool flag = false;       // bool_and / bool_or
    std::string best;        // min / max: the value's bytes
    Key best_key;
  };
  const std::vector<AggSpec>& specs_;
  int extra_float_digits_;
  std::vector<Acc> acc_;

  bool add_one(const AggSpec& s, Acc& a, const Row& row, MergeError& error);
  static bool add_sum(const AggSpec& s, Acc& a, std::string_view v, bool first, MergeError& error);
  static bool malformed(const AggSpec& s, MergeError& error);
  std::optional<std::string> value(const AggSpec& s, const Acc& a, MergeError& error) const;
};

}  // namespace splitpoint::routing::merge_detail
