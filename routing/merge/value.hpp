// Column values as shards send them in DataRows (text or binary format), decoded just
// enough to order and compare them the way PostgreSQL's default btree operator class
// for the type does, so rows from several shards can be merged as one server would
// have sorted, grouped or de-duplicated them.
// https://www.postgresql.org/docs/15/protocol-message-formats.html (DataRow)
//
// Types with an order here: int2/int4/int8/oid, numeric, float4/float8, text/varchar/
// bpchar (collation-aware) and name ("C"), bytea and uuid (byte order), bool, date,
// timestamp, timestamptz and time. Dates and times in text must be in the ISO DateStyle
// (PostgreSQL's default); anything else fails to decode rather than sorting wrongly.
// Every other type (interval, json, arrays, ...) is `unsupported`: it can be passed
// through, but a merge that must compare it is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::routing {

// Type OIDs from pg_type.dat.
namespace pgtype {
inline constexpr std::uint32_t boolean = 16, bytea = 17, name = 19, int8 = 20, int2 = 21, int4 = 23, text = 25,
                               oid = 26, float4 = 700, float8 = 701, bpchar = 1042, varchar = 1043, date = 1082,
                               time = 1083, timestamp = 1114, timestamptz = 1184, numeric = 1700, uuid = 2950;
}

enum class ValueKind : std::uint8_t {
  unsupported,
  integer,  // int2, int4, int8
  oid,
  numeric,
  float4,
  float8,
  text,    // text, varchar: the collation's order
  bpchar,  // character(n): trailing spaces do not count
  bytes,   // name, uuid: byte order (uuid's text form preserves it)
  bytea,   // byte order; text must be bytea_output = hex, whose digits preserve it
  boolean,
  date,
  timestamp,
  timestamptz,
  time,
};

ValueKind value_kind(std::uint32_t type_oid);
// "integer", "numeric", ... for messages; the OID in decimal when unknown.
std::string type_label(std::uint32_t type_oid);

// How text sorts. "C", "POSIX", "C.UTF-8"/"C.utf8" and "ucs_basic" compare bytes
// (glibc's C.UTF-8 orders by code point, which for UTF-8 is byte order); any other
// name is a libc locale compared with strcoll_l, equal results broken by byte order as
// PostgreSQL does for deterministic collations. A name without a codeset ("en_US", as
// pg_collation aliases "en_US.utf8") is looked up with a UTF-8 codeset. ICU: a name
// "icu:<locale>" (a database whose default provider is ICU) or "<locale>-x-icu" (a
// pg_collation name) compares with the ICU collator for <locale>, ties by bytes.
class Collation {
 public:
  static Collation bytewise();
  // nullopt if the locale is not installed on this machine.
  static std::optional<Collation> named(std::string_view name);

  int compare(std::string_view a, std::string_view b) const;
  bool is_bytewise() const { return locale_ == nullptr; }

 private:
  struct Locale;
  std::shared_ptr<const Locale> locale_;
};

// One field of a DataRow: a slice of the row's body, or NULL (len < 0).
struct Field {
  std::uint32_t off = 0;
  std::int32_t len = -1;
  bool null() const { return len < 0; }
};

// Splits a DataRow body ('D' without type byte and length) into fields. False if the
// body is malformed.
bool split_data_row(std::string_view body, std::vector<Field>& out);

// A non-null value decoded once for repeated comparisons: integers, dates and times as
// int64 (dates in days, times in microseconds, since 2000-01-01, infinities at the
// int64 limits), floats as double, strings and numerics as a slice of their row.
struct Key {
  bool null = false;  // set by callers for NULL fields; decode_key never sees those
  std::int64_t i = 0;
  double f = 0;
  std::uint32_t off = 0;
  std::uint32_t len = 0;
};

// How one column is decoded and compared.
struct ColumnCodec {
  ValueKind kind = ValueKind::unsupported;
  std::int16_t format = 0;  // 0 text, 1 binary
  const Collation* collation = nullptr;  // text, bpchar; nullptr = bytes
};

// Decodes the non-null value `base[field]`. False if it is not valid for the codec
// (including `unsupported`).
bool decode_key(const ColumnCodec& codec, const char* base, Field field, Key& out);
// <0, 0, >0 as PostgreSQL's comparison function for the type orders the two values.
int compare_keys(const ColumnCodec& codec, const char* a_base, const Key& a, const char* b_base, const Key& b);
// Appends bytes that are equal for two values exactly when PostgreSQL's `=` says the
// values are equal (1.0 = 1.00, -0 = 0, NaN = NaN, 'a ' = 'a' for character(n)).
void append_equality_key(const ColumnCodec& codec, const char* base, const Key& key, std::string& out);

// ISO DateStyle text parsers; nullopt if `text` is not in that form.
std::optional<std::int64_t> parse_date_text(std::string_view text);                     // days since 2000-01-01
std::optional<std::int64_t> parse_timestamp_text(std::string_view text, bool with_zone);  // microseconds
std::optional<std::int64_t> parse_time_text(std::string_view text);                     // microseconds

}  // namespace splitpoint::routing
