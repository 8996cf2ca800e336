// Values as the merger reads and prints them (routing/merge/value.hpp, value_numeric.hpp).
// Expected texts and bytes come from PostgreSQL 15 (psql: avg(), float4out/float8out
// with extra_float_digits 1 and 0, numeric_send(), date arithmetic).
#include <catch2/catch.hpp>

#include <locale.h>

#include <cmath>
#include <limits>
#include <string>

#include "routing/merge/value.hpp"
#include "routing/merge/value_numeric.hpp"

using namespace splitpoint::routing;

namespace {

std::string text_of(const char* s) {
  auto d = Decimal::parse(s);
  REQUIRE(d);
  return d->to_text();
}

std::string sum(const char* a, const char* b) { return Decimal::parse(a)->plus(*Decimal::parse(b)).to_text(); }

std::string avg(const char* total, std::int64_t count) { return Decimal::parse(total)->divided_by_count(count).to_text(); }

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace

TEST_CASE("numeric text in and out keeps the display scale", "[merge]") {
  CHECK(text_of("1.50") == "1.50");
  CHECK(text_of("-0.00") == "0.00");
  CHECK(text_of("007") == "7");
  CHECK(text_of(" 1e3 ") == "1000");
  CHECK(text_of("1.5e-3") == "0.0015");
  CHECK(text_of("NaN") == "NaN");
  CHECK(text_of("-inf") == "-Infinity");
  CHECK_FALSE(Decimal::parse("abc"));
  CHECK_FALSE(Decimal::parse("1.2.3"));
  CHECK_FALSE(Decimal::parse(""));
  CHECK_FALSE(Decimal::parse("-"));
}

TEST_CASE("numeric addition and avg's division", "[merge]") {
  CHECK(sum("1.5", "2.25") == "3.75");
  CHECK(sum("-1.5", "1.5") == "0.0");
  CHECK(sum("999.99", "0.01") == "1000.00");
  CHECK(sum("-5", "3.000") == "-2.000");
  CHECK(sum("Infinity", "-Infinity") == "NaN");
  CHECK(sum("Infinity", "5") == "Infinity");
  CHECK(sum("NaN", "1") == "NaN");
  // numeric_div with select_div_scale, rounded half away from zero.
  CHECK(avg("3", 2) == "1.5000000000000000");
  CHECK(avg("100000002", 2) == "50000001.000000000000");
  CHECK(avg("0.0004", 3) == "0.00013333333333333333");
  CHECK(avg("0", 3) == "0.00000000000000000000");
  CHECK(avg("-2", 3) == "-0.66666666666666666667");
  CHECK(avg("100000000000000000000", 7) == "14285714285714285714");
  CHECK(avg("3.625", 2) == "1.8125000000000000");
  CHECK(avg("-Infinity", 4) == "-Infinity");
  // An input scale above 1000 is cut to 1000 places (NUMERIC_MAX_DISPLAY_SCALE), rounded.
  std::string tiny = "0." + std::string(1199, '0') + "6";
  CHECK(avg(tiny.c_str(), 1) == "0." + std::string(1000, '0'));
  std::string third = "0." + std::string(999, '0') + "5" + std::string(200, '0');
  CHECK(avg(third.c_str(), 1) == "0." + std::string(999, '0') + "5");
}

TEST_CASE("numeric binary form matches numeric_send", "[merge]") {
  std::string out;
  Decimal::parse("1.5")->to_binary(out);
  CHECK(hex(out) == "000200000000000100011388");
  out.clear();
  Decimal::parse("-0.0001")->to_binary(out);
  CHECK(hex(out) == "0001ffff400000040001");
  out.clear();
  Decimal::parse("12345678.9")->to_binary(out);
  CHECK(hex(out) == "000300010000000104d2162e2328");
  for (const char* s : {"0", "0.000", "-0.5", "1000000", "10000.0001", "NaN", "Infinity", "-Infinity", "123.4500"}) {
    std::string b;
    Decimal::parse(s)->to_binary(b);
    auto back = Decimal::from_binary(b);
    REQUIRE(back);
    CHECK(back->to_text() == text_of(s));
  }
  CHECK_FALSE(Decimal::from_binary(std::string("\0\1\0\0\0\0\0\0", 8)));  // says one digit, has none
}

TEST_CASE("numeric text compares as numbers", "[merge]") {
  CHECK(compare_numeric_text("-0", "0") == 0);
  CHECK(compare_numeric_text("0.10", "0.1") == 0);
  CHECK(compare_numeric_text("-0.5", "-0.25") < 0);
  CHECK(compare_numeric_text("10", "9.999") > 0);
  CHECK(compare_numeric_text("-Infinity", "-100000") < 0);
  CHECK(compare_numeric_text("Infinity", "NaN") < 0);
  CHECK(compare_numeric_text("NaN", "NaN") == 0);
  CHECK(valid_numeric_text("-12.50"));
  CHECK_FALSE(valid_numeric_text("1."));
  CHECK_FALSE(valid_numeric_text("1e5"));
}

TEST_CASE("float8out and float4out", "[merge]") {
  CHECK(format_float8(0.1 + 0.2, 1) == "0.30000000000000004");
  CHECK(format_float8(1e15, 1) == "1e+15");
  CHECK(format_float8(1e14, 1) == "100000000000000");
  CHECK(format_float8(0.0001, 1) == "0.0001");
  CHECK(format_float8(0.00001, 1) == "1e-05");
  CHECK(format_float8(-0.0, 1) == "-0");
  CHECK(format_float8(std::nan(""), 1) == "NaN");
  CHECK(format_float8(-std::numeric_limits<double>::infinity(), 1) == "-Infinity");
  CHECK(format_float8(5e-324, 1) == "5e-324");
  CHECK(format_float8(1.7976931348623157e308, 1) == "1.7976931348623157e+308");
  CHECK(format_float8(123456789012345680.0, 1) == "1.2345678901234568e+17");
  CHECK(format_float4(1e6f, 1) == "1e+06");
  CHECK(format_float4(123456.0f, 1) == "123456");
  CHECK(format_float4(59281672.0f, 1) == "5.9281672e+07");  // not 5.928167e+07: on the boundary
  CHECK(format_float4(1.1f, 1) == "1.1");
  CHECK(format_float8(0.1 + 0.2, 0) == "0.3");
  CHECK(format_float4(1.1f, 0) == "1.1");
  CHECK(parse_float8("1e-05") == 0.00001);
  CHECK(std::isnan(*parse_float8("NaN")));
  CHECK_FALSE(parse_float8("1.0x"));
}

TEST_CASE("ISO dates and times become instants", "[merge]") {
  CHECK(parse_date_text("2000-01-01") == 0);
  CHECK(parse_date_text("2000-01-02") == 1);
  CHECK(parse_date_text("1999-12-31") == -1);
  CHECK(*parse_date_text("0001-01-01") - *parse_date_text("0001-01-01 BC") == 366);
  CHECK(*parse_date_text("2000-01-01") - *parse_date_text("0044-03-15 BC") == 746117);
  CHECK(parse_date_text("infinity") == std::numeric_limits<std::int64_t>::max());
  CHECK(parse_date_text("-infinity") == std::numeric_limits<std::int64_t>::min());
  CHECK(parse_date_text("10000-01-01") > parse_date_text("9999-12-31"));
  CHECK_FALSE(parse_date_text("2024-13-01"));
  CHECK_FALSE(parse_date_text("01/02/2024"));
  CHECK(parse_timestamp_text("2000-01-01 00:00:00", false) == 0);
  CHECK(parse_timestamp_text("2000-01-01 00:00:00.5", false) == 500000);
  CHECK(parse_timestamp_text("2000-01-01 05:30:00+05:30", true) == 0);
  CHECK(parse_timestamp_text("1999-12-31 16:00:00-08", true) == 0);
  CHECK(parse_timestamp_text("2000-01-01 00:53:28+00:53:28", true) == 0);
  CHECK_FALSE(parse_timestamp_text("2000-01-01 00:00:00", true));  // timestamptz needs its offset
  CHECK(parse_time_text("24:00:00") == 86400000000LL);
  CHECK(parse_time_text("00:00:00.000001") == 1);
}

TEST_CASE("collations: bytes, or the libc locale with a byte tie-break", "[merge]") {
  Collation c = Collation::bytewise();
  CHECK(c.compare("B", "a") < 0);
  CHECK(c.compare("a", "ab") < 0);
  CHECK(c.compare("é", "z") > 0);
  REQUIRE(Collation::named("C.UTF-8"));
  CHECK(Collation::named("C.UTF-8")->is_bytewise());
  CHECK(Collation::named("POSIX")->is_bytewise());
  CHECK_FALSE(Collation::named("xx_NOPE.UTF-8"));
  locale_t probe = newlocale(LC_COLLATE_MASK, "en_US.UTF-8", nullptr);
  if (probe != nullptr) {
    freelocale(probe);
    Collation en = *Collation::named("en_US.UTF-8");
    CHECK(en.compare("a", "B") < 0);
    CHECK(en.compare("b", "B") < 0);
    CHECK(en.compare("é", "f") < 0);
    CHECK(en.compare("a b", "ab") < 0);
    CHECK(en.compare("x", "x") == 0);
    REQUIRE(Collation::named("en_US"));  // pg_collation's alias of en_US.utf8
    CHECK_FALSE(Collation::named("en_US")->is_bytewise());
  }
}

TEST_CASE("ICU collations order text as PostgreSQL's ICU provider does", "[merge]") {
  // en-US: 'a' < 'A' < 'b' < 'é' < 'Z'; by bytes 'A' < 'Z' < 'a' < 'b' < 'é'.
  auto en = Collation::named("icu:en-US");
  REQUIRE(en);
  CHECK_FALSE(en->is_bytewise());
  CHECK(en->compare("a", "A") < 0);
  CHECK(en->compare("A", "b") < 0);
  CHECK(en->compare("b", "é") < 0);
  CHECK(en->compare("é", "Z") < 0);
  CHECK(en->compare("Z", "é") > 0);
  CHECK(en->compare("x", "x") == 0);
  auto und = Collation::named("und-x-icu");  // pg_collation's name for the root locale
  REQUIRE(und);
  CHECK(und->compare("b", "B") < 0);
  CHECK(und->compare("B", "c") < 0);
}

TEST_CASE("DataRow bodies are split safely", "[merge]") {
  std::vector<Field> fields;
  std::string ok("\0\2\0\0\0\1x\xff\xff\xff\xff", 11);
  REQUIRE(split_data_row(ok, fields));
  REQUIRE(fields.size() == 2);
  CHECK(fields[0].len == 1);
  CHECK(fields[1].null());
  CHECK_FALSE(split_data_row(std::string("\0\1\0\0\0\5x", 7), fields));  // length past the end
  CHECK_FALSE(split_data_row(std::string("\0\1\0\0\0\1xy", 8), fields));  // trailing bytes
  CHECK_FALSE(split_data_row(std::string("\0", 1), fields));
}

TEST_CASE("equality keys follow PostgreSQL's =", "[merge]") {
  auto key = [](ValueKind kind, const std::string& v) {
    ColumnCodec codec{kind, 0, nullptr};
    Key k;
    Field f{0, static_cast<std::int32_t>(v.size())};
    REQUIRE(decode_key(codec, v.data(), f, k));
    std::string out;
    append_equality_key(codec, v.data(), k, out);
    return out;
  };
  CHECK(key(ValueKind::numeric, "1.0") == key(ValueKind::numeric, "1.00"));
  CHECK(key(ValueKind::numeric, "-0") == key(ValueKind::numeric, "0.0"));
  CHECK(key(ValueKind::numeric, "10") != key(ValueKind::numeric, "1"));
  CHECK(key(ValueKind::float8, "-0") == key(ValueKind::float8, "0"));
  CHECK(key(ValueKind::float8, "NaN") == key(ValueKind::float8, "NaN"));
  CHECK(key(ValueKind::bpchar, "ab  ") == key(ValueKind::bpchar, "ab"));
  CHECK(key(ValueKind::text, "ab ") != key(ValueKind::text, "ab"));
}
