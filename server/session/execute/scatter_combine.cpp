// The combine step of a scatter read (SPEC §4.1, routing/merge/combine_plan.hpp): what
// the streaming merger cannot combine exactly, PostgreSQL combines. On the combine
// database's connection (acquired with the shards' ones):
//   BEGIN; CREATE TEMP TABLE sp_combine_<k> ON COMMIT DROP AS ... WITH NO DATA
//   COPY sp_combine_<k> FROM STDIN    <- every shard's rows of pull k, as COPY text
//   <the statement over the temporary tables>   -> its rows to the client
//   COMMIT (ROLLBACK after a failure): the temporary tables go with it
// The shards got their pulls when their connections came (send_statement); their rows
// are read pull by pull, shard by shard, and written to the combine connection as they
// arrive, so the proxy holds at most a buffer per step. The deadline and the
// partial-result rule are the scatter read's: a missing shard is missing as in a merge;
// a missing combine database fails the statement.
#include <spdlog/spdlog.h>

#include "protocol/buffer.hpp"
#include "protocol/sqlstate.hpp"
#include "server/session/execute/scatter_read.hpp"
#include "server/net/wire.hpp"
#include "server/session/user_types.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

constexpr std::size_t kCopyFlushBytes = 64 * 1024;

std::uint32_t be32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (std::uint32_t{u[0]} << 24) | (std::uint32_t{u[1]} << 16) | (std::uint32_t{u[2]} << 8) | u[3];
}

// A DataRow of text values as one COPY text line: tab-separated, \N for NULL,
// backslash escapes. False if the row is malformed.
bool append_copy_line(std::string_view row, std::string& out) {
  if (row.size() < 2) return false;
  const std::size_t n = (static_cast<unsigned char>(row[0]) << 8) | static_cast<unsigned char>(row[1]);
  std::size_t at = 2;
  proto::Writer w(out, 'd');
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back('\t');
    if (at + 4 > row.size()) return false;
    const auto len = static_cast<std::int32_t>(be32(row.data() + at));
    at += 4;
    if (len < 0) {
      out.append("\\N");
      continue;
    }
    if (at + static_cast<std::size_t>(len) > row.size()) return false;
    for (char c : row.substr(at, static_cast<std::size_t>(len))) {
      switch (c) {
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        default: out.push_back(c);
      }
    }
    at += static_cast<std::size_t>(len);
  }
  out.push_back('\n');
  w.finish();
  return true;
}

}  // namespace

void ScatterRead::take_combine(ParallelAcquire& acquiring) {
  Clock::duration waited{};
  auto r = acquiring.take(shards_.size(), waited);
  if (!r) return;
  if (!r->backend) {
    combining_.sh.state = Shard::State::missing;
    combining_.sh.status = "error";
    combining_.sh.error = "unreachable: " + r->message;
    return;
  }
  combining_.sh.borrowed = std::move(r->backend);
  combining_.sh.b = combining_.sh.borrowed.get();
  const auto& at = combining_.pool->target();
  s_.cancel_.add_scatter(combining_.sh.b, at.host, at.port,
                               s_.runtime_->combine ? std::nullopt : std::optional{s_.combine_shard()});
}

// A combine database of its own holds none of the tables the pulls read: the temporary
// table is made from the pull's RowDescription, each column of the type the shard sent
// (PostgreSQL reports a domain as its base type), named by the combine database itself
// (format_type) in the statement that precedes the COPY. A type made on the shards (an
// enum, a composite: OID 16384 and above) it would not know: refused. Appends the
// statements to `copy`; false: refused (the statement failed).
bool ScatterRead::create_from(const routing::CombinePull& pull, std::string& copy) {
  constexpr std::string_view kTag = "$sp_combine$";
  auto fields = proto::RowDescription::decode(frame_body_);
  if (!fields || fields->fields.empty()) {
    fail(sqlstate::internal_error, "malformed RowDescription of the pull " + pull.pull_sql);
    return false;
  }
  std::string columns;
  for (const auto& f : fields->fields) {
    const std::string column = "column \"" + std::string(f.name) + "\" of " + pull.table;
    if (user_types::is_user_type(f.type_oid)) {
      fail(sqlstate::feature_not_supported,
           column + " is of a type made on the shards (OID " + std::to_string(static_cast<std::uint32_t>(f.type_oid)) +
               "), which scatter.combine's database of its own does not have; combine on a shard instead");
      return false;
    }
    if (f.name.find(kTag) != std::string_view::npos) {  // (it would end the DO block's body)
      fail(sqlstate::feature_not_supported, column + ": a name with " + std::string(kTag) + " in it cannot be combined");
      return false;
    }
    columns += (columns.empty() ? "" : ", ") + std::string("format('%I %s', ") + quote_literal(f.name) +
               ", format_type(" + std::to_string(f.type_oid) + ", " + std::to_string(f.type_modifier) + "))";
  }
  const std::string create = "DO " + std::string(kTag) + "BEGIN EXECUTE 'CREATE TEMP TABLE " + pull.temp_name +
                             " (' || concat_ws(', ', " + columns + ") || ') ON COMMIT DROP'; END" + std::string(kTag);
  proto::Query{create + "; COPY " + pull.temp_name + " FROM STDIN"}.encode(copy);
  combining_.described = true;
  return true;
}

std::string ScatterRead::combine_where() const {
  const auto& t = combining_.pool->target();
  if (!s_.runtime_->combine) return "shard " + t.shard;
  return t.host + ":" + std::to_string(t.port) + "/" + t.database;
}

// Every pull in one go: one Query (simple protocol) or one Sync, so the shard answers
// them in order and ends with one ReadyForQuery. Rows come back as text, after a
// RowDescription (a combine database of its own makes its temporary table from it).
// A pull of a table every shard holds whole goes to the first shard only.
void ScatterRead::encode_pulls(std::string& out, std::size_t shard) const {
  std::vector<std::string> pulls;
  for (const auto& p : combine_->pulls)
    if (!p.one_shard || shard == shards_.front().index)
      pulls.push_back(s_.moves_.hide_foreign_rows(shard, route_, p.pull_sql).value_or(p.pull_sql));
  if (!req_.extended) {
    std::string sql;
    for (const auto& p : pulls) sql += (sql.empty() ? "" : "; ") + p;
    proto::Query{sql}.encode(out);
    return;
  }
  for (const auto& p : pulls) {
    proto::Parse{"", p, parameter_types_for(p, req_.param_types, req_.param_formats, req_.params.size())}
        .encode(out);
    req_.bind({}).encode(out);  // rows as text
    proto::Describe{'P', ""}.encode(out);
    proto::Execute{"", 0}.encode(out);
  }
  proto::encode_sync(out);
}

awaitable<void> ScatterRead::combine() {
  if (!combining_.sh.b) {
    co_return fail(sqlstate::scatter_incomplete,
                   "the combine database (" + combine_where() + ") is missing: " +
                       (combining_.sh.error.empty() ? "no connection within the deadline" : combining_.sh.error));
  }
  if (std::all_of(shards_.begin(), shards_.end(), [](auto& sh) { return sh.state == Shard::State::missing; }))
    co_return fail(sqlstate::scatter_incomplete, "no shard answered: " + missing_text());
  if (any_missing() && !allow_partial_)
    co_return fail(sqlstate::scatter_incomplete,
                   "multi-shard statement incomplete, partial results denied; missing: " + missing_text());
  s_.metrics_.combines.add();
  std::string out;
  combining_.sh.skip_ready = s_.sync_backend_state(*combining_.sh.b, out, false);
  std::string begin = "BEGIN";
  if (!s_.runtime_->combine)  // (a database of its own gets each table at its pull's RowDescription)
    for (const auto& p : combine_->pulls) begin += "; " + p.create_sql;
  proto::Query{begin}.encode(out);
  combining_.open = true;
  if (!co_await combine_command(std::move(out))) co_return;
  for (std::size_t k = 0; k < combine_->pulls.size(); ++k)
    if (!co_await pull_into(k)) co_return;
  for (auto& sh : shards_)
    if (sh.state == Shard::State::running) sh.state = Shard::State::ended;  // owes only its ReadyForQuery
  warn_missing();
  co_await run_combine_query();
}

// Sends `out` to the combine database and reads its answers to the ReadyForQuery of the
// last statement; an error there fails the statement with that error.
awaitable<bool> ScatterRead::combine_command(std::string out) {
  combining_.sh.finished = false;
  if (!co_await write_combine(out)) co_return false;
  bool ok = true;
  char type = 0;
  for (;;) {
    if (!co_await next_message(combining_.sh, type)) {
      combine_lost();
      co_return false;
    }
    if (combining_.sh.finished) break;
    if (type == 'E' && ok) {
      ok = false;
      failure_.body = frame_body_;
      fail("", error_text(frame_body_));
    }
  }
  co_return ok;
}

awaitable<bool> ScatterRead::write_combine(std::string& bytes) {
  if (bytes.empty()) co_return true;
  auto [ec, n] = co_await asio::async_write(combining_.sh.b->socket, asio::buffer(bytes), use_nothrow);
  bytes.clear();
  if (!ec) co_return true;
  combine_lost();
  co_return false;
}

void ScatterRead::combine_lost() {
  mark_missing(combining_.sh, reads_.timed_out ? "timeout" : "error", reads_.timed_out ? "deadline passed" : "connection lost");
  fail(sqlstate::scatter_incomplete, "the combine database (" + combine_where() + ") is missing: " + combining_.sh.error);
}

// Pull `k` from every shard still running (a table every shard holds whole: from the
// first) into its temporary table: one COPY, the shards' rows one after the other.
awaitable<bool> ScatterRead::pull_into(std::size_t k) {
  const routing::CombinePull& pull = combine_->pulls[k];
  std::string copy;
  combining_.described = !s_.runtime_->combine;
  if (combining_.described) proto::Query{"COPY " + pull.temp_name + " FROM STDIN"}.encode(copy);
  bool ok = true;
  if (pull.one_shard && shards_.front().state != Shard::State::running) {
    ok = false;  // (no other shard was asked: its rows would be partial whatever the rule)
    fail(sqlstate::scatter_incomplete, "multi-shard statement incomplete: " + missing_text());
  }
  for (auto& sh : shards_) {
    if (!ok || (pull.one_shard && &sh != &shards_.front())) break;
    if (sh.state != Shard::State::running) continue;
    ok = co_await copy_rows_of(sh, pull, copy);
  }
  if (!combining_.described) {  // a database of its own, and no shard described the pull: nothing begun
    if (ok) fail(sqlstate::scatter_incomplete, "no shard answered: " + missing_text());
    co_return false;
  }
  if (ok) {
    proto::encode_copy_done(copy);
  } else {
    // PostgreSQL takes CopyData before it answers the COPY: what was sent is dropped.
    proto::CopyFail{"the statement failed"}.encode(copy);
  }
  const std::string failure = failure_.message, code = failure_.code;
  const bool copied = co_await combine_command(std::move(copy));
  if (!ok) {  // the first failure is the statement's, not CopyFail's echo
    failure_.message = failure;
    failure_.code = code;
    failure_.body.clear();
  }
  co_return ok && copied;
}

// One shard's rows of the current pull, to its CommandComplete, as COPY lines.
awaitable<bool> ScatterRead::copy_rows_of(Shard& sh, const routing::CombinePull& pull, std::string& copy) {
  const std::size_t max_rows = s_.runtime_->config.scatter.max_combine_rows;
  char type = 0;
  for (;;) {
    if (!co_await next_message(sh, type) || sh.finished) {
      mark_missing(sh, reads_.timed_out ? "timeout" : "error",
                   reads_.timed_out ? "deadline passed" : sh.finished ? "no result" : "connection lost");
      break;
    }
    if (type == 'E') {
      rejected(sh);
      break;
    }
    if (type == 'C') {
      sh.done_at = Clock::now();  // (its last pull's end is when it finished)
      co_return true;
    }
    if (type == 'T' && !combining_.described) {
      if (!create_from(pull, copy)) co_return false;
      continue;
    }
    if (type != 'D') continue;
    ++sh.rows;
    if (++combining_.rows > max_rows) {
      fail(sqlstate::scatter_buffer_limit, "the combine step would move more than scatter.max_combine_rows (" +
                                               std::to_string(max_rows) + ") rows");
      co_return false;
    }
    if (!append_copy_line(frame_body_, copy)) {
      fail(sqlstate::internal_error, "malformed row from shard " + s_.pools_[sh.index]->target().shard);
      co_return false;
    }
    s_.metrics_.combine_rows.add();
    if (copy.size() >= kCopyFlushBytes && !co_await write_combine(copy)) co_return false;
  }
  if (allow_partial_) co_return true;
  fail(sqlstate::scatter_incomplete,
       "multi-shard statement incomplete, partial results denied; missing: " + missing_text());
  co_return false;
}

// The statement over the temporary tables, with the client's parameters and result
// formats; its RowDescription (when asked for) and rows go to the client as they come.
awaitable<void> ScatterRead::run_combine_query() {
  std::string out;
  const std::string& sql = combine_->combine_sql;
  if (!req_.extended) {
    proto::Query{sql}.encode(out);
  } else {
    proto::Parse{"", sql, parameter_types_for(sql, req_.param_types, req_.param_formats, req_.params.size())}
        .encode(out);
    req_.bind(req_.result_formats).encode(out);
    proto::Describe{'P', ""}.encode(out);
    proto::Execute{"", 0}.encode(out);
    proto::encode_sync(out);
  }
  combining_.sh.finished = false;
  if (!co_await write_combine(out)) co_return;
  char type = 0;
  for (;;) {
    if (!co_await next_message(combining_.sh, type)) {
      combine_lost();
      co_return;
    }
    if (combining_.sh.finished) break;
    if (!failure_.message.empty()) continue;  // to its ReadyForQuery
    if (type == 'E') {
      failure_.body = frame_body_;
      fail("", error_text(frame_body_));
      out_.clear();  // PostgreSQL's error replaces what was not sent yet
    } else if ((type == 'T' || type == 'n') && req_.describe) {
      proto::Writer(out_, type).bytes(frame_body_).finish();
    } else if ((type == 'D' || type == 'H' || type == 'd' || type == 'c') && req_.emit_rows) {
      // (Rows, or a COPY's CopyOutResponse, CopyData and CopyDone.)
      if (type == 'D' || type == 'd') ++combining_.sh.rows;
      proto::Writer(out_, type).bytes(frame_body_).finish();
      if (out_.size() >= kCopyFlushBytes) {
        if (co_await s_.stream_.write(out_)) s_.closing_ = true;
        out_.clear();
        if (s_.closing_) co_return;
      }
    } else if (type == 'C') {
      combining_.tag = frame_body_.substr(0, frame_body_.find('\0'));
    }
  }
}

// COMMIT (ROLLBACK after a failure) drops the temporary tables; the connection goes
// back to its pool unless it broke or was left inside a transaction.
awaitable<void> ScatterRead::end_combine() {
  if (combining_.sh.b && combining_.open && combining_.sh.state != Shard::State::missing) {
    std::string out;
    proto::Query{failure_.message.empty() ? "COMMIT" : "ROLLBACK"}.encode(out);
    const std::string failure = failure_.message, code = failure_.code, body = failure_.body;
    co_await combine_command(std::move(out));
    if (!failure.empty()) {  // the statement's own failure stays the one reported
      failure_.message = failure;
      failure_.code = code;
      failure_.body = body;
    }
  }
  if (combining_.sh.borrowed) {
    const bool reusable = combining_.sh.state != Shard::State::missing && combining_.sh.b->status == 'I';
    if (combining_.sh.state == Shard::State::missing && combining_.sh.b) {
      // Still running (the deadline passed): cancel it, never hand it to anyone.
      combining_.sh.b->cancel_sent = true;
      const auto& target = combining_.pool->target();
      co_await send_cancel(target.host, target.port, combining_.sh.b->process_id, combining_.sh.b->secret_key,
                           s_.runtime_->config.timeouts.server_connect);
    }
    combining_.pool->release(std::move(combining_.sh.borrowed), reusable);
    combining_.sh.b = nullptr;
  }
}

}  // namespace splitpoint::server
