// COPY statements and the streaming splitter (routing/copy.hpp), against PostgreSQL
// 15's COPY formats (https://www.postgresql.org/docs/15/sql-copy.html).
//
// The edge cases below were checked against PostgreSQL 15.18 itself: each input was
// sent with libpq (PQputCopyData) into COPY e(k text, v text) FROM STDIN and the
// server's answer (rows and keys, or its error) is what the splitter must match. The
// captures at the end are COPY (SELECT * FROM awk ORDER BY id) TO STDOUT output of
// that server for a table with tabs, newlines, CR, backslashes, quotes, commas, "\.",
// NULLs, empty strings, multibyte text and bigint extremes; the expected fields are
// its SELECT col::text (and int4send/int8send/textsend for binary), as hex.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "routing/copy.hpp"
#include "routing/insert_split.hpp"

using namespace splitpoint::routing;
using Format = CopyStatement::Format;
using namespace std::string_literals;

namespace {

CopyStatement stmt(std::string_view sql) {
  std::string err;
  auto s = parse_copy(sql, &err);
  INFO(sql << " -> " << err);
  REQUIRE(s);
  return *s;
}

std::string refused(std::string_view sql) {
  std::string err;
  auto s = parse_copy(sql, &err);
  INFO(sql);
  CHECK_FALSE(s);
  CHECK_FALSE(err.empty());
  return err;
}

struct Split {
  bool ok = true;
  std::string error;
  std::string prologue;
  std::string epilogue;
  std::vector<std::string> rows;
  std::vector<std::optional<std::string>> keys;
};

// Feeds `data` in pieces of the given sizes (what is left in one more piece), then
// finishes, taking rows after every call as the proxy does.
Split split(const CopyStatement& s, std::size_t key, std::string_view data, const std::vector<std::size_t>& pieces = {},
            std::string_view key_column = {}) {
  CopySplitter sp(s, key, key_column);
  Split out;
  auto drain = [&] {
    CopyRow row;
    while (sp.next_row(row)) {
      REQUIRE(sp.prologue_ready());  // a shard gets the header before any row
      out.rows.emplace_back(row.bytes);
      out.keys.push_back(row.key);
    }
  };
  std::size_t at = 0;
  for (std::size_t n : pieces) {
    if (at >= data.size() || !out.ok) break;
    n = std::min(n, data.size() - at);
    out.ok = sp.feed(data.substr(at, n));
    drain();
    at += n;
  }
  if (out.ok && at < data.size()) {
    out.ok = sp.feed(data.substr(at));
    drain();
  }
  if (out.ok) {
    out.ok = sp.finish();
    drain();
  }
  out.error = sp.error();
  if (sp.prologue_ready()) out.prologue = sp.prologue();
  out.epilogue = sp.epilogue();
  return out;
}

void same(const Split& a, const Split& b) {
  REQUIRE(a.ok == b.ok);
  REQUIRE(a.error == b.error);
  if (!a.ok) return;  // how many rows came out before the error depends on the cuts
  REQUIRE(a.prologue == b.prologue);
  REQUIRE(a.rows == b.rows);
  REQUIRE(a.keys == b.keys);
}

// The same result however the stream is cut: one byte at a time, at every single
// boundary, and in random pieces.
Split split_every_way(const CopyStatement& s, std::size_t key, std::string_view data, std::string_view key_column = {}) {
  Split whole = split(s, key, data, {}, key_column);
  {
    INFO("one byte at a time");
    same(whole, split(s, key, data, std::vector<std::size_t>(data.size(), 1), key_column));
  }
  for (std::size_t i = 1; i < data.size(); ++i) {
    INFO("cut at " << i);
    same(whole, split(s, key, data, {i}, key_column));
  }
  std::mt19937 rng(20240615);
  std::uniform_int_distribution<std::size_t> size(1, 23);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::size_t> pieces;
    for (std::size_t n = 0; n < data.size(); n += pieces.back()) pieces.push_back(size(rng));
    INFO("random pieces, round " << round);
    same(whole, split(s, key, data, pieces, key_column));
  }
  return whole;
}

std::string joined(const std::vector<std::string>& rows) {
  std::string out;
  for (const auto& r : rows) out += r;
  return out;
}

std::optional<std::string> null() { return std::nullopt; }
std::optional<std::string> val(std::string s) { return s; }

// Binary COPY pieces, https://www.postgresql.org/docs/15/sql-copy.html#id-1.9.3.55.9.4
std::string be(std::uint64_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}
const std::string kSignature("PGCOPY\n\377\r\n\0", 11);
const std::string kTrailer("\xff\xff", 2);
std::string bin_header(std::uint32_t flags = 0, const std::string& extension = {}) {
  return kSignature + be(flags, 4) + be(extension.size(), 4) + extension;
}
std::string tuple(const std::vector<std::optional<std::string>>& fields) {
  std::string out = be(fields.size(), 2);
  for (const auto& f : fields) out += f ? be(f->size(), 4) + *f : be(0xffffffffu, 4);
  return out;
}

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace

// ---- parse_copy ----------------------------------------------------------------------

TEST_CASE("parse_copy reads the table, the columns and the direction", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  CHECK(s.schema.empty());
  CHECK(s.table == "t");
  CHECK(s.columns.empty());
  CHECK(s.from_stdin);
  CHECK_FALSE(s.to_stdout);
  CHECK_FALSE(s.is_query);
  CHECK(s.format == Format::text);
  CHECK(s.delimiter == '\t');
  CHECK(s.null_string == "\\N");
  CHECK_FALSE(s.header);

  s = stmt("copy Sales.\"Order Lines\" (id, \"Key\", v) from stdin");
  CHECK(s.schema == "sales");
  CHECK(s.table == "Order Lines");
  CHECK(s.columns == std::vector<std::string>{"id", "Key", "v"});

  s = stmt("COPY t TO STDOUT");
  CHECK(s.to_stdout);
  CHECK_FALSE(s.from_stdin);
  s = stmt("COPY (SELECT * FROM t WHERE a > 1) TO STDOUT WITH CSV");
  CHECK(s.is_query);
  CHECK(s.to_stdout);
  CHECK(s.table.empty());
  CHECK(s.format == Format::csv);
  // Server-side files and programs are not the client's stream.
  CHECK_FALSE(stmt("COPY t FROM '/tmp/x'").from_stdin);
  CHECK_FALSE(stmt("COPY t FROM PROGRAM 'cat /tmp/x'").from_stdin);
  CHECK_FALSE(stmt("COPY t TO '/tmp/x'").to_stdout);
  CHECK(stmt("COPY t FROM STDIN WHERE k > 0").from_stdin);
}

TEST_CASE("parse_copy reads the options in the current and the older syntax", "[copy]") {
  auto check_csv = [](const CopyStatement& s) {
    CHECK(s.format == Format::csv);
    CHECK(s.header);
    CHECK(s.delimiter == ';');
    CHECK(s.null_string == "n/a");
    CHECK(s.quote == '\'');
    CHECK(s.escape == '\\');
  };
  check_csv(stmt("COPY t FROM STDIN (FORMAT csv, HEADER, DELIMITER ';', NULL 'n/a', QUOTE '''', ESCAPE '\\', "
                 "ENCODING 'UTF8', FREEZE)"));
  auto old = stmt("COPY t FROM STDIN WITH CSV HEADER DELIMITER AS ';' NULL AS 'n/a' QUOTE AS '''' ESCAPE AS '\\' "
                  "FORCE NOT NULL a, b ENCODING 'utf8'");
  check_csv(old);
  CHECK(old.force_not_null == std::vector<std::string>{"a", "b"});
  CHECK(stmt("COPY BINARY t FROM STDIN").format == Format::binary);
  CHECK(stmt("COPY t FROM STDIN WITH BINARY").format == Format::binary);
  CHECK(stmt("COPY t FROM STDIN (FORMAT binary)").format == Format::binary);
  CHECK(stmt("COPY t FROM STDIN USING DELIMITERS '|'").delimiter == '|');
  CHECK(stmt("COPY t FROM STDIN (FORMAT text, DELIMITER ',')").delimiter == ',');

  auto csv = stmt("COPY t FROM STDIN CSV");
  CHECK(csv.delimiter == ',');
  CHECK(csv.null_string.empty());
  CHECK(csv.quote == '"');
  CHECK(csv.escape == '"');
  CHECK(stmt("COPY t FROM STDIN (FORMAT csv, QUOTE '''')").escape == '\'');  // escape defaults to the quote
  auto force = stmt("COPY t FROM STDIN (FORMAT csv, FORCE_NULL (k), FORCE_NOT_NULL (v, w))");
  CHECK(force.force_null == std::vector<std::string>{"k"});
  CHECK(force.force_not_null == std::vector<std::string>{"v", "w"});
  // Options that change no row boundary are accepted.
  stmt("COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE *)");
  stmt("COPY t TO STDOUT WITH CSV FORCE QUOTE a, b");
  stmt("COPY t FROM STDIN (FREEZE false)");
  stmt("COPY t FROM STDIN (ENCODING 'utf-8')");
  stmt("COPY t FROM STDIN (FORMAT csv, DELIMITER 'a')");  // letters are refused in text only
}

TEST_CASE("parse_copy reads HEADER as a boolean or MATCH, as PostgreSQL does", "[copy]") {
  const std::pair<const char*, bool> cases[] = {{"HEADER", true},       {"HEADER true", true}, {"HEADER ON", true},
                                                {"HEADER 1", true},     {"HEADER 'yes'", false},
                                                {"HEADER false", false}, {"HEADER off", false}, {"HEADER 0", false},
                                                {"HEADER match", true}, {"HEADER MATCH", true}};
  for (auto [option, header] : cases) {
    std::string sql = std::string("COPY t FROM STDIN (FORMAT csv, ") + option + ")";
    if (std::string_view(option) == "HEADER 'yes'") {
      refused(sql);
      continue;
    }
    INFO(sql);
    CHECK(stmt(sql).header == header);
    CHECK(stmt("COPY t FROM STDIN (" + std::string(option) + ")").header == header);  // PG 15: text too
  }
  refused("COPY t FROM STDIN (HEADER 2)");
  refused("COPY t TO STDOUT (FORMAT csv, HEADER match)");
  refused("COPY t FROM STDIN (FORMAT binary, HEADER)");
}

TEST_CASE("parse_copy refuses what PostgreSQL refuses, and encodings other than UTF8", "[copy]") {
  CHECK(refused("COPY t FROM STDIN (ENCODING 'LATIN1')").find("UTF8") != std::string::npos);
  CHECK(refused("COPY t FROM STDIN WITH CSV ENCODING 'SJIS'").find("UTF8") != std::string::npos);
  CHECK(refused("SELECT 1") == "not a single COPY statement");
  refused("COPY t FROM STDIN; COPY u FROM STDIN");
  refused("COPY t FROM");
  CHECK(refused("COPY t FROM STDIN (FORMAT 'CSV')") == "COPY format \"CSV\" not recognized");
  refused("COPY t FROM STDIN (FORMAT json)");
  CHECK(refused("COPY t FROM STDIN (FORMAT csv, FORMAT text)") == "conflicting or redundant options");
  refused("COPY t FROM STDIN (DELIMITER ',', DELIMITER ';')");
  refused("COPY t FROM STDIN (FORMAT binary, DELIMITER ',')");
  refused("COPY t FROM STDIN (FORMAT binary, NULL '')");
  refused("COPY t FROM STDIN (DELIMITER ';;')");
  refused("COPY t FROM STDIN (DELIMITER E'\\n')");
  refused("COPY t FROM STDIN (NULL E'a\\rb')");
  refused("COPY t FROM STDIN (DELIMITER 'a')");
  refused("COPY t FROM STDIN (DELIMITER '\\')");
  refused("COPY t FROM STDIN (DELIMITER '.')");
  refused("COPY t FROM STDIN (QUOTE '\"')");
  refused("COPY t FROM STDIN (ESCAPE '\\')");
  refused("COPY t FROM STDIN (FORMAT csv, QUOTE ',')");
  refused("COPY t FROM STDIN (FORMAT csv, QUOTE 'ab')");
  refused("COPY t FROM STDIN (FORMAT csv, ESCAPE '')");
  refused("COPY t FROM STDIN (FORMAT csv, NULL 'a,b')");
  refused("COPY t FROM STDIN (FORMAT csv, NULL 'x\"')");
  refused("COPY t FROM STDIN (NULL 'a\tb')");
  refused("COPY t FROM STDIN (FORMAT csv, FORCE_QUOTE *)");
  refused("COPY t TO STDOUT (FORMAT csv, FORCE_NOT_NULL (a))");
  CHECK(refused("COPY t FROM STDIN (FORCE_NOT_NULL (a))") == "COPY force not null available only in CSV mode");
  refused("COPY t FROM STDIN (FREEZE maybe)");
  refused("COPY t FROM STDIN (OIDS true)");
  refused("COPY t FROM STDIN (bogus 1)");
}

// ---- text ------------------------------------------------------------------------------

TEST_CASE("text rows end at newlines and keys are de-escaped", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  const std::string data = "1\tone\n2\ttwo\\tthree\n3\t\\N\n-4\t\n";
  auto r = split_every_way(s, 1, data);
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1\tone\n", "2\ttwo\\tthree\n", "3\t\\N\n", "-4\t\n"});
  CHECK(r.keys == std::vector{val("one"), val("two\tthree"), null(), val("")});
  CHECK(joined(r.rows) == data);
  CHECK(r.prologue.empty());
  CHECK(r.epilogue.empty());
  r = split(s, 0, data);
  CHECK(r.keys == std::vector{val("1"), val("2"), val("3"), val("-4")});
  CHECK(split(stmt("COPY t FROM STDIN"), 0, "ключ\tзначение ✓\n").keys == std::vector{val("ключ")});
}

TEST_CASE("text escapes are read as PostgreSQL reads them", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  const std::pair<std::string, std::optional<std::string>> cases[] = {
      {"\\\\", "\\"},
      {"\\b\\f\\n\\r\\t\\v", "\b\f\n\r\t\v"},
      {"\\101\\60\\0061", "A0\x06"
                          "1"},  // at most three octal digits
      {"\\777", "\xff"},
      {"\\x41\\x4g\\xg\\x41B", "A\x04gxgAB"},  // at most two hex digits
      {"\\q\\8\\N1", "q8N1"},                   // any other byte stands for itself
      {"a\\\tb", "a\tb"},                       // an escaped delimiter does not split
      {"\\N", std::nullopt},                    // the null string, compared before de-escaping
      {"\\\\N", "\\N"},
  };
  for (const auto& [field, key] : cases) {
    INFO(field);
    auto r = split_every_way(s, 0, field + "\tx\n");
    REQUIRE(r.ok);
    REQUIRE(r.keys.size() == 1);
    CHECK(r.keys[0] == key);
  }
  // A backslash ending the line is dropped.
  CHECK(split_every_way(s, 1, "x\ta\\").keys == std::vector{val("a")});
  CHECK(split_every_way(s, 1, "x\ta\\\n").keys == std::vector{val("a\n")});  // not before a line end: it escapes it
  // An escaped newline is data, not a line end.
  auto r = split_every_way(s, 0, "a\\\nb\tc\n");
  CHECK(r.keys == std::vector{val("a\nb")});
}

TEST_CASE("text null string and delimiter options", "[copy]") {
  auto r = split_every_way(stmt("COPY t FROM STDIN (DELIMITER '|', NULL 'NULL')"), 1, "1|NULL\n2|\\NULL\n3|\n4|\\N\n");
  REQUIRE(r.ok);
  CHECK(r.keys == std::vector{null(), val("NULL"), val(""), val("N")});
  r = split_every_way(stmt("COPY t FROM STDIN (NULL '')"), 1, "1\t\n2\t\\N\n");
  CHECK(r.keys == std::vector{null(), val("N")});
  // A hex escape takes an upper-case delimiter as its digit.
  r = split_every_way(stmt("COPY t FROM STDIN (DELIMITER 'A')"), 1, "\\x4A1A2\n");
  CHECK(r.keys == std::vector{val("2")});
  CHECK(split(stmt("COPY t FROM STDIN (DELIMITER 'A')"), 0, "\\x4A1A2\n").keys == std::vector{val("J1")});
}

TEST_CASE("text accepts CRLF and CR line ends but not a mix", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  auto r = split_every_way(s, 1, "1\ta\r\n2\tb\\rc\r\n3\t\\N\r\n");
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1\ta\r\n", "2\tb\\rc\r\n", "3\t\\N\r\n"});
  CHECK(r.keys == std::vector{val("a"), val("b\rc"), null()});
  r = split_every_way(s, 1, "1\ta\r2\tb\r");
  CHECK(r.keys == std::vector{val("a"), val("b")});
  CHECK(r.rows == std::vector<std::string>{"1\ta\r", "2\tb\r"});

  r = split_every_way(s, 1, "1\ta\n2\tb\r\n");
  CHECK_FALSE(r.ok);
  CHECK(r.error == "literal carriage return found in data (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\r\n2\tb\n");
  CHECK(r.error == "literal newline found in data (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\r2\tb\n");
  CHECK(r.error == "literal newline found in data (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\r\n2\tb\rc\r\n");
  CHECK(r.error == "literal carriage return found in data (COPY line 2)");
}

TEST_CASE("text end-of-data marker ends the data as PostgreSQL reads it", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  auto r = split_every_way(s, 1, "1\ta\n\\.\n2\tignored\n\x01garbage");
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1\ta\n"});
  CHECK(r.keys == std::vector{val("a")});

  r = split_every_way(s, 1, "1\ta\r\n\\.\r\nrest");
  CHECK(r.rows == std::vector<std::string>{"1\ta\r\n"});
  r = split_every_way(s, 0, "\\.\rjunk");  // the marker line may set the line end style
  REQUIRE(r.ok);
  CHECK(r.rows.empty());
  // "\." after data on a line ends the data; what precedes it is a last row (sent
  // without the marker, so the shard sees it as a last line without line end).
  r = split_every_way(s, 1, "1\ta\n2\tb\\.\nzzz\n");
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1\ta\n", "2\tb"});
  CHECK(r.keys == std::vector{val("a"), val("b")});
  // "\\." is an escaped backslash then a dot.
  r = split_every_way(s, 1, "1\t\\\\.\n");
  CHECK(r.keys == std::vector{val("\\.")});

  r = split_every_way(s, 1, "1\ta\n\\.");
  CHECK(r.error == "end-of-copy marker corrupt (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\n\\.x\n");
  CHECK(r.error == "end-of-copy marker corrupt (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\r\n\\.\n");
  CHECK(r.error == "end-of-copy marker does not match previous newline style (COPY line 2)");
  r = split_every_way(s, 1, "1\ta\n\\.\r");
  CHECK(r.error == "end-of-copy marker does not match previous newline style (COPY line 2)");

  // After the marker, further CopyData is dropped, as the server drops it.
  CopySplitter sp(s, 1);
  CHECK(sp.feed("1\ta\n\\.\n"));
  CHECK(sp.feed("2\tb\n"));
  CHECK(sp.finish());
  CopyRow row;
  CHECK(sp.next_row(row));
  CHECK_FALSE(sp.next_row(row));
  CHECK(sp.rows() == 1);
}

TEST_CASE("text takes a last line without a line end as a row, after finish()", "[copy]") {
  auto s = stmt("COPY t FROM STDIN");
  auto r = split_every_way(s, 1, "1\ta\n2\tb");
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1\ta\n", "2\tb"});
  r = split_every_way(s, 1, "1\ta\r");  // CR at the very end: a CR line end
  CHECK(r.rows == std::vector<std::string>{"1\ta\r"});
  r = split_every_way(s, 1, "1\tb\\");
  CHECK(r.keys == std::vector{val("b")});

  CopySplitter sp(s, 1);
  CHECK(sp.feed("1\ta"));
  CopyRow row;
  CHECK_FALSE(sp.next_row(row));
  CHECK(sp.finish());
  REQUIRE(sp.next_row(row));
  CHECK(row.bytes == "1\ta");
  CHECK(row.key == "a");
}

TEST_CASE("text HEADER goes to the prologue", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (HEADER)");
  const std::string data = "id\tk\n1\ta\n2\tb\n";
  auto r = split_every_way(s, 1, data);
  REQUIRE(r.ok);
  CHECK(r.prologue == "id\tk\n");
  CHECK(r.rows == std::vector<std::string>{"1\ta\n", "2\tb\n"});
  CHECK(r.prologue + joined(r.rows) == data);
  r = split_every_way(s, 1, "id\tk\r\n1\ta\r\n");
  CHECK(r.prologue == "id\tk\r\n");
  CHECK(r.keys == std::vector{val("a")});
  r = split_every_way(s, 1, "\\.\n1\ta\n");  // the marker in place of the header ends the data
  REQUIRE(r.ok);
  CHECK(r.rows.empty());

  CopySplitter sp(s, 1);
  CHECK_FALSE(sp.prologue_ready());
  CHECK(sp.feed("id\t"));
  CHECK_FALSE(sp.prologue_ready());
  CHECK(sp.feed("k\n1"));
  CHECK(sp.prologue_ready());
  CHECK(sp.prologue() == "id\tk\n");
  CHECK(stmt("COPY t FROM STDIN").header == false);
  CHECK(CopySplitter(stmt("COPY t FROM STDIN"), 0).prologue_ready());
}

TEST_CASE("a row without the key field is refused", "[copy]") {
  auto r = split_every_way(stmt("COPY t FROM STDIN"), 1, "1\ta\n2\n");
  CHECK_FALSE(r.ok);
  CHECK(r.error == "missing data for column number 2 (COPY line 2)");
  r = split_every_way(stmt("COPY t (id, k) FROM STDIN"), 1, "1\n");
  CHECK(r.error == "missing data for column \"k\" (COPY line 1)");
  r = split(stmt("COPY t FROM STDIN (HEADER)"), 2, "a\tb\tc\n1\t2\n", {}, "k");
  CHECK(r.error == "missing data for column \"k\" (COPY line 2)");
  r = split(stmt("COPY t FROM STDIN (FORMAT csv)"), 1, "\"a,b\"\n");
  CHECK(r.error == "missing data for column number 2 (COPY line 1)");
  // An empty line is one empty field.
  CHECK(split(stmt("COPY t FROM STDIN"), 0, "\n").keys == std::vector{val("")});
  CHECK(split(stmt("COPY t FROM STDIN (FORMAT csv)"), 0, "\n").keys == std::vector{null()});
}

// ---- csv ---------------------------------------------------------------------------------

TEST_CASE("csv quotes hold delimiters, line ends and doubled quotes", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT csv)");
  const std::string data =
      "1,plain\n2,\"with, comma\"\n3,\"two\nlines\"\n4,\"say \"\"hi\"\"\"\n5,\n6,\"\"\n7,a\"b,c\"d\n8, x \n9,\"a\r\nb\"\n";
  auto r = split_every_way(s, 1, data);
  REQUIRE(r.ok);
  CHECK(r.rows.size() == 9);
  CHECK(joined(r.rows) == data);
  CHECK(r.rows[2] == "3,\"two\nlines\"\n");
  CHECK(r.keys == std::vector{val("plain"), val("with, comma"), val("two\nlines"), val("say \"hi\""), null(), val(""),
                              val("ab,cd"), val(" x "), val("a\r\nb")});
  CHECK(split(s, 0, data).keys[8] == "9");
}

TEST_CASE("csv with an escape character other than the quote", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT csv, ESCAPE '\\')");
  auto r = split_every_way(s, 1, "1,\"a\\\"b\\\\c\"\n2,\"x\"\"y\"\n3,a\\b\n4,\"\\,\n\"\n5,\"x\\y\",z\n6,w\n");
  REQUIRE(r.ok);
  // Outside quotes the escape is an ordinary byte; "" closes and reopens the quote; an
  // escape before anything but the quote or itself is kept.
  CHECK(r.keys == std::vector{val("a\"b\\c"), val("xy"), val("a\\b"), val("\\,\n"), val("x\\y"), val("w")});
  r = split_every_way(stmt("COPY t FROM STDIN (FORMAT csv, DELIMITER ';', QUOTE '''', ESCAPE '\\')"), 1,
                      "1;'it\\'s; fine'\n2;'a''b'\n");
  CHECK(r.keys == std::vector{val("it's; fine"), val("ab")});
}

TEST_CASE("csv NULL is an unquoted null string only", "[copy]") {
  auto r = split_every_way(stmt("COPY t FROM STDIN (FORMAT csv, NULL 'NA')"), 1, "1,NA\n2,\"NA\"\n3,\n4,NA \n");
  REQUIRE(r.ok);
  CHECK(r.keys == std::vector{null(), val("NA"), val(""), val("NA ")});
}

TEST_CASE("csv FORCE_NOT_NULL and FORCE_NULL decide the key's NULL as PostgreSQL does", "[copy]") {
  const std::string data = ",x\n\"\",y\nz,w\n";
  auto plain = split(stmt("COPY t FROM STDIN (FORMAT csv)"), 0, data);
  CHECK(plain.keys == std::vector{null(), val(""), val("z")});
  auto r = split_every_way(stmt("COPY t FROM STDIN (FORMAT csv, FORCE_NOT_NULL (k))"), 0, data, "k");
  CHECK(r.keys == std::vector{val(""), val(""), val("z")});
  r = split_every_way(stmt("COPY t FROM STDIN (FORMAT csv, FORCE_NULL (k))"), 0, data, "k");
  CHECK(r.keys == std::vector{null(), null(), val("z")});
  r = split_every_way(stmt("COPY t FROM STDIN (FORMAT csv, FORCE_NOT_NULL (k), FORCE_NULL (k))"), 0, data, "k");
  CHECK(r.keys == std::vector{val(""), null(), val("z")});
  // The column list names the key; other columns' options do not touch it.
  r = split(stmt("COPY t (k, v) FROM STDIN (FORMAT csv, FORCE_NOT_NULL (k))"), 0, data);
  CHECK(r.keys == std::vector{val(""), val(""), val("z")});
  r = split(stmt("COPY t (k, v) FROM STDIN (FORMAT csv, FORCE_NOT_NULL (v))"), 0, data);
  CHECK(r.keys == plain.keys);
  // Without the key's name the splitter cannot tell, and says so rather than guess.
  r = split(stmt("COPY t FROM STDIN (FORMAT csv, FORCE_NULL (k))"), 0, data);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("key column") != std::string::npos);
}

TEST_CASE("csv HEADER goes to the prologue, quotes and all", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT csv, HEADER)");
  const std::string data = "\"id\nx\",\"k,\"\n1,a\n";
  auto r = split_every_way(s, 1, data);
  REQUIRE(r.ok);
  CHECK(r.prologue == "\"id\nx\",\"k,\"\n");
  CHECK(r.rows == std::vector<std::string>{"1,a\n"});
  r = split_every_way(s, 1, "id,k\n");
  CHECK(r.prologue == "id,k\n");
  CHECK(r.rows.empty());
  // The server does not split a HEADER (not MATCH) line into fields: an open quote in
  // it at the end of the data is no error.
  r = split_every_way(s, 1, "id,\"k");
  REQUIRE(r.ok);
  CHECK(r.prologue == "id,\"k");
}

TEST_CASE("csv end-of-data marker is \\. alone at the start of a line", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT csv)");
  auto r = split_every_way(s, 0, "1,a\n\\.\n2,b\n");
  REQUIRE(r.ok);
  CHECK(r.rows == std::vector<std::string>{"1,a\n"});
  r = split_every_way(s, 0, "1,a\r\n\\.\r\n2,b\r\n");
  CHECK(r.rows == std::vector<std::string>{"1,a\r\n"});
  // Anything else is data: more after it, quoted, inside a quoted field, at the end.
  r = split_every_way(s, 0, "1,a\n\\.x,y\n\"\\.\",q\n\"a\n\\.\n\",b\n\\.");
  REQUIRE(r.ok);
  CHECK(r.keys == std::vector{val("1"), val("\\.x"), val("\\."), val("a\n\\.\n"), val("\\.")});
  r = split_every_way(s, 0, "1,a\r\n\\.\n");  // data, and then a bare LF in CRLF data
  CHECK(r.error == "unquoted newline found in data (COPY line 2)");
  r = split_every_way(s, 0, "1,a\n\\.\r");
  CHECK(r.error == "end-of-copy marker does not match previous newline style (COPY line 2)");
}

TEST_CASE("csv line ends: CRLF, CR, mixes and an open quote at the end", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT csv)");
  auto r = split_every_way(s, 1, "1,a\r2,\"b\rc\"\r");
  REQUIRE(r.ok);
  CHECK(r.keys == std::vector{val("a"), val("b\rc")});
  r = split_every_way(s, 1, "1,a\n2,b\r\n");
  CHECK(r.error == "unquoted carriage return found in data (COPY line 2)");
  r = split_every_way(s, 1, "1,a\r\n2,b\n");
  CHECK(r.error == "unquoted newline found in data (COPY line 2)");
  r = split_every_way(s, 1, "1,a\n2,b");
  CHECK(r.keys == std::vector{val("a"), val("b")});
  r = split_every_way(s, 1, "1,a\n2,\"b\n");
  CHECK_FALSE(r.ok);
  CHECK(r.error == "unterminated CSV quoted field (COPY line 2)");
}

// ---- binary --------------------------------------------------------------------------------

TEST_CASE("binary tuples, NULL keys, header and trailer", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT binary)");
  const std::vector<std::string> tuples = {tuple({val(be(1, 8)), val("one")}), tuple({null(), val("")}),
                                           tuple({val(be(static_cast<std::uint64_t>(-5), 8)), null()})};
  const std::string data = bin_header() + joined(tuples) + kTrailer;
  auto r = split_every_way(s, 0, data);
  REQUIRE(r.ok);
  CHECK(r.prologue == bin_header());
  CHECK(r.epilogue == kTrailer);
  CHECK(r.rows == tuples);
  CHECK(r.keys == std::vector{val(be(1, 8)), null(), val(be(static_cast<std::uint64_t>(-5), 8))});
  CHECK(r.prologue + joined(r.rows) + r.epilogue == data);
  r = split_every_way(s, 1, data);
  CHECK(r.keys == std::vector{val("one"), val(""), null()});

  // Header extension and the low (compatible) flag bits are carried to every shard.
  const std::string extended = bin_header(0xffff, "ext!") + tuples[0] + kTrailer;
  r = split_every_way(s, 0, extended);
  REQUIRE(r.ok);
  CHECK(r.prologue == bin_header(0xffff, "ext!"));
  CHECK(r.rows == std::vector<std::string>{tuples[0]});
  // A big field split across many payloads.
  const std::string big(100000, 'z');
  r = split(s, 1, bin_header() + tuple({val("k"), val(big)}) + kTrailer, std::vector<std::size_t>(200, 997));
  REQUIRE(r.ok);
  CHECK(r.keys == std::vector{val(big)});
}

TEST_CASE("binary stream ends as PostgreSQL ends it", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT binary)");
  const std::string one = tuple({val("a"), val("b")});
  // The server takes a stream without the trailer (and ignores a lone byte there).
  auto r = split_every_way(s, 0, bin_header() + one);
  REQUIRE(r.ok);
  CHECK(r.rows.size() == 1);
  r = split_every_way(s, 0, bin_header() + one + "\x01");
  REQUIRE(r.ok);
  CHECK(r.rows.size() == 1);
  r = split_every_way(s, 0, bin_header());
  REQUIRE(r.ok);
  CHECK(r.rows.empty());
  CHECK(r.prologue == bin_header());
  // ... but nothing after the trailer.
  r = split_every_way(s, 0, bin_header() + one + kTrailer + "\0"s);
  CHECK(r.error == "received copy data after EOF marker");
  CopySplitter sp(s, 0);
  CHECK(sp.feed(bin_header() + one + kTrailer));
  CHECK_FALSE(sp.feed("x"));
  CHECK(sp.error() == "received copy data after EOF marker");
}

TEST_CASE("binary malformed input is refused", "[copy]") {
  auto s = stmt("COPY t FROM STDIN (FORMAT binary)");
  const std::string one = tuple({val("a"), val("b")});
  CHECK(split(s, 0, "").error == "COPY file signature not recognized");
  CHECK(split(s, 0, "PGCOPY\n").error == "COPY file signature not recognized");
  CHECK(split(s, 0, kSignature + "\0\0"s).error == "invalid COPY file header (missing flags)");
  CHECK(split(s, 0, kSignature + be(0, 4) + "\0"s).error == "invalid COPY file header (missing length)");
  CHECK(split(s, 0, kSignature + be(0, 4) + be(8, 4) + "abc").error == "invalid COPY file header (wrong length)");
  CHECK(split(s, 0, bin_header(1u << 16) + one).error == "invalid COPY file header (WITH OIDS)");
  CHECK(split(s, 0, bin_header(1u << 17) + one).error == "unrecognized critical flags in COPY file header");
  CHECK(split(s, 0, kSignature + be(0, 4) + be(0xffffffffu, 4)).error == "invalid COPY file header (missing length)");
  // A text stream sent as binary fails at the first byte, before the rest arrives.
  CopySplitter sp(s, 0);
  CHECK_FALSE(sp.feed("1"));
  CHECK(sp.error() == "COPY file signature not recognized");

  CHECK(split_every_way(s, 0, bin_header() + one.substr(0, one.size() - 1)).error ==
        "unexpected EOF in COPY data (COPY line 1)");
  CHECK(split_every_way(s, 0, bin_header() + one + one.substr(0, 3)).error ==
        "unexpected EOF in COPY data (COPY line 2)");
  CHECK(split_every_way(s, 2, bin_header() + one).error == "missing data for column number 3 (COPY line 1)");
  CHECK(split_every_way(s, 0, bin_header() + be(1, 2) + be(static_cast<std::uint32_t>(-2), 4)).error ==
        "invalid field size (COPY line 1)");
  CHECK(split_every_way(s, 0, bin_header() + be(static_cast<std::uint16_t>(-3), 2)).error ==
        "row field count is -3 (COPY line 1)");
}

// ---- the stream as a whole ---------------------------------------------------------------

TEST_CASE("the splitter keeps only rows not yet released and the incomplete tail", "[copy]") {
  CopySplitter sp(stmt("COPY t FROM STDIN"), 0);
  CopyRow row;
  for (int i = 0; i < 1000; ++i) {
    std::string line = std::to_string(i) + "\t" + std::string(50, 'x') + "\n";
    REQUIRE(sp.feed(line.substr(0, 10)));
    CHECK_FALSE(sp.next_row(row));
    CHECK(sp.buffered() == 10);
    REQUIRE(sp.feed(line.substr(10)));
    CHECK(sp.buffered() == line.size());
    REQUIRE(sp.next_row(row));
    CHECK(row.bytes == line);
    CHECK(row.key == std::to_string(i));
  }
  CHECK(sp.finish());
  CHECK(sp.rows() == 1000);

  // Rows not taken before the next feed() are kept, not lost.
  CopySplitter lazy(stmt("COPY t FROM STDIN"), 0);
  CHECK(lazy.feed("1\ta\n2\tb\n3"));
  REQUIRE(lazy.next_row(row));
  CHECK(lazy.feed("\tc\n"));
  REQUIRE(lazy.next_row(row));
  CHECK(row.bytes == "2\tb\n");
  REQUIRE(lazy.next_row(row));
  CHECK(row.bytes == "3\tc\n");
  CHECK_FALSE(lazy.next_row(row));
}

TEST_CASE("after an error the splitter stays failed", "[copy]") {
  CopySplitter sp(stmt("COPY t FROM STDIN"), 3);
  CHECK_FALSE(sp.feed("1\t2\n"));
  CHECK_FALSE(sp.feed("1\t2\t3\t4\n"));
  CHECK_FALSE(sp.finish());
  CHECK(sp.error() == "missing data for column number 4 (COPY line 1)");
}

// ---- PostgreSQL's own output -----------------------------------------------------------------

namespace {

struct Capture {
  const char* name;
  const char* copy_from;  // the COPY FROM that reads it back
  std::size_t size;
  const char* bytes;
};

const Capture kCaptures[] = {
    {"text", "COPY awk FROM STDIN", 278,
    "\x31\x09\x30\x09\x70\x6c\x61\x69\x6e\x09\x78\x0a\x32\x09\x2d\x39\x32\x32\x33\x33\x37\x32\x30\x33"
    "\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x09\x74\x61\x62\x5c\x74\x68\x65\x72\x65\x09\x5c\x4e\x0a"
    "\x33\x09\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x37\x09\x6e\x65"
    "\x77\x5c\x6e\x6c\x69\x6e\x65\x09\x0a\x34\x09\x34\x32\x09\x62\x61\x63\x6b\x5c\x5c\x73\x6c\x61\x73"
    "\x68\x09\x22\x71\x75\x6f\x74\x65\x64\x22\x2c\x20\x63\x6f\x6d\x6d\x61\x0a\x35\x09\x5c\x4e\x09\x63"
    "\x72\x5c\x72\x61\x6e\x64\x20\x63\x72\x6c\x66\x5c\x72\x5c\x6e\x09\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8"
    "\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x0a\x36\x09\x2d\x31\x09\x5c\x5c\x2e\x09\x5c\x5c"
    "\x2e\x0a\x37\x09\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x09\x09\x5c\x4e\x0a\x38\x09\x35"
    "\x09\x6d\x75\x6c\x74\x69\x5c\x6e\x6c\x69\x6e\x65\x5c\x6e\x22\x71\x75\x6f\x74\x65\x64\x22\x5c\x6e"
    "\x09\x2c\x2c\x2c\x0a\x39\x09\x36\x09\x5c\x5c\x4e\x09\x4e\x0a\x31\x30\x09\x5c\x4e\x09\x5c\x4e\x09"
    "\x5c\x4e\x0a\x31\x31\x09\x37\x37\x09\x5c\x62\x5c\x66\x76\x01\x20\x63\x74\x6c\x09\x61\x3b\x62\x7c"
    "\x63\x27\x64\x0a\x31\x32\x09\x38\x09\x22\x09\x22\x22\x0a"},
    {"text_pipe", "COPY awk FROM STDIN (DELIMITER '|', NULL 'NULL')", 291,
    "\x31\x7c\x30\x7c\x70\x6c\x61\x69\x6e\x7c\x78\x0a\x32\x7c\x2d\x39\x32\x32\x33\x33\x37\x32\x30\x33"
    "\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x7c\x74\x61\x62\x5c\x74\x68\x65\x72\x65\x7c\x4e\x55\x4c"
    "\x4c\x0a\x33\x7c\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x37\x7c"
    "\x6e\x65\x77\x5c\x6e\x6c\x69\x6e\x65\x7c\x0a\x34\x7c\x34\x32\x7c\x62\x61\x63\x6b\x5c\x5c\x73\x6c"
    "\x61\x73\x68\x7c\x22\x71\x75\x6f\x74\x65\x64\x22\x2c\x20\x63\x6f\x6d\x6d\x61\x0a\x35\x7c\x4e\x55"
    "\x4c\x4c\x7c\x63\x72\x5c\x72\x61\x6e\x64\x20\x63\x72\x6c\x66\x5c\x72\x5c\x6e\x7c\xc3\xbc\x6e\xc3"
    "\xaf\x63\xc3\xb8\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x0a\x36\x7c\x2d\x31\x7c\x5c\x5c"
    "\x2e\x7c\x5c\x5c\x2e\x0a\x37\x7c\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x7c\x7c\x4e\x55"
    "\x4c\x4c\x0a\x38\x7c\x35\x7c\x6d\x75\x6c\x74\x69\x5c\x6e\x6c\x69\x6e\x65\x5c\x6e\x22\x71\x75\x6f"
    "\x74\x65\x64\x22\x5c\x6e\x7c\x2c\x2c\x2c\x0a\x39\x7c\x36\x7c\x5c\x5c\x4e\x7c\x4e\x0a\x31\x30\x7c"
    "\x4e\x55\x4c\x4c\x7c\x4e\x55\x4c\x4c\x7c\x4e\x55\x4c\x4c\x0a\x31\x31\x7c\x37\x37\x7c\x5c\x62\x5c"
    "\x66\x76\x01\x20\x63\x74\x6c\x7c\x61\x3b\x62\x5c\x7c\x63\x27\x64\x0a\x31\x32\x7c\x38\x7c\x22\x7c"
    "\x22\x22\x0a"},
    {"text_header", "COPY awk FROM STDIN (HEADER)", 287,
    "\x69\x64\x09\x6b\x09\x74\x09\x6e\x0a\x31\x09\x30\x09\x70\x6c\x61\x69\x6e\x09\x78\x0a\x32\x09\x2d"
    "\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x09\x74\x61\x62\x5c"
    "\x74\x68\x65\x72\x65\x09\x5c\x4e\x0a\x33\x09\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34"
    "\x37\x37\x35\x38\x30\x37\x09\x6e\x65\x77\x5c\x6e\x6c\x69\x6e\x65\x09\x0a\x34\x09\x34\x32\x09\x62"
    "\x61\x63\x6b\x5c\x5c\x73\x6c\x61\x73\x68\x09\x22\x71\x75\x6f\x74\x65\x64\x22\x2c\x20\x63\x6f\x6d"
    "\x6d\x61\x0a\x35\x09\x5c\x4e\x09\x63\x72\x5c\x72\x61\x6e\x64\x20\x63\x72\x6c\x66\x5c\x72\x5c\x6e"
    "\x09\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x0a\x36\x09"
    "\x2d\x31\x09\x5c\x5c\x2e\x09\x5c\x5c\x2e\x0a\x37\x09\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31"
    "\x32\x09\x09\x5c\x4e\x0a\x38\x09\x35\x09\x6d\x75\x6c\x74\x69\x5c\x6e\x6c\x69\x6e\x65\x5c\x6e\x22"
    "\x71\x75\x6f\x74\x65\x64\x22\x5c\x6e\x09\x2c\x2c\x2c\x0a\x39\x09\x36\x09\x5c\x5c\x4e\x09\x4e\x0a"
    "\x31\x30\x09\x5c\x4e\x09\x5c\x4e\x09\x5c\x4e\x0a\x31\x31\x09\x37\x37\x09\x5c\x62\x5c\x66\x76\x01"
    "\x20\x63\x74\x6c\x09\x61\x3b\x62\x7c\x63\x27\x64\x0a\x31\x32\x09\x38\x09\x22\x09\x22\x22\x0a"},
    {"csv", "COPY awk FROM STDIN (FORMAT csv)", 277,
    "\x31\x2c\x30\x2c\x70\x6c\x61\x69\x6e\x2c\x78\x0a\x32\x2c\x2d\x39\x32\x32\x33\x33\x37\x32\x30\x33"
    "\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x2c\x74\x61\x62\x09\x68\x65\x72\x65\x2c\x0a\x33\x2c\x39"
    "\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x37\x2c\x22\x6e\x65\x77\x0a"
    "\x6c\x69\x6e\x65\x22\x2c\x22\x22\x0a\x34\x2c\x34\x32\x2c\x62\x61\x63\x6b\x5c\x73\x6c\x61\x73\x68"
    "\x2c\x22\x22\x22\x71\x75\x6f\x74\x65\x64\x22\x22\x2c\x20\x63\x6f\x6d\x6d\x61\x22\x0a\x35\x2c\x2c"
    "\x22\x63\x72\x0d\x61\x6e\x64\x20\x63\x72\x6c\x66\x0d\x0a\x22\x2c\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8"
    "\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x0a\x36\x2c\x2d\x31\x2c\x5c\x2e\x2c\x5c\x2e\x0a"
    "\x37\x2c\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x2c\x22\x22\x2c\x0a\x38\x2c\x35\x2c\x22"
    "\x6d\x75\x6c\x74\x69\x0a\x6c\x69\x6e\x65\x0a\x22\x22\x71\x75\x6f\x74\x65\x64\x22\x22\x0a\x22\x2c"
    "\x22\x2c\x2c\x2c\x22\x0a\x39\x2c\x36\x2c\x5c\x4e\x2c\x4e\x0a\x31\x30\x2c\x2c\x2c\x0a\x31\x31\x2c"
    "\x37\x37\x2c\x08\x0c\x76\x01\x20\x63\x74\x6c\x2c\x61\x3b\x62\x7c\x63\x27\x64\x0a\x31\x32\x2c\x38"
    "\x2c\x22\x22\x22\x22\x2c\x22\x22\x22\x22\x22\x22\x0a"},
    {"csv_header", "COPY awk FROM STDIN (FORMAT csv, HEADER true)", 286,
    "\x69\x64\x2c\x6b\x2c\x74\x2c\x6e\x0a\x31\x2c\x30\x2c\x70\x6c\x61\x69\x6e\x2c\x78\x0a\x32\x2c\x2d"
    "\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x2c\x74\x61\x62\x09"
    "\x68\x65\x72\x65\x2c\x0a\x33\x2c\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35"
    "\x38\x30\x37\x2c\x22\x6e\x65\x77\x0a\x6c\x69\x6e\x65\x22\x2c\x22\x22\x0a\x34\x2c\x34\x32\x2c\x62"
    "\x61\x63\x6b\x5c\x73\x6c\x61\x73\x68\x2c\x22\x22\x22\x71\x75\x6f\x74\x65\x64\x22\x22\x2c\x20\x63"
    "\x6f\x6d\x6d\x61\x22\x0a\x35\x2c\x2c\x22\x63\x72\x0d\x61\x6e\x64\x20\x63\x72\x6c\x66\x0d\x0a\x22"
    "\x2c\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x0a\x36\x2c"
    "\x2d\x31\x2c\x5c\x2e\x2c\x5c\x2e\x0a\x37\x2c\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x2c"
    "\x22\x22\x2c\x0a\x38\x2c\x35\x2c\x22\x6d\x75\x6c\x74\x69\x0a\x6c\x69\x6e\x65\x0a\x22\x22\x71\x75"
    "\x6f\x74\x65\x64\x22\x22\x0a\x22\x2c\x22\x2c\x2c\x2c\x22\x0a\x39\x2c\x36\x2c\x5c\x4e\x2c\x4e\x0a"
    "\x31\x30\x2c\x2c\x2c\x0a\x31\x31\x2c\x37\x37\x2c\x08\x0c\x76\x01\x20\x63\x74\x6c\x2c\x61\x3b\x62"
    "\x7c\x63\x27\x64\x0a\x31\x32\x2c\x38\x2c\x22\x22\x22\x22\x2c\x22\x22\x22\x22\x22\x22\x0a"},
    {"csv_custom", "COPY awk FROM STDIN (FORMAT csv, DELIMITER ';', QUOTE '''', ESCAPE '\\', NULL 'NUL')", 359,
    "\x27\x31\x27\x3b\x27\x30\x27\x3b\x27\x70\x6c\x61\x69\x6e\x27\x3b\x27\x78\x27\x0a\x27\x32\x27\x3b"
    "\x27\x2d\x39\x32\x32\x33\x33\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x38\x27\x3b\x27"
    "\x74\x61\x62\x09\x68\x65\x72\x65\x27\x3b\x4e\x55\x4c\x0a\x27\x33\x27\x3b\x27\x39\x32\x32\x33\x33"
    "\x37\x32\x30\x33\x36\x38\x35\x34\x37\x37\x35\x38\x30\x37\x27\x3b\x27\x6e\x65\x77\x0a\x6c\x69\x6e"
    "\x65\x27\x3b\x27\x27\x0a\x27\x34\x27\x3b\x27\x34\x32\x27\x3b\x27\x62\x61\x63\x6b\x5c\x5c\x73\x6c"
    "\x61\x73\x68\x27\x3b\x27\x22\x71\x75\x6f\x74\x65\x64\x22\x2c\x20\x63\x6f\x6d\x6d\x61\x27\x0a\x27"
    "\x35\x27\x3b\x4e\x55\x4c\x3b\x27\x63\x72\x0d\x61\x6e\x64\x20\x63\x72\x6c\x66\x0d\x0a\x27\x3b\x27"
    "\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84\x9e\x27\x0a\x27\x36"
    "\x27\x3b\x27\x2d\x31\x27\x3b\x27\x5c\x5c\x2e\x27\x3b\x27\x5c\x5c\x2e\x27\x0a\x27\x37\x27\x3b\x27"
    "\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x27\x3b\x27\x27\x3b\x4e\x55\x4c\x0a\x27\x38\x27"
    "\x3b\x27\x35\x27\x3b\x27\x6d\x75\x6c\x74\x69\x0a\x6c\x69\x6e\x65\x0a\x22\x71\x75\x6f\x74\x65\x64"
    "\x22\x0a\x27\x3b\x27\x2c\x2c\x2c\x27\x0a\x27\x39\x27\x3b\x27\x36\x27\x3b\x27\x5c\x5c\x4e\x27\x3b"
    "\x27\x4e\x27\x0a\x27\x31\x30\x27\x3b\x4e\x55\x4c\x3b\x4e\x55\x4c\x3b\x4e\x55\x4c\x0a\x27\x31\x31"
    "\x27\x3b\x27\x37\x37\x27\x3b\x27\x08\x0c\x76\x01\x20\x63\x74\x6c\x27\x3b\x27\x61\x3b\x62\x7c\x63"
    "\x5c\x27\x64\x27\x0a\x27\x31\x32\x27\x3b\x27\x38\x27\x3b\x27\x22\x27\x3b\x27\x22\x22\x27\x0a"},
    {"binary", "COPY awk FROM STDIN (FORMAT binary)", 493,
    "\x50\x47\x43\x4f\x50\x59\x0a\xff\x0d\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00"
    "\x04\x00\x00\x00\x01\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x70\x6c\x61"
    "\x69\x6e\x00\x00\x00\x01\x78\x00\x04\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00\x08\x80\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x08\x74\x61\x62\x09\x68\x65\x72\x65\xff\xff\xff\xff\x00\x04\x00"
    "\x00\x00\x04\x00\x00\x00\x03\x00\x00\x00\x08\x7f\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x08\x6e"
    "\x65\x77\x0a\x6c\x69\x6e\x65\x00\x00\x00\x00\x00\x04\x00\x00\x00\x04\x00\x00\x00\x04\x00\x00\x00"
    "\x08\x00\x00\x00\x00\x00\x00\x00\x2a\x00\x00\x00\x0a\x62\x61\x63\x6b\x5c\x73\x6c\x61\x73\x68\x00"
    "\x00\x00\x0f\x22\x71\x75\x6f\x74\x65\x64\x22\x2c\x20\x63\x6f\x6d\x6d\x61\x00\x04\x00\x00\x00\x04"
    "\x00\x00\x00\x05\xff\xff\xff\xff\x00\x00\x00\x0d\x63\x72\x0d\x61\x6e\x64\x20\x63\x72\x6c\x66\x0d"
    "\x0a\x00\x00\x00\x14\xc3\xbc\x6e\xc3\xaf\x63\xc3\xb8\x64\xc3\xa9\x20\xe2\x9c\x93\x20\xf0\x9d\x84"
    "\x9e\x00\x04\x00\x00\x00\x04\x00\x00\x00\x06\x00\x00\x00\x08\xff\xff\xff\xff\xff\xff\xff\xff\x00"
    "\x00\x00\x02\x5c\x2e\x00\x00\x00\x02\x5c\x2e\x00\x04\x00\x00\x00\x04\x00\x00\x00\x07\x00\x00\x00"
    "\x08\x00\x00\x00\x1c\xbe\x99\x1a\x14\x00\x00\x00\x00\xff\xff\xff\xff\x00\x04\x00\x00\x00\x04\x00"
    "\x00\x00\x08\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x14\x6d\x75\x6c\x74\x69"
    "\x0a\x6c\x69\x6e\x65\x0a\x22\x71\x75\x6f\x74\x65\x64\x22\x0a\x00\x00\x00\x03\x2c\x2c\x2c\x00\x04"
    "\x00\x00\x00\x04\x00\x00\x00\x09\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x06\x00\x00\x00\x02"
    "\x5c\x4e\x00\x00\x00\x01\x4e\x00\x04\x00\x00\x00\x04\x00\x00\x00\x0a\xff\xff\xff\xff\xff\xff\xff"
    "\xff\xff\xff\xff\xff\x00\x04\x00\x00\x00\x04\x00\x00\x00\x0b\x00\x00\x00\x08\x00\x00\x00\x00\x00"
    "\x00\x00\x4d\x00\x00\x00\x08\x08\x0c\x76\x01\x20\x63\x74\x6c\x00\x00\x00\x07\x61\x3b\x62\x7c\x63"
    "\x27\x64\x00\x04\x00\x00\x00\x04\x00\x00\x00\x0c\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x08"
    "\x00\x00\x00\x01\x22\x00\x00\x00\x02\x22\x22\xff\xff"},
};
// Each row's fields as SELECT col::text gives them (hex of the UTF8 bytes), NULL as "NULL".
const std::vector<std::vector<std::string>> kTextValues = {
    {"31", "30", "706c61696e", "78"},
    {"32", "2d39323233333732303336383534373735383038", "7461620968657265", "NULL"},
    {"33", "39323233333732303336383534373735383037", "6e65770a6c696e65", ""},
    {"34", "3432", "6261636b5c736c617368", "2271756f746564222c20636f6d6d61"},
    {"35", "NULL", "63720d616e642063726c660d0a", "c3bc6ec3af63c3b864c3a920e29c9320f09d849e"},
    {"36", "2d31", "5c2e", "5c2e"},
    {"37", "313233343536373839303132", "", "NULL"},
    {"38", "35", "6d756c74690a6c696e650a2271756f746564220a", "2c2c2c"},
    {"39", "36", "5c4e", "4e"},
    {"3130", "NULL", "NULL", "NULL"},
    {"3131", "3737", "080c76012063746c", "613b627c632764"},
    {"3132", "38", "22", "2222"},
};
// Each row's fields as int4send/int8send/textsend give them (hex), for binary COPY.
const std::vector<std::vector<std::string>> kBinaryValues = {
    {"00000001", "0000000000000000", "706c61696e", "78"},
    {"00000002", "8000000000000000", "7461620968657265", "NULL"},
    {"00000003", "7fffffffffffffff", "6e65770a6c696e65", ""},
    {"00000004", "000000000000002a", "6261636b5c736c617368", "2271756f746564222c20636f6d6d61"},
    {"00000005", "NULL", "63720d616e642063726c660d0a", "c3bc6ec3af63c3b864c3a920e29c9320f09d849e"},
    {"00000006", "ffffffffffffffff", "5c2e", "5c2e"},
    {"00000007", "0000001cbe991a14", "", "NULL"},
    {"00000008", "0000000000000005", "6d756c74690a6c696e650a2271756f746564220a", "2c2c2c"},
    {"00000009", "0000000000000006", "5c4e", "4e"},
    {"0000000a", "NULL", "NULL", "NULL"},
    {"0000000b", "000000000000004d", "080c76012063746c", "613b627c632764"},
    {"0000000c", "0000000000000008", "22", "2222"},
};

}  // namespace

TEST_CASE("COPY output of PostgreSQL 15 splits into its rows and keys", "[copy]") {
  for (const Capture& c : kCaptures) {
    INFO(c.name);
    const CopyStatement s = stmt(c.copy_from);
    const std::string_view data(c.bytes, c.size);
    const bool binary = s.format == Format::binary;
    for (std::size_t key = 0; key < 4; ++key) {
      INFO("key field " << key);
      // Every cut for the bigint key; once for the others, to keep the run short.
      Split r = key == 1 ? split_every_way(s, key, data) : split(s, key, data);
      REQUIRE(r.ok);
      REQUIRE(r.rows.size() == kTextValues.size());
      for (std::size_t i = 0; i < r.rows.size(); ++i) {
        INFO("row " << i + 1);
        const std::string& want = binary ? kBinaryValues[i][key] : kTextValues[i][key];
        CHECK((r.keys[i] ? hex(*r.keys[i]) : std::string("NULL")) == want);
      }
      CHECK(r.prologue + joined(r.rows) + r.epilogue == data);
    }
  }
}

TEST_CASE("rows with the proxy's values appended, and the COPY statement that takes them", "[copy]") {
  auto text = parse_copy("COPY t (k, v) FROM STDIN");
  auto csv = parse_copy("COPY t (k, v) FROM STDIN (FORMAT csv, DELIMITER ';')");
  auto binary = parse_copy("COPY t (k, v) FROM STDIN (FORMAT binary)");
  REQUIRE((text && csv && binary));
  CHECK(append_fields(*text, "1\tx\n", {"7", "8"}, {8, 4}) == std::optional<std::string>("1\tx\t7\t8\n"));
  CHECK(append_fields(*text, "1\tx\r\n", {"7"}, {8}) == std::optional<std::string>("1\tx\t7\r\n"));
  CHECK(append_fields(*text, "1\tx", {"7"}, {8}) == std::optional<std::string>("1\tx\t7"));  // (last, no line end)
  CHECK(append_fields(*csv, "1;\"a\nb\"\r", {"7"}, {8}) == std::optional<std::string>("1;\"a\nb\";7\r"));
  // Binary: 1 field (int4 5) + an int8 7 and an int2 -2.
  const std::string tuple("\x00\x01\x00\x00\x00\x04\x00\x00\x00\x05", 10);
  auto b = append_fields(*binary, tuple, {"7", "-2"}, {8, 2});
  REQUIRE(b);
  CHECK(*b == tuple.substr(0, 1) + std::string("\x03", 1) + tuple.substr(2) +
                   std::string("\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x02\xff\xfe", 18));
  CHECK_FALSE(append_fields(*binary, tuple, {"70000"}, {2}));  // does not fit an int2
  CHECK_FALSE(append_fields(*binary, tuple, {"x"}, {8}));
  CHECK(copy_with_columns("COPY t (k, v) FROM STDIN WITH (FORMAT csv, HEADER)", true, {"id", "Odd"}) ==
        std::optional<std::string>("COPY t(k, v, id, \"Odd\") FROM STDIN WITH (FORMAT CSV, HEADER)"));
  CHECK_FALSE(copy_with_columns("COPY t FROM STDIN", true, {"id"}));  // (no column list: every column is there)
}
