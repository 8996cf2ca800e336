#include "server/session/user_types.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "protocol/buffer.hpp"
#include "server/net/scatter_io.hpp"

namespace splitpoint::server::user_types {

namespace {

// Each user type of the database as "oid schema.name" lines (temporary schemas left out:
// each session's own).
constexpr std::string_view kTypesQuery =
    "SELECT string_agg(t.oid::text || ' ' || t.typnamespace::regnamespace::text || '.' || quote_ident(t.typname), "
    "E'\\n') FROM pg_catalog.pg_type t WHERE t.oid >= 16384 "
    "AND t.typnamespace::regnamespace::text !~ '^pg_(toast_)?temp_'";

struct Map {
  std::unordered_map<std::int32_t, std::int32_t> oids;  // shard's -> catalog shard's (0: it has none)
  std::uint64_t generation = 0;                          // note_ddl()'s count when learnt
  bool stale = true;
};

std::atomic<std::uint64_t> ddl_generation{1};
std::mutex maps_mutex;
std::map<std::pair<std::string, std::string>, Map> maps;

// name -> OID from kTypesQuery's value.
std::unordered_map<std::string, std::int32_t> parse_types(const std::string& text) {
  std::unordered_map<std::string, std::int32_t> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (auto space = line.find(' '); space != std::string_view::npos)
      out.emplace(std::string(line.substr(space + 1)), static_cast<std::int32_t>(std::stoul(std::string(line.substr(0, space)))));
    pos = end + 1;
  }
  return out;
}

using protocol::read_i32;

void write_i32(char* p, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  p[0] = static_cast<char>(u >> 24);
  p[1] = static_cast<char>(u >> 16);
  p[2] = static_cast<char>(u >> 8);
  p[3] = static_cast<char>(u);
}

// Calls f(offset) for the offset of each type OID in a RowDescription or
// ParameterDescription body; false (after some calls, maybe) when it is malformed.
template <class F>
bool each_type_offset(char type, std::string_view body, F f) {
  if (body.size() < 2) return false;
  const std::size_t n = (std::size_t(std::uint8_t(body[0])) << 8) | std::uint8_t(body[1]);
  std::size_t pos = 2;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t at = pos;
    if (type == 't') {
      pos += 4;
    } else {
      const std::size_t nul = body.find('\0', pos);
      if (nul == std::string_view::npos) return false;
      at = nul + 1 + 6;  // after the name, the table's OID and the column number
      pos = nul + 1 + 18;
    }
    if (pos > body.size()) return false;
    f(at);
  }
  return true;
}

}  // namespace

void note_ddl() { ddl_generation.fetch_add(1, std::memory_order_relaxed); }

bool fresh(const std::string& shard, const std::string& catalog) {
  std::lock_guard lock(maps_mutex);
  auto it = maps.find({shard, catalog});
  return it != maps.end() && !it->second.stale &&
         it->second.generation == ddl_generation.load(std::memory_order_relaxed);
}

awaitable<void> learn(const std::string& shard, Backend& on_shard, const std::string& catalog, Backend& on_catalog,
                      const protocol::FrameLimits& limits) {
  const std::uint64_t generation = ddl_generation.load(std::memory_order_relaxed);
  auto here = co_await first_row_on(on_shard, kTypesQuery, limits);
  if (!here || here->size() != 1) co_return;
  auto there = co_await first_row_on(on_catalog, kTypesQuery, limits);
  if (!there || there->size() != 1) co_return;
  auto names = parse_types((*there)[0].value_or(""));
  Map map;
  for (auto& [name, oid] : parse_types((*here)[0].value_or(""))) {
    auto it = names.find(name);
    map.oids.emplace(oid, it != names.end() ? it->second : 0);
  }
  map.generation = generation;
  map.stale = false;
  std::lock_guard lock(maps_mutex);
  maps[{shard, catalog}] = std::move(map);
}

bool names_user_type(char type, std::string_view body) {
  if (type != 'T' && type != 't') return false;
  bool found = false;
  each_type_offset(type, body, [&](std::size_t at) { found = found || is_user_type(read_i32(body.data() + at)); });
  return found;
}

void rewrite(const std::string& shard, const std::string& catalog, char type, std::string_view body, std::string& out) {
  const std::size_t start = out.size() + 5;  // (the body's first byte: after the type and the length)
  protocol::Writer message(out, type);
  message.bytes(body);
  message.finish();
  std::lock_guard lock(maps_mutex);
  Map& map = maps[{shard, catalog}];
  each_type_offset(type, body, [&](std::size_t at) {
    const std::int32_t oid = read_i32(body.data() + at);
    if (!is_user_type(oid)) return;
    if (auto it = map.oids.find(oid); it == map.oids.end()) map.stale = true;  // (made since)
    else if (it->second != 0) write_i32(out.data() + start + at, it->second);
  });
}

}  // namespace splitpoint::server::user_types
