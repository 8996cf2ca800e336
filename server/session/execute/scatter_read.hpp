// The scatter-gather read executor (SPEC §4): a SELECT (or COPY ... TO STDOUT) that
// needs several shards runs on all of them at once, each on its own backend, and
// routing::Merger combines their rows so the client sees what one PostgreSQL holding
// every row would return. Every such statement has a deadline; shards that miss it,
// fail, or are down are missing, and the partial-result rule decides between an error
// and a warning. One object per statement, its phases in the order run() calls them:
//
//   plan()           merge or combine, cached by text or shape (routing/merge/scatter_plan.hpp)
//   acquire()        a backend per shard, all at once (no pool deadlock), each sent the
//                    statement as soon as it is there; the first one also learns the
//                    shards' result formats and the database's collation
//   arm_deadline()   the deadline cancels the reads of shards still running
//   describe()       every shard's RowDescription first: the client's comes from them
//   start_merge()    columns checked alike, the merger, the client's RowDescription
//   stream()         the merger asks for rows shard by shard and emits the client's
//   or, when the plan is a combine step (server/session/execute/scatter_combine.cpp), combine(): the shards'
//                    partial rows copied into temporary tables on the combine database,
//                    the statement run there, its rows streamed to the client
//   answer()         the tag, or the statement's error, to the client (send_answer())
//   clean_up()       every shard read to its ReadyForQuery (only one still running is
//                    cancelled), connections back, SHOW splitpoint.last_scatter; when
//                    the error failed the client's block, the block's shards are let
//                    go (Session::release_aborted_block) and only then is it sent
//
// It runs inside its Session's coroutine and uses the session's backends, pools and
// output (a friend of Session): server/session/execute/scatter.cpp hands it the statement.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.hpp"
#include "routing/copy.hpp"
#include "routing/merge/copy_out.hpp"
#include "routing/merge/merger.hpp"
#include "routing/merge/scatter_plan.hpp"
#include "server/net/asio.hpp"
#include "server/net/scatter_io.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

// What plan_scatter needs to know of the catalog: reference and sharded tables, and
// the columns of the tables whose shapes are known (kept alive in `keep`).
routing::ScatterOptions scatter_options(const Runtime& rt, const routing::Route& route,
                                        KeptShapes& keep);

// "SQLSTATE message" of an ErrorResponse body, for SHOW splitpoint.last_scatter and messages.
std::string error_text(std::string_view body);

class ScatterRead {
 public:
  using Clock = std::chrono::steady_clock;
  // `retry_of`: the start of a first attempt this one repeats as a combine step.
  ScatterRead(Session& session, const routing::Route& route, ScatterRequest req,
              std::optional<Clock::time_point> retry_of = std::nullopt);
  ~ScatterRead();
  ScatterRead(const ScatterRead&) = delete;
  ScatterRead& operator=(const ScatterRead&) = delete;
  // False: the session must end (the client is gone).
  awaitable<bool> run();
  // After run(): the merger refused the shards' column types (found only once they
  // described their rows) before anything reached the client: the statement is to run
  // again as a combine step (Session::scatter_read does), with this request.
  bool wants_combine() const { return wants_combine_; }
  ScatterRequest take_request() { return std::move(req_); }
  Clock::time_point started() const { return started_; }

 private:
  struct Shard {
    std::size_t index = 0;
    std::optional<std::size_t> standby;  // the host that answers, when not the primary (SPEC §10)
    std::unique_ptr<Backend> borrowed;  // acquired for this statement (not held by a transaction)
    Backend* b = nullptr;
    enum class State : std::uint8_t { running, ended, missing } state = State::running;
    std::string status = "ok";  // ok | timeout | error | skipped
    std::string error;          // for SHOW splitpoint.last_scatter and messages
    std::string error_body;     // the shard's own ErrorResponse, when it rejected the statement
    std::uint64_t rows = 0;
    int skip_ready = 0;         // ReadyForQuery of statements injected before ours
    bool merger_ended = false;  // end_of_shard() was given to the merger
    bool finished = false;      // ReadyForQuery seen
    bool sent = false;          // the statement was sent
    std::size_t consumed = 0;   // bytes of b->read_buf already read as messages
    std::string parsing;        // the named statement this one prepared on b, until its ParseComplete
    Clock::time_point done_at{};
    std::optional<protocol::RowDescription> fields;
    std::string fields_body;
  };

  awaitable<bool> plan();  // false: refused (the client was told)
  // The shards' connections and, for a combine step, the combine database's.
  std::vector<Shard*> all_shards() {
    std::vector<Shard*> v;
    for (auto& sh : shards_) v.push_back(&sh);
    if (combine_) v.push_back(&combining_.sh);
    return v;
  }
  awaitable<bool> acquire();
  awaitable<void> prepare(Backend& b);
  awaitable<void> send_statement(Shard& sh);
  void arm_deadline(const asio::any_io_executor& ex);
  // The next message of a shard that matters to the merge: RowDescription, DataRow,
  // CommandComplete or ErrorResponse (others are consumed here); its type in `type`,
  // its body in frame_body_. False: the shard is gone or past the deadline.
  awaitable<bool> next_message(Shard& sh, char& type);
  // next_message() from what is already read, without reading: need_bytes when the
  // shard's next message has not arrived whole.
  enum class Taken : std::uint8_t { message, need_bytes, failed };
  Taken take_message(Shard& sh, char& type);
  awaitable<void> settle_running();
  void mark_missing(Shard& sh, std::string status, std::string error);
  void rejected(Shard& sh);  // the shard answered the ErrorResponse in frame_body_
  void prefer_shard_error();
  void fail(std::string_view code, std::string message);
  awaitable<void> describe();
  void start_merge();
  void start_copy(const std::vector<protocol::FieldDescription>& described);
  awaitable<void> stream();
  // One need_row step of the merger: the next message of shard `i`. False: stop.
  awaitable<bool> feed(std::size_t i);
  std::size_t feeding(std::size_t i) const;        // the shard a need_row for `i` reads
  bool fed(std::size_t i, bool got, char type);  // gives the merger shard i's message
  // server/session/execute/scatter_combine.cpp: the combine step (SPEC §4.1), instead of describe..stream
  void take_combine(ParallelAcquire& acquiring);
  std::string combine_where() const;  // "shard s0", or "host:port/database" of its own
  void encode_pulls(std::string& out, std::size_t shard) const;
  awaitable<void> combine();
  awaitable<bool> combine_command(std::string out);  // sends, reads to ReadyForQuery; false: failed
  awaitable<bool> pull_into(std::size_t pull);
  awaitable<bool> copy_rows_of(Shard& sh, const routing::CombinePull& pull, std::string& copy);
  bool create_from(const routing::CombinePull& pull, std::string& copy);
  awaitable<bool> write_combine(std::string& bytes);
  void combine_lost();  // the combine database's connection failed: the statement fails
  awaitable<void> run_combine_query();
  awaitable<void> end_combine();
  void answer();  // the client's answer, into out_
  awaitable<void> send_answer();
  awaitable<void> clean_up();
  awaitable<void> drain_shard(Shard& sh, bool& reusable);
  std::string missing_text() const;
  bool any_missing() const;
  void warn_missing();

  Session& s_;
  const routing::Route& route_;
  ScatterRequest req_;
  const Clock::time_point started_;
  Clock::time_point deadline_;
  bool allow_partial_ = false;

  // plan(): the statement's decision, cached by text or shape (routing/merge/scatter_plan.hpp)
  KeptShapes shapes_used_;
  std::shared_ptr<const routing::ScatterPlan> splan_;
  const routing::CopyStatement* copy_out_ = nullptr;
  bool copy_binary_ = false;
  const routing::MergePlan* plan_ = nullptr;      // the streaming merge, or
  const routing::CombinePlan* combine_ = nullptr;  // the combine step (server/session/execute/scatter_combine.cpp)
  // acquire()
  std::vector<Shard> shards_;
  // what the shards are sent
  struct ShardStatement {
    std::vector<std::int16_t> formats;         // result formats asked of the shards (merge plan)
    bool extended = false;                     // sent with Parse/Bind (parameters, binary COPY)
    std::vector<std::int16_t> result_formats;  // of the client's answer
    bool prepared = false;
    std::string prepare_error;
  } shard_stmt_;
  // the deadline and the reads
  struct Reads {
    std::unique_ptr<asio::steady_timer> timer;
    // The deadline's handler holds a weak_ptr to this: a deadline that expired just as
    // the statement ended runs with no error after this object is gone.
    std::shared_ptr<const bool> alive = std::make_shared<const bool>(true);
    bool timed_out = false;
    bool stream_done = false;
    bool settled = false;
  } reads_;
  // The body of the message next_message() or take_message() returned, in its shard's
  // read buffer: valid until that shard is read again.
  std::string_view frame_body_;
  // the answer
  std::string out_;  // for the client
  bool rows_pass_ = false;  // shards' DataRows go to the client as they are (Merger::passes_through)
  const Shard* first_ = nullptr;
  // The statement fails as a whole: SQLSTATE and message, or the combine database's own
  // ErrorResponse.
  struct Failure {
    std::string message, code, body;
  } failure_;
  // the combine step
  struct Combining {
    Shard sh;                // the combine database's connection (index: unused)
    std::shared_ptr<Pool> pool;  // where it comes from and goes back to
    std::uint64_t rows = 0;
    std::string tag;         // the combine query's CommandComplete
    bool open = false;       // BEGIN sent: COMMIT or ROLLBACK owed
    bool described = false;  // the current pull's temporary table exists, or is made by what is sent
  } combining_;
  std::unique_ptr<routing::Merger> merger_;
  std::optional<routing::CopyOutFormatter> copy_formatter_;
  bool warned_ = false;
  bool retry_ = false;
  bool wants_combine_ = false;
  bool release_block_ = false;  // the client's block failed: its shards go before the answer
};

}  // namespace splitpoint::server
