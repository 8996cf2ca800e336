#include "routing/merge/value.hpp"

#include <locale.h>
#include <unicode/ucol.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "routing/merge/value_numeric.hpp"

namespace splitpoint::routing {

ValueKind value_kind(std::uint32_t type_oid) {
  switch (type_oid) {
    case pgtype::int2:
    case pgtype::int4:
    case pgtype::int8: return ValueKind::integer;
    case pgtype::oid: return ValueKind::oid;
    case pgtype::numeric: return ValueKind::numeric;
    case pgtype::float4: return ValueKind::float4;
    case pgtype::float8: return ValueKind::float8;
    case pgtype::text:
    case pgtype::varchar: return ValueKind::text;
    case pgtype::bpchar: return ValueKind::bpchar;
    case pgtype::name:  // collation "C" since PostgreSQL 12
    case pgtype::uuid: return ValueKind::bytes;
    case pgtype::bytea: return ValueKind::bytea;
    case pgtype::boolean: return ValueKind::boolean;
    case pgtype::date: return ValueKind::date;
    case pgtype::timestamp: return ValueKind::timestamp;
    case pgtype::timestamptz: return ValueKind::timestamptz;
    case pgtype::time: return ValueKind::time;
    default: return ValueKind::unsupported;
  }
}

std::string type_label(std::uint32_t type_oid) {
  switch (type_oid) {
    case pgtype::boolean: return "boolean";
    case pgtype::bytea: return "bytea";
    case pgtype::name: return "name";
    case pgtype::int8: return "bigint";
    case pgtype::int2: return "smallint";
    case pgtype::int4: return "integer";
    case pgtype::text: return "text";
    case pgtype::oid: return "oid";
    case pgtype::float4: return "real";
    case pgtype::float8: return "double precision";
    case pgtype::bpchar: return "character";
    case pgtype::varchar: return "character varying";
    case pgtype::date: return "date";
    case pgtype::time: return "time without time zone";
    case pgtype::timestamp: return "timestamp without time zone";
    case pgtype::timestamptz: return "timestamp with time zone";
    case pgtype::numeric: return "numeric";
    case pgtype::uuid: return "uuid";
    default: return "type oid " + std::to_string(type_oid);
  }
}

// ---------------------------------------------------------------------------------
// Collation

struct Collation::Locale {
  locale_t loc = nullptr;       // libc
  UCollator* icu = nullptr;     // or ICU
  ~Locale() {
    if (loc != nullptr) freelocale(loc);
    if (icu != nullptr) ucol_close(icu);
  }
};

Collation Collation::bytewise() { return Collation{}; }

std::optional<Collation> Collation::named(std::string_view name) {
  if (name == "C" || name == "POSIX" || name == "C.UTF-8" || name == "C.utf8" || name == "ucs_basic") return bytewise();
  // ICU: "icu:<locale>" (a database whose provider is ICU) or a pg_collation name
  // "<locale>-x-icu". PostgreSQL 15 opens the collator with ucol_open(locale) and
  // compares with ucol_strcollUTF8 (a UTF-8 database); so does this.
  std::string icu_locale;
  if (name.starts_with("icu:")) {
    icu_locale = std::string(name.substr(4));
  } else if (name.ends_with("-x-icu")) {
    icu_locale = std::string(name.substr(0, name.size() - 6));
  }
  if (!icu_locale.empty() || name == "icu:") {
    UErrorCode status = U_ZERO_ERROR;
    UCollator* coll = ucol_open(icu_locale == "und" ? "" : icu_locale.c_str(), &status);
    if (U_FAILURE(status)) {
      if (coll != nullptr) ucol_close(coll);
      return std::nullopt;
    }
    auto l = std::make_shared<Locale>();
    l->icu = coll;
    Collation c;
    c.locale_ = std::move(l);
    return c;
  }
  // PostgreSQL names a UTF-8 libc collation both "en_US.utf8" and "en_US"; a bare name
  // on this host may be another encoding's locale, so it is tried with a UTF-8 codeset.
  locale_t loc = nullptr;
  if (name.find('.') != std::string_view::npos) {
    loc = newlocale(LC_COLLATE_MASK, std::string(name).c_str(), nullptr);
  } else {
    for (const char* codeset : {".UTF-8", ".utf8"})
      if (loc == nullptr) loc = newlocale(LC_COLLATE_MASK, (std::string(name) + codeset).c_str(), nullptr);
  }
  if (loc == nullptr) return std::nullopt;  // not installed, or ICU ("und-x-icu")
  auto l = std::make_shared<Locale>();
  l->loc = loc;
  Collation c;
  c.locale_ = std::move(l);
  return c;
}

namespace {

int compare_bytes(std::string_view a, std::string_view b) {
  int c = std::memcmp(a.data(), b.data(), std::min(a.size(), b.size()));
  if (c != 0) return c < 0 ? -1 : 1;
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

}  // namespace

int Collation::compare(std::string_view a, std::string_view b) const {
  if (locale_ == nullptr || (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0))
    return compare_bytes(a, b);
  if (locale_->icu != nullptr) {
    UErrorCode status = U_ZERO_ERROR;
    UCollationResult r = ucol_strcollUTF8(locale_->icu, a.data(), static_cast<int32_t>(a.size()), b.data(),
                                          static_cast<int32_t>(b.size()), &status);
    if (U_FAILURE(status) || r == UCOL_EQUAL) return compare_bytes(a, b);  // deterministic: ties by bytes
    return r == UCOL_LESS ? -1 : 1;
  }
  // strcoll_l wants NUL-terminated strings (text never contains NUL).
  thread_local std::string x, y;
  x.assign(a);
  y.assign(b);
  int c = strcoll_l(x.c_str(), y.c_str(), locale_->loc);
  if (c == 0) return compare_bytes(a, b);  // varstr_cmp: "equal" distinct strings by strcmp
  return c < 0 ? -1 : 1;
}

// ---------------------------------------------------------------------------------
// DataRow

namespace {

std::uint32_t be32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (std::uint32_t{u[0]} << 24) | (std::uint32_t{u[1]} << 16) | (std::uint32_t{u[2]} << 8) | u[3];
}

std::uint64_t be64(const char* p) { return (std::uint64_t{be32(p)} << 32) | be32(p + 4); }

}  // namespace

bool split_data_row(std::string_view body, std::vector<Field>& out) {
  out.clear();
  if (body.size() < 2) return false;
  const auto* u = reinterpret_cast<const unsigned char*>(body.data());
  std::size_t n = (std::size_t{u[0]} << 8) | u[1];
  std::size_t at = 2;
  for (std::size_t i = 0; i < n; ++i) {
    if (body.size() - at < 4) return false;
    auto len = static_cast<std::int32_t>(be32(body.data() + at));
    at += 4;
    Field f;
    f.off = static_cast<std::uint32_t>(at);
    f.len = len < 0 ? -1 : len;
    if (len > 0) {
      if (body.size() - at < static_cast<std::size_t>(len)) return false;
      at += static_cast<std::size_t>(len);
    }
    out.push_back(f);
  }
  return at == body.size();
}

// ---------------------------------------------------------------------------------
// Decoding

namespace {

template <typename T>
bool parse_int(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && !s.empty();
}

bool decode_integer_binary(std::string_view v, Key& out) {
  if (v.size() == 2) out.i = static_cast<std::int16_t>((static_cast<unsigned char>(v[0]) << 8) | static_cast<unsigned char>(v[1]));
  else if (v.size() == 4) out.i = static_cast<std::int32_t>(be32(v.data()));
  else if (v.size() == 8) out.i = static_cast<std::int64_t>(be64(v.data()));
  else return false;
  return true;
}

std::string_view trim_trailing_spaces(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

bool decode_text_key(ValueKind kind, std::string_view v, Key& out) {
  switch (kind) {
    case ValueKind::integer:
    case ValueKind::oid: return parse_int(v, out.i);
    case ValueKind::numeric: return valid_numeric_text(v);
    case ValueKind::float4:
    case ValueKind::float8: {
      auto d = parse_float8(v);  // float4 text reads back exactly as a double too
      if (d) out.f = *d;
      return d.has_value();
    }
    case ValueKind::boolean:
      out.i = v == "t" ? 1 : 0;
      return v == "t" || v == "f";
    case ValueKind::date:
    case ValueKind::timestamp:
    case ValueKind::timestamptz:
    case ValueKind::time: {
      std::optional<std::int64_t> t = kind == ValueKind::date   ? parse_date_text(v)
                                      : kind == ValueKind::time ? parse_time_text(v)
                                                                : parse_timestamp_text(v, kind == ValueKind::timestamptz);
      if (t) out.i = *t;
      return t.has_value();
    }
    default: return false;
  }
}

bool decode_binary_key(ValueKind kind, std::string_view v, Key& out) {
  switch (kind) {
    case ValueKind::integer: return decode_integer_binary(v, out);
    case ValueKind::oid:  // unsigned, unlike int4
      if (v.size() != 4) return false;
      out.i = be32(v.data());
      return true;
    case ValueKind::numeric: return valid_numeric_binary(v);
    case ValueKind::float4: {
      if (v.size() != 4) return false;
      std::uint32_t bits = be32(v.data());
      float f;
      std::memcpy(&f, &bits, 4);
      out.f = f;
      return true;
    }
    case ValueKind::float8: {
      if (v.size() != 8) return false;
      std::uint64_t bits = be64(v.data());
      std::memcpy(&out.f, &bits, 8);
      return true;
    }
    case ValueKind::boolean:
      if (v.size() != 1) return false;
      out.i = v[0] != 0 ? 1 : 0;
      return true;
    case ValueKind::date: {
      if (v.size() != 4) return false;
      auto d = static_cast<std::int32_t>(be32(v.data()));
      out.i = d == std::numeric_limits<std::int32_t>::max()   ? std::numeric_limits<std::int64_t>::max()
              : d == std::numeric_limits<std::int32_t>::min() ? std::numeric_limits<std::int64_t>::min()
                                                               : d;
      return true;
    }
    case ValueKind::timestamp:
    case ValueKind::timestamptz:
    case ValueKind::time:
      if (v.size() != 8) return false;
      out.i = static_cast<std::int64_t>(be64(v.data()));
      return true;
    default: return false;
  }
}

}  // namespace

bool decode_key(const ColumnCodec& codec, const char* base, Field field, Key& out) {
  if (field.null()) return false;
  std::string_view v(base + field.off, static_cast<std::size_t>(field.len));
  out.off = field.off;
  out.len = static_cast<std::uint32_t>(field.len);
  switch (codec.kind) {
    case ValueKind::unsupported: return false;
    case ValueKind::text:
    case ValueKind::bytes: return true;
    case ValueKind::bytea:
      // Escape output ("\\000...") does not sort like the bytes; hex ("\\x0a1b") does.
      return codec.format == 1 || (v.size() >= 2 && v[0] == '\\' && v[1] == 'x');
    case ValueKind::bpchar:
      out.len = static_cast<std::uint32_t>(trim_trailing_spaces(v).size());
      return true;
    default: break;
  }
  return codec.format == 1 ? decode_binary_key(codec.kind, v, out) : decode_text_key(codec.kind, v, out);
}

namespace {

int three_way(std::int64_t a, std::int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

// float8_cmp_internal: NaN equals NaN and sorts above everything; -0 equals 0.
int compare_floats(double a, double b) {
  bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) return an && bn ? 0 : (an ? 1 : -1);
  return a < b ? -1 : (a > b ? 1 : 0);
}

}  // namespace

int compare_keys(const ColumnCodec& codec, const char* a_base, const Key& a, const char* b_base, const Key& b) {
  std::string_view as(a_base + a.off, a.len), bs(b_base + b.off, b.len);
  switch (codec.kind) {
    case ValueKind::numeric: return codec.format == 1 ? compare_numeric_binary(as, bs) : compare_numeric_text(as, bs);
    case ValueKind::float4:
    case ValueKind::float8: return compare_floats(a.f, b.f);
    case ValueKind::text:
    case ValueKind::bpchar: return codec.collation != nullptr ? codec.collation->compare(as, bs) : compare_bytes(as, bs);
    case ValueKind::bytes:
    case ValueKind::bytea: return compare_bytes(as, bs);
    default: return three_way(a.i, b.i);
  }
}

void append_equality_key(const ColumnCodec& codec, const char* base, const Key& key, std::string& out) {
  auto put64 = [&](std::uint64_t v) {
    for (int s = 56; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  std::string_view v(base + key.off, key.len);
  switch (codec.kind) {
    case ValueKind::numeric: {
      std::optional<Decimal> d = codec.format == 1 ? Decimal::from_binary(v) : Decimal::parse(v);
      std::string t = d ? d->to_text() : std::string(v);
      // Drop trailing fraction zeros so 1.0 and 1.00 agree (Decimal already made -0 into 0).
      if (t.find('.') != std::string::npos) {
        while (t.back() == '0') t.pop_back();
        if (t.back() == '.') t.pop_back();
      }
      if (t == "-0") t = "0";
      put64(t.size());
      out += t;
      return;
    }
    case ValueKind::float4:
    case ValueKind::float8: {
      double f = key.f == 0 ? 0.0 : key.f;  // -0 = 0
      std::uint64_t bits = 0;
      if (std::isnan(f)) bits = 0x7ff8000000000000ULL;
      else std::memcpy(&bits, &f, 8);
      put64(bits);
      return;
    }
    case ValueKind::text:
    case ValueKind::bpchar:
    case ValueKind::bytes:
    case ValueKind::bytea:
      // Deterministic collations: equal means the same bytes.
      put64(v.size());
      out += v;
      return;
    default: put64(static_cast<std::uint64_t>(key.i)); return;
  }
}

}  // namespace splitpoint::routing
