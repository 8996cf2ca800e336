#include "server/session/execute/scatter_read.hpp"

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "protocol/buffer.hpp"
#include "protocol/sqlstate.hpp"
#include "server/net/scatter_io.hpp"
#include "server/net/wire.hpp"
#include "server/session/user_types.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

constexpr std::size_t kClientFlushBytes = 64 * 1024;
constexpr std::size_t kDeferredAnswerBytes = 4096;

using user_types::is_user_type;

// Types made by CREATE TYPE (user_types::is_user_type) have each shard's own OID, as
// tables do; built-in types must be the same.
bool same_type(std::int32_t x, std::int32_t y) { return x == y || (is_user_type(x) && is_user_type(y)); }

bool has_user_type(const proto::RowDescription& fields) {
  return std::any_of(fields.fields.begin(), fields.fields.end(), [](auto& f) { return is_user_type(f.type_oid); });
}

// Table OIDs differ from shard to shard; names, types and formats must not.
bool same_columns(const proto::RowDescription& a, const proto::RowDescription& b) {
  if (a.fields.size() != b.fields.size()) return false;
  for (std::size_t i = 0; i < a.fields.size(); ++i) {
    const auto &x = a.fields[i], &y = b.fields[i];
    if (x.name != y.name || !same_type(x.type_oid, y.type_oid) || x.type_size != y.type_size ||
        x.type_modifier != y.type_modifier || x.format != y.format)
      return false;
  }
  return true;
}

// Answers for the client are built in buffers this thread keeps between statements: a
// new one would grow by doubling, copying what it held each time, to about
// kClientFlushBytes for every statement of many rows. A few per thread (a statement
// holds one while it waits), none larger than a flush or two.
constexpr std::size_t kSpareAnswerBuffers = 8;
thread_local std::vector<std::string> spare_answer_buffers;

std::string take_answer_buffer() {
  if (spare_answer_buffers.empty()) return {};
  std::string b = std::move(spare_answer_buffers.back());
  spare_answer_buffers.pop_back();
  return b;
}

void keep_answer_buffer(std::string b) {
  if (b.capacity() > 2 * kClientFlushBytes || spare_answer_buffers.size() >= kSpareAnswerBuffers) return;
  b.clear();
  spare_answer_buffers.push_back(std::move(b));
}

}  // namespace

ScatterRead::ScatterRead(Session& session, const routing::Route& route, ScatterRequest req,
                         std::optional<Clock::time_point> retry_of)
    : s_(session), route_(route), req_(std::move(req)), started_(retry_of.value_or(Clock::now())),
      out_(take_answer_buffer()), retry_(retry_of.has_value()) {}

ScatterRead::~ScatterRead() { keep_answer_buffer(std::move(out_)); }

awaitable<bool> ScatterRead::run() {
  if (!retry_) s_.count_route(route_, RouteLabel::multi);
  if (!co_await plan()) co_return !s_.closing_;  // refused (the client was told), or wants_combine()
  co_await s_.pump_.drain();
  if (s_.closing_) co_return false;
  if (!co_await acquire()) co_return !s_.closing_;
  // (Never co_await inside a call's arguments here: GCC 12 then built a frame that
  // resumed with a garbage `this`.)
  auto ex = co_await asio::this_coro::executor;
  arm_deadline(ex);
  if (combine_) {
    co_await combine();
  } else {
    co_await describe();
    start_merge();
    if (wants_combine_) {  // nothing was sent to the client: the shards are let go
      reads_.stream_done = true;
      s_.cancel_.clear_scatter();
      reads_.timer->cancel();
      co_await clean_up();
      co_return !s_.closing_;
    }
    if (failure_.message.empty()) co_await stream();
  }
  reads_.stream_done = true;
  s_.cancel_.clear_scatter();
  reads_.timer->cancel();
  if (combine_) co_await end_combine();
  answer();
  if (release_block_) {
    co_await clean_up();
    co_await s_.release_aborted_block();
  }
  co_await send_answer();
  if (!release_block_) co_await clean_up();
  s_.metrics_.duration[static_cast<std::size_t>(RouteLabel::multi)].observe_since(started_);
  co_return !s_.closing_;
}

routing::ScatterOptions scatter_options(const Runtime& rt, const routing::Route& route,
                                        KeptShapes& keep) {
  routing::ScatterOptions o;
  auto topo = rt.topology;
  o.merge.is_reference_table = [topo](std::string_view t) {
    return topo->classify("", t).kind == routing::TableClass::Kind::reference;
  };
  o.combine.is_sharded_table = [topo](std::string_view schema, std::string_view t) {
    return topo->classify(schema, t).kind == routing::TableClass::Kind::sharded;
  };
  if (rt.combine)  // a combine database of its own has no reference table: they are pulled too
    o.combine.is_whole_table = [topo](std::string_view schema, std::string_view t) {
      return topo->classify(schema, t).kind == routing::TableClass::Kind::reference;
    };
  // Table columns (from the shards' catalogs) tell GROUP BY aliases from columns, and
  // which columns a combine step pulls.
  o.combine.table_shape = [shapes = rt.shapes, &keep](std::string_view t) { return shapes->find_kept(t, keep); };
  o.merge.table_columns = [shape = o.combine.table_shape](std::string_view t) -> const std::vector<std::string>* {
    const routing::TableShape* found = shape(t);
    return found ? &found->columns : nullptr;
  };
  o.combine_only = route.needs_combine;
  return o;
}

awaitable<bool> ScatterRead::plan() {
  auto o = scatter_options(*s_.runtime_, route_, shapes_used_);
  auto& shapes = s_.runtime_->shapes;
  splan_ = shapes->scatter_plans().plan(req_.sql, o, s_.settings_.routing.standard_conforming_strings);
  // A combine step pulls less and aggregates on the shards when it knows the tables.
  if (!splan_->missing_shapes.empty() && co_await s_.fetch_shapes(splan_->missing_shapes, shapes_used_))
    splan_ = shapes->scatter_plans().plan(req_.sql, o, s_.settings_.routing.standard_conforming_strings);
  if (splan_->error) {
    co_await s_.reject_unless_invalid(splan_->error->sqlstate, splan_->error->message, req_.sql,
                                      req_.extended ? &req_ : nullptr);
    co_return false;
  }
  // COPY (query) TO STDOUT and COPY table TO STDOUT: the rows of the query, merged as
  // the SELECT would be, written in the COPY format the statement asks for.
  if (splan_->merge && splan_->merge_refused->load() && !route_.needs_combine && !splan_->copy_out) {
    wants_combine_ = true;  // found by an earlier execution
    co_return false;
  }
  copy_out_ = splan_->copy_out ? &*splan_->copy_out : nullptr;
  plan_ = splan_->merge ? &*splan_->merge : nullptr;
  combine_ = splan_->combine ? &*splan_->combine : nullptr;
  // (Through the combine step the combine database writes the COPY; the shards' rows
  // reach it as text.)
  copy_binary_ = copy_out_ && !combine_ && copy_out_->format == routing::CopyStatement::Format::binary;
  co_return true;
}

// Backends for every shard, acquired all at once, each bounded by the deadline
// (ParallelAcquire gives back what arrives too late, so two scatters cannot hold each
// other's pools). Each shard gets the statement as soon as its connection is there;
// one that cannot be reached is missing at once, one still waiting at the deadline is
// missing as timed out.
awaitable<bool> ScatterRead::acquire() {
  const std::vector<std::size_t> targets = route_.target_shards(s_.pools_.size(), combine_ && combine_->all_shards);
  deadline_ = started_ + s_.scatter_deadline(route_);
  allow_partial_ = s_.scatter_allows_partial(route_);
  shards_.resize(targets.size());
  // A binary COPY needs the shards' values in binary: its statement goes out in the
  // extended protocol, every visible column in binary.
  shard_stmt_.extended = req_.extended || copy_binary_;
  shard_stmt_.result_formats = copy_binary_ ? std::vector<std::int16_t>(1, 1) : req_.result_formats;
  auto& metrics = s_.metrics_;
  {
    auto ex = co_await asio::this_coro::executor;
    ParallelAcquire acquiring(ex, deadline_);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      auto& sh = shards_[i];
      sh.index = targets[i];
      if (s_.held_[sh.index]) {
        sh.b = s_.held_[sh.index].get();
        continue;
      }
      if (s_.runtime_->standbys) sh.standby = co_await s_.hosts_.read_host(sh.index, route_);
      acquiring.start(i, sh.standby ? s_.hosts_.pool_on(sh.index, *sh.standby) : s_.pools_[sh.index]);
    }
    // The combine database's connection is one more, acquired with the others.
    if (combine_) {
      combining_.pool = s_.combine_pool();
      acquiring.start(shards_.size(), combining_.pool);
    }
    for (;;) {
      const bool all_acquired = acquiring.pending() == 0;  // before the pass below takes them
      if (combine_ && !combining_.sh.b) take_combine(acquiring);
      for (std::size_t i = 0; i < shards_.size(); ++i) {
        auto& sh = shards_[i];
        Clock::duration waited{};
        if (auto r = acquiring.take(i, waited)) {
          if (sh.index < kMaxShards)
            metrics.shards[sh.index].pool_wait.observe(std::chrono::duration<double>(waited).count());
          if (!r->backend && sh.standby) {  // the primary answers instead
            if (host_unreachable(r->sqlstate)) s_.hosts_.host_failed(sh.index, *sh.standby, BanReason::connect);
            sh.standby.reset();
            acquiring.start(i, s_.pools_[sh.index]);
            continue;
          }
          if (!r->backend) {
            sh.state = Shard::State::missing;
            sh.status = "error";
            sh.error = "unreachable: " + r->message;
            sh.done_at = Clock::now();
            if (sh.index < kMaxShards)
              metrics.shards[sh.index].missing[static_cast<std::size_t>(MissingReason::unreachable)].add();
            continue;
          }
          sh.borrowed = std::move(r->backend);
          sh.b = sh.borrowed.get();
        }
        if (sh.state != Shard::State::running || !sh.b || sh.sent || !shard_stmt_.prepare_error.empty()) continue;
        if (!shard_stmt_.prepared && !combine_) co_await prepare(*sh.b);
        if (shard_stmt_.prepare_error.empty()) co_await send_statement(sh);
      }
      if ((all_acquired && acquiring.pending() == 0) || Clock::now() >= deadline_ || !shard_stmt_.prepare_error.empty()) break;
      co_await acquiring.wait();
    }
    for (auto& sh : shards_) {
      if (sh.state != Shard::State::running || sh.b) continue;
      sh.state = Shard::State::missing;
      sh.status = "timeout";
      sh.error = "no connection within the deadline";
      sh.done_at = Clock::now();
      if (sh.index < kMaxShards) metrics.shards[sh.index].missing[static_cast<std::size_t>(MissingReason::timeout)].add();
    }
  }  // connections acquired after this point go back to their pools
  if (shard_stmt_.prepare_error.empty()) co_return true;
  s_.cancel_.clear_scatter();
  for (auto& sh : shards_)
    if (sh.borrowed) s_.hosts_.give_back(sh.index, std::move(sh.borrowed), true);
  co_await s_.reject(sqlstate::cannot_merge, shard_stmt_.prepare_error, req_.extended);
  co_return false;
}

// Once, on the first backend: the shards' result formats (the client's for visible
// columns, text for hidden ones; with binary results that needs the column count) and
// the database's collation.
awaitable<void> ScatterRead::prepare(Backend& b) {
  shard_stmt_.prepared = true;
  const bool any_binary =
      std::any_of(req_.result_formats.begin(), req_.result_formats.end(), [](auto f) { return f != 0; });
  if ((req_.extended && any_binary) || copy_binary_) {
    auto ncols = co_await s_.describe_columns(plan_->shard_sql, req_.param_types, &b);
    if (!ncols) {
      shard_stmt_.prepare_error = "cannot describe the multi-shard statement";
      co_return;
    }
    shard_stmt_.formats = plan_->shard_result_formats(shard_stmt_.result_formats, *ncols);
  }
  if (s_.runtime_->shapes->collation().empty()) {
    auto row = co_await first_row_on(b, kDatabaseCollationQuery, s_.limits_);
    if (!row) {
      shard_stmt_.prepare_error = "cannot read the database's collation";
      co_return;
    }
    s_.runtime_->shapes->set_collation(database_collation(row));
  }
}

awaitable<void> ScatterRead::send_statement(Shard& sh) {
  Backend* b = sh.b;
  std::string out;
  sh.skip_ready += s_.sync_backend_state(*b, out, true);
  std::optional<std::string> hidden;  // (SPEC §9)
  if (!combine_) hidden = s_.moves_.hide_foreign_rows(sh.index, route_, plan_->shard_sql);
  if (combine_) {
    encode_pulls(out, sh.index);
  } else if (!shard_stmt_.extended) {
    proto::Query{hidden ? *hidden : plan_->shard_sql}.encode(out);
  } else {
    const std::string& sql = hidden ? *hidden : plan_->shard_sql;
    auto bind = req_.bind(shard_stmt_.formats);
    std::string name;
    if (req_.named_since) {
      // Prepared on this backend under a name of its text and types, once: the shard
      // plans it as PostgreSQL plans a client's named statement. One made here before the
      // client's Parse is made again: a DDL since may have changed what the text means,
      // and PostgreSQL runs a new statement where the old one fails (0A000, "cached plan
      // must not change result type").
      const std::string rest = parse_rest_of(sql, req_.param_types);
      name = statement_name_for(rest);
      const auto made = b->prepared.made_at(name);
      if (!made || *made < *req_.named_since) {
        // (The first extended message since the backend's last Sync: no Close here
        // is skipped after an error.)
        if (made) proto::Close{'S', name}.encode(out);
        b->prepared.erase(name);
        for (const auto& old : b->prepared.make_room(s_.runtime_->config.max_prepared_statements))
          proto::Close{'S', old}.encode(out);
        proto::Writer w(out, 'P');
        w.cstr(name).bytes(rest).finish();
        b->prepared.made(name);
        sh.parsing = name;
      } else {
        b->prepared.use(name);
      }
      bind.statement = name;
    } else {
      proto::Parse{"", sql, req_.param_types}.encode(out);
    }
    bind.encode(out);
    proto::Describe{'P', ""}.encode(out);
    proto::Execute{"", 0}.encode(out);
    proto::encode_sync(out);
  }
  sh.sent = true;
  const auto& at = s_.runtime_->shards[sh.index]->hosts().endpoint(b->host);
  s_.cancel_.add_scatter(b, at.host, at.port, sh.index);
  auto ec = co_await send_all(b->socket, out);
  if (ec) {
    sh.state = Shard::State::missing;
    sh.status = "error";
    sh.error = "unreachable: " + ec.message();
    sh.finished = true;  // nothing to drain
  }
}

// The deadline interrupts the reads of shards still running (next_message sees it).
// A client that goes away meanwhile counts as its CancelRequest: the shards stop now,
// not at the deadline (a scatter waiting on silent shards reads nothing from the client
// and writes nothing to it). Gone is the end of its connection (EOF or an error), or a
// Terminate with nothing after it; a client that sent anything else is not watched further.
// The watch touches only the session (alive through `self`), never this object, and
// does nothing once the statement is over (no wait is cancelled: it ends with the
// client's next message).
void ScatterRead::arm_deadline(const asio::any_io_executor& ex) {
  auto& client = s_.stream_.socket();
  client.async_wait(tcp::socket::wait_read, [&client, self = s_.shared_from_this()](error_code ec) {
    if (ec) return;
    if (!self->cancel_.scatter_running()) return;  // the statement is over (the wait outlived it)
    char peek[8];
    const ssize_t n = ::recv(client.native_handle(), peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT);
    const bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
                      (n == 5 && peek[0] == 'X');
    if (!gone) return;
    spdlog::info("[{}] client gone during a multi-shard statement: cancelling it", self->id_);
    self->request_cancel(self->who_.cancel_secret);
  });
  reads_.timer = std::make_unique<asio::steady_timer>(ex, deadline_);
  reads_.timer->async_wait([this, alive = std::weak_ptr<const bool>(reads_.alive),
                            self = s_.shared_from_this()](error_code ec) {
    if (ec || alive.expired() || reads_.stream_done) return;  // (this object may be gone)
    reads_.timed_out = true;
    for (auto* sh : all_shards()) {
      if (sh->state != Shard::State::running || !sh->b) continue;
      error_code ignored;
      sh->b->socket.cancel(ignored);
    }
  });
}

// At the deadline, a shard that has already sent its whole answer has finished (SPEC
// §4) even if the merge has not consumed it yet: once, what the sockets of the shards
// still running already hold is read (up to scatter.max_buffered_rows rows each); after
// that nothing more is read and a shard whose answer is incomplete is missing.
awaitable<void> ScatterRead::settle_running() {
  reads_.settled = true;
  for (auto& o : shards_)
    if (o.state == Shard::State::running && o.b && o.sent && !o.finished)
      co_await read_finished_response(*o.b, o.consumed, o.skip_ready + 1,
                                      s_.runtime_->config.scatter.max_buffered_rows, s_.limits_);
}

ScatterRead::Taken ScatterRead::take_message(Shard& sh, char& type) {
  Backend* b = sh.b;
  for (;;) {
    auto r = proto::decode_frame(std::string_view(b->read_buf).substr(sh.consumed), proto::Direction::backend,
                                 s_.limits_);
    if (r.status == proto::FrameStatus::error) return Taken::failed;
    if (r.status == proto::FrameStatus::need_more) return Taken::need_bytes;
    type = r.frame.type;
    frame_body_ = r.frame.body;
    sh.consumed += r.frame.size;
    if (type == '1') sh.parsing.clear();  // (the only Parse on the connection is this statement's)
    if (type == 'Z') {
      b->status = frame_body_.empty() ? 'E' : frame_body_[0];
      frame_body_ = {};
      if (sh.skip_ready > 0) {
        --sh.skip_ready;  // an injected statement finished
        continue;
      }
      b->read_buf.erase(0, sh.consumed);
      sh.consumed = 0;
      sh.finished = true;
      return Taken::message;
    }
    if (sh.skip_ready > 0) continue;  // output of injected statements
    if (type == 'T' || type == 'D' || type == 'C' || type == 'E' || type == 'I' || type == 'n') return Taken::message;
    // The combine database's COPY TO STDOUT: CopyOutResponse, CopyData, CopyDone.
    if (type == 'H' || type == 'd' || type == 'c') return Taken::message;
    // ParseComplete, BindComplete, notices, ParameterStatus: nothing for the merge.
  }
}

awaitable<bool> ScatterRead::next_message(Shard& sh, char& type) {
  Backend* b = sh.b;
  for (;;) {
    switch (take_message(sh, type)) {
      case Taken::message: co_return true;
      case Taken::failed: co_return false;
      case Taken::need_bytes: break;
    }
    if (reads_.timed_out && !reads_.stream_done) {
      if (reads_.settled) co_return false;
      co_await settle_running();
      continue;
    }
    b->read_buf.erase(0, sh.consumed);
    sh.consumed = 0;
    if (b->read_buf.size() > 0 && b->read_buf.capacity() > (1u << 20)) b->read_buf.shrink_to_fit();
    if (co_await read_into(b->socket, b->read_buf, 65536)) {
      if (reads_.timed_out && !reads_.stream_done) continue;  // the timer interrupted this read
      co_return false;
    }
  }
}

void ScatterRead::mark_missing(Shard& sh, std::string status, std::string error) {
  if (sh.state != Shard::State::running) return;
  sh.state = Shard::State::missing;
  sh.status = std::move(status);
  sh.error = std::move(error);
  sh.done_at = Clock::now();
  MissingReason reason = sh.status == "timeout" ? MissingReason::timeout : MissingReason::error;
  if (sh.index < kMaxShards) s_.metrics_.shards[sh.index].missing[static_cast<std::size_t>(reason)].add();
}

std::string error_text(std::string_view body) {
  auto f = proto::ErrorFields::decode(body);
  return f ? std::string(f->get('C')) + " " + std::string(f->get('M')) : std::string("error");
}

void ScatterRead::rejected(Shard& sh) {
  sh.error_body = s_.shard_error(*sh.b, frame_body_);
  mark_missing(sh, "error", error_text(sh.error_body));
}

// A statement that fails because shards are missing fails with PostgreSQL's own error
// when every missing shard rejected it (a division by zero, a type error: what one
// PostgreSQL would have said); SPS01 is for shards that are down, late or unreachable.
void ScatterRead::prefer_shard_error() {
  if (failure_.code != sqlstate::scatter_incomplete || !failure_.body.empty()) return;
  const Shard* first = nullptr;
  for (const auto& sh : shards_) {
    if (sh.state != Shard::State::missing) continue;
    if (sh.error_body.empty()) return;
    if (!first) first = &sh;
  }
  if (first) failure_.body = first->error_body;
}

void ScatterRead::fail(std::string_view code, std::string message) {
  failure_.code = std::string(code);
  failure_.message = std::move(message);
}

std::string ScatterRead::missing_text() const {
  std::string m;
  for (auto& sh : shards_)
    if (sh.state == Shard::State::missing)
      m += (m.empty() ? "" : "; ") + s_.pools_[sh.index]->target().shard + " (" + sh.status + ": " + sh.error + ")";
  return m;
}

bool ScatterRead::any_missing() const {
  return std::any_of(shards_.begin(), shards_.end(), [](const Shard& sh) { return sh.state == Shard::State::missing; });
}

void ScatterRead::warn_missing() {
  if (warned_ || !any_missing()) return;
  warned_ = true;
  proto::ErrorFields::make("WARNING", sqlstate::partial_result, "partial result: missing shards: " + missing_text())
      .encode(out_, 'N');
}

// Every shard's RowDescription first: the client's comes from it.
awaitable<void> ScatterRead::describe() {
  for (auto& sh : shards_) {
    if (sh.state != Shard::State::running) continue;
    char type = 0;
    for (;;) {
      if (!co_await next_message(sh, type)) {
        mark_missing(sh, reads_.timed_out ? "timeout" : "error", reads_.timed_out ? "deadline passed" : "connection lost");
        break;
      }
      if (sh.finished) {
        mark_missing(sh, "error", "no result");
        break;
      }
      if (type == 'E') {
        rejected(sh);
        break;
      }
      if (type == 'T') {
        sh.fields_body = frame_body_;
        sh.fields = proto::RowDescription::decode(sh.fields_body);
        break;
      }
      if (type == 'n' || type == 'C' || type == 'I') {  // not a row-returning statement
        mark_missing(sh, "error", "statement returned no rows description");
        break;
      }
    }
  }
  // The client's RowDescription names types by the catalog shard's OIDs, those its
  // catalog reads find (docs/compatibility.md, "Tools"): that shard's own when it takes
  // part, else the first shard's with its user types' OIDs asked of the catalog shard.
  const std::size_t catalog = s_.catalog_shard();
  Shard* first = nullptr;
  for (auto& sh : shards_) {
    if (sh.state != Shard::State::running || !sh.fields) continue;
    if (!first || sh.index == catalog) first = &sh;
    if (sh.index == catalog) break;
  }
  first_ = first;
  if (!first || first->index == catalog || !has_user_type(*first->fields)) co_return;
  // The catalog shard's OIDs of the columns' types (a Parse and a Describe there, not
  // run) replace those of types made by CREATE TYPE; they stay when it cannot describe it.
  proto::RowDescription& fields = *first->fields;
  std::unique_ptr<Backend> borrowed;
  Backend* b = catalog < s_.held_.size() ? s_.held_[catalog].get() : nullptr;
  if (!b) {
    auto r = co_await s_.pools_[catalog]->acquire(s_.runtime_->config.timeouts.client_login);
    if (!r.backend) co_return;
    borrowed = std::move(r.backend);
    b = borrowed.get();
  }
  b->unnamed_owner = {0, 0};  // (replaced below: a client's unnamed statement is parsed again)
  std::string out;
  proto::Parse{"", plan_->shard_sql, req_.param_types}.encode(out);
  proto::Describe{'S', ""}.encode(out);
  proto::encode_sync(out);
  std::optional<proto::RowDescription> there;
  bool ok = !std::get<0>(co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow));
  if (ok)
    ok = co_await read_until_ready(*b, 1, s_.limits_, [&](char type, std::string_view, std::string_view body) {
      if (type == 'T') there = proto::RowDescription::decode(body);
    });
  if (borrowed) s_.hosts_.give_back(catalog, std::move(borrowed), ok);
  if (!there || there->fields.size() != fields.fields.size()) co_return;
  for (std::size_t i = 0; i < fields.fields.size(); ++i)
    if (is_user_type(fields.fields[i].type_oid) && same_type(fields.fields[i].type_oid, there->fields[i].type_oid))
      fields.fields[i].type_oid = there->fields[i].type_oid;
}

// The shards agree on the columns, the merger, and what the client sees first.
void ScatterRead::start_merge() {
  if (!first_) return fail(sqlstate::scatter_incomplete, "no shard answered: " + missing_text());
  for (auto& sh : shards_)
    if (sh.state == Shard::State::running && sh.fields && !same_columns(*sh.fields, *first_->fields))
      fail(sqlstate::cannot_merge,
           "shards disagree on the result columns (shard " + s_.pools_[sh.index]->target().shard + ")");
  if (failure_.message.empty() && any_missing() && !allow_partial_)
    fail(sqlstate::scatter_incomplete,
         "multi-shard statement incomplete, partial results denied; missing: " + missing_text());
  if (!failure_.message.empty()) return;
  routing::MergerOptions mo;
  mo.max_buffered_rows = s_.runtime_->config.scatter.max_buffered_rows;
  mo.collation = s_.runtime_->shapes->collation();
  std::vector<std::optional<std::string_view>> pvals;
  for (auto& p : req_.params) pvals.push_back(p ? std::optional<std::string_view>(*p) : std::nullopt);
  mo.params = routing::MergeParams{pvals, req_.param_formats, req_.param_types};
  auto created = routing::Merger::create(*plan_, shards_.size(), first_->fields->fields, mo);
  // Column types the merger cannot compare or combine (interval, money, arrays, json,
  // inet, ...): PostgreSQL combines them.
  const bool may_combine = !copy_out_ && !route_.needs_combine;
  if (auto* err = std::get_if<routing::MergeError>(&created)) {
    if (!may_combine || err->sqlstate != sqlstate::feature_not_supported) return fail(err->sqlstate, err->message);
    splan_->merge_refused->store(true);
    wants_combine_ = true;
    return;
  }
  merger_ = std::move(std::get<std::unique_ptr<routing::Merger>>(created));
  auto described = routing::client_row_description(*plan_, first_->fields->fields);
  if (!described && !may_combine) return fail(sqlstate::cannot_merge, "cannot describe the merged result");
  if (!described) {
    splan_->merge_refused->store(true);
    wants_combine_ = true;
    return;
  }
  if (copy_out_) return start_copy(*described);
  if (req_.describe) {
    proto::RowDescription rd;
    rd.fields = *described;
    rd.encode(out_);
  }
}

void ScatterRead::start_copy(const std::vector<proto::FieldDescription>& described) {
  std::vector<std::string> names;
  for (auto& f : described) names.emplace_back(f.name);
  copy_formatter_.emplace(*copy_out_, names);
  if (!copy_formatter_->error().empty()) return fail(sqlstate::invalid_column_reference, copy_formatter_->error());
  if (req_.extended && req_.describe) proto::encode_no_data(out_);  // a COPY's portal returns no rows
  if (!req_.emit_rows) return;
  proto::CopyResponse cr;
  cr.type = 'H';
  cr.format = copy_binary_ ? 1 : 0;
  cr.column_formats.assign(names.size(), copy_binary_ ? 1 : 0);
  cr.encode(out_);
  if (auto h = copy_formatter_->header(); !h.empty()) proto::CopyData{h}.encode(out_);
}

// The merger asks for rows shard by shard and emits the client's.
awaitable<void> ScatterRead::stream() {
  warn_missing();
  rows_pass_ = merger_->passes_through() && !copy_formatter_;
  for (;;) {
    auto step = merger_->next();
    switch (step.kind) {
      case routing::Merger::Step::Kind::emit:
        if (req_.emit_rows && copy_formatter_) {
          proto::Writer w(out_, 'd');  // one CopyData per row, as PostgreSQL sends them
          if (!copy_formatter_->row(step.row, out_)) {
            fail(sqlstate::internal_error, "malformed merged row");
            co_return;
          }
          w.finish();
        } else if (req_.emit_rows) {
          proto::Writer w(out_, 'D');
          w.bytes(step.row).finish();
        }
        break;
      case routing::Merger::Step::Kind::need_row: {
        // A message already read needs no suspension (most rows arrive many to a read).
        const std::size_t i = feeding(step.shard);
        char type = 0;
        Taken taken = shards_[i].state == Shard::State::running ? take_message(shards_[i], type) : Taken::failed;
        if (taken == Taken::need_bytes) {
          if (!co_await feed(i)) co_return;
        } else if (!fed(i, taken == Taken::message, type)) {
          co_return;
        }
        break;
      }
      case routing::Merger::Step::Kind::done:
        if (std::all_of(shards_.begin(), shards_.end(), [](auto& sh) { return sh.state == Shard::State::missing; }))
          fail(sqlstate::scatter_incomplete, "no shard answered: " + missing_text());
        co_return;
      case routing::Merger::Step::Kind::error:
        fail(merger_->error().sqlstate, merger_->error().message);
        co_return;
    }
    if (out_.size() >= kClientFlushBytes) {
      if (co_await s_.stream_.write(out_)) s_.closing_ = true;
      out_.clear();
      if (s_.closing_) co_return;
    }
  }
}

std::size_t ScatterRead::feeding(std::size_t i) const {
  if (i != routing::Merger::kAnyShard) return i;
  // A running shard; else one whose end the merger has not been told yet.
  for (std::size_t k = 0; k < shards_.size(); ++k)
    if (shards_[k].state == Shard::State::running) return k;
  for (std::size_t k = 0; k < shards_.size(); ++k)
    if (!shards_[k].merger_ended) return k;
  return i;
}

awaitable<bool> ScatterRead::feed(std::size_t i) {
  i = feeding(i);
  auto& sh = shards_[i];
  char type = 0;
  bool got = false;
  if (sh.state == Shard::State::running) got = co_await next_message(sh, type);  // (no co_await inside &&: GCC 12)
  co_return fed(i, got, type);
}

bool ScatterRead::fed(std::size_t i, bool got, char type) {
  auto& sh = shards_[i];
  if (sh.state != Shard::State::running) {
    // Missing before the merge started (down, failed, past the deadline).
  } else if (!got || sh.finished) {
    mark_missing(sh, reads_.timed_out ? "timeout" : "error", reads_.timed_out ? "deadline passed" : "connection lost");
  } else if (type == 'D') {
    ++sh.rows;
    if (!rows_pass_) {
      merger_->push(i, frame_body_);
      return true;
    }
    merger_->passed(i, frame_body_);  // the client's row as it is
    if (req_.emit_rows) proto::Writer(out_, 'D').bytes(frame_body_).finish();
    return true;
  } else if (type == 'C') {
    sh.state = Shard::State::ended;
    sh.done_at = Clock::now();
  } else if (type == 'E') {
    rejected(sh);
  }
  if (sh.state == Shard::State::missing) {
    if (!allow_partial_) {
      fail(sqlstate::scatter_incomplete,
           "multi-shard statement incomplete, partial results denied; missing: " + missing_text());
      return false;
    }
    warn_missing();
  }
  sh.merger_ended = true;
  merger_->end_of_shard(i);
  return true;
}

void ScatterRead::answer() {
  prefer_shard_error();
  if (!failure_.body.empty()) {  // the combine database's own error, every field of it
    auto f = proto::ErrorFields::decode(failure_.body);
    s_.metrics_.error(f ? f->get('C') : std::string_view(sqlstate::internal_error));
    proto::Writer(out_, 'E').bytes(failure_.body).finish();
  }
  if (!failure_.message.empty()) {
    if (failure_.body.empty()) {
      s_.metrics_.error(failure_.code);
      proto::ErrorFields::make("ERROR", failure_.code, failure_.message).encode(out_, 'E');
    }
    if (s_.fe_.client_txn != 'I') {
      // As in PostgreSQL the block is failed now, though the shards that answered
      // do not know: the proxy answers 25P02 until ROLLBACK. Its shards are let go
      // (Session::fail_block) once clean_up() has read them, before the client hears.
      s_.fe_.fail_block();
      release_block_ = s_.block_aborted();
    }
    if (req_.extended) s_.fe_.skip_until_sync = true;
  } else if (req_.emit_rows && copy_formatter_) {
    if (auto t = copy_formatter_->trailer(); !t.empty()) proto::CopyData{t}.encode(out_);
    proto::encode_copy_done(out_);
    proto::CommandComplete{"COPY " + std::to_string(merger_->rows_emitted())}.encode(out_);
  } else if (req_.emit_rows && combine_) {
    proto::CommandComplete{combining_.tag}.encode(out_);
  } else if (req_.emit_rows) {
    proto::CommandComplete{"SELECT " + std::to_string(merger_->rows_emitted())}.encode(out_);
  }
  if (!req_.extended) proto::ReadyForQuery{s_.fe_.client_txn}.encode(out_);
}

awaitable<void> ScatterRead::send_answer() {
  if (s_.closing_ || out_.empty()) co_return;
  // A small extended-protocol answer waits for the ReadyForQuery of its Sync, usually
  // next: one send for the whole exchange. A large one is not copied for that.
  if (req_.extended && out_.size() <= kDeferredAnswerBytes) {
    s_.stream_.defer(out_);
    co_return;
  }
  // (Not `else if (co_await ...)`: in this coroutine GCC 12 built a frame that was
  // resumed after it had ended, a SIGILL in test_deadlocks.)
  error_code ec = co_await s_.stream_.write(out_);
  if (ec) s_.closing_ = true;
}

// Every shard is read to its ReadyForQuery before its connection goes back to the pool;
// anything that fails to drain is closed.
awaitable<void> ScatterRead::clean_up() {
  s_.scatter_.last.clear();
  for (auto& sh : shards_) {
    bool reusable = sh.b != nullptr;
    if (sh.b && !sh.finished) co_await drain_shard(sh, reusable);
    if (sh.b && !sh.parsing.empty()) sh.b->prepared.erase(sh.parsing);  // its Parse failed
    if (sh.state == Shard::State::missing && !sh.b) reusable = false;
    if (sh.b && sh.b->status != 'I' && !s_.held_[sh.index] && s_.fe_.client_txn == 'I') reusable = false;
    auto elapsed = (sh.done_at == Clock::time_point{} ? Clock::now() : sh.done_at) - started_;
    s_.scatter_.last.push_back({s_.pools_[sh.index]->target().shard, sh.status,
                                sh.state == Shard::State::missing ? 0 : sh.rows,
                                std::chrono::duration<double, std::milli>(elapsed).count(), sh.error,
                                sh.b ? s_.hosts_.host_label(sh.index, sh.b->host) : std::string()});
    if (sh.borrowed) {
      if (s_.in_transaction() && reusable) {
        s_.held_[sh.index] = std::move(sh.borrowed);  // joined the transaction
      } else {
        s_.hosts_.give_back(sh.index, std::move(sh.borrowed), reusable);
      }
    } else if (sh.b && !reusable) {
      s_.release_shard(sh.index, false);
    }
    if (sh.index < kMaxShards)
      s_.metrics_.shards[sh.index].query.observe(std::chrono::duration<double>(elapsed).count());
  }
  for (std::size_t i = 0; i < s_.pools_.size(); ++i)
    if (std::none_of(shards_.begin(), shards_.end(), [i](const Shard& sh) { return sh.index == i; }))
      s_.scatter_.last.push_back({s_.pools_[i]->target().shard, "skipped", 0, 0.0, ""});
  if (combine_) {  // the combine step is one more row (SPEC §4.1)
    auto& c = combining_.sh;
    const bool missing = c.state == Shard::State::missing;
    // (named "combine" when scatter.combine is a database of its own)
    std::string name = s_.runtime_->combine ? "combine" : combining_.pool->target().shard + " (combine)";
    s_.scatter_.last.push_back({std::move(name), missing ? c.status : "ok",
                                c.rows, std::chrono::duration<double, std::milli>(Clock::now() - started_).count(),
                                missing ? c.error : ""});
  }
}

// A shard that answered (CommandComplete or an error seen) owes only its ReadyForQuery.
// One the merge stopped reading early (a LIMIT pushed down: it sent its rows and its
// CommandComplete, the merge needed fewer) has usually finished too: what its socket
// already holds says so. One still running (LIMIT reached, an error elsewhere, the
// deadline) is cancelled first, and its connection is never handed to another
// session: the cancel could land on that one's query. But in a transaction block, after
// a statement that succeeded, a cancel would abort the shard's block (the client's next
// statement there: 25P02): its rest is read instead, until the statement's deadline.
awaitable<void> ScatterRead::drain_shard(Shard& sh, bool& reusable) {
  bool answered = sh.state == Shard::State::ended || (sh.state == Shard::State::missing && sh.status != "timeout");
  if (!answered && sh.state == Shard::State::running && sh.sent)
    answered = co_await read_finished_response(*sh.b, sh.consumed, sh.skip_ready + 1,
                                               s_.runtime_->config.scatter.max_buffered_rows, s_.limits_);
  if (sh.state == Shard::State::running) sh.status = "ok";
  const auto& cfg = s_.runtime_->config;
  const bool keep_block = !answered && sh.state == Shard::State::running && failure_.message.empty() &&
                          s_.in_transaction() && Clock::now() < deadline_;
  if (!answered && !keep_block) {
    sh.b->cancel_sent = true;
    const auto& target = s_.hosts_.pool_on(sh.index, sh.b->host)->target();
    co_await send_cancel(target.host, target.port, sh.b->process_id, sh.b->secret_key, cfg.timeouts.server_connect);
  }
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer drain_timer(ex, cfg.timeouts.server_connect);
  if (keep_block) drain_timer.expires_at(deadline_);
  bool drained = false;
  drain_timer.async_wait([&drained, b = sh.b](error_code ec) {
    if (ec || drained) return;
    error_code ignored;
    b->socket.cancel(ignored);
  });
  char type = 0;
  for (;;) {
    if (!co_await next_message(sh, type)) {
      reusable = false;
      break;
    }
    if (sh.finished) break;
  }
  drained = true;
  drain_timer.cancel();
}

}  // namespace splitpoint::server
