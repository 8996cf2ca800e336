// libFuzzer target for the COPY FROM STDIN splitter (routing/copy.hpp): any bytes as
// the client's CopyData stream, in text, csv (with a header, quotes, FORCE_NULL) or
// binary format, with the key in any of the first columns. Properties: nothing
// crashes; the stream fed in one piece and fed in pieces of arbitrary sizes (as
// CopyData messages cut it) gives the same rows, the same keys, the same prologue and
// epilogue and the same verdict; the rows' bytes are pieces of the input, in order.
// Build and run: tests/fuzz/run
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "routing/copy.hpp"
#include "tests/fuzz/fuzz_world.hpp"

using namespace splitpoint;

namespace {

constexpr const char* kStatements[] = {
    "COPY t FROM STDIN",
    "COPY t (a, b, c) FROM STDIN WITH (FORMAT csv, HEADER true)",
    "COPY t FROM STDIN WITH (FORMAT csv, DELIMITER ';', QUOTE '''', ESCAPE '\\', NULL 'N', FORCE_NULL (a))",
    "COPY t FROM STDIN WITH (FORMAT binary)",
    "COPY t FROM STDIN WITH (FORMAT text, DELIMITER '|', NULL '')",
    "COPY t (a, b) FROM STDIN WITH (FORMAT csv, FORCE_NOT_NULL (b))",
};

struct Outcome {
  std::vector<std::pair<std::string, std::optional<std::string>>> rows;
  std::string prologue, epilogue;
  bool ok = true;
  bool finished = false;
};

void drain(routing::CopySplitter& s, Outcome& o) {
  routing::CopyRow row;
  while (s.next_row(row)) o.rows.emplace_back(std::string(row.bytes), row.key);
}

Outcome split(const routing::CopyStatement& st, std::size_t key, std::string_view column, std::string_view stream,
              std::uint32_t seed) {
  routing::CopySplitter s(st, key, column);
  Outcome o;
  std::size_t pos = 0;
  while (pos < stream.size() && o.ok) {
    std::size_t n = stream.size() - pos;
    if (seed != 0) {
      seed = seed * 1103515245u + 12345u;  // piece sizes 1..64
      n = std::min<std::size_t>(n, 1 + (seed >> 16) % 64);
    }
    o.ok = s.feed(stream.substr(pos, n));
    pos += n;
    drain(s, o);
  }
  if (o.ok) {
    o.finished = s.finish();
    drain(s, o);
  }
  o.prologue = s.prologue();
  o.epilogue = s.epilogue();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2 || size > 65536) return 0;
  const std::size_t which = data[0] % std::size(kStatements);
  const std::size_t key = (data[0] >> 4) % 3;
  const std::uint32_t seed = data[1] | 1u;
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);
  static std::vector<routing::CopyStatement> statements = [] {
    std::vector<routing::CopyStatement> v;
    for (const char* sql : kStatements) {
      std::string error;
      auto st = routing::parse_copy(sql, &error);
      if (!st) fuzz::fail("copy_fuzz", std::string("statement refused: ") + sql + ": " + error);
      v.push_back(*st);
    }
    return v;
  }();
  const auto& st = statements[which];
  const std::string_view column = key == 0 ? "a" : key == 1 ? "b" : "c";
  Outcome whole = split(st, key, column, stream, 0);
  Outcome pieces = split(st, key, column, stream, seed);
  if (whole.ok != pieces.ok || whole.finished != pieces.finished) fuzz::fail("copy_fuzz", "verdicts differ");
  if (whole.rows != pieces.rows) fuzz::fail("copy_fuzz", "rows or keys differ between one piece and many");
  if (whole.ok && (whole.prologue != pieces.prologue || whole.epilogue != pieces.epilogue))
    fuzz::fail("copy_fuzz", "prologue or epilogue differ");
  // The rows are the stream's bytes, in order, after the prologue.
  std::size_t at = whole.prologue.size();
  for (const auto& [bytes, k] : whole.rows) {
    if (stream.substr(at, bytes.size()) != bytes) fuzz::fail("copy_fuzz", "a row is not the next piece of the stream");
    at += bytes.size();
  }
  return 0;
}
