// Key values in PostgreSQL's text form, from literals and Bind parameters: text and
// binary formats, scalars and arrays (for `key = ANY($1)`).
// https://www.postgresql.org/docs/15/arrays.html#ARRAYS-IO (text arrays)
// https://www.postgresql.org/docs/15/protocol-message-formats.html (Bind)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "routing/topology.hpp"

namespace splitpoint::routing {

using KeyValues = std::vector<std::optional<std::string>>;  // nullopt = NULL

// Elements of an array literal such as '{1,2,"a b",NULL}' (nested arrays flatten).
bool parse_text_array(std::string_view text, KeyValues& out);

// A binary-format value of type `type_oid` (0 = unspecified: inferred from the
// column's type and the length) as text. False if it cannot be read.
bool decode_binary(std::uint32_t type_oid, std::string_view bytes, const ColumnType& column, std::string& out);

// A binary-format array (array_send): its elements as text.
bool decode_binary_array(std::string_view bytes, const ColumnType& column, KeyValues& out);

}  // namespace splitpoint::routing
