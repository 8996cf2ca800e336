// A libpqxx (libpq) application run through splitpoint: parameters, prepared
// statements across pooled transactions, commit and abort, errors, bytea, pipelines,
// COPY in both directions, nontransaction and NULLs.
//
// Usage: pqxx_client "<connection string to the proxy>" ["<direct connection string>"]
// The optional second string goes straight to PostgreSQL and is used to check what the
// proxy really did (rows committed, backends left idle in transaction).
// Each check prints "ok   ..." or "FAIL ..."; the exit status is 1 if anything failed.
// The proxy should run in transaction mode with a small pool (2), so transactions of
// one client land on different backends.
#include <pqxx/pqxx>

#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

int failures = 0;
std::string current_section;

void fail(const std::string& what) {
  ++failures;
  std::cerr << "FAIL [" << current_section << "] " << what << std::endl;
}

#define CHECK(cond, msg)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::ostringstream os_;                                                               \
      os_ << __FILE__ << ":" << __LINE__ << ": " << #cond << " -- " << msg;                 \
      fail(os_.str());                                                                      \
    }                                                                                       \
  } while (0)

template <typename A, typename B>
void check_eq(const A& got, const B& want, const std::string& what) {
  if (!(got == want)) {
    std::ostringstream os;
    os << what << ": got '" << got << "', want '" << want << "'";
    fail(os.str());
  }
}

// Runs one section; an unexpected exception is a failure of that section only.
void section(const std::string& name, const std::function<void()>& body) {
  current_section = name;
  int before = failures;
  auto t0 = std::chrono::steady_clock::now();
  try {
    body();
  } catch (const pqxx::sql_error& e) {
    fail(std::string("unexpected SQL error (SQLSTATE ") + e.sqlstate() + "): " + e.what() +
         " in query: " + e.query());
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::cout << (failures == before ? "ok   " : "FAIL ") << name << " (" << ms << " ms)" << std::endl;
}

std::string conn_str;
std::string direct_str;

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: pqxx_client CONNSTR [DIRECT_CONNSTR]\n";
    return 2;
  }
  conn_str = argv[1];
  if (argc > 2) direct_str = argv[2];

  std::unique_ptr<pqxx::connection> conn;
  try {
    conn = std::make_unique<pqxx::connection>(conn_str);
  } catch (const std::exception& e) {
    std::cerr << "FAIL cannot connect to the proxy: " << e.what() << std::endl;
    return 1;
  }
  std::unique_ptr<pqxx::connection> direct;
  if (!direct_str.empty()) direct = std::make_unique<pqxx::connection>(direct_str);
  auto direct_scalar = [&](const std::string& sql) -> std::string {
    if (!direct) return {};
    pqxx::nontransaction n(*direct);
    return n.exec(sql)[0][0].c_str();
  };

  section("setup", [&] {
    pqxx::nontransaction n(*conn);
    n.exec("DROP TABLE IF EXISTS pqxx_items, pqxx_blobs, pqxx_stream");
    n.exec("CREATE TABLE pqxx_items (id int PRIMARY KEY, note text, amount numeric)");
    n.exec("CREATE TABLE pqxx_blobs (id int PRIMARY KEY, data bytea)");
    n.exec("CREATE TABLE pqxx_stream (id int PRIMARY KEY, v text, n int)");
    check_eq(conn->server_version() / 10000, 15, "server_version");
  });

  section("exec_params with text parameters", [&] {
    pqxx::work w(*conn);
    auto r = w.exec_params("SELECT $1::int + $2::int, $3::text || '!', $4::text IS NULL, $5::numeric * 2, $6::bool",
                           40, 2, std::string("héllo, 'quoted' \"x\""), nullptr, std::string("1.25"), true);
    check_eq(r.size(), 1u, "row count");
    check_eq(r[0][0].as<int>(), 42, "int sum");
    check_eq(r[0][1].as<std::string>(), std::string("héllo, 'quoted' \"x\"!"), "text parameter");
    check_eq(r[0][2].as<bool>(), true, "NULL parameter is NULL");
    check_eq(r[0][3].as<std::string>(), std::string("2.50"), "numeric");
    check_eq(r[0][4].as<bool>(), true, "bool");
    // The same statement text again with other values (unnamed statement reused).
    for (int i = 0; i < 20; ++i) {
      auto r2 = w.exec_params("SELECT $1::int * 3", i);
      check_eq(r2[0][0].as<int>(), i * 3, "repeated exec_params");
    }
    // Many rows with parameters.
    auto r3 = w.exec_params("SELECT g, md5(g::text) FROM generate_series(1, $1::int) g", 5000);
    check_eq(r3.size(), 5000u, "generate_series rows");
    check_eq(r3[4999][0].as<int>(), 5000, "last row");
    w.commit();
  });

  section("prepared statements across pooled transactions", [&] {
    conn->prepare("add", "SELECT $1::int + $2::int");
    conn->prepare("pid", "SELECT pg_backend_pid()");
    conn->prepare("ins", "INSERT INTO pqxx_items (id, note, amount) VALUES ($1, $2, $3) RETURNING id");
    conn->prepare("get_note", "SELECT note FROM pqxx_items WHERE id = $1");
    // A second client holds a backend now and then, so our transactions land on
    // different backends; the proxy must prepare the statements wherever we go.
    pqxx::connection other(conn_str);
    std::set<std::string> pids;
    for (int i = 0; i < 300; ++i) {
      std::unique_ptr<pqxx::work> holder;
      if (i % 3 == 1) {
        holder = std::make_unique<pqxx::work>(other);
        holder->exec("SELECT 1");  // BEGIN reaches a backend only with a statement
      }
      pqxx::work w(*conn);
      pids.insert(w.exec_prepared("pid")[0][0].c_str());
      check_eq(w.exec_prepared("add", i, 1000)[0][0].as<int>(), i + 1000, "exec_prepared add");
      if (i % 10 == 0) {
        auto r = w.exec_prepared("ins", i, "note " + std::to_string(i), std::to_string(i) + ".5");
        check_eq(r[0][0].as<int>(), i, "exec_prepared insert returning");
      }
      w.commit();
      if (holder) holder->commit();
    }
    CHECK(pids.size() >= 2, "all 300 transactions ran on one backend (" << *pids.begin()
                                                                         << "): pooling not exercised");
    std::cout << "     prepared statements ran on " << pids.size() << " backends" << std::endl;
    // Outside any explicit transaction (nontransaction: each statement on its own).
    pqxx::nontransaction n(*conn);
    for (int i = 0; i < 30; i += 10) {
      check_eq(n.exec_prepared("get_note", i)[0][0].as<std::string>(), "note " + std::to_string(i),
               "exec_prepared select");
    }
    check_eq(direct_str.empty() ? std::string("30") : direct_scalar("SELECT count(*) FROM pqxx_items"),
             std::string("30"), "rows inserted through prepared statements, on PostgreSQL");
  });

  section("unprepare (libpqxx sends SQL DEALLOCATE) and prepare again with another text", [&] {
    // libpqxx 6 unprepares with the SQL statement DEALLOCATE "add" (a simple query),
    // for a statement it created with a protocol-level Parse.
    conn->unprepare("add");
    conn->prepare("add", "SELECT $1::int - $2::int");
    pqxx::nontransaction n(*conn);
    check_eq(n.exec_prepared("add", 10, 4)[0][0].as<int>(), 6, "re-prepared statement with new text");
  });

  section("prepare again with another text under a new name", [&] {
    conn->prepare("sub", "SELECT $1::int - $2::int");
    pqxx::work w(*conn);
    check_eq(w.exec_prepared("sub", 10, 4)[0][0].as<int>(), 6, "second statement");
    check_eq(w.exec_prepared("pid").size(), 1u, "earlier statement still there");
    w.commit();
  });

  section("transaction commit and abort", [&] {
    {
      pqxx::work w(*conn);
      w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 1001, "committed", "1");
      w.exec_params("UPDATE pqxx_items SET amount = amount + 1 WHERE id = $1", 1001);
      w.commit();
    }
    {
      pqxx::work w(*conn);
      w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 1002, "aborted", "1");
      check_eq(w.exec("SELECT count(*) FROM pqxx_items WHERE id = 1002")[0][0].as<int>(), 1,
               "row visible inside its transaction");
      w.abort();
    }
    {
      pqxx::work w(*conn);
      w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 1003, "destructor aborts", "1");
      // no commit: the destructor rolls back
    }
    {
      // An error inside a transaction aborts it; the insert before it is gone too.
      pqxx::work w(*conn);
      w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 1004, "before error", "1");
      bool threw = false;
      try {
        w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 1001, "duplicate", "1");
      } catch (const pqxx::unique_violation& e) {
        threw = true;
        check_eq(std::string(e.sqlstate()), std::string("23505"), "duplicate key SQLSTATE");
      }
      CHECK(threw, "duplicate key did not raise unique_violation");
    }
    pqxx::nontransaction n(*conn);
    auto r = n.exec("SELECT id, note, amount FROM pqxx_items WHERE id > 1000 ORDER BY id");
    check_eq(r.size(), 1u, "only the committed row exists");
    if (r.size() >= 1) {
      check_eq(r[0][0].as<int>(), 1001, "committed id");
      check_eq(r[0][2].as<std::string>(), std::string("2"), "committed update");
    }
    if (direct)
      check_eq(direct_scalar("SELECT string_agg(id::text, ',') FROM pqxx_items WHERE id > 1000"), std::string("1001"),
               "on PostgreSQL: only the committed row");
  });

  section("error followed by a good statement", [&] {
    pqxx::nontransaction n(*conn);
    bool threw = false;
    try {
      n.exec("SELECT 1/0");
    } catch (const pqxx::sql_error& e) {
      threw = true;
      check_eq(std::string(e.sqlstate()), std::string("22012"), "division by zero SQLSTATE");
    }
    CHECK(threw, "1/0 did not raise");
    check_eq(n.exec("SELECT 'good'")[0][0].as<std::string>(), std::string("good"), "statement after error");
    threw = false;
    try {
      n.exec_params("SELECT $1::int", "not a number");
    } catch (const pqxx::data_exception& e) {
      threw = true;
      check_eq(std::string(e.sqlstate()), std::string("22P02"), "invalid input SQLSTATE");
    }
    CHECK(threw, "bad int parameter did not raise data_exception");
    check_eq(n.exec_params("SELECT $1::int", 7)[0][0].as<int>(), 7, "extended statement after error");
    threw = false;
    try {
      n.exec_prepared("no_such_statement");
    } catch (const std::exception&) {
      threw = true;
    }
    CHECK(threw, "unknown prepared statement did not raise");
    threw = false;
    try {
      n.exec("SELEC 1");
    } catch (const pqxx::syntax_error& e) {
      threw = true;
      check_eq(std::string(e.sqlstate()), std::string("42601"), "syntax error SQLSTATE");
    }
    CHECK(threw, "syntax error did not raise");
    check_eq(n.exec_prepared("pid").size(), 1u, "prepared statement after errors");
  });

  section("error inside a transaction, then a good statement", [&] {
    bool threw = false;
    {
      pqxx::work w(*conn);
      try {
        w.exec("SELECT * FROM no_such_table_pqxx");
      } catch (const pqxx::undefined_table& e) {
        threw = true;
        check_eq(std::string(e.sqlstate()), std::string("42P01"), "undefined table SQLSTATE");
      }
    }  // rolled back
    CHECK(threw, "missing table did not raise undefined_table");
    pqxx::work w(*conn);
    check_eq(w.exec("SELECT 2")[0][0].as<int>(), 2, "statement after failed transaction");
    w.commit();
  });

  section("bytea round trip (binary parameters)", [&] {
    std::string all_bytes;
    for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(i));
    std::string big(1 << 20, '\0');
    std::mt19937 rng(42);
    for (auto& c : big) c = static_cast<char>(rng());
    std::vector<std::string> blobs{all_bytes, big, std::string(), std::string("\0\0\0", 3), std::string("\\x00'\"")};
    {
      pqxx::work w(*conn);
      for (std::size_t i = 0; i < blobs.size(); ++i) {
        pqxx::binarystring b(blobs[i].data(), blobs[i].size());
        w.exec_params("INSERT INTO pqxx_blobs VALUES ($1, $2)", static_cast<int>(i), b);
      }
      w.commit();
    }
    pqxx::work w(*conn);
    for (std::size_t i = 0; i < blobs.size(); ++i) {
      auto r = w.exec_params("SELECT data, length(data), md5(data) FROM pqxx_blobs WHERE id = $1", static_cast<int>(i));
      check_eq(r.size(), 1u, "blob row");
      pqxx::binarystring got(r[0][0]);
      check_eq(got.size(), blobs[i].size(), "blob " + std::to_string(i) + " size");
      CHECK(got.str() == blobs[i], "blob " << i << " differs after round trip");
      check_eq(r[0][1].as<std::size_t>(), blobs[i].size(), "server-side length");
    }
    // The server sees exactly the bytes we sent.
    auto r = w.exec("SELECT encode(data, 'hex') FROM pqxx_blobs WHERE id = 0");
    check_eq(r[0][0].as<std::string>(), hex(all_bytes), "server-side bytes of blob 0");
    // A binary parameter for a non-bytea statement parameter: raw int4.
    std::string int4("\x00\x00\x01\x00", 4);
    auto r2 = w.exec_params("SELECT $1::bytea = '\\x00000100'::bytea", pqxx::binarystring(int4.data(), int4.size()));
    check_eq(r2[0][0].as<bool>(), true, "binary parameter bytes");
    w.commit();
  });

  section("pipeline", [&] {
    pqxx::work w(*conn);
    pqxx::pipeline p(w);
    p.retain(10);
    std::vector<pqxx::pipeline::query_id> ids;
    for (int i = 0; i < 100; ++i) ids.push_back(p.insert("SELECT " + std::to_string(i) + " AS n, repeat('x', " +
                                                         std::to_string(i) + ")"));
    p.resume();
    for (int i = 0; i < 100; ++i) {
      auto r = p.retrieve(ids[i]);
      check_eq(r[0][0].as<int>(), i, "pipeline result order");
      check_eq(r[0][1].as<std::string>().size(), static_cast<std::size_t>(i), "pipeline payload");
    }
    CHECK(p.empty(), "pipeline not empty after retrieving everything");
    // Statements with side effects and a read of them in one pipeline.
    auto a = p.insert("INSERT INTO pqxx_items VALUES (2001, 'pipelined', 1)");
    auto b = p.insert("INSERT INTO pqxx_items VALUES (2002, 'pipelined', 2)");
    auto c = p.insert("SELECT count(*) FROM pqxx_items WHERE note = 'pipelined'");
    p.complete();
    check_eq(p.retrieve(a).affected_rows(), 1u, "pipelined insert a");
    check_eq(p.retrieve(b).affected_rows(), 1u, "pipelined insert b");
    check_eq(p.retrieve(c)[0][0].as<int>(), 2, "pipelined select sees the inserts");
    w.commit();
    pqxx::nontransaction n(*conn);
    check_eq(n.exec("SELECT count(*) FROM pqxx_items WHERE note = 'pipelined'")[0][0].as<int>(), 2,
             "pipelined inserts committed");
  });

  section("stream_to / stream_from (COPY)", [&] {
    const int rows = 20000;
    {
      pqxx::work w(*conn);
      pqxx::stream_to s(w, "pqxx_stream", std::vector<std::string>{"id", "v", "n"});
      for (int i = 0; i < rows; ++i) {
        std::string v = "value " + std::to_string(i);
        if (i % 7 == 0) v += "\ttab\nnewline\\backslash ✓";
        s << std::make_tuple(i, v, i * 2);
      }
      s.complete();
      w.commit();
    }
    {
      pqxx::work w(*conn);
      w.exec("UPDATE pqxx_stream SET n = NULL WHERE id % 5 = 0");
      w.commit();
    }
    pqxx::work w(*conn);
    check_eq(w.exec("SELECT count(*), sum(id) FROM pqxx_stream")[0][1].as<long long>(),
             static_cast<long long>(rows) * (rows - 1) / 2, "streamed rows on the server");
    check_eq(w.exec("SELECT v FROM pqxx_stream WHERE id = 7")[0][0].as<std::string>(),
             std::string("value 7\ttab\nnewline\\backslash ✓"), "special characters survive COPY");
    {
      // Typed read of the non-NULL columns.
      pqxx::stream_from s(w, "pqxx_stream", std::vector<std::string>{"id", "v"});
      std::tuple<int, std::string> row;
      int count = 0;
      long long sum = 0;
      bool ok = true;
      while (s >> row) {
        int id = std::get<0>(row);
        std::string want = "value " + std::to_string(id);
        if (id % 7 == 0) want += "\ttab\nnewline\\backslash ✓";
        if (ok && std::get<1>(row) != want) {
          ok = false;
          fail("stream_from row " + std::to_string(id) + ": got '" + std::get<1>(row) + "'");
        }
        ++count;
        sum += id;
      }
      s.complete();
      check_eq(count, rows, "stream_from row count");
      check_eq(sum, static_cast<long long>(rows) * (rows - 1) / 2, "stream_from id sum");
    }
    {
      // Raw lines: NULLs come as \N.
      pqxx::stream_from s(w, "pqxx_stream", std::vector<std::string>{"id", "n"});
      std::string line;
      int nulls = 0, count = 0;
      while (s.get_raw_line(line)) {
        ++count;
        auto tab = line.find('\t');
        std::string n = line.substr(tab + 1);
        if (!n.empty() && n.back() == '\n') n.pop_back();
        if (n == "\\N") ++nulls;
      }
      s.complete();
      check_eq(count, rows, "raw stream_from rows");
      check_eq(nulls, rows / 5, "NULLs seen through COPY TO");
    }
    // The connection is fine after COPY.
    check_eq(w.exec("SELECT 'after copy'")[0][0].as<std::string>(), std::string("after copy"), "query after COPY");
    w.commit();
    // A COPY that fails (duplicate key) leaves a usable connection.
    bool threw = false;
    try {
      pqxx::work w2(*conn);
      pqxx::stream_to s(w2, "pqxx_stream", std::vector<std::string>{"id", "v", "n"});
      s << std::make_tuple(rows + 1, std::string("new"), 1);
      s << std::make_tuple(0, std::string("duplicate"), 1);
      s.complete();
      w2.commit();
    } catch (const pqxx::sql_error& e) {
      threw = true;
    }
    CHECK(threw, "COPY with a duplicate key did not fail");
    pqxx::nontransaction n(*conn);
    check_eq(n.exec_params("SELECT count(*) FROM pqxx_stream WHERE id = $1", rows + 1)[0][0].as<int>(), 0,
             "failed COPY left no row");
  });

  section("nontransaction (autocommit)", [&] {
    pqxx::nontransaction n(*conn);
    n.exec("INSERT INTO pqxx_items VALUES (3001, 'autocommit', 0)");
    // Visible at once from another connection, through the proxy and directly.
    pqxx::connection other(conn_str);
    pqxx::nontransaction o(other);
    check_eq(o.exec("SELECT note FROM pqxx_items WHERE id = 3001")[0][0].as<std::string>(), std::string("autocommit"),
             "autocommit row seen by another client");
    if (direct) check_eq(direct_scalar("SELECT note FROM pqxx_items WHERE id = 3001"), std::string("autocommit"),
                         "autocommit row on PostgreSQL");
    // Multi-statement simple query in a nontransaction.
    auto r = n.exec("SELECT 1; SELECT 2; SELECT 'last'");
    check_eq(r[0][0].as<std::string>(), std::string("last"), "last result of a multi-statement query");
    // Explicit BEGIN/COMMIT in a nontransaction.
    n.exec("BEGIN");
    n.exec("INSERT INTO pqxx_items VALUES (3002, 'explicit', 0)");
    n.exec("COMMIT");
    check_eq(o.exec("SELECT count(*) FROM pqxx_items WHERE id = 3002")[0][0].as<int>(), 1,
             "explicit BEGIN/COMMIT in a nontransaction");
  });

  section("NULLs", [&] {
    pqxx::work w(*conn);
    auto r = w.exec_params("SELECT $1::text, $2::int, $3::bytea, NULL::numeric, ''::text", nullptr, nullptr, nullptr);
    for (int i = 0; i < 4; ++i) CHECK(r[0][i].is_null(), "column " << i << " should be NULL");
    CHECK(!r[0][4].is_null(), "empty string is not NULL");
    check_eq(r[0][4].as<std::string>(), std::string(), "empty string");
    check_eq(r[0][0].as<std::string>("default"), std::string("default"), "as<> with default for NULL");
    w.exec_params("INSERT INTO pqxx_items VALUES ($1, $2, $3)", 4001, nullptr, nullptr);
    auto r2 = w.exec_params("SELECT note IS NULL, amount IS NULL, coalesce(note, 'none') FROM pqxx_items WHERE id = $1",
                            4001);
    check_eq(r2[0][0].as<bool>(), true, "NULL note stored");
    check_eq(r2[0][1].as<bool>(), true, "NULL amount stored");
    check_eq(r2[0][2].as<std::string>(), std::string("none"), "coalesce");
    auto r3 = w.exec_prepared("get_note", 4001);
    CHECK(r3[0][0].is_null(), "NULL through a prepared statement");
    // NULL in arrays and row values.
    check_eq(w.exec("SELECT ARRAY[1, NULL, 3]::text")[0][0].as<std::string>(), std::string("{1,NULL,3}"),
             "NULL in an array");
    w.commit();
  });

  section("no backend left in a transaction", [&] {
    if (!direct) return;
    // Let the proxy hand the backends back, then look at PostgreSQL.
    std::string stuck;
    for (int i = 0; i < 50; ++i) {
      stuck = direct_scalar(
          "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = current_user "
          "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()");
      if (stuck == "0") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    check_eq(stuck, std::string("0"), "backends idle in transaction");
  });

  section("cleanup", [&] {
    pqxx::nontransaction n(*conn);
    n.exec("DROP TABLE pqxx_items, pqxx_blobs, pqxx_stream");
  });

  if (failures) {
    std::cerr << "pqxx_client: " << failures << " check(s) failed" << std::endl;
    return 1;
  }
  std::cout << "pqxx_client: all checks passed" << std::endl;
  return 0;
}
