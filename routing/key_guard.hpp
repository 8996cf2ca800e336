// UPDATE ... SET key = <value> on shards other than the value's own (Route::key_guard):
// there the statement must change nothing, since a row it matched would have to move to
// the value's shard. Such a shard runs the same UPDATE with its WHERE extended so that a
// row it matches raises an error (an int4 cast of a text holding kKeyGuardMarker and the
// row's ctid) instead of being updated. The added condition is evaluated only for rows
// the original WHERE matches (it sits in a CASE on that WHERE), and the original WHERE
// stays an AND arm of its own, so the shard's indexes serve it as before.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace splitpoint::routing {

inline constexpr std::string_view kKeyGuardMarker = "splitpoint-key-guard";

// `packed`: the protobuf parse tree of a text holding one UPDATE. nullopt if it cannot
// be rewritten (not a lone UPDATE, WHERE CURRENT OF, the deparser failed).
std::optional<std::string> guarded_update(const std::string& packed);

}  // namespace splitpoint::routing
