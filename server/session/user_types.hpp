#pragma once
// Types made by CREATE TYPE (an enum, a domain, a composite, a table's row type: OID 16384
// and above) have each shard's own OID. A client's catalog reads go to the catalog shard
// (Session::catalog_shard), so a RowDescription or ParameterDescription from another shard
// is given the catalog shard's OIDs of those types, matched by schema and name
// (docs/compatibility.md, "Tools"). The map is process-wide, per (shard, catalog shard),
// learnt when a session attaches to a shard and it is not known or stale: after a DDL
// statement through the proxy, or after an answer named a type it did not know.

#include <cstdint>
#include <string>
#include <string_view>

#include "server/net/asio.hpp"
#include "server/net/backend.hpp"

namespace splitpoint::server::user_types {

constexpr std::uint32_t kFirstNormalObjectId = 16384;
inline bool is_user_type(std::int32_t oid) { return static_cast<std::uint32_t>(oid) >= kFirstNormalObjectId; }

// A DDL statement went through the proxy: every map is learnt again before its next use.
void note_ddl();
// Whether the map of `shard` to `catalog` (shard names) is known and not stale.
bool fresh(const std::string& shard, const std::string& catalog);
// Learns it: the user types of each side (one statement on each connection, which must be
// idle); left stale when either fails.
awaitable<void> learn(const std::string& shard, Backend& on_shard, const std::string& catalog, Backend& on_catalog,
                      const protocol::FrameLimits& limits);
// Whether a RowDescription ('T') or ParameterDescription ('t') body names a user type:
// the cheap test before rewrite().
bool names_user_type(char type, std::string_view body);
// Appends the message (type and body) with the catalog shard's OIDs to `out`; a user type
// the map does not know stays and makes the map stale (one the catalog shard did not have
// when it was learnt stays too, and does not).
void rewrite(const std::string& shard, const std::string& catalog, char type, std::string_view body, std::string& out);

}  // namespace splitpoint::server::user_types
