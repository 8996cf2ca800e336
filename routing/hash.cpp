// PostgreSQL 15 hash partitioning. The hashing is Bob Jenkins' lookup3 as PostgreSQL
// adapted it (src/common/hashfn.c): a 64-bit result (b << 32 | c) and a seed folded
// in as an extra mixing round. Input rules follow the types' input/receive functions.
#include "routing/hash.hpp"
#include "routing/chars.hpp"

#include <array>
#include <bit>
#include <cctype>
#include <string>

namespace splitpoint::routing {

namespace {

struct State {
  std::uint32_t a, b, c;
};

void mix(State& s) {
  s.a -= s.c; s.a ^= std::rotl(s.c, 4);  s.c += s.b;
  s.b -= s.a; s.b ^= std::rotl(s.a, 6);  s.a += s.c;
  s.c -= s.b; s.c ^= std::rotl(s.b, 8);  s.b += s.a;
  s.a -= s.c; s.a ^= std::rotl(s.c, 16); s.c += s.b;
  s.b -= s.a; s.b ^= std::rotl(s.a, 19); s.a += s.c;
  s.c -= s.b; s.c ^= std::rotl(s.b, 4);  s.b += s.a;
}

void final_mix(State& s) {
  s.c ^= s.b; s.c -= std::rotl(s.b, 14);
  s.a ^= s.c; s.a -= std::rotl(s.c, 11);
  s.b ^= s.a; s.b -= std::rotl(s.a, 25);
  s.c ^= s.b; s.c -= std::rotl(s.b, 16);
  s.a ^= s.c; s.a -= std::rotl(s.c, 4);
  s.b ^= s.a; s.b -= std::rotl(s.a, 14);
  s.c ^= s.b; s.c -= std::rotl(s.b, 24);
}

State initial_state(std::uint32_t len, std::uint64_t seed) {
  std::uint32_t init = 0x9e3779b9U + len + 3923095U;
  State s{init, init, init};
  if (seed != 0) {  // the seed acts as one extra 12-byte block
    s.a += static_cast<std::uint32_t>(seed >> 32);
    s.b += static_cast<std::uint32_t>(seed);
    mix(s);
  }
  return s;
}

std::uint32_t byte_at(std::string_view d, std::size_t i) {
  return static_cast<unsigned char>(d[i]);
}

// Little-endian word of the 4 bytes at i (PostgreSQL's result on x86/ARM servers).
std::uint32_t word_at(std::string_view d, std::size_t i) {
  return byte_at(d, i) | byte_at(d, i + 1) << 8 | byte_at(d, i + 2) << 16 |
         byte_at(d, i + 3) << 24;
}

std::uint64_t result(const State& s) {
  return static_cast<std::uint64_t>(s.b) << 32 | s.c;
}

bool is_pg_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

// pg_strtoint16/32/64 (PostgreSQL 15): optional surrounding whitespace, one optional
// sign, at least one decimal digit; no underscores, no hex, nothing else.
std::optional<std::int64_t> parse_pg_int(std::string_view s, std::int64_t min,
                                         std::int64_t max) {
  std::size_t i = 0;
  while (i < s.size() && is_pg_space(s[i])) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
  if (i == s.size() || !is_digit(s[i])) return std::nullopt;
  // Accumulate the magnitude; the bound allows |min| for negatives.
  const std::uint64_t limit = negative ? 0 - static_cast<std::uint64_t>(min)
                                       : static_cast<std::uint64_t>(max);
  std::uint64_t magnitude = 0;
  for (; i < s.size() && is_digit(s[i]); ++i) {
    std::uint64_t digit = static_cast<std::uint64_t>(s[i] - '0');
    if (magnitude > (limit - digit) / 10) return std::nullopt;
    magnitude = magnitude * 10 + digit;
  }
  while (i < s.size() && is_pg_space(s[i])) ++i;
  if (i != s.size()) return std::nullopt;
  return negative ? static_cast<std::int64_t>(0 - magnitude)
                  : static_cast<std::int64_t>(magnitude);
}

// hashint2extended and hashint4extended hash the value as an int32; hashint8extended
// folds the high half in so that values in int32 range hash as they do as int4.
std::uint64_t hash_int_value(std::int64_t v) {
  auto lo = static_cast<std::uint32_t>(v);
  auto hi = static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32);
  lo ^= v >= 0 ? hi : ~hi;
  return pg_hash_uint32_extended(lo, kHashPartitionSeed);
}

std::uint64_t row_hash(std::uint64_t key_hash) { return pg_hash_combine64(0, key_hash); }

// Length of the UTF-8 sequence at s[i] if it is one PostgreSQL accepts
// (pg_utf8_islegal: no overlong forms, surrogates, or code points past U+10FFFF; and
// no NUL byte, which no text value can hold), else 0.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  std::uint32_t lead = byte_at(s, i);
  if (lead == 0) return 0;
  if (lead < 0x80) return 1;
  std::size_t len = lead < 0xC2 ? 0 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : lead < 0xF5 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  std::uint32_t second = byte_at(s, i + 1);
  std::uint32_t lo = 0x80, hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
  if (second < lo || second > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    std::uint32_t cont = byte_at(s, i + k);
    if (cont < 0x80 || cont > 0xBF) return 0;
  }
  return len;
}

// Validates the text and applies varchar(n)'s rule (varchar_input): past n characters
// only spaces may follow, and they are dropped. Returns the bytes that get stored.
std::optional<std::string_view> stored_text(std::string_view s, std::int32_t max_chars) {
  std::size_t chars = 0;
  std::size_t cut = s.size();
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = utf8_sequence_length(s, i);
    if (len == 0) return std::nullopt;
    if (max_chars > 0 && chars == static_cast<std::size_t>(max_chars) && cut == s.size())
      cut = i;
    ++chars;
    i += len;
  }
  for (std::size_t i = cut; i < s.size(); ++i)
    if (s[i] != ' ') return std::nullopt;
  return s.substr(0, cut);
}

// uuid_in (string_to_uuid): optional braces around 32 hex digits, with an optional
// hyphen after any group of four digits except the last. No whitespace.
std::optional<std::array<char, 16>> parse_uuid(std::string_view s) {
  std::size_t i = 0;
  bool braces = !s.empty() && s[0] == '{';
  if (braces) ++i;
  std::array<char, 16> out{};
  for (std::size_t n = 0; n < out.size(); ++n) {
    if (i + 2 > s.size()) return std::nullopt;
    int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[n] = static_cast<char>(hi << 4 | lo);
    i += 2;
    if (i < s.size() && s[i] == '-' && n % 2 == 1 && n < out.size() - 1) ++i;
  }
  if (braces) {
    if (i == s.size() || s[i] != '}') return std::nullopt;
    ++i;
  }
  if (i != s.size()) return std::nullopt;
  return out;
}

std::int64_t int_min(KeyType t) {
  return t == KeyType::int2 ? INT16_MIN : t == KeyType::int4 ? INT32_MIN : INT64_MIN;
}

std::int64_t int_max(KeyType t) {
  return t == KeyType::int2 ? INT16_MAX : t == KeyType::int4 ? INT32_MAX : INT64_MAX;
}

std::optional<std::uint64_t> hash_text_bytes(std::string_view s, std::int32_t max_chars) {
  auto stored = stored_text(s, max_chars);
  if (!stored) return std::nullopt;
  return row_hash(pg_hash_bytes_extended(*stored, kHashPartitionSeed));
}

std::string lower_trimmed(std::string_view name) {
  while (!name.empty() && is_pg_space(name.front())) name.remove_prefix(1);
  while (!name.empty() && is_pg_space(name.back())) name.remove_suffix(1);
  std::string out(name);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  constexpr std::string_view schema = "pg_catalog.";
  if (out.starts_with(schema)) out.erase(0, schema.size());
  return out;
}

}  // namespace

std::uint64_t pg_hash_bytes_extended(std::string_view d, std::uint64_t seed) {
  State s = initial_state(static_cast<std::uint32_t>(d.size()), seed);
  std::size_t i = 0;
  for (; d.size() - i >= 12; i += 12) {
    s.a += word_at(d, i);
    s.b += word_at(d, i + 4);
    s.c += word_at(d, i + 8);
    mix(s);
  }
  // The last 0..11 bytes: into a and b as little-endian words, into c shifted up one
  // byte (PostgreSQL keeps c's lowest byte for the length, unlike lookup3's hashlittle).
  std::size_t rest = d.size() - i;
  for (std::size_t k = 0; k < rest; ++k) {
    std::uint32_t v = byte_at(d, i + k);
    if (k < 4) s.a += v << (8 * k);
    else if (k < 8) s.b += v << (8 * (k - 4));
    else s.c += v << (8 * (k - 7));
  }
  final_mix(s);
  return result(s);
}

std::uint64_t pg_hash_uint32_extended(std::uint32_t k, std::uint64_t seed) {
  State s = initial_state(4, seed);
  s.a += k;
  final_mix(s);
  return result(s);
}

std::uint64_t pg_hash_combine64(std::uint64_t a, std::uint64_t b) {
  a ^= b + 0x49a0f4dd15e5a8e3ULL + (a << 54) + (a >> 7);
  return a;
}

std::optional<KeyType> key_type_from_name(std::string_view pg_type_name) {
  const std::string n = lower_trimmed(pg_type_name);
  if (n == "smallint" || n == "int2" || n == "smallserial" || n == "serial2") return KeyType::int2;
  if (n == "integer" || n == "int" || n == "int4" || n == "serial" || n == "serial4")
    return KeyType::int4;
  if (n == "bigint" || n == "int8" || n == "bigserial" || n == "serial8") return KeyType::int8;
  if (n == "text") return KeyType::text;
  if (n == "character varying" || n == "varchar") return KeyType::varchar;
  if (n == "uuid") return KeyType::uuid;
  return std::nullopt;
}

std::optional<std::uint64_t> hash_key_text(KeyType type, std::string_view text_value,
                                           std::int32_t varchar_max_chars) {
  switch (type) {
    case KeyType::int2:
    case KeyType::int4:
    case KeyType::int8: {
      auto v = parse_pg_int(text_value, int_min(type), int_max(type));
      if (!v) return std::nullopt;
      return row_hash(hash_int_value(*v));
    }
    case KeyType::text:
      return hash_text_bytes(text_value, 0);
    case KeyType::varchar:
      return hash_text_bytes(text_value, varchar_max_chars);
    case KeyType::uuid: {
      auto u = parse_uuid(text_value);
      if (!u) return std::nullopt;
      return row_hash(pg_hash_bytes_extended({u->data(), u->size()}, kHashPartitionSeed));
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> hash_key_binary(KeyType type, std::string_view bytes,
                                             std::int32_t varchar_max_chars) {
  auto big_endian = [&] {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) v = v << 8 | byte_at(bytes, i);
    return v;
  };
  switch (type) {
    case KeyType::int2:
      if (bytes.size() != 2) return std::nullopt;
      return row_hash(hash_int_value(static_cast<std::int16_t>(big_endian())));
    case KeyType::int4:
      if (bytes.size() != 4) return std::nullopt;
      return row_hash(hash_int_value(static_cast<std::int32_t>(big_endian())));
    case KeyType::int8:
      if (bytes.size() != 8) return std::nullopt;
      return row_hash(hash_int_value(static_cast<std::int64_t>(big_endian())));
    case KeyType::text:
      return hash_text_bytes(bytes, 0);
    case KeyType::varchar:
      return hash_text_bytes(bytes, varchar_max_chars);
    case KeyType::uuid:
      if (bytes.size() != 16) return std::nullopt;
      return row_hash(pg_hash_bytes_extended(bytes, kHashPartitionSeed));
  }
  return std::nullopt;
}

std::uint32_t partition_for_hash(std::uint64_t h, std::uint32_t modulus) {
  if (modulus == 0) return 0;
  return static_cast<std::uint32_t>(h % modulus);
}

std::uint64_t salted_row_hash(std::uint64_t key_row_hash, std::uint32_t bucket) {
  return pg_hash_combine64(key_row_hash, pg_hash_uint32_extended(bucket, kHashPartitionSeed));
}

std::uint32_t partition_for_null(std::uint32_t /*modulus*/) { return 0; }

}  // namespace splitpoint::routing
