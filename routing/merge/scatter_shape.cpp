#include "routing/merge/scatter_shape.hpp"

#include <algorithm>
#include <unordered_set>
#include <variant>

#include "routing/literal_slots.hpp"
#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

// $n of the text's literal i is kMarker + 1 + i: far above any parameter a client sends
// (a simple Query has none; the protocol allows 65535).
constexpr int kMarker = 1'000'000;

enum class Use : std::uint8_t { unseen, key, marker };

// Locations of the constants whose values the merge plan reads (step 1); with
// `targets`, also those of the select list (step 1's second try).
std::unordered_set<int> key_constant_locations(const PgQuery__SelectStmt* s, bool targets) {
  std::unordered_set<int> out;
  auto add = [&](const PgQuery__Node* n) {
    if (n == nullptr) return;
    auto visit = [&](const PgQuery__Node* c) {
      if (is(c, PG_QUERY__NODE__NODE_A_CONST)) out.insert(c->a_const->location);
      return true;
    };
    visit(n);
    walk_nodes(&n->base, visit);
  };
  add(s->limit_count);
  add(s->limit_offset);
  add(s->having_clause);
  for (std::size_t i = 0; i < s->n_sort_clause; ++i) add(s->sort_clause[i]);
  for (std::size_t i = 0; i < s->n_group_clause; ++i) add(s->group_clause[i]);
  for (std::size_t i = 0; i < s->n_distinct_clause; ++i) add(s->distinct_clause[i]);
  for (std::size_t i = 0; targets && i < s->n_target_list; ++i) add(s->target_list[i]);
  return out;
}

// Step 2: every constant read from a literal becomes a key literal or a marker. False
// when a literal of the text is neither (it is not a constant of the tree, or has a
// minus folded in).
bool mark_literals(PgQuery__ParseResult* tree, std::string_view sql, const ScannedText& scan, bool targets,
                   std::vector<std::uint32_t>& key_literals) {
  const auto keys = key_constant_locations(tree->stmts[0]->stmt->select_stmt, targets);
  std::vector<Use> use(scan.literals.size(), Use::unseen);
  bool ok = true;
  for_each_node_slot(&tree->base, [&](PgQuery__Node*& slot) {
    if (!is(slot, PG_QUERY__NODE__NODE_A_CONST) || slot->a_const->isnull) return true;
    const int location = slot->a_const->location;
    std::optional<LiteralAt> at = literal_at(sql, scan, location);
    if (!at) return false;  // TRUE, FALSE: keywords, in the normalised text
    if (at->negate || use[at->index] != Use::unseen) {
      ok = false;
      return false;
    }
    if (keys.count(location) != 0) {
      use[at->index] = Use::key;
      key_literals.push_back(static_cast<std::uint32_t>(at->index));
      return false;
    }
    use[at->index] = Use::marker;
    merge_tree::free_node(slot);
    slot = merge_tree::make_param_ref(kMarker + 1 + static_cast<int>(at->index));
    return false;
  });
  std::sort(key_literals.begin(), key_literals.end());
  return ok && std::none_of(use.begin(), use.end(), [](Use u) { return u == Use::unseen; });
}

// Splits the shard statement planned with markers at its markers. False when a marker
// names no literal.
bool split_at_markers(std::string_view sql, std::size_t literals, ShapeTemplate& t) {
  ScannedText scan;
  if (!scan_text(sql, scan)) return false;
  std::size_t piece = 0, lit = 0;
  for (std::size_t i = 0; i < sql.size();) {
    if (lit < scan.literals.size() && i == scan.literals[lit].start) {
      i = scan.literals[lit++].end;
      continue;
    }
    if (sql[i] == '"') {
      std::size_t close = sql.find('"', i + 1);
      while (close != std::string_view::npos && close + 1 < sql.size() && sql[close + 1] == '"')
        close = sql.find('"', close + 2);
      if (close == std::string_view::npos) return false;
      i = close + 1;
      continue;
    }
    std::size_t j = i + 1;
    while (j < sql.size() && sql[j] >= '0' && sql[j] <= '9') ++j;
    if (sql[i] != '$' || j == i + 1 || (i > 0 && is_identifier_char(sql[i - 1])) || j - i > 9) {
      ++i;
      continue;
    }
    const int n = std::stoi(std::string(sql.substr(i + 1, j - i - 1)));
    if (n <= kMarker) {
      i = j;
      continue;
    }
    if (static_cast<std::size_t>(n - kMarker - 1) >= literals) return false;
    t.pieces.emplace_back(sql.substr(piece, i - piece));
    t.slots.push_back(static_cast<std::uint32_t>(n - kMarker - 1));
    piece = i = j;
  }
  t.pieces.emplace_back(sql.substr(piece));
  return true;
}

bool same_normalised(std::string_view a, std::string_view b) {
  ScannedText sa, sb;
  return scan_text(a, sa) && scan_text(b, sb) && sa.key == sb.key;
}

}  // namespace

std::string ShapeTemplate::shard_sql(std::string_view sql, const ScannedText& scan) const {
  std::size_t n = 0;
  for (const std::string& p : pieces) n += p.size();
  for (std::uint32_t s : slots) n += scan.literals[s].end - scan.literals[s].start;
  std::string out;
  out.reserve(n);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    out += pieces[i];
    out += literal_text(sql, scan, slots[i]);
  }
  out += pieces.back();
  return out;
}

std::size_t ShapeTemplate::bytes() const {
  std::size_t n = sizeof(ShapeTemplate) + 4 * (key_literals.size() + slots.size());
  for (const std::string& p : pieces) n += p.size() + sizeof(std::string);
  return n;
}

namespace {

std::optional<ShapeTemplate> try_template(PgQuery__ParseResult* tree, std::string_view sql, const ScannedText& scan,
                                          const MergePlan& plan, const MergeOptions& options, bool targets) {
  ShapeTemplate t;
  if (!mark_literals(tree, sql, scan, targets, t.key_literals)) return std::nullopt;
  auto marked = plan_merge(tree, options);
  auto* m = std::get_if<MergePlan>(&marked);
  if (m == nullptr) return std::nullopt;
  MergePlan a = plan;
  a.shard_sql.clear();
  std::string marked_sql = std::move(m->shard_sql);
  m->shard_sql.clear();
  if (!(a == *m) || !split_at_markers(marked_sql, scan.literals.size(), t)) return std::nullopt;
  if (!same_normalised(t.shard_sql(sql, scan), plan.shard_sql)) return std::nullopt;
  return t;
}

}  // namespace

std::optional<ShapeTemplate> shape_template(const std::string& packed, std::string_view sql, const ScannedText& scan,
                                            const MergePlan& plan, const MergeOptions& options) {
  if (!scan.ok) return std::nullopt;
  // First with the select list's literals as markers; then, for a select list that
  // repeats a GROUP BY or ORDER BY expression with its literal (`date_trunc('day', t)`
  // in both, which the planner matches), with them as key literals too.
  for (bool targets : {false, true}) {
    auto tree = unpack_tree(packed);
    if (tree->n_stmts != 1 || !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_SELECT_STMT)) return std::nullopt;
    if (auto t = try_template(tree.get(), sql, scan, plan, options, targets)) return t;
  }
  return std::nullopt;
}

}  // namespace splitpoint::routing
