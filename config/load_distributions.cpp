// `distributions:` (partitioning, placement, ranges, lists, tables), `reference_tables`
// and `unlisted_tables`: every table owned once; `indexes:`, each with a distribution of
// its own for its entries (config/loader.hpp).
#include "config/loader.hpp"
#include "config/indexes.hpp"

#include <algorithm>

namespace splitpoint::config::detail {

void Loader::load_distributions(const Fields& top) {
  const Entry* e = top.get("distributions");
  if (!e) return;
  if (auto items = sequence(*e))
    for (const Entry& item : *items) load_distribution(item);
}

void Loader::load_distribution(const Entry& item) {
  auto f =
      mapping(item, {"name", "method", "partitions", "placement", "ranges", "lists", "default", "tables", "salt"});
  if (!f) return;
  Distribution d;
  d.line = item.key_line;
  if (const Entry* n = required(*f, item.path, "name")) {
    if (auto v = name(*n)) {
      if (auto [pos, fresh] = distribution_names_.emplace(*v, n->line()); !fresh)
        error(*n, "duplicate distribution name " + quote(*v) + " (first at line " +
                      std::to_string(pos->second) + ")");
      d.name = *v;
    }
  }
  load_partitioning(d, *f, item.path);
  if (const Entry* t = f->get("tables")) load_tables(d, *t);
  if (const Entry* s = f->get("salt")) load_salt(d, *s);
  cfg_.distributions.push_back(std::move(d));
}

// `salt: { column, buckets, keys }` (SPEC §13): hash distributions only; the salt column
// is one name for every table of the distribution, never a table's key.
void Loader::load_salt(Distribution& d, const Entry& e) {
  auto f = mapping(e, {"column", "buckets", "keys"});
  if (!f) return;
  if (d.method != Method::hash) {
    error(e.key_line, e.path + ": salting is built for hash distributions only, not for method: " +
                          std::string(d.method == Method::range ? "range" : "list"));
    return;
  }
  Salt salt;
  salt.line = e.key_line;
  if (const Entry* c = required(*f, e.path, "column")) assign(salt.column, name(*c));
  if (const Entry* b = required(*f, e.path, "buckets")) assign(salt.buckets, integer(*b, 1, kMaxSaltBuckets));
  if (const Entry* k = f->get("keys"))
    if (auto values = sequence(*k))
      for (const Entry& v : *values)
        if (auto s = text(v)) salt.keys.push_back(*s);
  for (const auto& [table, key] : d.tables)
    if (!salt.column.empty() && key == salt.column) {
      error(e.key_line, e.path + ".column: " + quote(salt.column) + " is the key of table " + quote(table) +
                            "; the salt column must be another column");
      break;
    }
  d.salt = std::move(salt);
}

// The method and the keys that belong to it: how keys map to logical partitions, and
// those to shards.
void Loader::load_partitioning(Distribution& d, const Fields& f, const std::string& path) {
  if (const Entry* m = f.get("method")) {
    auto method =
        choice<Method>(*m, {{"hash", Method::hash}, {"range", Method::range}, {"list", Method::list}});
    if (!method) return;  // the other keys cannot be judged without it
    d.method = *method;
  }
  static constexpr std::pair<std::string_view, Method> kOnly[] = {{"partitions", Method::hash},
                                                                  {"placement", Method::hash},
                                                                  {"ranges", Method::range},
                                                                  {"lists", Method::list},
                                                                  {"default", Method::list}};
  static constexpr std::string_view kMethodName[] = {"hash", "range", "list"};
  for (const auto& [key, only] : kOnly)
    if (const Entry* e = f.get(key); e && only != d.method)
      error(e->key_line, e->path + ": only allowed with method: " + std::string(kMethodName[int(only)]));
  if (d.method == Method::hash) {
    if (const Entry* p = required(f, path, "partitions"))
      assign(d.partitions, integer(*p, 1, kMaxPartitions));
    if (const Entry* p = f.get("placement")) {
      load_placement(d, *p);
    } else if (d.partitions > 0 && !cfg_.shards.empty()) {
      // Shard i of N gets [floor(i*P/N), floor((i+1)*P/N)).
      const std::size_t n = cfg_.shards.size(), parts = static_cast<std::size_t>(d.partitions);
      d.placement.resize(parts);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t p = i * parts / n; p < (i + 1) * parts / n; ++p) d.placement[p] = i;
    }
  } else if (d.method == Method::range) {
    if (const Entry* r = required(f, path, "ranges")) load_ranges(d, *r);
  } else {
    if (const Entry* l = required(f, path, "lists")) load_lists(d, *l);
    if (const Entry* def = f.get("default")) d.default_shard = shard_ref(*def);
  }
}

void Loader::load_placement(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  const std::size_t errors_before = errors_.size();
  const std::int64_t parts = d.partitions;  // 0 when invalid: check the syntax only
  std::vector<std::optional<std::size_t>> owner(static_cast<std::size_t>(parts));
  for (const auto& [shard_name, entry] : f->entries) {
    auto shard = shard_named(shard_name, entry.key_line, entry.path);
    std::vector<Entry> specs{entry};
    if (entry.value.IsSequence()) specs = sequence(entry).value_or(std::vector<Entry>{});
    for (const Entry& spec : specs) {
      auto s = text(spec);
      if (!s) continue;
      auto span = parse_partition_span(*s);
      if (!span) {
        error(spec, "expected a partition number or a range such as 0-31, got " + quote(*s));
        continue;
      }
      auto [first, last] = *span;
      if (first > last) {
        error(spec, "range " + quote(*s) + " is reversed");
        continue;
      }
      if (parts == 0 || !shard) continue;
      if (last >= parts) {
        error(spec, "partition " + std::to_string(last) + " is out of range: partitions are 0-" +
                        std::to_string(parts - 1));
        // The part in range is still placed, so an overlap in it is reported too.
        if (first >= parts) continue;
        last = parts - 1;
      }
      std::vector<std::int64_t> clash;
      std::string owners;
      for (std::int64_t p = first; p <= last; ++p) {
        auto& o = owner[static_cast<std::size_t>(p)];
        if (!o) {
          o = *shard;
          continue;
        }
        clash.push_back(p);
        if (owners.find(quote(cfg_.shards[*o].name)) == std::string::npos)
          owners += (owners.empty() ? "" : ", ") + quote(cfg_.shards[*o].name);
      }
      if (!clash.empty()) error(spec, partitions_are(clash) + " already placed on " + owners);
    }
  }
  if (parts == 0 || errors_.size() != errors_before) return;  // a gap would only echo them
  std::vector<std::int64_t> missing;
  for (std::int64_t p = 0; p < parts; ++p)
    if (!owner[static_cast<std::size_t>(p)]) missing.push_back(p);
  if (!missing.empty()) {
    error(e.key_line, e.path + ": " + partitions_are(missing) + " not placed on any shard");
    return;
  }
  d.placement.clear();
  for (const auto& o : owner) d.placement.push_back(*o);
}

void Loader::load_ranges(Distribution& d, const Entry& e) {
  auto items = sequence(e);
  if (!items) return;
  if (items->empty()) error(e.key_line, e.path + ": at least one range is required");
  struct Bound {
    std::string value;
    int line;
    std::string path;
  };
  std::vector<Bound> bounds;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const Entry& item = (*items)[i];
    auto f = mapping(item, {"upto", "shard"});
    if (!f) continue;
    Range r;
    if (const Entry* s = required(*f, item.path, "shard")) assign(r.shard, shard_ref(*s));
    if (const Entry* u = f->get("upto")) {
      r.upto = text(*u);
      if (r.upto) bounds.push_back({*r.upto, u->line(), u->path});
    } else if (i + 1 != items->size()) {
      error(f->line, item.path + ": only the last range may omit upto");
    }
    d.ranges.push_back(std::move(r));
  }
  // Integers compare as numbers; anything else (ISO dates, timestamps, text) as strings.
  const bool numeric =
      std::all_of(bounds.begin(), bounds.end(), [](const Bound& b) { return is_integer(b.value); });
  for (std::size_t i = 1; i < bounds.size(); ++i) {
    const Bound &prev = bounds[i - 1], &cur = bounds[i];
    const int c = numeric ? compare_integers(prev.value, cur.value) : prev.value.compare(cur.value);
    if (c >= 0)
      error(cur.line, cur.path + ": ranges must be in increasing order of upto: " + quote(cur.value) +
                          " is not above " + quote(prev.value) + " (line " + std::to_string(prev.line) + ")");
  }
}

void Loader::load_lists(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  if (f->entries.empty()) error(e.key_line, e.path + ": at least one shard with its values is required");
  std::map<std::string, std::pair<std::string, int>, std::less<>> seen;  // value -> (shard, line)
  for (const auto& [shard_name, entry] : f->entries) {
    ListPartition lp;
    lp.shard = shard_named(shard_name, entry.key_line, entry.path).value_or(0);
    auto values = sequence(entry);
    if (!values) continue;
    for (const Entry& v : *values) {
      auto s = text(v);
      if (!s) continue;
      if (auto [pos, fresh] = seen.emplace(*s, std::pair{shard_name, v.line()}); !fresh) {
        error(v, "value " + quote(*s) + " is already listed for shard " + quote(pos->second.first) +
                     " (line " + std::to_string(pos->second.second) + ")");
        continue;
      }
      lp.values.push_back(*s);
    }
    d.lists.push_back(std::move(lp));
  }
}

void Loader::load_tables(Distribution& d, const Entry& e) {
  auto f = mapping(e, {});
  if (!f) return;
  for (const auto& [table, entry] : f->entries) {
    auto column = text(entry);
    if (table.empty()) {
      error(entry.key_line, entry.path + ": a table name must not be empty");
      continue;
    }
    claim_table(table, "distribution " + quote(d.name), entry.key_line, entry.path);
    if (column) d.tables.emplace_back(table, *column);
  }
}

void Loader::claim_table(const std::string& table, const std::string& owner, int line,
                         const std::string& path) {
  auto [pos, fresh] = table_owner_.emplace(table, std::pair{owner, line});
  if (!fresh)
    error(line, path + ": table " + quote(table) + " is already in " + pos->second.first + " (line " +
                    std::to_string(pos->second.second) + ")");
}

void Loader::load_reference_tables(const Fields& top) {
  const Entry* e = top.get("reference_tables");
  if (!e) return;
  auto items = sequence(*e);
  if (!items) return;
  for (const Entry& item : *items) {
    auto table = text(item);
    if (!table) continue;
    claim_table(*table, "reference_tables", item.line(), item.path);
    cfg_.reference_tables.push_back(*table);
  }
}

void Loader::load_unlisted_tables(const Entry& e) {
  auto s = text(e);
  if (!s) return;
  if (*s == "reference") {
    cfg_.unlisted_tables = UnlistedPolicy::reference;
  } else if (*s == "reject") {
    cfg_.unlisted_tables = UnlistedPolicy::reject;
  } else if (s->starts_with("shard:")) {
    cfg_.unlisted_tables = UnlistedPolicy::shard;
    cfg_.unlisted_shard = shard_named(trim(std::string_view(*s).substr(6)), e.line(), e.path).value_or(0);
  } else {
    error(e, "expected reference, reject or shard:<name>, got " + quote(*s));
  }
}

void Loader::load_indexes(const Entry& e) {
  if (auto items = sequence(e))
    for (const Entry& item : *items) load_index(item);
  // An index entry lives on the shard of its value, a row on the shard of its key: one
  // transaction writes both.
  if (!cfg_.indexes.empty() && cfg_.cross_shard_writes == CrossShardWrites::refuse)
    error(e, "global indexes need transactions.cross_shard_writes: two_phase (an entry and its row are on different shards)");
}

// { table, columns: [...], unique, name }: the table must be a sharded one; the index's
// entries get a hash distribution of their own, as many partitions as the table's (8 for
// a range or list table), spread over the shards as a hash distribution's default.
void Loader::load_index(const Entry& item) {
  auto f = mapping(item, {"table", "columns", "unique", "name"});
  if (!f) return;
  if (cfg_.indexes.size() == kMaxIndexes) {
    error(item.key_line, item.path + ": at most " + std::to_string(kMaxIndexes) + " indexes");
    return;
  }
  Index ix;
  ix.line = item.key_line;
  const Distribution* owner = nullptr;
  if (const Entry* t = required(*f, item.path, "table"))
    if (auto table = text(*t)) {
      ix.table = *table;
      for (const Distribution& d : cfg_.distributions)
        for (const auto& [name, key] : d.tables)
          if (name == *table) {
            owner = &d;
            ix.key_column = key;
          }
      if (!owner) error(*t, quote(*table) + " is not a table of any distribution: only a sharded table needs a global index");
    }
  if (const Entry* c = required(*f, item.path, "columns")) {
    std::vector<Entry> cols{*c};
    if (c->value.IsSequence()) cols = sequence(*c).value_or(std::vector<Entry>{});
    for (const Entry& col : cols) {
      auto v = text(col);
      if (!v) continue;
      if (!plain_identifier(*v, 63)) error(col, quote(*v) + ": a column name as PostgreSQL stores it (lower case, unquoted)");
      else if (*v == ix.key_column) error(col, quote(*v) + " is the table's distribution key: its own index finds it");
      else if (std::find(ix.columns.begin(), ix.columns.end(), *v) != ix.columns.end()) error(col, quote(*v) + " twice");
      else ix.columns.push_back(*v);
    }
    if (cols.empty()) error(*c, "at least one column");
  }
  if (const Entry* u = f->get("unique")) assign(ix.unique, boolean(*u));
  if (const Entry* n = f->get("name")) {
    if (auto v = text(*n)) {
      if (!plain_identifier(*v, 55)) error(*n, quote(*v) + ": lower-case letters, digits and _, at most 55 bytes");
      ix.name = *v;
    }
  } else if (!ix.table.empty() && !ix.columns.empty()) {
    ix.name = default_index_name(ix.table, ix.columns, ix.unique);
  }
  for (const Index& other : cfg_.indexes)
    if (other.name == ix.name) {
      error(item.key_line, item.path + ": index name " + quote(ix.name) + " twice (first at line " + std::to_string(other.line) + ")");
      return;
    }
  if (!owner || ix.columns.empty() || ix.name.empty()) return;
  Distribution d = entries_distribution(ix, *owner, cfg_.shards.size());
  claim_table(ix.entries_table(), "indexes", item.key_line, item.path);
  ix.distribution = cfg_.distributions.size();
  cfg_.distributions.push_back(std::move(d));
  cfg_.indexes.push_back(std::move(ix));
}

}  // namespace splitpoint::config::detail
