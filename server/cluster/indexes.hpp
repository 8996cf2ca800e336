// Global secondary indexes' builder (SPEC §12, docs/indexes.md): one thread of its own
// (libpqxx, like the catalog's) that puts each configured index in place on every
// shard and keeps it there.
//
// On every shard: schema `splitpoint` and the change log `splitpoint.index_changes`,
// where a row trigger on the indexed table writes each change of an indexed column or
// of the key (old and new values, as text, under the writing transaction's id). A
// session that wrote an indexed table takes its own transaction's changes from the
// shards it wrote and applies them to the entries (server/session/execute/
// global_index.cpp), in the same transaction: the entries are a table of the proxy's,
// `splitpoint.<index>_entries`, distributed by the first indexed column, whose primary
// key — named as the index, so PostgreSQL's 23505 names it — is the atomic claim of a
// unique value.
//
// Building (the table appears, or is made again): the entries emptied, the trigger
// created on every shard (from then on every write through the proxy is maintained),
// then the rows already there copied in, each shard's rows read FOR SHARE so that a
// row cannot change between being read and its entry being written; a unique index
// whose rows hold a value twice fails (the values named in SHOW INDEXES) and is
// neither maintained nor used. Reads use an index only once it is ready.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"

namespace splitpoint::server {

class Proxy;

class IndexKeeper {
 public:
  enum class State { absent, building, ready, failed };
  struct Status {
    std::string name, table;
    State state = State::absent;
    std::string detail;        // why absent or failed; how many rows a build copied
    std::vector<std::uint32_t> oids;  // the table's oid on each shard when built
    std::uint64_t checked = 0;        // the recheck generation of the last look
    bool current = false;             // statuses(): looked at since the last recheck()
  };

  explicit IndexKeeper(Proxy& proxy) : proxy_(proxy) {}
  ~IndexKeeper() { stop(); }
  void start();
  void stop();

  // The shard has the change log: a write there may have logged changes to apply.
  bool logs_on(std::size_t shard) const { return shard < kShards && logs_[shard].load(std::memory_order_acquire); }
  // The index is complete: reads may route through it.
  bool ready(const std::string& name) const;
  // DDL ran through the proxy: no index is used until the builder has looked again (a
  // table may have been dropped or made anew), which it does at once.
  void recheck();
  std::vector<Status> statuses() const;

  // CHECK INDEX name [REPAIR]: the entries against the table's rows on every shard —
  // entries read before rows, so a write committed in between shows as missing, never
  // as an orphan. REPAIR inserts what is missing (ON CONFLICT DO NOTHING) and deletes
  // the orphans (entries on no row's values, or on a shard that does not own them).
  // Blocking (libpqxx): run off a worker thread. CatalogError for an unknown index.
  struct Check {
    std::size_t rows = 0, entries = 0, missing = 0, orphans = 0, repaired = 0;
    std::vector<std::string> examples;  // a few differences, "missing (a@x, 7)" / "orphan ..."
  };
  Check check(const std::string& name, bool repair) const;
  static std::string_view state_name(State s);
  // DROP INDEX (the catalog's): its trigger, trigger function and entries dropped on
  // every shard of `cfg`, its logged changes deleted. Blocking (libpqxx); throws.
  static void remove(const config::Config& cfg, const config::Index& ix);

 private:
  static constexpr std::size_t kShards = 256;
  void loop();
  // One pass over every index; false: something is not ready yet (look again soon).
  bool pass();
  void build(const config::Config& cfg, const config::Index& ix, Status& st);

  Proxy& proxy_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false, recheck_ = false;
  std::uint64_t generation_ = 1;  // bumped by recheck()
  std::map<std::string, Status> status_;  // by index name
  std::atomic<bool> logs_[kShards] = {};
};

}  // namespace splitpoint::server
