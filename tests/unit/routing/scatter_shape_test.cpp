// Scatter plans shared by the texts of one shape (routing/merge/scatter_shape.hpp): a
// text planned from its shape's template must get exactly the plan it would get alone,
// and a new text of a known shape is not parsed.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "routing/merge/scatter_plan.hpp"
#include "routing/pg_tree.hpp"
#include "routing/text_scan.hpp"

using namespace splitpoint::routing;

namespace {

ScatterOptions options() {
  ScatterOptions o;
  o.merge.is_reference_table = [](std::string_view t) { return t == "countries"; };
  o.combine.is_sharded_table = [](std::string_view, std::string_view t) { return t == "orders"; };
  return o;
}

// `second` planned after `first` (from its shape's template when `shared`, else parsed)
// equals `second` planned alone, field by field and in its shard statement.
void check_same_as_alone(const std::string& first, const std::string& second, bool shared) {
  INFO(first << "  then  " << second);
  ScatterPlanner planner;
  const auto o = options();
  planner.plan(first, o);
  const auto before = ParseTree::parses_on_this_thread();
  auto shaped = planner.plan(second, o);
  CHECK(ParseTree::parses_on_this_thread() - before == (shared ? 0 : 1));
  ScatterPlan alone = plan_scatter(second, o);
  REQUIRE(shaped->merge.has_value() == alone.merge.has_value());
  REQUIRE(shaped->error.has_value() == alone.error.has_value());
  if (!alone.merge) return;
  // The shard statements: the same tokens and literal values (a template keeps the
  // literals as written: E'a\tb' where the deparser writes 'a<tab>b').
  ScannedText a, b;
  REQUIRE(scan_text(shaped->merge->shard_sql, a));
  REQUIRE(scan_text(alone.merge->shard_sql, b));
  CHECK(a.key == b.key);
  REQUIRE(a.literals.size() == b.literals.size());
  for (std::size_t i = 0; i < a.literals.size(); ++i)
    CHECK(literal_value(shaped->merge->shard_sql, a.literals[i]) == literal_value(alone.merge->shard_sql, b.literals[i]));
  MergePlan x = *shaped->merge, y = *alone.merge;
  x.shard_sql.clear();
  y.shard_sql.clear();
  CHECK(x == y);
  if (alone.error) CHECK(shaped->error->message == alone.error->message);
}

}  // namespace

TEST_CASE("a text of a known shape gets the plan it would get alone", "[scatter][shape]") {
  struct Pair {
    std::string first, second;
    bool shared;  // from the template of the first's shape, not parsed
  };
  const std::vector<Pair> pairs = {
      {"SELECT * FROM orders WHERE amount > 10", "SELECT * FROM orders WHERE amount > 20", true},
      {"SELECT status, count(*) FROM orders WHERE qty BETWEEN 1 AND 5 GROUP BY status ORDER BY status",
       "SELECT status, count(*) FROM orders WHERE qty BETWEEN 100 AND 500 GROUP BY status ORDER BY status", true},
      {"SELECT sum(amount) FROM orders WHERE customer = 'ann'", "SELECT sum(amount) FROM orders WHERE customer = 'it''s'",
       true},
      {"SELECT sum(amount) FROM orders WHERE customer = 'ann'", "SELECT sum(amount) FROM orders WHERE customer = 7", true},
      {"SELECT order_id FROM orders WHERE created_at > DATE '2024-01-01' ORDER BY order_id LIMIT 10",
       "SELECT order_id FROM orders WHERE created_at > DATE '2025-06-30' ORDER BY order_id LIMIT 10", true},
      // Key literals: a template per value.
      {"SELECT order_id FROM orders ORDER BY order_id LIMIT 10", "SELECT order_id FROM orders ORDER BY order_id LIMIT 20",
       false},
      {"SELECT order_id FROM orders ORDER BY order_id LIMIT 10 OFFSET 5",
       "SELECT order_id FROM orders ORDER BY order_id LIMIT 10 OFFSET 50", false},
      {"SELECT order_id, amount FROM orders ORDER BY 1", "SELECT order_id, amount FROM orders ORDER BY 2", false},
      {"SELECT status, count(*) FROM orders WHERE qty > 1 GROUP BY 1",
       "SELECT status, count(*) FROM orders WHERE qty > 2 GROUP BY 1", true},
      {"SELECT status, sum(qty) FROM orders GROUP BY status HAVING sum(qty) > 5",
       "SELECT status, sum(qty) FROM orders GROUP BY status HAVING sum(qty) > 700", false},
      {"SELECT status, sum(qty) FROM orders WHERE qty > 1 GROUP BY status HAVING sum(qty) > 5",
       "SELECT status, sum(qty) FROM orders WHERE qty > 2 GROUP BY status HAVING sum(qty) > 5", true},
      {"SELECT DISTINCT ON (status) status, amount FROM orders WHERE qty > 1 ORDER BY status, amount",
       "SELECT DISTINCT ON (status) status, amount FROM orders WHERE qty > 9 ORDER BY status, amount", true},
      // Literals in the select list, sub-selects, IN lists, casts, E'' and $$ strings.
      {"SELECT order_id, 'a' AS tag, amount * 2 FROM orders WHERE status IN ('x', 'y') ORDER BY order_id",
       "SELECT order_id, 'b' AS tag, amount * 3 FROM orders WHERE status IN ('p', 'q') ORDER BY order_id", true},
      {"SELECT count(*) FROM orders WHERE customer IN (SELECT name FROM countries WHERE code = 'fr' LIMIT 3)",
       "SELECT count(*) FROM orders WHERE customer IN (SELECT name FROM countries WHERE code = 'de' LIMIT 4)", true},
      {"SELECT max(amount) FROM orders WHERE status = E'a\\nb' OR status = $$x$$",
       "SELECT max(amount) FROM orders WHERE status = E'c\\td' OR status = $$y'z$$", true},
      {"SELECT avg(amount::numeric(10, 2)) FROM orders WHERE amount > 1.5e3",
       "SELECT avg(amount::numeric(10, 2)) FROM orders WHERE amount > 2.5e3", true},
      {"SELECT \"a$1000001\" FROM orders WHERE qty = 1", "SELECT \"a$1000001\" FROM orders WHERE qty = 2", true},
      // A literal both grouped by and selected (the planner matches the two
      // expressions): both are key literals.
      {"SELECT date_trunc('day', created_at), count(*) FROM orders WHERE qty > 1 GROUP BY date_trunc('day', created_at)",
       "SELECT date_trunc('day', created_at), count(*) FROM orders WHERE qty > 2 GROUP BY date_trunc('day', created_at)",
       true},
      {"SELECT date_trunc('day', created_at), count(*) FROM orders GROUP BY date_trunc('day', created_at)",
       "SELECT date_trunc('hour', created_at), count(*) FROM orders GROUP BY date_trunc('hour', created_at)", false},
      {"SELECT date_trunc('day', created_at), count(*) FROM orders GROUP BY date_trunc('day', created_at)",
       "SELECT date_trunc('hour', created_at), count(*) FROM orders GROUP BY date_trunc('day', created_at)", false},
      {"SELECT qty + 1, count(*) FROM orders GROUP BY qty + 1 ORDER BY qty + 1",
       "SELECT qty + 2, count(*) FROM orders GROUP BY qty + 2 ORDER BY qty + 2", false},
      // A folded minus sign: planned per text.
      {"SELECT * FROM orders WHERE amount > -5", "SELECT * FROM orders WHERE amount > -7", false},
      // Not merged: combined or refused, as alone.
      {"SELECT customer, count(DISTINCT status) FROM orders WHERE qty > 1 GROUP BY customer",
       "SELECT customer, count(DISTINCT status) FROM orders WHERE qty > 2 GROUP BY customer", false},
      {"SELECT order_id FROM orders ORDER BY 1", "SELECT order_id FROM orders ORDER BY 9", false},
  };
  for (const Pair& p : pairs) check_same_as_alone(p.first, p.second, p.shared);
}

TEST_CASE("a new text of a known shape is neither parsed nor planned", "[scatter][shape][parse]") {
  ScatterPlanner planner;
  const auto o = options();
  planner.plan("SELECT status, count(*) FROM orders WHERE qty > 1 GROUP BY status ORDER BY status LIMIT 5", o);
  auto before = ParseTree::parses_on_this_thread();
  auto p = planner.plan("select status, count(*)  FROM orders WHERE qty > 42 /* c */ GROUP BY status ORDER BY status LIMIT 5", o);
  CHECK(ParseTree::parses_on_this_thread() == before);
  REQUIRE(p->merge);
  CHECK(p->merge->shard_sql.find("qty > 42") != std::string::npos);
  // Another LIMIT is another template: planned once, then shared.
  planner.plan("SELECT status, count(*) FROM orders WHERE qty > 1 GROUP BY status ORDER BY status LIMIT 6", o);
  before = ParseTree::parses_on_this_thread();
  p = planner.plan("SELECT status, count(*) FROM orders WHERE qty > 3 GROUP BY status ORDER BY status LIMIT 6", o);
  CHECK(ParseTree::parses_on_this_thread() == before);
  CHECK(p->merge->limit.value == 6);
  // A shape that cannot be shared is planned per text.
  planner.plan("SELECT * FROM orders WHERE amount > -5", o);
  before = ParseTree::parses_on_this_thread();
  planner.plan("SELECT * FROM orders WHERE amount > -6", o);
  CHECK(ParseTree::parses_on_this_thread() - before == 1);
  // DDL forgets shapes too.
  planner.clear();
  CHECK(planner.entries() == 0);
}

TEST_CASE("a shape's plans share what execution learns", "[scatter][shape]") {
  ScatterPlanner planner;
  const auto o = options();
  auto first = planner.plan("SELECT max(amount) FROM orders WHERE qty > 1", o);
  auto second = planner.plan("SELECT max(amount) FROM orders WHERE qty > 2", o);
  first->merge_refused->store(true);  // the merger refused the shards' column types
  CHECK(second->merge_refused->load());
}
