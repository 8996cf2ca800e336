// The streaming merger (routing/merge/merger.hpp) driven as the executor drives it, with
// plans from the real planner and DataRows built by hand (text and binary).
// Expected outputs are what PostgreSQL 15 prints for the same data on one server
// (checked with psql; tests/integration/merge_differential.cpp checks many more).
#include <catch2/catch.hpp>

#include <locale.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merger.hpp"
#include "routing/merge/value.hpp"
#include "routing/merge/value_numeric.hpp"

using namespace splitpoint::routing;

namespace {

using Value = std::optional<std::string>;
using Values = std::vector<Value>;
const Value null;

std::string data_row(const Values& values) {
  std::string body;
  body.push_back(static_cast<char>(values.size() >> 8));
  body.push_back(static_cast<char>(values.size() & 0xff));
  for (const Value& v : values) {
    std::uint32_t len = v ? static_cast<std::uint32_t>(v->size()) : 0xffffffffU;
    for (int s = 24; s >= 0; s -= 8) body.push_back(static_cast<char>((len >> s) & 0xff));
    if (v) body += *v;
  }
  return body;
}

Values parse_row(std::string_view body) {
  Values out;
  std::vector<Field> fields;
  REQUIRE(split_data_row(body, fields));
  for (const Field& f : fields) out.push_back(f.null() ? null : Value(std::string(body.substr(f.off, f.len))));
  return out;
}

std::string be(std::uint64_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

struct Col {
  std::uint32_t type;
  std::int16_t format = 0;
};

struct Result {
  std::vector<Values> rows;
  std::optional<MergeError> error;
  std::size_t rows_read = 0;
  std::uint64_t emitted = 0;
};

// Plans `sql`, creates a merger for shards returning `cols`, and drives it: asked for
// "any shard", shards are served round-robin so their rows interleave.
Result run(const std::string& sql, const std::vector<Col>& cols, const std::vector<std::vector<Values>>& shards,
           MergerOptions options = {}) {
  Result result;
  auto planned = plan_merge(sql);
  if (auto* e = std::get_if<MergeError>(&planned)) {
    result.error = *e;
    return result;
  }
  const MergePlan& plan = std::get<MergePlan>(planned);
  std::vector<splitpoint::protocol::FieldDescription> fields;
  for (const Col& c : cols) {
    splitpoint::protocol::FieldDescription f;
    f.type_oid = static_cast<std::int32_t>(c.type);
    f.format = c.format;
    fields.push_back(f);
  }
  auto created = Merger::create(plan, shards.size(), fields, options);
  if (auto* e = std::get_if<MergeError>(&created)) {
    result.error = *e;
    return result;
  }
  Merger& m = *std::get<std::unique_ptr<Merger>>(created);
  std::vector<std::size_t> next(shards.size(), 0);
  for (std::size_t round = 0; round < 100000; ++round) {
    Merger::Step s = m.next();
    switch (s.kind) {
      case Merger::Step::Kind::emit: result.rows.push_back(parse_row(s.row)); break;
      case Merger::Step::Kind::need_row: {
        std::size_t i = s.shard;
        if (i == Merger::kAnyShard) {
          i = round % shards.size();
          while (next[i] > shards[i].size()) i = (i + 1) % shards.size();
        }
        if (next[i] < shards[i].size()) {
          m.push(i, data_row(shards[i][next[i]]));
          ++result.rows_read;
        } else {
          m.end_of_shard(i);
        }
        ++next[i];
        break;
      }
      case Merger::Step::Kind::done: result.emitted = m.rows_emitted(); return result;
      case Merger::Step::Kind::error: result.error = m.error(); return result;
    }
  }
  FAIL("merger did not finish");
  return result;
}

std::vector<Values> rows_of(const Result& r) {
  if (r.error) FAIL("merge failed: " << r.error->sqlstate << " " << r.error->message);
  return r.rows;
}

// The first column of every row.
std::vector<Value> column(const Result& r, std::size_t c = 0) {
  std::vector<Value> out;
  for (const Values& row : rows_of(r)) out.push_back(row.at(c));
  return out;
}

Values v(std::initializer_list<const char*> items) {
  Values out;
  for (const char* s : items) out.push_back(s == nullptr ? null : Value(s));
  return out;
}

const std::uint32_t kInt4 = pgtype::int4, kInt8 = pgtype::int8, kText = pgtype::text, kNumeric = pgtype::numeric,
                    kFloat8 = pgtype::float8, kBool = pgtype::boolean, kDate = pgtype::date;

}  // namespace

TEST_CASE("k-way merge interleaves sorted shards; ties and NULLS LAST", "[merge]") {
  Result r = run("SELECT id, k FROM t ORDER BY k", {{kInt4}, {kInt4}},
                 {{v({"1", "-5"}), v({"2", "3"}), v({"3", "3"}), v({"4", nullptr})},
                  {v({"5", "-7"}), v({"6", "3"}), v({"7", "10"})},
                  {},
                  {v({"8", "0"}), v({"9", nullptr})}});
  CHECK(column(r, 1) == std::vector<Value>{"-7", "-5", "0", "3", "3", "3", "10", null, null});
  CHECK(r.emitted == 9);
}

TEST_CASE("k-way merge: DESC, NULLS FIRST, several keys, hidden key", "[merge]") {
  // ORDER BY k DESC (NULLS FIRST by default), s ASC; s is not selected.
  Result r = run("SELECT id FROM t ORDER BY k DESC, s", {{kInt4}, {kInt4}, {kText}},
                 {{v({"1", nullptr, "b"}), v({"2", "5", "a"}), v({"3", "5", "c"}), v({"4", "1", "a"})},
                  {v({"5", nullptr, "a"}), v({"6", "5", "b"}), v({"7", "-1", "z"})}});
  CHECK(column(r) == std::vector<Value>{"5", "1", "2", "6", "3", "4", "7"});
  for (const Values& row : rows_of(r)) CHECK(row.size() == 1);  // hidden columns dropped

  r = run("SELECT k FROM t ORDER BY k NULLS FIRST", {{kInt4}}, {{v({nullptr}), v({"1"})}, {v({nullptr}), v({"0"})}});
  CHECK(column(r) == std::vector<Value>{null, null, "0", "1"});
  r = run("SELECT k FROM t ORDER BY k DESC NULLS LAST", {{kInt4}}, {{v({"1"}), v({nullptr})}, {v({"2"}), v({nullptr})}});
  CHECK(column(r) == std::vector<Value>{"2", "1", null, null});
}

TEST_CASE("LIMIT and OFFSET stop early", "[merge]") {
  std::vector<Values> a, b;
  for (int i = 0; i < 50; ++i) (i % 2 == 0 ? a : b).push_back(v({std::to_string(i).c_str()}));
  Result r = run("SELECT x FROM t ORDER BY x LIMIT 3 OFFSET 4", {{kInt4}}, {a, b});
  CHECK(column(r) == std::vector<Value>{"4", "5", "6"});
  CHECK(r.rows_read <= 9);  // not every row: done comes as soon as the limit is reached

  r = run("SELECT x FROM t LIMIT 2", {{kInt4}}, {a, b});
  CHECK(rows_of(r).size() == 2);
  r = run("SELECT x FROM t ORDER BY x LIMIT 0", {{kInt4}}, {a, b});
  CHECK(rows_of(r).empty());
  CHECK(r.rows_read == 0);
  r = run("SELECT x FROM t ORDER BY x OFFSET 48", {{kInt4}}, {a, b});
  CHECK(column(r) == std::vector<Value>{"48", "49"});

  MergerOptions options;
  std::vector<std::optional<std::string_view>> params{"2", "1"};
  options.params.values = params;
  r = run("SELECT x FROM t ORDER BY x LIMIT $1 OFFSET $2", {{kInt4}}, {a, b}, options);
  CHECK(column(r) == std::vector<Value>{"1", "2"});
  std::string eight = be(2, 8);
  std::int16_t binary[] = {1};
  std::vector<std::optional<std::string_view>> binary_params{std::string_view(eight), std::nullopt};  // 2, NULL
  options.params.values = binary_params;
  options.params.formats = binary;
  r = run("SELECT x FROM t ORDER BY x LIMIT $1 OFFSET $2", {{kInt4}}, {a, b}, options);
  CHECK(column(r) == std::vector<Value>{"0", "1"});

  options = {};
  std::vector<std::optional<std::string_view>> negative_limit{"-1", "0"}, negative_offset{"1", "-1"};
  options.params.values = negative_limit;
  r = run("SELECT x FROM t ORDER BY x LIMIT $1 OFFSET $2", {{kInt4}}, {a, b}, options);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "2201W");
  options.params.values = negative_offset;
  r = run("SELECT x FROM t ORDER BY x LIMIT $1 OFFSET $2", {{kInt4}}, {a, b}, options);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "2201X");
}

TEST_CASE("FETCH FIRST ... WITH TIES", "[merge]") {
  Result r = run("SELECT k, id FROM t ORDER BY k FETCH FIRST 2 ROWS WITH TIES", {{kInt4}, {kInt4}},
                 {{v({"1", "1"}), v({"2", "2"}), v({"3", "3"})}, {v({"2", "4"}), v({"2", "5"}), v({"4", "6"})}});
  CHECK(column(r) == std::vector<Value>{"1", "2", "2", "2"});
}

TEST_CASE("concatenation takes rows from any shard", "[merge]") {
  Result r = run("SELECT s FROM t WHERE x > 0", {{kText}}, {{v({"a"}), v({"b"})}, {v({"c"})}, {}});
  std::vector<Value> got = column(r);
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<Value>{"a", "b", "c"});
}

TEST_CASE("a plain concatenation lets the executor pass rows through", "[merge]") {
  auto make = [](const std::string& sql, std::size_t columns) {
    std::vector<splitpoint::protocol::FieldDescription> fields(columns);
    for (auto& f : fields) f.type_oid = kInt4;
    auto created = Merger::create(std::get<MergePlan>(plan_merge(sql)), 2, fields, {});
    return std::move(std::get<std::unique_ptr<Merger>>(created));
  };
  CHECK(make("SELECT k FROM t WHERE id BETWEEN 1 AND 9", 1)->passes_through());
  CHECK_FALSE(make("SELECT k FROM t ORDER BY k", 1)->passes_through());
  CHECK_FALSE(make("SELECT k FROM t LIMIT 3", 1)->passes_through());
  CHECK_FALSE(make("SELECT k FROM t OFFSET 1", 1)->passes_through());
  CHECK_FALSE(make("SELECT DISTINCT k FROM t", 1)->passes_through());
  CHECK_FALSE(make("SELECT max(k) FROM t", 1)->passes_through());
  CHECK_FALSE(make("SELECT k FROM t GROUP BY k", 1)->passes_through());

  auto m = make("SELECT k FROM t", 1);
  REQUIRE(m->next().kind == Merger::Step::Kind::need_row);
  m->passed(1, data_row(v({"7"})));
  REQUIRE(m->next().kind == Merger::Step::Kind::need_row);
  m->passed(0, data_row(v({"8"})));
  REQUIRE(m->next().kind == Merger::Step::Kind::need_row);
  m->end_of_shard(0);
  REQUIRE(m->next().kind == Merger::Step::Kind::need_row);
  m->end_of_shard(1);
  CHECK(m->next().kind == Merger::Step::Kind::done);
  CHECK(m->rows_emitted() == 2);

  m = make("SELECT k FROM t", 1);
  REQUIRE(m->next().kind == Merger::Step::Kind::need_row);
  m->passed(0, data_row(v({"1", "2"})));  // two fields, one expected
  REQUIRE(m->next().kind == Merger::Step::Kind::error);
  CHECK(m->error().sqlstate == "08P01");
}

TEST_CASE("aggregates without GROUP BY combine one partial row per shard", "[merge]") {
  // count(*), count(k), sum(k) int4->int8, min, max, avg(k) as sum + hidden count.
  Result r = run("SELECT count(*), count(k), sum(k), min(k), max(k), avg(k) FROM t",
                 {{kInt8}, {kInt8}, {kInt8}, {kInt4}, {kInt4}, {kInt8}, {kInt8}},
                 {{v({"2", "2", "3", "1", "2", "3", "2"})}, {v({"1", "0", nullptr, nullptr, nullptr, nullptr, "0"})}});
  REQUIRE(rows_of(r).size() == 1);
  CHECK(rows_of(r)[0] == v({"3", "2", "3", "1", "2", "1.5000000000000000"}));

  // Over no rows at all: counts are 0, the rest NULL.
  r = run("SELECT count(*), sum(k), avg(k), bool_and(b) FROM t", {{kInt8}, {kInt8}, {kInt8}, {kBool}, {kInt8}},
          {{v({"0", nullptr, nullptr, nullptr, "0"})}, {v({"0", nullptr, nullptr, nullptr, "0"})}});
  CHECK(rows_of(r)[0] == v({"0", nullptr, nullptr, nullptr}));
  r = run("SELECT count(*) FROM t", {{kInt8}}, {});
  CHECK(rows_of(r)[0] == v({"0"}));
}

TEST_CASE("sum and avg print as PostgreSQL does", "[merge]") {
  // sum(numeric): the largest scale; avg: numeric_div's scale.
  Result r = run("SELECT sum(n), avg(n) FROM t", {{kNumeric}, {kNumeric}, {kInt8}},
                 {{v({"1.50", "1.50", "1"})}, {v({"2.125", "2.125", "1"})}, {v({nullptr, nullptr, "0"})}});
  CHECK(rows_of(r)[0] == v({"3.625", "1.8125000000000000"}));
  // avg(int8) 100000002/2 (select_div_scale: weight 2 -> 12 digits).
  r = run("SELECT avg(i) FROM t", {{kNumeric}, {kInt8}}, {{v({"100000000", "1"})}, {v({"2", "1"})}});
  CHECK(rows_of(r)[0] == v({"50000001.000000000000"}));
  // avg of 0.0001, 0.0002, 0.0001 (PostgreSQL: 0.00013333333333333333).
  r = run("SELECT avg(n) FROM t", {{kNumeric}, {kInt8}}, {{v({"0.0003", "2"})}, {v({"0.0001", "1"})}});
  CHECK(rows_of(r)[0] == v({"0.00013333333333333333"}));
  // Negative averages round away from zero: avg(-1, -1, 0) = -0.66666666666666666667.
  r = run("SELECT avg(k) FROM t", {{kInt8}, {kInt8}}, {{v({"-2", "2"})}, {v({"0", "1"})}});
  CHECK(rows_of(r)[0] == v({"-0.66666666666666666667"}));
  // NaN and infinities in numeric sums.
  r = run("SELECT sum(n) FROM t", {{kNumeric}}, {{v({"Infinity"})}, {v({"-Infinity"})}});
  CHECK(rows_of(r)[0] == v({"NaN"}));
  // float8: shortest round-trip text, like float8out.
  r = run("SELECT sum(f), avg(f) FROM t", {{kFloat8}, {kFloat8}, {kInt8}}, {{v({"0.1", "0.1", "1"})}, {v({"0.2", "0.2", "1"})}});
  CHECK(rows_of(r)[0] == v({"0.30000000000000004", "0.15000000000000002"}));
  r = run("SELECT sum(f) FROM t", {{kFloat8}}, {{v({"1e+308"})}, {v({"1e+308"})}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "22003");
  r = run("SELECT sum(k) FROM t", {{kInt8}}, {{v({"9223372036854775807"})}, {v({"1"})}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "22003");
}

TEST_CASE("min, max and boolean aggregates", "[merge]") {
  Result r = run("SELECT min(s), max(s), bool_and(b), bool_or(b), min(d) FROM t", {{kText}, {kText}, {kBool}, {kBool}, {kDate}},
                 {{v({"b", "y", "t", "f", "2024-01-01"})}, {v({"a", "é", "f", "f", "0044-03-15 BC"})}, {v({nullptr, nullptr, nullptr, nullptr, nullptr})}});
  CHECK(rows_of(r)[0] == v({"a", "é", "f", "f", "0044-03-15 BC"}));
}

TEST_CASE("GROUP BY combines groups streaming in key order", "[merge]") {
  // SELECT g, count(*), sum(x), avg(x): shards sorted by g; groups meet across shards.
  Result r = run("SELECT g, count(*), sum(x), avg(x) FROM t GROUP BY g", {{kText}, {kInt8}, {kInt8}, {kInt8}, {kInt8}},
                 {{v({"a", "2", "3", "3", "2"}), v({"c", "1", "5", "5", "1"})},
                  {v({"a", "1", "1", "1", "1"}), v({"b", "4", "8", "8", "4"}), v({nullptr, "1", nullptr, nullptr, "0"})},
                  {v({"c", "2", "-1", "-1", "2"}), v({nullptr, "2", "4", "4", "1"})}});
  REQUIRE(rows_of(r).size() == 4);
  CHECK(rows_of(r)[0] == v({"a", "3", "4", "1.3333333333333333"}));
  CHECK(rows_of(r)[1] == v({"b", "4", "8", "2.0000000000000000"}));
  CHECK(rows_of(r)[2] == v({"c", "3", "4", "1.3333333333333333"}));
  CHECK(rows_of(r)[3] == v({nullptr, "3", "4", "4.0000000000000000"}));
}

TEST_CASE("GROUP BY with ORDER BY an aggregate sorts the combined groups", "[merge]") {
  Result r = run("SELECT g, sum(x) FROM t GROUP BY g ORDER BY sum(x) DESC, g LIMIT 2", {{kInt4}, {kInt8}},
                 {{v({"1", "5"}), v({"2", "1"}), v({"3", "7"})}, {v({"1", "1"}), v({"2", "9"})}});
  REQUIRE(rows_of(r).size() == 2);
  CHECK(rows_of(r)[0] == v({"2", "10"}));
  CHECK(rows_of(r)[1] == v({"3", "7"}));

  MergerOptions small;
  small.max_buffered_rows = 2;
  r = run("SELECT g, sum(x) FROM t GROUP BY g ORDER BY sum(x)", {{kInt4}, {kInt8}},
          {{v({"1", "5"}), v({"2", "1"}), v({"3", "7"})}, {}}, small);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "SPS02");
}

TEST_CASE("HAVING filters combined groups", "[merge]") {
  // HAVING count(*) > 2 AND max(x) < 10: count(*) is selected, max(x) a hidden column.
  const std::vector<Col> cols{{kInt4}, {kInt8}, {kInt4}};
  const std::vector<std::vector<Values>> shards{{v({"1", "2", "3"}), v({"2", "1", "50"}), v({"3", "1", "1"})},
                                                {v({"1", "1", "9"}), v({"2", "5", "1"}), v({"3", "1", "1"})}};
  Result r = run("SELECT g, count(*) FROM t GROUP BY g HAVING count(*) > 2 AND max(x) < 10", cols, shards);
  CHECK(rows_of(r) == std::vector<Values>{v({"1", "3"})});
  r = run("SELECT g, count(*) FROM t GROUP BY g HAVING NOT (count(*) > 2 AND max(x) < 10)", cols, shards);
  CHECK(column(r) == std::vector<Value>{"2", "3"});
  // count(*) > 2.5 compares as numeric; a string literal reads as the column's type.
  r = run("SELECT g, count(*) FROM t GROUP BY g HAVING count(*) > 2.5 OR g = '3'", {{kInt4}, {kInt8}},
          {{v({"1", "2"}), v({"2", "3"}), v({"3", "1"})}, {v({"1", "1"})}});
  CHECK(column(r) == std::vector<Value>{"1", "2", "3"});
  // Parameters; IN; NULLs make a comparison unknown.
  MergerOptions options;
  std::vector<std::optional<std::string_view>> params{"2"};
  options.params.values = params;
  // (A HAVING with parameters stays in the shard query as a hidden column, unused.)
  r = run("SELECT g, sum(x) FROM t GROUP BY g HAVING sum(x) >= $1 OR g IN (7, 8)", {{kInt4}, {kInt8}, {kBool}},
          {{v({"1", "1", "f"}), v({"2", "2", "t"}), v({"7", nullptr, "t"}), v({"9", nullptr, nullptr})}}, options);
  CHECK(column(r) == std::vector<Value>{"2", "7"});
  // A bare boolean aggregate as the condition.
  r = run("SELECT g FROM t GROUP BY g HAVING bool_or(b)", {{kInt4}, {kBool}},
          {{v({"1", "f"}), v({"2", "t"})}, {v({"1", "t"}), v({"3", nullptr})}});
  CHECK(column(r) == std::vector<Value>{"1", "2"});
  // HAVING on dates with an ISO literal.
  r = run("SELECT g FROM t GROUP BY g HAVING max(d) > '2000-01-01'", {{kInt4}, {kDate}},
          {{v({"1", "1999-12-31"}), v({"2", "2000-01-02"})}});
  CHECK(column(r) == std::vector<Value>{"2"});
  r = run("SELECT g FROM t GROUP BY g HAVING max(d) > 'yesterday'", {{kInt4}, {kDate}}, {{}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
  r = run("SELECT g FROM t GROUP BY g HAVING count(*) > 'x'", {{kInt4}, {kInt8}}, {{}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "22P02");
}

TEST_CASE("DISTINCT drops repeats across shards", "[merge]") {
  // Sorted: SELECT DISTINCT a, b ORDER BY b (the shards sort by b, a).
  Result r = run("SELECT DISTINCT a, b FROM t ORDER BY b", {{kInt4}, {kText}},
                 {{v({"1", "x"}), v({"2", "x"}), v({"1", "y"})}, {v({"1", "x"}), v({"1", "y"}), v({"3", "y"})}});
  CHECK(rows_of(r) == std::vector<Values>{v({"1", "x"}), v({"2", "x"}), v({"1", "y"}), v({"3", "y"})});
  // numeric 1.0 = 1.00: one row.
  r = run("SELECT DISTINCT n FROM t", {{kNumeric}}, {{v({"1.0"}), v({"2"})}, {v({"1.00"})}});
  CHECK(rows_of(r).size() == 2);
  // Hashed (the columns of * cannot be listed), and its cap.
  r = run("SELECT DISTINCT * FROM t", {{kInt4}}, {{v({"1"}), v({"2"})}, {v({"2"}), v({"3"})}});
  CHECK(rows_of(r).size() == 3);
  MergerOptions small;
  small.max_buffered_rows = 2;
  r = run("SELECT DISTINCT * FROM t", {{kInt4}}, {{v({"1"}), v({"2"})}, {v({"2"}), v({"3"})}}, small);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "SPS02");
  // DISTINCT ON keeps the first row of each key in ORDER BY order.
  r = run("SELECT DISTINCT ON (g) g, x FROM t ORDER BY g, x DESC", {{kInt4}, {kInt4}},
          {{v({"1", "5"}), v({"2", "1"})}, {v({"1", "7"}), v({"3", "0"})}});
  CHECK(rows_of(r) == std::vector<Values>{v({"1", "7"}), v({"2", "1"}), v({"3", "0"})});
}

TEST_CASE("numeric, float and integer order as PostgreSQL's", "[merge]") {
  Result r = run("SELECT n FROM t ORDER BY n", {{kNumeric}},
                 {{v({"-Infinity"}), v({"-5"}), v({"0"}), v({"1.1"}), v({"Infinity"})},
                  {v({"-0.5"}), v({"0.000"}), v({"1.10"}), v({"100"}), v({"NaN"})}});
  CHECK(column(r) == std::vector<Value>{"-Infinity", "-5", "-0.5", "0", "0.000", "1.1", "1.10", "100", "Infinity", "NaN"});
  r = run("SELECT f FROM t ORDER BY f DESC", {{kFloat8}},
          {{v({"NaN"}), v({"1e+300"}), v({"-0"}), v({"-Infinity"})}, {v({"Infinity"}), v({"2.5"}), v({"0"}), v({"-1e-05"})}});
  CHECK(column(r) == std::vector<Value>{"NaN", "Infinity", "1e+300", "2.5", "-0", "0", "-1e-05", "-Infinity"});
  r = run("SELECT i FROM t ORDER BY i", {{kInt8}}, {{v({"-9223372036854775808"}), v({"10"})}, {v({"9"}), v({"9223372036854775807"})}});
  CHECK(column(r) == std::vector<Value>{"-9223372036854775808", "9", "10", "9223372036854775807"});
}

TEST_CASE("text orders by the collation", "[merge]") {
  const std::vector<std::vector<Values>> shards{{v({"B"}), v({"a"}), v({"é"})}, {v({"Z"}), v({"b"}), v({"日本"})}};
  Result r = run("SELECT s FROM t ORDER BY s", {{kText}}, shards);  // "C": bytes
  CHECK(column(r) == std::vector<Value>{"B", "Z", "a", "b", "é", "日本"});
  r = run("SELECT s FROM t ORDER BY s COLLATE \"C\" DESC", {{kText}},
          {{v({"é"}), v({"b"}), v({"B"})}, {v({"日本"}), v({"a"}), v({"Z"})}});
  CHECK(column(r) == std::vector<Value>{"日本", "é", "b", "a", "Z", "B"});
  // character(n): trailing spaces do not count.
  r = run("SELECT c FROM t ORDER BY c", {{pgtype::bpchar}}, {{v({"ab  "}), v({"b   "})}, {v({"ab"}), v({"aba "})}});
  CHECK(column(r) == std::vector<Value>{"ab  ", "ab", "aba ", "b   "});
  // A libc locale, when this machine has one.
  locale_t probe = newlocale(LC_COLLATE_MASK, "en_US.UTF-8", nullptr);
  if (probe != nullptr) {
    freelocale(probe);
    MergerOptions en;
    en.collation = "en_US.UTF-8";
    r = run("SELECT s FROM t ORDER BY s", {{kText}}, {{v({"a"}), v({"B"}), v({"é"})}, {v({"b"}), v({"e"}), v({"Z"})}}, en);
    CHECK(column(r) == std::vector<Value>{"a", "b", "B", "e", "é", "Z"});
  }
  MergerOptions missing;
  missing.collation = "xx_NOPE.UTF-8";
  r = run("SELECT s FROM t ORDER BY s", {{kText}}, shards, missing);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
}

TEST_CASE("dates, times, uuids and booleans order as PostgreSQL's", "[merge]") {
  Result r = run("SELECT d FROM t ORDER BY d", {{kDate}},
                 {{v({"-infinity"}), v({"0044-03-15 BC"}), v({"2024-01-01"})}, {v({"0001-01-01 BC"}), v({"1999-12-31"}), v({"10000-01-01"}), v({"infinity"})}});
  CHECK(column(r) == std::vector<Value>{"-infinity", "0044-03-15 BC", "0001-01-01 BC", "1999-12-31", "2024-01-01", "10000-01-01", "infinity"});
  r = run("SELECT ts FROM t ORDER BY ts", {{pgtype::timestamptz}},
          {{v({"2024-03-01 12:00:00+05:30"}), v({"2024-03-01 12:00:00+00"})}, {v({"2024-03-01 08:00:00.5+01"}), v({"2024-03-01 03:00:00-08"})}});
  CHECK(column(r) == std::vector<Value>{"2024-03-01 12:00:00+05:30", "2024-03-01 08:00:00.5+01", "2024-03-01 03:00:00-08",
                                        "2024-03-01 12:00:00+00"});
  r = run("SELECT ts FROM t ORDER BY ts DESC", {{pgtype::timestamp}},
          {{v({"2024-03-01 12:00:00.000001"}), v({"2024-03-01 12:00:00"})}, {v({"2024-03-01 12:00:00.5"}), v({"0001-01-01 00:00:00 BC"})}});
  CHECK(column(r) == std::vector<Value>{"2024-03-01 12:00:00.5", "2024-03-01 12:00:00.000001", "2024-03-01 12:00:00", "0001-01-01 00:00:00 BC"});
  r = run("SELECT t FROM x ORDER BY t", {{pgtype::time}}, {{v({"09:00:00"}), v({"23:59:59.999999"})}, {v({"10:00:00"}), v({"24:00:00"})}});
  CHECK(column(r) == std::vector<Value>{"09:00:00", "10:00:00", "23:59:59.999999", "24:00:00"});
  r = run("SELECT u FROM t ORDER BY u", {{pgtype::uuid}},
          {{v({"00000000-0000-0000-0000-00000000000a"}), v({"f0000000-0000-0000-0000-000000000000"})},
           {v({"00000000-0000-0000-0000-000000000009"})}});
  CHECK(column(r) == std::vector<Value>{"00000000-0000-0000-0000-000000000009", "00000000-0000-0000-0000-00000000000a",
                                        "f0000000-0000-0000-0000-000000000000"});
  r = run("SELECT b FROM t ORDER BY b", {{kBool}}, {{v({"f"}), v({"t"})}, {v({"f"}), v({nullptr})}});
  CHECK(column(r) == std::vector<Value>{"f", "f", "t", null});
  // Not ISO DateStyle: refuse rather than guess.
  r = run("SELECT d FROM t ORDER BY d", {{kDate}}, {{v({"01/15/2024"})}, {}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
}

TEST_CASE("binary format values merge and combine", "[merge]") {
  auto i4 = [](std::int32_t x) { return Value(be(static_cast<std::uint32_t>(x), 4)); };
  auto i8 = [](std::int64_t x) { return Value(be(static_cast<std::uint64_t>(x), 8)); };
  Result r = run("SELECT k, id FROM t ORDER BY k DESC, id", {{kInt4, 1}, {kInt8, 1}},
                 {{{i4(7), i8(1)}, {i4(-3), i8(2)}}, {{i4(7), i8(0)}, {i4(0), i8(5)}, {i4(-100), i8(4)}}});
  CHECK(column(r, 0) == std::vector<Value>{i4(7), i4(7), i4(0), i4(-3), i4(-100)});
  CHECK(column(r, 1) == std::vector<Value>{i8(0), i8(1), i8(5), i8(2), i8(4)});
  // count and sum in binary; avg in binary numeric (hidden count in text).
  r = run("SELECT count(*), sum(k), avg(k) FROM t", {{kInt8, 1}, {kInt8, 1}, {kInt8, 1}, {kInt8, 0}},
          {{{i8(2), i8(3), i8(3), Value("2")}}, {{i8(1), i8(-10), i8(-10), Value("1")}}});
  REQUIRE(rows_of(r).size() == 1);
  const Values row = rows_of(r)[0];
  CHECK(row[0] == i8(3));
  CHECK(row[1] == i8(-7));
  std::string expected;
  Decimal::parse("-2.3333333333333333")->to_binary(expected);
  CHECK(row[2] == expected);
  // numeric binary sort keys.
  std::string a, b, c;
  Decimal::parse("-1.5")->to_binary(a);
  Decimal::parse("10000.0001")->to_binary(b);
  Decimal::parse("NaN")->to_binary(c);
  r = run("SELECT n FROM t ORDER BY n", {{kNumeric, 1}}, {{{Value(a)}, {Value(c)}}, {{Value(b)}}});
  CHECK(column(r) == std::vector<Value>{a, b, c});
}

TEST_CASE("the merger refuses what it cannot compare or combine exactly", "[merge]") {
  Result r = run("SELECT i FROM t ORDER BY i", {{1186}}, {{}});  // interval
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
  r = run("SELECT avg(r) FROM t", {{pgtype::float4}, {kInt8}}, {{}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "SPC01");
  r = run("SELECT sum(m) FROM t", {{790}}, {{}});  // money
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
  MergerOptions rounded;
  rounded.extra_float_digits = 0;
  r = run("SELECT sum(f) FROM t", {{kFloat8}}, {{}}, rounded);
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");
}

TEST_CASE("a shard out of order, a malformed row and a wrong shard are errors", "[merge]") {
  Result r = run("SELECT k FROM t ORDER BY k", {{kInt4}}, {{v({"2"}), v({"1"})}, {v({"5"})}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "XX000");
  r = run("SELECT k FROM t ORDER BY k", {{kInt4}}, {{v({"1", "2"})}});  // two fields, one expected
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "08P01");
  r = run("SELECT k FROM t ORDER BY k", {{kInt4}}, {{v({"x"})}});
  REQUIRE(r.error);
  CHECK(r.error->sqlstate == "0A000");

  auto planned = plan_merge("SELECT k FROM t ORDER BY k");
  std::vector<splitpoint::protocol::FieldDescription> fields(1);
  fields[0].type_oid = kInt4;
  auto created = Merger::create(std::get<MergePlan>(planned), 2, fields, {});
  Merger& m = *std::get<std::unique_ptr<Merger>>(created);
  Merger::Step s = m.next();
  REQUIRE(s.kind == Merger::Step::Kind::need_row);
  CHECK(s.shard == 0);
  m.push(1, data_row(v({"1"})));  // not the shard asked for
  CHECK(m.next().kind == Merger::Step::Kind::error);
}
