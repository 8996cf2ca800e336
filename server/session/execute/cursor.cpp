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

namespace {

// The cursor of that name the proxy holds: DECLAREd, or a portal read in pieces (in
// PostgreSQL a portal is a cursor: asyncpg's Cursor.forward() is SQL MOVE on its portal).
ProxyCursor* held_cursor(Frontend& fe, const std::string& name) {
  if (auto c = fe.cursors.find(name); c != fe.cursors.end()) return &c->second;
  if (auto p = fe.portals.find(name); p != fe.portals.end()) return &p->second;
  return nullptr;
}

}  // namespace

awaitable<std::optional<bool>> Session::cursor_command(const Route& route, const BoundCursor* bound) {
  const Route::Names& n = *route.names;
  switch (route.cursor) {
    case Route::Cursor::declare:
      if (route.kind == RouteKind::error || route.kind == RouteKind::local || route.cls != routing::StatementClass::read ||
          single_target(route))
        co_return std::nullopt;
      if (bound && !co_await bound_in_order()) co_return !closing_;
      co_return co_await declare_cursor(n, bound);
    case Route::Cursor::fetch:
      if (!held_cursor(fe_, n.cursor)) co_return std::nullopt;
      co_return co_await fetch_cursor(n, bound);
    case Route::Cursor::close:
      if (n.cursor.empty()) {  // CLOSE ALL: the proxy's, and the shard's as it goes on
        fe_.cursors.clear();
        co_return std::nullopt;
      }
      if (!fe_.cursors.erase(n.cursor)) co_return std::nullopt;
      co_await pump_.drain();
      co_return co_await cursor_answer(bound, {}, {}, {}, "CLOSE CURSOR");
    case Route::Cursor::none:
      break;
  }
  co_return std::nullopt;
}

// A Bind the proxy answers after what the backends owe: false when the batch failed
// meanwhile (the rest of it is skipped) or the session ends.
awaitable<bool> Session::bound_in_order() {
  co_await pump_.drain();
  if (closing_) co_return false;
  if (!fe_.open_batch_failed) co_return true;
  fe_.skip_until_sync = true;
  co_return false;
}

// The answer of a cursor command: now (the simple protocol), or BindComplete now and
// the rest at the portal's Describe and Execute (the extended one).
awaitable<bool> Session::cursor_answer(const BoundCursor* bound, std::string description, std::string rows,
                                       std::string_view error, std::string_view tag) {
  if (!bound) {
    co_await answer(description + rows, error, tag);
    co_return !closing_;
  }
  fe_.local_portal.emplace(Frontend::LocalPortal{std::string(bound->bind.portal), std::move(description),
                                                 std::move(rows), std::string(tag), std::string(error)});
  std::string out;
  proto::encode_bind_complete(out);
  co_await stream_.write(out);
  co_return !closing_;
}

awaitable<bool> Session::declare_cursor(const Route::Names& n, const BoundCursor* bound) {
  const bool extended = bound != nullptr;
  if (!n.cursor_hold && !in_transaction())
    co_return co_await reject("25P01", "DECLARE CURSOR can only be used in transaction blocks", extended);
  if (fe_.cursors.count(n.cursor))
    co_return co_await reject("42P03", "cursor \"" + n.cursor + "\" already exists", extended);
  if (!n.cursor_plain)
    co_return co_await reject(sqlstate::feature_not_supported,
                              "a cursor over several shards is read forward and in text: BINARY and SCROLL are not "
                              "supported",
                              extended);
  const std::size_t limit = runtime_->config.scatter.max_buffered_rows;
  std::string messages;
  std::size_t rows = 0;
  if (!co_await read_for_insert(n.cursor_query, extended ? &bound->bind : nullptr, extended ? &bound->types : nullptr,
                                limit, messages, rows))
    co_return !closing_;
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
    co_return co_await cursor_answer(bound, {}, std::move(notices), error, {});
  }
  if (rows > limit)
    co_return co_await reject(sqlstate::scatter_buffer_limit,
                              "a cursor over several shards holds its rows in the proxy: more than "
                              "scatter.max_buffered_rows (" +
                                  std::to_string(limit) + ")",
                              extended);
  fe_.cursors[n.cursor] = std::move(cursor);
  co_return co_await cursor_answer(bound, {}, std::move(notices), {}, "DECLARE CURSOR");
}

// FETCH / MOVE [FORWARD] n | ALL | NEXT, as PostgreSQL moves a cursor: from position p
// (0 before the first row, rows + 1 after the last) rows p+1 .. p+n, or the current row
// for FORWARD 0.
awaitable<bool> Session::fetch_cursor(const Route::Names& n, const BoundCursor* bound) {
  if (!n.fetch_forward)
    co_return co_await reject(sqlstate::feature_not_supported,
                              "a cursor over several shards is read forward only (FETCH/MOVE [FORWARD] n, ALL, NEXT)",
                              bound != nullptr);
  if (bound && !co_await bound_in_order()) co_return !closing_;
  co_await pump_.drain();
  ProxyCursor* held = held_cursor(fe_, n.cursor);
  if (!held) co_return co_await reject("34000", "cursor \"" + n.cursor + "\" does not exist", bound != nullptr);
  ProxyCursor& c = *held;
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
  std::string description, rows;
  if (!n.move) {
    description = c.description;
    for (std::size_t i = first; i < last; ++i) rows += c.rows[i];
  }
  co_return co_await cursor_answer(bound, std::move(description), std::move(rows), {},
                                   (n.move ? "MOVE " : "FETCH ") + std::to_string(last - first));
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
  if (max_rows > 0) next_rows(c, max_rows, out);  // (0: bound and kept past its Sync, none taken yet)
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
