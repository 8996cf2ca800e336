// Cursors over several shards. PostgreSQL runs a cursor where its rows are; rows of
// several shards are only whole in the proxy. So DECLARE ... CURSOR FOR a read of
// several shards reads the whole answer at once (the scatter-read executor, its answer
// kept as for INSERT ... SELECT, at most scatter.max_buffered_rows rows), and the
// proxy answers that cursor's FETCH / MOVE / CLOSE itself: forward only, in text. A
// cursor without HOLD ends with its transaction, one WITH HOLD with CLOSE or the
// session. Any other cursor is a shard's, as before. docs/scatter-gather.md.
#include <algorithm>
#include <limits>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using routing::Route;
using routing::RouteKind;

awaitable<std::optional<bool>> Session::cursor_command(const Route& route) {
  const Route::Names& n = *route.names;
  switch (route.cursor) {
    case Route::Cursor::declare:
      if (route.kind == RouteKind::error || route.kind == RouteKind::local || route.cls != routing::StatementClass::read ||
          single_target(route))
        co_return std::nullopt;
      co_return co_await declare_cursor(n);
    case Route::Cursor::fetch:
      if (!fe_.cursors.count(n.cursor)) co_return std::nullopt;
      co_return co_await fetch_cursor(n);
    case Route::Cursor::close:
      if (n.cursor.empty()) {  // CLOSE ALL: the proxy's, and the shard's as it goes on
        fe_.cursors.clear();
        co_return std::nullopt;
      }
      if (!fe_.cursors.erase(n.cursor)) co_return std::nullopt;
      co_await pump_.drain();
      co_await answer({}, {}, "CLOSE CURSOR");
      co_return !closing_;
    case Route::Cursor::none:
      break;
  }
  co_return std::nullopt;
}

awaitable<bool> Session::declare_cursor(const Route::Names& n) {
  if (!n.cursor_hold && !in_transaction())
    co_return co_await reject("25P01", "DECLARE CURSOR can only be used in transaction blocks", false);
  if (fe_.cursors.count(n.cursor))
    co_return co_await reject("42P03", "cursor \"" + n.cursor + "\" already exists", false);
  if (!n.cursor_plain)
    co_return co_await reject(sqlstate::feature_not_supported,
                              "a cursor over several shards is read forward and in text: BINARY and SCROLL are not "
                              "supported",
                              false);
  const std::size_t limit = runtime_->config.scatter.max_buffered_rows;
  std::string messages;
  std::size_t rows = 0;
  if (!co_await read_for_insert(n.cursor_query, nullptr, nullptr, limit, messages, rows)) co_return !closing_;
  ProxyCursor cursor;
  cursor.hold = n.cursor_hold;
  std::string notices, error;
  for_each_message(messages, [&](char type, std::string_view body, std::string_view whole) {
    if (type == 'T') cursor.description.assign(whole);
    else if (type == 'D') cursor.rows.emplace_back(whole);
    else if (type == 'N') notices.append(whole);
    else if (type == 'E' && error.empty()) error.assign(body);
  });
  if (!error.empty()) {  // the query's own error, as PostgreSQL gives it at DECLARE
    if (auto e = proto::ErrorFields::decode(error)) metrics_.error(e->get('C'));
    if (in_transaction()) co_await fail_block();
    co_await answer(std::move(notices), error, {});
    co_return !closing_;
  }
  if (rows > limit)
    co_return co_await reject(sqlstate::scatter_buffer_limit,
                              "a cursor over several shards holds its rows in the proxy: more than "
                              "scatter.max_buffered_rows (" +
                                  std::to_string(limit) + ")",
                              false);
  fe_.cursors[n.cursor] = std::move(cursor);
  co_await answer(std::move(notices), {}, "DECLARE CURSOR");
  co_return !closing_;
}

// FETCH / MOVE [FORWARD] n | ALL | NEXT, as PostgreSQL moves a cursor: from position p
// (0 before the first row, rows + 1 after the last) rows p+1 .. p+n, or the current row
// for FORWARD 0.
awaitable<bool> Session::fetch_cursor(const Route::Names& n) {
  if (!n.fetch_forward)
    co_return co_await reject(sqlstate::feature_not_supported,
                              "a cursor over several shards is read forward only (FETCH/MOVE [FORWARD] n, ALL, NEXT)",
                              false);
  co_await pump_.drain();
  ProxyCursor& c = fe_.cursors[n.cursor];
  const std::size_t total = c.rows.size();
  std::size_t first = 0, last = 0;  // rows [first, last) of c.rows
  if (n.fetch_count == 0) {
    if (c.position >= 1 && c.position <= total) first = c.position - 1, last = c.position;
  } else {
    const std::size_t from = std::min(c.position, total);
    const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(
        n.fetch_count, static_cast<std::int64_t>(std::numeric_limits<std::int32_t>::max())));
    first = from;
    last = std::min(total, from + want);
    c.position = from + want > total ? total + 1 : from + want;
  }
  std::string out;
  if (!n.move) {
    out += c.description;
    for (std::size_t i = first; i < last; ++i) out += c.rows[i];
  }
  co_await answer(std::move(out), {}, (n.move ? "MOVE " : "FETCH ") + std::to_string(last - first));
  co_return !closing_;
}

namespace {

// The next rows of a portal held by the proxy, as PostgreSQL's Execute gives them: at
// most `max_rows` (0: all), then PortalSuspended if the limit was reached, else
// CommandComplete with the rows of this Execute.
void next_rows(ProxyCursor& c, std::int32_t max_rows, std::string& out) {
  const std::size_t from = std::min(c.position, c.rows.size());
  const std::size_t left = c.rows.size() - from;
  const std::size_t n = max_rows > 0 ? std::min(left, static_cast<std::size_t>(max_rows)) : left;
  for (std::size_t i = from; i < from + n; ++i) out += c.rows[i];
  c.position = from + n;
  if (max_rows > 0 && n == static_cast<std::size_t>(max_rows)) proto::encode_portal_suspended(out);
  else proto::CommandComplete{"SELECT " + std::to_string(n)}.encode(out);
}

}  // namespace

awaitable<bool> Session::execute_in_pieces(std::string portal, ScatterRequest req, std::int32_t max_rows) {
  const std::size_t limit = runtime_->config.scatter.max_buffered_rows;
  const bool describe = req.describe;
  req.describe = true;  // (kept for a later Describe of the portal)
  co_await pump_.drain();  // (nothing of an earlier statement may go into the capture)
  ClientStream::Capture capture;
  capture.max_rows = limit;
  stream_.capture(&capture);
  const bool ok = co_await scatter_read(*scatter_.route, std::move(req));
  stream_.capture(nullptr);
  if (!ok) co_return false;
  ProxyCursor c;
  std::string out;  // notices first, as they came
  bool failed = false;
  for_each_message(capture.data, [&](char type, std::string_view, std::string_view whole) {
    if (type == 'T') c.description.assign(whole);
    else if (type == 'D') c.rows.emplace_back(whole);
    else if (type != 'C') out.append(whole);
    failed = failed || type == 'E';
  });
  if (failed) {  // the statement's own error, as without a row limit
    co_await stream_.write(capture.data);
    co_return !closing_;
  }
  if (capture.rows > limit)
    co_return co_await reject(sqlstate::scatter_buffer_limit,
                              "a portal over several shards read in pieces (Execute with a row limit) holds its rows "
                              "in the proxy: more than scatter.max_buffered_rows (" +
                                  std::to_string(limit) + ")",
                              true);
  if (describe) out += c.description;
  next_rows(c, max_rows, out);
  fe_.portals[std::move(portal)] = std::move(c);
  co_await stream_.write(out);
  co_return !closing_;
}

awaitable<bool> Session::execute_more(const std::string& portal, std::int32_t max_rows) {
  std::string out;
  next_rows(fe_.portals[portal], max_rows, out);
  co_await stream_.write(out);
  co_return !closing_;
}

}  // namespace splitpoint::server
