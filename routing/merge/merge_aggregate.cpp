#include "routing/merge/merge_aggregate.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace splitpoint::routing::merge_detail {

namespace {

MergeError unsupported(std::string what) { return MergeError{"0A000", std::move(what)}; }

bool parse_int8(std::string_view v, std::int16_t format, std::int64_t& out) {
  if (format == 1) {
    if (v.size() != 8) return false;
    std::uint64_t u = 0;
    for (char c : v) u = (u << 8) | static_cast<unsigned char>(c);
    out = static_cast<std::int64_t>(u);
    return true;
  }
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc{} && p == v.data() + v.size() && !v.empty();
}

template <typename T>
T from_bits(std::string_view v) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  U u = 0;
  for (char c : v) u = static_cast<U>((u << 8) | static_cast<unsigned char>(c));
  T out;
  std::memcpy(&out, &u, sizeof out);
  return out;
}

template <typename T>
std::string to_bits(T v) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  U u;
  std::memcpy(&u, &v, sizeof u);
  std::string out(sizeof u, '\0');
  for (std::size_t i = 0; i < sizeof u; ++i) out[i] = static_cast<char>((u >> (8 * (sizeof u - 1 - i))) & 0xff);
  return out;
}

std::string int128_text(__int128 v) {
  bool negative = v < 0;
  unsigned __int128 m = negative ? static_cast<unsigned __int128>(0) - static_cast<unsigned __int128>(v)
                                 : static_cast<unsigned __int128>(v);
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(m % 10)));
    m /= 10;
  } while (m != 0);
  return negative ? "-" + s : s;
}

MergeError overflow(const char* what) { return MergeError{"22003", what}; }

}  // namespace

std::optional<MergeError> check_aggregate(const AggSpec& s, const std::vector<std::uint32_t>& types,
                                          int extra_float_digits) {
  const std::string type = type_label(s.type);
  bool is_float = s.type == pgtype::float4 || s.type == pgtype::float8;
  switch (s.combine) {
    case Combine::count:
      if (s.type != pgtype::int8) return MergeError{"XX000", "count() partial of type " + type};
      return std::nullopt;
    case Combine::sum:
      if (s.type != pgtype::int8 && s.type != pgtype::numeric && !is_float)
        return unsupported("sum() of type " + type + " cannot be combined by the proxy");
      break;
    case Combine::avg:
      if (s.type == pgtype::float4)
        return MergeError{"SPC01", "cannot be answered exactly across shards: avg(real) is computed in double precision, "
                                   "but the shards' sum(real) is rounded to real"};
      if (s.type != pgtype::int8 && s.type != pgtype::numeric && s.type != pgtype::float8)
        return unsupported("avg() over a sum of type " + type + " cannot be combined by the proxy");
      if (types[s.count_column] != pgtype::int8) return MergeError{"XX000", "avg() count partial is not bigint"};
      break;
    case Combine::min:
    case Combine::max:
      if (s.codec.kind == ValueKind::unsupported)
        return unsupported("min()/max() of type " + type + " cannot be combined by the proxy");
      return std::nullopt;
    case Combine::bool_and:
    case Combine::bool_or:
      if (s.type != pgtype::boolean) return MergeError{"XX000", "bool_and()/bool_or() partial of type " + type};
      return std::nullopt;
  }
  if (is_float && s.codec.format == 0 && extra_float_digits <= 0)
    return unsupported("float sums cannot be combined when extra_float_digits <= 0 rounds the shards' partial sums");
  return std::nullopt;
}

std::uint32_t result_type(const AggSpec& spec) {
  if (spec.combine != Combine::avg) return spec.type;
  return spec.type == pgtype::float8 ? pgtype::float8 : pgtype::numeric;
}

void GroupAccumulator::reset() {
  for (Acc& a : acc_) a = Acc{};
}

bool GroupAccumulator::add(const Row& row, MergeError& error) {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (!add_one(specs_[i], acc_[i], row, error)) return false;
  return true;
}

bool GroupAccumulator::add_one(const AggSpec& s, Acc& a, const Row& row, MergeError& error) {
  if (s.combine == Combine::count || s.combine == Combine::avg) {
    // avg's count partial lives in its own column.
    std::optional<std::string_view> c = row.field(s.combine == Combine::avg ? s.count_column : s.column);
    std::int64_t n = 0;
    if (c && !parse_int8(*c, s.combine == Combine::avg ? s.count_format : s.codec.format, n)) return malformed(s, error);
    if (__builtin_add_overflow(a.count, n, &a.count)) {
      error = overflow("bigint out of range");
      return false;
    }
    if (s.combine == Combine::count) return true;
  }
  std::optional<std::string_view> v = row.field(s.column);
  if (!v) return true;  // a shard with no (non-NULL) input
  bool first = !a.any;
  a.any = true;
  switch (s.combine) {
    case Combine::sum:
    case Combine::avg: return add_sum(s, a, *v, first, error);
    case Combine::min:
    case Combine::max: {
      const Field f = row.fields[s.column];
      Key k;
      if (!decode_key(s.codec, row.data.data(), f, k)) return malformed(s, error);
      k.off -= f.off;  // relative to the value's own bytes
      if (!first) {
        int c = routing::compare_keys(s.codec, v->data(), k, a.best.data(), a.best_key);
        if (s.combine == Combine::min ? c >= 0 : c <= 0) return true;
      }
      a.best.assign(*v);
      a.best_key = k;
      return true;
    }
    case Combine::bool_and:
    case Combine::bool_or: {
      if (s.codec.format == 0 && *v != "t" && *v != "f") return malformed(s, error);
      bool b = s.codec.format == 1 ? (v->size() == 1 && (*v)[0] != 0) : *v == "t";
      a.flag = first ? b : (s.combine == Combine::bool_and ? a.flag && b : a.flag || b);
      return true;
    }
    case Combine::count: return true;
  }
  return true;
}

// Adds a sum partial in its own type's arithmetic, with that type's overflow checks
// (int8 sums are kept in 128 bits and checked when printed, as PostgreSQL would fail).
bool GroupAccumulator::add_sum(const AggSpec& s, Acc& a, std::string_view v, bool first, MergeError& error) {
  const bool binary = s.codec.format == 1;
  if (s.type == pgtype::int8) {
    std::int64_t x = 0;
    if (!parse_int8(v, s.codec.format, x)) return malformed(s, error);
    a.isum += x;
    return true;
  }
  if (s.type == pgtype::numeric) {
    std::optional<Decimal> d = binary ? Decimal::from_binary(v) : Decimal::parse(v);
    if (!d) return malformed(s, error);
    a.dsum = first ? *d : a.dsum.plus(*d);
    return true;
  }
  if (s.type == pgtype::float8) {
    std::optional<double> d = !binary ? parse_float8(v) : v.size() == 8 ? std::optional(from_bits<double>(v)) : std::nullopt;
    if (!d) return malformed(s, error);
    double r = a.fsum + *d;
    if (std::isinf(r) && !std::isinf(a.fsum) && !std::isinf(*d)) {  // float8_pl
      error = overflow("value out of range: overflow");
      return false;
    }
    a.fsum = r;
    return true;
  }
  std::optional<float> f = !binary ? parse_float4(v) : v.size() == 4 ? std::optional(from_bits<float>(v)) : std::nullopt;
  if (!f) return malformed(s, error);
  float r = a.f4sum + *f;
  if (std::isinf(r) && !std::isinf(a.f4sum) && !std::isinf(*f)) {  // float4_pl
    error = overflow("value out of range: overflow");
    return false;
  }
  a.f4sum = r;
  return true;
}

bool GroupAccumulator::malformed(const AggSpec& s, MergeError& error) {
  error = MergeError{"XX000", "malformed partial aggregate in column " + std::to_string(s.column + 1)};
  return false;
}

std::optional<std::string> GroupAccumulator::value(const AggSpec& s, const Acc& a, MergeError& error) const {
  const bool binary = s.codec.format == 1;
  auto int8_out = [&](std::int64_t v) {
    return binary ? to_bits(static_cast<std::uint64_t>(v)) : std::to_string(v);
  };
  auto numeric_out = [&](const Decimal& d) {
    if (!binary) return d.to_text();
    std::string out;
    d.to_binary(out);
    return out;
  };
  switch (s.combine) {
    case Combine::count: return int8_out(a.count);
    case Combine::min:
    case Combine::max: return a.any ? std::optional<std::string>(a.best) : std::nullopt;
    case Combine::bool_and:
    case Combine::bool_or:
      if (!a.any) return std::nullopt;
      return binary ? std::string(1, a.flag ? '\1' : '\0') : std::string(a.flag ? "t" : "f");
    case Combine::sum:
      if (!a.any) return std::nullopt;
      if (s.type == pgtype::int8) {
        if (a.isum > std::numeric_limits<std::int64_t>::max() || a.isum < std::numeric_limits<std::int64_t>::min()) {
          error = overflow("bigint out of range");
          return std::nullopt;
        }
        return int8_out(static_cast<std::int64_t>(a.isum));
      }
      if (s.type == pgtype::numeric) return numeric_out(a.dsum);
      if (s.type == pgtype::float8) return binary ? to_bits(a.fsum) : format_float8(a.fsum, extra_float_digits_);
      return binary ? to_bits(a.f4sum) : format_float4(a.f4sum, extra_float_digits_);
    case Combine::avg:
      if (!a.any || a.count == 0) return std::nullopt;
      if (s.type == pgtype::float8) {
        double avg = a.fsum / static_cast<double>(a.count);
        return binary ? to_bits(avg) : format_float8(avg, extra_float_digits_);
      }
      if (s.type == pgtype::int8) return numeric_out(Decimal::parse(int128_text(a.isum))->divided_by_count(a.count));
      return numeric_out(a.dsum.divided_by_count(a.count));
  }
  return std::nullopt;
}

bool GroupAccumulator::finish(const Row& first, std::size_t columns, Row& out, MergeError& error) const {
  start_row(out.data, columns);
  for (std::size_t c = 0; c < columns; ++c) {
    std::size_t i = 0;
    while (i < specs_.size() && specs_[i].column != c) ++i;
    if (i == specs_.size()) {
      append_field(out.data, first.fields.empty() ? std::nullopt : first.field(c));
      continue;
    }
    std::optional<std::string> v = value(specs_[i], acc_[i], error);
    if (!error.sqlstate.empty()) return false;
    append_field(out.data, v ? std::optional<std::string_view>(*v) : std::nullopt);
  }
  return split_data_row(out.data, out.fields);
}

}  // namespace splitpoint::routing::merge_detail
