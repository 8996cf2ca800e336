// A multi-row INSERT ... VALUES whose rows belong to several shards becomes one
// INSERT per shard holding only that shard's rows (SPEC §3), by editing the parse
// tree's VALUES list and deparsing it with libpg_query. Parameters keep their numbers.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace splitpoint::routing {

// `packed`: the statement's protobuf parse tree; `row_shards[i]`: the shard of row i.
// One (shard, sql) per distinct shard, in shard order; nullopt if it cannot be done.
std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert(
    const std::string& packed, const std::vector<std::size_t>& row_shards);

}  // namespace splitpoint::routing
