// Evaluating a HAVING condition (MergePlan::having) on combined rows, with SQL's
// three-valued logic and PostgreSQL's comparison semantics per type: integers and
// numerics compare as exact decimals (count(*) > 2.5 is numeric comparison), floats as
// float8 with NaN largest, text under the collation, dates and times as instants.
// Literals and parameters are read as the column's type, as PostgreSQL reads an
// unknown-typed literal; ones that do not read are refused at create(). Internal.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merge_rows.hpp"

namespace splitpoint::routing {
struct MergeParams;
}

namespace splitpoint::routing::merge_detail {

// A combined row's column as HAVING sees it.
struct ResultColumn {
  std::uint32_t type = 0;  // the client-visible type (avg: numeric / float8)
  ColumnCodec codec;
};

class HavingEvaluator {
 public:
  // `columns` describes the combined row, whose last `hidden` columns are hidden.
  static std::variant<HavingEvaluator, MergeError> create(const HavingExpr& expr, const std::vector<ResultColumn>& columns,
                                                          std::size_t hidden, const MergeParams& params);
  // True if the condition holds for `row` (false and unknown both drop it); nullopt if
  // a value of the row cannot be read.
  std::optional<bool> keep(const Row& row) const;

  struct Node;
  HavingEvaluator();
  ~HavingEvaluator();
  HavingEvaluator(HavingEvaluator&&) noexcept;
  HavingEvaluator& operator=(HavingEvaluator&&) noexcept;

 private:
  std::unique_ptr<Node> root_;
  std::vector<ResultColumn> columns_;
};

}  // namespace splitpoint::routing::merge_detail
