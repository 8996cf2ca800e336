#include "routing/merge/merge_rows.hpp"

namespace splitpoint::routing::merge_detail {

bool Row::assign(std::string_view body, std::size_t columns) {
  data.assign(body);
  return split_data_row(data, fields) && fields.size() == columns;
}

bool decode_keys(Row& row, const std::vector<KeySpec>& specs, std::string& error) {
  row.keys.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Field f = row.fields[specs[i].column];
    Key& k = row.keys[i];
    k = Key{};
    if (f.null()) {
      k.null = true;
      continue;
    }
    if (!decode_key(specs[i].codec, row.data.data(), f, k)) {
      error = "cannot order the value \"" + std::string(row.data.data() + f.off, std::min<std::size_t>(f.len, 64)) +
              "\" of column " + std::to_string(specs[i].column + 1) +
              (specs[i].codec.format == 1 ? " (binary)" : " (text; dates and times need DateStyle ISO)");
      return false;
    }
  }
  return true;
}

int compare_keys(const std::vector<KeySpec>& specs, std::size_t n, const char* a_base, const Key* a, const char* b_base,
                 const Key* b) {
  for (std::size_t i = 0; i < n && i < specs.size(); ++i) {
    const KeySpec& s = specs[i];
    if (a[i].null || b[i].null) {
      if (a[i].null && b[i].null) continue;
      bool a_first = a[i].null == s.nulls_first;
      return a_first ? -1 : 1;
    }
    int c = routing::compare_keys(s.codec, a_base, a[i], b_base, b[i]);
    if (c != 0) return s.descending ? -c : c;
  }
  return 0;
}

void KeySnapshot::take(const Row& row) {
  bytes.clear();
  keys = row.keys;
  for (Key& k : keys) {
    if (k.null || k.len == 0) continue;
    std::uint32_t at = static_cast<std::uint32_t>(bytes.size());
    bytes.append(row.data, k.off, k.len);
    k.off = at;
  }
  valid = true;
}

bool equality_key(const Row& row, const std::vector<std::size_t>& columns, const std::vector<ColumnCodec>& codecs,
                  std::string& out, std::string& error) {
  out.clear();
  for (std::size_t c : columns) {
    const Field f = row.fields[c];
    if (f.null()) {
      out.push_back('N');
      continue;
    }
    out.push_back('V');
    Key k;
    if (!decode_key(codecs[c], row.data.data(), f, k)) {
      error = "cannot compare values of column " + std::to_string(c + 1) + " for DISTINCT";
      return false;
    }
    append_equality_key(codecs[c], row.data.data(), k, out);
  }
  return true;
}

void start_row(std::string& body, std::size_t fields) {
  body.clear();
  body.push_back(static_cast<char>((fields >> 8) & 0xff));
  body.push_back(static_cast<char>(fields & 0xff));
}

void append_field(std::string& body, std::optional<std::string_view> value) {
  std::uint32_t len = value ? static_cast<std::uint32_t>(value->size()) : 0xffffffffU;
  for (int s = 24; s >= 0; s -= 8) body.push_back(static_cast<char>((len >> s) & 0xff));
  if (value) body.append(*value);
}

}  // namespace splitpoint::routing::merge_detail
