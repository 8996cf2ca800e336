// A merge plan shared by the texts of one shape (issues #12, #16): texts that differ
// only in literal values (routing/text_scan.hpp's normalised text) get the same merge
// plan, with each text's own literals put back into the shard statement. A new text of
// a known shape is then neither parsed nor planned (ScatterPlanner, scatter_plan.hpp).
//
// A shape's template is made once, from its first text whose plan is a merge:
//  1. The literals whose values the merge plan reads stay constants: those inside the
//     top SELECT's LIMIT, OFFSET, ORDER BY, GROUP BY, DISTINCT ON and HAVING (`ORDER BY
//     2` is a position, a row bound is a number the merger counts, a HAVING constant is
//     compared by the proxy). Their source texts complete the cache key, so `LIMIT 10`
//     and `LIMIT 20` have templates of their own. When the steps below fail, they are
//     tried once more with the select list's literals as key literals too (a select
//     list that repeats a GROUP BY expression, literal and all).
//  2. Every other literal's constant becomes a marker parameter ($1000001 for the
//     text's first literal, and so on) and the tree is planned again.
//  3. The template is kept only when every literal of the text was found as a constant
//     of the tree, the plan with markers equals the plan with the literals in every
//     field but the shard statement (so the plan does not depend on those values), and
//     the shard statement with this text's literals put back at the markers normalises
//     to the same text as the one planned from the literals.
// Anything else is planned per text, as before. A literal with a unary minus folded in
// (`x > -5`) is not put back (its parentheses depend on where it stands): such shapes
// are planned per text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

struct ShapeTemplate {
  // Literals (indices among the text's) whose source text is part of the cache key.
  std::vector<std::uint32_t> key_literals;
  // The shard statement: pieces[0], literal slots[0], pieces[1], ... pieces.back().
  std::vector<std::string> pieces;
  std::vector<std::uint32_t> slots;

  // The shard statement for `sql`, a text of this shape (`scan` is its scan).
  std::string shard_sql(std::string_view sql, const ScannedText& scan) const;
  std::size_t bytes() const;
};

// The source text of literal `i` of `scan`.
inline std::string_view literal_text(std::string_view sql, const ScannedText& scan, std::size_t i) {
  return sql.substr(scan.literals[i].start, scan.literals[i].end - scan.literals[i].start);
}

// The template of `sql`'s shape (steps 1-3 above). `packed` is `sql`'s parse
// (ParseTree::packed); `plan` is the merge plan made from the literals, with `options`.
// nullopt: the shape is planned per text.
std::optional<ShapeTemplate> shape_template(const std::string& packed, std::string_view sql, const ScannedText& scan,
                                            const MergePlan& plan, const MergeOptions& options);

}  // namespace splitpoint::routing
