// Loading and whole-file validation of splitpoint's YAML configuration (SPEC §2).
// Every problem is collected with its 1-based line, so `splitpoint --check` can list
// them all at once; a Config is produced only when there are none. The sections are
// loaded in the files config/loader.hpp lists; they and this one are the only files
// that include yaml-cpp: everything else sees plain structs.
#include "config/config.hpp"

#include <algorithm>
#include <cstdio>
#include <system_error>

#include "config/loader.hpp"

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

namespace detail {

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
  auto f = mapping(e, {"max_hold", "poll", "lease", "verify", "auto_split", "auto_merge", "auto_split_window",
                       "auto_split_interval"});
  if (!f) return;
  Moves& m = cfg_.moves;
  if (const Entry* v = f->get("max_hold")) assign(m.max_hold, duration(*v, false));
  if (const Entry* v = f->get("poll")) assign(m.poll, duration(*v, false));
  if (const Entry* v = f->get("lease")) assign(m.lease, duration(*v, false));
  if (const Entry* v = f->get("verify")) assign(m.verify, boolean(*v));
  if (m.lease <= m.poll * 2) error(e.line(), "moves.lease must be more than twice moves.poll");
  for (const char* key : {"auto_split", "auto_merge"})
    if (const Entry* v = f->get(key)) {
      using A = Moves::AutoSplit;
      A& mode = key == std::string_view("auto_split") ? m.auto_split : m.auto_merge;
      assign(mode, choice<A>(*v, {{"off", A::off}, {"advise", A::advise}, {"on", A::on}}));
      if (mode != A::off && !cfg_.has_catalog())
        error(*v, std::string("moves.") + key + " changes partitions through the catalog: set catalog: too");
    }
  if (const Entry* v = f->get("auto_split_window")) assign(m.auto_split_window, duration(*v, false));
  if (const Entry* v = f->get("auto_split_interval")) assign(m.auto_split_interval, duration(*v, false));
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
                          "max_prepared_statements", "indexes", "auth_query"});
  } else {
    error(whole.line(), "the configuration must be a mapping of keys, got " + describe(root));
  }
  if (top) {
    load_shards(*top);  // first: everything else refers to shards by name
    load_users(*top);
    load_frontend(*top);
    load_auth_query(*top);
    if (const Entry* e = top->get("scatter")) load_scatter(*e);
    if (const Entry* e = top->get("timeouts")) load_timeouts(*e);
    if (const Entry* e = top->get("catalog")) load_catalog(*e);
    if (const Entry* e = top->get("moves")) load_moves(*e);
    load_distributions(*top);
    load_reference_tables(*top);
    if (const Entry* e = top->get("unlisted_tables")) load_unlisted_tables(*e);
    if (const Entry* e = top->get("indexes")) load_indexes(*e);
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

}  // namespace detail

using namespace detail;

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
