// Deadlocks across shards: the sessions' waits on each server joined into one graph.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "server/txn/wait_graph.hpp"

using namespace splitpoint::server::wait_graph;

namespace {

// Shard i lives on server "h<i>" unless told otherwise.
std::string server_of(std::size_t shard) { return "h" + std::to_string(shard); }
// Session s holds process `pid` on shard `shard`, transaction 1.
Held held(std::uint64_t s, std::size_t shard, std::int32_t pid) { return Held{s, 1, shard, server_of(shard), pid}; }
Wait wait(std::size_t shard, std::int32_t pid, std::vector<std::int32_t> blockers) {
  return Wait{server_of(shard), pid, std::move(blockers)};
}

// Sessions 1 and 2 each hold a backend on shards 0 (pids 100, 200) and 1 (pids 101, 201).
std::vector<Held> two_sessions_two_shards() {
  return {held(1, 0, 100), held(1, 1, 101), held(2, 0, 200), held(2, 1, 201)};
}

}  // namespace

TEST_CASE("wait graph: two sessions locking two shards in opposite orders", "[deadlock]") {
  auto h = two_sessions_two_shards();
  CHECK(some_session_on_several_backends(h));
  // 1 waits on shard 0 for 2; 2 waits on shard 1 for 1.
  auto cycle = find_cycle(h, {wait(0, 100, {200}), wait(1, 201, {101})});
  REQUIRE(cycle.size() == 2);
  CHECK(cycle[0] == Edge{1, 2, 0, "h0", 100, 200});
  CHECK(cycle[1] == Edge{2, 1, 1, "h1", 201, 101});
  CHECK(describe(cycle, {"s0", "s1"}) ==
        "session 1 waits on shard \"s0\" (process 100) for session 2 (process 200)\n"
        "session 2 waits on shard \"s1\" (process 201) for session 1 (process 101)");
}

TEST_CASE("wait graph: two shards on one server are still two processes per session", "[deadlock]") {
  std::vector<Held> h{{1, 1, 0, "h", 100}, {1, 1, 1, "h", 101}, {2, 1, 0, "h", 200}, {2, 1, 1, "h", 201}};
  CHECK(find_cycle(h, {{"h", 100, {200}}, {"h", 201, {101}}}).size() == 2);
}

TEST_CASE("wait graph: waits that form no cycle PostgreSQL cannot see", "[deadlock]") {
  auto h = two_sessions_two_shards();
  SECTION("one waits, the other does not") { CHECK(find_cycle(h, {wait(0, 100, {200})}).empty()); }
  SECTION("a cycle of processes on one server is PostgreSQL's to break") {
    CHECK(find_cycle(h, {wait(0, 100, {200}), wait(0, 200, {100})}).empty());
  }
  SECTION("a blocker that is no session's backend and waits for nobody") {
    CHECK(find_cycle(h, {wait(0, 100, {999}), wait(1, 201, {101})}).empty());
  }
  SECTION("the same pid on another server is another process") {
    auto w = wait(0, 100, {200});
    w.server = "h9";
    CHECK(find_cycle(h, {w, wait(1, 201, {101})}).empty());
  }
  SECTION("a chain") {
    h.push_back(held(3, 1, 300));
    CHECK(find_cycle(h, {wait(0, 100, {200}), wait(1, 201, {300})}).empty());
  }
}

TEST_CASE("wait graph: a longer cycle, and cycles on one server around it", "[deadlock]") {
  // 1 -> 2 on s0, 2 -> 3 on s0, 3 -> 1 on s1; plus 2 <-> 4 on s1 only.
  std::vector<Held> h{held(1, 0, 100), held(1, 1, 101), held(2, 0, 200), held(2, 1, 201),
                      held(3, 0, 300), held(3, 1, 301), held(4, 1, 401)};
  std::vector<Wait> w{wait(0, 100, {200}), wait(0, 200, {300}), wait(1, 301, {101}), wait(1, 201, {401}),
                      wait(1, 401, {201})};
  auto cycle = find_cycle(h, w);
  REQUIRE(cycle.size() == 3);
  CHECK(cycle[0].waiter == 1);
  CHECK(cycle[1].waiter == 2);
  CHECK(cycle[2].waiter == 3);
  CHECK(cycle[2].holder == 1);
  SECTION("several blockers: one of them closes it") {
    w[0].blockers = {999, 400, 200};
    CHECK(find_cycle(h, w).size() == 3);
  }
  SECTION("the search is bounded") { CHECK(find_cycle(h, w, 1).empty()); }
}

TEST_CASE("wait graph: nothing to look for while every session holds one backend", "[deadlock]") {
  CHECK_FALSE(some_session_on_several_backends({held(1, 0, 100), held(2, 1, 201), held(3, 0, 300)}));
}

TEST_CASE("wait graph: a chain through a process that is no session's", "[deadlock]") {
  // 1 waits on s0 for process 900 (a direct client's), which waits for 2; 2 waits on s1 for 1.
  auto h = two_sessions_two_shards();
  auto cycle = find_cycle(h, {wait(0, 100, {900}), wait(0, 900, {200}), wait(1, 201, {101})});
  REQUIRE(cycle.size() == 3);  // (from its first node: processes come before sessions)
  CHECK(cycle[0] == Edge{0, 2, 0, "h0", 900, 200});
  CHECK(cycle[1] == Edge{2, 1, 1, "h1", 201, 101});
  CHECK(cycle[2] == Edge{1, 0, 0, "h0", 100, 900});
  CHECK(describe(cycle, {"s0", "s1"}) ==
        "process 900 waits on shard \"s0\" for session 2 (process 200)\n"
        "session 2 waits on shard \"s1\" (process 201) for session 1 (process 101)\n"
        "session 1 waits on shard \"s0\" (process 100) for process 900");
  SECTION("processes alone make no cycle PostgreSQL cannot see") {
    CHECK(find_cycle({}, {wait(0, 900, {901}), wait(0, 901, {900})}).empty());
  }
}

TEST_CASE("wait graph: sessions of another proxy", "[deadlock]") {
  // This proxy's session 1 and proxy B's session 1 (the same number, another session).
  std::vector<Held> h{held(1, 0, 100), held(1, 1, 101)};
  Held b0 = held(1, 0, 200), b1 = held(1, 1, 201);
  b0.proxy = b1.proxy = "B";
  CHECK_FALSE(some_session_on_several_backends({held(1, 0, 100), b1}));
  h.push_back(b0);
  h.push_back(b1);
  CHECK(some_session_on_several_backends(h));
  auto cycle = find_cycle(h, {wait(0, 100, {200}), wait(1, 201, {101})});
  REQUIRE(cycle.size() == 2);
  CHECK(cycle[0] == Edge{1, 1, 0, "h0", 100, 200, "", "B"});
  CHECK(cycle[1] == Edge{1, 1, 1, "h1", 201, 101, "B", ""});
  CHECK(describe(cycle, {"s0", "s1"}) ==
        "session 1 waits on shard \"s0\" (process 100) for session 1 of proxy B (process 200)\n"
        "session 1 of proxy B waits on shard \"s1\" (process 201) for session 1 (process 101)");
}
