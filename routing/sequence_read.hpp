// `SELECT lastval()` or `SELECT currval(<argument>)` alone in its text: how drivers ask for
// the id an INSERT got (PDO's lastInsertId, Doctrine DBAL, Perl DBI's last_insert_id).
// When the proxy drew that id itself (SPEC §3, server/session/keys.cpp), no shard's
// session has it; the proxy answers such a read from the values it drew.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace splitpoint::routing {

struct SequenceRead {
  bool lastval = false;  // else currval
  std::string argument;  // currval's argument as written (a literal, $n, any expression)
  std::string column;    // the result column: the alias as written, else the function's name
};

// nullopt for any other text (read with standard_conforming_strings on).
std::optional<SequenceRead> sequence_read(std::string_view sql);

}  // namespace splitpoint::routing
