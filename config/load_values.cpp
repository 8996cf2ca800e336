// The configuration's structure (mappings, lists, required keys) and its scalar values,
// each checked with its line (config/loader.hpp).
#include "config/loader.hpp"

namespace splitpoint::config::detail {

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

}  // namespace splitpoint::config::detail
