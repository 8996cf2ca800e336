// Rows inside the merger (routing/merge/merger.cpp): a DataRow body with its fields located
// and its sort-key values decoded once, and the comparisons the merge stages use.
// Internal to routing/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/merge/value.hpp"

namespace splitpoint::routing::merge_detail {

struct Row {
  std::string data;           // the DataRow body
  std::vector<Field> fields;  // located in `data`
  std::vector<Key> keys;      // values of the current stage's KeySpecs, in their order

  std::optional<std::string_view> field(std::size_t i) const {
    if (fields[i].null()) return std::nullopt;
    return std::string_view(data.data() + fields[i].off, static_cast<std::size_t>(fields[i].len));
  }
  // Takes a DataRow body; false if it is malformed or has not `columns` fields.
  bool assign(std::string_view body, std::size_t columns);
  // Member by member (std::swap would move the whole row three times).
  void swap(Row& o) noexcept {
    data.swap(o.data);
    fields.swap(o.fields);
    keys.swap(o.keys);
  }
};

// One ORDER BY key over a row's column.
struct KeySpec {
  std::size_t column = 0;
  ColumnCodec codec;
  bool descending = false;
  bool nulls_first = false;
};

// Fills row.keys for `specs`; false with `error` set if a value cannot be decoded.
bool decode_keys(Row& row, const std::vector<KeySpec>& specs, std::string& error);

// Orders two sets of decoded keys by the first `n` specs (ORDER BY semantics: NULLS
// FIRST/LAST are absolute, DESC reverses only values).
int compare_keys(const std::vector<KeySpec>& specs, std::size_t n, const char* a_base, const Key* a, const char* b_base,
                 const Key* b);

// A copy of a row's decoded keys that owns the bytes they refer to, for comparing with
// later rows after the row itself is gone (order checks, WITH TIES).
struct KeySnapshot {
  std::string bytes;
  std::vector<Key> keys;
  bool valid = false;
  void take(const Row& row);
};

// The bytes of `row`'s `columns` that make two rows equal exactly when PostgreSQL's `=`
// holds for each (DISTINCT); false with `error` when a type has no known equality.
bool equality_key(const Row& row, const std::vector<std::size_t>& columns, const std::vector<ColumnCodec>& codecs,
                  std::string& out, std::string& error);

// Appends one DataRow field (length + bytes, or -1 for NULL).
void append_field(std::string& body, std::optional<std::string_view> value);
// Starts a DataRow body with its field count.
void start_row(std::string& body, std::size_t fields);

}  // namespace splitpoint::routing::merge_detail
