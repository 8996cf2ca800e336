#include "routing/key_values.hpp"
#include "routing/chars.hpp"

#include <cstdio>

namespace splitpoint::routing {

namespace {

// Type OIDs from pg_type.dat.
constexpr std::uint32_t kBool = 16, kName = 19, kInt8 = 20, kInt2 = 21, kInt4 = 23, kText = 25, kUnknown = 705,
                        kBpchar = 1042, kVarchar = 1043, kDate = 1082, kTimestamp = 1114, kTimestamptz = 1184,
                        kUuid = 2950;

std::int64_t read_be(std::string_view b) {
  std::uint64_t v = 0;
  for (char c : b) v = (v << 8) | static_cast<unsigned char>(c);
  // Sign-extend from the value's width.
  unsigned bits = static_cast<unsigned>(b.size() * 8);
  if (bits < 64 && (v >> (bits - 1)) != 0) v |= ~std::uint64_t{0} << bits;
  return static_cast<std::int64_t>(v);
}


// Days since 1970-01-01 -> year/month/day (proleptic Gregorian).
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  y = static_cast<std::int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  d = doy - (153 * mp + 2) / 5 + 1;
  m = mp < 10 ? mp + 3 : mp - 9;
  y += m <= 2;
}

constexpr std::int64_t kPgEpochDays = 10957;  // 2000-01-01 - 1970-01-01

std::string iso_date(std::int64_t pg_days) {
  std::int64_t y = 0;
  unsigned m = 0, d = 0;
  civil_from_days(pg_days + kPgEpochDays, y, m, d);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lld-%02u-%02u", static_cast<long long>(y), m, d);
  return buf;
}

std::string iso_timestamp(std::int64_t usec, bool with_zone) {
  std::int64_t day = usec / 86400000000LL, rest = usec % 86400000000LL;
  if (rest < 0) {
    rest += 86400000000LL;
    --day;
  }
  std::string out = iso_date(day);
  char buf[48];
  long long secs = rest / 1000000, frac = rest % 1000000;
  std::snprintf(buf, sizeof buf, " %02lld:%02lld:%02lld", secs / 3600, secs / 60 % 60, secs % 60);
  out += buf;
  if (frac != 0) {
    std::snprintf(buf, sizeof buf, ".%06lld", frac);
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    out += f;
  }
  if (with_zone) out += "+00";
  return out;
}

std::string uuid_text(std::string_view b) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[static_cast<unsigned char>(b[i]) >> 4];
    out += hex[static_cast<unsigned char>(b[i]) & 15];
  }
  return out;
}

// The type a binary value has when Parse left it unspecified: the column's.
std::uint32_t infer_oid(const ColumnType& column, std::size_t len) {
  if (column.integer) return len == 2 ? kInt2 : len == 4 ? kInt4 : len == 8 ? kInt8 : 0;
  if (column.hash_type == KeyType::text || column.hash_type == KeyType::varchar) return kText;
  if (column.hash_type == KeyType::uuid) return kUuid;
  if (column.base == "date") return kDate;
  if (column.base.starts_with("timestamp")) return column.base.find("with time zone") != std::string::npos ? kTimestamptz : kTimestamp;
  if (column.base == "timestamptz") return kTimestamptz;
  return 0;
}

// One element of a text array, from `s[i]`; advances i past it.
bool array_element(std::string_view s, std::size_t& i, KeyValues& out) {
  std::string v;
  bool quoted = false, any_escape = false;
  if (s[i] == '"') {
    quoted = true;
    for (++i;; ++i) {
      if (i >= s.size()) return false;
      if (s[i] == '\\' && i + 1 < s.size()) {
        v += s[++i];
        continue;
      }
      if (s[i] == '"') break;
      v += s[i];
    }
    ++i;
  } else {
    for (; i < s.size() && s[i] != ',' && s[i] != '}'; ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        v += s[++i];
        any_escape = true;
        continue;
      }
      v += s[i];
    }
    while (!v.empty() && is_space(v.back())) v.pop_back();
  }
  if (!quoted && !any_escape && v.size() == 4 && (v[0] | 32) == 'n' && (v[1] | 32) == 'u' && (v[2] | 32) == 'l' &&
      (v[3] | 32) == 'l') {
    out.emplace_back();
    return true;
  }
  out.emplace_back(std::move(v));
  return true;
}

bool array_body(std::string_view s, std::size_t& i, KeyValues& out) {
  if (i >= s.size() || s[i] != '{') return false;
  ++i;
  for (;;) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i >= s.size()) return false;
    if (s[i] == '}') break;  // '{}' or after the last element
    if (s[i] == '{') {
      if (!array_body(s, i, out)) return false;
    } else if (!array_element(s, i, out)) {
      return false;
    }
    while (i < s.size() && is_space(s[i])) ++i;
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i >= s.size() || s[i] != '}') return false;
  }
  ++i;
  return true;
}

}  // namespace

bool parse_text_array(std::string_view s, KeyValues& out) {
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  if (i < s.size() && s[i] == '[') {  // "[1:3]={1,2,3}": bounds decoration
    std::size_t eq = s.find('=', i);
    if (eq == std::string_view::npos) return false;
    i = eq + 1;
    while (i < s.size() && is_space(s[i])) ++i;
  }
  if (!array_body(s, i, out)) return false;
  while (i < s.size() && is_space(s[i])) ++i;
  return i == s.size();
}

bool decode_binary(std::uint32_t oid, std::string_view b, const ColumnType& column, std::string& out) {
  if (oid == 0) oid = infer_oid(column, b.size());
  switch (oid) {
    case kInt2:
    case kInt4:
    case kInt8:
      if (b.size() != (oid == kInt2 ? 2u : oid == kInt4 ? 4u : 8u)) return false;
      out = std::to_string(read_be(b));
      return true;
    case kText:
    case kVarchar:
    case kBpchar:
    case kName:
    case kUnknown:
      out.assign(b);
      return true;
    case kUuid:
      if (b.size() != 16) return false;
      out = uuid_text(b);
      return true;
    case kDate:
      if (b.size() != 4) return false;
      out = iso_date(read_be(b));
      return true;
    case kTimestamp:
    case kTimestamptz:
      if (b.size() != 8) return false;
      out = iso_timestamp(read_be(b), oid == kTimestamptz);
      return true;
    case kBool:
      if (b.size() != 1) return false;
      out = b[0] != 0 ? "true" : "false";
      return true;
    default:
      return false;
  }
}

bool decode_binary_array(std::string_view b, const ColumnType& column, KeyValues& out) {
  auto take = [&](std::size_t n, std::string_view& dst) {
    if (b.size() < n) return false;
    dst = b.substr(0, n);
    b.remove_prefix(n);
    return true;
  };
  std::string_view f;
  if (!take(4, f)) return false;
  std::int64_t ndim = read_be(f);
  if (!take(4, f) || !take(4, f)) return false;  // has-null flag, element type
  std::uint32_t elem = static_cast<std::uint32_t>(read_be(f));
  if (ndim < 0 || ndim > 6) return false;
  std::int64_t count = ndim == 0 ? 0 : 1;
  for (std::int64_t d = 0; d < ndim; ++d) {
    if (!take(4, f)) return false;
    std::int64_t dim = read_be(f);
    if (dim < 0 || dim > (1 << 24)) return false;
    count *= dim;
    if (count > (1 << 24) || !take(4, f)) return false;  // lower bound
  }
  for (std::int64_t k = 0; k < count; ++k) {
    if (!take(4, f)) return false;
    std::int64_t len = read_be(f);
    if (len == -1) {
      out.emplace_back();
      continue;
    }
    std::string_view bytes;
    if (len < 0 || !take(static_cast<std::size_t>(len), bytes)) return false;
    std::string v;
    if (!decode_binary(elem, bytes, column, v)) return false;
    out.emplace_back(std::move(v));
  }
  return b.empty();
}

}  // namespace splitpoint::routing
