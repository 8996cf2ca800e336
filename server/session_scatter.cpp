// Scatter-gather reads (SPEC §4): a SELECT that needs several shards runs on all of
// them at once, each on its own backend, and routing::Merger combines their rows so
// the client sees what one PostgreSQL holding every row would return. Every such
// statement has a deadline; shards that miss it, fail, or are down are reported as
// missing, and the partial-result rule decides between an error and a warning.
#include <spdlog/spdlog.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <charconv>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/copy_out.hpp"
#include "routing/merger.hpp"
#include "routing/session_command.hpp"
#include "server/scatter_io.hpp"
#include "server/session.hpp"
#include "server/session_util.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kClientFlushBytes = 64 * 1024;

std::optional<std::chrono::milliseconds> parse_ms(std::string_view v) {
  if (auto d = config::parse_duration(v)) return *d;
  return std::nullopt;
}

}  // namespace

// Deadline: hint > SET LOCAL > SET > config, capped by scatter.max_deadline.
std::chrono::milliseconds Session::scatter_deadline(const routing::Route& route) const {
  const auto& sc = runtime_->config.scatter;
  std::optional<std::chrono::milliseconds> d;
  for (auto& [k, v] : route.hints)
    if (k == "deadline") d = parse_ms(v);
  if (!d) d = local_setting_ms("deadline");
  if (!d) d = sc.deadline;
  return std::min(*d, sc.max_deadline);
}

bool Session::scatter_allows_partial(const routing::Route& route) const {
  for (auto& [k, v] : route.hints)
    if (k == "partial") return v == "allow";
  if (auto v = local_setting("partial_results")) return *v == "allow";
  return runtime_->config.scatter.partial_results == config::PartialResults::allow;
}

std::optional<std::string> Session::local_setting(std::string_view name) const {
  // SET LOCAL values (kept until the transaction ends) win over SET values.
  for (auto& [k, v] : local_txn_settings_)
    if (k == name) return v;
  for (auto& [k, v] : local_settings_)
    if (k == name) return v;
  return std::nullopt;
}

std::optional<std::chrono::milliseconds> Session::local_setting_ms(std::string_view name) const {
  if (auto v = local_setting(name)) return parse_ms(*v);
  return std::nullopt;
}

awaitable<bool> Session::scatter_read(const routing::Route& route, ScatterRequest req) {
  const auto started = Clock::now();
  auto& metrics = metrics_;
  count_route(route, RouteLabel::multi);

  // 1. How to merge.
  routing::MergeOptions mopts;
  auto topo = runtime_->topology;
  mopts.is_reference_table = [topo](std::string_view t) {
    return topo->classify("", t).kind == routing::TableClass::Kind::reference;
  };
  // Table columns (from the shards' catalogs) tell GROUP BY aliases from columns.
  std::vector<std::shared_ptr<const routing::TableShape>> shapes_used;
  auto shapes = runtime_->shapes;
  mopts.table_columns = [shapes, &shapes_used](std::string_view t) -> const std::vector<std::string>* {
    auto s = shapes->find(t);
    if (!s) return nullptr;
    shapes_used.push_back(s);
    return &s->columns;
  };
  // COPY (query) TO STDOUT and COPY table TO STDOUT: the rows of the query, merged as
  // the SELECT would be, written in the COPY format the statement asks for.
  std::optional<routing::CopyStatement> copy_out;
  std::string source_sql;
  if (routing::first_keyword(req.sql) == "copy") {
    std::string why;
    copy_out = routing::parse_copy(req.sql, &why);
    std::optional<std::string> source;
    if (copy_out && !copy_out->to_stdout) why = "COPY to a file or program cannot run on several shards";
    // The merged values arrive in the client's encoding; ENCODING would ask for another.
    if (copy_out && copy_out->encoding_given) why = "the ENCODING option is not supported for a merged COPY";
    if (copy_out && copy_out->to_stdout && why.empty()) source = routing::copy_source_query(req.sql, &why);
    if (!source)
      co_return co_await reject(copy_out ? sqlstate::cannot_merge : sqlstate::feature_not_supported,
                                "cannot copy from several shards: " + why, req.extended);
    source_sql = std::move(*source);
  }
  const bool copy_binary = copy_out && copy_out->format == routing::CopyStatement::Format::binary;
  auto planned = routing::plan_merge(copy_out ? std::string_view(source_sql) : std::string_view(req.sql), mopts);
  if (auto* err = std::get_if<routing::MergeError>(&planned))
    co_return co_await reject(err->sqlstate, err->message, req.extended);
  const auto& plan = std::get<routing::MergePlan>(planned);

  co_await drain();
  if (closing_) co_return false;

  std::vector<std::size_t> targets = route.shards;
  if (route.kind == routing::RouteKind::all_shards || targets.empty()) {
    targets.clear();
    for (std::size_t s = 0; s < pools_.size(); ++s) targets.push_back(s);
  }
  const auto deadline = started + scatter_deadline(route);
  const bool allow_partial = scatter_allows_partial(route);

  struct Shard {
    std::size_t index = 0;
    std::unique_ptr<Backend> borrowed;  // acquired for this statement (not held by a transaction)
    Backend* b = nullptr;
    enum class State : std::uint8_t { running, ended, missing } state = State::running;
    std::string status = "ok";  // ok | timeout | error | skipped
    std::string error;          // for SHOW splitpoint.last_scatter and messages
    std::uint64_t rows = 0;
    int skip_ready = 0;         // ReadyForQuery of statements injected before ours
    bool merger_ended = false;  // end_of_shard() was given to the merger
    bool described = false;
    bool finished = false;      // ReadyForQuery seen
    bool sent = false;          // the statement was sent
    std::size_t consumed = 0;   // bytes of b->read_buf already read as messages
    Clock::time_point done_at{};
    std::optional<proto::RowDescription> fields;
    std::string fields_body;
  };
  std::vector<Shard> shards(targets.size());

  // 2. Backends for every shard, acquired all at once, each bounded by the deadline
  //    (ParallelAcquire gives back what arrives too late, so two scatters cannot hold
  //    each other's pools). Each shard gets the statement as soon as its connection is
  //    there; one that cannot be reached is missing at once, one still waiting at the
  //    deadline is missing as timed out.
  std::vector<std::int16_t> shard_formats;
  bool any_binary = std::any_of(req.result_formats.begin(), req.result_formats.end(), [](auto f) { return f != 0; });
  // A binary COPY needs the shards' values in binary: its statement goes out in the
  // extended protocol, every visible column in binary.
  const bool shard_extended = req.extended || copy_binary;
  std::vector<std::int16_t> result_formats = copy_binary ? std::vector<std::int16_t>(1, 1) : req.result_formats;
  bool prepared = false;
  std::string prepare_error;
  // Once, on the first backend: the shards' result formats (the client's for visible
  // columns, text for hidden ones; with binary results that needs the column count)
  // and the database's collation.
  auto prepare = [&](Backend& b) -> awaitable<void> {
    prepared = true;
    if ((req.extended && any_binary) || copy_binary) {
      auto ncols = co_await describe_columns(plan.shard_sql, req.param_types, &b);
      if (!ncols) {
        prepare_error = "cannot describe the multi-shard statement";
        co_return;
      }
      shard_formats = plan.shard_result_formats(result_formats, *ncols);
    }
    if (runtime_->shapes->collation().empty()) {
      auto row = co_await first_row_on(b, kDatabaseCollationQuery, limits_);
      if (!row) {
        prepare_error = "cannot read the database's collation";
        co_return;
      }
      runtime_->shapes->set_collation(database_collation(row));
    }
  };
  auto send_statement = [&](Shard& sh) -> awaitable<void> {
    Backend* b = sh.b;
    std::string out;
    sh.skip_ready += sync_backend_state(*b, out, true);
    if (!shard_extended) {
      proto::Query{plan.shard_sql}.encode(out);
    } else {
      proto::Parse parse{"", plan.shard_sql, req.param_types};
      parse.encode(out);
      proto::Bind bind;
      bind.param_formats = req.param_formats;
      for (auto& p : req.params) bind.params.push_back(p ? std::optional<std::string_view>(*p) : std::nullopt);
      bind.result_formats = shard_formats;
      bind.encode(out);
      proto::Describe{'P', ""}.encode(out);
      proto::Execute{"", 0}.encode(out);
      proto::encode_sync(out);
    }
    sh.sent = true;
    auto [ec, n] = co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow);
    if (ec) {
      sh.state = Shard::State::missing;
      sh.status = "error";
      sh.error = "unreachable: " + ec.message();
      sh.finished = true;  // nothing to drain
    }
  };
  {
    ParallelAcquire acquiring(co_await asio::this_coro::executor, deadline);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      auto& sh = shards[i];
      sh.index = targets[i];
      if (held_[sh.index]) {
        sh.b = held_[sh.index].get();
      } else {
        acquiring.start(i, pools_[sh.index]);
      }
    }
    for (;;) {
      const bool all_acquired = acquiring.pending() == 0;  // before the pass below takes them
      for (std::size_t i = 0; i < shards.size(); ++i) {
        auto& sh = shards[i];
        Clock::duration waited{};
        if (auto r = acquiring.take(i, waited)) {
          if (sh.index < kMaxShards)
            metrics.shards[sh.index].pool_wait.observe(std::chrono::duration<double>(waited).count());
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
        if (sh.state != Shard::State::running || !sh.b || sh.sent || !prepare_error.empty()) continue;
        if (!prepared) co_await prepare(*sh.b);
        if (prepare_error.empty()) co_await send_statement(sh);
      }
      if (all_acquired || Clock::now() >= deadline || !prepare_error.empty()) break;
      co_await acquiring.wait();
    }
    for (auto& sh : shards) {
      if (sh.state != Shard::State::running || sh.b) continue;
      sh.state = Shard::State::missing;
      sh.status = "timeout";
      sh.error = "no connection within the deadline";
      sh.done_at = Clock::now();
      if (sh.index < kMaxShards) metrics.shards[sh.index].missing[static_cast<std::size_t>(MissingReason::timeout)].add();
    }
  }  // connections acquired after this point go back to their pools
  if (!prepare_error.empty()) {
    for (auto& sh : shards)
      if (sh.borrowed) pools_[sh.index]->release(std::move(sh.borrowed), true);
    co_return co_await reject(sqlstate::cannot_merge, prepare_error, req.extended);
  }

  // 4. The deadline cancels whatever is still running.
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex, deadline);
  bool timed_out = false;
  bool stream_done = false;
  auto self = shared_from_this();
  timer.async_wait([&, self](error_code ec) {
    if (ec || stream_done) return;
    timed_out = true;
    for (auto& sh : shards) {
      if (sh.state != Shard::State::running || !sh.b) continue;
      error_code ignored;
      sh.b->socket.cancel(ignored);
    }
  });

  // Reads the next message of a shard that matters to the merge: RowDescription,
  // DataRow, CommandComplete or ErrorResponse (others are consumed here).
  std::string frame_body;
  // At the deadline, a shard that has already sent its whole answer has finished (SPEC
  // §4) even if the merge has not consumed it yet: once, what the sockets of the shards
  // still running already hold is read (up to scatter.max_buffered_rows rows each);
  // after that nothing more is read and a shard whose answer is incomplete is missing.
  bool settled = false;
  auto settle_running = [&]() -> awaitable<void> {
    settled = true;
    for (auto& o : shards)
      if (o.state == Shard::State::running && o.b && o.sent && !o.finished)
        co_await read_finished_response(*o.b, o.consumed, o.skip_ready + 1,
                                        runtime_->config.scatter.max_buffered_rows, limits_);
  };
  auto next_message = [&](Shard& sh, char& type) -> awaitable<bool> {
    Backend* b = sh.b;
    for (;;) {
      auto r = proto::decode_frame(std::string_view(b->read_buf).substr(sh.consumed), proto::Direction::backend,
                                   limits_);
      if (r.status == proto::FrameStatus::error) co_return false;
      if (r.status == proto::FrameStatus::need_more) {
        if (timed_out && !stream_done) {
          if (settled) co_return false;
          co_await settle_running();
          continue;
        }
        b->read_buf.erase(0, sh.consumed);
        sh.consumed = 0;
        if (b->read_buf.size() > 0 && b->read_buf.capacity() > (1u << 20)) b->read_buf.shrink_to_fit();
        if (co_await read_into(b->socket, b->read_buf, 65536)) {
          if (timed_out && !stream_done) continue;  // the timer interrupted this read
          co_return false;
        }
        continue;
      }
      type = r.frame.type;
      frame_body.assign(r.frame.body);
      sh.consumed += r.frame.size;
      if (type == 'Z') {
        b->status = frame_body.empty() ? 'E' : frame_body[0];
        if (sh.skip_ready > 0) {
          --sh.skip_ready;  // an injected statement finished
          continue;
        }
        b->read_buf.erase(0, sh.consumed);
        sh.consumed = 0;
        sh.finished = true;
        co_return true;
      }
      if (sh.skip_ready > 0) continue;  // output of injected statements
      if (type == 'T' || type == 'D' || type == 'C' || type == 'E' || type == 'I' || type == 'n') co_return true;
      // ParseComplete, BindComplete, notices, ParameterStatus: nothing for the merge.
    }
  };

  auto mark_missing = [&](Shard& sh, std::string status, std::string error) {
    if (sh.state != Shard::State::running) return;
    sh.state = Shard::State::missing;
    sh.status = std::move(status);
    sh.error = std::move(error);
    sh.done_at = Clock::now();
    MissingReason reason = sh.status == "timeout" ? MissingReason::timeout : MissingReason::error;
    if (sh.index < kMaxShards) metrics.shards[sh.index].missing[static_cast<std::size_t>(reason)].add();
  };

  // 5. Every shard's RowDescription first: the client's comes from it.
  for (auto& sh : shards) {
    if (sh.state != Shard::State::running) continue;
    char type = 0;
    for (;;) {
      if (!co_await next_message(sh, type)) {
        mark_missing(sh, timed_out ? "timeout" : "error", timed_out ? "deadline passed" : "connection lost");
        break;
      }
      if (sh.finished) {
        mark_missing(sh, "error", "no result");
        break;
      }
      if (type == 'E') {
        auto f = proto::ErrorFields::decode(frame_body);
        mark_missing(sh, "error",
                     f ? std::string(f->get('C')) + " " + std::string(f->get('M')) : std::string("error"));
        break;
      }
      if (type == 'T') {
        sh.fields_body = frame_body;
        sh.fields = proto::RowDescription::decode(sh.fields_body);
        sh.described = true;
        break;
      }
      if (type == 'n' || type == 'C' || type == 'I') {  // not a row-returning statement
        mark_missing(sh, "error", "statement returned no rows description");
        break;
      }
    }
  }

  std::string out;  // for the client
  const Shard* first = nullptr;
  for (auto& sh : shards)
    if (sh.state == Shard::State::running && sh.fields && !first) first = &sh;
  std::string failure;  // SQLSTATE + message when the statement fails as a whole
  std::string failure_code;
  std::unique_ptr<routing::Merger> merger;
  std::optional<routing::CopyOutFormatter> copy_formatter;
  auto missing_text = [&] {
    std::string m;
    for (auto& sh : shards)
      if (sh.state == Shard::State::missing)
        m += (m.empty() ? "" : "; ") + pools_[sh.index]->target().shard + " (" + sh.status + ": " + sh.error + ")";
    return m;
  };
  auto any_missing = [&] {
    for (auto& sh : shards)
      if (sh.state == Shard::State::missing) return true;
    return false;
  };

  if (!first) {
    failure_code = sqlstate::scatter_incomplete;
    failure = "no shard answered: " + missing_text();
  } else {
    // Table OIDs differ from shard to shard; names, types and formats must not.
    auto same_columns = [](const proto::RowDescription& a, const proto::RowDescription& b) {
      if (a.fields.size() != b.fields.size()) return false;
      for (std::size_t i = 0; i < a.fields.size(); ++i) {
        const auto &x = a.fields[i], &y = b.fields[i];
        if (x.name != y.name || x.type_oid != y.type_oid || x.type_size != y.type_size ||
            x.type_modifier != y.type_modifier || x.format != y.format)
          return false;
      }
      return true;
    };
    for (auto& sh : shards) {
      if (sh.state != Shard::State::running || !sh.fields) continue;
      if (!same_columns(*sh.fields, *first->fields)) {
        failure_code = sqlstate::cannot_merge;
        failure = "shards disagree on the result columns (shard " + pools_[sh.index]->target().shard + ")";
      }
    }
  }
  if (failure.empty() && any_missing() && !allow_partial) {
    failure_code = sqlstate::scatter_incomplete;
    failure = "multi-shard statement incomplete, partial results denied; missing: " + missing_text();
  }
  if (failure.empty()) {
    routing::MergerOptions mo;
    mo.max_buffered_rows = runtime_->config.scatter.max_buffered_rows;
    mo.collation = runtime_->shapes->collation();
    std::vector<std::optional<std::string_view>> pvals;
    for (auto& p : req.params) pvals.push_back(p ? std::optional<std::string_view>(*p) : std::nullopt);
    mo.params = routing::MergeParams{pvals, req.param_formats, req.param_types};
    auto created = routing::Merger::create(plan, shards.size(), first->fields->fields, mo);
    if (auto* err = std::get_if<routing::MergeError>(&created)) {
      failure_code = err->sqlstate;
      failure = err->message;
    } else {
      merger = std::move(std::get<std::unique_ptr<routing::Merger>>(created));
      auto described = routing::client_row_description(plan, first->fields->fields);
      if (!described) {
        failure_code = sqlstate::cannot_merge;
        failure = "cannot describe the merged result";
      } else if (copy_out) {
        std::vector<std::string> names;
        for (auto& f : *described) names.emplace_back(f.name);
        copy_formatter.emplace(*copy_out, names);
        if (!copy_formatter->error().empty()) {
          failure_code = sqlstate::invalid_column_reference;
          failure = copy_formatter->error();
        } else {
          if (req.extended && req.describe) proto::encode_no_data(out);  // a COPY's portal returns no rows
          if (req.emit_rows) {
            proto::CopyResponse cr;
            cr.type = 'H';
            cr.format = copy_binary ? 1 : 0;
            cr.column_formats.assign(names.size(), copy_binary ? 1 : 0);
            cr.encode(out);
            if (auto h = copy_formatter->header(); !h.empty()) proto::CopyData{h}.encode(out);
          }
        }
      } else if (req.describe) {
        proto::RowDescription rd;
        rd.fields = *described;
        rd.encode(out);
      }
    }
  }
  bool warned = false;
  auto warn_missing = [&] {
    if (warned || !any_missing()) return;
    warned = true;
    proto::ErrorFields::make("WARNING", sqlstate::partial_result, "partial result: missing shards: " + missing_text())
        .encode(out, 'N');
  };

  // 6. Stream: the merger asks for rows shard by shard and emits the client's.
  if (failure.empty()) {
    warn_missing();
    bool running = true;
    while (running) {
      auto step = merger->next();
      switch (step.kind) {
        case routing::Merger::Step::Kind::emit: {
          if (req.emit_rows && copy_formatter) {
            proto::Writer w(out, 'd');  // one CopyData per row, as PostgreSQL sends them
            if (!copy_formatter->row(step.row, out)) {
              failure_code = sqlstate::internal_error;
              failure = "malformed merged row";
              running = false;
            }
            w.finish();
          } else if (req.emit_rows) {
            proto::Writer w(out, 'D');
            w.bytes(step.row).finish();
          }
          if (out.size() >= kClientFlushBytes) {
            if (co_await stream_.write(out)) closing_ = true;
            out.clear();
            if (closing_) running = false;
          }
          break;
        }
        case routing::Merger::Step::Kind::need_row: {
          std::size_t i = step.shard;
          if (i == routing::Merger::kAnyShard) {
            // A running shard; else one whose end the merger has not been told yet.
            for (std::size_t k = 0; k < shards.size() && i == routing::Merger::kAnyShard; ++k)
              if (shards[k].state == Shard::State::running) i = k;
            for (std::size_t k = 0; k < shards.size() && i == routing::Merger::kAnyShard; ++k)
              if (!shards[k].merger_ended) i = k;
          }
          auto& sh = shards[i];
          char type = 0;
          if (sh.state != Shard::State::running) {
            // Missing before the merge started (down, failed, past the deadline).
          } else if (!co_await next_message(sh, type) || sh.finished) {
            mark_missing(sh, timed_out ? "timeout" : "error", timed_out ? "deadline passed" : "connection lost");
          } else if (type == 'D') {
            ++sh.rows;
            merger->push(i, frame_body);
            break;
          } else if (type == 'C') {
            sh.state = Shard::State::ended;
            sh.done_at = Clock::now();
          } else if (type == 'E') {
            auto f = proto::ErrorFields::decode(frame_body);
            mark_missing(sh, "error", f ? std::string(f->get('C')) + " " + std::string(f->get('M')) : "error");
          }
          if (sh.state == Shard::State::missing) {
            if (!allow_partial) {
              failure_code = sqlstate::scatter_incomplete;
              failure = "multi-shard statement incomplete, partial results denied; missing: " + missing_text();
              running = false;
              break;
            }
            warn_missing();
          }
          sh.merger_ended = true;
          merger->end_of_shard(i);
          break;
        }
        case routing::Merger::Step::Kind::done:
          running = false;
          break;
        case routing::Merger::Step::Kind::error:
          failure_code = merger->error().sqlstate;
          failure = merger->error().message;
          running = false;
          break;
      }
    }
    bool all_missing = true;
    for (auto& sh : shards)
      if (sh.state != Shard::State::missing) all_missing = false;
    if (failure.empty() && all_missing) {
      failure_code = sqlstate::scatter_incomplete;
      failure = "no shard answered: " + missing_text();
    }
  }
  stream_done = true;
  timer.cancel();

  // 7. Answer the client.
  if (!failure.empty()) {
    metrics.error(failure_code);
    proto::ErrorFields::make("ERROR", failure_code, failure).encode(out, 'E');
    if (client_txn_ != 'I') client_txn_ = 'E';
    if (req.extended) skip_until_sync_ = true;
  } else if (req.emit_rows && copy_formatter) {
    if (auto t = copy_formatter->trailer(); !t.empty()) proto::CopyData{t}.encode(out);
    proto::encode_copy_done(out);
    proto::CommandComplete{"COPY " + std::to_string(merger->rows_emitted())}.encode(out);
  } else if (req.emit_rows) {
    proto::CommandComplete{"SELECT " + std::to_string(merger->rows_emitted())}.encode(out);
  }
  if (!req.extended) proto::ReadyForQuery{client_txn_}.encode(out);
  if (!closing_ && !out.empty() && co_await stream_.write(out)) closing_ = true;

  // 8. Clean up: every shard is read to its ReadyForQuery before its connection goes
  //    back to the pool; anything that fails to drain is closed. A shard that answered
  //    (CommandComplete or an error seen) owes only that. One still running (LIMIT
  //    reached, an error elsewhere, the deadline) is cancelled first, and its connection
  //    is never handed to another session: the cancel could land on that one's query.
  last_scatter_.clear();
  for (auto& sh : shards) {
    bool reusable = sh.b != nullptr;
    if (sh.b && !sh.finished) {
      // A shard the merge stopped reading early (a LIMIT pushed down: it sent its rows
      // and its CommandComplete, the merge needed fewer) has usually finished too: what
      // its socket already holds says so.
      bool answered = sh.state == Shard::State::ended || (sh.state == Shard::State::missing && sh.status != "timeout");
      if (!answered && sh.state == Shard::State::running && sh.sent)
        answered = co_await read_finished_response(*sh.b, sh.consumed, sh.skip_ready + 1,
                                                   runtime_->config.scatter.max_buffered_rows, limits_);
      if (sh.state == Shard::State::running) sh.status = "ok";
      if (!answered) {
        sh.b->cancel_sent = true;
        co_await send_cancel(pools_[sh.index]->target().host, pools_[sh.index]->target().port, sh.b->process_id,
                             sh.b->secret_key, runtime_->config.timeouts.server_connect);
      }
      asio::steady_timer drain_timer(ex, runtime_->config.timeouts.server_connect);
      bool drained = false;
      drain_timer.async_wait([&, b = sh.b](error_code ec) {
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
    if (sh.state == Shard::State::missing && !sh.b) reusable = false;
    if (sh.b && sh.b->status != 'I' && !held_[sh.index] && client_txn_ == 'I') reusable = false;
    auto elapsed = (sh.done_at == Clock::time_point{} ? Clock::now() : sh.done_at) - started;
    last_scatter_.push_back({pools_[sh.index]->target().shard, sh.status, sh.state == Shard::State::missing ? 0 : sh.rows,
                             std::chrono::duration<double, std::milli>(elapsed).count(), sh.error});
    if (sh.borrowed) {
      if (in_transaction() && reusable) {
        held_[sh.index] = std::move(sh.borrowed);  // joined the transaction
      } else {
        pools_[sh.index]->release(std::move(sh.borrowed), reusable);
      }
    } else if (sh.b && !reusable) {
      release_shard(sh.index, false);
    }
    if (sh.index < kMaxShards) metrics.shards[sh.index].query.observe(std::chrono::duration<double>(elapsed).count());
  }
  for (std::size_t s = 0; s < pools_.size(); ++s)
    if (std::find(targets.begin(), targets.end(), s) == targets.end())
      last_scatter_.push_back({pools_[s]->target().shard, "skipped", 0, 0.0, ""});
  metrics.duration[static_cast<std::size_t>(RouteLabel::multi)].observe_since(started);
  co_return !closing_;
}

// Number of result columns of `sql` (one Parse + Describe on `on`, else on any shard).
awaitable<std::optional<std::size_t>> Session::describe_columns(const std::string& sql,
                                                                const std::vector<std::int32_t>& types, Backend* on) {
  std::size_t shard = pick_any_shard();
  std::unique_ptr<Backend> borrowed;
  Backend* b = on != nullptr ? on : held_[shard].get();
  if (!b) {
    auto r = co_await pools_[shard]->acquire(runtime_->config.timeouts.client_login);
    if (!r.backend) co_return std::nullopt;
    borrowed = std::move(r.backend);
    b = borrowed.get();
  }
  std::string out;
  proto::Parse{"", sql, types}.encode(out);
  proto::Describe{'S', ""}.encode(out);
  proto::encode_sync(out);
  std::optional<std::size_t> columns;
  bool ok = !std::get<0>(co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow));
  if (ok)
    ok = co_await read_until_ready(*b, 1, limits_, [&](char type, std::string_view, std::string_view body) {
      if (type == 'T')
        if (auto rd = proto::RowDescription::decode(body)) columns = rd->fields.size();
    });
  if (borrowed) pools_[shard]->release(std::move(borrowed), ok);
  co_return columns;
}

}  // namespace splitpoint::server
