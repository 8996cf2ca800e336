// Loading and whole-file validation of splitpoint's YAML configuration (SPEC §2).
// Every problem is collected with its 1-based line, so `splitpoint --check` can list
// them all at once; a Config is produced only when there are none. This is the only
// file that includes yaml-cpp: everything else sees plain structs.
#include "config/config.hpp"

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

namespace splitpoint::config {

const User* Config::find_user(std::string_view name) const {
  for (const User& u : users)
    if (u.name == name) return &u;
  return nullptr;
}

std::optional<std::size_t> Config::find_shard(std::string_view name) const {
  for (std::size_t i = 0; i < shards.size(); ++i)
    if (shards[i].name == name) return i;
  return std::nullopt;
}

std::vector<Endpoint> Shard::all_hosts() const {
  std::vector<Endpoint> all = hosts;
  if (all.empty()) all.push_back({host, port});
  all.insert(all.end(), replicas.begin(), replicas.end());
  return all;
}

namespace {

constexpr std::int64_t kMaxPartitions = 65536;  // memory and per-partition metrics
constexpr std::int64_t kMaxWorkers = 1024;
constexpr std::size_t kMinMessageSize = 1024;
constexpr std::size_t kMaxMessageSize = std::size_t{1} << 30;  // PostgreSQL's own limit
constexpr std::size_t kMaxNameLength = 63;                     // NAMEDATALEN - 1

std::string quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// `catalog:` and `scatter.combine` take a shard's name or a libpq connection string
// (key=value pairs, or a postgres:// URI); a shard name has no '='.
bool is_dsn(std::string_view s) {
  return s.find('=') != std::string_view::npos || s.starts_with("postgres://") || s.starts_with("postgresql://");
}

// PQconninfoParse's error text (freed here), without its trailing newline.
std::string libpq_message(char* why) {
  std::string m = why ? std::string(trim(why)) : "out of memory";
  if (why) PQfreemem(why);
  return m;
}

// Why `file` cannot be read (a CA file must be readable at load: a typo would otherwise
// show only at the first connection), or nullopt.
std::optional<std::string> unreadable(const std::string& file) {
  std::FILE* in = std::fopen(file.c_str(), "rb");
  if (!in) return "cannot read " + quote(file) + ": " + std::generic_category().message(errno);
  char probe;
  const bool readable = std::fread(&probe, 1, 1, in) == 1;
  std::fclose(in);
  if (!readable) return "cannot read " + quote(file) + " (empty, or a directory)";
  return std::nullopt;
}

// A whole decimal integer (optional leading '-'); nullopt on anything else or overflow.
std::optional<std::int64_t> parse_int(std::string_view s) {
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

std::optional<Quantity> split_quantity(std::string_view text) {
  text = trim(text);
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  Quantity q;
  auto [p, ec] = std::from_chars(text.data(), text.data() + digits, q.number);
  if (digits == 0 || ec != std::errc{}) return std::nullopt;
  q.unit = trim(text.substr(digits));
  return q;
}

std::optional<std::uint64_t> scaled(const Quantity& q, std::uint64_t factor, std::uint64_t max) {
  if (q.number > max / factor) return std::nullopt;
  return q.number * factor;
}

bool is_integer(std::string_view s) {
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Compares two is_integer() strings numerically, whatever their size.
int compare_integers(std::string_view a, std::string_view b) {
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
std::optional<std::pair<std::int64_t, std::int64_t>> parse_partition_span(std::string_view s) {
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
std::string partitions_are(const std::vector<std::int64_t>& parts) {
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

std::size_t edit_distance(std::string_view a, std::string_view b) {
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

bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxNameLength && s.front() != '-' && s.front() != '.' &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
         });
}

int node_line(const YAML::Node& n, int fallback) {
  if (!n.IsDefined() || n.IsNull()) return fallback;  // a null value's mark is past it
  const YAML::Mark m = n.Mark();
  return m.is_null() ? fallback : m.line + 1;
}

std::string describe(const YAML::Node& n) {
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
void assign(T& out, const std::optional<U>& v) {
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
  void load_reference_tables(const Fields& top);
  void load_unlisted_tables(const Entry& e);
  void claim_table(const std::string& table, const std::string& owner, int line, const std::string& path);

  Config cfg_;
  std::vector<ConfigError> errors_;
  std::map<std::string, std::pair<std::string, int>, std::less<>> table_owner_;  // -> (owner, line)
  std::map<std::string, int, std::less<>> distribution_names_;                   // -> line
};

std::optional<Fields> Loader::mapping(const Entry& e, Keys known) {
  if (!e.value.IsMap()) {
    error(e, "expected a mapping of keys, got " + describe(e.value));
    return std::nullopt;
  }
  Fields f;
  f.line = e.key_line;
  std::map<std::string, int, std::less<>> seen;
  for (auto it = e.value.begin(); it != e.value.end(); ++it) {
    const int line = node_line(it->first, e.key_line);
    const std::string prefix = e.path.empty() ? "" : e.path + ".";
    if (!it->first.IsScalar()) {
      error(line, prefix + "<key>: a key must be a plain name, got " + describe(it->first));
      continue;
    }
    const std::string key = it->first.Scalar();
    const std::string path = prefix + key;
    if (auto [pos, fresh] = seen.emplace(key, line); !fresh) {
      error(line, path + ": duplicate key (first at line " + std::to_string(pos->second) + ")");
      continue;
    }
    if (known.size() != 0 && std::find(known.begin(), known.end(), key) == known.end()) {
      std::string hint;
      std::size_t best = 3;  // suggest only close misspellings
      for (std::string_view k : known)
        if (const std::size_t dist = edit_distance(k, key); dist < best) {
          best = dist;
          hint = " (did you mean \"" + std::string(k) + "\"?)";
        }
      error(line, path + ": unknown key" + hint);
      continue;
    }
    f.entries.emplace_back(key, Entry{path, it->second, line});
  }
  return f;
}

std::optional<std::vector<Entry>> Loader::sequence(const Entry& e) {
  if (!e.value.IsSequence()) {
    error(e, "expected a list, got " + describe(e.value));
    return std::nullopt;
  }
  std::vector<Entry> items;
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    items.push_back({e.path + "[" + std::to_string(i) + "]", item, node_line(item, e.key_line)});
  }
  return items;
}

const Entry* Loader::required(const Fields& f, const std::string& path, std::string_view key) {
  const Entry* e = f.get(key);
  if (!e)
    error(f.line, (path.empty() ? "" : path + ": ") + "missing required key \"" + std::string(key) + "\"");
  return e;
}

std::optional<std::string> Loader::text(const Entry& e) {
  if (!e.value.IsScalar()) {
    error(e, "expected a single value, got " + describe(e.value));
    return std::nullopt;
  }
  if (e.value.Scalar().empty()) {
    error(e, "must not be empty");
    return std::nullopt;
  }
  return e.value.Scalar();
}

std::optional<std::string> Loader::name(const Entry& e) {
  auto s = text(e);
  if (s && !valid_name(*s)) {
    error(e, quote(*s) + " is not a valid name (letters, digits, _ . -; at most 63 characters)");
    return std::nullopt;
  }
  return s;
}

std::optional<std::int64_t> Loader::integer(const Entry& e, std::int64_t min, std::int64_t max) {
  auto s = text(e);
  if (!s) return std::nullopt;
  auto v = parse_int(*s);
  if (!v) {
    error(e, "expected an integer, got " + quote(*s));
  } else if (*v < min || *v > max) {
    error(e, max >= INT_MAX  // no practical upper bound: don't print one
                 ? "must be at least " + std::to_string(min) + ", got " + *s
                 : "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + *s);
    v.reset();
  }
  return v;
}

std::optional<bool> Loader::boolean(const Entry& e) {
  auto s = text(e);
  if (!s) return std::nullopt;
  std::string lower = *s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  error(e, "expected true or false, got " + quote(*s));
  return std::nullopt;
}

std::optional<Duration> Loader::duration(const Entry& e, bool allow_zero) {
  auto s = text(e);
  if (!s) return std::nullopt;
  auto d = parse_duration(*s);
  if (!d) {
    error(e, "expected a duration such as 250ms, 5s, 2m or 1h (a bare number is milliseconds), got " +
                 quote(*s));
  } else if (!allow_zero && d->count() == 0) {
    error(e, "must be greater than 0");
    d.reset();
  }
  return d;
}

std::optional<std::size_t> Loader::size(const Entry& e, std::size_t min, std::size_t max) {
  auto s = text(e);
  if (!s) return std::nullopt;
  auto v = parse_size(*s);
  if (!v) {
    error(e, "expected a size such as 65536, 64kB, 16MB or 1GB, got " + quote(*s));
  } else if (*v < min || *v > max) {
    error(e, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " bytes, got " + *s);
    v.reset();
  }
  return v;
}

// A list of hosts: each "host:port" or {host: ..., port: ...} (port default 5432).
std::vector<Endpoint> Loader::hosts(const Entry& e) {
  std::vector<Endpoint> out;
  auto items = sequence(e);
  if (!items) return out;
  if (items->empty()) error(e, "expected at least one host");
  for (const Entry& item : *items) {
    if (!item.value.IsMap()) {
      if (auto ep = endpoint(item)) out.push_back(*ep);
      continue;
    }
    auto f = mapping(item, {"host", "port"});
    if (!f) continue;
    Endpoint ep{"", 5432};
    if (const Entry* h = required(*f, item.path, "host")) assign(ep.host, text(*h));
    if (const Entry* p = f->get("port")) assign(ep.port, integer(*p, 1, 65535));
    if (!ep.host.empty()) out.push_back(std::move(ep));
  }
  return out;
}

std::optional<Endpoint> Loader::endpoint(const Entry& e) {
  auto s = text(e);
  if (!s) return std::nullopt;
  std::string_view v = *s, host, port;
  std::string why;
  if (v.front() == '[') {
    const auto close = v.find(']');
    if (close == std::string_view::npos || close + 1 >= v.size() || v[close + 1] != ':') {
      why = "expected [address]:port";
    } else {
      host = v.substr(1, close - 1);
      port = v.substr(close + 2);
    }
  } else if (const auto colon = v.rfind(':'); colon == std::string_view::npos) {
    why = "expected host:port";
  } else {
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) why = "write an IPv6 address in brackets, e.g. [::1]:6432";
  }
  auto number = parse_int(port);
  if (why.empty() && host.empty()) why = "the host is missing";
  if (why.empty() && (!number || *number < 1 || *number > 65535))
    why = "the port must be between 1 and 65535";
  if (!why.empty()) {
    error(e, why + ", got " + quote(*s));
    return std::nullopt;
  }
  return Endpoint{std::string(host), static_cast<std::uint16_t>(*number)};
}

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

std::optional<std::size_t> Loader::shard_named(std::string_view name, int line, const std::string& path) {
  if (auto i = cfg_.find_shard(name)) return i;
  std::string known;
  for (std::size_t i = 0; i < cfg_.shards.size(); ++i)
    if (const std::string& n = cfg_.shards[i].name; !n.empty() && cfg_.find_shard(n) == i)
      known += (known.empty() ? "" : ", ") + n;
  error(line, path + ": unknown shard " + quote(name) + (known.empty() ? "" : " (shards: " + known + ")"));
  return std::nullopt;
}

std::optional<std::size_t> Loader::shard_ref(const Entry& e) {
  auto s = text(e);
  return s ? shard_named(*s, e.line(), e.path) : std::nullopt;
}

// `password:`, `password_file:` or `password_env:` (SPEC §11): exactly one of them. A
// file is read now, so a reload picks up a rotated Kubernetes Secret; its trailing
// newlines (echo, kubectl create secret --from-file) are not part of the password.
std::optional<std::string> Loader::secret(const Fields& f, const std::string& path, bool required) {
  const Entry* given[] = {f.get("password"), f.get("password_file"), f.get("password_env")};
  const int count = (given[0] != nullptr) + (given[1] != nullptr) + (given[2] != nullptr);
  if (count > 1) {
    const Entry* second = nullptr;
    for (const Entry* e : given)
      if (e && (!second || e->key_line > second->key_line)) second = e;
    error(second->key_line, path + ": give only one of password, password_file and password_env");
    return std::nullopt;
  }
  if (count == 0) {
    if (required)
      error(f.line, (path.empty() ? "" : path + ": ") +
                        "missing required key \"password\" (or password_file / password_env)");
    return std::nullopt;
  }
  if (given[0]) return text(*given[0]);
  if (given[1]) {
    auto file = text(*given[1]);
    if (!file) return std::nullopt;
    std::FILE* in = std::fopen(file->c_str(), "rb");
    if (!in) {
      error(*given[1], "cannot read " + quote(*file) + ": " + std::generic_category().message(errno));
      return std::nullopt;
    }
    std::string content;
    char chunk[4096];
    std::size_t n = 0;
    while (content.size() <= 65536 && (n = std::fread(chunk, 1, sizeof chunk, in)) > 0) content.append(chunk, n);
    const int err = std::ferror(in) ? errno : 0;
    std::fclose(in);
    if (err != 0) {
      error(*given[1], "cannot read " + quote(*file) + ": " + std::generic_category().message(err));
      return std::nullopt;
    }
    if (content.size() > 65536) {
      error(*given[1], quote(*file) + " is too large for a password (over 64kB)");
      return std::nullopt;
    }
    while (!content.empty() && (content.back() == '\n' || content.back() == '\r')) content.pop_back();
    if (content.empty()) {
      error(*given[1], quote(*file) + " is empty");
      return std::nullopt;
    }
    return content;
  }
  auto name = text(*given[2]);
  if (!name) return std::nullopt;
  const char* value = std::getenv(name->c_str());
  if (!value) {
    error(*given[2], "environment variable " + quote(*name) + " is not set");
    return std::nullopt;
  }
  if (*value == '\0') {
    error(*given[2], "environment variable " + quote(*name) + " is empty");
    return std::nullopt;
  }
  return std::string(value);
}

// `allow:` (SPEC §11): a list of CIDRs (or one), as pg_hba.conf's address column.
std::vector<Cidr> Loader::cidrs(const Entry& e) {
  std::vector<Entry> items{e};
  if (e.value.IsSequence()) {
    auto seq = sequence(e);
    if (!seq) return {};
    items = std::move(*seq);
    if (items.empty()) error(e, "expected at least one address range (omit allow: to allow any address)");
  }
  std::vector<Cidr> out;
  for (const Entry& item : items) {
    auto s = text(item);
    if (!s) continue;
    std::string why;
    if (auto c = Cidr::parse(trim(*s), &why)) out.push_back(std::move(*c));
    else error(item, why + ", got " + quote(*s));
  }
  return out;
}

// A shard's `tls: {mode: disable|require|verify-ca|verify-full, ca: FILE}` (SPEC §11), as
// libpq's sslmode and sslrootcert. The CA file must be readable now: a typo would
// otherwise only show at the first connection.
void Loader::load_shard_tls(ShardTls& tls, const Entry& e) {
  auto f = mapping(e, {"mode", "ca"});
  if (!f) return;
  const Entry* m = required(*f, e.path, "mode");
  auto mode = m ? choice<ShardTlsMode>(*m, {{"disable", ShardTlsMode::disable},
                                            {"require", ShardTlsMode::require},
                                            {"verify-ca", ShardTlsMode::verify_ca},
                                            {"verify-full", ShardTlsMode::verify_full}})
                : std::nullopt;
  if (!mode) return;  // ca: cannot be judged without it
  tls.mode = *mode;
  const bool verify = tls.mode == ShardTlsMode::verify_ca || tls.mode == ShardTlsMode::verify_full;
  if (const Entry* c = f->get("ca")) {
    auto file = text(*c);
    if (!file) return;
    if (!verify) {
      error(*c, "only used with mode verify-ca or verify-full (require encrypts without checking the certificate)");
      return;
    }
    if (auto problem = unreadable(*file)) error(*c, *problem);
    else tls.ca = *file;
  } else if (verify) {
    error(f->line, e.path + ": mode " + std::string(tls.mode == ShardTlsMode::verify_ca ? "verify-ca" : "verify-full") +
                       " needs ca: (the PEM file of the certificate authorities to trust)");
  }
}

void Loader::load_shards(const Fields& top) {
  const Entry* e = top.get("shards");
  if (!e) {
    error(0, "shards: no shards configured; at least one is required");
    return;
  }
  auto items = sequence(*e);
  if (!items) return;
  if (items->empty()) error(e->key_line, "shards: no shards configured; at least one is required");
  std::map<std::string, int, std::less<>> seen;
  for (const Entry& item : *items) {
    auto f = mapping(item, {"name", "host", "port", "hosts", "replicas", "database", "user", "password",
                            "password_file", "password_env", "pool_size", "tls"});
    if (!f) continue;
    Shard s;
    s.line = item.key_line;
    if (const Entry* n = required(*f, item.path, "name"); n) {
      if (auto v = name(*n)) {
        if (auto [pos, fresh] = seen.emplace(*v, n->line()); !fresh)
          error(*n,
                "duplicate shard name " + quote(*v) + " (first at line " + std::to_string(pos->second) + ")");
        s.name = *v;
      }
    }
    if (const Entry* v = f->get("host")) assign(s.host, text(*v));
    if (const Entry* v = f->get("port")) assign(s.port, integer(*v, 1, 65535));
    if (const Entry* v = f->get("database")) assign(s.database, text(*v));
    if (const Entry* v = f->get("user")) assign(s.user, text(*v));
    assign(s.password, secret(*f, item.path, false));
    if (const Entry* v = f->get("pool_size")) assign(s.pool_size, integer(*v, 1, INT_MAX));
    if (const Entry* v = f->get("hosts")) {
      if (f->get("host") || f->get("port")) error(*v, "give either hosts or host/port, not both");
      s.hosts = hosts(*v);
      if (!s.hosts.empty()) {
        s.host = s.hosts.front().host;
        s.port = s.hosts.front().port;
      }
    }
    if (const Entry* v = f->get("replicas")) s.replicas = hosts(*v);
    if (const Entry* v = f->get("tls")) load_shard_tls(s.tls, *v);
    cfg_.shards.push_back(std::move(s));
  }
}

void Loader::load_users(const Fields& top) {
  const Entry* e = top.get("users");
  if (!e) return;
  auto items = sequence(*e);
  if (!items) return;
  std::map<std::string, int, std::less<>> seen;
  for (const Entry& item : *items) {
    auto f = mapping(item, {"name", "password", "password_file", "password_env", "admin", "allow"});
    if (!f) continue;
    User u;
    u.line = item.key_line;
    if (const Entry* n = required(*f, item.path, "name"); n) {
      if (auto v = text(*n)) {
        if (auto [pos, fresh] = seen.emplace(*v, n->line()); !fresh)
          error(*n,
                "duplicate user name " + quote(*v) + " (first at line " + std::to_string(pos->second) + ")");
        u.name = *v;
      }
    }
    assign(u.password, secret(*f, item.path, true));
    if (const Entry* a = f->get("admin")) assign(u.admin, boolean(*a));
    if (const Entry* a = f->get("allow")) u.allow = cidrs(*a);
    cfg_.users.push_back(std::move(u));
  }
}

// The client side and the process: endpoints, auth, TLS, limits, transactions.
void Loader::load_frontend(const Fields& f) {
  if (const Entry* e = f.get("listen")) assign(cfg_.listen, endpoint(*e));
  if (const Entry* e = f.get("metrics_listen")) assign(cfg_.metrics_listen, endpoint(*e));
  if (const Entry* e = f.get("pool_mode"))
    assign(cfg_.pool_mode,
           choice<PoolMode>(*e, {{"transaction", PoolMode::transaction}, {"session", PoolMode::session}}));
  if (const Entry* e = f.get("auth"))
    assign(cfg_.auth, choice<AuthMethod>(*e, {{"trust", AuthMethod::trust},
                                              {"password", AuthMethod::password},
                                              {"md5", AuthMethod::md5},
                                              {"scram-sha-256", AuthMethod::scram_sha_256}}));
  if (const Entry* e = f.get("tls")) {
    if (auto t = mapping(*e, {"cert", "key"})) {
      const Entry* cert = required(*t, e->path, "cert");
      const Entry* key = required(*t, e->path, "key");
      auto c = cert ? text(*cert) : std::nullopt;
      auto k = key ? text(*key) : std::nullopt;
      if (c && k) cfg_.tls = Tls{*c, *k};
    }
  }
  if (const Entry* e = f.get("max_client_connections"))
    assign(cfg_.max_client_connections, integer(*e, 1, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* e = f.get("max_message_size"))
    assign(cfg_.max_message_size, size(*e, kMinMessageSize, kMaxMessageSize));
  if (const Entry* e = f.get("workers")) assign(cfg_.workers, integer(*e, 0, kMaxWorkers));
  if (const Entry* e = f.get("max_prepared_statements"))
    assign(cfg_.max_prepared_statements, integer(*e, 0, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* e = f.get("scheduling"))
    assign(cfg_.scheduling,
           choice<Scheduling>(*e, {{"normal", Scheduling::normal}, {"batch", Scheduling::batch}}));
  if (const Entry* e = f.get("log_level"))
    assign(cfg_.log_level, choice<std::string_view>(*e, {{"trace", "trace"},
                                                         {"debug", "debug"},
                                                         {"info", "info"},
                                                         {"warn", "warn"},
                                                         {"error", "error"},
                                                         {"off", "off"}}));
  if (const Entry* e = f.get("reads"))
    assign(cfg_.reads, choice<Reads>(*e, {{"primary", Reads::primary}, {"replica", Reads::replica}}));
  if (const Entry* e = f.get("max_replica_lag")) assign(cfg_.max_replica_lag, duration(*e, true));
  if (const Entry* e = f.get("health")) {
    if (auto h = mapping(*e, {"interval", "timeout", "ban"})) {
      if (const Entry* v = h->get("interval")) assign(cfg_.health.interval, duration(*v, false));
      if (const Entry* v = h->get("timeout")) assign(cfg_.health.timeout, duration(*v, false));
      if (const Entry* v = h->get("ban")) assign(cfg_.health.ban, duration(*v, false));
    }
  }
  if (const Entry* e = f.get("transactions")) {
    if (auto t = mapping(*e, {"cross_shard_writes"}))
      if (const Entry* c = t->get("cross_shard_writes"))
        assign(cfg_.cross_shard_writes,
               choice<CrossShardWrites>(
                   *c, {{"two_phase", CrossShardWrites::two_phase}, {"refuse", CrossShardWrites::refuse}}));
  }
}

void Loader::load_scatter(const Entry& e) {
  auto f = mapping(e, {"deadline", "max_deadline", "partial_results", "max_buffered_rows", "combine",
                       "max_combine_rows", "max_insert_select_rows"});
  if (!f) return;
  Scatter& s = cfg_.scatter;
  const Entry* deadline = f->get("deadline");
  const Entry* max_deadline = f->get("max_deadline");
  auto d = deadline ? duration(*deadline, false) : std::optional{s.deadline};
  auto max = max_deadline ? duration(*max_deadline, false) : std::optional{s.max_deadline};
  assign(s.deadline, d);
  assign(s.max_deadline, max);
  if (d && max && *d > *max) {
    const std::string why = "scatter.deadline (" + std::to_string(d->count()) +
                            "ms) exceeds scatter.max_deadline (" + std::to_string(max->count()) + "ms)";
    error(deadline ? deadline->line() : max_deadline->line(), why);
  }
  if (const Entry* v = f->get("partial_results"))
    assign(s.partial_results,
           choice<PartialResults>(*v, {{"deny", PartialResults::deny}, {"allow", PartialResults::allow}}));
  if (const Entry* v = f->get("max_buffered_rows"))
    assign(s.max_buffered_rows, integer(*v, 0, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* v = f->get("combine")) {
    if (auto t = text(*v); t && is_dsn(*t)) {
      s.combine_dsn = *t;
      s.combine_database = dsn_database(*v, *t);
    } else {
      assign(s.combine_shard, shard_ref(*v));
    }
  }
  if (const Entry* v = f->get("max_combine_rows"))
    assign(s.max_combine_rows, integer(*v, 0, std::numeric_limits<std::int64_t>::max()));
  if (const Entry* v = f->get("max_insert_select_rows"))
    assign(s.max_insert_select_rows, integer(*v, 0, std::numeric_limits<std::int64_t>::max()));
}

void Loader::load_moves(const Entry& e) {
  auto f = mapping(e, {"max_hold", "poll", "lease", "verify"});
  if (!f) return;
  Moves& m = cfg_.moves;
  if (const Entry* v = f->get("max_hold")) assign(m.max_hold, duration(*v, false));
  if (const Entry* v = f->get("poll")) assign(m.poll, duration(*v, false));
  if (const Entry* v = f->get("lease")) assign(m.lease, duration(*v, false));
  if (const Entry* v = f->get("verify")) assign(m.verify, boolean(*v));
  if (m.lease <= m.poll * 2) error(e.line(), "moves.lease must be more than twice moves.poll");
}

// `catalog:` (SPEC §9): a shard's name, or a libpq connection string (key=value
// pairs or a postgres:// URI) for a database of its own, which no shard's traffic uses.
void Loader::load_catalog(const Entry& e) {
  auto s = text(e);
  if (!s) return;
  if (!is_dsn(*s)) return assign(cfg_.catalog_shard, shard_named(*s, e.line(), e.path));
  cfg_.catalog_dsn = *s;
  // Any libpq option may be given (libpq makes the connection), but a typo is found now.
  char* why = nullptr;
  if (PQconninfoOption* parsed = PQconninfoParse(s->c_str(), &why)) return PQconninfoFree(parsed);
  error(e, "not a libpq connection string: " + libpq_message(why));
}

// `scatter.combine` as a libpq connection string (SPEC §4.1: "a separate PostgreSQL"):
// the proxy connects there itself, with what a shard entry gives. Unset parts default as
// a shard's do: the client's user, password and database, port 5432.
std::optional<Shard> Loader::dsn_database(const Entry& e, const std::string& dsn) {
  char* why = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> parsed(PQconninfoParse(dsn.c_str(), &why),
                                                                      &PQconninfoFree);
  if (!parsed) {
    error(e, "not a libpq connection string: " + libpq_message(why));
    return std::nullopt;
  }
  Shard s;
  s.name = "combine";
  s.line = e.line();
  std::string sslmode = "disable", ca;
  bool ok = true;
  for (const PQconninfoOption* o = parsed.get(); o->keyword; ++o) {
    if (!o->val || !*o->val) continue;
    const std::string_view k = o->keyword;
    const std::string v = o->val;
    if (k == "host" && v.find(',') == std::string::npos) {
      s.host = v;
    } else if (k == "port") {
      int port = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), port);
      if (ec != std::errc{} || end != v.data() + v.size() || port < 1 || port > 65535) {
        error(e, "port " + quote(v) + " is not a port number");
        ok = false;
      }
      s.port = static_cast<std::uint16_t>(port);
    } else if (k == "dbname") {
      s.database = v;
    } else if (k == "user") {
      s.user = v;
    } else if (k == "password") {
      s.password = v;
    } else if (k == "sslmode") {
      sslmode = v;
    } else if (k == "sslrootcert") {
      ca = v;
    } else if (k != "connect_timeout" && k != "application_name") {
      error(e, "connection option " + std::string(k) + (k == "host" ? " with several hosts" : "") +
                   " is not supported here (host, port, dbname, user, password, sslmode, sslrootcert)");
      ok = false;
    }
  }
  static const std::pair<std::string_view, ShardTlsMode> modes[] = {{"disable", ShardTlsMode::disable},
                                                                    {"require", ShardTlsMode::require},
                                                                    {"verify-ca", ShardTlsMode::verify_ca},
                                                                    {"verify-full", ShardTlsMode::verify_full}};
  auto mode = std::find_if(std::begin(modes), std::end(modes), [&](auto& m) { return m.first == sslmode; });
  if (mode == std::end(modes)) {
    error(e, "sslmode " + quote(sslmode) + ": expected one of disable | require | verify-ca | verify-full");
    return std::nullopt;
  }
  s.tls.mode = mode->second;
  const bool verify = s.tls.mode == ShardTlsMode::verify_ca || s.tls.mode == ShardTlsMode::verify_full;
  if (verify != !ca.empty()) {
    error(e, verify ? "sslmode " + sslmode + " needs sslrootcert (the PEM file of the certificate authorities to trust)"
                    : "sslrootcert is only used with sslmode verify-ca or verify-full");
    return std::nullopt;
  }
  if (verify) {
    if (auto problem = unreadable(ca)) {
      error(e, *problem);
      return std::nullopt;
    }
    s.tls.ca = ca;
  }
  if (!ok) return std::nullopt;
  return s;
}

// The catalog and the mover connect to shards on their own, with no client whose
// database and credentials they could borrow.
void Loader::check_catalog_shards(int line) {
  for (const auto& s : cfg_.shards)
    if (s.database.empty() || s.user.empty())
      error(s.line ? s.line : line, "with catalog:, shard " + quote(s.name) + " needs database and user");
}

// SPEC §11: anyone who can reach a non-loopback listener could log in as any user,
// in clear text, with `auth: trust` and no TLS. Refused at start, --check and reload.
void Loader::check_trust_exposure(const Fields& top) {
  if (cfg_.auth != AuthMethod::trust || cfg_.tls || is_loopback_host(cfg_.listen.host)) return;
  const Entry* auth = top.get("auth");
  const Entry* listen = top.get("listen");
  error(auth ? auth->line() : listen ? listen->line() : 0,
        "auth: trust on listen " + cfg_.listen.host + ":" + std::to_string(cfg_.listen.port) +
            " (beyond loopback) without tls: anyone who can reach it could log in as any user; use a password "
            "method (scram-sha-256), configure tls, or listen on 127.0.0.1");
}

void Loader::load_timeouts(const Entry& e) {
  auto f = mapping(e, {"client_login", "client_idle", "server_connect", "shard_unavailable", "shutdown", "query",
                       "deadlock"});
  if (!f) return;
  Timeouts& t = cfg_.timeouts;
  // Login and connect must end (every wait has a deadline); idle 0 means never,
  // shutdown 0 means no grace period.
  if (const Entry* v = f->get("client_login")) assign(t.client_login, duration(*v, false));
  if (const Entry* v = f->get("client_idle")) assign(t.client_idle, duration(*v, true));
  if (const Entry* v = f->get("server_connect")) assign(t.server_connect, duration(*v, false));
  if (const Entry* v = f->get("shard_unavailable")) assign(t.shard_unavailable, duration(*v, true));
  if (const Entry* v = f->get("shutdown")) assign(t.shutdown, duration(*v, true));
  // query and deadlock 0 are off.
  if (const Entry* v = f->get("query")) assign(t.query, duration(*v, true));
  if (const Entry* v = f->get("deadlock")) assign(t.deadlock, duration(*v, true));
}

void Loader::load_distributions(const Fields& top) {
  const Entry* e = top.get("distributions");
  if (!e) return;
  if (auto items = sequence(*e))
    for (const Entry& item : *items) load_distribution(item);
}

void Loader::load_distribution(const Entry& item) {
  auto f =
      mapping(item, {"name", "method", "partitions", "placement", "ranges", "lists", "default", "tables"});
  if (!f) return;
  Distribution d;
  d.line = item.key_line;
  if (const Entry* n = required(*f, item.path, "name")) {
    if (auto v = name(*n)) {
      if (auto [pos, fresh] = distribution_names_.emplace(*v, n->line()); !fresh)
        error(*n, "duplicate distribution name " + quote(*v) + " (first at line " +
                      std::to_string(pos->second) + ")");
      d.name = *v;
    }
  }
  load_partitioning(d, *f, item.path);
  if (const Entry* t = f->get("tables")) load_tables(d, *t);
  cfg_.distributions.push_back(std::move(d));
}

// The method and the keys that belong to it: how keys map to logical partitions, and
// those to shards.
void Loader::load_partitioning(Distribution& d, const Fields& f, const std::string& path) {
  if (const Entry* m = f.get("method")) {
    auto method =
        choice<Method>(*m, {{"hash", Method::hash}, {"range", Method::range}, {"list", Method::list}});
    if (!method) return;  // the other keys cannot be judged without it
    d.method = *method;
  }
  static constexpr std::pair<std::string_view, Method> kOnly[] = {{"partitions", Method::hash},
                                                                  {"placement", Method::hash},
                                                                  {"ranges", Method::range},
                                                                  {"lists", Method::list},
                                                                  {"default", Method::list}};
  static constexpr std::string_view kMethodName[] = {"hash", "range", "list"};
  for (const auto& [key, only] : kOnly)
    if (const Entry* e = f.get(key); e && only != d.method)
      error(e->key_line, e->path + ": only allowed with method: " + std::string(kMethodName[int(only)]));
  if (d.method == Method::hash) {
    if (const Entry* p = required(f, path, "partitions"))
      assign(d.partitions, integer(*p, 1, kMaxPartitions));
    if (const Entry* p = f.get("placement")) {
      load_placement(d, *p);
    } else if (d.partitions > 0 && !cfg_.shards.empty()) {
      // Shard i of N gets [floor(i*P/N), floor((i+1)*P/N)).
      const std::size_t n = cfg_.shards.size(), parts = static_cast<std::size_t>(d.partitions);
      d.placement.resize(parts);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t p = i * parts / n; p < (i + 1) * parts / n; ++p) d.placement[p] = i;
    }
  } else if (d.method == Method::range) {
    if (const Entry* r = required(f, path, "ranges")) load_ranges(d, *r);
  } else {
    if (const Entry* l = required(f, path, "lists")) load_lists(d, *l);
    if (const Entry* def = f.get("default")) d.default_shard = shard_ref(*def);
  }
}

void Loader::load_placement(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  const std::size_t errors_before = errors_.size();
  const std::int64_t parts = d.partitions;  // 0 when invalid: check the syntax only
  std::vector<std::optional<std::size_t>> owner(static_cast<std::size_t>(parts));
  for (const auto& [shard_name, entry] : f->entries) {
    auto shard = shard_named(shard_name, entry.key_line, entry.path);
    std::vector<Entry> specs{entry};
    if (entry.value.IsSequence()) specs = sequence(entry).value_or(std::vector<Entry>{});
    for (const Entry& spec : specs) {
      auto s = text(spec);
      if (!s) continue;
      auto span = parse_partition_span(*s);
      if (!span) {
        error(spec, "expected a partition number or a range such as 0-31, got " + quote(*s));
        continue;
      }
      auto [first, last] = *span;
      if (first > last) {
        error(spec, "range " + quote(*s) + " is reversed");
        continue;
      }
      if (parts == 0 || !shard) continue;
      if (last >= parts) {
        error(spec, "partition " + std::to_string(last) + " is out of range: partitions are 0-" +
                        std::to_string(parts - 1));
        // The part in range is still placed, so an overlap in it is reported too.
        if (first >= parts) continue;
        last = parts - 1;
      }
      std::vector<std::int64_t> clash;
      std::string owners;
      for (std::int64_t p = first; p <= last; ++p) {
        auto& o = owner[static_cast<std::size_t>(p)];
        if (!o) {
          o = *shard;
          continue;
        }
        clash.push_back(p);
        if (owners.find(quote(cfg_.shards[*o].name)) == std::string::npos)
          owners += (owners.empty() ? "" : ", ") + quote(cfg_.shards[*o].name);
      }
      if (!clash.empty()) error(spec, partitions_are(clash) + " already placed on " + owners);
    }
  }
  if (parts == 0 || errors_.size() != errors_before) return;  // a gap would only echo them
  std::vector<std::int64_t> missing;
  for (std::int64_t p = 0; p < parts; ++p)
    if (!owner[static_cast<std::size_t>(p)]) missing.push_back(p);
  if (!missing.empty()) {
    error(e.key_line, e.path + ": " + partitions_are(missing) + " not placed on any shard");
    return;
  }
  d.placement.clear();
  for (const auto& o : owner) d.placement.push_back(*o);
}

void Loader::load_ranges(Distribution& d, const Entry& e) {
  auto items = sequence(e);
  if (!items) return;
  if (items->empty()) error(e.key_line, e.path + ": at least one range is required");
  struct Bound {
    std::string value;
    int line;
    std::string path;
  };
  std::vector<Bound> bounds;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const Entry& item = (*items)[i];
    auto f = mapping(item, {"upto", "shard"});
    if (!f) continue;
    Range r;
    if (const Entry* s = required(*f, item.path, "shard")) assign(r.shard, shard_ref(*s));
    if (const Entry* u = f->get("upto")) {
      r.upto = text(*u);
      if (r.upto) bounds.push_back({*r.upto, u->line(), u->path});
    } else if (i + 1 != items->size()) {
      error(f->line, item.path + ": only the last range may omit upto");
    }
    d.ranges.push_back(std::move(r));
  }
  // Integers compare as numbers; anything else (ISO dates, timestamps, text) as strings.
  const bool numeric =
      std::all_of(bounds.begin(), bounds.end(), [](const Bound& b) { return is_integer(b.value); });
  for (std::size_t i = 1; i < bounds.size(); ++i) {
    const Bound &prev = bounds[i - 1], &cur = bounds[i];
    const int c = numeric ? compare_integers(prev.value, cur.value) : prev.value.compare(cur.value);
    if (c >= 0)
      error(cur.line, cur.path + ": ranges must be in increasing order of upto: " + quote(cur.value) +
                          " is not above " + quote(prev.value) + " (line " + std::to_string(prev.line) + ")");
  }
}

void Loader::load_lists(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  if (f->entries.empty()) error(e.key_line, e.path + ": at least one shard with its values is required");
  std::map<std::string, std::pair<std::string, int>, std::less<>> seen;  // value -> (shard, line)
  for (const auto& [shard_name, entry] : f->entries) {
    ListPartition lp;
    lp.shard = shard_named(shard_name, entry.key_line, entry.path).value_or(0);
    auto values = sequence(entry);
    if (!values) continue;
    for (const Entry& v : *values) {
      auto s = text(v);
      if (!s) continue;
      if (auto [pos, fresh] = seen.emplace(*s, std::pair{shard_name, v.line()}); !fresh) {
        error(v, "value " + quote(*s) + " is already listed for shard " + quote(pos->second.first) +
                     " (line " + std::to_string(pos->second.second) + ")");
        continue;
      }
      lp.values.push_back(*s);
    }
    d.lists.push_back(std::move(lp));
  }
}

void Loader::load_tables(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  for (const auto& [table, entry] : f->entries) {
    auto column = text(entry);
    if (table.empty()) {
      error(entry.key_line, entry.path + ": a table name must not be empty");
      continue;
    }
    claim_table(table, "distribution " + quote(d.name), entry.key_line, entry.path);
    if (column) d.tables.emplace_back(table, *column);
  }
}

void Loader::claim_table(const std::string& table, const std::string& owner, int line,
                         const std::string& path) {
  auto [pos, fresh] = table_owner_.emplace(table, std::pair{owner, line});
  if (!fresh)
    error(line, path + ": table " + quote(table) + " is already in " + pos->second.first + " (line " +
                    std::to_string(pos->second.second) + ")");
}

void Loader::load_reference_tables(const Fields& top) {
  const Entry* e = top.get("reference_tables");
  if (!e) return;
  auto items = sequence(*e);
  if (!items) return;
  for (const Entry& item : *items) {
    auto table = text(item);
    if (!table) continue;
    claim_table(*table, "reference_tables", item.line(), item.path);
    cfg_.reference_tables.push_back(*table);
  }
}

void Loader::load_unlisted_tables(const Entry& e) {
  auto s = text(e);
  if (!s) return;
  if (*s == "reference") {
    cfg_.unlisted_tables = UnlistedPolicy::reference;
  } else if (*s == "reject") {
    cfg_.unlisted_tables = UnlistedPolicy::reject;
  } else if (s->starts_with("shard:")) {
    cfg_.unlisted_tables = UnlistedPolicy::shard;
    cfg_.unlisted_shard = shard_named(trim(std::string_view(*s).substr(6)), e.line(), e.path).value_or(0);
  } else {
    error(e, "expected reference, reject or shard:<name>, got " + quote(*s));
  }
}

LoadResult Loader::run(const YAML::Node& root) {
  const Entry whole{"", root, node_line(root, 1)};
  std::optional<Fields> top;
  if (root.IsNull()) {
    top = Fields{};  // an empty file: everything defaults, and "no shards" says what is missing
  } else if (root.IsMap()) {
    top = mapping(whole, {"listen", "metrics_listen", "pool_mode", "auth", "tls", "users", "shards",
                          "distributions", "reference_tables", "unlisted_tables", "scatter", "transactions",
                          "timeouts", "catalog", "moves", "reads", "max_replica_lag", "health",
                          "max_client_connections", "max_message_size", "workers", "scheduling", "log_level",
                          "max_prepared_statements"});
  } else {
    error(whole.line(), "the configuration must be a mapping of keys, got " + describe(root));
  }
  if (top) {
    load_shards(*top);  // first: everything else refers to shards by name
    load_users(*top);
    load_frontend(*top);
    if (const Entry* e = top->get("scatter")) load_scatter(*e);
    if (const Entry* e = top->get("timeouts")) load_timeouts(*e);
    if (const Entry* e = top->get("catalog")) load_catalog(*e);
    if (const Entry* e = top->get("moves")) load_moves(*e);
    load_distributions(*top);
    load_reference_tables(*top);
    if (const Entry* e = top->get("unlisted_tables")) load_unlisted_tables(*e);
    if (const Entry* e = top->get("catalog")) check_catalog_shards(e->line());
    check_trust_exposure(*top);
  }
  std::stable_sort(errors_.begin(), errors_.end(),
                   [](const ConfigError& a, const ConfigError& b) { return a.line < b.line; });
  LoadResult result;
  if (errors_.empty()) result.config = std::move(cfg_);
  result.errors = std::move(errors_);
  return result;
}

// YAML allows no C0 control character but tab, line feed and carriage return, nor DEL
// (YAML 1.2, 5.1). yaml-cpp 0.7 hangs on some ("\0," never returns: found by
// tests/fuzz's config_fuzz), so they are refused here first: the first one, or nullopt.
std::optional<ConfigError> control_character(std::string_view text) {
  int line = 1;
  std::size_t column = 1;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      ++line;
      column = 1;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      return ConfigError{line, "YAML syntax error at column " + std::to_string(column) + ": control character " +
                                   hex + " is not allowed"};
    }
    ++column;
  }
  return std::nullopt;
}

// yaml-cpp 0.7 (Debian 12's) never returns, allocating without bound, from a ','
// outside any flow collection where a node would start: at the start of a line, after
// "- ", "? " or ": ", after a quoted scalar, a tag, an anchor or an alias (", x",
// "- a\n, b", "'x' , y", "!, x"; found by tests/fuzz's config_fuzz). Such a ',' is
// invalid YAML anyway (a plain scalar cannot start with an indicator), so it is refused
// here first: the position of the first one, or nullopt. A ',' inside a plain scalar
// ("a: b, c"), in quotes, a comment, a flow collection or a block scalar is left to
// yaml-cpp.
std::optional<ConfigError> stray_flow_entry(std::string_view text) {
  int depth = 0;                                      // [ and { open
  std::size_t block_indent = std::string_view::npos;  // inside a | or > scalar: its parent's indent
  char quote = 0;                                     // inside a quoted scalar (may span lines)
  int line = 1;
  for (std::size_t pos = 0; pos < text.size(); ++line) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t indent = l.find_first_not_of(' ');
    if (block_indent != std::string_view::npos) {
      if (indent == std::string_view::npos || indent > block_indent) continue;  // the scalar's text
      block_indent = std::string_view::npos;
    }
    bool node_start = depth == 0 && !quote;  // the next token may start a node
    bool scalar = false;                     // inside a plain scalar
    for (std::size_t i = 0; i < l.size(); ++i) {
      const char c = l[i];
      const char next = i + 1 < l.size() ? l[i + 1] : ' ';
      if (quote) {
        if (c == '\\' && quote == '"') ++i;
        else if (c == quote && !(quote == '\'' && next == '\'')) quote = 0, node_start = depth == 0;
        else if (c == '\'' && quote == '\'') ++i;
        continue;
      }
      if (c == ' ' || c == '\t') continue;
      if (c == '#' && (i == 0 || l[i - 1] == ' ' || l[i - 1] == '\t')) break;
      if (depth > 0) {  // flow context: commas separate entries
        if (c == '[' || c == '{') ++depth;
        if (c == ']' || c == '}') node_start = --depth == 0;
        if (c == '\'' || c == '"') quote = c;
        continue;
      }
      if (scalar) {  // a plain scalar runs to ": " (then a value may start) or the line's end
        if (c == ':' && (next == ' ' || next == '\t')) scalar = false, node_start = true;
        continue;
      }
      if (c == ',' && node_start)
        return ConfigError{line, "YAML syntax error at column " + std::to_string(i + 1) +
                                     ": ',' outside a flow collection ([...] or {...})"};
      if ((c == '-' || c == '?' || c == ':') && (next == ' ' || next == '\t' || i + 1 == l.size())) {
        node_start = true;
      } else if (c == '!' || c == '&' || c == '*') {  // a tag, an anchor or an alias, up to a space or ','
        while (i + 1 < l.size() && l[i + 1] != ' ' && l[i + 1] != '\t' && l[i + 1] != ',') ++i;
        node_start = true;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == '|' || c == '>') {  // "key: |", "- >-", "key: |2+": the more indented lines are its text
        block_indent = indent;
        break;
      } else {
        scalar = true;
        node_start = false;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

LoadResult load_string(std::string_view yaml) {
  auto e = control_character(yaml);
  if (!e) e = stray_flow_entry(yaml);
  if (e) {
    LoadResult result;
    result.errors.push_back(std::move(*e));
    return result;
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::Exception& e) {
    const bool where = !e.mark.is_null();
    LoadResult result;
    result.errors.push_back(
        {where ? e.mark.line + 1 : 0, "YAML syntax error" +
                                          (where ? " at column " + std::to_string(e.mark.column + 1) : "") +
                                          ": " + e.msg});
    return result;
  }
  Loader loader;
  if (documents.size() > 1)
    loader.error(node_line(documents[1], 0),
                 "only one YAML document is allowed; found " + std::to_string(documents.size()));
  return loader.run(documents.empty() ? YAML::Node() : documents.front());
}

LoadResult load_file(const std::string& path) {
  auto fail = [&](int err) {
    LoadResult result;
    result.errors.push_back({0, "cannot read " + path + ": " + std::generic_category().message(err)});
    return result;
  };
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return fail(errno);
  std::string content;
  char chunk[16384];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0) content.append(chunk, n);
  const int err = std::ferror(file) ? errno : 0;  // e.g. EISDIR for a directory
  std::fclose(file);
  if (err != 0) return fail(err);
  return load_string(content);
}

Config default_config() {
  Config c;
  Shard s0;
  s0.name = "s0";
  c.shards.push_back(std::move(s0));
  return c;
}

std::optional<Duration> parse_duration(std::string_view text) {
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {
      {"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"min", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  auto q = split_quantity(text);
  if (!q) return std::nullopt;
  for (const auto& [unit, factor] : kUnits) {
    if (q->unit != unit) continue;
    auto ms = scaled(*q, factor, static_cast<std::uint64_t>(std::numeric_limits<Duration::rep>::max()));
    if (!ms) return std::nullopt;
    return Duration{static_cast<Duration::rep>(*ms)};
  }
  return std::nullopt;
}

std::optional<std::size_t> parse_size(std::string_view text) {
  static constexpr std::uint64_t K = 1024;
  static constexpr std::pair<std::string_view, std::uint64_t> kUnits[] = {{"", 1},
                                                                          {"B", 1},
                                                                          {"kB", K},
                                                                          {"KB", K},
                                                                          {"KiB", K},
                                                                          {"MB", K * K},
                                                                          {"MiB", K * K},
                                                                          {"GB", K * K * K},
                                                                          {"GiB", K * K * K},
                                                                          {"TB", K * K * K * K},
                                                                          {"TiB", K * K * K * K}};
  auto q = split_quantity(text);
  if (!q) return std::nullopt;
  for (const auto& [unit, factor] : kUnits) {
    if (q->unit != unit) continue;
    auto bytes = scaled(*q, factor, std::numeric_limits<std::size_t>::max());
    if (!bytes) return std::nullopt;
    return static_cast<std::size_t>(*bytes);
  }
  return std::nullopt;
}

}  // namespace splitpoint::config
