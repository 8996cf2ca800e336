// One execution of a plan: the values of its keys (literals, bound parameters,
// literal slots of a cached plan) -> partitions -> shards. Internal to routing/.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "routing/plan.hpp"
#include "routing/topology.hpp"

namespace splitpoint::routing {

struct EvalInput {
  const Topology& topo;
  const BoundParams* params = nullptr;                 // extended protocol
  std::span<const std::optional<std::string>> slots;  // cached simple-protocol plan: literal values
  const Hints& hints;
  const SessionRouting& session;
  const ShapeLookup& shapes;
  bool can_split = true;  // plan.packed_tree is this very text's tree
  // The text of a plan cached by shape (simple protocol; read with
  // standard_conforming_strings on): a split INSERT is cut from it (split_insert_text),
  // as from plan.split_text for a plan of its own text.
  std::string_view text = {};
};

// The route. Sets *needs_exact_plan (and returns a placeholder) when an INSERT must be
// split but the plan is a cached one whose tree holds another text's literals.
Route evaluate(const Plan& plan, const EvalInput& in, bool* needs_exact_plan);

}  // namespace splitpoint::routing
