#include "routing/literal_slots.hpp"
#include "routing/chars.hpp"

#include <algorithm>

namespace splitpoint::routing {

namespace {


class Slotter {
 public:
  Slotter(std::string_view sql, const ScannedText& scan, Plan& plan) : sql_(sql), scan_(scan), plan_(plan) {}

  bool value(ValueSource& v) {
    if (v.kind != ValueSource::Kind::constant) return true;
    std::optional<LiteralAt> at = literal_at(sql_, scan_, v.location);
    if (!at) return false;
    std::optional<std::string> text = literal_value(sql_, scan_.literals[at->index]);
    if (!text || (at->negate ? "-" + *text : *text) != v.text) return false;
    v.kind = ValueSource::Kind::slot;
    v.index = static_cast<int>(at->index);
    v.negate = at->negate;
    v.text.clear();
    plan_.uses_slots = true;
    return true;
  }

  bool cond(KeyCond& k) {
    for (ValueSource& v : k.values)
      if (!value(v)) return false;
    if (k.lower && !value(*k.lower)) return false;
    if (k.upper && !value(*k.upper)) return false;
    for (KeyCond& kid : k.kids)
      if (!cond(kid)) return false;
    return true;
  }

 private:
  std::string_view sql_;
  const ScannedText& scan_;
  Plan& plan_;
};

void collect(const ValueSource& v, std::vector<int>& out) {
  if (v.kind == ValueSource::Kind::slot) out.push_back(v.index);
}

void collect(const KeyCond& k, std::vector<int>& out) {
  for (const ValueSource& v : k.values) collect(v, out);
  if (k.lower) collect(*k.lower, out);
  if (k.upper) collect(*k.upper, out);
  for (const KeyCond& kid : k.kids) collect(kid, out);
}

}  // namespace

std::optional<LiteralAt> literal_at(std::string_view sql, const ScannedText& scan, int location) {
  if (location < 0 || static_cast<std::size_t>(location) >= sql.size()) return std::nullopt;
  const auto& lits = scan.literals;
  const auto loc = static_cast<std::uint32_t>(location);
  auto it = std::lower_bound(lits.begin(), lits.end(), loc, [](const Literal& l, std::uint32_t p) { return l.start < p; });
  if (it != lits.end() && it->start == loc) return LiteralAt{static_cast<std::size_t>(it - lits.begin()), false};
  // PostgreSQL folds a unary minus into a numeric constant located at the minus.
  if (sql[loc] != '-') return std::nullopt;
  std::size_t p = loc + 1;
  while (p < sql.size() && is_space(sql[p])) ++p;
  if (it == lits.end() || it->start != p || it->kind != Literal::Kind::number) return std::nullopt;
  return LiteralAt{static_cast<std::size_t>(it - lits.begin()), true};
}

std::shared_ptr<Plan> with_literal_slots(const Plan& plan, std::string_view sql, const ScannedText& scan) {
  auto copy = std::make_shared<Plan>(plan);
  copy->packed_tree.clear();  // holds this text's literals; a split cuts the new text (or re-parses)
  copy->split_text.clear();
  copy->hints.clear();        // each text brings its own
  Slotter slotter(sql, scan, *copy);
  for (KeyCond& k : copy->conds)
    if (!slotter.cond(k)) return nullptr;
  for (InsertRows& rows : copy->inserts)
    for (auto& row : rows.rows)
      for (auto& item : row)
        if (item && !slotter.value(*item)) return nullptr;
  if (copy->lookup)
    for (ValueSource& v : copy->lookup->values)
      if (!slotter.value(v)) return nullptr;
  std::vector<int> used;
  for (const KeyCond& k : copy->conds) collect(k, used);
  for (const InsertRows& rows : copy->inserts)
    for (const auto& row : rows.rows)
      for (const auto& item : row)
        if (item) collect(*item, used);
  if (copy->lookup)
    for (const ValueSource& v : copy->lookup->values) collect(v, used);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  copy->slots_used = std::move(used);
  return copy;
}

bool read_slots(const Plan& plan, std::string_view sql, const ScannedText& scan,
                std::vector<std::optional<std::string>>& slots) {
  slots.resize(scan.literals.size());
  for (int i : plan.slots_used) {
    if (static_cast<std::size_t>(i) >= scan.literals.size()) return false;
    slots[i] = literal_value(sql, scan.literals[i]);
    if (!slots[i]) return false;
  }
  return true;
}

}  // namespace splitpoint::routing
