// MergePlan's presentation: its one-line description, the shard Bind's result formats
// and the client's RowDescription.
#include "routing/merge/merge_plan.hpp"
#include "routing/merge/value.hpp"

namespace splitpoint::routing {

namespace {

std::string column_label(const ShardColumn& c) {
  switch (c.from) {
    case ShardColumn::From::start: return std::to_string(c.index + 1);
    case ShardColumn::From::visible_end: return "visible-" + std::to_string(c.index);
    case ShardColumn::From::hidden: return "hidden" + std::to_string(c.index + 1);
  }
  return "?";
}

std::string keys_label(const std::vector<SortKey>& keys) {
  std::string out;
  for (const SortKey& k : keys) {
    if (!out.empty()) out += ", ";
    out += column_label(k.column);
    if (k.descending) out += " DESC";
    if (k.nulls_first != k.descending) out += k.nulls_first ? " NULLS FIRST" : " NULLS LAST";
    if (!k.collation.empty()) out += " COLLATE \"" + k.collation + "\"";
  }
  return out;
}

std::string bound_label(const RowBound& b) {
  return b.kind == RowBound::Kind::param ? "$" + std::to_string(b.param + 1) : std::to_string(b.value);
}

const char* combine_label(Combine c) {
  switch (c) {
    case Combine::count: return "count";
    case Combine::sum: return "sum";
    case Combine::min: return "min";
    case Combine::max: return "max";
    case Combine::avg: return "avg";
    case Combine::bool_and: return "bool_and";
    case Combine::bool_or: return "bool_or";
  }
  return "?";
}

}  // namespace

std::string MergePlan::describe() const {
  std::string out = shard_order.empty() ? "concatenate" : "sorted merge on " + keys_label(shard_order);
  if (aggregate) {
    out += group_keys.empty() ? "; aggregate all rows" : "; combine groups on";
    for (std::size_t i = 0; i < group_keys.size(); ++i) out += (i == 0 ? " " : ", ") + column_label(group_keys[i]);
    for (const AggregateColumn& a : aggregates) out += std::string("; ") + column_label(a.column) + "=" + combine_label(a.combine);
  }
  if (having) out += "; having";
  if (distinct == Distinct::sorted) out += distinct_on.empty() ? "; distinct (sorted)" : "; distinct on (sorted)";
  if (distinct == Distinct::hashed) out += "; distinct (hashed)";
  if (!final_order.empty()) out += "; sort on " + keys_label(final_order);
  if (offset.kind != RowBound::Kind::none) out += "; offset " + bound_label(offset);
  if (limit.kind != RowBound::Kind::none) out += "; limit " + bound_label(limit) + (with_ties ? " with ties" : "");
  if (hidden_columns > 0) out += "; " + std::to_string(hidden_columns) + " hidden column(s)";
  return out;
}

std::vector<std::int16_t> MergePlan::shard_result_formats(std::span<const std::int16_t> client_formats,
                                                          std::size_t shard_columns) const {
  std::vector<std::int16_t> out(shard_columns, 0);
  std::size_t visible = shard_columns >= hidden_columns ? shard_columns - hidden_columns : 0;
  for (std::size_t i = 0; i < visible; ++i) {
    if (client_formats.size() == 1) out[i] = client_formats[0];
    else if (i < client_formats.size()) out[i] = client_formats[i];
  }
  return out;
}

std::optional<std::vector<protocol::FieldDescription>> client_row_description(
    const MergePlan& plan, std::span<const protocol::FieldDescription> shard_fields) {
  if (shard_fields.size() < plan.hidden_columns) return std::nullopt;
  std::vector<protocol::FieldDescription> out(shard_fields.begin(), shard_fields.end() - static_cast<std::ptrdiff_t>(plan.hidden_columns));
  for (const AggregateColumn& a : plan.aggregates) {
    if (a.combine != Combine::avg) continue;
    std::optional<std::size_t> at = a.column.resolve(shard_fields.size(), plan.hidden_columns);
    if (!at) return std::nullopt;
    if (*at >= out.size()) continue;  // a hidden avg (HAVING / ORDER BY only)
    protocol::FieldDescription& f = out[*at];
    f.table_oid = 0;
    f.column = 0;
    f.type_modifier = -1;
    if (f.type_oid == static_cast<std::int32_t>(pgtype::int8) || f.type_oid == static_cast<std::int32_t>(pgtype::numeric)) {
      f.type_oid = static_cast<std::int32_t>(pgtype::numeric);  // avg of integers and numerics
      f.type_size = -1;
    } else if (f.type_oid == static_cast<std::int32_t>(pgtype::float8)) {
      f.type_size = 8;
    } else {
      return std::nullopt;  // avg(real), avg(interval), ...: refused by the merger too
    }
  }
  return out;
}

}  // namespace splitpoint::routing
