// Rows a shard holds but does not own (SPEC §9): while a partition moves, its rows are
// on both the source and the target; after the cutover the source keeps them until
// cleanup. A statement that is not confined to partitions the shard owns reads the
// distribution's tables through views that leave those rows out (server/cluster/mover.cpp
// creates them, one schema per move).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace splitpoint::routing {

// `views`: table name as Topology::table_name gives it -> the schema of its view.
// Returns `sql` with every reference to such a table (unqualified or in public)
// pointed at the view, and `COPY table TO` turned into `COPY (SELECT ...) TO`;
// nullopt when the text names none of them or does not parse.
std::optional<std::string> read_through_views(std::string_view sql,
                                              const std::map<std::string, std::string, std::less<>>& views,
                                              bool standard_strings = true);

}  // namespace splitpoint::routing
