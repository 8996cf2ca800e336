// A multi-row INSERT ... VALUES whose rows belong to several shards becomes one
// INSERT per shard holding only that shard's rows (SPEC §3). Parameters keep their
// numbers. An INSERT without its key gets the keys the proxy generated. Both are done
// in the statement's own text when it has the plain shape (a parse and a deparse cost
// more than the rest of the statement's way through the proxy), else by editing the
// parse tree and deparsing it with libpg_query.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splitpoint::routing {

// `packed`: the statement's protobuf parse tree; `row_shards[i]`: the shard of row i.
// One (shard, sql) per distinct shard, in shard order; nullopt if it cannot be done.
std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert(
    const std::string& packed, const std::vector<std::size_t>& row_shards);

// The same from the statement's text (read with standard_conforming_strings on), for a
// plan cached by shape, whose tree holds another text's literals: the VALUES rows cut
// out of the text (routing/text_scan.hpp's normalised text, literals as written), no
// parse. nullopt if the text is not a plain `INSERT INTO t [(columns)] VALUES ...`.
std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert_text(
    std::string_view sql, const std::vector<std::size_t>& row_shards);

struct KeyRequest;

// INSERT ... SELECT whose rows the proxy reads and inserts itself (SPEC §3): the
// SELECT as a statement of its own, and the INSERT with kRowsMarker where a VALUES list
// of those rows goes (every other clause — column list, OVERRIDING, ON CONFLICT,
// RETURNING — as written).
inline constexpr std::string_view kRowsMarker = "VALUES ($2147483647)";
struct InsertSelectParts {
  std::string select;
  std::string insert;
  bool params_outside_select = false;  // ON CONFLICT / RETURNING use $n
};
std::optional<InsertSelectParts> insert_select_parts(std::string_view sql, bool standard_strings);

// `sql` (one INSERT ... VALUES, or DEFAULT VALUES) with a key for each row of `request.rows`: the key
// column appended to the column list, or the rows' DEFAULT replaced; with OVERRIDING
// SYSTEM VALUE for a GENERATED ALWAYS identity key. The keys are `keys`, as string
// literals (PostgreSQL reads them as the column's type), or with `first_param` > 0
// parameters $first_param, $first_param+1, ... (the same text for every execution of a
// prepared statement). nullopt if it cannot be done.
std::optional<std::string> insert_with_keys(std::string_view sql, bool standard_strings, const KeyRequest& request,
                                            const std::vector<std::string>& keys, bool overriding_system_value,
                                            int first_param = 0);

// `sql` (one COPY ... FROM with a column list) with `columns` appended to its column
// list, for the values the proxy adds to each row (CopyIn). nullopt if it cannot be done.
std::optional<std::string> copy_with_columns(std::string_view sql, bool standard_strings,
                                             const std::vector<std::string>& columns);

}  // namespace splitpoint::routing
