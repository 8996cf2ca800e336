// The cheap lexical pass behind the simple-protocol plan cache and comment hints
// (routing/text_scan.hpp), and the array/binary value readers (routing/key_values.hpp).
#include <catch2/catch.hpp>

#include "routing/text_scan.hpp"
#include "routing/key_values.hpp"

using namespace splitpoint::routing;

namespace {

std::string key(std::string_view sql) {
  ScannedText t;
  REQUIRE(scan_text(sql, t));
  return t.key;
}

std::vector<std::string> literals(std::string_view sql) {
  ScannedText t;
  REQUIRE(scan_text(sql, t));
  std::vector<std::string> out;
  for (const Literal& l : t.literals) out.push_back(literal_value(sql, l).value_or("<?>"));
  return out;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST_CASE("texts differing only in literals, case, spacing or comments share a key", "[router][normalize]") {
  const std::string k = key("SELECT * FROM users WHERE id = 42");
  for (const char* sql : {"SELECT * FROM users WHERE id = 7", "select * from USERS where ID = 123456789012",
                          "SELECT  *\n  FROM users\tWHERE id = '42'", "SELECT * FROM users WHERE id = E'4\\'2'",
                          "SELECT * FROM users WHERE id = $$42$$", "SELECT * FROM users WHERE id = $x$42$x$",
                          "/* splitpoint: shard=s1 */ SELECT * FROM users WHERE id = 1.5e3",
                          "SELECT * FROM users -- trailing\nWHERE id = 1", "SELECT * FROM users WHERE id = 42 /* c */",
                          "SELECT * FROM users WHERE id = N'42'"}) {
    INFO(sql);
    CHECK(key(sql) == k);
  }
  for (const char* sql : {"SELECT * FROM users WHERE id = $1", "SELECT * FROM \"Users\" WHERE id = 42",
                          "SELECT * FROM users WHERE id = -42", "SELECT * FROM users WHERE id IN (1, 2)",
                          "SELECT * FROM users WHERE id = 42 AND 1 = 1", "SELECT * FROM users2 WHERE id = 42",
                          "SELECT * FROM users WHERE \"ID\" = 42", "SELECT * FROM users WHERE id = 42 LIMIT 1"}) {
    INFO(sql);
    CHECK(key(sql) != k);
  }
  CHECK(key("SELECT $1, $2") != key("SELECT $2, $1"));
  CHECK(key("SELECT a-1") != key("SELECT a--1\n"));  // `--` starts a comment
  CHECK(key("SELECT t1.a FROM t1") == "select t1.a from t1");
  CHECK(key("select a$b, x1y") == "select a$b, x1y");  // `$` inside an identifier, digits in names
}

TEST_CASE("literal values are read as PostgreSQL's lexer reads them", "[router][normalize]") {
  CHECK(literals("SELECT 1, 2.5, .5, 1e10, 3E-2, 'a', 'it''s', E'a\\'b\\n', $$x'y$$, $tag$a$b$tag$") ==
        Strings{"1", "2.5", ".5", "1e10", "3E-2", "a", "it's", "a'b\n", "x'y", "a$b"});
  CHECK(literals("SELECT '/* not a comment */', '--', \"quo\"\"ted\", x -- 'no'\n") ==
        Strings{"/* not a comment */", "--"});
  CHECK(literals("SELECT 1 /* '2' /* nested '3' */ '4' */ , 5") == Strings{"1", "5"});
  CHECK(literals("SELECT B'101', X'ff', U&'d\\0061t'") == Strings{"<?>", "<?>", "<?>"});  // not read: parsed
  CHECK(literals("SELECT E'\\x41', E'\\101', E'\\u0041'") == Strings{"<?>", "<?>", "<?>"});
  CHECK(literals("SELECT a1, t.\"x1\", $1, 1") == Strings{"1"});
  ScannedText t;
  CHECK_FALSE(scan_text("SELECT 'open", t));
  CHECK_FALSE(scan_text("SELECT $a$ open", t));
  CHECK_FALSE(scan_text("SELECT 1 /* open /* */", t));
  CHECK_FALSE(scan_text("SELECT \"open", t));
  CHECK(scan_text("SELECT 1 -- open", t));
}

TEST_CASE("comment hints", "[router][normalize]") {
  using H = Hints;
  CHECK(scan_hints("/* splitpoint: shard=s1 */ SELECT 1") == H{{"shard", "s1"}});
  CHECK(scan_hints("SELECT 1 /*splitpoint:key=42,deadline = 200ms , partial=allow*/") ==
        H{{"key", "42"}, {"deadline", "200ms"}, {"partial", "allow"}});
  CHECK(scan_hints("SELECT 1 -- splitpoint: key='a b'") == H{{"key", "a b"}});
  CHECK(scan_hints("/* SPLITPOINT: Shard = s0 */ SELECT 1") == H{{"shard", "s0"}});
  CHECK(scan_hints("/* a comment */ SELECT 1").empty());
  CHECK(scan_hints("/* not splitpoint: shard=s1 */ SELECT 1").empty());
  CHECK(scan_hints("SELECT '/* splitpoint: shard=s1 */'").empty());
  CHECK(scan_hints("SELECT $$ -- splitpoint: shard=s1 $$").empty());
  CHECK(scan_hints("/* splitpoint: shard=s0 */ SELECT 1 /* splitpoint: deadline=1s */") ==
        H{{"shard", "s0"}, {"deadline", "1s"}});
}

TEST_CASE("array values in text and binary form", "[router][normalize]") {
  using V = KeyValues;
  auto text = [](std::string_view s) {
    KeyValues v;
    REQUIRE(parse_text_array(s, v));
    return v;
  };
  CHECK(text("{1,2,3}") == V{"1", "2", "3"});
  CHECK(text(" { 1 , 2 } ") == V{"1", "2"});
  CHECK(text("{}") == V{});
  CHECK(text("{\"a,b\",\"c\\\"d\",NULL,null,\"NULL\"}") == V{"a,b", "c\"d", std::nullopt, std::nullopt, "NULL"});
  CHECK(text("{{1,2},{3,4}}") == V{"1", "2", "3", "4"});
  CHECK(text("[0:1]={5,6}") == V{"5", "6"});
  CHECK(text("{a b, c}") == V{"a b", "c"});
  KeyValues bad;
  CHECK_FALSE(parse_text_array("1,2", bad));
  CHECK_FALSE(parse_text_array("{1,2", bad));
  CHECK_FALSE(parse_text_array("{1,2} x", bad));

  ColumnType bigint = column_type("bigint");
  std::string out;
  CHECK(decode_binary(20, std::string("\xff\xff\xff\xff\xff\xff\xff\xfe", 8), bigint, out));
  CHECK(out == "-2");
  CHECK(decode_binary(23, std::string("\x00\x00\x01\x00", 4), bigint, out));
  CHECK(out == "256");
  CHECK_FALSE(decode_binary(20, std::string("\x00\x01", 2), bigint, out));
  CHECK(decode_binary(0, std::string("\x00\x07", 2), bigint, out));  // unspecified: the column's integer
  CHECK(out == "7");
  CHECK(decode_binary(1082, std::string("\x00\x00\x22\xB7", 4), column_type("date"), out));  // 8887 days
  CHECK(out == "2024-05-01");
  CHECK(decode_binary(1114, std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8), column_type("timestamp"), out));
  CHECK(out == "2000-01-01 00:00:00");
  CHECK(decode_binary(2950, std::string(16, '\xab'), column_type("uuid"), out));
  CHECK(out == "abababab-abab-abab-abab-abababababab");
  CHECK_FALSE(decode_binary(700, std::string(4, '\0'), bigint, out));  // float4: not a key type
  CHECK(column_type("character varying(20)").varchar_max_chars == 20);
  CHECK(column_type("character varying(20)").hash_type == KeyType::varchar);
  CHECK(column_type("integer").integer);
}
