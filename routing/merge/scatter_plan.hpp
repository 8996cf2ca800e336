// How a read that runs on several shards is answered: one decision per statement text,
// parsed once and cached, merges also by shape (scatter_shape.hpp; server/session/execute/scatter_read.cpp
// asks ScatterPlanner for it at every execution). The decision is, in order of preference:
//   merge    the streaming merger (merge_plan.hpp): exact, fast, memory O(shards)
//   combine  the combine step (combine_plan.hpp): what the merger cannot combine is
//            combined by PostgreSQL on the combine database
//   error    neither can answer it exactly (SPC01), or it is not a read
// COPY (query) TO STDOUT / COPY table TO STDOUT is planned as its query, merged, with
// the COPY's options kept for the output.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "routing/copy.hpp"
#include "routing/merge/combine_plan.hpp"
#include "routing/merge/merge_plan.hpp"
#include "routing/merge/scatter_shape.hpp"
#include "routing/plan_cache.hpp"

namespace splitpoint::routing {

struct ScatterPlan {
  std::optional<CopyStatement> copy_out;  // COPY ... TO STDOUT: the COPY's options
  std::optional<MergePlan> merge;
  std::optional<CombinePlan> combine;
  std::optional<MergeError> error;        // set when neither merge nor combine is
  // A combine step planned without some tables' shapes (it pulls every column and does
  // not aggregate on the shards): learn them and plan again. Such a plan is not cached.
  std::vector<std::string> missing_shapes;
  // Set at run time when the merger refused the shards' column types (known only from
  // their RowDescription): later executions of the text go to the combine step at once.
  std::shared_ptr<std::atomic<bool>> merge_refused = std::make_shared<std::atomic<bool>>(false);
  std::size_t bytes = 0;                  // rough footprint, for the cache bound
};

struct ScatterOptions {
  MergeOptions merge;
  CombineOptions combine;
  bool allow_combine = true;
  bool combine_only = false;  // Route::needs_combine: the merger's answer would be wrong
};

// Plans `sql` (one statement): parses it once.
ScatterPlan plan_scatter(std::string_view sql, const ScatterOptions& options, bool standard_strings = true);

// plan_scatter through two bounded caches: by exact text, and for merge plans by shape
// (scatter_shape.hpp: a new text of a known shape is neither parsed nor planned). The
// options' lookups describe the catalog: clear() whenever what they answer may have
// changed (DDL, a reload).
class ScatterPlanner {
 public:
  std::shared_ptr<const ScatterPlan> plan(std::string_view sql, const ScatterOptions& options,
                                          bool standard_strings = true);
  void clear() {
    cache_.clear();
    shapes_.clear();
  }
  std::size_t entries() const { return cache_.entries() + shapes_.entries(); }

  // One entry of the shape cache. By the normalised text: which literals complete the
  // key (`key_literals`; then `plan` is null and the entry under the completed key
  // holds it), or the plan, or `refused` (the shape is planned per text).
  struct Shape {
    std::vector<std::uint32_t> key_literals;
    std::shared_ptr<const ScatterPlan> plan;  // its merge's shard_sql is empty: see `sql`
    ShapeTemplate sql;
    bool refused = false;
    std::size_t bytes = 0;
  };

 private:
  std::shared_ptr<const ScatterPlan> from_shape(std::string_view sql, const std::string& key, bool& learn);
  void learn_shape(std::string_view sql, const std::string& key, const ScatterPlan& plan, const ScatterOptions& options);

  BoundedCache<ScatterPlan> cache_;
  BoundedCache<Shape> shapes_;
};

}  // namespace splitpoint::routing
