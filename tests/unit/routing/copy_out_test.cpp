// COPY ... TO STDOUT output written by the proxy (routing/merge/copy_out.hpp): the bytes
// PostgreSQL 15's copyto.c writes for the same values. The integration test
// test_scatter_differential.py compares whole outputs with a real server; these cases
// pin the escaping and quoting rules one by one.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "routing/merge/copy_out.hpp"

using namespace splitpoint::routing;
using namespace std::string_literals;

namespace {

CopyStatement stmt(std::string_view sql) {
  std::string err;
  auto s = parse_copy(sql, &err);
  INFO(err);
  REQUIRE(s);
  return *s;
}

// A DataRow body: field count, then int32 length + bytes each (nullopt = NULL).
std::string data_row(const std::vector<std::optional<std::string>>& values) {
  std::string out;
  out.push_back(static_cast<char>(values.size() >> 8));
  out.push_back(static_cast<char>(values.size()));
  for (const auto& v : values) {
    std::uint32_t len = v ? static_cast<std::uint32_t>(v->size()) : 0xffffffffu;
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>(len >> s));
    if (v) out += *v;
  }
  return out;
}

std::string line(CopyOutFormatter& f, const std::vector<std::optional<std::string>>& values) {
  std::string out;
  REQUIRE(f.row(data_row(values), out));
  return out;
}

}  // namespace

TEST_CASE("copy source query: the query itself, or the table's columns without children", "[copy]") {
  CHECK(copy_source_query("COPY (SELECT a FROM t ORDER BY a) TO STDOUT") == "SELECT a FROM t ORDER BY a");
  CHECK(copy_source_query("COPY s.\"T\" (a, \"B\") TO STDOUT") == "SELECT \"a\", \"B\" FROM ONLY \"s\".\"T\"");
  CHECK(copy_source_query("COPY t TO STDOUT (FORMAT csv)") == "SELECT * FROM ONLY \"t\"");
  std::string err;
  CHECK_FALSE(copy_source_query("SELECT 1", &err));
  CHECK(err == "not a single COPY statement");
}

TEST_CASE("copy out text: backslash escapes, NULL string, delimiter, header", "[copy]") {
  auto s = stmt("COPY (SELECT 1) TO STDOUT");
  CopyOutFormatter f(s, {"a", "b"});
  CHECK(f.header().empty());
  CHECK(line(f, {"x\ty\nz\\w\r"s, std::nullopt}) == "x\\ty\\nz\\\\w\\r\t\\N\n");
  CHECK(line(f, {"\b\f\v\x01"s, ""s}) == "\\b\\f\\v\x01\t\n");
  auto p = stmt("COPY (SELECT 1) TO STDOUT (DELIMITER '|', NULL 'nil', HEADER)");
  CopyOutFormatter g(p, {"a|b", "c"});
  CHECK(g.header() == "a\\|b|c\n");
  CHECK(line(g, {"1|2"s, std::nullopt}) == "1\\|2|nil\n");
  CHECK(g.trailer().empty());
}

TEST_CASE("copy out csv: quoting as CopyAttributeOutCSV", "[copy]") {
  auto s = stmt("COPY (SELECT 1) TO STDOUT (FORMAT csv, HEADER)");
  CopyOutFormatter f(s, {"id", "v"});
  CHECK(f.header() == "id,v\n");
  CHECK(line(f, {"1"s, "plain"s}) == "1,plain\n");
  CHECK(line(f, {"1"s, ""s}) == "1,\"\"\n");  // equal to the NULL string: quoted
  CHECK(line(f, {"1"s, std::nullopt}) == "1,\n");
  CHECK(line(f, {"a,b"s, "say \"hi\"\n"s}) == "\"a,b\",\"say \"\"hi\"\"\n\"\n");
  CHECK(line(f, {"\\."s, "\r"s}) == "\\.,\"\r\"\n");  // "\." is quoted only alone on its line
  CopyOutFormatter one(s, {"v"});
  CHECK(line(one, {"\\."s}) == "\"\\.\"\n");
  auto q = stmt("COPY (SELECT 1) TO STDOUT (FORMAT csv, QUOTE '''', ESCAPE '\\', FORCE_QUOTE (b), NULL 'N')");
  CopyOutFormatter g(q, {"a", "b"});
  CHECK(line(g, {"it's"s, "x\\y"s}) == "'it\\'s','x\\\\y'\n");
  CHECK(line(g, {"N"s, std::nullopt}) == "'N',N\n");
  auto all = stmt("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORCE_QUOTE *)");
  CopyOutFormatter h(all, {"a", "b"});
  CHECK(line(h, {"1"s, std::nullopt}) == "\"1\",\n");
  auto bad = stmt("COPY (SELECT 1) TO STDOUT (FORMAT csv, FORCE_QUOTE (zz))");
  CHECK(CopyOutFormatter(bad, {"a"}).error() == "FORCE_QUOTE column \"zz\" not referenced by COPY");
}

TEST_CASE("copy out binary: signature before the first row, trailer last", "[copy]") {
  auto s = stmt("COPY (SELECT 1) TO STDOUT (FORMAT binary)");
  const std::string header("PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19);
  CopyOutFormatter f(s, {"a"});
  std::string row = data_row({"\x00\x00\x00\x07"s});
  std::string out;
  REQUIRE(f.row(row, out));
  CHECK(out == header + row);
  out.clear();
  REQUIRE(f.row(row, out));
  CHECK(out == row);
  CHECK(f.trailer() == "\xff\xff"s);
  CopyOutFormatter empty(s, {"a"});
  CHECK(empty.trailer() == header + "\xff\xff"s);
  CHECK_FALSE(empty.row(data_row({"1"s, "2"s}), out));  // not the result's column count
}
