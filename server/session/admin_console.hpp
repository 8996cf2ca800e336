// The admin console (SPEC §7, §9): the executor of a session logged in to database
// "splitpoint" as a user with `admin: true` (Session::admin_login). It runs the
// session's client loop itself (the simple query protocol, and the extended one in
// admin_extended.cpp) and answers each command with a result set of text columns: SHOW SHARDS | POOLS | HOSTS | CLIENTS | PARTITIONS |
// HOT KEYS | CONFIG | ROUTE <statement>, RELOAD, PAUSE/RESUME, and the catalog's
// commands (SHOW TOPOLOGY | MOVES | SPLIT ADVICE, ADD SHARD, DROP SHARD, REBALANCE, MOVE PARTITION,
// CANCEL MOVE),
// whose blocking libpqxx work runs off the worker thread. docs/admin.md is the
// reference.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "protocol/framing.hpp"

#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;
class Catalog;

class AdminConsole {
 public:
  explicit AdminConsole(Session& session) : s_(session) {}

  // Reads and answers commands until the client leaves or breaks the protocol.
  awaitable<void> serve();

 private:
  // Runs one command, appending its result (or an error) to `out`. False: the session ends.
  awaitable<bool> command(std::string_view sql, std::string& out);
  bool show_state(const std::vector<std::string>& words, std::string& out);
  // SHOW ROUTE <statement>: how it would be routed and answered, without running it.
  awaitable<void> show_route(std::string_view sql, std::string& out);
  // The catalog's commands (SPEC §9); false: not one of them.
  awaitable<bool> catalog_command(const std::vector<std::string>& words, std::string_view sql, std::string& out);
  awaitable<void> add_shard(const std::vector<std::string>& words, Catalog& catalog, std::string& out);
  // SPLIT RANGE dist AT value, MERGE RANGE dist AT value (and SPLIT/MERGE PARTITION).
  awaitable<void> range_change(const std::vector<std::string>& w, std::string_view sql, Catalog& catalog,
                               std::string& out);
  // SPLIT PARTITION or MERGE PARTITION dist:part (`words` as written).
  awaitable<void> hash_change(const std::vector<std::string>& words, Catalog& catalog, std::string& out, bool split);
  awaitable<void> topology_change(const std::vector<std::string>& w, const std::vector<std::string>& words,
                                  Catalog& catalog, std::string& out);

  // command() with its audit line and count (SPEC §11), for both protocols.
  awaitable<bool> run_logged(std::string_view sql, std::string& out);
  // One extended-protocol message (admin_extended.cpp): drivers prepare what they run
  // often (psycopg 3 after five runs, asyncpg at once). False: the session ends.
  awaitable<bool> extended(const protocol::Frame& f, std::string& out);
  void fail_batch(std::string_view sqlstate, const std::string& message, std::string& out);

  Session& s_;
  struct Portal {
    std::string sql;
    std::optional<std::string> answer;  // run at its Describe, sent at its Execute
  };
  std::unordered_map<std::string, std::string> statements_;  // prepared: name -> text
  std::unordered_map<std::string, Portal> portals_;
  bool skip_until_sync_ = false;  // after an error, as PostgreSQL
};

}  // namespace splitpoint::server
