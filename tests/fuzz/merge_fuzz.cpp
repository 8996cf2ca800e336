// libFuzzer target for the streaming merger (routing/merge/): one of a set of
// statements the merger answers (ORDER BY with NULLS and collations, LIMIT/OFFSET,
// aggregates, GROUP BY, HAVING, DISTINCT, keyset pagination) and any rows from three
// shards, as DataRows whose values come from the input in text or binary format.
// Shards' rows need not be valid for their types, nor sorted as the statement says:
// the merger must then refuse or answer, never crash, hang or read out of bounds.
// Properties: it finishes within a bounded number of steps; every row it emits is a
// well-formed DataRow; it never emits more rows than LIMIT says.
// Build and run: tests/fuzz/run
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "routing/merge/merge_plan.hpp"
#include "routing/merge/merger.hpp"
#include "routing/merge/value.hpp"
#include "tests/fuzz/fuzz_world.hpp"

using namespace splitpoint;
using namespace splitpoint::routing;

namespace {

struct Case {
  const char* sql;
  std::vector<std::uint32_t> types;  // the shards' result columns, hidden ones included
  std::optional<std::uint64_t> limit;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"SELECT id, name FROM users ORDER BY id", {pgtype::int8, pgtype::text}, std::nullopt},
      {"SELECT id, name FROM users ORDER BY name DESC NULLS LAST, id LIMIT 5 OFFSET 2", {pgtype::int8, pgtype::text}, 5},
      {"SELECT count(*), sum(total), min(total), max(total) FROM orders", {pgtype::int8, pgtype::numeric, pgtype::numeric, pgtype::numeric}, std::nullopt},
      {"SELECT user_id, count(*) FROM orders GROUP BY user_id HAVING count(*) > 1 ORDER BY 2 DESC, 1", {pgtype::int8, pgtype::int8}, std::nullopt},
      {"SELECT DISTINCT name FROM users ORDER BY name", {pgtype::text}, std::nullopt},
      {"SELECT avg(total) FROM orders", {pgtype::numeric, pgtype::int8}, std::nullopt},
      {"SELECT id, total FROM orders WHERE (total, id) > (1, 2) ORDER BY total, id LIMIT 10", {pgtype::int8, pgtype::numeric}, 10},
      {"SELECT bool_and(id > 0), bool_or(id > 5), count(DISTINCT name) FROM users", {pgtype::boolean, pgtype::boolean, pgtype::int8}, std::nullopt},
      {"SELECT day, sum(n)::float8 FROM (SELECT id::date AS day, 1.5::float8 AS n FROM events) s GROUP BY day ORDER BY day", {pgtype::date, pgtype::float8}, std::nullopt},
  };
  return c;
}

// A DataRow body of `n` values taken from the input: a length byte (0xff: NULL) and
// that many bytes each.
std::string data_row(std::size_t n, const std::uint8_t*& p, const std::uint8_t* end) {
  std::string body;
  body.push_back(static_cast<char>(n >> 8));
  body.push_back(static_cast<char>(n & 0xff));
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t len = p < end ? *p++ : 0xff;
    if (len == 0xff) {
      body.append("\xff\xff\xff\xff", 4);
      continue;
    }
    len = std::min<std::uint32_t>(len % 32, static_cast<std::uint32_t>(end - p));
    for (int s = 24; s >= 0; s -= 8) body.push_back(static_cast<char>((len >> s) & 0xff));
    body.append(reinterpret_cast<const char*>(p), len);
    p += len;
  }
  return body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > 16384) return 0;
  const Case& c = cases()[data[0] % cases().size()];
  const bool binary = (data[1] & 1) != 0;
  static std::vector<std::optional<MergePlan>> plans = [] {
    std::vector<std::optional<MergePlan>> v;
    for (const Case& k : cases()) {
      auto p = plan_merge(k.sql);
      v.push_back(std::holds_alternative<MergePlan>(p) ? std::optional<MergePlan>(std::get<MergePlan>(p)) : std::nullopt);
    }
    return v;
  }();
  const auto& plan = plans[data[0] % cases().size()];
  if (!plan) return 0;
  std::vector<protocol::FieldDescription> fields;
  for (auto t : c.types) {
    protocol::FieldDescription f;
    f.type_oid = static_cast<std::int32_t>(t);
    f.format = binary ? 1 : 0;
    fields.push_back(f);
  }
  MergerOptions options;
  options.max_buffered_rows = 1000;
  auto created = Merger::create(*plan, 3, fields, options);
  if (!std::holds_alternative<std::unique_ptr<Merger>>(created)) return 0;
  Merger& m = *std::get<std::unique_ptr<Merger>>(created);
  const std::uint8_t* p = data + 2;
  const std::uint8_t* end = data + size;
  std::vector<bool> ended(3, false);
  std::uint64_t emitted = 0;
  for (std::size_t steps = 0;; ++steps) {
    if (steps > 100000) fuzz::fail("merge_fuzz", "the merger did not finish");
    Merger::Step s = m.next();
    switch (s.kind) {
      case Merger::Step::Kind::emit: {
        std::vector<Field> out;
        if (!split_data_row(s.row, out)) fuzz::fail("merge_fuzz", "emitted a malformed DataRow");
        if (c.limit && ++emitted > *c.limit) fuzz::fail("merge_fuzz", "more rows than the LIMIT");
        break;
      }
      case Merger::Step::Kind::need_row: {
        std::size_t i = s.shard == Merger::kAnyShard ? (steps % 3) : s.shard;
        if (s.shard == Merger::kAnyShard)
          for (int k = 0; k < 3 && ended[i]; ++k) i = (i + 1) % 3;
        // A shard ends when the input runs out, or on a zero selector byte.
        if (p >= end || ended[i] || *p == 0) {
          if (p < end && *p == 0) ++p;
          if (!ended[i]) m.end_of_shard(i);
          ended[i] = true;
          break;
        }
        ++p;
        m.push(i, data_row(c.types.size(), p, end));
        break;
      }
      case Merger::Step::Kind::done:
      case Merger::Step::Kind::error:
        return 0;
    }
  }
}
