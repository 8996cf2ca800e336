#include "routing/evaluate.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>

#include "routing/insert_split.hpp"
#include "routing/key_values.hpp"

namespace splitpoint::routing {

namespace {

Route error_route(const Plan& plan, std::string sqlstate, std::string message) {
  Route r;
  r.kind = RouteKind::error;
  r.cls = plan.fixed.cls;
  r.sqlstate = std::move(sqlstate);
  r.message = std::move(message);
  return r;
}

// A text of several statements that cannot run whole on the shards it reaches (the
// session then runs it statement by statement: server/session/texts.cpp).
Route apart_error(const Plan& plan) {
  return error_route(plan, "SPC01",
                     "cannot be answered exactly across shards: the statements of this text reach different shards "
                     "and run as one text; send them one by one");
}

std::string quoted(const std::optional<std::string>& v) { return v ? "'" + *v + "'" : "NULL"; }

// An evaluation's working sets, kept from one evaluation to the next on the thread:
// routing a cached plan runs for every statement, and these would otherwise be
// allocated and freed each time. (One evaluation at a time per thread: evaluate()
// does not call itself; a nested one would get a scratch of its own.)
struct Scratch {
  std::vector<PartSet> parts;  // per occurrence
  std::vector<std::optional<ColumnType>> types;
  PartSet leaf;                // one condition's partitions
  KeyValues values;            // one condition's values
  std::vector<PartSet> dists;  // per distribution (finish)
  std::vector<char> dist_used;
  bool busy = false;
};

class ScratchLease {
 public:
  ScratchLease() {
    thread_local Scratch shared;
    if (shared.busy) {
      own_ = std::make_unique<Scratch>();
      s_ = own_.get();
    } else {
      s_ = &shared;
    }
    s_->busy = true;
  }
  ~ScratchLease() {
    // A statement with a huge IN list does not leave its buffer to the thread.
    if (s_->values.capacity() > 1024) KeyValues().swap(s_->values);
    s_->busy = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() const { return *s_; }

 private:
  std::unique_ptr<Scratch> own_;
  Scratch* s_ = nullptr;
};

// Sizes `v` to n sets that allow every partition, keeping their buffers.
void reset_all(std::vector<PartSet>& v, std::size_t n) {
  v.resize(n);
  for (PartSet& p : v) {
    p.all = true;
    p.parts.clear();
  }
}

class Evaluator {
 public:
  Evaluator(const Plan& plan, const EvalInput& in)
      : plan_(plan), in_(in), parts_((*lease_).parts), types_((*lease_).types) {
    reset_all(parts_, plan.occs.size());
    types_.assign(plan.occs.size(), std::nullopt);
  }

  Route run(bool* needs_exact_plan);

 private:
  Route chosen(bool* needs_exact_plan);
  Route by_keys(bool* needs_exact_plan);
  std::optional<Route> forced_shard();
  Route key_hint(const std::string& value);
  void occurrences();
  void insert_rows(const InsertRows& rows, std::vector<std::size_t>* row_shards);
  void guard_key(Route& r);
  void propagate();
  Route finish();
  void narrow(const KeyCond& k, int occ, PartSet& out);
  void leaf_in(const KeyCond& k, PartSet& out);
  bool salted_partitions(std::size_t d, const ColumnType& type, const std::optional<std::string>& value, PartSet& out);
  bool salt_buckets(const KeyCond& k, std::vector<std::uint32_t>& out);
  const ColumnType* salt_type(int occ);
  std::optional<std::uint32_t> row_bucket(const InsertRows& rows, std::size_t r, const std::string& where);
  PartSet leaf_range(const KeyCond& k);
  const ColumnType* key_type(int occ);
  std::optional<std::size_t> column_index(int occ, const std::string& column);
  bool read(const ValueSource& v, const ColumnType& type, KeyValues& out) const;
  void fail(std::string sqlstate, std::string message);
  void request_keys(const InsertRows& rows, std::size_t position, const std::string& message);
  void request_sequences(const InsertRows& rows);
  bool request_nextvals(const InsertRows& rows, std::optional<std::size_t> item, const std::string& column);
  bool leaves_out_sequence(int occ, const std::vector<std::string>& columns);
  Route pull_route() const;
  void request_values(const InsertRows& rows, const std::string& column, bool omitted, std::size_t position,
                      std::vector<std::size_t> which, const std::string& message, const std::string& sequence = {});
  void note_key(const std::optional<std::string>& v, const ColumnType& type);
  void index_lookup(Route& r);

  const Plan& plan_;
  const EvalInput& in_;
  ScratchLease lease_;
  std::vector<PartSet>& parts_;  // per occurrence
  std::vector<std::optional<ColumnType>>& types_;
  std::vector<std::string> missing_;
  std::optional<Route> error_;
  std::vector<std::string> key_values_;
  std::vector<std::size_t> row_shards_;  // the splittable INSERT's rows
  std::map<std::pair<std::size_t, std::uint32_t>, std::uint32_t> inserted_;  // (distribution, partition) -> rows
  // Salted distributions (config::Salt): the salt column's type per occurrence, and the
  // buckets an AND being narrowed fixes for the occurrence's salt column.
  std::vector<std::optional<ColumnType>> salt_types_;
  std::optional<std::vector<std::uint32_t>> buckets_;
};

const std::string* find_hint(const Hints& hints, std::string_view key) {
  const std::string* found = nullptr;
  for (const auto& [k, v] : hints)
    if (k == key) found = &v;  // the last one wins
  return found;
}

Route Evaluator::run(bool* needs_exact_plan) {
  Route r = chosen(needs_exact_plan);
  for (const auto& [k, v] : in_.hints)
    if (k != "shard" && k != "key") r.hints.emplace_back(k, v);
  r.session_commands = plan_.session_commands;
  r.copy_from = plan_.copy_from;
  r.pins_session = plan_.pins_session;
  r.reads = r.kind == RouteKind::error ? Route::Reads::writes : plan_.reads;
  // A catalog read the session places (Reads::catalog); one that writes (lo_create & co)
  // goes to the combine shard here, as sequences do.
  if (plan_.reads_catalog && r.kind == RouteKind::any_shard && r.reads == Route::Reads::standby_safe)
    r.reads = Route::Reads::catalog;
  if ((r.reads == Route::Reads::sequences || (plan_.reads_catalog && r.reads == Route::Reads::writes)) &&
      r.kind == RouteKind::any_shard) {
    r.kind = RouteKind::shards;
    r.shards = {in_.topo.config().combine_shard()};
  }
  return r;
}

// (Each branch returns its route straight into the caller's: a Route is large, and
// routing a cached plan runs for every statement.)
Route Evaluator::chosen(bool* needs_exact_plan) {
  if (std::optional<Route> forced = forced_shard()) return std::move(*forced);
  if (const std::string* key = find_hint(in_.hints, "key"); key && plan_.shard_override) return key_hint(*key);
  if (plan_.mode == Plan::Mode::fixed) return plan_.fixed;
  return by_keys(needs_exact_plan);
}

Route Evaluator::by_keys(bool* needs_exact_plan) {
  occurrences();
  // Values of a sequence column the shards would number each from their own copy: the
  // rows go through the proxy, which fills them (request_sequences).
  // (So do rows of a salted table: the bucket of the salt value each row gets is not
  // the shard's to know.)
  if (plan_.insert_select && (leaves_out_sequence(plan_.insert_select->occ, plan_.insert_select->columns) ||
                              in_.topo.salted(plan_.occs[plan_.insert_select->occ].distribution)))
    return pull_route();
  if (plan_.key_assignment) key_type(plan_.key_assignment->occ);  // (its shape, even without a key in the WHERE)
  if (plan_.lookup) key_type(plan_.lookup->occ);  // (the indexed column's type, too)
  Route r = finish();
  if (plan_.lookup && parts_[plan_.lookup->occ].all && r.cls == StatementClass::read && !r.needs_combine &&
      (r.kind == RouteKind::all_shards || (r.kind == RouteKind::shards && r.shards.size() > 1)))
    index_lookup(r);
  if (plan_.key_assignment && (r.kind == RouteKind::shards || r.kind == RouteKind::all_shards)) guard_key(r);
  if (r.kind == RouteKind::shards && r.shards.size() > 1 && !row_shards_.empty()) {
    std::optional<std::vector<std::pair<std::size_t, std::string>>> sql;
    const std::string_view text = in_.text.empty() ? std::string_view(plan_.split_text) : in_.text;
    if (!text.empty()) sql = split_insert_text(text, row_shards_);
    if (!sql && in_.can_split) sql = split_insert(plan_.packed_tree, row_shards_);
    if (sql) {
      r.per_shard_sql = std::move(*sql);
      r.row_shards = row_shards_;
    } else if (!in_.can_split) {
      *needs_exact_plan = true;
    } else {
      r = error_route(plan_, "SPR01", "could not rewrite the INSERT for each shard");
    }
  }
  return r;
}

// `/* splitpoint: shard=NAME */` or SET splitpoint.shard: that shard, whatever the keys.
std::optional<Route> Evaluator::forced_shard() {
  if (!plan_.shard_override) return std::nullopt;
  std::optional<std::size_t> shard = in_.session.shard;
  if (const std::string* name = find_hint(in_.hints, "shard")) {
    shard = in_.topo.find_shard(*name);
    if (!shard) return error_route(plan_, "SPR02", "unknown shard \"" + *name + "\" in splitpoint hint");
  }
  if (!shard) return std::nullopt;
  Route r = plan_.fixed;
  if (r.kind == RouteKind::error) {
    r = Route{};
    r.cls = plan_.fixed.cls;
  }
  r.kind = RouteKind::shards;
  r.shards = {*shard};
  return r;
}

// `/* splitpoint: key=VALUE */`: the shard of that key in the statement's distribution.
Route Evaluator::key_hint(const std::string& value) {
  std::vector<std::size_t> dists;
  for (const Occurrence& o : plan_.occs)
    if (std::find(dists.begin(), dists.end(), o.distribution) == dists.end()) dists.push_back(o.distribution);
  const auto& config = in_.topo.config();
  if (dists.empty() && config.distributions.size() == 1) dists.push_back(0);
  if (dists.size() != 1)
    return error_route(plan_, "SPR01", "the key hint needs a statement on the tables of exactly one distribution");
  const std::size_t d = dists.front();
  if (in_.topo.salted(d))
    return error_route(plan_, "SPR01", "the key hint names no salt bucket: not supported for salted distribution \"" +
                                           config.distributions[d].name + "\"");
  // The key's type, from any of the distribution's tables' shape.
  std::optional<ColumnType> type;
  for (std::size_t i = 0; i < plan_.occs.size() && !type; ++i)
    if (plan_.occs[i].distribution == d)
      if (const ColumnType* t = key_type(static_cast<int>(i))) type = *t;
  if (!type && plan_.occs.empty() && !config.distributions[d].tables.empty()) {
    const auto& [table, key] = config.distributions[d].tables.front();
    const TableShape* shape = in_.shapes ? in_.shapes(table) : nullptr;
    if (shape == nullptr) missing_.push_back(table);
    for (std::size_t c = 0; shape != nullptr && c < shape->columns.size() && c < shape->types.size(); ++c)
      if (shape->columns[c] == key) type = column_type(shape->types[c]);
  }
  Route r = plan_.mode == Plan::Mode::fixed ? plan_.fixed : Route{};
  r.cls = plan_.fixed.cls;
  if (!missing_.empty()) {
    r.kind = RouteKind::need_shapes;
    r.missing_tables = std::move(missing_);
    return r;
  }
  PartitionOf p = type ? in_.topo.partition_of(d, *type, value) : PartitionOf{};
  if (p.status == PartitionOf::Status::no_partition)
    return error_route(plan_, "SPR02", "no partition for key '" + value + "' of distribution \"" + config.distributions[d].name + "\"");
  if (p.status != PartitionOf::Status::ok)
    return error_route(plan_, "SPR01", "cannot read the key hint '" + value + "' as the distribution's key type");
  r.kind = RouteKind::shards;
  r.shards = {in_.topo.shard_of(d, p.partition)};
  r.partitions = {PartitionHit{d, p.partition}};
  r.key_values = {value};
  r.distribution = d;
  return r;
}

void Evaluator::occurrences() {
  for (std::size_t o = 0; o < plan_.occs.size(); ++o)
    for (const KeyCond& k : plan_.conds) narrow(k, static_cast<int>(o), parts_[o]);
  for (const InsertRows& rows : plan_.inserts) insert_rows(rows, rows.splittable ? &row_shards_ : nullptr);
  propagate();
}

// Narrows `out` to what a condition says about one occurrence's key: its leaves on
// other occurrences say nothing (all partitions).
void Evaluator::narrow(const KeyCond& k, int occ, PartSet& out) {
  switch (k.op) {
    case KeyCond::Op::all: return;
    case KeyCond::Op::in:
      if (k.occ == occ && !k.salt) {
        PartSet& leaf = (*lease_).leaf;
        leaf_in(k, leaf);
        out.intersect(leaf);
      }
      return;
    case KeyCond::Op::range:
      if (k.occ == occ) out.intersect(leaf_range(k));
      return;
    case KeyCond::Op::and_: {
      if (!in_.topo.salted(plan_.occs[occ].distribution)) {
        for (const KeyCond& kid : k.kids) narrow(kid, occ, out);
        return;
      }
      // A salted key's leaves under this AND reach only the buckets its salt leaf fixes.
      std::optional<std::vector<std::uint32_t>> outer = buckets_;
      for (const KeyCond& kid : k.kids)
        if (kid.op == KeyCond::Op::in && kid.salt && kid.occ == occ) {
          std::vector<std::uint32_t> b;
          if (salt_buckets(kid, b)) buckets_ = std::move(b);
          break;
        }
      for (const KeyCond& kid : k.kids) narrow(kid, occ, out);
      buckets_ = std::move(outer);
      return;
    }
    case KeyCond::Op::or_: {
      PartSet any = PartSet::none();
      for (const KeyCond& kid : k.kids) {
        PartSet one;
        narrow(kid, occ, one);
        any.unite(one);
        if (any.all) break;
      }
      out.intersect(any);
      return;
    }
  }
}

// The partitions of an `in` condition's values (all of them when one cannot be read).
void Evaluator::leaf_in(const KeyCond& k, PartSet& out) {
  out.all = true;
  out.parts.clear();
  const ColumnType* type = key_type(k.occ);
  if (type == nullptr) return;
  const std::size_t d = plan_.occs[k.occ].distribution;
  out.all = false;
  KeyValues& values = (*lease_).values;
  for (const ValueSource& v : k.values) {
    values.clear();
    if (!read(v, *type, values)) {
      out.all = true;
      return;
    }
    for (const auto& value : values) {
      if (!value && !k.null_matches) continue;  // `key = NULL` matches nothing
      if (in_.topo.salted(d)) {
        if (!salted_partitions(d, *type, value, out)) {
          out.all = true;
          return;
        }
        note_key(value, *type);
        continue;
      }
      PartitionOf p = in_.topo.partition_of(d, *type, value);
      if (p.status == PartitionOf::Status::unknown) {  // PostgreSQL will judge the value
        out.all = true;
        return;
      }
      if (p.status == PartitionOf::Status::no_partition) {
        if (!value) continue;
        fail("SPR02", "no partition for key " + quoted(value) + " of distribution \"" +
                          in_.topo.config().distributions[d].name + "\"");
        out.parts.clear();
        return;
      }
      out.add(p.partition);
      note_key(value, *type);
    }
  }
}

// A salted key's partitions: one per bucket the enclosing AND fixes, else all the key's.
bool Evaluator::salted_partitions(std::size_t d, const ColumnType& type, const std::optional<std::string>& value,
                                  PartSet& out) {
  if (!buckets_) return in_.topo.key_partitions(d, type, value, out);
  for (std::uint32_t b : *buckets_) {
    PartitionOf p = in_.topo.partition_of(d, type, value, b);
    if (p.status != PartitionOf::Status::ok) return false;
    out.add(p.partition);
  }
  return true;
}

// The buckets of a salt leaf's values; false when one cannot be read.
bool Evaluator::salt_buckets(const KeyCond& k, std::vector<std::uint32_t>& out) {
  const ColumnType* type = salt_type(k.occ);
  if (type == nullptr) return false;
  KeyValues values;
  for (const ValueSource& v : k.values) {
    values.clear();
    if (!read(v, *type, values)) return false;
    for (const auto& value : values) {
      if (!value && !k.null_matches) continue;
      std::optional<std::uint32_t> b = in_.topo.bucket_of(plan_.occs[k.occ].distribution, *type, value);
      if (!b) return false;
      if (std::find(out.begin(), out.end(), *b) == out.end()) out.push_back(*b);
    }
  }
  return true;
}

const ColumnType* Evaluator::salt_type(int occ) {
  const Occurrence& o = plan_.occs[occ];
  const auto& salt = in_.topo.config().distributions[o.distribution].salt;
  if (!salt) return nullptr;
  salt_types_.resize(plan_.occs.size());
  std::optional<ColumnType>& t = salt_types_[occ];
  if (t) return t->hash_type ? &*t : nullptr;
  const TableShape* shape = in_.shapes ? in_.shapes(o.table) : nullptr;
  if (shape == nullptr) {
    if (std::find(missing_.begin(), missing_.end(), o.table) == missing_.end()) missing_.push_back(o.table);
    return nullptr;
  }
  t = ColumnType{};  // no such column, or not a hashable type: its values cannot be read
  if (std::optional<std::size_t> c = column_index(occ, salt->column); c && *c < shape->types.size())
    t = column_type(shape->types[*c]);
  return t->hash_type ? &*t : nullptr;
}

// The bucket of an INSERT row's salt value; nullopt after fail() when it has none.
std::optional<std::uint32_t> Evaluator::row_bucket(const InsertRows& rows, std::size_t r, const std::string& where) {
  const Occurrence& o = plan_.occs[rows.occ];
  const std::string& column = in_.topo.config().distributions[o.distribution].salt->column;
  std::optional<std::size_t> i;
  if (rows.columns.empty()) i = column_index(rows.occ, column);
  for (std::size_t c = 0; c < rows.columns.size(); ++c)
    if (rows.columns[c] == column) i = c;
  const auto& row = rows.rows[r];
  const ColumnType* type = salt_type(rows.occ);
  if (!i || *i >= row.size()) {
    fail("SPR01", where + " needs a value for its salt column \"" + column + "\"");
  } else if (!row[*i]) {
    fail("SPR01", where + ": the salt column \"" + column + "\" must be a constant or a parameter, not an expression");
  } else if (type == nullptr) {
    fail("SPR01", "table \"" + o.table + "\" has no salt column \"" + column + "\" of a hashable type");
  } else {
    KeyValues v;
    std::optional<std::uint32_t> b;
    if (read(*row[*i], *type, v) && v.size() == 1) b = in_.topo.bucket_of(o.distribution, *type, v[0]);
    if (b) return b;
    fail("SPR01", where + ": cannot read the value of salt column \"" + column + "\"");
  }
  return std::nullopt;
}

PartSet Evaluator::leaf_range(const KeyCond& k) {
  const std::size_t d = plan_.occs[k.occ].distribution;
  if (in_.topo.config().distributions[d].method != config::Method::range) return PartSet{};
  const ColumnType* type = key_type(k.occ);
  if (type == nullptr) return PartSet{};
  std::optional<std::string> bound[2];
  const std::optional<ValueSource>* src[2] = {&k.lower, &k.upper};
  for (int i = 0; i < 2; ++i) {
    if (!*src[i]) continue;
    KeyValues v;
    if ((*src[i])->is_array || !read(**src[i], *type, v) || v.size() != 1 || !v[0]) return PartSet{};
    bound[i] = std::move(v[0]);
  }
  return in_.topo.partitions_between(d, *type, bound[0], k.lower_inclusive, bound[1], k.upper_inclusive);
}

// Route::lookup: each value of Plan::lookup with the shard of its entries.
void Evaluator::index_lookup(Route& r) {
  const Plan::IndexLookup& l = *plan_.lookup;
  const config::Index& ix = in_.topo.config().indexes[l.index];
  const Occurrence& o = plan_.occs[l.occ];
  const TableShape* shape = in_.shapes ? in_.shapes(o.table) : nullptr;
  if (shape == nullptr) return;
  std::optional<ColumnType> type;
  auto lookup = std::make_shared<Route::Lookup>();
  lookup->index = l.index;
  lookup->distribution = o.distribution;
  for (std::size_t c = 0; c < shape->columns.size() && c < shape->types.size(); ++c) {
    if (shape->columns[c] == ix.columns.front()) type = column_type(shape->types[c]);
    if (shape->columns[c] == o.key_column) lookup->key_type = shape->types[c];
  }
  if (!type || !type->hash_type || lookup->key_type.empty()) return;
  KeyValues values;
  for (const ValueSource& v : l.values) {
    values.clear();
    if (!read(v, *type, values)) return;
    for (auto& value : values) {
      if (!value) continue;  // (`= NULL` matches nothing)
      PartitionOf p = in_.topo.partition_of(ix.distribution, *type, value);
      if (p.status != PartitionOf::Status::ok) return;
      lookup->values.emplace_back(in_.topo.shard_of(ix.distribution, p.partition), std::move(*value));
    }
  }
  r.indexes.lookup = std::move(lookup);
}

const ColumnType* Evaluator::key_type(int occ) {
  std::optional<ColumnType>& t = types_[occ];
  if (t) return &*t;
  const Occurrence& o = plan_.occs[occ];
  const TableShape* shape = in_.shapes ? in_.shapes(o.table) : nullptr;
  if (shape == nullptr) {
    if (std::find(missing_.begin(), missing_.end(), o.table) == missing_.end()) missing_.push_back(o.table);
    return nullptr;
  }
  t = ColumnType{};  // no such column: values cannot be read, PostgreSQL will complain
  for (std::size_t c = 0; c < shape->columns.size() && c < shape->types.size(); ++c)
    if (shape->columns[c] == o.key_column) t = column_type(shape->types[c]);
  return &*t;
}

std::optional<std::size_t> Evaluator::column_index(int occ, const std::string& column) {
  const TableShape* shape = in_.shapes ? in_.shapes(plan_.occs[occ].table) : nullptr;
  if (shape == nullptr) return std::nullopt;
  for (std::size_t c = 0; c < shape->columns.size(); ++c)
    if (shape->columns[c] == column) return c;
  return std::nullopt;
}

bool Evaluator::read(const ValueSource& v, const ColumnType& type, KeyValues& out) const {
  switch (v.kind) {
    case ValueSource::Kind::null:
      out.emplace_back();
      return true;
    case ValueSource::Kind::constant:
      if (v.is_array) return parse_text_array(v.text, out);
      out.emplace_back(v.text);
      return true;
    case ValueSource::Kind::slot: {
      if (v.index < 0 || static_cast<std::size_t>(v.index) >= in_.slots.size() || !in_.slots[v.index]) return false;
      std::string text = v.negate ? "-" + *in_.slots[v.index] : *in_.slots[v.index];
      if (v.is_array) return parse_text_array(text, out);
      out.emplace_back(std::move(text));
      return true;
    }
    case ValueSource::Kind::param: {
      const BoundParams* p = in_.params;
      if (p == nullptr || v.index < 0 || static_cast<std::size_t>(v.index) >= p->values.size()) return false;
      const std::size_t i = static_cast<std::size_t>(v.index);
      const std::optional<std::string_view>& value = p->values[i];
      if (!value) {
        out.emplace_back();
        return !v.is_array;  // a NULL array matches nothing, but say "unknown" to be safe
      }
      std::int16_t format = p->formats.empty() ? 0 : p->formats.size() == 1 ? p->formats[0] : i < p->formats.size() ? p->formats[i] : 0;
      if (format == 0) {
        if (v.is_array) return parse_text_array(*value, out);
        out.emplace_back(std::string(*value));
        return true;
      }
      if (v.is_array) return decode_binary_array(*value, type, out);
      std::int32_t oid = i < p->types.size() ? p->types[i] : i < plan_.param_types.size() ? plan_.param_types[i] : 0;
      std::string text;
      if (!decode_binary(static_cast<std::uint32_t>(oid), *value, type, text)) return false;
      out.emplace_back(std::move(text));
      return true;
    }
  }
  return false;
}

void Evaluator::insert_rows(const InsertRows& rows, std::vector<std::size_t>* row_shards) {
  const Occurrence& o = plan_.occs[rows.occ];
  const ColumnType* type = key_type(rows.occ);
  if (type == nullptr) return;
  const std::string needs = "INSERT into sharded table \"" + o.table + "\" needs a value for its key column \"" +
                            o.key_column + "\"";
  if (rows.key_omitted) return request_keys(rows, 0, needs);
  std::optional<std::size_t> k = rows.key_index ? rows.key_index : column_index(rows.occ, o.key_column);
  if (!k) return fail("SPR01", "table \"" + o.table + "\" has no key column \"" + o.key_column + "\"");
  PartSet& parts = parts_[rows.occ];
  parts = PartSet::none();
  KeyValues v;
  for (std::size_t r = 0; r < rows.rows.size(); ++r) {
    const auto& row = rows.rows[r];
    const std::string where = "INSERT into sharded table \"" + o.table + "\" (row " + std::to_string(r + 1) + ")";
    if (*k >= row.size()) return fail("SPR01", where + " needs a value for its key column \"" + o.key_column + "\"");
    if (!row[*k] && std::find(rows.defaults.begin(), rows.defaults.end(), std::pair{r, *k}) != rows.defaults.end())
      return request_keys(rows, *k, needs);
    if (!row[*k] && request_nextvals(rows, *k, o.key_column)) return;
    if (!row[*k])
      return fail("SPR01", where + ": the key column \"" + o.key_column + "\" must be a constant or a parameter, not an expression");
    v.clear();
    if (!read(*row[*k], *type, v) || v.size() != 1)
      return fail("SPR01", where + ": cannot read the value of key column \"" + o.key_column + "\"");
    std::optional<std::uint32_t> bucket;
    if (in_.topo.salted(o.distribution) && !(bucket = row_bucket(rows, r, where))) return;
    PartitionOf p = in_.topo.partition_of(o.distribution, *type, v[0], bucket);
    if (p.status == PartitionOf::Status::no_partition)
      return fail("SPR02", where + ": no partition for key " + quoted(v[0]));
    if (p.status != PartitionOf::Status::ok)
      return fail("SPR01", where + ": key " + quoted(v[0]) + " is not a valid " + type->base);
    parts.add(p.partition);
    ++inserted_[{o.distribution, p.partition}];
    note_key(v[0], *type);
    if (row_shards != nullptr) row_shards->push_back(in_.topo.shard_of(o.distribution, p.partition));
  }
  request_sequences(rows);
}

// UPDATE ... SET key = <value> (Plan::key_assignment): the value's shard runs the
// statement; every other shard the WHERE reaches runs the guarded one.
void Evaluator::guard_key(Route& r) {
  const KeyAssignment& a = *plan_.key_assignment;
  const Occurrence& o = plan_.occs[static_cast<std::size_t>(a.occ)];
  if (in_.topo.salted(o.distribution)) {  // (the guard would need the row's bucket)
    r = error_route(plan_, "SPR01", "cannot update the distribution key \"" + o.key_column + "\" of salted table \"" +
                                        o.table + "\": delete the row and insert it again instead");
    return;
  }
  const ColumnType* type = key_type(a.occ);
  KeyValues v;
  if (type == nullptr || !read(a.value, *type, v) || v.size() != 1 || !v[0]) {
    r = error_route(plan_, "SPR01", "cannot update the distribution key \"" + o.key_column + "\" of table \"" +
                                        o.table + "\" to NULL or to a value that cannot be read");
    return;
  }
  PartitionOf p = in_.topo.partition_of(o.distribution, *type, v[0]);
  if (p.status == PartitionOf::Status::no_partition) {
    r = error_route(plan_, "SPR02", "no partition for key " + quoted(v[0]) + " of distribution \"" +
                                        in_.topo.config().distributions[o.distribution].name + "\"");
    return;
  }
  if (p.status != PartitionOf::Status::ok) {
    r = error_route(plan_, "SPR01", "key " + quoted(v[0]) + " is not a valid " + type->base);
    return;
  }
  const std::size_t owner = in_.topo.shard_of(o.distribution, p.partition);
  std::vector<std::size_t> targets = r.shards;  // all_shards: every shard
  if (r.kind == RouteKind::all_shards)
    for (std::size_t s = 0; s < in_.topo.config().shards.size(); ++s) targets.push_back(s);
  if (targets.size() == 1 && targets.front() == owner) return;
  for (std::size_t t : targets)
    if (t != owner) r.per_shard_sql.emplace_back(t, a.guarded_sql);
  if (r.per_shard_sql.empty()) return;
  auto names = r.names ? std::make_shared<Route::Names>(*r.names) : std::make_shared<Route::Names>();
  names->key_guard = Route::KeyGuard{o.table, o.key_column, owner};
  r.names = std::move(names);
}

// Keys left out or DEFAULT: refused (SPR01) unless the server generates them — for the
// rows whose key item is DEFAULT at `position`, or every row when the column is omitted.
void Evaluator::request_keys(const InsertRows& rows, std::size_t position, const std::string& message) {
  request_values(rows, plan_.occs[rows.occ].key_column, rows.key_omitted, position, {}, message);
}

// The statement's column list for table `occ` leaves out a column whose default draws from
// a sequence (false also while the table's shape is not known: it is then asked for).
bool Evaluator::leaves_out_sequence(int occ, const std::vector<std::string>& columns) {
  if (key_type(occ) == nullptr) return false;
  const TableShape* shape = in_.shapes(plan_.occs[occ].table);
  if (shape == nullptr) return false;
  return std::any_of(shape->sequence_columns.begin(), shape->sequence_columns.end(),
                     [&](const auto& c) { return std::find(columns.begin(), columns.end(), c) == columns.end(); });
}

// INSERT ... SELECT whose rows the proxy reads and inserts itself.
Route Evaluator::pull_route() const {
  Route pull = error_route(plan_, "SPR01", "INSERT ... SELECT into a sharded table: its rows could not be read");
  pull.pull_insert = true;
  return pull;
}

// A column other than the key whose default draws from a sequence, left out or DEFAULT:
// each shard would number its rows from its own copy of the sequence and the values
// would repeat across shards, so the server fills them from one shard's sequence as it
// does keys (SPEC §3). Without a column list, a row that ends just before the column
// gets it appended; one that ends earlier is left to the shard.
void Evaluator::request_sequences(const InsertRows& rows) {
  const Occurrence& o = plan_.occs[rows.occ];
  const TableShape* shape = in_.shapes ? in_.shapes(o.table) : nullptr;
  if (error_ || rows.rows.empty() || request_nextvals(rows, std::nullopt, {}) || shape == nullptr) return;
  for (const std::string& c : shape->sequence_columns) {
    if (c == o.key_column) continue;
    const std::string message = "INSERT into sharded table \"" + o.table + "\": column \"" + c +
                                "\" takes its values from a sequence, which the proxy draws";
    std::optional<std::size_t> at;
    if (!rows.columns.empty()) {
      const auto it = std::find(rows.columns.begin(), rows.columns.end(), c);
      if (it == rows.columns.end()) return request_values(rows, c, true, 0, {}, message);
      at = static_cast<std::size_t>(it - rows.columns.begin());
    } else {
      at = column_index(rows.occ, c);
      if (!at) continue;
      if (rows.rows.front().size() == *at) {
        std::vector<std::size_t> every(rows.rows.size());
        for (std::size_t r = 0; r < every.size(); ++r) every[r] = r;
        return request_values(rows, c, false, *at, std::move(every), message);
      }
    }
    std::vector<std::size_t> which;
    for (const auto& [r, item] : rows.defaults)
      if (item == *at) which.push_back(r);
    if (!which.empty()) return request_values(rows, c, false, *at, std::move(which), message);
  }
}

// nextval('s') items (at `item`, else the first one's place): drawn by the server from
// s on the combine shard, as a sequence column's values are, not each on the shard its
// row goes to. False when there is none.
bool Evaluator::request_nextvals(const InsertRows& rows, std::optional<std::size_t> item, const std::string& column) {
  const NextvalItem* first = nullptr;
  for (const auto& n : rows.nextvals)
    if (!first && (!item || n.item == *item)) first = &n;
  if (first == nullptr) return false;
  std::vector<std::size_t> which;
  for (const auto& n : rows.nextvals)
    if (n.item == first->item && n.sequence == first->sequence) which.push_back(n.row);
  std::string name = column;
  if (name.empty()) name = first->item < rows.columns.size() ? rows.columns[first->item] : "?";
  request_values(rows, name, false, first->item, std::move(which),
                 "INSERT into sharded table \"" + plan_.occs[rows.occ].table + "\": nextval('" + first->sequence +
                     "') is drawn by the proxy",
                 first->sequence);
  return true;
}

// The rows of `rows` that get a value of `column` from the server: every row when the
// column is omitted, else `which`, or when that is empty the rows whose item at
// `position` is DEFAULT; from `sequence` when the items are nextval() of it.
void Evaluator::request_values(const InsertRows& rows, const std::string& column, bool omitted, std::size_t position,
                               std::vector<std::size_t> which, const std::string& message,
                               const std::string& sequence) {
  if (error_) return;
  auto req = std::make_shared<KeyRequest>();
  req->table = plan_.occs[rows.occ].table;
  req->column = column;
  req->column_omitted = omitted;
  req->position = position;
  req->sequence = sequence;
  req->rows = std::move(which);
  if (req->rows.empty())
    for (std::size_t r = 0; r < rows.rows.size(); ++r)
      if (omitted || std::find(rows.defaults.begin(), rows.defaults.end(), std::pair{r, position}) !=
                         rows.defaults.end())
        req->rows.push_back(r);
  fail("SPR01", message);
  error_->generate_keys = std::move(req);
}

// Joins on the key: a joined occurrence's rows lie within the other's partitions.
void Evaluator::propagate() {
  for (std::size_t round = 0; round <= plan_.occs.size(); ++round) {
    bool changed = false;
    for (const KeyEdge& e : plan_.edges) {
      if (parts_[e.from].all) continue;
      std::size_t before = parts_[e.to].all ? SIZE_MAX : parts_[e.to].parts.size();
      parts_[e.to].intersect(parts_[e.from]);
      changed |= parts_[e.to].parts.size() != before;
    }
    if (!changed) return;
  }
}

void Evaluator::fail(std::string sqlstate, std::string message) {
  if (!error_) error_ = error_route(plan_, std::move(sqlstate), std::move(message));
}

// Keys for hot-key statistics, integers in canonical form ("0042" is 42).
// An integer's text as std::to_string writes it: an optional '-', then digits without
// a leading zero ("0" alone), and not "-0".
static bool canonical_integer(std::string_view s) {
  const bool negative = !s.empty() && s.front() == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return s.front() != '0' || (s.size() == 1 && !negative);
}

void Evaluator::note_key(const std::optional<std::string>& v, const ColumnType& type) {
  if (!v || key_values_.size() >= 64) return;
  std::string key = *v;
  if (type.integer && !canonical_integer(*v)) {
    long long n = 0;
    std::string_view s = *v;
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec == std::errc() && p == s.data() + s.size()) key = std::to_string(n);
  }
  if (std::find(key_values_.begin(), key_values_.end(), key) == key_values_.end()) key_values_.push_back(std::move(key));
}

// Several sharded tables can be answered shard by shard only when every row that
// meets another lives on the same shard: all of one distribution, linked by equality
// on the key, and no table pinned to a single shard beside them.
// Every sharded table of the statement in one distribution (and no pinned table).
static bool one_distribution(const Plan& plan) {
  if (plan.occs.size() <= 1) return plan.pinned_shards.empty() || plan.occs.empty();
  if (!plan.pinned_shards.empty()) return false;
  return std::all_of(plan.occs.begin(), plan.occs.end(),
                     [&](const Occurrence& o) { return o.distribution == plan.occs.front().distribution; });
}

static bool co_located(const Plan& plan) {
  if (!one_distribution(plan)) return false;
  if (plan.occs.size() <= 1) return true;
  std::vector<bool> reached(plan.occs.size(), false);
  reached[0] = true;
  for (bool changed = true; changed;) {
    changed = false;
    for (const KeyEdge& e : plan.edges) {
      auto f = static_cast<std::size_t>(e.from), t = static_cast<std::size_t>(e.to);
      if (f >= reached.size() || t >= reached.size() || reached[f] == reached[t]) continue;
      reached[f] = reached[t] = true;
      changed = true;
    }
  }
  return std::all_of(reached.begin(), reached.end(), [](bool b) { return b; });
}

Route Evaluator::finish() {
  Route r = plan_.fixed;
  if (!missing_.empty()) {
    r.kind = RouteKind::need_shapes;
    r.missing_tables = std::move(missing_);
    return r;
  }
  if (error_) return *error_;
  // Partitions per distribution.
  std::vector<PartSet>& dists = (*lease_).dists;
  std::vector<char>& used = (*lease_).dist_used;
  reset_all(dists, in_.topo.config().distributions.size());
  used.assign(dists.size(), 0);
  for (std::size_t o = 0; o < plan_.occs.size(); ++o) {
    const std::size_t d = plan_.occs[o].distribution;
    if (!used[d]) {
      used[d] = 1;
      dists[d] = parts_[o];
    } else {
      dists[d].unite(parts_[o]);
    }
  }
  std::vector<std::size_t> shards = plan_.pinned_shards;
  std::size_t touched = 0;
  for (std::size_t d = 0; d < dists.size(); ++d) {
    if (!used[d]) continue;
    ++touched;
    r.distribution = d;
    if (dists[d].all) {
      const auto& all = in_.topo.shards_of(d);
      shards.insert(shards.end(), all.begin(), all.end());
      continue;
    }
    for (std::uint32_t p : dists[d].parts) {
      shards.push_back(in_.topo.shard_of(d, p));
      auto rows = inserted_.find({d, p});
      r.partitions.push_back(PartitionHit{d, p, rows == inserted_.end() ? 0u : rows->second});
    }
  }
  if (touched != 1) r.distribution.reset();
  r.key_values = std::move(key_values_);
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  if (plan_.writes_reference) {  // every copy
    r.kind = RouteKind::all_shards;
    r.reference_write = true;
    return r;
  }
  if (touched == 0 && shards.empty()) {  // reference / catalog tables, or none
    r.kind = RouteKind::any_shard;
    return r;
  }
  // UPDATE/DELETE without the key: every shard, each joining its own rows — which
  // assumes that rows joined within one distribution on other columns than the key (an
  // ORM's `WHERE id IN (SELECT ... JOIN ... ON fk = id)` in a multi-tenant schema) live
  // together. Tables of other distributions (or pinned ones) never do: refused below.
  for (int t : plan_.write_targets)
    if (parts_[t].all && (shards.size() <= 1 || one_distribution(plan_))) {
      r.kind = RouteKind::all_shards;
      r.partitions.clear();
      return r;
    }
  if (shards.empty()) {
    // Contradictory keys (`id = 1 AND id = 2`): no rows anywhere; one shard answers.
    shards.push_back(in_.topo.shard_of(plan_.occs.front().distribution, 0));
  }
  if (!row_shards_.empty()) {  // a lone INSERT ... VALUES goes where its rows go
    shards = row_shards_;
    std::sort(shards.begin(), shards.end());
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  }
  // Any other INSERT is sent whole: to several shards it would duplicate rows.
  bool unsplittable_insert = std::any_of(plan_.inserts.begin(), plan_.inserts.end(),
                                         [](const InsertRows& rows) { return !rows.splittable; });
  if (unsplittable_insert && shards.size() > 1) {
    if (plan_.several_statements) return apart_error(plan_);
    return error_route(plan_, "SPR01",
                       "this INSERT would reach several shards; send a multi-row INSERT as a statement of its own");
  }
  if (shards.size() > 1 && !co_located(plan_)) {
    // Each shard would join only its own rows: the union is not the answer. A read is
    // answered by the combine step (SPEC §4.1), which joins every shard's rows.
    if (r.cls == StatementClass::read && plan_.write_targets.empty() && plan_.inserts.empty()) {
      r.kind = RouteKind::shards;
      r.shards = std::move(shards);
      r.needs_combine = true;
      return r;
    }
    if (plan_.insert_select) return pull_route();  // its rows do not stay on their shards
    if (plan_.several_statements) return apart_error(plan_);
    return error_route(plan_, "SPC01",
                       "cannot be answered exactly across shards: the statement joins sharded tables that are not "
                       "co-located (same distribution, joined on the key); add the key to the join or fix it to one "
                       "key value");
  }
  r.kind = RouteKind::shards;
  r.shards = std::move(shards);
  return r;
}

}  // namespace

Route evaluate(const Plan& plan, const EvalInput& in, bool* needs_exact_plan) {
  bool ignored = false;
  Evaluator e(plan, in);
  return e.run(needs_exact_plan != nullptr ? needs_exact_plan : &ignored);
}

}  // namespace splitpoint::routing
