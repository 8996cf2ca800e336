// Internal to config/: the loader of the YAML configuration, shared by the files that
// load its sections (config.cpp: the whole file, top-level checks and the small sections;
// load_values.cpp: structure and scalar values; load_shards.cpp: shards, their TLS and
// the catalog; load_clients.cpp: users and the client-facing listener; load_
// distributions.cpp: distributions, reference and unlisted tables). Only these files
// include yaml-cpp.
#pragma once

#include <libpq-fe.h>
#include <yaml-cpp/yaml.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <system_error>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace splitpoint::config::detail {

inline constexpr std::int64_t kMaxPartitions = 65536;  // memory and per-partition metrics
inline constexpr std::int64_t kMaxSaltBuckets = 1024;  // salt.buckets at most
inline constexpr std::int64_t kMaxWorkers = 1024;
inline constexpr std::size_t kMinMessageSize = 1024;
inline constexpr std::size_t kMaxMessageSize = std::size_t{1} << 30;  // PostgreSQL's own limit
inline constexpr std::size_t kMaxNameLength = 63;                     // NAMEDATALEN - 1

inline std::string quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// `catalog:` and `scatter.combine` take a shard's name or a libpq connection string
// (key=value pairs, or a postgres:// URI); a shard name has no '='.
inline bool is_dsn(std::string_view s) {
  return s.find('=') != std::string_view::npos || s.starts_with("postgres://") || s.starts_with("postgresql://");
}

// PQconninfoParse's error text (freed here), without its trailing newline.
inline std::string libpq_message(char* why) {
  std::string m = why ? std::string(trim(why)) : "out of memory";
  if (why) PQfreemem(why);
  return m;
}

// Why `file` cannot be read (a CA file must be readable at load: a typo would otherwise
// show only at the first connection), or nullopt.
inline std::optional<std::string> unreadable(const std::string& file) {
  std::FILE* in = std::fopen(file.c_str(), "rb");
  if (!in) return "cannot read " + quote(file) + ": " + std::generic_category().message(errno);
  char probe;
  const bool readable = std::fread(&probe, 1, 1, in) == 1;
  std::fclose(in);
  if (!readable) return "cannot read " + quote(file) + " (empty, or a directory)";
  return std::nullopt;
}

// A whole decimal integer (optional leading '-'); nullopt on anything else or overflow.
inline std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc{} || p != end) return std::nullopt;
  return v;
}

// "250ms" -> (250, "ms"); spaces between number and unit are allowed, as in PostgreSQL.
struct Quantity {
  std::uint64_t number = 0;
  std::string_view unit;
};

inline std::optional<Quantity> split_quantity(std::string_view text) {
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  Quantity q;
  auto [p, ec] = std::from_chars(text.data(), text.data() + digits, q.number);
  if (digits == 0 || ec != std::errc{}) return std::nullopt;
  q.unit = trim(text.substr(digits));
  return q;
}

inline std::optional<std::uint64_t> scaled(const Quantity& q, std::uint64_t factor, std::uint64_t max) {
  if (q.number > max / factor) return std::nullopt;
  return q.number * factor;
}

inline bool is_integer(std::string_view s) {
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Compares two is_integer() strings numerically, whatever their size.
inline int compare_integers(std::string_view a, std::string_view b) {
  auto split = [](std::string_view s) {
    bool negative = !s.empty() && s.front() == '-';
    if (negative) s.remove_prefix(1);
    while (s.size() > 1 && s.front() == '0') s.remove_prefix(1);
    return std::pair{negative && s != "0", s};
  };
  auto [neg_a, mag_a] = split(a);
  auto [neg_b, mag_b] = split(b);
  if (neg_a != neg_b) return neg_a ? -1 : 1;
  int m = mag_a.size() != mag_b.size() ? (mag_a.size() < mag_b.size() ? -1 : 1) : mag_a.compare(mag_b);
  m = (m > 0) - (m < 0);
  return neg_a ? -m : m;
}

// "0-31" or "7" -> inclusive [first, last].
inline std::optional<std::pair<std::int64_t, std::int64_t>> parse_partition_span(std::string_view s) {
  auto number = [](std::string_view t) -> std::optional<std::int64_t> {
    t = trim(t);
    if (t.empty() || t.front() == '-') return std::nullopt;
    return parse_int(t);
  };
  const auto dash = s.find('-');
  auto first = number(s.substr(0, dash));
  auto last = dash == std::string_view::npos ? first : number(s.substr(dash + 1));
  if (!first || !last) return std::nullopt;
  return std::pair{*first, *last};
}

// Sorted partition numbers as "partition 7 is" or "partitions 0-3, 7, 9-10 are".
inline std::string partitions_are(const std::vector<std::int64_t>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size();) {
    std::size_t j = i;
    while (j + 1 < parts.size() && parts[j + 1] == parts[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(parts[i]);
    if (j > i) out += "-" + std::to_string(parts[j]);
    i = j + 1;
  }
  return parts.size() == 1 ? "partition " + out + " is" : "partitions " + out + " are";
}

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

inline bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxNameLength && s.front() != '-' && s.front() != '.' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
         });
}

inline int node_line(const YAML::Node& n, int fallback) {
  if (!n.IsDefined() || n.IsNull()) return fallback;  // a null value's mark is past it
  const YAML::Mark m = n.Mark();
  return m.is_null() ? fallback : m.line + 1;
}

inline std::string describe(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "no value";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return quote(n.Scalar());
}

// One `key: value` of a mapping (or one item of a list), with where it came from.
struct Entry {
  std::string path;  // e.g. "shards[1].port"
  YAML::Node value;
  int key_line = 0;  // the key's line; for a list item, the item's line
  // Scalars report on their own line; collections and empty values on the key's.
  int line() const { return value.IsScalar() ? node_line(value, key_line) : key_line; }
};

struct Fields {
  int line = 0;                                        // where the mapping is introduced
  std::vector<std::pair<std::string, Entry>> entries;  // file order, first occurrence only
  const Entry* get(std::string_view key) const {
    for (const auto& [k, e] : entries)
      if (k == key) return &e;
    return nullptr;
  }
};

using Keys = std::initializer_list<std::string_view>;

// Stores a value that was read successfully; on failure the error is already recorded.
template <class T, class U>
inline void assign(T& out, const std::optional<U>& v) {
  if (v) out = static_cast<T>(*v);
}

class Loader {
 public:
  LoadResult run(const YAML::Node& root);
  void error(int line, std::string message) { errors_.push_back({line, std::move(message)}); }

 private:
  void error(const Entry& e, const std::string& what) { error(e.line(), e.path + ": " + what); }

  // Structure. `known` empty = any key (the keys are names: shards, tables, ...).
  std::optional<Fields> mapping(const Entry& e, Keys known);
  std::optional<std::vector<Entry>> sequence(const Entry& e);
  const Entry* required(const Fields& f, const std::string& path, std::string_view key);

  // Values.
  std::optional<std::string> text(const Entry& e);
  std::optional<std::string> name(const Entry& e);
  std::optional<std::int64_t> integer(const Entry& e, std::int64_t min, std::int64_t max);
  std::optional<bool> boolean(const Entry& e);
  std::optional<Duration> duration(const Entry& e, bool allow_zero);
  std::optional<std::size_t> size(const Entry& e, std::size_t min, std::size_t max);
  std::optional<Endpoint> endpoint(const Entry& e);
  std::vector<Endpoint> hosts(const Entry& e);
  template <class T>
  std::optional<T> choice(const Entry& e, std::initializer_list<std::pair<std::string_view, T>> options);
  std::optional<std::size_t> shard_named(std::string_view name, int line, const std::string& path);
  std::optional<std::size_t> shard_ref(const Entry& e);
  std::optional<Shard> dsn_database(const Entry& e, const std::string& dsn);
  std::optional<std::string> secret(const Fields& f, const std::string& path, bool required);
  std::vector<Cidr> cidrs(const Entry& e);

  // Sections.
  void load_shards(const Fields& top);
  void load_shard_tls(ShardTls& tls, const Entry& e);
  void load_users(const Fields& top);
  void load_frontend(const Fields& top);
  void load_auth_query(const Fields& top);
  void load_scatter(const Entry& e);
  void load_timeouts(const Entry& e);
  void load_moves(const Entry& e);
  void load_catalog(const Entry& e);
  void check_catalog_shards(int line);
  void check_trust_exposure(const Fields& top);
  void load_distributions(const Fields& top);
  void load_distribution(const Entry& item);
  void load_partitioning(Distribution& d, const Fields& f, const std::string& path);
  void load_placement(Distribution& d, const Entry& e);
  void load_ranges(Distribution& d, const Entry& e);
  void load_lists(Distribution& d, const Entry& e);
  void load_tables(Distribution& d, const Entry& e);
  void load_salt(Distribution& d, const Entry& e);
  void load_reference_tables(const Fields& top);
  void load_unlisted_tables(const Entry& e);
  void load_indexes(const Entry& e);
  void load_index(const Entry& item);
  void claim_table(const std::string& table, const std::string& owner, int line, const std::string& path);

  Config cfg_;
  std::vector<ConfigError> errors_;
  std::map<std::string, std::pair<std::string, int>, std::less<>> table_owner_;  // -> (owner, line)
  std::map<std::string, int, std::less<>> distribution_names_;                   // -> line
};

// Loader::choice, used by several sections.
template <class T>
std::optional<T> Loader::choice(const Entry& e,
                                std::initializer_list<std::pair<std::string_view, T>> options) {
  auto s = text(e);
  if (!s) return std::nullopt;
  std::string names;
  for (const auto& [n, v] : options) {
    if (*s == n) return v;
    names += (names.empty() ? "" : " | ") + std::string(n);
  }
  error(e, "expected one of " + names + ", got " + quote(*s));
  return std::nullopt;
}

}  // namespace splitpoint::config::detail
