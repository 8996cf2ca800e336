// Simple-protocol plans shared by texts that differ only in literal values: the
// constants a plan routes by become "literal slots" (the n-th literal of the text),
// read from each new text with the cheap scanner instead of PostgreSQL's parser.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/plan.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

// The literal of `scan` that PostgreSQL's constant at byte `location` (an A_Const's
// location) was read from, and whether the parser folded a unary minus before it into
// the constant (the constant is then located at the minus). nullopt: none starts there.
struct LiteralAt {
  std::size_t index = 0;
  bool negate = false;
};
std::optional<LiteralAt> literal_at(std::string_view sql, const ScannedText& scan, int location);

// A copy of `plan` (analysed from `sql`) whose routing constants are literal slots of
// `scan`; nullptr when a constant cannot be matched to a literal the scanner reads
// exactly as PostgreSQL did (then the shape is not cached).
std::shared_ptr<Plan> with_literal_slots(const Plan& plan, std::string_view sql, const ScannedText& scan);

// The values of the slots `plan` uses, from a text with the same normalised form.
// False if one cannot be read exactly (the caller then parses the text).
bool read_slots(const Plan& plan, std::string_view sql, const ScannedText& scan,
                std::vector<std::optional<std::string>>& slots);

}  // namespace splitpoint::routing
