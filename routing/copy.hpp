// COPY ... FROM STDIN into a sharded table, split by key (SPEC §3): what the COPY
// statement says (libpg_query), and a streaming splitter that cuts the client's
// CopyData stream into rows and finds each row's key. Pure: bytes in, rows out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct PgQuery__CopyStmt;  // libpg_query's parse tree (routing/pg_tree.hpp)

namespace splitpoint::routing {

struct CopyStatement {
  enum class Format : std::uint8_t { text, csv, binary };
  std::string schema;                 // empty when unqualified
  std::string table;                  // as written, lower-cased unless quoted
  std::vector<std::string> columns;   // the column list; empty = all columns in table order
  bool from_stdin = false;            // COPY ... FROM STDIN
  bool to_stdout = false;             // COPY ... TO STDOUT
  bool is_query = false;              // COPY (SELECT ...) TO ...
  Format format = Format::text;
  bool header = false;                // HEADER (csv; text in PG15 also allows it)
  char delimiter = '\t';              // text default tab, csv default ','
  char quote = '"';                   // csv
  char escape = '"';                  // csv (defaults to quote)
  std::string null_string = "\\N";    // text default \N, csv default empty
  // csv FROM: for these columns an unquoted null string is a value / a quoted one is NULL,
  // which decides whether a key is NULL.
  std::vector<std::string> force_not_null;
  std::vector<std::string> force_null;
  bool encoding_given = false;        // ENCODING (UTF8 only, see parse_copy)
  // csv TO: FORCE_QUOTE * / FORCE_QUOTE (columns)
  bool force_quote_all = false;
  std::vector<std::string> force_quote;
};

// Parses a COPY statement: nullopt if `sql` is not a single COPY statement, or has
// options PostgreSQL would refuse or the splitter cannot follow (an ENCODING other
// than UTF8); `error` then says why.
std::optional<CopyStatement> parse_copy(std::string_view sql, std::string* error = nullptr);
// The same from a parsed COPY (the router's own parse, so the text is not parsed again).
std::optional<CopyStatement> copy_statement(const PgQuery__CopyStmt* copy, std::string* error = nullptr);

// A text whose first statement is COPY ... FROM: what the router found, for the caller
// that splits the rows by key (SPEC §3). `statement` is nullopt when the text is not one
// COPY statement or has options the splitter refuses; `error` says why.
struct CopyFrom {
  std::optional<CopyStatement> statement;
  std::string error;
};

// One row cut from the stream: its bytes exactly as received (including the line end
// for text/csv, the tuple for binary) and its key field. A text/csv row has no line end
// when the stream ended without one, or (text) when "\." followed it on its line: it is
// then the last row of the stream, which a shard reads as PostgreSQL would.
struct CopyRow {
  std::string_view bytes;
  std::optional<std::string> key;  // nullopt = NULL; text/csv: the unescaped value; binary: raw bytes
};

// `row` (as CopySplitter cut it) with `values` (integers, as text) appended as fields:
// text/csv before the line end, after the statement's delimiter; binary: the field count
// raised and each value as a big-endian integer of `widths[i]` bytes (2, 4 or 8).
// nullopt: a binary value is not an integer of its width.
std::optional<std::string> append_fields(const CopyStatement& statement, std::string_view row,
                                         const std::vector<std::string>& values, const std::vector<int>& widths);

class CopySplitter {
 public:
  // `key_index`: 0-based position of the key column among the row's fields.
  // `key_column`: its name, needed only when the statement has FORCE_NOT_NULL or
  // FORCE_NULL (csv), which can turn the key's NULL-ness around.
  CopySplitter(const CopyStatement& statement, std::size_t key_index, std::string_view key_column = {});

  // Feeds the next CopyData payload. Rows that are complete are available from
  // next_row() until it returns false; a row split across payloads is kept until the
  // rest arrives. Returns false on malformed input (error() says why); after the
  // end-of-data marker (text/csv "\.") the rest of the stream is ignored, as
  // PostgreSQL ignores it.
  bool feed(std::string_view data);
  // The next complete row; the view stays valid until the next feed().
  bool next_row(CopyRow& row);
  // After CopyDone. As PostgreSQL, takes a last text/csv line without a line end as a
  // row (drain next_row() afterwards) and a binary stream without its trailer as
  // complete; false if the stream ended inside a quoted csv field, a binary header or
  // a binary tuple.
  bool finish();

  // Bytes every shard must receive before its rows (csv/text header line, binary
  // signature + flags + extension area) and after them (binary trailer). Available
  // once the header has been fed.
  const std::string& prologue() const { return prologue_; }
  const std::string& epilogue() const { return epilogue_; }
  bool prologue_ready() const { return prologue_ready_; }
  const std::string& error() const { return error_; }
  std::uint64_t rows() const { return rows_; }
  // Bytes held: rows not yet released by the next feed() plus the incomplete tail.
  std::size_t buffered() const { return buf_.size(); }

 private:
  // How lines end, fixed by the first line as PostgreSQL does (copyfromparse.c).
  enum class Eol : std::uint8_t { unknown, nl, cr, crnl };
  enum class Phase : std::uint8_t { header, rows, ended };
  enum class Marker : std::uint8_t { none, end, need_more, error };
  struct Ready {  // a complete row in buf_
    std::size_t begin;
    std::size_t size;
    std::optional<std::string> key;
  };

  bool scan(bool at_eof);
  bool scan_lines(bool at_eof);
  bool scan_binary(bool at_eof);
  Marker marker(std::size_t at, bool at_eof);
  bool line_done(std::size_t content_end, std::size_t next);
  bool end_of_data(std::size_t marker_at);
  bool key_text(std::string_view line, std::optional<std::string>& key);
  bool key_csv(std::string_view line, std::optional<std::string>& key);
  bool missing_key();
  bool fail(std::string message);

  CopyStatement stmt_;
  std::size_t key_index_;
  std::string key_name_;          // for messages and FORCE_*; may be empty
  bool force_not_null_key_ = false;
  bool force_null_key_ = false;
  bool special_[256] = {};        // bytes the line scan must look at
  std::string buf_;               // unconsumed input
  std::vector<Ready> ready_;      // rows not yet handed out start at next_ready_
  std::size_t next_ready_ = 0;
  std::size_t row_start_ = 0;     // start of the row being scanned
  std::size_t scan_ = 0;          // where scanning resumes
  Phase phase_ = Phase::rows;
  Eol eol_ = Eol::unknown;
  bool in_quote_ = false;         // csv quote state of the line being scanned
  bool last_was_escape_ = false;
  std::size_t field_count_ = 0;   // binary: fields of the current tuple
  std::size_t field_ = 0;         // binary: of which already read
  std::optional<std::string> key_;  // binary: the current tuple's key, once read
  std::string prologue_;
  std::string epilogue_;
  bool prologue_ready_ = false;
  std::string error_;
  std::uint64_t rows_ = 0;
};

}  // namespace splitpoint::routing
