// INSERT ... SELECT into a sharded table whose rows do not stay on their shard (SPEC §3;
// the router decides: Route::pull_insert — a key that is a co-located table's own key
// runs on the shards instead). The proxy reads the SELECT's rows as it reads any
// SELECT — one shard, the streaming merge or the combine step — and inserts them
// itself as one multi-row INSERT ... VALUES: each value a literal of the type the
// SELECT gave it (so PostgreSQL's assignment casts apply as in INSERT ... SELECT), every
// other clause of the statement as written (routing::insert_select_parts). That INSERT
// is routed like any other: split per shard by key, keys generated where the column
// list leaves the key out, RETURNING in row order, one transaction rule. At most
// scatter.max_insert_select_rows rows (SPS02 beyond).
#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/insert_split.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::RouteKind;

namespace {

// A SELECT's answer as the client would have seen it.
struct Answer {
  std::vector<std::int32_t> types;  // of the RowDescription's columns
  std::size_t rows = 0;
  std::string notices, error;
};

Answer read_answer(std::string_view messages) {
  Answer a;
  for_each_message(messages, [&](char type, std::string_view body, std::string_view whole) {
    if (type == 'T') {
      if (auto rd = proto::RowDescription::decode(body))
        for (const auto& f : rd->fields) a.types.push_back(f.type_oid);
    } else if (type == 'D') {
      ++a.rows;
    } else if (type == 'N') {
      a.notices.append(whole);
    } else if (type == 'E' && a.error.empty()) {
      a.error.assign(body);
    }
  });
  return a;
}

// "(v1::t1, NULL::t2), (...)" of the answer's rows.
std::string values_of(std::string_view messages, const std::vector<std::string>& type_names) {
  std::string out;
  for_each_message(messages, [&](char type, std::string_view body, std::string_view) {
    auto row = type == 'D' ? proto::DataRow::decode(body) : std::nullopt;
    if (!row) return;
    out += out.empty() ? "(" : ", (";
    for (std::size_t i = 0; i < row->values.size(); ++i) {
      if (i > 0) out += ", ";
      out += row->values[i] ? quote_literal(*row->values[i]) : std::string("NULL");
      if (i < type_names.size()) out += "::" + type_names[i];
    }
    out += ')';
  });
  return out;
}

}  // namespace

awaitable<bool> Session::read_for_insert(std::string_view select, const proto::Bind* bind,
                                         const std::vector<std::int32_t>* types, std::size_t max_rows,
                                         std::string& answer, std::size_t& rows) {
  const bool extended = bind != nullptr;
  KeptShapes keep;
  auto lookup = shape_lookup(keep);
  auto& router = *runtime_->router;
  std::shared_ptr<const routing::Plan> plan;
  std::function<routing::Route()> again = [&] { return router.route_simple(select, settings_.routing, lookup); };
  if (extended) {
    plan = router.plan(select, *types, settings_.routing.standard_conforming_strings);
    again = [&] {
      return router.route(*plan, routing::BoundParams{bind->params, bind->param_formats, *types}, settings_.routing,
                          lookup);
    };
  }
  routing::Route route = again();
  if (route.kind == RouteKind::need_shapes) co_await route_with_shapes(route, keep, again);
  moves_.take_moves();
  if (moves_.view && !co_await moves_.wait_for_moves(route, extended, again)) co_return false;
  if (route.kind == RouteKind::error) {
    co_await reject(route.sqlstate, route.message, extended);
    co_return false;
  }
  ScatterRequest req;
  req.sql = std::string(select);
  req.extended = extended;
  if (extended) {
    for (auto& v : bind->params) req.params.push_back(v ? std::optional<std::string>(*v) : std::nullopt);
    req.param_formats = bind->param_formats;
    req.param_types = *types;
  }
  if (auto target = single_target(route)) {
    co_await pump_.drain();
    auto hidden = moves_.hide_foreign_rows(*target, route, select);
    std::string_view text = hidden ? std::string_view(*hidden) : select;
    auto reply = co_await run_on(*target, text, extended ? &req : nullptr, true, max_rows);
    if (reply.lost && reply.error.empty()) reply.error = error_body(sqlstate::connection_failure, "the shard did not answer");
    answer = std::move(reply.messages);
    if (!reply.error.empty()) proto::Writer(answer, 'E').bytes(reply.error).finish();
    rows = reply.truncated ? max_rows + 1 : read_answer(answer).rows;
    co_return true;
  }
  // Several shards: the scatter-read executor, its answer kept instead of sent.
  co_await pump_.drain();  // (nothing of an earlier statement may go into the capture)
  ClientStream::Capture capture;
  capture.max_rows = max_rows;
  auto* outer = stream_.captured();  // (an indexed write's, around this statement)
  stream_.capture(&capture);
  const bool ok = co_await scatter_read(route, std::move(req));
  stream_.capture(outer);
  if (!ok) co_return false;
  answer = std::move(capture.data);
  rows = capture.rows;
  if (!read_answer(answer).error.empty()) co_return true;  // the statement's error: the client gets it
  // Partial results allowed or not, an INSERT needs every row.
  for (const auto& shard : scatter_.last)
    if (shard.status == "timeout" || shard.status == "error") {
      co_await reject(sqlstate::scatter_incomplete,
                      "INSERT ... SELECT needs every shard's rows; shard \"" + shard.shard + "\" is missing (" +
                          shard.status + ")",
                      extended);
      co_return false;
    }
  co_return true;
}

awaitable<bool> Session::pull_insert_select(const routing::Route& route, KeptShapes& keep, std::string_view sql,
                                            const proto::Bind* bind, const std::vector<std::int32_t>* types) {
  const bool extended = bind != nullptr;
  auto parts = routing::insert_select_parts(sql, settings_.routing.standard_conforming_strings);
  if (!parts) co_return co_await reject(route.sqlstate, route.message, extended);
  if (parts->params_outside_select)
    co_return co_await reject(route.sqlstate,
                              route.message + ": its rows are read through the proxy, and then its ON CONFLICT or "
                                              "RETURNING may not use parameters",
                              extended);
  const std::size_t limit = runtime_->config.scatter.max_insert_select_rows;
  std::string messages;
  std::size_t rows = 0;
  if (!co_await read_for_insert(parts->select, bind, types, limit, messages, rows)) co_return !closing_;
  Answer answer = read_answer(messages);
  std::string out = std::move(answer.notices);
  if (!answer.error.empty()) {  // the SELECT's own error, as PostgreSQL would give it
    if (auto e = proto::ErrorFields::decode(answer.error)) metrics_.error(e->get('C'));
    proto::Writer(out, 'E').bytes(answer.error).finish();
    if (in_transaction()) co_await fail_block();
    if (extended) fe_.skip_until_sync = true;
    else proto::ReadyForQuery{fe_.client_txn}.encode(out);
    co_await stream_.write(out);
    co_return true;
  }
  if (rows > limit)
    co_return co_await reject(sqlstate::scatter_buffer_limit,
                              "INSERT ... SELECT would move more than scatter.max_insert_select_rows (" +
                                  std::to_string(limit) +
                                  ") rows through the proxy; insert them with COPY, or in smaller parts",
                              extended);
  if (!out.empty()) co_await stream_.write(out);
  std::string text = parts->insert;
  const std::size_t at = text.find(routing::kRowsMarker);
  if (rows == 0) {
    // Nothing to insert: the statement with no rows, on one shard, for its answer (the
    // RETURNING description, INSERT 0 0).
    text.replace(at, routing::kRowsMarker.size(), "SELECT * FROM (" + parts->select + ") AS splitpoint_rows LIMIT 0");
    routing::Route one = route;
    one.kind = RouteKind::shards;
    one.shards = {hosts_.pick_any_shard()};
    std::string error;
    if (!check_write(one, one.shards.front(), error))
      co_return co_await reject(sqlstate::cross_shard_write, std::move(error), extended);
    if (!extended) co_return co_await run_on_shards(one, text);
    co_return co_await bind_scatter(one, *bind, std::move(text), *types);
  }
  // The SELECT's column types by name, as literals' casts.
  std::string oids;
  for (auto t : answer.types) oids += (oids.empty() ? "" : ",") + std::to_string(static_cast<std::uint32_t>(t));
  co_await pump_.drain();
  auto reply = co_await run_on(combine_shard(),
                               "SELECT pg_catalog.format_type(t, NULL) FROM pg_catalog.unnest('{" + oids +
                                   "}'::pg_catalog.oid[]) WITH ORDINALITY AS u(t, n) ORDER BY n");
  auto names = first_column(reply.messages);
  if (reply.lost || !reply.error.empty() || !names || names->size() != answer.types.size())
    co_return co_await reject(sqlstate::connection_failure,
                              "INSERT ... SELECT: cannot name the types of its columns: " + message_of(reply.error),
                              extended);
  text.replace(at, routing::kRowsMarker.size(), "VALUES " + values_of(messages, *names));
  messages = std::string();
  routing::Route rewritten;
  if (!extended) co_return co_await keys_.run_rewritten_insert(rewritten, keep, std::move(text));
  proto::Bind b;  // the rows are literals: no parameters
  b.portal = bind->portal;
  b.result_formats = bind->result_formats;
  co_return co_await keys_.run_rewritten_insert(rewritten, keep, std::move(text), &b);
}

}  // namespace splitpoint::server
