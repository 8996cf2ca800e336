// COPY ... FROM STDIN into a sharded table (split by key) or a reference table (a copy
// to every shard). The client's CopyData stream is cut into rows (routing/copy.hpp)
// and each row goes to the shard that owns its key, in one COPY per shard.
#include <spdlog/spdlog.h>

#include <charconv>

#include "protocol/buffer.hpp"
#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "routing/copy.hpp"
#include "server/session.hpp"
#include "server/session_util.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

constexpr std::size_t kCopyFlushBytes = 256 * 1024;

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

struct ShardCopy {
  std::string out;        // CopyData messages not yet written
  bool prologue_sent = false;
  bool started = false;
  std::string error;      // ErrorResponse body
  std::string tag;
  bool lost = false;
};

}  // namespace

awaitable<bool> Session::handle_copy_in(const proto::Frame& f, std::string sql, const routing::CopyStatement& cs) {
  auto& topo = *runtime_->topology;
  auto cls = topo.classify(cs.schema, cs.table);
  const bool sharded = cls.kind == routing::TableClass::Kind::sharded;
  const std::string table = routing::Topology::table_name(cs.schema, cs.table);
  const bool in_txn = in_transaction();
  if (in_txn && pools_.size() > 1 && !two_phase())
    co_return co_await reject(sqlstate::cross_shard_write,
                              "COPY into \"" + table + "\" may write to several shards, which a transaction may not",
                              false);

  // Where the key is in each row, and how to read it.
  std::size_t key_index = 0;
  routing::ColumnType key_type;
  if (sharded) {
    auto shape = runtime_->shapes->find(table);
    if (!shape) {
      std::vector<std::string> wanted(1, table);  // (no braced list: GCC 12 coroutine bug)
      if (!co_await fetch_shapes(wanted)) co_return co_await reject(sqlstate::connection_failure,
                                                                      "cannot read the definition of " + table, false);
      shape = runtime_->shapes->find(table);
    }
    if (!shape || shape->columns.empty())
      co_return co_await reject(sqlstate::undefined_table, "relation \"" + table + "\" does not exist", false);
    const auto& cols = cs.columns.empty() ? shape->columns : cs.columns;
    auto it = std::find(cols.begin(), cols.end(), cls.key_column);
    if (it == cols.end())
      co_return co_await reject(sqlstate::no_shard_key,
                                "COPY into sharded table \"" + table + "\" must include its key column \"" +
                                    cls.key_column + "\"",
                                false);
    key_index = static_cast<std::size_t>(it - cols.begin());
    auto tcol = std::find(shape->columns.begin(), shape->columns.end(), cls.key_column);
    if (tcol != shape->columns.end())
      key_type = routing::column_type(shape->types[static_cast<std::size_t>(tcol - shape->columns.begin())]);
  }

  co_await drain();
  if (closing_) co_return false;
  const std::size_t n = pools_.size();
  std::vector<ShardCopy> shards(n);

  // Start COPY on every shard; the first CopyInResponse is what the client sees.
  std::string copy_in_response;
  std::string start_error;
  for (std::size_t s = 0; s < n && start_error.empty(); ++s) {
    if (!held_[s]) {
      auto r = co_await pools_[s]->acquire(runtime_->config.timeouts.client_login);
      if (!r.backend) {
        start_error = error_body(r.sqlstate, r.message);
        break;
      }
      held_[s] = std::move(r.backend);
    }
    Backend* b = held_[s].get();
    std::string out;
    // A shard outside the client's transaction joins it (two_phase commits them together).
    int swallow = sync_backend_state(*b, out, true);
    if (in_txn) {
      note_written(s);
      if (!write_shard_) write_shard_ = s;
    }
    proto::Query{sql}.encode(out);
    if (auto [ec, w] = co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow); ec) {
      shards[s].lost = true;
      start_error = "lost";
      break;
    }
    // Read up to the CopyInResponse (or an error, then ReadyForQuery).
    for (;;) {
      auto r = proto::decode_frame(b->read_buf, proto::Direction::backend, limits_);
      if (r.status == proto::FrameStatus::error) {
        shards[s].lost = true;
        break;
      }
      if (r.status == proto::FrameStatus::need_more) {
        if (co_await read_into(b->socket, b->read_buf, 16384)) {
          shards[s].lost = true;
          break;
        }
        continue;
      }
      char type = r.frame.type;
      std::string frame(b->read_buf, 0, r.frame.size);
      std::string body(r.frame.body);
      b->read_buf.erase(0, r.frame.size);
      if (type == 'Z') {
        b->status = body.empty() ? 'E' : body[0];
        if (swallow-- > 0) continue;
        break;
      }
      if (swallow > 0) continue;
      if (type == 'E') shards[s].error = body;
      if (type == 'G') {
        shards[s].started = true;
        if (copy_in_response.empty()) copy_in_response = frame;
        break;
      }
    }
    if (shards[s].lost) start_error = "lost";
    else if (!shards[s].error.empty()) start_error = shards[s].error;
  }

  routing::CopySplitter splitter(cs, key_index, cls.key_column);
  // Rows sent per partition, for rows_written once a shard's COPY is done.
  std::vector<std::uint64_t> partition_rows(sharded ? topo.partition_count(cls.distribution) : 0);
  std::string fail_reason;  // set: abort with CopyFail on every shard
  std::string fail_code;
  bool client_failed = false;

  // Sends the rows the splitter has completed to the shards that own their keys.
  auto route_rows = [&] {
    if (splitter.prologue_ready()) {
      for (auto& sc : shards) {
        if (sc.prologue_sent || splitter.prologue().empty()) continue;
        proto::CopyData{splitter.prologue()}.encode(sc.out);
        sc.prologue_sent = true;
      }
    }
    routing::CopyRow row;
    while (fail_reason.empty() && splitter.next_row(row)) {
      std::optional<std::string> key = row.key;
      if (key && cs.format == routing::CopyStatement::Format::binary) key = binary_key_as_text(key_type, *key);
      auto part = topo.partition_of(cls.distribution, key_type, key);
      if (part.status != routing::PartitionOf::Status::ok) {
        fail_reason = part.status == routing::PartitionOf::Status::no_partition
                          ? "key " + (key ? *key : std::string("NULL")) + " of table \"" + table +
                                "\" maps to no partition"
                          : "cannot read the key of a row of table \"" + table + "\"";
        fail_code = part.status == routing::PartitionOf::Status::no_partition ? sqlstate::no_partition
                                                                              : sqlstate::no_shard_key;
        return;
      }
      proto::CopyData{row.bytes}.encode(shards[topo.shard_of(cls.distribution, part.partition)].out);
      if (part.partition < partition_rows.size()) ++partition_rows[part.partition];
    }
  };
  if (!start_error.empty()) {
    fail_reason = "COPY could not start on every shard";
  } else {
    co_await stream_.write(copy_in_response);
    // Consume the client's COPY data frames after the Query frame. Bytes consumed
    // here are erased from cbuf_ so serve() only has the Query frame to step over.
    const std::size_t base = cpos_ + f.size;
    bool done = false;
    while (!done && !closing_) {
      auto r = proto::decode_frame(std::string_view(cbuf_).substr(base), proto::Direction::frontend, limits_);
      if (r.status == proto::FrameStatus::error) {
        closing_ = true;
        fail_reason = r.error;
        break;
      }
      if (r.status == proto::FrameStatus::need_more) {
        if (co_await stream_.read_some(cbuf_)) {
          closing_ = true;
          fail_reason = "client connection lost during COPY";
          break;
        }
        continue;
      }
      char type = r.frame.type;
      if (type == 'd' && fail_reason.empty()) {
        if (!sharded) {
          for (auto& sc : shards) sc.out.append(cbuf_, base, r.frame.size);
        } else if (!splitter.feed(r.frame.body)) {
          fail_reason = splitter.error();
          fail_code = "22P04";  // bad_copy_file_format
        } else {
          route_rows();
        }
      } else if (type == 'c') {
        done = true;
        if (sharded && fail_reason.empty()) {
          if (!splitter.finish()) {
            fail_reason = splitter.error();
            fail_code = "22P04";
          } else {
            route_rows();  // a last line without a line end is a row too
          }
        }
      } else if (type == 'f') {
        done = true;
        client_failed = true;
        auto cf = proto::CopyFail::decode(r.frame.body);
        fail_reason = cf ? std::string(cf->message) : "COPY failed";
      } else if (type != 'H' && type != 'S' && type != 'd') {
        closing_ = true;
        fail_reason = "unexpected message type during COPY";
      }
      cbuf_.erase(base, r.frame.size);
      // Hand finished rows to the shards in large writes.
      for (std::size_t s = 0; s < n; ++s) {
        if (shards[s].out.size() < kCopyFlushBytes && !done) continue;
        if (!fail_reason.empty() || shards[s].out.empty() || !held_[s]) continue;
        auto [ec, w] = co_await asio::async_write(held_[s]->socket, asio::buffer(shards[s].out), use_nothrow);
        if (ec) shards[s].lost = true;
        shards[s].out.clear();
      }
    }
  }

  // Finish every started COPY: CopyDone (with the binary trailer), or CopyFail.
  for (std::size_t s = 0; s < n; ++s) {
    if (!held_[s] || shards[s].lost) continue;
    Backend* b = held_[s].get();
    if (shards[s].started) {
      std::string out;
      if (fail_reason.empty()) {
        if (sharded && !splitter.prologue().empty() && !shards[s].prologue_sent)
          proto::CopyData{splitter.prologue()}.encode(out);
        if (sharded && !splitter.epilogue().empty()) proto::CopyData{splitter.epilogue()}.encode(out);
        proto::encode_copy_done(out);
      } else {
        proto::CopyFail{fail_reason}.encode(out);
      }
      if (auto [ec, w] = co_await asio::async_write(b->socket, asio::buffer(out), use_nothrow); ec) {
        shards[s].lost = true;
        continue;
      }
      auto& sc = shards[s];
      sc.lost = !co_await read_until_ready(*b, 1, limits_, [&](char type, std::string_view, std::string_view body) {
        if (type == 'E' && sc.error.empty()) sc.error = body;
        if (type == 'C') sc.tag = body.substr(0, body.find('\0'));
      });
    }
    if (!in_txn || shards[s].lost) end_shard(s, !shards[s].lost);
  }

  // One answer for the client.
  std::string out;
  long long total = 0;
  std::string applied, failed, first_error;
  for (std::size_t s = 0; s < n; ++s) {
    const auto& name = pools_[s]->target().shard;
    if (shards[s].lost || !shards[s].error.empty() || !shards[s].started) {
      if (first_error.empty()) first_error = shards[s].error;
      failed += (failed.empty() ? "" : ", ") + name;
    } else {
      applied += (applied.empty() ? "" : ", ") + name;
      auto sp = shards[s].tag.rfind(' ');
      long long rows = 0;
      if (sp != std::string::npos) std::from_chars(shards[s].tag.data() + sp + 1, shards[s].tag.data() + shards[s].tag.size(), rows);
      // A reference table's copies each took every row: one shard's count is the answer.
      if (sharded || applied.find(',') == std::string::npos) total += rows;
      if (sharded) count_copy_rows(cls.distribution, s, partition_rows, static_cast<std::uint64_t>(rows));
    }
  }
  if (!fail_reason.empty() && !client_failed && !fail_code.empty()) {
    proto::ErrorFields::make("ERROR", fail_code, fail_reason).encode(out, 'E');
  } else if (client_failed) {
    proto::ErrorFields::make("ERROR", "57014", "COPY from stdin failed: " + fail_reason).encode(out, 'E');
  } else if (!failed.empty()) {
    auto original = proto::ErrorFields::decode(first_error);
    std::string code = original ? std::string(original->get('C')) : std::string(sqlstate::connection_failure);
    std::string message = original ? std::string(original->get('M')) : std::string("connection lost");
    if (n > 1)
      message = "COPY failed on shard(s) " + failed +
                (applied.empty() ? "; no shard applied it" : "; it was applied on shard(s) " + applied) + ": " +
                message;
    proto::ErrorFields::make("ERROR", code, message).encode(out, 'E');
  } else if (!fail_reason.empty()) {
    proto::ErrorFields::make("ERROR", sqlstate::protocol_violation, fail_reason).encode(out, 'E');
  } else {
    proto::CommandComplete{"COPY " + std::to_string(total)}.encode(out);
  }
  if (in_txn && (out.empty() || out[0] == 'E')) {
    // Some shards may hold rows of it: only ROLLBACK can end the transaction now.
    client_txn_ = 'E';
    proxy_failed_txn_ = true;
  }
  proto::ReadyForQuery{client_txn_}.encode(out);
  if (!closing_) co_await stream_.write(out);
  co_return !closing_;
}

}  // namespace splitpoint::server
