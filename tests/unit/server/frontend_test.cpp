// server/net/frontend.hpp: the frontend bookkeeping without sockets — what each backend
// message means for the client, given what the session sent (the expected-answer
// queue): pipelines answered over several reads, errors mid-batch (PostgreSQL skips to
// the Sync), statements the proxy injected, COPY IN, the transaction status the client
// is told, and the SET script carried to every backend.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "server/net/frontend.hpp"

using namespace splitpoint::server;
using splitpoint::routing::SessionCommand;

namespace {

Expect expect(char type, bool swallow = false) {
  Expect e;
  e.type = type;
  e.swallow = swallow;
  return e;
}

Expect owed_sync() {
  Expect e = expect('Z');
  e.is_sync = true;
  return e;
}

// A client Parse of `name` under the server-side name `server_name`.
void client_parse(Frontend& fe, BackendState& b, const std::string& name, const std::string& server_name) {
  Prepared p;
  p.server_name = server_name;
  p.parse_seq = ++fe.parse_seq;
  fe.prepared[name] = p;
  b.prepared.made(server_name);
  Expect e = expect('1');
  e.name = server_name;
  e.text = name;
  e.parse_seq = p.parse_seq;
  fe.expect.push_back(e);
}

// Feeds messages; returns which of them reached the client, as a string of types.
std::string feed(Frontend& fe, BackendState& b, std::string_view types, std::vector<Frontend::Verdict>* out = nullptr) {
  std::string passed;
  for (char t : types) {
    std::string_view body = t == 'Z' ? std::string_view("I") : std::string_view();
    auto v = fe.on_backend(t, body, b);
    if (v.to_client) passed += t;
    if (out) out->push_back(v);
  }
  return passed;
}

}  // namespace

TEST_CASE("an extended pipeline is answered in order, over several reads", "[frontend]") {
  Frontend fe;
  BackendState b;
  client_parse(fe, b, "s1", "sp_1");
  fe.expect.push_back(expect('2'));
  fe.expect.push_back(owed_sync());
  std::vector<Frontend::Verdict> v;
  CHECK(feed(fe, b, "12", &v) == "12");  // first read: ParseComplete, BindComplete
  CHECK(fe.expect.size() == 1);
  CHECK(feed(fe, b, "TDD", &v) == "TDD");  // second read: rows
  CHECK_FALSE(v.back().finished);
  CHECK(feed(fe, b, "CZ", &v) == "CZ");
  CHECK(v[v.size() - 2].count_tag);
  CHECK(v.back().finished);
  CHECK(v.back().idle);
  CHECK(fe.expect.empty());
  CHECK(fe.prepared.count("s1") == 1);
  CHECK(b.prepared.has("sp_1"));
}

TEST_CASE("an error mid-batch skips to the Sync and forgets the skipped Parse", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('2'));  // an earlier Bind that fails
  client_parse(fe, b, "s2", "sp_2");
  fe.expect.push_back(expect('2'));
  fe.expect.push_back(owed_sync());
  std::vector<Frontend::Verdict> v;
  CHECK(feed(fe, b, "E", &v) == "E");
  CHECK(v[0].client_error);
  CHECK(fe.batch_failed);
  CHECK(fe.expect.size() == 1);  // only the Sync's ReadyForQuery is still owed
  CHECK(fe.expect.front().failed);
  CHECK(fe.prepared.count("s2") == 0);  // never created on the backend
  CHECK(!b.prepared.has("sp_2"));
  CHECK(feed(fe, b, "Z", &v) == "Z");
  CHECK(v.back().finished);
  CHECK_FALSE(fe.batch_failed);
}

TEST_CASE("a Parse the client repeated after the failed one is kept", "[frontend]") {
  Frontend fe;
  BackendState b;
  client_parse(fe, b, "s", "sp_a");
  fe.expect.push_back(owed_sync());
  fe.prepared["s"].parse_seq = 99;  // the client parsed "s" again since
  feed(fe, b, "EZ");
  CHECK(fe.prepared.count("s") == 1);
}

TEST_CASE("statements the proxy injected never reach the client", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('Z', true));  // RESET ALL; SET ... replay
  Expect q = expect('Z');
  q.route = RouteLabel::multi;
  q.started = std::chrono::steady_clock::now();
  fe.expect.push_back(q);
  std::vector<Frontend::Verdict> v;
  CHECK(feed(fe, b, "SCZ", &v) == "");  // ParameterStatus, tag and ReadyForQuery of the replay
  CHECK_FALSE(v.back().finished);
  CHECK(feed(fe, b, "TDCZ", &v) == "TDCZ");
  CHECK(v.back().finished);
  CHECK(v.back().route == RouteLabel::multi);
}

TEST_CASE("a failed injected statement is logged, not shown", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('Z', true));
  fe.expect.push_back(expect('Z'));
  std::vector<Frontend::Verdict> v;
  CHECK(feed(fe, b, "EZ", &v) == "");
  CHECK(v[0].injected_failed);
  CHECK_FALSE(v[0].client_error);
  CHECK_FALSE(fe.batch_failed);
  CHECK(feed(fe, b, "CZ") == "CZ");
}

TEST_CASE("an error skips the Queries sent inside the failed batch", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('2'));
  Expect in_batch = expect('Z', true);  // BEGIN the proxy sent inside the batch
  in_batch.query_in_batch = true;
  fe.expect.push_back(in_batch);
  fe.expect.push_back(owed_sync());
  CHECK(feed(fe, b, "E") == "E");
  REQUIRE(fe.expect.size() == 1);
  CHECK(fe.expect.front().is_sync);
  CHECK(feed(fe, b, "Z") == "Z");
}

TEST_CASE("COPY IN started by an Execute: the Syncs sent before it do not count", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('2'));
  fe.expect.push_back(owed_sync());
  fe.expect.push_back(owed_sync());
  CHECK(feed(fe, b, "2G") == "2G");
  CHECK(fe.copy_in);
  CHECK(fe.sent_after_sync);
  CHECK(fe.expect.empty());
}

TEST_CASE("the transaction status the client is told", "[frontend]") {
  Frontend fe;
  BackendState b;
  fe.expect.push_back(expect('Z'));
  auto v = fe.on_backend('Z', "T", b);
  CHECK(fe.client_txn == 'T');
  CHECK(b.status == 'T');
  CHECK_FALSE(v.idle);
  SECTION("a block the proxy failed stays failed while a shard says T") {
    fe.fail_block();
    fe.expect.push_back(expect('Z'));
    fe.on_backend('Z', "T", b);
    CHECK(fe.client_txn == 'E');
  }
  SECTION("an unexpected ReadyForQuery is reported") {
    auto u = fe.on_backend('Z', "I", b);
    CHECK(u.unexpected);
  }
  SECTION("an unexpected ParseComplete is reported") {
    auto u = fe.on_backend('1', "", b);
    CHECK(u.unexpected);
  }
}

TEST_CASE("session commands apply when their transaction ends, not after a rollback", "[frontend]") {
  Frontend fe;
  BackendState b;
  ClientSettings settings;
  Expect q = expect('Z');
  q.commands.push_back({SessionCommand::set, "search_path", "SET search_path = a"});
  fe.expect.push_back(q);
  fe.on_backend('C', "SET", b);
  auto v = fe.on_backend('Z', "I", b);
  REQUIRE(v.idle);
  REQUIRE(fe.pending_commands.size() == 1);
  CHECK_FALSE(settings.apply(fe.pending_commands));
  CHECK(fe.pending_commands.empty());
  CHECK(settings.script == "SET search_path = a;");
  CHECK(settings.hash != kStateDefault);

  Expect in_block = expect('Z');
  in_block.commands.push_back({SessionCommand::set, "work_mem", "SET work_mem = '1MB'"});
  fe.expect.push_back(in_block);
  fe.on_backend('Z', "T", b);
  CHECK(fe.pending_commands.size() == 1);  // kept until the block ends
  fe.expect.push_back(expect('Z'));
  fe.on_backend('C', "ROLLBACK", b);
  v = fe.on_backend('Z', "I", b);
  CHECK(v.idle);
  CHECK(fe.pending_commands.empty());  // rolled back: never happened
}

TEST_CASE("ClientSettings: RESET, DISCARD ALL and the startup parameters", "[frontend]") {
  ClientSettings s;
  s.rebuild_script();
  CHECK(s.hash == kStateDefault);
  std::vector<SessionCmd> cmds{{SessionCommand::set, "a", "SET a = 1"}, {SessionCommand::set, "b", "SET b = 2"},
                               {SessionCommand::set, "a", "SET a = 3"}, {SessionCommand::reset, "b", "RESET b"}};
  CHECK_FALSE(s.apply(cmds));
  CHECK(s.script == "SET a = 3;");
  const auto h = s.hash;
  s.startup.emplace_back("application_name", "x");
  s.rebuild_script();
  CHECK(s.hash != h);
  CHECK(s.hash != kStateUnknown);
  std::vector<SessionCmd> discard{{SessionCommand::discard_all, "", "DISCARD ALL"}};
  CHECK(s.apply(discard));  // the backend reset itself
  CHECK(s.sets.empty());
  CHECK(s.script.find("application_name") != std::string::npos);  // startup parameters stay
}

TEST_CASE("ClientSettings: SET and RESET SESSION AUTHORIZATION drop the role", "[frontend]") {
  ClientSettings s;
  std::vector<SessionCmd> cmds{{SessionCommand::set, "session_authorization", "SET SESSION AUTHORIZATION u"},
                               {SessionCommand::set, "role", "SET ROLE r"}};
  s.apply(cmds);
  CHECK(s.script == "SET SESSION AUTHORIZATION u;SET ROLE r;");
  std::vector<SessionCmd> reset{{SessionCommand::reset, "session_authorization", "RESET SESSION AUTHORIZATION"}};
  s.apply(reset);
  CHECK(s.script.empty());
  std::vector<SessionCmd> again{{SessionCommand::set, "role", "SET ROLE r"},
                                {SessionCommand::set, "session_authorization", "SET SESSION AUTHORIZATION v"}};
  s.apply(again);
  CHECK(s.script == "SET SESSION AUTHORIZATION v;");
}

TEST_CASE("a SQL-level PREPARE is kept once it succeeded, even in a rolled-back block", "[frontend]") {
  Frontend fe;
  BackendState b;
  Expect q = expect('Z');
  q.sql_prepare = SqlPrepared{"p", "PREPARE p AS SELECT 1", nullptr, 7};
  fe.expect.push_back(q);
  fe.on_backend('Z', "T", b);
  CHECK(fe.sql_prepared.count("p") == 1);
  CHECK(b.sql_prepared.at("p") == 7);

  Expect failed = expect('Z');
  failed.sql_prepare = SqlPrepared{"q", "PREPARE q AS SELECT x", nullptr, 8};
  fe.expect.push_back(failed);
  fe.on_backend('E', "", b);
  fe.on_backend('Z', "E", b);
  CHECK(fe.sql_prepared.count("q") == 0);
  fe.forget_prepared(b);
  CHECK(fe.sql_prepared.empty());
  CHECK(b.sql_prepared.empty());
}

TEST_CASE("a write portal's rows are counted at its CommandComplete", "[frontend]") {
  Frontend fe;
  BackendState b;
  Expect bind = expect('2');
  bind.rows = {RowShare{3, 1}};
  fe.expect.push_back(bind);
  fe.expect.push_back(owed_sync());
  fe.on_backend('2', "", b);
  REQUIRE(fe.portal_rows.size() == 1);
  CHECK(fe.portal_rows[0].index == 3);
  auto v = fe.on_backend('C', "INSERT 0 1", b);
  CHECK(v.count_tag);
  fe.on_backend('Z', "I", b);
  CHECK(fe.portal_rows.empty());
}

TEST_CASE("a backend keeps at most max_prepared_statements, closing the least recently used", "[frontend]") {
  ServerStatements s;
  for (const char* n : {"a", "b", "c"}) s.made(n);
  CHECK(s.make_room(0).empty());  // no limit
  CHECK(s.make_room(4).empty());  // room for one more
  s.use("a");
  CHECK(s.make_room(3) == std::vector<std::string>{"b"});
  CHECK(s.size() == 2);
  CHECK(!s.has("b"));
  s.made("d");
  CHECK(s.make_room(1) == std::vector<std::string>{"c", "a", "d"});
  CHECK(s.size() == 0);
}

TEST_CASE("a Close skipped after an error keeps its statement", "[frontend]") {
  Frontend fe;
  BackendState b;
  b.prepared.made("sp_old");
  fe.expect.push_back(expect('2'));  // an earlier Bind that fails
  Expect close = expect('3', true);  // sp_old closed to make room ...
  close.name = "sp_old";
  b.prepared.erase("sp_old");
  fe.expect.push_back(close);
  client_parse(fe, b, "s", "sp_new");  // ... for this one
  Expect again = expect('3', true);  // and a statement re-created with Close + Parse
  again.name = "sp_same";
  fe.expect.push_back(again);
  client_parse(fe, b, "t", "sp_same");
  fe.expect.push_back(owed_sync());
  CHECK(feed(fe, b, "EZ") == "EZ");
  CHECK(b.prepared.has("sp_old"));
  CHECK(b.prepared.has("sp_same"));
  CHECK(!b.prepared.has("sp_new"));
}
