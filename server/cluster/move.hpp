// A partition's move (SPEC §9), as the mover thread runs it: one Move per claimed row of
// splitpoint.moves, its phases in one file each (server/cluster/mover.cpp has the
// states and the filter that selects a partition's rows):
//
//   move_prepare.cpp  connections, the distribution's tables, the row filter, the
//                     fence trigger, the publication            (planned)
//   move_copy.cpp     the subscription's copy and its catch-up  (copying, catching_up)
//   move_verify.cpp   the target's copy compared with the source, before and under the
//                     hold                                      (cutover)
//   move_cutover.cpp  the hold on every proxy, the flip, the catalog's states and acks
//   move_cleanup.cpp  the source's rows deleted, or everything rolled back
//   mover.cpp         Move::run (the order of the phases), the mover loop
#pragma once

#include <pqxx/pqxx>

#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/cluster/catalog.hpp"

namespace splitpoint::server::moving {

using namespace std::chrono_literals;
inline constexpr int kLockSpace = 0x5350;  // advisory lock key space of the fences ("SP")

struct Table {
  std::string name, key, key_type;
  std::string salt_type;  // a salted distribution's: the salt column's type
};

// Keys (as text) of one table of the distribution, for a comparison key by key.
using KeySet = std::set<std::string>;

struct Abort : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Move {
 public:
  Move(Catalog& catalog, MoveRow row, std::string previous_owner)
      : cat_(catalog), m_(std::move(row)), previous_owner_(std::move(previous_owner)), cfg_(catalog.effective_config()),
        name_("splitpoint_m" + std::to_string(m_.id)) {}
  void run();

 private:
  void connect();
  void load_tables();
  void create_helpers();
  // `row`: how the table's columns are named in the condition ("", "NEW.", "x.").
  std::string filter(const Table& t, const std::string& row, pqxx::connection& side) const;
  std::string salt_bucket(const Table& t, const std::string& row, pqxx::connection& side) const;
  // filter() on the table's own columns.
  std::string in_partition(const Table& t, pqxx::connection& side) const { return filter(t, "", side); }
  std::int64_t partition_rows(pqxx::connection& side);
  void drop_fences();
  void delete_marks();
  void prepare();
  void start_copy();
  void wait_copied();
  void catch_up();
  bool cutover();
  void flip(std::chrono::steady_clock::time_point held_from);
  void cleanup();
  void roll_back(const std::string& state, const std::string& why);
  void drop_views();
  bool cancelled();
  void set_state(const std::string& state, bool bump, const std::string& extra = "");
  void wait_acks(std::chrono::milliseconds timeout);
  std::string fence_function(std::size_t i, bool refuse_all);
  std::optional<std::vector<KeySet>> verify_before_hold();
  std::optional<int> bucket_shift(const Table& t);
  static std::string bucket_ranges(const std::string& key, int shift, const std::vector<std::string>& buckets);
  void verify_held(std::optional<std::vector<KeySet>> keys);
  bool take_logged(std::vector<KeySet>& keys, std::size_t max);
  std::vector<KeySet> differing_keys(const std::vector<KeySet>& keys);
  using Sums = std::map<std::optional<std::string>, std::string>;
  Sums sums(pqxx::connection& side, const Table& t, const std::string& group, const std::string& and_where);
  // f(target) on another thread and f(source) on this one, at once: {source's, target's}.
  template <class F>
  auto both(F f) {
    auto target = std::async(std::launch::async, [&] { return f(*tgt_); });
    auto source = f(*src_);
    return std::pair{std::move(source), target.get()};
  }
  void delete_rows(pqxx::connection& side);
  void drop_subscription();
  void drop_publication();
  void exec(pqxx::connection& c, const std::string& sql);
  void exec_locking(const std::string& table, const std::string& sql, bool until_done);
  // A column, or a table as the config names it: "schema.table" is two names (a global
  // index's entries, splitpoint.<index>_entries).
  std::string q(pqxx::connection& c, const std::string& ident) const {
    const auto dot = ident.find('.');
    if (dot == std::string::npos) return c.quote_name(ident);
    return c.quote_name(ident.substr(0, dot)) + "." + c.quote_name(ident.substr(dot + 1));
  }

  Catalog& cat_;
  MoveRow m_;
  std::string previous_owner_;
  const config::Config cfg_;  // (with the catalog's shards)
  std::string name_;  // of the publication, slot, subscription, view schema
  const config::Distribution* dist_ = nullptr;
  std::unique_ptr<pqxx::connection> catalog_, src_, tgt_;
  std::vector<Table> tables_;
  std::map<std::pair<pqxx::connection*, std::string>, std::string> helpers_;  // (side, key type) -> oid
  std::int64_t epoch_ = 0;
};

}  // namespace splitpoint::server::moving
