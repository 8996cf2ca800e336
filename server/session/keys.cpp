// Keys the proxy generates (SPEC §3). An INSERT ... VALUES into a sharded table that
// leaves its key column out, or writes DEFAULT there, gets its keys from the column's
// own default — serial, identity, DEFAULT nextval(...), or any default expression such
// as gen_random_uuid() — evaluated on one shard (`scatter.combine`, the first by
// default) in blocks of kKeyBlock values that each proxy keeps (KeyCache). One source
// for every shard and proxy: the keys are unique, and a sequence's keys increase within
// a proxy's blocks. The statement is rewritten with its keys (routing/insert_split.hpp:
// literals, or in the extended protocol parameters after the client's so the text stays
// the same), routed again by them, and run by the multi-shard write executor, which
// returns RETURNING rows and the command tag as PostgreSQL does.
#include <algorithm>
#include <functional>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/insert_split.hpp"
#include "routing/sequence_read.hpp"
#include "routing/text_scan.hpp"
#include "server/cluster/catalog.hpp"
#include "server/cluster/indexes.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/keys.hpp"

#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::RouteKind;

namespace {

constexpr std::size_t kKeyBlock = 64;

// "sales.orders" as text a regclass reads: "sales"."orders".
std::string relation_literal(std::string_view table) {
  const auto dot = table.find('.');
  if (dot == std::string_view::npos) return quote_literal(routing::quote_ident(table));
  return quote_literal(routing::quote_ident(table.substr(0, dot)) + "." + routing::quote_ident(table.substr(dot + 1)));
}

// The sequence of a default that is `nextval('<name>'::regclass)` (how PostgreSQL shows
// DEFAULT nextval('name')), as text a regclass reads; "" for any other default.
std::string nextval_sequence(std::string_view expr) {
  constexpr std::string_view head = "nextval('", tail = "'::regclass)";
  if (expr.size() <= head.size() + tail.size() || !expr.starts_with(head) || !expr.ends_with(tail)) return "";
  const std::string_view quoted = expr.substr(head.size(), expr.size() - head.size() - tail.size());
  std::string name;
  for (std::size_t i = 0; i < quoted.size(); ++i) {
    if (quoted[i] == '\'') {
      if (i + 1 >= quoted.size() || quoted[i + 1] != '\'') return "";
      ++i;  // '' stands for one quote
    }
    name.push_back(quoted[i]);
  }
  return name;
}

}  // namespace

// Called when a DDL statement is routed, and again when it has run (outside a block) or
// its block has ended: a shape read in between may be the old one. Other proxies
// following the same catalog forget theirs too (Catalog::schema_changed).
void Session::forget_table_definitions() {
  runtime_->forget_table_definitions();
  if (in_transaction()) txn_.ddl = true;
  if (auto* c = server_.catalog()) c->schema_changed();
  if (!runtime_->config.indexes.empty()) server_.indexes().recheck();  // (a table made anew: built again)
}

// How the table's key column gets its values, from the shard's catalog (once per
// database and table until DDL).
awaitable<std::optional<KeyCache::Source>> KeyDrawing::key_source(const routing::KeyRequest& request,
                                                               const std::string& cache_key, std::string& error) {
  if (auto s = s_.runtime_->keys->source(cache_key)) co_return s;
  if (!request.sequence.empty()) {  // nextval('s') written in the statement
    KeyCache::Source src;
    src.sql = "SELECT pg_catalog.nextval(" + quote_literal(request.sequence) + ") FROM pg_catalog.generate_series(1, ";
    src.sequence = request.sequence;
    s_.runtime_->keys->set_source(cache_key, src);
    co_return src;
  }
  const std::string rel = relation_literal(request.table), col = quote_literal(request.column);
  const std::string sql =
      "SELECT a.attidentity, pg_catalog.pg_get_serial_sequence(" + rel + ", " + col +
      "), pg_catalog.pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_attrdef d "
      "ON d.adrelid = a.attrelid AND d.adnum = a.attnum WHERE a.attrelid = " + rel +
      "::pg_catalog.regclass AND a.attname = " + col + " AND NOT a.attisdropped";
  co_await s_.pump_.drain();
  auto reply = co_await s_.run_on(s_.combine_shard(), sql);
  if (reply.lost || !reply.error.empty()) {
    error = "cannot read its default: " + message_of(reply.error);
    co_return std::nullopt;
  }
  KeyCache::Source src;
  for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
    auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
    if (!row || row->values.size() != 3) return;
    const std::string_view identity = row->values[0] ? *row->values[0] : "";
    if ((identity == "a" || identity == "d") && row->values[1]) {
      src.sql = "SELECT pg_catalog.nextval(" + quote_literal(*row->values[1]) + ") FROM pg_catalog.generate_series(1, ";
      src.overriding = identity == "a";
      src.sequence = *row->values[1];
    } else if (row->values[2]) {
      src.sql = "SELECT " + std::string(*row->values[2]) + " FROM pg_catalog.generate_series(1, ";
      src.sequence = nextval_sequence(*row->values[2]);
    }
  });
  s_.runtime_->keys->set_source(cache_key, src);
  co_return src;
}

std::string KeyDrawing::key_cache_key(const routing::KeyRequest& request) const {
  if (!request.sequence.empty()) return s_.who_.database + '\0' + "nextval" + '\0' + request.sequence;
  return s_.who_.database + '\0' + request.table + '\0' + request.column;
}

awaitable<std::optional<std::vector<std::string>>> KeyDrawing::draw_keys(const routing::KeyRequest& request,
                                                                      std::size_t n, KeyCache::Source& source,
                                                                      std::string& error) {
  const std::string cache_key = key_cache_key(request);
  auto src = co_await key_source(request, cache_key, error);
  if (!src) co_return std::nullopt;
  if (src->sql.empty()) {
    error = "the column has no default to generate it from";
    co_return std::nullopt;
  }
  source = *src;
  std::vector<std::string> keys = s_.runtime_->keys->take(cache_key, n);
  if (keys.size() == n) co_return keys;
  const std::size_t missing = n - keys.size();
  co_await s_.pump_.drain();
  auto reply = co_await s_.run_on(s_.combine_shard(),
                               src->sql + std::to_string(std::max(missing, kKeyBlock)) + ")");
  if (reply.lost || !reply.error.empty()) {
    error = "cannot evaluate its default: " + message_of(reply.error);
    co_return std::nullopt;
  }
  auto fresh = first_column(reply.messages);
  if (!fresh || fresh->size() < missing) {
    error = "its default gave NULL";
    co_return std::nullopt;
  }
  keys.insert(keys.end(), fresh->begin(), fresh->begin() + static_cast<std::ptrdiff_t>(missing));
  s_.runtime_->keys->add(cache_key, std::move(*fresh), missing);
  co_return keys;
}

awaitable<bool> KeyDrawing::insert_with_generated_keys(routing::Route& route, KeptShapes& keep, std::string_view sql,
                                                    const proto::Bind* bind, const std::vector<std::int32_t>* types) {
  const auto request = route.generate_keys;
  const bool extended = bind != nullptr;
  KeyCache::Source source;
  std::string error;
  auto keys = co_await draw_keys(*request, request->rows.size(), source, error);
  if (!keys) {
    // (Not a `?:` in the co_await's arguments: GCC 12 destroys the wrong temporary.)
    std::string message = route.message;
    if (!error.empty()) message += " (" + error + ")";
    co_return co_await s_.reject(route.sqlstate, std::move(message), extended);
  }
  note_drawn(source.sequence, keys->back());  // (drawn whatever becomes of the INSERT, as by nextval)
  const int first_param = extended ? static_cast<int>(bind->params.size()) + 1 : 0;
  auto keyed = routing::insert_with_keys(sql, s_.settings_.routing.standard_conforming_strings, *request, *keys,
                                         source.overriding, first_param);
  if (!keyed) co_return co_await s_.reject(route.sqlstate, route.message, extended);
  if (!extended) co_return co_await run_rewritten_insert(route, keep, std::move(*keyed));
  // Extended: the client's parameters, then the keys (text).
  std::vector<std::int32_t> all_types = *types;
  all_types.resize(bind->params.size() + keys->size(), 0);
  proto::Bind b = *bind;
  if (b.param_formats.size() == 1) b.param_formats.resize(bind->params.size(), b.param_formats[0]);  // one for all: one each
  if (!b.param_formats.empty()) b.param_formats.resize(all_types.size(), 0);
  for (const auto& k : *keys) b.params.emplace_back(k);
  co_return co_await run_rewritten_insert(route, keep, std::move(*keyed), &b, std::move(all_types));
}

awaitable<bool> KeyDrawing::run_rewritten_insert(routing::Route& route, KeptShapes& keep, std::string text,
                                              const proto::Bind* bind, std::vector<std::int32_t> types) {
  const bool extended = bind != nullptr;
  auto lookup = s_.shape_lookup(keep);
  auto& router = *s_.runtime_->router;
  std::shared_ptr<const routing::Plan> plan;
  routing::BoundParams params;
  std::function<routing::Route()> again = [&] { return router.route_simple(text, s_.settings_.routing, lookup); };
  if (extended) {
    plan = router.plan(text, types, s_.settings_.routing.standard_conforming_strings);
    params = routing::BoundParams{bind->params, bind->param_formats, types};
    again = [&] { return router.route(*plan, params, s_.settings_.routing, lookup); };
  }
  route = again();
  if (route.kind == RouteKind::need_shapes) co_await s_.route_with_shapes(route, keep, again);
  s_.moves_.take_moves();
  if (s_.moves_.view && !co_await s_.moves_.wait_for_moves(route, extended, again)) co_return !s_.closing_;
  // Pulled rows whose key the column list leaves out: generated, then here again.
  if (route.generate_keys) co_return co_await insert_with_generated_keys(route, keep, text, bind, &types);
  if (route.kind == RouteKind::error) co_return co_await s_.reject(route.sqlstate, route.message, extended);
  // One shard, inside a block: the transaction's write rule, as for any write to one shard.
  std::string error;
  if (auto target = s_.single_target(route); target && !s_.check_write(route, *target, error))
    co_return co_await s_.reject(sqlstate::cross_shard_write, std::move(error), extended);
  if (!extended) {
    // Rows on several shards outside a block: one transaction, as the client's statement
    // (the extended protocol's is made one at its Execute).
    if (!s_.in_transaction() && (route.kind == RouteKind::all_shards || route.shards.size() > 1)) {
      const bool alone = co_await s_.writes_shards_alone(route);
      if (alone) {
        const std::vector<std::string_view> whole{text};
        co_return co_await s_.run_parts(whole, true, &route);
      }
    }
    co_return co_await s_.run_on_shards(route, text);
  }
  if (auto target = s_.single_target(route)) co_return co_await s_.bind_rewritten(route, *target, *bind, text, types);
  co_return co_await s_.bind_scatter(route, *bind, std::move(text), types);
}

void KeyDrawing::note_drawn(const std::string& sequence, const std::string& value) {
  if (sequence.empty()) return;  // (gen_random_uuid() and the like: no sequence's session state)
  auto& drawn = s_.settings_.drawn;
  auto it = std::find_if(drawn.last_of.begin(), drawn.last_of.end(), [&](auto& d) { return d.first == sequence; });
  if (it == drawn.last_of.end()) drawn.last_of.emplace_back(sequence, value);
  else it->second = value;
  drawn.lastval = value;
}

std::optional<std::string> KeyDrawing::answer_from_drawn(const routing::Route& route, std::string_view sql) {
  auto& drawn = s_.settings_.drawn;
  if (route.reads == routing::Route::Reads::sequences) {
    if (!s_.settings_.routing.standard_conforming_strings) return std::nullopt;
    if (auto read = routing::sequence_read(sql)) {
      if (read->lastval) {
        if (!drawn.lastval) return std::nullopt;
        return "SELECT " + quote_literal(*drawn.lastval) + "::pg_catalog.int8 AS " + read->column;
      }
      if (drawn.last_of.empty()) return std::nullopt;
      // PostgreSQL resolves the argument and the drawn sequences' names alike.
      std::string text = "SELECT CASE (" + read->argument + ")::pg_catalog.regclass";
      for (const auto& [sequence, value] : drawn.last_of)
        text += " WHEN " + quote_literal(sequence) + "::pg_catalog.regclass THEN " + quote_literal(value) +
                "::pg_catalog.int8";
      return text + " ELSE pg_catalog.currval(" + read->argument + ") END AS " + read->column;
    }
    drawn = {};  // the client's own nextval or setval: the shard's session state from now on
  }
  return std::nullopt;
}

void KeyDrawing::forget_drawn_lastval(const routing::Route& route) {
  // A write the proxy does not fill may call nextval on its shard.
  if (route.cls == routing::StatementClass::write && !route.generate_keys && !route.copy_from && !route.pull_insert)
    s_.settings_.drawn.lastval.reset();
}

}  // namespace splitpoint::server
