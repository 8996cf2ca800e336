// PostgreSQL 15 hash partitioning, bit for bit: for a table
// `PARTITION BY HASH (key)` with partitions `FOR VALUES WITH (MODULUS m, REMAINDER r)`,
// partition_for_hash(hash_key_*(type, value), m) is the r PostgreSQL stores the row in.
// https://www.postgresql.org/docs/15/ddl-partitioning.html
//
// The key's extended hash function (hashint4extended, hashint8extended,
// hashtextextended, uuid_hash_extended) is called with HASH_PARTITION_SEED and folded
// into a row hash with hash_combine64 starting from 0; the remainder is that unsigned
// row hash modulo the modulus. A NULL key contributes nothing, so its row hash is 0.
// PostgreSQL reads the bytes of text and uuid keys as native 32-bit words; this is its
// result on little-endian servers (x86-64, ARM64), not on big-endian ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace splitpoint::routing {

enum class KeyType { int2, int4, int8, text, varchar, uuid };

// SQL or catalog spelling of a key type, case-insensitive, optionally qualified with
// "pg_catalog.": "smallint"/"int2", "integer"/"int"/"int4", "bigint"/"int8",
// "text", "character varying"/"varchar", "uuid", and the serial pseudo-types.
// A type modifier ("character varying(20)") is not accepted: strip it and pass the
// length as varchar_max_chars below.
std::optional<KeyType> key_type_from_name(std::string_view pg_type_name);

// Row hash of a non-NULL key given in PostgreSQL's text form (a literal's contents or
// a Bind parameter with format 0); nullopt if PostgreSQL's input function for the
// type would reject it. Text and varchar must be valid UTF-8 without NUL bytes (the
// server encoding is assumed to be UTF8 and the column's collation deterministic:
// the bytes are hashed as they are).
// varchar_max_chars > 0 applies a varchar(n) column's assignment rule: a longer value
// is an error unless the excess characters are all spaces, which are cut off. It is
// ignored for other types.
std::optional<std::uint64_t> hash_key_text(KeyType type, std::string_view text_value,
                                           std::int32_t varchar_max_chars = 0);

// The same for a value in binary wire format (a Bind parameter with format 1):
// big-endian 2/4/8-byte integers, raw text bytes, 16 uuid bytes. The length must be
// exact, as PostgreSQL's receive functions require.
// All integer types hash by value (an int4 5 and an int8 5 hash alike), so a
// parameter may be hashed with its own integer type whatever the column's one is.
std::optional<std::uint64_t> hash_key_binary(KeyType type, std::string_view bytes,
                                             std::int32_t varchar_max_chars = 0);

// The remainder of the partition holding a key with row hash h. modulus must be >= 1
// (0 yields 0 rather than dividing by zero).
std::uint32_t partition_for_hash(std::uint64_t h, std::uint32_t modulus);

// The remainder holding a NULL key: always 0, as PostgreSQL's row hash of NULL is 0.
std::uint32_t partition_for_null(std::uint32_t modulus);

// Salting (SPEC §13): a salted distribution's row hash is PostgreSQL's for
// `PARTITION BY HASH (key, bucket int4)`, the key's row hash (0 for NULL) combined with
// hashint4extended(bucket); the bucket is the salt value's row hash (that of a
// one-column hash partitioning; 0 for NULL) modulo the bucket count.
std::uint64_t salted_row_hash(std::uint64_t key_row_hash, std::uint32_t bucket);

// The building blocks, named after their PostgreSQL counterparts; exposed for tests
// and for multi-column keys (fold each column's hash into the row hash in order).
inline constexpr std::uint64_t kHashPartitionSeed = 0x7A5B22367996DCFDULL;
std::uint64_t pg_hash_bytes_extended(std::string_view bytes, std::uint64_t seed);
std::uint64_t pg_hash_uint32_extended(std::uint32_t k, std::uint64_t seed);
std::uint64_t pg_hash_combine64(std::uint64_t a, std::uint64_t b);

}  // namespace splitpoint::routing
