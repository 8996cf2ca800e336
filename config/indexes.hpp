// Global indexes (SPEC §12) added to a configuration: from the file's `indexes:`
// (load_distributions.cpp) and from the catalog, made online with CREATE INDEX on the
// admin console (server/cluster/catalog_admin.cpp).
#pragma once

#include <string>

#include "config/config.hpp"

namespace splitpoint::config {

// A name as PostgreSQL stores it unquoted: lower-case letters, digits and _, not
// starting with a digit, at most `max` bytes.
bool plain_identifier(std::string_view s, std::size_t max);

// PostgreSQL's own name for UNIQUE (a, b) / CREATE INDEX ON t (a, b):
// <table>_<columns>_key / _idx.
std::string default_index_name(const std::string& table, const std::vector<std::string>& columns, bool unique);

// The entries' own hash distribution of `ix` (on a table of `owner`): as many partitions
// as the table's (8 for a range or list one), spread over `shards` shards as a hash
// distribution's default, the entries distributed by the first indexed column.
Distribution entries_distribution(const Index& ix, const Distribution& owner, std::size_t shards);

// `ix` (name, table, columns, unique) added to `cfg` with its key column and its
// entries' distribution; empty, or why it cannot be (an unknown table, a column that is
// the key, a name taken, ...).
std::string add_index(Config& cfg, Index ix);

}  // namespace splitpoint::config
