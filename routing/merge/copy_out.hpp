// COPY ... TO STDOUT of a multi-shard query: the merged rows (DataRow bodies) written
// as PostgreSQL 15's COPY TO writes them (copyto.c: CopyOneRowTo, CopyAttributeOutText,
// CopyAttributeOutCSV; https://www.postgresql.org/docs/15/sql-copy.html), so the
// client receives the same bytes a single server would send. Pure: bytes in, bytes out.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/copy.hpp"

namespace splitpoint::routing {

// The SELECT whose rows a `COPY (query) TO` or `COPY table [(columns)] TO` writes:
// the query as written, or `SELECT columns FROM ONLY table` (COPY of a table copies no
// inheritance children).
std::optional<std::string> copy_source_query(std::string_view copy_sql, std::string* error = nullptr);
// The COPY ... TO statement `copy_sql` with `query` in place of its query or table, its
// options kept: COPY (query) TO STDOUT WITH (...) — the combine step's COPY. nullopt if
// either does not parse.
std::optional<std::string> copy_with_query(std::string_view copy_sql, std::string_view query);

class CopyOutFormatter {
 public:
  // `columns`: the result's column names, for HEADER and FORCE_QUOTE. `error()` is set
  // when a FORCE_QUOTE column is not among them (as PostgreSQL refuses it, 42P10).
  CopyOutFormatter(const CopyStatement& statement, const std::vector<std::string>& columns);

  const std::string& error() const { return error_; }
  bool binary() const { return stmt_.format == CopyStatement::Format::binary; }
  // The data of the CopyData message that starts the output before any row (the header
  // line of text/csv with HEADER); empty when there is none. Binary output has its
  // signature in front of the first row instead (see row()).
  std::string header() const;
  // Appends one row, given as a DataRow body whose values are in the format the
  // statement needs (text for text/csv, binary for binary). False if the body is
  // malformed.
  bool row(std::string_view data_row, std::string& out);
  // The data of the last CopyData message (binary: the signature if no row was written,
  // then the trailer); empty for text/csv.
  std::string trailer() const;

 private:
  void text_value(std::string_view v, std::string& out) const;
  void csv_value(std::string_view v, bool force, bool single, std::string& out) const;

  CopyStatement stmt_;
  std::vector<bool> force_quote_;
  std::size_t ncols_ = 0;
  std::vector<std::string> names_;
  bool wrote_signature_ = false;
  std::string error_;
};

}  // namespace splitpoint::routing
