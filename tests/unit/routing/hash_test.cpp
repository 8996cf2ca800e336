// Expected values below were obtained from PostgreSQL 15.18 (UTF8, C.UTF-8): the
// remainders from temp tables PARTITION BY HASH (k) with every remainder of modulus 7,
// 64 and 1000 (SELECT tableoid::regclass), the hashes from hashint4extended(),
// hashint8extended(), hashtextextended() and uuid_hash_extended() (to_hex()).
// tests/integration/hash_equivalence.cpp checks thousands more against a live server.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "routing/hash.hpp"

using namespace splitpoint::routing;

namespace {

struct Placement {
  KeyType type;
  std::string_view text;
  std::uint32_t r7, r64, r1000;
};

// PostgreSQL's placements for modulus 7, 64, 1000.
const Placement kPlacements[] = {
    {KeyType::int2, "0", 4, 48, 768},
    {KeyType::int2, "1", 5, 56, 40},
    {KeyType::int2, "-1", 0, 37, 869},
    {KeyType::int2, "42", 0, 34, 514},
    {KeyType::int2, "32767", 5, 14, 766},
    {KeyType::int2, "-32768", 0, 61, 141},
    {KeyType::int4, "0", 4, 48, 768},
    {KeyType::int4, "1", 5, 56, 40},
    {KeyType::int4, "-1", 0, 37, 869},
    {KeyType::int4, "123456789", 4, 13, 317},
    {KeyType::int4, "2147483647", 0, 63, 119},
    {KeyType::int4, "-2147483648", 3, 54, 606},
    {KeyType::int8, "0", 4, 48, 768},
    {KeyType::int8, "1", 5, 56, 40},
    {KeyType::int8, "-1", 0, 37, 869},
    {KeyType::int8, "4294967296", 5, 56, 40},
    {KeyType::int8, "-4294967297", 4, 42, 114},
    {KeyType::int8, "1234567890123", 0, 15, 471},
    {KeyType::int8, "9223372036854775807", 3, 54, 606},
    {KeyType::int8, "-9223372036854775808", 0, 63, 119},
    {KeyType::text, "", 1, 38, 806},
    {KeyType::text, "a", 3, 30, 342},
    {KeyType::text, "abc", 3, 37, 813},
    {KeyType::text, "hello world", 4, 8, 600},
    {KeyType::text, "twelve bytes", 6, 22, 646},
    {KeyType::text, "thirteen byte", 4, 54, 14},
    {KeyType::text, "h\xc3\xa9llo", 4, 35, 483},
    {KeyType::text, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", 6, 62, 6},
    {KeyType::text, "\xf0\x9f\x98\x80", 6, 49, 697},
    {KeyType::text, "abcdefghijklmnopqrstuvwx", 4, 17, 193},
    {KeyType::uuid, "00000000-0000-0000-0000-000000000000", 2, 37, 925},
    {KeyType::uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", 6, 16, 56},
    {KeyType::uuid, "ffffffff-ffff-ffff-ffff-ffffffffffff", 0, 1, 353},
};

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::uint32_t remainder_of(KeyType t, std::string_view text, std::uint32_t modulus) {
  auto h = hash_key_text(t, text);
  REQUIRE(h.has_value());
  return partition_for_hash(*h, modulus);
}

std::string big_endian(std::uint64_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

}  // namespace

TEST_CASE("hash keys land where PostgreSQL puts them", "[routing][hash]") {
  for (const auto& p : kPlacements) {
    INFO("key " << p.text);
    CHECK(remainder_of(p.type, p.text, 7) == p.r7);
    CHECK(remainder_of(p.type, p.text, 64) == p.r64);
    CHECK(remainder_of(p.type, p.text, 1000) == p.r1000);
    CHECK(remainder_of(p.type, p.text, 1) == 0);
    if (p.type == KeyType::text) CHECK(remainder_of(KeyType::varchar, p.text, 1000) == p.r1000);
  }
  const std::string long_text = repeat("abc", 40);
  CHECK(remainder_of(KeyType::text, long_text, 7) == 6);
  CHECK(remainder_of(KeyType::text, long_text, 64) == 0);
  CHECK(remainder_of(KeyType::text, long_text, 1000) == 920);
}

TEST_CASE("NULL keys go to remainder 0", "[routing][hash]") {
  for (std::uint32_t m : {1u, 2u, 7u, 64u, 1000u}) CHECK(partition_for_null(m) == 0);
}

TEST_CASE("building blocks match PostgreSQL's hash functions", "[routing][hash]") {
  constexpr std::uint64_t seed = kHashPartitionSeed;
  // hashint4extended(v, HASH_PARTITION_SEED) and with seed 0
  CHECK(pg_hash_uint32_extended(0, seed) == 0xc2e34bda39f0f0cdULL);
  CHECK(pg_hash_uint32_extended(1, seed) == 0x52d621058124e6d5ULL);
  CHECK(pg_hash_uint32_extended(0xFFFFFFFFu, seed) == 0xba5fc748095606c2ULL);
  CHECK(pg_hash_uint32_extended(123456789, seed) == 0xf3311fb2440a2aeaULL);
  CHECK(pg_hash_uint32_extended(0, 0) == 0x39a825beefbec0afULL);
  CHECK(pg_hash_uint32_extended(123456789, 0) == 0x53a55afe1f491564ULL);
  // hashtextextended(s, seed): every tail length path, multi-block input, seed 0
  CHECK(pg_hash_bytes_extended("", seed) == 0xb0e33d0b543fbfc3ULL);
  CHECK(pg_hash_bytes_extended("a", seed) == 0xa2f240f8823ba67bULL);
  CHECK(pg_hash_bytes_extended("abc", seed) == 0x325c02d16f43e1c2ULL);
  CHECK(pg_hash_bytes_extended("hello world", seed) == 0x6a5d0d0ef960c4a5ULL);
  CHECK(pg_hash_bytes_extended("twelve bytes", seed) == 0x1586441e5b8cbc33ULL);
  CHECK(pg_hash_bytes_extended("thirteen byte", seed) == 0x9359ac230e1a8393ULL);
  CHECK(pg_hash_bytes_extended("abcdefghijklmnopqrstuvwx", seed) == 0xffd910c13dcae36eULL);
  CHECK(pg_hash_bytes_extended(repeat("abc", 40), seed) == 0x729f2ad8609d4dddULL);
  CHECK(pg_hash_bytes_extended("\xf0\x9f\x98\x80", seed) == 0x0262b3261273c08eULL);
  CHECK(pg_hash_bytes_extended("", 0) == 0x9fb1b765a7ea466dULL);
  CHECK(pg_hash_bytes_extended("hello world", 0) == 0x606a01613ce64a27ULL);
  CHECK(pg_hash_bytes_extended("thirteen byte", 0) == 0xf01324b4ae789cbcULL);
  // uuid_hash_extended('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', seed / 0)
  const std::string uuid_bytes = "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11";
  CHECK(pg_hash_bytes_extended(uuid_bytes, seed) == 0x05e42c7f7f75bcedULL);
  CHECK(pg_hash_bytes_extended(uuid_bytes, 0) == 0x68ae4fe544d2cf05ULL);
  // The row hash of a one-column key: hash_combine64(0, h).
  CHECK(hash_key_text(KeyType::text, "abc") == pg_hash_combine64(0, 0x325c02d16f43e1c2ULL));
}

TEST_CASE("integer types hash by value", "[routing][hash]") {
  for (std::string_view v : {"0", "1", "-1", "42", "-32768", "32767"}) {
    CHECK(hash_key_text(KeyType::int2, v) == hash_key_text(KeyType::int4, v));
    CHECK(hash_key_text(KeyType::int4, v) == hash_key_text(KeyType::int8, v));
  }
  CHECK(hash_key_text(KeyType::int4, "-2147483648") == hash_key_text(KeyType::int8, "-2147483648"));
  // hashint8extended folds the high half into the low one, so these collide.
  CHECK(hash_key_text(KeyType::int8, "4294967296") == hash_key_text(KeyType::int8, "1"));
  CHECK(hash_key_text(KeyType::int8, "9223372036854775807") ==
        hash_key_text(KeyType::int4, "-2147483648"));
}

TEST_CASE("integer input follows pg_strtoint", "[routing][hash]") {
  const auto zero = hash_key_text(KeyType::int4, "0");
  const auto minus_three = hash_key_text(KeyType::int4, "-3");
  CHECK(hash_key_text(KeyType::int4, " \t\n\r\v\f-3\f\v\r\n\t ") == minus_three);
  CHECK(hash_key_text(KeyType::int4, "-0003") == minus_three);
  CHECK(hash_key_text(KeyType::int4, "+0") == zero);
  CHECK(hash_key_text(KeyType::int4, "-0") == zero);
  CHECK(hash_key_text(KeyType::int8, "000000000000000000000000000000") == zero);
  for (std::string_view bad : {"", " ", "+", "-", "- 3", "3 3", "++3", "+-3", "3.0", "3e2",
                               "0x10", "1_000", "abc", "3a", "\xc2\xa0" "3", "3\xc2\xa0"}) {
    INFO("input '" << bad << "'");
    CHECK_FALSE(hash_key_text(KeyType::int2, bad));
    CHECK_FALSE(hash_key_text(KeyType::int4, bad));
    CHECK_FALSE(hash_key_text(KeyType::int8, bad));
  }
  CHECK_FALSE(hash_key_text(KeyType::int4, std::string_view("3\0", 2)));
  CHECK(hash_key_text(KeyType::int2, "32767"));
  CHECK(hash_key_text(KeyType::int2, "-32768"));
  CHECK_FALSE(hash_key_text(KeyType::int2, "32768"));
  CHECK_FALSE(hash_key_text(KeyType::int2, "-32769"));
  CHECK(hash_key_text(KeyType::int4, "2147483647"));
  CHECK(hash_key_text(KeyType::int4, "-2147483648"));
  CHECK_FALSE(hash_key_text(KeyType::int4, "2147483648"));
  CHECK_FALSE(hash_key_text(KeyType::int4, "-2147483649"));
  CHECK(hash_key_text(KeyType::int8, "9223372036854775807"));
  CHECK(hash_key_text(KeyType::int8, "-9223372036854775808"));
  CHECK_FALSE(hash_key_text(KeyType::int8, "9223372036854775808"));
  CHECK_FALSE(hash_key_text(KeyType::int8, "-9223372036854775809"));
  CHECK_FALSE(hash_key_text(KeyType::int8, "99999999999999999999999"));
}

TEST_CASE("uuid input follows uuid_in", "[routing][hash]") {
  const auto h = hash_key_text(KeyType::uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
  REQUIRE(h);
  for (std::string_view same : {"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                                "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
                                "a0eebc999c0b4ef8bb6d6bb9bd380a11",
                                "{a0eebc999c0b4ef8bb6d6bb9bd380a11}",
                                "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
                                "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11",
                                "a0eebc99-9c0b-4ef8-bb6d-6bb9bd38-0a11"}) {
    INFO("input '" << same << "'");
    CHECK(hash_key_text(KeyType::uuid, same) == h);
  }
  for (std::string_view bad : {"", "{}", " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11 ",
                               "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
                               "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
                               "a0eebc99--9c0b-4ef8-bb6d-6bb9bd380a11",
                               "-a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
                               "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g"}) {
    INFO("input '" << bad << "'");
    CHECK_FALSE(hash_key_text(KeyType::uuid, bad));
  }
}

TEST_CASE("text must be valid UTF-8 without NUL", "[routing][hash]") {
  CHECK(hash_key_text(KeyType::text, "ok\xef\xbf\xbf"));
  CHECK(hash_key_text(KeyType::text, "\xf4\x8f\xbf\xbf"));  // U+10FFFF
  for (std::string_view bad : {"a\xc3", "\xc3\x28", "\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf",
                               "\xed\xa0\x80", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80",
                               "\xf5\x80\x80\x80", "\xff", "\x80", "\xf0\x9f\x98"}) {
    CHECK_FALSE(hash_key_text(KeyType::text, bad));
    CHECK_FALSE(hash_key_binary(KeyType::varchar, bad));
  }
  CHECK_FALSE(hash_key_text(KeyType::text, std::string_view("nul\0byte", 8)));
}

TEST_CASE("varchar(n) drops excess spaces and rejects other excess", "[routing][hash]") {
  CHECK(hash_key_text(KeyType::varchar, "abc  ", 3) == hash_key_text(KeyType::text, "abc"));
  CHECK(hash_key_text(KeyType::varchar, "ab   ", 3) == hash_key_text(KeyType::text, "ab "));
  CHECK(hash_key_text(KeyType::varchar, "ab", 3) == hash_key_text(KeyType::text, "ab"));
  CHECK(hash_key_text(KeyType::varchar, "abc  ") == hash_key_text(KeyType::text, "abc  "));
  // n counts characters, not bytes.
  CHECK(hash_key_text(KeyType::varchar, "\xc3\xa9\xc3\xa9 ", 2) ==
        hash_key_text(KeyType::text, "\xc3\xa9\xc3\xa9"));
  CHECK_FALSE(hash_key_text(KeyType::varchar, "abcd", 3));
  CHECK_FALSE(hash_key_text(KeyType::varchar, "abc \t", 3));  // only ' ' may be cut
  CHECK_FALSE(hash_key_binary(KeyType::varchar, "abc x", 3));
}

TEST_CASE("binary parameters hash as their text form", "[routing][hash]") {
  for (std::int64_t v : {0LL, 1LL, -1LL, 42LL, 32767LL, -32768LL}) {
    auto text = hash_key_text(KeyType::int2, std::to_string(v));
    CHECK(hash_key_binary(KeyType::int2, big_endian(static_cast<std::uint64_t>(v), 2)) == text);
  }
  for (std::int64_t v : {0LL, -1LL, 123456789LL, 2147483647LL, -2147483648LL}) {
    auto text = hash_key_text(KeyType::int4, std::to_string(v));
    CHECK(hash_key_binary(KeyType::int4, big_endian(static_cast<std::uint64_t>(v), 4)) == text);
  }
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{4294967296}, std::int64_t{-4294967297}, INT64_MAX, INT64_MIN}) {
    auto text = hash_key_text(KeyType::int8, std::to_string(v));
    CHECK(hash_key_binary(KeyType::int8, big_endian(static_cast<std::uint64_t>(v), 8)) == text);
  }
  CHECK(hash_key_binary(KeyType::uuid,
                        "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11") ==
        hash_key_text(KeyType::uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"));
  CHECK(hash_key_binary(KeyType::text, "h\xc3\xa9llo") == hash_key_text(KeyType::text, "h\xc3\xa9llo"));
  CHECK(hash_key_binary(KeyType::varchar, "") == hash_key_text(KeyType::varchar, ""));
  // Receive functions take exactly their width.
  CHECK_FALSE(hash_key_binary(KeyType::int2, std::string(4, '\0')));
  CHECK_FALSE(hash_key_binary(KeyType::int4, std::string(2, '\0')));
  CHECK_FALSE(hash_key_binary(KeyType::int4, std::string(8, '\0')));
  CHECK_FALSE(hash_key_binary(KeyType::int8, std::string(4, '\0')));
  CHECK_FALSE(hash_key_binary(KeyType::uuid, std::string(15, '\0')));
  CHECK_FALSE(hash_key_binary(KeyType::uuid, std::string(17, '\0')));
}

TEST_CASE("partition_for_hash is the unsigned remainder", "[routing][hash]") {
  CHECK(partition_for_hash(0xFFFFFFFFFFFFFFFFULL, 7) == 0xFFFFFFFFFFFFFFFFULL % 7);
  CHECK(partition_for_hash(0xFFFFFFFFFFFFFFFFULL, 1000) == 615);
  CHECK(partition_for_hash(12345, 1) == 0);
  CHECK(partition_for_hash(12345, 0) == 0);
}

TEST_CASE("key types by name", "[routing][hash]") {
  CHECK(key_type_from_name("smallint") == KeyType::int2);
  CHECK(key_type_from_name("int2") == KeyType::int2);
  CHECK(key_type_from_name("integer") == KeyType::int4);
  CHECK(key_type_from_name("INT") == KeyType::int4);
  CHECK(key_type_from_name("pg_catalog.int4") == KeyType::int4);
  CHECK(key_type_from_name("serial") == KeyType::int4);
  CHECK(key_type_from_name("bigint") == KeyType::int8);
  CHECK(key_type_from_name("bigserial") == KeyType::int8);
  CHECK(key_type_from_name("text") == KeyType::text);
  CHECK(key_type_from_name(" character varying ") == KeyType::varchar);
  CHECK(key_type_from_name("varchar") == KeyType::varchar);
  CHECK(key_type_from_name("uuid") == KeyType::uuid);
  CHECK_FALSE(key_type_from_name("character varying(20)"));
  CHECK_FALSE(key_type_from_name("numeric"));
  CHECK_FALSE(key_type_from_name("character"));
  CHECK_FALSE(key_type_from_name(""));
}
