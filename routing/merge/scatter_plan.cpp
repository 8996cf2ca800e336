#include "routing/merge/scatter_plan.hpp"

#include "routing/merge/copy_out.hpp"
#include "routing/pg_tree.hpp"
#include "routing/session_command.hpp"

namespace splitpoint::routing {

namespace {

std::size_t footprint(const ScatterPlan& p) {
  std::size_t n = sizeof(ScatterPlan);
  if (p.merge) n += p.merge->shard_sql.size() + 64 * (p.merge->shard_order.size() + p.merge->aggregates.size());
  if (p.combine) {
    n += p.combine->combine_sql.size();
    for (const auto& pull : p.combine->pulls) n += pull.create_sql.size() + pull.pull_sql.size() + pull.table.size();
  }
  if (p.error) n += p.error->message.size();
  return n;
}

// The COPY's query, or the error that refuses it.
std::optional<std::string> copy_query(std::string_view sql, ScatterPlan& plan) {
  std::string why;
  plan.copy_out = parse_copy(sql, &why);
  std::optional<std::string> source;
  if (plan.copy_out && !plan.copy_out->to_stdout) why = "COPY to a file or program cannot run on several shards";
  // The merged values arrive in the client's encoding; ENCODING would ask for another.
  if (plan.copy_out && plan.copy_out->encoding_given) why = "the ENCODING option is not supported for a merged COPY";
  if (plan.copy_out && plan.copy_out->to_stdout && why.empty()) source = copy_source_query(sql, &why);
  if (!source)
    plan.error = MergeError{plan.copy_out ? "SPC01" : "0A000", "cannot copy from several shards: " + why};
  return source;
}

// A statement whose FROM (and WITH) reads no sharded table gets its rows from each shard
// once: `SELECT EXISTS (SELECT ... FROM sharded)`, or a reference table filtered by a
// sub-select over a sharded one, would be answered once per shard. Only the combine
// step, which sees every shard's rows, answers it.
bool sharded_only_in_sub_selects(PgQuery__ParseResult* tree, const CombineOptions& o) {
  if (!o.is_sharded_table || tree->n_stmts != 1 || !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_SELECT_STMT))
    return false;
  const PgQuery__SelectStmt* top = tree->stmts[0]->stmt->select_stmt;
  if (top->op != PG_QUERY__SET_OPERATION__SETOP_NONE) return false;  // the merger refuses set operations
  bool from = false, anywhere = false;
  auto sharded = [&](bool& seen) {
    return [&](const PgQuery__RangeVar* rv) { seen = seen || o.is_sharded_table(sv(rv->schemaname), sv(rv->relname)); };
  };
  for (std::size_t i = 0; i < top->n_from_clause; ++i) for_each_range_var(&top->from_clause[i]->base, sharded(from));
  if (top->with_clause != nullptr) for_each_range_var(&top->with_clause->base, sharded(from));
  if (from) return false;
  for_each_range_var(&tree->base, sharded(anywhere));
  return anywhere;
}

// What neither the merger nor the combine step takes, said plainly: several statements
// in one text, a cursor.
std::optional<std::string> not_one_statement(const PgQuery__ParseResult* tree) {
  if (tree->n_stmts > 1)
    return "a text of several statements cannot be answered across shards; send them one by one";
  if (tree->n_stmts == 1 && is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_DECLARE_CURSOR_STMT))
    return "a cursor cannot read several shards; fix the shard key in its query, or read the rows without a cursor";
  return std::nullopt;
}

}  // namespace

ScatterPlan plan_scatter(std::string_view sql, const ScatterOptions& options, bool standard_strings) {
  ScatterPlan plan;
  const std::string_view statement = sql;
  std::string copy_source;
  if (first_keyword(sql) == "copy") {
    auto source = copy_query(sql, plan);
    if (!source) return plan;
    copy_source = std::move(*source);
    sql = copy_source;
  }
  ParseTree parsed = ParseTree::parse(sql, standard_strings);
  if (!parsed.ok()) {
    plan.error = MergeError{parsed.error().sqlstate, parsed.error().message};
    return plan;
  }
  if (auto why = not_one_statement(parsed.tree())) {
    plan.error = MergeError{"0A000", std::move(*why)};
    return plan;
  }
  if (options.combine_only || sharded_only_in_sub_selects(parsed.tree(), options.combine)) {
    plan.error = MergeError{"SPC01", "cannot be answered exactly across shards: only the combine step sees every "
                                     "shard's rows this statement needs"};
  } else {
    // The merger rewrites the tree it is given: the parse's own, as nothing else reads
    // it afterwards (the combine step unpacks a fresh copy).
    auto merged = plan_merge(parsed.tree(), options.merge);
    if (auto* m = std::get_if<MergePlan>(&merged)) {
      plan.merge = std::move(*m);
      return plan;
    }
    plan.error = std::move(std::get<MergeError>(merged));
  }
  // What the merger refuses, PostgreSQL combines (a COPY's rows in the COPY's own
  // format: the combine database runs the COPY of the combine query).
  if (!options.allow_combine || (plan.error->sqlstate != "SPC01" && plan.error->sqlstate != "0A000"))
    return plan;
  auto combine_tree = unpack_tree(parsed.packed());
  CombineOptions combine = options.combine;
  std::vector<std::string> missing;
  combine.table_shape = [&](std::string_view t) -> const TableShape* {
    const TableShape* found = options.combine.table_shape ? options.combine.table_shape(t) : nullptr;
    if (!found) missing.emplace_back(t);
    return found;
  };
  auto combined = plan_combine(combine_tree.get(), combine);
  if (auto* c = std::get_if<CombinePlan>(&combined)) {
    if (plan.copy_out) {
      auto copy = copy_with_query(statement, c->combine_sql);
      if (!copy) return plan;
      c->combine_sql = std::move(*copy);
    }
    plan.combine = std::move(*c);
    plan.error.reset();
    plan.missing_shapes = std::move(missing);
  } else if (plan.error->sqlstate == "0A000") {
    plan.error = std::move(std::get<MergeError>(combined));
  }
  return plan;
}

namespace {

// The scan of the text being planned: its normalised form and literals.
thread_local ScannedText scanned;

std::size_t hash_of(std::string_view key) { return std::hash<std::string_view>{}(key); }

// `key` with the shape's key literals appended: each one's index and source text.
std::string completed(std::string_view key, std::string_view sql, const std::vector<std::uint32_t>& key_literals) {
  std::string out(key);
  out.push_back('\1');
  for (std::uint32_t i : key_literals) {
    out += std::to_string(i);
    out.push_back('=');
    out.append(literal_text(sql, scanned, i));
    out.push_back('\0');
  }
  return out;
}

}  // namespace

std::shared_ptr<const ScatterPlan> ScatterPlanner::plan(std::string_view sql, const ScatterOptions& options,
                                                        bool standard_strings) {
  // Texts read with standard_conforming_strings off are not cached (the same text can
  // mean another statement), as Router::plan does.
  if (!standard_strings) return std::make_shared<const ScatterPlan>(plan_scatter(sql, options, false));
  // The keys: the text (or its shape), a NUL (no query text holds one) and what the
  // options decide.
  const char decided = static_cast<char>('0' + options.allow_combine + 2 * options.combine_only);
  thread_local std::string key, shape_key;
  key.assign(sql);
  key.push_back('\0');
  key.push_back(decided);
  const std::size_t hash = hash_of(key);
  if (auto cached = cache_.find(key, hash)) return cached;
  bool learn = false;
  scanned = scan_text_once(sql);  // (the router has just scanned it: a copy into kept buffers)
  if (scanned.ok && !scanned.literals.empty()) {
    shape_key.assign(scanned.key);
    shape_key.push_back('\0');
    shape_key.push_back(decided);
    if (auto shaped = from_shape(sql, shape_key, learn)) return shaped;
  }
  auto p = std::make_shared<ScatterPlan>(plan_scatter(sql, options, true));
  p->bytes = footprint(*p);
  if (p->missing_shapes.empty()) cache_.insert(key, hash, p);
  if (learn && p->merge && !p->copy_out) learn_shape(sql, shape_key, *p, options);
  return p;
}

// A plan from the shape cache; nullptr when there is none. `learn`: the shape (or its
// completed key) is unknown, so a plan made from this text may teach it.
std::shared_ptr<const ScatterPlan> ScatterPlanner::from_shape(std::string_view sql, const std::string& key,
                                                              bool& learn) {
  std::shared_ptr<const Shape> shape = shapes_.find(key, hash_of(key));
  if (shape && !shape->refused && !shape->plan) {
    if (shape->key_literals.empty() || shape->key_literals.back() >= scanned.literals.size()) return nullptr;
    const std::string full = completed(key, sql, shape->key_literals);
    shape = shapes_.find(full, hash_of(full));
  }
  learn = shape == nullptr;
  if (!shape || shape->refused) return nullptr;
  auto p = std::make_shared<ScatterPlan>(*shape->plan);
  p->merge->shard_sql = shape->sql.shard_sql(sql, scanned);
  return p;
}

void ScatterPlanner::learn_shape(std::string_view sql, const std::string& key, const ScatterPlan& plan,
                                 const ScatterOptions& options) {
  // The parse plan_scatter just made (ParseTree keeps the last one).
  ParseTree parsed = ParseTree::parse(sql, true);
  if (!parsed.ok()) return;
  std::optional<ShapeTemplate> t = shape_template(parsed.packed(), sql, scanned, *plan.merge, options.merge);
  auto entry = [this](std::string_view k, std::shared_ptr<Shape> s) {
    s->bytes = sizeof(Shape) + s->sql.bytes() + 4 * s->key_literals.size() + (s->plan ? s->plan->bytes : 0);
    shapes_.insert(k, hash_of(k), std::move(s));
  };
  auto shape = std::make_shared<Shape>();
  if (!t) {
    shape->refused = true;
    return entry(key, shape);
  }
  auto shared = std::make_shared<ScatterPlan>(plan);
  shared->merge->shard_sql.clear();
  shape->plan = std::move(shared);
  shape->sql = std::move(*t);
  if (shape->sql.key_literals.empty()) return entry(key, shape);
  auto index = std::make_shared<Shape>();
  index->key_literals = shape->sql.key_literals;
  entry(key, index);
  entry(completed(key, sql, shape->sql.key_literals), shape);
}

}  // namespace splitpoint::routing
