// Merger::create: resolves a MergePlan against the shards' RowDescription (column
// positions, types, formats, collations, bound parameters) and refuses, before any row
// is read, a merge it could not do exactly.
#include <charconv>

#include "routing/merge/merger_impl.hpp"
#include "routing/merge/merger.hpp"

namespace splitpoint::routing {

namespace {

using Impl = Merger::Impl;
using merge_detail::KeySpec;

struct Setup {
  Impl& m;
  const MergePlan& plan;
  const MergerOptions& options;
  const Collation* database = nullptr;
  std::optional<MergeError> error;
  std::vector<std::uint32_t> shard_types;

  bool fail(std::string sqlstate, std::string message) {
    if (!error) error = MergeError{std::move(sqlstate), std::move(message)};
    return false;
  }

  std::optional<std::size_t> column(const ShardColumn& c) {
    std::optional<std::size_t> at = c.resolve(m.columns, m.hidden);
    if (!at) fail("XX000", "the shards returned fewer columns than the merge plan expects");
    return at;
  }

  const Collation* collation(const std::string& name) {
    if (name.empty()) return database;
    std::optional<Collation> c = Collation::named(name);
    if (!c) {
      fail("0A000", "collation \"" + name + "\" is not available to the proxy");
      return nullptr;
    }
    m.collations.push_back(*c);
    return &m.collations.back();
  }

  ColumnCodec codec(std::uint32_t type, std::int16_t format, const Collation* collated) const {
    ValueKind kind = value_kind(type);
    return ColumnCodec{kind, format, kind == ValueKind::text || kind == ValueKind::bpchar ? collated : nullptr};
  }

  // An ORDER BY key over shard rows (`combined` = false) or combined rows.
  bool key(const SortKey& k, bool combined, std::vector<KeySpec>& out) {
    std::optional<std::size_t> c = column(k.column);
    if (!c) return false;
    KeySpec spec{*c, combined ? m.result[*c].codec : m.codecs[*c], k.descending, k.nulls_first};
    std::uint32_t type = combined ? m.result[*c].type : shard_types[*c];
    if (spec.codec.kind == ValueKind::unsupported)
      return fail("0A000", "cannot merge rows ordered by a column of type " + type_label(type));
    if ((spec.codec.kind == ValueKind::float4 || spec.codec.kind == ValueKind::float8) && spec.codec.format == 0 &&
        options.extra_float_digits <= 0)
      return fail("0A000", "cannot merge rows ordered by a float column printed with extra_float_digits <= 0");
    if (!k.collation.empty() && (spec.codec.kind == ValueKind::text || spec.codec.kind == ValueKind::bpchar)) {
      spec.codec.collation = collation(k.collation);
      if (spec.codec.collation == nullptr) return false;
    }
    out.push_back(spec);
    return true;
  }

  // LIMIT / OFFSET value: a constant or a bound parameter (text, or int2/4/8 binary).
  bool bound(const RowBound& b, const char* clause, const char* sqlstate, std::optional<std::uint64_t>& out) {
    out.reset();
    std::int64_t v = b.value;
    if (b.kind == RowBound::Kind::none) return true;
    if (b.kind == RowBound::Kind::param) {
      const MergeParams& p = options.params;
      std::size_t i = static_cast<std::size_t>(b.param);
      if (i >= p.values.size()) return fail("08P01", std::string(clause) + " parameter $" + std::to_string(i + 1) + " is not bound");
      if (!p.values[i]) return true;  // NULL: no limit / no offset
      std::string_view t = *p.values[i];
      std::int16_t format = p.formats.empty() ? 0 : p.formats.size() == 1 ? p.formats[0] : p.formats[i];
      if (format == 1 && (t.size() == 2 || t.size() == 4 || t.size() == 8)) {
        std::uint64_t u = 0;
        for (char c : t) u = (u << 8) | static_cast<unsigned char>(c);
        int shift = 64 - 8 * static_cast<int>(t.size());
        v = static_cast<std::int64_t>(u << shift) >> shift;
      } else if (format == 1 || std::from_chars(t.data(), t.data() + t.size(), v).ptr != t.data() + t.size() || t.empty()) {
        return fail("22P02", std::string("invalid ") + clause + " parameter value");
      }
    }
    if (v < 0) return fail(sqlstate, std::string(clause) + " must not be negative");
    out = static_cast<std::uint64_t>(v);
    return true;
  }

  bool columns_and_types(std::span<const protocol::FieldDescription> fields) {
    m.columns = fields.size();
    m.hidden = plan.hidden_columns;
    if (m.hidden > m.columns) return fail("XX000", "the shards returned fewer columns than the merge plan expects");
    for (std::size_t i = 0; i < fields.size(); ++i) {
      auto type = static_cast<std::uint32_t>(fields[i].type_oid);
      const std::vector<std::string>& own = options.column_collations;
      const Collation* collated = i < own.size() && !own[i].empty() ? collation(own[i]) : database;
      if (collated == nullptr) return false;
      shard_types.push_back(type);
      m.codecs.push_back(codec(type, fields[i].format, collated));
      m.result.push_back({type, m.codecs.back()});
    }
    return true;
  }

  bool aggregates() {
    const std::vector<std::uint32_t>& types = shard_types;
    for (const AggregateColumn& a : plan.aggregates) {
      std::optional<std::size_t> c = column(a.column);
      std::optional<std::size_t> n = a.combine == Combine::avg ? column(a.count_column) : c;
      if (!c || !n) return false;
      merge_detail::AggSpec spec{*c, a.combine, *n, m.codecs[*n].format, types[*c], m.codecs[*c]};
      if (!a.collation.empty() && spec.codec.collation != nullptr) {
        spec.codec.collation = collation(a.collation);  // min(x COLLATE "C")
        if (spec.codec.collation == nullptr) return false;
      }
      if (std::optional<MergeError> e = merge_detail::check_aggregate(spec, types, options.extra_float_digits)) {
        error = std::move(e);
        return false;
      }
      std::uint32_t out = merge_detail::result_type(spec);
      // The combined value keeps the comparison's collation (ORDER BY min(x COLLATE "C")).
      m.result[*c] = {out, out == spec.type ? spec.codec : codec(out, m.codecs[*c].format, nullptr)};
      m.agg.specs.push_back(spec);
    }
    m.agg.accumulator.emplace(m.agg.specs, options.extra_float_digits);
    return true;
  }

  bool run(std::span<const protocol::FieldDescription> fields) {
    std::optional<Collation> db = Collation::named(options.collation);
    if (!db) return fail("0A000", "collation \"" + options.collation + "\" is not available to the proxy");
    m.collations.push_back(*db);
    database = &m.collations.back();
    if (!columns_and_types(fields)) return false;
    m.agg.aggregate = plan.aggregate;
    m.agg.grouped = plan.aggregate && !plan.group_keys.empty();
    if (m.agg.aggregate && !aggregates()) return false;
    for (const auto& r : m.result) m.result_codecs.push_back(r.codec);
    for (const SortKey& k : plan.shard_order)
      if (!key(k, false, m.source_keys)) return false;
    for (const SortKey& k : plan.final_order)
      if (!key(k, true, m.bounds.final_keys)) return false;
    std::size_t ties = plan.client_order_keys;
    const std::vector<KeySpec>& ordered = plan.final_order.empty() ? m.source_keys : m.bounds.final_keys;
    m.bounds.tie_keys.assign(ordered.begin(), ordered.begin() + static_cast<std::ptrdiff_t>(std::min(ties, ordered.size())));
    m.distinct.mode = plan.distinct;
    if (plan.distinct != MergePlan::Distinct::none) {
      for (const ShardColumn& c : plan.distinct_on) {
        std::optional<std::size_t> at = column(c);
        if (!at) return false;
        m.distinct.columns.push_back(*at);
      }
      if (plan.distinct_on.empty())
        for (std::size_t c = 0; c + m.hidden < m.columns; ++c) m.distinct.columns.push_back(c);
      for (std::size_t c : m.distinct.columns)
        if (m.result[c].codec.kind == ValueKind::unsupported)
          return fail("0A000", "DISTINCT over a column of type " + type_label(m.result[c].type) + " is not merged");
    }
    if (plan.having) {
      auto h = merge_detail::HavingEvaluator::create(*plan.having, m.result, m.hidden, options.params);
      if (auto* e = std::get_if<MergeError>(&h)) return fail(e->sqlstate, e->message);
      m.agg.having.emplace(std::move(std::get<merge_detail::HavingEvaluator>(h)));
    }
    std::optional<std::uint64_t> offset;
    if (!bound(plan.limit, "LIMIT", "2201W", m.bounds.limit) || !bound(plan.offset, "OFFSET", "2201X", offset)) return false;
    m.bounds.offset = offset.value_or(0);
    m.bounds.with_ties = plan.with_ties && m.bounds.limit.has_value();
    m.bounds.max_buffered = options.max_buffered_rows;
    m.extra_float_digits = options.extra_float_digits;
    return true;
  }
};

}  // namespace

std::variant<std::unique_ptr<Merger>, MergeError> Merger::create(const MergePlan& plan, std::size_t shard_count,
                                                                 std::span<const protocol::FieldDescription> shard_fields,
                                                                 const MergerOptions& options) {
  auto impl = std::make_unique<Impl>();
  Setup setup{*impl, plan, options, nullptr, std::nullopt, {}};
  if (!setup.run(shard_fields)) return *setup.error;
  Impl& m = *impl;
  m.shards = shard_count;
  m.state.assign(shard_count, Impl::ShardState::want);
  m.current.resize(shard_count);
  m.last.resize(shard_count);
  for (std::size_t i = shard_count; i-- > 0;) m.wanted.push_back(i);  // shard 0 asked first
  if (m.bounds.limit && *m.bounds.limit == 0) m.finished = true;  // LIMIT 0: nothing to read
  return std::make_unique<Merger>(std::move(impl));
}

}  // namespace splitpoint::routing
