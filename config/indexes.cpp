// Global indexes added to a configuration (config/indexes.hpp).
#include "config/indexes.hpp"

#include <algorithm>

namespace splitpoint::config {

bool plain_identifier(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::string default_index_name(const std::string& table, const std::vector<std::string>& columns, bool unique) {
  std::string base = table.substr(table.rfind('.') + 1);
  for (const auto& c : columns) base += "_" + c;
  return base.substr(0, 55 - 4) + (unique ? "_key" : "_idx");
}

Distribution entries_distribution(const Index& ix, const Distribution& owner, std::size_t shards) {
  Distribution d;
  d.name = "splitpoint." + ix.name;
  d.line = ix.line;
  d.method = Method::hash;
  d.partitions = owner.method == Method::hash ? owner.partitions : 8;
  const std::size_t parts = static_cast<std::size_t>(d.partitions);
  d.placement.resize(parts);
  for (std::size_t i = 0; i < shards; ++i)
    for (std::size_t p = i * parts / shards; p < (i + 1) * parts / shards; ++p) d.placement[p] = i;
  d.tables.emplace_back(ix.entries_table(), ix.columns.front());
  return d;
}

std::string add_index(Config& cfg, Index ix) {
  if (cfg.cross_shard_writes == CrossShardWrites::refuse)
    return "global indexes need transactions.cross_shard_writes: two_phase";
  if (cfg.indexes.size() >= kMaxIndexes) return "at most " + std::to_string(kMaxIndexes) + " indexes";
  const Distribution* owner = nullptr;
  for (const Distribution& d : cfg.distributions)
    for (const auto& [name, key] : d.tables)
      if (name == ix.table && !d.name.starts_with("splitpoint.")) {
        owner = &d;
        ix.key_column = key;
      }
  if (!owner) return "\"" + ix.table + "\" is not a table of any distribution: only a sharded table needs a global index";
  if (ix.columns.empty()) return "at least one column";
  for (std::size_t i = 0; i < ix.columns.size(); ++i) {
    const std::string& c = ix.columns[i];
    if (!plain_identifier(c, 63)) return "\"" + c + "\": a column name as PostgreSQL stores it (lower case, unquoted)";
    if (c == ix.key_column) return "\"" + c + "\" is the table's distribution key: its own index finds it";
    if (std::find(ix.columns.begin(), ix.columns.begin() + static_cast<std::ptrdiff_t>(i), c) !=
        ix.columns.begin() + static_cast<std::ptrdiff_t>(i))
      return "column \"" + c + "\" twice";
  }
  if (ix.name.empty()) ix.name = default_index_name(ix.table, ix.columns, ix.unique);
  if (!plain_identifier(ix.name, 55)) return "\"" + ix.name + "\": lower-case letters, digits and _, at most 55 bytes";
  for (const Index& other : cfg.indexes)
    if (other.name == ix.name) return "index \"" + ix.name + "\" already exists";
  Distribution d = entries_distribution(ix, *owner, cfg.shards.size());
  ix.distribution = cfg.distributions.size();
  for (std::size_t i = 0; i < cfg.distributions.size(); ++i)
    for (const auto& t : cfg.distributions[i].tables)
      if (t.first == ix.entries_table()) {
        // Left by a DROP INDEX of that name (the runtime keeps distributions' numbers):
        // the same entries again.
        if (cfg.distributions[i].name != d.name || t.second != ix.columns.front())
          return "table \"" + ix.entries_table() + "\" is already a table of a distribution";
        ix.distribution = i;
      }
  if (ix.distribution == cfg.distributions.size()) cfg.distributions.push_back(std::move(d));
  cfg.indexes.push_back(std::move(ix));
  return {};
}

}  // namespace splitpoint::config
