// COPY ... FROM STDIN into a sharded table (split by key) or a reference table (a copy
// to every shard), the COPY-in executor: the client's CopyData stream is cut into rows
// (routing/copy.hpp) and each row goes to the shard that owns its key, in one COPY per
// shard. Its phases, in the order run() calls them:
//   find_key()         where the key is in each row (the table's shape, read if unknown),
//                      and the columns the proxy fills (sequence defaults the list leaves out)
//   start()            COPY started on every shard; the first CopyInResponse is the client's
//   take_client_data() the client's CopyData, cut into rows, routed, written in large writes
//   finish()           CopyDone (with the binary trailer) or CopyFail on every shard
//   answer()           one CommandComplete or error for the client
#include <spdlog/spdlog.h>

#include <charconv>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/copy.hpp"
#include "routing/insert_split.hpp"
#include "routing/router.hpp"
#include "server/session/execute/multi_shard_write.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

constexpr std::size_t kCopyFlushBytes = 256 * 1024;
constexpr std::size_t kFillBlock = 1024;  // values of a filled column taken at a time

// A binary COPY key field as PostgreSQL's text form, for partitioning.
std::optional<std::string> binary_key_as_text(const routing::ColumnType& type, std::string_view raw) {
  using routing::KeyType;
  if (!type.hash_type) return std::nullopt;
  auto be = [&](std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(raw[i]);
    return v;
  };
  switch (*type.hash_type) {
    case KeyType::int2:
      if (raw.size() != 2) return std::nullopt;
      return std::to_string(static_cast<std::int16_t>(be(2)));
    case KeyType::int4:
      if (raw.size() != 4) return std::nullopt;
      return std::to_string(static_cast<std::int32_t>(be(4)));
    case KeyType::int8:
      if (raw.size() != 8) return std::nullopt;
      return std::to_string(static_cast<std::int64_t>(be(8)));
    case KeyType::uuid: {
      if (raw.size() != 16) return std::nullopt;
      static const char* hex = "0123456789abcdef";
      std::string s;
      for (std::size_t i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
        s.push_back(hex[static_cast<unsigned char>(raw[i]) >> 4]);
        s.push_back(hex[static_cast<unsigned char>(raw[i]) & 15]);
      }
      return s;
    }
    case KeyType::text:
    case KeyType::varchar:
      return std::string(raw);
  }
  return std::nullopt;
}

// A column whose default draws from a sequence and which the COPY's column list leaves
// out: each shard would number its rows from its own copy of the sequence, so the
// proxy appends the column and gives every row a value drawn from one shard's (SPEC §3).
struct Fill {
  routing::KeyRequest request;
  std::vector<std::string> values;  // drawn, not used yet (from the back)
  std::string sequence;             // where they come from (KeyCache::Source)
  std::string last;                 // the last one used
};

// One shard's side of the COPY.
struct ShardCopy {
  std::string out;        // CopyData messages not yet written
  bool prologue_sent = false;
  bool started = false;
  std::string error;      // ErrorResponse body
  std::string tag;
  bool lost = false;
};

}  // namespace

class CopyIn {
 public:
  CopyIn(Session& s, const proto::Frame& f, std::string sql, const routing::CopyStatement& cs)
      : s_(s), f_(f), sql_(std::move(sql)), cs_(cs), topo_(*s.runtime_->topology),
        cls_(topo_.classify(cs.schema, cs.table)), sharded_(cls_.kind == routing::TableClass::Kind::sharded),
        table_(routing::Topology::table_name(cs.schema, cs.table)), in_txn_(s.in_transaction()),
        shards_(s.pools_.size()) {}

  awaitable<bool> run();

 private:
  awaitable<bool> find_key();
  awaitable<bool> plan_fills(const routing::TableShape& shape);
  awaitable<void> start();
  awaitable<bool> start_on(std::size_t s);
  awaitable<void> take_client_data();
  awaitable<void> route_rows();
  awaitable<bool> fill_row(std::string_view bytes, std::string& out);
  awaitable<void> flush(bool done);
  awaitable<void> finish();
  awaitable<void> answer();
  void fail(std::string reason, std::string code) {
    fail_reason_ = std::move(reason);
    fail_code_ = std::move(code);
  }

  Session& s_;
  const proto::Frame& f_;
  std::string sql_;  // what the shards run (with the filled columns appended)
  const routing::CopyStatement& cs_;
  const routing::Topology& topo_;
  const routing::TableClass cls_;
  const bool sharded_;
  const std::string table_;
  const bool in_txn_;
  std::vector<ShardCopy> shards_;
  std::vector<Fill> fills_;
  std::vector<std::string> fill_values_;  // (one row's, reused)
  std::vector<int> fill_widths_;  // binary COPY: each filled integer's bytes
  // Where the key is in each row, and how to read it.
  std::size_t key_index_ = 0;
  routing::ColumnType key_type_;
  std::optional<routing::CopySplitter> splitter_;
  std::vector<std::uint64_t> partition_rows_;  // rows sent per partition, for rows_written
  std::string copy_in_response_;  // the first shard's: what the client sees
  std::string start_error_;
  std::string fail_reason_;  // set: abort with CopyFail on every shard
  std::string fail_code_;
  bool client_failed_ = false;
};

// (Coroutines of this class are defined outside it: GCC 12 miscompiled run() defined in
// the class body, which then died with SIGILL.)
awaitable<bool> CopyIn::run() {
  // Writes only, by key: nothing it sends reads through the moves' views, so the catalog
  // need not wait for it (a long load would hold up every move; SPEC §9).
  s_.moves_.statement_ended();
  if (in_txn_ && shards_.size() > 1 && !s_.txn_.two_phase()) {
    co_await s_.reject(sqlstate::cross_shard_write,
                       "COPY into \"" + table_ + "\" may write to several shards, which a transaction may not", false);
    co_return !s_.closing_;
  }
  if (sharded_) {
    const bool found = co_await find_key();
    if (!found) co_return !s_.closing_;
  }
  co_await s_.pump_.drain();
  if (s_.closing_) co_return false;
  co_await start();
  if (!start_error_.empty()) {
    fail_reason_ = "COPY could not start on every shard";
  } else {
    co_await take_client_data();
  }
  co_await finish();
  for (auto& fill : fills_) {  // (what the rows did not use serves the next statements)
    s_.runtime_->keys->put_back(s_.keys_.key_cache_key(fill.request), {fill.values.rbegin(), fill.values.rend()});
    if (!fill.last.empty()) s_.keys_.note_drawn(fill.sequence, fill.last);
  }
  co_await answer();
  co_return !s_.closing_;
}

awaitable<bool> CopyIn::find_key() {
  if (topo_.salted(cls_.distribution)) {  // (its rows would need the salt column's bucket too)
    co_await s_.reject(sqlstate::feature_not_supported,
                       "COPY into salted table \"" + table_ + "\" over several shards is not supported; use INSERT",
                       false);
    co_return false;
  }
  auto shape = s_.runtime_->shapes->find(table_);
  if (!shape) {
    std::vector<std::string> wanted(1, table_);  // (no braced list: GCC 12 coroutine bug)
    KeptShapes fetched;
    if (!co_await s_.fetch_shapes(wanted, fetched)) {
      co_await s_.reject(sqlstate::connection_failure, "cannot read the definition of " + table_, false);
      co_return false;
    }
    shape = fetched.front();
  }
  if (!shape || shape->columns.empty()) {
    co_await s_.reject(sqlstate::undefined_table, "relation \"" + table_ + "\" does not exist", false);
    co_return false;
  }
  const auto& cols = cs_.columns.empty() ? shape->columns : cs_.columns;
  auto it = std::find(cols.begin(), cols.end(), cls_.key_column);
  if (it == cols.end()) {
    co_await s_.reject(sqlstate::no_shard_key,
                       "COPY into sharded table \"" + table_ + "\" must include its key column \"" +
                           cls_.key_column + "\"",
                       false);
    co_return false;
  }
  key_index_ = static_cast<std::size_t>(it - cols.begin());
  auto tcol = std::find(shape->columns.begin(), shape->columns.end(), cls_.key_column);
  if (tcol != shape->columns.end())
    key_type_ = routing::column_type(shape->types[static_cast<std::size_t>(tcol - shape->columns.begin())]);
  co_return co_await plan_fills(*shape);
}

// The sequence columns the column list leaves out (none without a column list: every
// column is then in the rows), and the statement the shards run with them appended.
awaitable<bool> CopyIn::plan_fills(const routing::TableShape& shape) {
  if (cs_.columns.empty()) co_return true;
  std::vector<std::string> names;
  for (const auto& c : shape.sequence_columns) {
    if (std::find(cs_.columns.begin(), cs_.columns.end(), c) != cs_.columns.end()) continue;
    Fill& fill = fills_.emplace_back();
    fill.request.table = table_;
    fill.request.column = c;
    const std::string& type = shape.types[static_cast<std::size_t>(
        std::find(shape.columns.begin(), shape.columns.end(), c) - shape.columns.begin())];
    const int width = type == "bigint" ? 8 : type == "integer" ? 4 : type == "smallint" ? 2 : 0;
    if (cs_.format == routing::CopyStatement::Format::binary && width == 0) {
      co_await s_.reject(sqlstate::feature_not_supported,
                         "binary COPY into \"" + table_ + "\" without column \"" + c +
                             "\": the proxy draws its values from a sequence and writes only integer columns in binary",
                         false);
      co_return false;
    }
    fill_widths_.push_back(width);
    names.push_back(c);
  }
  if (fills_.empty()) co_return true;
  auto sql = routing::copy_with_columns(sql_, s_.settings_.routing.standard_conforming_strings, names);
  if (!sql) {
    co_await s_.reject(sqlstate::internal_error, "could not add the sequence columns to the COPY statement", false);
    co_return false;
  }
  sql_ = std::move(*sql);
  co_return true;
}

// COPY on every shard, one after the other, up to its CopyInResponse.
awaitable<void> CopyIn::start() {
  for (std::size_t s = 0; s < shards_.size() && start_error_.empty(); ++s) {
    s_.hosts_.may_write_on(s);
    if (!s_.held_[s]) {
      std::optional<std::size_t> primary;
      auto r = co_await s_.hosts_.acquire_backend(s, primary);
      if (!r.backend) {
        start_error_ = error_body(r.sqlstate, r.message);
        break;
      }
      s_.held_[s] = std::move(r.backend);
    }
    if (!co_await start_on(s)) shards_[s].lost = true;
    if (shards_[s].lost) start_error_ = "lost";
    else if (!shards_[s].error.empty()) start_error_ = shards_[s].error;
  }
  splitter_.emplace(cs_, key_index_, cls_.key_column);
  partition_rows_.assign(sharded_ ? topo_.partition_count(cls_.distribution) : 0, 0);
}

// False: the connection broke.
awaitable<bool> CopyIn::start_on(std::size_t s) {
  Backend* b = s_.held_[s].get();
  std::string out;
  // A shard outside the client's transaction joins it (two_phase commits them together).
  int swallow = s_.sync_backend_state(*b, out, true);
  if (in_txn_) {
    s_.txn_.note_written(s);
    if (!s_.txn_.write_shard) s_.txn_.write_shard = s;
  }
  proto::Query{sql_}.encode(out);
  if (auto [ec, w] = co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow); ec) co_return false;
  // Read up to the CopyInResponse (or an error, then ReadyForQuery).
  for (;;) {
    auto r = proto::decode_frame(b->read_buf, proto::Direction::backend, s_.limits_);
    if (r.status == proto::FrameStatus::error) co_return false;
    if (r.status == proto::FrameStatus::need_more) {
      if (co_await read_into(b->socket, b->read_buf, 16384)) co_return false;
      continue;
    }
    char type = r.frame.type;
    std::string frame(b->read_buf, 0, r.frame.size);
    std::string body(r.frame.body);
    b->read_buf.erase(0, r.frame.size);
    if (type == 'Z') {
      b->status = body.empty() ? 'E' : body[0];
      if (swallow-- > 0) continue;
      co_return true;
    }
    if (swallow > 0) continue;
    if (type == 'E') shards_[s].error = body;
    if (type == 'G') {
      shards_[s].started = true;
      if (copy_in_response_.empty()) copy_in_response_ = frame;
      co_return true;
    }
  }
}

// `bytes` (one row) with a value of every filled column appended; values are drawn on a
// connection of their own (this session's to the combine shard is in its COPY).
awaitable<bool> CopyIn::fill_row(std::string_view bytes, std::string& out) {
  fill_values_.clear();
  for (auto& fill : fills_) {
    if (fill.values.empty()) {
      const std::size_t shard = s_.combine_shard();
      auto held = std::move(s_.held_[shard]);
      KeyCache::Source source;
      std::string error;
      auto drawn = co_await s_.keys_.draw_keys(fill.request, kFillBlock, source, error);
      s_.held_[shard] = std::move(held);
      if (!drawn) {
        fail("cannot draw values of column \"" + fill.request.column + "\" of \"" + table_ + "\": " + error,
             std::string(sqlstate::connection_failure));
        co_return false;
      }
      fill.values.assign(drawn->rbegin(), drawn->rend());
      fill.sequence = source.sequence;
    }
    fill_values_.push_back(std::move(fill.values.back()));
    fill.values.pop_back();
    fill.last = fill_values_.back();
  }
  auto row = routing::append_fields(cs_, bytes, fill_values_, fill_widths_);
  if (!row) {
    fail("a value drawn for \"" + table_ + "\" does not fit its column", "22003");
    co_return false;
  }
  out = std::move(*row);
  co_return true;
}

// Sends the rows the splitter has completed to the shards that own their keys.
awaitable<void> CopyIn::route_rows() {
  auto& splitter = *splitter_;
  if (splitter.prologue_ready()) {
    for (auto& sc : shards_) {
      if (sc.prologue_sent || splitter.prologue().empty()) continue;
      proto::CopyData{splitter.prologue()}.encode(sc.out);
      sc.prologue_sent = true;
    }
  }
  routing::CopyRow row;
  std::string filled;
  while (fail_reason_.empty() && splitter.next_row(row)) {
    std::optional<std::string> key = row.key;
    if (key && cs_.format == routing::CopyStatement::Format::binary) key = binary_key_as_text(key_type_, *key);
    auto part = topo_.partition_of(cls_.distribution, key_type_, key);
    if (part.status == routing::PartitionOf::Status::no_partition)
      co_return fail("key " + (key ? *key : std::string("NULL")) + " of table \"" + table_ + "\" maps to no partition",
                     sqlstate::no_partition);
    if (part.status != routing::PartitionOf::Status::ok)
      co_return fail("cannot read the key of a row of table \"" + table_ + "\"", sqlstate::no_shard_key);
    auto& out = shards_[topo_.shard_of(cls_.distribution, part.partition)].out;
    if (fills_.empty()) {
      proto::CopyData{row.bytes}.encode(out);
    } else {
      if (!co_await fill_row(row.bytes, filled)) co_return;
      proto::CopyData{filled}.encode(out);
    }
    if (part.partition < partition_rows_.size()) ++partition_rows_[part.partition];
  }
}

// The client's COPY data frames after the Query frame. Bytes consumed here are erased
// from cbuf_ so serve() only has the Query frame to step over.
awaitable<void> CopyIn::take_client_data() {
  co_await s_.stream_.write(copy_in_response_);
  auto& splitter = *splitter_;
  const std::size_t base = s_.cpos_ + f_.size;
  bool done = false;
  while (!done && !s_.closing_) {
    auto r = proto::decode_frame(std::string_view(s_.cbuf_).substr(base), proto::Direction::frontend, s_.limits_);
    if (r.status == proto::FrameStatus::error) {
      s_.closing_ = true;
      fail_reason_ = r.error;
      break;
    }
    if (r.status == proto::FrameStatus::need_more) {
      if (co_await s_.stream_.read_some(s_.cbuf_)) {
        s_.closing_ = true;
        fail_reason_ = "client connection lost during COPY";
        break;
      }
      continue;
    }
    char type = r.frame.type;
    if (type == 'd' && fail_reason_.empty()) {
      if (!sharded_) {
        for (auto& sc : shards_) sc.out.append(s_.cbuf_, base, r.frame.size);
      } else if (!splitter.feed(r.frame.body)) {
        fail(splitter.error(), "22P04");  // bad_copy_file_format
      } else {
        co_await route_rows();
      }
    } else if (type == 'c') {
      done = true;
      if (sharded_ && fail_reason_.empty()) {
        if (!splitter.finish()) fail(splitter.error(), "22P04");
        else co_await route_rows();  // a last line without a line end is a row too
      }
    } else if (type == 'f') {
      done = true;
      client_failed_ = true;
      auto cf = proto::CopyFail::decode(r.frame.body);
      fail_reason_ = cf ? std::string(cf->message) : "COPY failed";
    } else if (type != 'H' && type != 'S' && type != 'd') {
      s_.closing_ = true;
      fail_reason_ = "unexpected message type during COPY";
    }
    s_.cbuf_.erase(base, r.frame.size);
    co_await flush(done);
  }
}

// Hands finished rows to the shards in large writes.
awaitable<void> CopyIn::flush(bool done) {
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s].out.size() < kCopyFlushBytes && !done) continue;
    if (!fail_reason_.empty() || shards_[s].out.empty() || !s_.held_[s]) continue;
    auto [ec, w] = co_await asio::async_write(s_.held_[s]->socket, asio::buffer(shards_[s].out), use_nothrow);
    if (ec) shards_[s].lost = true;
    shards_[s].out.clear();
  }
}

// Every started COPY ends: CopyDone (with the binary trailer), or CopyFail.
awaitable<void> CopyIn::finish() {
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    auto& sc = shards_[s];
    if (!s_.held_[s] || sc.lost) continue;
    Backend* b = s_.held_[s].get();
    if (sc.started) {
      std::string out;
      if (fail_reason_.empty()) {
        if (sharded_ && !splitter_->prologue().empty() && !sc.prologue_sent)
          proto::CopyData{splitter_->prologue()}.encode(out);
        if (sharded_ && !splitter_->epilogue().empty()) proto::CopyData{splitter_->epilogue()}.encode(out);
        proto::encode_copy_done(out);
      } else {
        proto::CopyFail{fail_reason_}.encode(out);
      }
      if (auto [ec, w] = co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow); ec) {
        sc.lost = true;
        continue;
      }
      sc.lost = !co_await read_until_ready(*b, 1, s_.limits_, [&](char type, std::string_view, std::string_view body) {
        if (type == 'E' && sc.error.empty()) sc.error = body;
        if (type == 'C') sc.tag = body.substr(0, body.find('\0'));
      });
    }
    if (!in_txn_ || sc.lost) s_.end_shard(s, !sc.lost);
  }
}

// One answer for the client.
awaitable<void> CopyIn::answer() {
  std::string out;
  long long total = 0;
  std::string applied, failed, first_error;
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const auto& sc = shards_[s];
    const auto& name = s_.pools_[s]->target().shard;
    if (sc.lost || !sc.error.empty() || !sc.started) {
      if (first_error.empty()) first_error = sc.error;
      failed += (failed.empty() ? "" : ", ") + name;
      continue;
    }
    applied += (applied.empty() ? "" : ", ") + name;
    auto sp = sc.tag.rfind(' ');
    long long rows = 0;
    if (sp != std::string::npos) std::from_chars(sc.tag.data() + sp + 1, sc.tag.data() + sc.tag.size(), rows);
    // A reference table's copies each took every row: one shard's count is the answer.
    if (sharded_ || applied.find(',') == std::string::npos) total += rows;
    if (sharded_) s_.count_copy_rows(cls_.distribution, s, partition_rows_, static_cast<std::uint64_t>(rows));
  }
  if (!fail_reason_.empty() && !client_failed_ && !fail_code_.empty()) {
    proto::ErrorFields::make("ERROR", fail_code_, fail_reason_).encode(out, 'E');
  } else if (client_failed_) {
    proto::ErrorFields::make("ERROR", "57014", "COPY from stdin failed: " + fail_reason_).encode(out, 'E');
  } else if (!failed.empty() && shards_.size() == 1) {  // it took every row: its error as it is
    if (auto original = proto::ErrorFields::decode(first_error)) original->encode(out, 'E');
    else proto::ErrorFields::make("ERROR", sqlstate::connection_failure, "connection lost").encode(out, 'E');
  } else if (!failed.empty()) {
    // (In the proxy's own block it is rolled back everywhere.)
    out += several_shards_error(first_error, "COPY", failed, s_.txn_.own ? std::string() : applied);
  } else if (!fail_reason_.empty()) {
    proto::ErrorFields::make("ERROR", sqlstate::protocol_violation, fail_reason_).encode(out, 'E');
  } else {
    proto::CommandComplete{"COPY " + std::to_string(total)}.encode(out);
  }
  if (in_txn_ && (out.empty() || out[0] == 'E')) {
    // Some shards may hold rows of it: only ROLLBACK can end the transaction now.
    co_await s_.fail_block();
  }
  proto::ReadyForQuery{s_.fe_.client_txn}.encode(out);
  if (!s_.closing_) co_await s_.stream_.write(out);
}

awaitable<bool> Session::handle_copy_in(const proto::Frame& f, std::string sql, const routing::CopyStatement& cs) {
  CopyIn copy(*this, f, std::move(sql), cs);
  co_return co_await copy.run();
}

}  // namespace splitpoint::server
