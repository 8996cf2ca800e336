// Loading and whole-file validation of the YAML configuration (SPEC §2).
#include "config/config.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace splitpoint::config;
using namespace std::chrono_literals;

namespace {

// The example of SPEC §2, verbatim.
constexpr const char* kSpecExample = R"(listen: 0.0.0.0:6432
metrics_listen: 0.0.0.0:9930
pool_mode: transaction            # transaction | session
auth: scram-sha-256               # trust | password | md5 | scram-sha-256
tls:                              # optional; without it SSLRequest is answered 'N'
  cert: /etc/splitpoint/tls.crt
  key: /etc/splitpoint/tls.key
users:
  - name: app
    password: secret              # plaintext, or a SCRAM-SHA-256$... / md5... verifier
  - name: admin
    password: adminpw
    admin: true                   # may use the admin console
shards:
  - name: s0
    host: 127.0.0.1
    port: 5433
    database: app                 # default: the client's database name
    user: app                     # backend credentials; default: the client's own
    password: secret
    pool_size: 20
  - name: s1
    host: 127.0.0.1
    port: 5434
distributions:                    # a key space; its tables are co-located by key
  - name: by_user
    method: hash                  # hash | range | list
    partitions: 64                # logical partitions (hash only); fixed for life
    placement:                    # optional; default: shard i of N gets [floor(i*P/N), floor((i+1)*P/N))
      s0: 0-31
      s1: 32-63
    tables:
      users: id                   # table: key column
      orders: user_id
  - name: by_id_range
    method: range
    ranges:                       # ordered upper bounds; each range is one logical partition
      - { upto: 1000, shard: s0 } # (-inf, 1000)
      - { upto: 2000, shard: s1 } # [1000, 2000)
      - { shard: s1 }             # [2000, +inf)
    tables:
      events: id
  - name: by_region
    method: list
    lists: { s0: [jp, kr], s1: [us, eu] }
    default: s0                   # optional; without it an unlisted value is unroutable
    tables:
      stores: region
reference_tables: [countries]     # a full copy on every shard
unlisted_tables: reference        # reference (default) | reject | shard:<name>
scatter:
  deadline: 5s                    # default per-statement deadline for multi-shard work
  max_deadline: 60s               # cap on any session/hint override
  partial_results: deny           # deny | allow
  max_buffered_rows: 1000000      # cap for merges that must buffer (GROUP BY, hash DISTINCT)
transactions:
  cross_shard_writes: two_phase   # two_phase (default) | refuse
timeouts:
  client_login: 10s
  client_idle: 0                  # 0 = never
  server_connect: 3s
  shutdown: 30s
)";

constexpr const char* kTwoShards = R"(shards:
  - name: s0
  - name: s1
)";

std::string describe(const LoadResult& r) {
  std::string out;
  for (const ConfigError& e : r.errors) out += "  line " + std::to_string(e.line) + ": " + e.message + "\n";
  return out;
}

// True when some error is on `line` and its message contains `text`.
bool has_error(const LoadResult& r, int line, const std::string& text) {
  for (const ConfigError& e : r.errors)
    if (e.line == line && e.message.find(text) != std::string::npos) return true;
  return false;
}

// Loads `yaml` and expects exactly one error, on `line`, mentioning `text`.
void expect_one_error(const std::string& yaml, int line, const std::string& text) {
  const LoadResult r = load_string(yaml);
  INFO("config:\n" << yaml << "errors:\n" << describe(r));
  CHECK_FALSE(r.config.has_value());
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].line == line);
  CHECK_THAT(r.errors[0].message, Catch::Matchers::Contains(text));
}

// A file that is removed when the test ends.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& content, const char* tag = "pw") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("splitpoint_config_test_" + std::to_string(::getpid()) + "_" + tag + std::to_string(++n));
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

Config load_ok(const std::string& yaml) {
  const LoadResult r = load_string(yaml);
  INFO("errors:\n" << describe(r));
  REQUIRE(r.errors.empty());
  REQUIRE(r.config.has_value());
  return *r.config;
}

}  // namespace

TEST_CASE("the SPEC example loads with every field as written", "[config]") {
  const Config c = load_ok(kSpecExample);

  CHECK(c.listen.host == "0.0.0.0");
  CHECK(c.listen.port == 6432);
  CHECK(c.metrics_listen.host == "0.0.0.0");
  CHECK(c.metrics_listen.port == 9930);
  CHECK(c.pool_mode == PoolMode::transaction);
  CHECK(c.auth == AuthMethod::scram_sha_256);
  REQUIRE(c.tls.has_value());
  CHECK(c.tls->cert == "/etc/splitpoint/tls.crt");
  CHECK(c.tls->key == "/etc/splitpoint/tls.key");

  REQUIRE(c.users.size() == 2);
  CHECK(c.users[0].name == "app");
  CHECK(c.users[0].password == "secret");
  CHECK_FALSE(c.users[0].admin);
  CHECK(c.users[0].line == 9);
  CHECK(c.users[1].name == "admin");
  CHECK(c.users[1].password == "adminpw");
  CHECK(c.users[1].admin);
  CHECK(c.users[1].line == 11);

  REQUIRE(c.shards.size() == 2);
  const Shard& s0 = c.shards[0];
  CHECK(s0.name == "s0");
  CHECK(s0.host == "127.0.0.1");
  CHECK(s0.port == 5433);
  CHECK(s0.database == "app");
  CHECK(s0.user == "app");
  CHECK(s0.password == "secret");
  CHECK(s0.pool_size == 20);
  CHECK(s0.line == 15);
  const Shard& s1 = c.shards[1];
  CHECK(s1.name == "s1");
  CHECK(s1.host == "127.0.0.1");
  CHECK(s1.port == 5434);
  CHECK(s1.database.empty());
  CHECK(s1.user.empty());
  CHECK(s1.password.empty());
  CHECK(s1.pool_size == 20);
  CHECK(s1.line == 22);

  REQUIRE(c.distributions.size() == 3);
  const Distribution& hash = c.distributions[0];
  CHECK(hash.name == "by_user");
  CHECK(hash.method == Method::hash);
  CHECK(hash.partitions == 64);
  CHECK(hash.line == 26);
  REQUIRE(hash.placement.size() == 64);
  for (std::size_t p = 0; p < 64; ++p) CHECK(hash.placement[p] == (p < 32 ? 0u : 1u));
  CHECK(hash.tables ==
        std::vector<std::pair<std::string, std::string>>{{"users", "id"}, {"orders", "user_id"}});
  CHECK(hash.ranges.empty());
  CHECK(hash.lists.empty());
  CHECK_FALSE(hash.default_shard.has_value());

  const Distribution& range = c.distributions[1];
  CHECK(range.name == "by_id_range");
  CHECK(range.method == Method::range);
  CHECK(range.line == 35);
  REQUIRE(range.ranges.size() == 3);
  CHECK(range.ranges[0].upto == std::optional<std::string>("1000"));
  CHECK(range.ranges[0].shard == 0);
  CHECK(range.ranges[1].upto == std::optional<std::string>("2000"));
  CHECK(range.ranges[1].shard == 1);
  CHECK_FALSE(range.ranges[2].upto.has_value());
  CHECK(range.ranges[2].shard == 1);
  CHECK(range.tables == std::vector<std::pair<std::string, std::string>>{{"events", "id"}});
  CHECK(range.placement.empty());

  const Distribution& list = c.distributions[2];
  CHECK(list.name == "by_region");
  CHECK(list.method == Method::list);
  REQUIRE(list.lists.size() == 2);
  CHECK(list.lists[0].shard == 0);
  CHECK(list.lists[0].values == std::vector<std::string>{"jp", "kr"});
  CHECK(list.lists[1].shard == 1);
  CHECK(list.lists[1].values == std::vector<std::string>{"us", "eu"});
  CHECK(list.default_shard == std::optional<std::size_t>(0));
  CHECK(list.tables == std::vector<std::pair<std::string, std::string>>{{"stores", "region"}});

  CHECK(c.reference_tables == std::vector<std::string>{"countries"});
  CHECK(c.unlisted_tables == UnlistedPolicy::reference);
  CHECK(c.scatter.deadline == 5s);
  CHECK(c.scatter.max_deadline == 60s);
  CHECK(c.scatter.partial_results == PartialResults::deny);
  CHECK(c.scatter.max_buffered_rows == 1000000);
  CHECK(c.cross_shard_writes == CrossShardWrites::two_phase);
  CHECK(c.timeouts.client_login == 10s);
  CHECK(c.timeouts.client_idle == 0ms);
  CHECK(c.timeouts.server_connect == 3s);
  CHECK(c.timeouts.shutdown == 30s);

  // Not in the example: the defaults.
  CHECK(c.max_client_connections == 1000);
  CHECK(c.max_message_size == std::size_t{1} << 30);
  CHECK(c.workers == 0);
  CHECK(c.scheduling == Scheduling::normal);
  CHECK(c.max_prepared_statements == 200);
  CHECK(c.log_level == "info");

  REQUIRE(c.find_user("admin") == &c.users[1]);
  CHECK(c.find_user("nobody") == nullptr);
  CHECK(c.find_shard("s1") == std::optional<std::size_t>(1));
  CHECK_FALSE(c.find_shard("s2").has_value());
}

TEST_CASE("a minimal file gets the documented defaults", "[config]") {
  const Config c = load_ok("shards:\n  - name: only\n");
  CHECK(c.listen.host == "127.0.0.1");
  CHECK(c.listen.port == 6432);
  CHECK(c.metrics_listen.host == "127.0.0.1");
  CHECK(c.metrics_listen.port == 9930);
  CHECK(c.pool_mode == PoolMode::transaction);
  CHECK(c.auth == AuthMethod::trust);
  CHECK_FALSE(c.tls.has_value());
  CHECK(c.users.empty());
  REQUIRE(c.shards.size() == 1);
  CHECK(c.shards[0].host == "127.0.0.1");
  CHECK(c.shards[0].port == 5432);
  CHECK(c.shards[0].pool_size == 20);
  CHECK(c.distributions.empty());
  CHECK(c.unlisted_tables == UnlistedPolicy::reference);
  CHECK(c.scatter.deadline == 5s);
  CHECK(c.scatter.max_deadline == 60s);
  CHECK(c.scatter.partial_results == PartialResults::deny);
  CHECK(c.scatter.max_buffered_rows == 1000000);
  CHECK(c.cross_shard_writes == CrossShardWrites::two_phase);
  CHECK(c.timeouts.client_login == 10s);
  CHECK(c.timeouts.client_idle == 0ms);
  CHECK(c.timeouts.server_connect == 3s);
  CHECK(c.timeouts.shutdown == 30s);
}

TEST_CASE("every other key and value form is read", "[config]") {
  const Config c = load_ok(R"(listen: "[::1]:7000"
metrics_listen: localhost:9100
pool_mode: session
auth: md5
max_client_connections: 5000
max_message_size: 64MB
workers: 4
scheduling: batch
max_prepared_statements: 0
log_level: debug
shards:
  - name: a
    host: db-a.internal
  - name: b
  - name: c
users:
  - { name: u, password: "md5abc", admin: no }
distributions:
  - name: h
    partitions: 8              # method defaults to hash
    placement:
      a: [0-1, 6]
      b: 2
      c: [3-5, 7]
  - name: dates
    method: range
    ranges:
      - { upto: '2024-01-01', shard: a }
      - { upto: 2024-07-01, shard: b }
      - { upto: '2025-01-01 00:00:00+00', shard: c }
  - name: r
    method: range
    ranges:
      - { upto: -10, shard: a }
      - { upto: -5, shard: a }
      - { upto: 900, shard: b }     # 900 < 1000 as integers, not as strings
      - { upto: 1000, shard: c }
unlisted_tables: shard:c
scatter: { deadline: 250ms, max_deadline: 2m, partial_results: allow, max_buffered_rows: 0 }
transactions: { cross_shard_writes: refuse }
timeouts: { client_login: 1500, client_idle: 1h, server_connect: 1s, shutdown: 0 }
)");
  CHECK(c.listen.host == "::1");
  CHECK(c.listen.port == 7000);
  CHECK(c.metrics_listen.host == "localhost");
  CHECK(c.metrics_listen.port == 9100);
  CHECK(c.pool_mode == PoolMode::session);
  CHECK(c.auth == AuthMethod::md5);
  CHECK(c.max_client_connections == 5000);
  CHECK(c.max_message_size == 64u << 20);
  CHECK(c.workers == 4);
  CHECK(c.scheduling == Scheduling::batch);
  CHECK(c.max_prepared_statements == 0);
  CHECK(c.log_level == "debug");
  CHECK(c.shards[0].host == "db-a.internal");
  CHECK_FALSE(c.users.at(0).admin);
  CHECK(c.users[0].password == "md5abc");
  const Distribution& h = c.distributions.at(0);
  CHECK(h.method == Method::hash);
  CHECK(h.placement == std::vector<std::size_t>{0, 0, 1, 2, 2, 2, 0, 2});
  const Distribution& dates = c.distributions.at(1);
  REQUIRE(dates.ranges.size() == 3);
  CHECK(dates.ranges[1].upto == std::optional<std::string>("2024-07-01"));
  CHECK(dates.ranges[2].shard == 2);
  CHECK(c.distributions.at(2).ranges.at(1).upto == std::optional<std::string>("-5"));
  CHECK(c.unlisted_tables == UnlistedPolicy::shard);
  CHECK(c.unlisted_shard == 2);
  CHECK(c.scatter.deadline == 250ms);
  CHECK(c.scatter.max_deadline == 2min);
  CHECK(c.scatter.partial_results == PartialResults::allow);
  CHECK(c.scatter.max_buffered_rows == 0);
  CHECK(c.cross_shard_writes == CrossShardWrites::refuse);
  CHECK(c.timeouts.client_login == 1500ms);
  CHECK(c.timeouts.client_idle == 1h);
  CHECK(c.timeouts.server_connect == 1s);
  CHECK(c.timeouts.shutdown == 0ms);
}

TEST_CASE("timeouts.query: a duration, 0 (the default) is off", "[config]") {
  CHECK(load_ok(kTwoShards).timeouts.query == 0ms);
  CHECK(load_ok(std::string(kTwoShards) + "timeouts: { query: 2s }\n").timeouts.query == 2s);
  CHECK(load_ok(std::string(kTwoShards) + "timeouts: { query: 1500 }\n").timeouts.query == 1500ms);
  CHECK(load_ok(std::string(kTwoShards) + "timeouts:\n  query: 0\n  server_connect: 1s\n").timeouts.query == 0ms);
  expect_one_error(std::string(kTwoShards) + "timeouts:\n  query: -1s\n", 5,
                   "timeouts.query: expected a duration");
  expect_one_error(std::string(kTwoShards) + "timeouts:\n  query: forever\n", 5,
                   "timeouts.query: expected a duration");
  expect_one_error(std::string(kTwoShards) + "timeouts: { query_timeout: 1s }\n", 4,
                   "timeouts.query_timeout: unknown key");
}

TEST_CASE("timeouts.deadlock: a duration, 1s by default, 0 is off", "[config]") {
  CHECK(load_ok(kTwoShards).timeouts.deadlock == 1s);
  CHECK(load_ok(std::string(kTwoShards) + "timeouts: { deadlock: 250ms }\n").timeouts.deadlock == 250ms);
  CHECK(load_ok(std::string(kTwoShards) + "timeouts: { deadlock: 0 }\n").timeouts.deadlock == 0ms);
  expect_one_error(std::string(kTwoShards) + "timeouts:\n  deadlock: -1s\n", 5,
                   "timeouts.deadlock: expected a duration");
}

TEST_CASE("unlisted_tables: reject", "[config]") {
  CHECK(load_ok(std::string(kTwoShards) + "unlisted_tables: reject\n").unlisted_tables ==
        UnlistedPolicy::reject);
}

TEST_CASE("default placement: shard i of N gets [floor(i*P/N), floor((i+1)*P/N))", "[config]") {
  const std::string hash64 = "distributions:\n  - { name: d, method: hash, partitions: 64 }\n";
  SECTION("64 partitions over 2 shards") {
    const Config c = load_ok(std::string(kTwoShards) + hash64);
    const auto& placement = c.distributions.at(0).placement;
    REQUIRE(placement.size() == 64);
    for (std::size_t p = 0; p < 64; ++p) CHECK(placement[p] == (p < 32 ? 0u : 1u));
  }
  SECTION("64 partitions over 3 shards: 21, 21, 22") {
    const Config c = load_ok(std::string(kTwoShards) + "  - name: s2\n" + hash64);
    const auto& placement = c.distributions.at(0).placement;
    REQUIRE(placement.size() == 64);
    for (std::size_t p = 0; p < 64; ++p) CHECK(placement[p] == (p < 21 ? 0u : p < 42 ? 1u : 2u));
  }
  SECTION("fewer partitions than shards leaves some shards empty") {
    // 2 partitions over 3 shards: s0 gets [0, 0), s1 [0, 1), s2 [1, 2).
    const Config c = load_ok(std::string(kTwoShards) + "  - name: s2\n" +
                             "distributions:\n  - { name: d, partitions: 2 }\n");
    CHECK(c.distributions.at(0).placement == std::vector<std::size_t>{1, 2});
  }
}

TEST_CASE("parse_duration", "[config]") {
  CHECK(parse_duration("0") == 0ms);
  CHECK(parse_duration("250") == 250ms);  // a bare number is milliseconds, as in PostgreSQL
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("5s") == 5s);
  CHECK(parse_duration("5 s") == 5s);
  CHECK(parse_duration("2m") == 2min);
  CHECK(parse_duration("2min") == 2min);
  CHECK(parse_duration("1h") == 1h);
  CHECK(parse_duration("1d") == 24h);
  CHECK(parse_duration(" 7s ") == 7s);
  for (const char* bad : {"", "s", "-1s", "+1s", "1.5s", "5S", "5sec", "5 x", "ms5", "1e3",
                          "99999999999999999999", "9223372036854775807s"})
    CHECK_FALSE(parse_duration(bad).has_value());
}

TEST_CASE("parse_size", "[config]") {
  CHECK(parse_size("0") == 0u);
  CHECK(parse_size("1024") == 1024u);
  CHECK(parse_size("100B") == 100u);
  CHECK(parse_size("64kB") == 64u * 1024);
  CHECK(parse_size("64KB") == 64u * 1024);
  CHECK(parse_size("64KiB") == 64u * 1024);
  CHECK(parse_size("16MB") == 16u << 20);
  CHECK(parse_size("16 MiB") == 16u << 20);
  CHECK(parse_size("1GB") == std::size_t{1} << 30);
  CHECK(parse_size("1GiB") == std::size_t{1} << 30);
  CHECK(parse_size("2TB") == std::size_t{2} << 40);
  for (const char* bad :
       {"", "kB", "-1", "1.5MB", "16mb", "16M", "1 XB", "18446744073709551616", "17179869184GB"})
    CHECK_FALSE(parse_size(bad).has_value());
}

TEST_CASE("default_config is the SPEC §1 built-in default", "[config]") {
  const Config c = default_config();
  CHECK(c.listen.host == "127.0.0.1");
  CHECK(c.listen.port == 6432);
  CHECK(c.metrics_listen.host == "127.0.0.1");
  CHECK(c.metrics_listen.port == 9930);
  REQUIRE(c.shards.size() == 1);
  CHECK(c.shards[0].name == "s0");
  CHECK(c.shards[0].host == "127.0.0.1");
  CHECK(c.shards[0].port == 5432);
  CHECK(c.distributions.empty());
  CHECK(c.users.empty());
  CHECK(c.auth == AuthMethod::trust);
  CHECK(c.find_shard("s0") == std::optional<std::size_t>(0));
}

TEST_CASE("YAML syntax errors are reported with their line", "[config][errors]") {
  expect_one_error("shards:\n  - name: s0\nscatter: { deadline: 5s\nworkers: 2\n", 4, "YAML syntax error");
  expect_one_error("shards:\n  - name: s0\n\tport: 1\n", 3, "YAML syntax error");
  expect_one_error(std::string(kTwoShards) + "---\nworkers: 1\n", 5, "only one YAML document");
}

TEST_CASE("unknown and duplicate keys are errors at every level", "[config][errors]") {
  expect_one_error(std::string(kTwoShards) + "listne: 0.0.0.0:1\n", 4,
                   "listne: unknown key (did you mean \"listen\"?)");
  expect_one_error("shards:\n  - name: s0\n    hsot: x\n", 3,
                   "shards[0].hsot: unknown key (did you mean \"host\"?)");
  expect_one_error(std::string(kTwoShards) + "scatter:\n  deadline: 1s\n  colour: blue\n", 6,
                   "scatter.colour: unknown key");
  expect_one_error(std::string(kTwoShards) + "timeouts: { idle: 1s }\n", 4, "timeouts.idle: unknown key");
  expect_one_error(std::string(kTwoShards) + "tls: { cert: a, key: b, ca: c }\n", 4, "tls.ca: unknown key");
  expect_one_error(std::string(kTwoShards) + "users:\n  - { name: u, password: p, role: x }\n", 5,
                   "users[0].role");
  expect_one_error(std::string(kTwoShards) + "transactions:\n  two_phase: true\n", 5,
                   "transactions.two_phase");
  expect_one_error(std::string(kTwoShards) +
                       "distributions:\n  - name: r\n    method: range\n    ranges:\n"
                       "      - { upto: 1, shard: s0 }\n      - { below: 2, shard: s1 }\n",
                   9, "distributions[0].ranges[1].below: unknown key");
  expect_one_error(std::string(kTwoShards) + "distributions:\n  - { name: d, partitions: 4, colocate: x }\n",
                   5, "distributions[0].colocate: unknown key");
  expect_one_error(std::string(kTwoShards) + "workers: 1\nworkers: 2\n", 5,
                   "workers: duplicate key (first at line 4)");
  expect_one_error(std::string(kTwoShards) +
                       "distributions:\n  - name: d\n    partitions: 4\n"
                       "    tables: { t: a, t: b }\n",
                   7, "duplicate key");
}

TEST_CASE("wrong types and values", "[config][errors]") {
  const std::string base = kTwoShards;
  expect_one_error(base + "scatter: { deadline: 5 seconds }\n", 4, "scatter.deadline: expected a duration");
  expect_one_error(base + "timeouts:\n  shutdown: -1s\n", 5, "timeouts.shutdown: expected a duration");
  expect_one_error(base + "timeouts:\n  server_connect: 0\n", 5, "must be greater than 0");
  expect_one_error(base + "scatter: { deadline: 0 }\n", 4, "must be greater than 0");
  expect_one_error(base + "scatter: { deadline: 2m }\n", 4, "exceeds scatter.max_deadline");
  expect_one_error(base + "scatter:\n  max_deadline: 1s\n", 5, "exceeds scatter.max_deadline");
  expect_one_error(base + "pool_mode: statement\n", 4,
                   "pool_mode: expected one of transaction | session, got \"statement\"");
  expect_one_error(base + "auth: scram\n", 4, "auth: expected one of");
  expect_one_error(base + "scatter: { partial_results: maybe }\n", 4, "scatter.partial_results");
  expect_one_error(base + "transactions: { cross_shard_writes: 2pc }\n", 4, "cross_shard_writes");
  expect_one_error(base + "unlisted_tables: drop\n", 4, "expected reference, reject or shard:<name>");
  expect_one_error(base + "log_level: verbose\n", 4, "log_level");
  expect_one_error("shards:\n  - name: s0\n    port: 70000\n", 3,
                   "shards[0].port: must be between 1 and 65535");
  expect_one_error("shards:\n  - name: s0\n    port: 0\n", 3, "must be between 1 and 65535");
  expect_one_error("shards:\n  - name: s0\n    port: fivefourthreetwo\n", 3, "expected an integer");
  expect_one_error("shards:\n  - name: s0\n    pool_size: 0\n", 3,
                   "shards[0].pool_size: must be at least 1, got 0");
  expect_one_error("shards:\n  - name: s0\n    host:\n", 3,
                   "shards[0].host: expected a single value, got no value");
  expect_one_error("shards:\n  - name: s0\n    host: ''\n", 3, "must not be empty");
  expect_one_error("shards:\n  - name: 's 0'\n", 2, "not a valid name");
  expect_one_error(base + "listen: 0.0.0.0:65536\n", 4, "listen: the port must be between 1 and 65535");
  expect_one_error(base + "listen: 6432\n", 4, "expected host:port");
  expect_one_error(base + "metrics_listen: ::1:9930\n", 4, "brackets");
  expect_one_error(base + "metrics_listen: :9930\n", 4, "the host is missing");
  expect_one_error(base + "listen: [0.0.0.0, 6432]\n", 4, "expected a single value, got a list");
  expect_one_error(base + "users:\n  - { name: u, password: p, admin: maybe }\n", 5,
                   "expected true or false");
  expect_one_error(base + "users:\n  - { name: u }\n", 5, "users[0]: missing required key \"password\"");
  expect_one_error(base + "tls:\n  cert: /c\n", 4, "tls: missing required key \"key\"");
  expect_one_error(base + "max_message_size: 512\n", 4, "max_message_size: must be between 1024");
  expect_one_error(base + "max_message_size: 2GB\n", 4, "max_message_size: must be between");
  expect_one_error(base + "max_message_size: lots\n", 4, "expected a size");
  expect_one_error(base + "max_client_connections: 0\n", 4, "must be at least 1");
  expect_one_error(base + "workers: -1\n", 4, "workers: must be between 0 and 1024");
  expect_one_error(base + "scatter: { max_buffered_rows: -1 }\n", 4, "max_buffered_rows");
  expect_one_error(base + "scatter: 5s\n", 4, "scatter: expected a mapping of keys");
  expect_one_error(base + "reference_tables: countries\n", 4, "reference_tables: expected a list");
  expect_one_error("- shards\n", 1, "must be a mapping");
}

TEST_CASE("duplicate names", "[config][errors]") {
  expect_one_error("shards:\n  - name: s0\n  - name: s1\n  - name: s0\n", 4,
                   "duplicate shard name \"s0\" (first at line 2)");
  expect_one_error(
      std::string(kTwoShards) + "users:\n  - { name: u, password: a }\n  - { name: u, password: b }\n", 6,
      "duplicate user name \"u\"");
  expect_one_error(std::string(kTwoShards) +
                       "distributions:\n  - { name: d, partitions: 2 }\n  - { name: x, partitions: 2 }\n"
                       "  - { name: d, partitions: 4 }\n",
                   7, "duplicate distribution name \"d\" (first at line 5)");
}

TEST_CASE("unknown shard names", "[config][errors]") {
  const std::string base = std::string(kTwoShards) + "distributions:\n";
  expect_one_error(base + "  - name: h\n    partitions: 4\n    placement: { s0: 0-1, s9: 2-3 }\n", 7,
                   "distributions[0].placement.s9: unknown shard \"s9\" (shards: s0, s1)");
  expect_one_error(base +
                       "  - name: r\n    method: range\n    ranges:\n      - { upto: 5, shard: s0 }\n"
                       "      - { shard: s7 }\n",
                   9, "distributions[0].ranges[1].shard: unknown shard \"s7\"");
  expect_one_error(base + "  - name: l\n    method: list\n    lists:\n      s0: [a]\n      sX: [b]\n", 9,
                   "distributions[0].lists.sX: unknown shard");
  expect_one_error(base + "  - name: l\n    method: list\n    lists: { s0: [a] }\n    default: nowhere\n", 8,
                   "distributions[0].default: unknown shard \"nowhere\"");
  expect_one_error(std::string(kTwoShards) + "unlisted_tables: shard:s3\n", 4,
                   "unlisted_tables: unknown shard \"s3\"");
}

TEST_CASE("hash placement must cover every partition exactly once", "[config][errors]") {
  const std::string base = std::string(kTwoShards) + "distributions:\n  - name: h\n    partitions: 64\n";
  SECTION("a gap") {
    expect_one_error(base + "    placement:\n      s0: 0-31\n      s1: [32-40, 50-63]\n", 7,
                     "distributions[0].placement: partitions 41-49 are not placed on any shard");
  }
  SECTION("a partition placed twice") {
    expect_one_error(base + "    placement:\n      s0: 0-32\n      s1: 32-63\n", 9,
                     "distributions[0].placement.s1: partition 32 is already placed on \"s0\"");
  }
  SECTION("a list entry overlapping its own shard") {
    expect_one_error(base + "    placement:\n      s0: [0-31, 31]\n      s1: 32-63\n", 8,
                     "partition 31 is already placed on \"s0\"");
  }
  SECTION("out of range") {
    expect_one_error(base + "    placement:\n      s0: 0-31\n      s1: 32-64\n", 9,
                     "partition 64 is out of range: partitions are 0-63");
  }
  SECTION("out of range and overlapping: both reported") {
    const LoadResult r = load_string(base + "    placement:\n      s0: 0-3\n      s1: 3-70\n");
    INFO(describe(r));
    CHECK(r.errors.size() == 2);
    CHECK(has_error(r, 9, "partition 70 is out of range: partitions are 0-63"));
    CHECK(has_error(r, 9, "partition 3 is already placed on \"s0\""));
  }
  SECTION("malformed and reversed") {
    const LoadResult r = load_string(base + "    placement:\n      s0: 0-31\n      s1: [32-4x, 63-32]\n");
    INFO(describe(r));
    CHECK(r.errors.size() == 2);
    CHECK(has_error(r, 9, "expected a partition number or a range such as 0-31, got \"32-4x\""));
    CHECK(has_error(r, 9, "reversed"));
  }
  SECTION("partitions < 1 and a missing partitions") {
    expect_one_error(std::string(kTwoShards) + "distributions:\n  - { name: h, partitions: 0 }\n", 5,
                     "distributions[0].partitions: must be between 1 and 65536, got 0");
    expect_one_error(std::string(kTwoShards) + "distributions:\n  - { name: h, method: hash }\n", 5,
                     "distributions[0]: missing required key \"partitions\"");
  }
}

TEST_CASE("ranges must be ordered, not overlap, and only the last may be open", "[config][errors]") {
  const std::string base =
      std::string(kTwoShards) + "distributions:\n  - name: r\n    method: range\n    ranges:\n";
  expect_one_error(
      base + "      - { upto: 2000, shard: s0 }\n      - { upto: 1000, shard: s1 }\n      - { shard: s1 }\n",
      9,
      "ranges[1].upto: ranges must be in increasing order of upto: \"1000\" is not above \"2000\" (line 8)");
  expect_one_error(base + "      - { upto: 1000, shard: s0 }\n      - { upto: 1000, shard: s1 }\n", 9,
                   "not above \"1000\"");
  expect_one_error(
      base + "      - { upto: '2024-06-01', shard: s0 }\n      - { upto: '2024-01-01', shard: s1 }\n", 9,
      "not above \"2024-06-01\"");
  expect_one_error(base + "      - { shard: s0 }\n      - { upto: 5, shard: s1 }\n", 8,
                   "ranges[0]: only the last range may omit upto");
  expect_one_error(base + "      - { upto: 5 }\n", 8, "missing required key \"shard\"");
  expect_one_error(std::string(kTwoShards) + "distributions:\n  - { name: r, method: range, ranges: [] }\n",
                   5, "at least one range is required");
  expect_one_error(base + "      - { upto: -5, shard: s0 }\n      - { upto: -10, shard: s1 }\n", 9,
                   "\"-10\" is not above \"-5\"");
  expect_one_error(
      base + "      - { upto: 99999999999999999999, shard: s0 }\n      - { upto: 100, shard: s1 }\n", 9,
      "\"100\" is not above \"99999999999999999999\"");
  // Mixed integers and strings compare as strings: "1000" sorts before "900".
  expect_one_error(base +
                       "      - { upto: 900, shard: s0 }\n      - { upto: 1000, shard: s1 }\n"
                       "      - { upto: x, shard: s1 }\n",
                   9, "\"1000\" is not above \"900\"");
}

TEST_CASE("list values and tables must be unique", "[config][errors]") {
  const std::string base = std::string(kTwoShards) + "distributions:\n";
  expect_one_error(
      base +
          "  - name: l\n    method: list\n    lists:\n      s0: [jp, kr]\n      s1: [us,\n           jp]\n",
      10, "value \"jp\" is already listed for shard \"s0\" (line 8)");
  expect_one_error(base +
                       "  - { name: a, partitions: 2, tables: { users: id } }\n"
                       "  - { name: b, partitions: 2, tables: { orders: id, users: id } }\n",
                   6, "table \"users\" is already in distribution \"a\" (line 5)");
  expect_one_error(base +
                       "  - { name: a, partitions: 2, tables: { users: id } }\nreference_tables:\n  - "
                       "countries\n  - users\n",
                   8, "reference_tables[1]: table \"users\" is already in distribution \"a\"");
  expect_one_error(std::string(kTwoShards) + "reference_tables: [a, a]\n", 4,
                   "table \"a\" is already in reference_tables");
  expect_one_error(base + "  - { name: l, method: list, lists: { s0: [a] }, partitions: 4 }\n", 5,
                   "distributions[0].partitions: only allowed with method: hash");
  expect_one_error(base + "  - { name: l, method: lists }\n", 5, "expected one of hash | range | list");
}

TEST_CASE("no shards at all is an error", "[config][errors]") {
  expect_one_error("workers: 2\n", 0, "no shards configured");
  expect_one_error("", 0, "no shards configured");
  expect_one_error("# nothing but a comment\n", 0, "no shards configured");
  expect_one_error("workers: 2\nshards: []\n", 2, "no shards configured");
}

TEST_CASE("several errors are all reported, sorted by line", "[config][errors]") {
  const LoadResult r = load_string(R"(listen: 0.0.0.0:99999
shards:
  - name: s0
    pool_size: 0
  - name: s0
distributions:
  - name: h
    partitions: 4
    placement: { s0: 0-2 }
  - name: r
    method: range
    ranges:
      - { upto: 10, shard: s1 }
      - { upto: 5, shard: s0 }
scatter:
  deadline: soon
  bogus: 1
timeouts: { client_idle: forever }
)");
  INFO(describe(r));
  CHECK_FALSE(r.config.has_value());
  CHECK(r.errors.size() == 9);
  CHECK(has_error(r, 1, "listen"));
  CHECK(has_error(r, 4, "pool_size"));
  CHECK(has_error(r, 5, "duplicate shard name"));
  CHECK(has_error(r, 9, "partition 3 is not placed"));
  CHECK(has_error(r, 13, "unknown shard \"s1\""));
  CHECK(has_error(r, 14, "increasing order"));
  CHECK(has_error(r, 16, "scatter.deadline"));
  CHECK(has_error(r, 17, "scatter.bogus: unknown key"));
  CHECK(has_error(r, 18, "timeouts.client_idle"));
  for (std::size_t i = 1; i < r.errors.size(); ++i) CHECK(r.errors[i - 1].line <= r.errors[i].line);
}

TEST_CASE("load_file", "[config]") {
  SECTION("a missing file is one error on line 0") {
    const LoadResult r = load_file("/nonexistent/splitpoint.yaml");
    CHECK_FALSE(r.config.has_value());
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].line == 0);
    CHECK_THAT(r.errors[0].message, Catch::Matchers::Contains("/nonexistent/splitpoint.yaml") &&
                                        Catch::Matchers::Contains("No such file"));
  }
  SECTION("a directory is one error on line 0") {
    const LoadResult r = load_file("/");
    REQUIRE(r.errors.size() == 1);
    CHECK(r.errors[0].line == 0);
  }
  SECTION("a real file loads") {
    const auto path = std::filesystem::temp_directory_path() /
                      ("splitpoint_config_test_" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(path) << kSpecExample;
    const LoadResult r = load_file(path.string());
    std::filesystem::remove(path);
    INFO(describe(r));
    REQUIRE(r.config.has_value());
    CHECK(r.config->distributions.size() == 3);
  }
}

TEST_CASE("placement errors name partitions compactly", "[config][errors]") {
  const std::string base =
      std::string(kTwoShards) + "  - name: s2\ndistributions:\n  - name: h\n    partitions: 16\n";
  expect_one_error(
      base + "    placement:\n      s0: 0-7\n      s1: [8-9, 12-15]\n      s2: 2-13\n", 11,
      "distributions[0].placement.s2: partitions 2-9, 12-13 are already placed on \"s0\", \"s1\"");
  // One error per placement item, each on its own item.
  const LoadResult r = load_string(base +
                                   "    placement:\n      s0: [0-7]\n      s1: [8-9, 12-15]\n"
                                   "      s2:\n        - 4\n        - 10-11\n        - 13-15\n");
  INFO(describe(r));
  REQUIRE(r.errors.size() == 2);
  CHECK(has_error(r, 12, "placement.s2[0]: partition 4 is already placed on \"s0\""));
  CHECK(has_error(r, 14, "placement.s2[2]: partitions 13-15 are already placed on \"s1\""));
  expect_one_error(base + "    placement:\n      s0: 0-7\n      s1: [8, 10, 12-13]\n", 8,
                   "partitions 9, 11, 14-15 are not placed on any shard");
}

TEST_CASE("catalog and moves (SPEC 9)", "[config]") {
  const std::string shards = "shards:\n  - { name: s0, database: app, user: sp }\n  - { name: s1, database: app, user: sp }\n";
  auto r = load_string(shards + "catalog: s1\nmoves: { max_hold: 2s, poll: 100ms, lease: 3s, verify: false }\n");
  INFO(describe(r));
  REQUIRE(r.config);
  CHECK(r.config->catalog_shard == std::optional<std::size_t>(1));
  CHECK(r.config->moves.max_hold.count() == 2000);
  CHECK(r.config->moves.poll.count() == 100);
  CHECK(r.config->moves.lease.count() == 3000);
  CHECK_FALSE(r.config->moves.verify);
  r = load_string(shards);
  REQUIRE(r.config);
  CHECK_FALSE(r.config->catalog_shard);
  CHECK(r.config->moves.max_hold.count() == 5000);
  CHECK(r.config->moves.lease.count() == 10000);
  CHECK(r.config->moves.verify);

  // A connection string instead of a shard's name: a database of its own.
  r = load_string(shards + "catalog: 'host=10.0.0.5 dbname=topology user=cat'\n");
  REQUIRE(r.config);
  CHECK_FALSE(r.config->catalog_shard);
  CHECK(r.config->catalog_dsn == "host=10.0.0.5 dbname=topology user=cat");
  CHECK(r.config->has_catalog());
  r = load_string(shards + "catalog: postgresql://cat@10.0.0.5/topology\n");
  REQUIRE(r.config);
  CHECK(r.config->catalog_dsn == "postgresql://cat@10.0.0.5/topology");
  CHECK_FALSE(load_string(shards).config->has_catalog());

  expect_one_error(shards + "catalog: s9\n", 4, "unknown shard \"s9\"");
  expect_one_error(shards + "catalog: \"host='10.0.0.5 dbname=x\"\n", 4,
                   "catalog: not a libpq connection string: unterminated quoted string");
  expect_one_error(shards + "moves: { poll: 1s, lease: 2s }\n", 4, "moves.lease must be more than twice moves.poll");
  expect_one_error(shards + "moves: { hold: 1s }\n", 4, "moves.hold: unknown key");

  // Automatic splits (SPEC 13): off by default, and only with a catalog.
  CHECK(load_string(shards).config->moves.auto_split == Moves::AutoSplit::off);
  r = load_string(shards + "catalog: s0\nmoves: { auto_split: advise, auto_split_window: 2s, auto_split_interval: 30s }\n");
  REQUIRE(r.config);
  CHECK(r.config->moves.auto_split == Moves::AutoSplit::advise);
  CHECK(r.config->moves.auto_split_window.count() == 2000);
  CHECK(r.config->moves.auto_split_interval.count() == 30000);
  r = load_string(shards + "catalog: s0\nmoves: { auto_split: on }\n");
  REQUIRE(r.config);
  CHECK(r.config->moves.auto_split == Moves::AutoSplit::on);
  CHECK(r.config->moves.auto_split_window.count() == 60000);
  CHECK(r.config->moves.auto_split_interval.count() == 600000);
  expect_one_error(shards + "catalog: s0\nmoves: { auto_split: yes }\n", 5,
                   "moves.auto_split: expected one of off | advise | on, got \"yes\"");
  expect_one_error(shards + "moves: { auto_split: on }\n", 4, "moves.auto_split changes partitions through the catalog");
  // Automatic merges: the same choice, off by default, only with a catalog.
  CHECK(load_string(shards).config->moves.auto_merge == Moves::AutoSplit::off);
  r = load_string(shards + "catalog: s0\nmoves: { auto_merge: advise }\n");
  REQUIRE(r.config);
  CHECK(r.config->moves.auto_merge == Moves::AutoSplit::advise);
  CHECK(r.config->moves.auto_split == Moves::AutoSplit::off);
  expect_one_error(shards + "moves: { auto_merge: on }\n", 4, "moves.auto_merge changes partitions through the catalog");
  expect_one_error(shards + "catalog: s0\nmoves: { auto_split: on, auto_split_window: 0s }\n", 5, "moves.auto_split_window");
  expect_one_error(shards + "catalog: s0\nmoves: { auto_split_interval: soon }\n", 5, "moves.auto_split_interval");
  expect_one_error("shards:\n  - { name: s0, database: app }\ncatalog: s0\n", 2,
                   "with catalog:, shard \"s0\" needs database and user");
}

TEST_CASE("scatter.combine: a shard's name or a PostgreSQL of its own (SPEC 4.1)", "[config]") {
  const std::string shards = "shards:\n  - { name: s0, database: app }\n  - { name: s1, database: app }\n";
  auto r = load_string(shards + "scatter: { combine: s1 }\n");
  REQUIRE(r.config);
  CHECK(r.config->scatter.combine_shard == 1);
  CHECK_FALSE(r.config->scatter.combine_database);
  CHECK(r.config->scatter.combines_on(1));
  CHECK_FALSE(r.config->scatter.combines_on(0));

  r = load_string(shards + "scatter: { combine: \"host=10.0.0.9 port=6543 dbname=scratch user=cb password='p w'\" }\n");
  INFO(describe(r));
  REQUIRE(r.config);
  REQUIRE(r.config->scatter.combine_database);
  const auto& c = *r.config->scatter.combine_database;
  CHECK(c.name == "combine");
  CHECK(c.host == "10.0.0.9");
  CHECK(c.port == 6543);
  CHECK(c.database == "scratch");
  CHECK(c.user == "cb");
  CHECK(c.password == "p w");
  CHECK(c.tls.mode == ShardTlsMode::disable);
  CHECK(r.config->scatter.combine_dsn == "host=10.0.0.9 port=6543 dbname=scratch user=cb password='p w'");
  CHECK_FALSE(r.config->scatter.combines_on(0));  // no shard runs it: any may be dropped

  // A URI; what it leaves out is the client's (user, password, database) or 5432.
  r = load_string(shards + "scatter:\n  combine: postgresql://db.example/scr%20atch?sslmode=require\n");
  REQUIRE(r.config);
  REQUIRE(r.config->scatter.combine_database);
  CHECK(r.config->scatter.combine_database->host == "db.example");
  CHECK(r.config->scatter.combine_database->port == 5432);
  CHECK(r.config->scatter.combine_database->database == "scr atch");
  CHECK(r.config->scatter.combine_database->user.empty());
  CHECK(r.config->scatter.combine_database->tls.mode == ShardTlsMode::require);

  expect_one_error(shards + "scatter:\n  combine: s7\n", 5, "unknown shard \"s7\"");
  expect_one_error(shards + "scatter:\n  combine: 'host=a,b dbname=x'\n", 5,
                   "scatter.combine: connection option host with several hosts is not supported here");
  expect_one_error(shards + "scatter:\n  combine: 'host=a service=x'\n", 5,
                   "scatter.combine: connection option service is not supported here");
  expect_one_error(shards + "scatter:\n  combine: 'host=a port=99999'\n", 5, "port \"99999\" is not a port number");
  expect_one_error(shards + "scatter:\n  combine: 'host=a sslmode=prefer'\n", 5,
                   "sslmode \"prefer\": expected one of disable | require | verify-ca | verify-full");
  expect_one_error(shards + "scatter:\n  combine: 'host=a sslmode=verify-ca'\n", 5, "needs sslrootcert");
  expect_one_error(shards + "scatter:\n  combine: 'host=a sslmode=verify-full sslrootcert=/nonexistent/ca.pem'\n", 5,
                   "cannot read \"/nonexistent/ca.pem\"");
  expect_one_error(shards + "scatter:\n  combine: 'host=a nonsense'\n", 5,
                   "scatter.combine: not a libpq connection string: missing \"=\" after \"nonsense\"");
}

TEST_CASE("replicas, hosts, reads and health checks (SPEC 10)", "[config]") {
  auto r = load_string(
      "shards:\n"
      "  - name: s0\n"
      "    host: 10.0.0.1\n"
      "    replicas: [ { host: 10.0.0.7, port: 5433 }, \"10.0.0.8:5434\", { host: r3 } ]\n"
      "  - name: s1\n"
      "    hosts: [ 10.0.1.1:5432, { host: 10.0.1.2, port: 6432 } ]\n"
      "reads: replica\nmax_replica_lag: 250ms\nhealth: { interval: 100ms, timeout: 1s, ban: 3s }\n");
  INFO(describe(r));
  REQUIRE(r.config);
  const auto& c = *r.config;
  CHECK(c.reads == Reads::replica);
  CHECK(c.max_replica_lag.count() == 250);
  CHECK(c.health.interval.count() == 100);
  CHECK(c.health.timeout.count() == 1000);
  CHECK(c.health.ban.count() == 3000);
  auto all0 = c.shards[0].all_hosts();
  REQUIRE(all0.size() == 4);
  CHECK(all0[0].host == "10.0.0.1");
  CHECK(all0[1].port == 5433);
  CHECK(all0[2].host == "10.0.0.8");
  CHECK(all0[3].port == 5432);  // default port
  CHECK(c.shards[1].host == "10.0.1.1");  // host/port: the first of hosts
  auto all1 = c.shards[1].all_hosts();
  REQUIRE(all1.size() == 2);
  CHECK(all1[1].port == 6432);

  r = load_string("shards:\n  - { name: s0 }\n");
  REQUIRE(r.config);
  CHECK(r.config->reads == Reads::primary);
  CHECK(r.config->max_replica_lag.count() == 1000);
  CHECK(r.config->shards[0].all_hosts().size() == 1);

  expect_one_error("shards:\n  - { name: s0 }\nreads: standby\n", 3, "reads");
  expect_one_error("shards:\n  - { name: s0, host: a, hosts: [ b:1 ] }\n", 2, "give either hosts or host/port");
  expect_one_error("shards:\n  - { name: s0, replicas: [] }\n", 2, "expected at least one host");
  expect_one_error("shards:\n  - { name: s0, replicas: [ { port: 1 } ] }\n", 2, "host");
  expect_one_error("shards:\n  - { name: s0 }\nhealth: { every: 1s }\n", 3, "health.every: unknown key");
}

TEST_CASE("control characters are refused before yaml-cpp sees them", "[config][errors]") {
  // yaml-cpp 0.7 never returns from "\0," (found by tests/fuzz/config_fuzz).
  using namespace std::string_literals;
  for (const std::string& text : {"\0,"s, "shards:\n  - { name: s0 }\n\x01x: 1\n"s, "a: b\x7f\n"s}) {
    INFO(text);
    const LoadResult r = load_string(text);
    CHECK_FALSE(r.config);
    REQUIRE(r.errors.size() == 1);
    CHECK_THAT(r.errors[0].message, Catch::Matchers::Contains("control character"));
  }
  CHECK(load_string("\0,"s).errors[0].line == 1);
  CHECK(load_string("shards:\n  - { name: s0 }\n\x01x: 1\n").errors[0].line == 3);
  // Tabs and CRLF line ends still load.
  auto r = load_string("shards:\r\n  - { name: s0,\tport: 5433 }\r\n");
  INFO(describe(r));
  CHECK(r.config);
}

TEST_CASE("a ',' outside a flow collection is refused before yaml-cpp sees it", "[config][errors]") {
  // yaml-cpp 0.7 never returns from these (found by tests/fuzz/config_fuzz).
  for (const char* text : {", { name: s2 } ]\n", ",\n", " , x\n", "# c\n, x\n", "shards:\n  - { name: s0 }\n, x\n",
                           "- a\n, b\n", "'x' , y\n", "a: \"q\" ,\n", "!, x\n", "&a , x\n", "- *a , b\n",
                           "a: 'it''s' , x\n"}) {
    INFO(text);
    const LoadResult r = load_string(text);
    CHECK_FALSE(r.config);
    REQUIRE(r.errors.size() == 1);
    CHECK_THAT(r.errors[0].message, Catch::Matchers::Contains("',' outside a flow collection"));
  }
  // Commas that are no such thing still load.
  auto r = load_string(
      "shards:\n  - { name: s0, port: 5433 }   # a, comment\n  - name: s1\n    password: 'x, y'\n"
      "    user: \"a,\"\nreference_tables: [a,\n  b]\nunlisted_tables: reference\nlog_level: info\n"
      "users:\n  - name: u\n    password: |\n      , not yaml\n      a, b\n"
      "distributions:\n  - name: d\n    method: list\n    lists: { s0: [\"a,b\", 'c'',d'] }\n"
      "    tables: { t: k }   # t, k\n");
  INFO(describe(r));
  REQUIRE(r.config);
  CHECK(r.config->reference_tables == std::vector<std::string>{"a", "b"});
  CHECK(r.config->shards[1].password == "x, y");
  CHECK(r.config->users[0].password == ", not yaml\na, b\n");
  CHECK(r.config->distributions[0].lists[0].values == std::vector<std::string>{"a,b", "c',d"});
}

// ---- SPEC §11: password_file / password_env, allow:, trust beyond loopback

TEST_CASE("password_file: read at load, trailing newlines stripped", "[config][security]") {
  TempFile user_pw("s3cret\n"), shard_pw("backend pw\r\n\n");
  const Config c = load_ok("users:\n  - name: app\n    password_file: " + user_pw.path.string() +
                           "\nshards:\n  - name: s0\n    password_file: " + shard_pw.path.string() + "\n");
  CHECK(c.users[0].password == "s3cret");
  CHECK(c.shards[0].password == "backend pw");

  SECTION("a rotated file is seen by the next load (reload)") {
    std::ofstream(user_pw.path, std::ios::trunc) << "rotated";
    const Config again = load_ok("users:\n  - name: app\n    password_file: " + user_pw.path.string() +
                                 "\nshards:\n  - name: s0\n");
    CHECK(again.users[0].password == "rotated");
  }
}

TEST_CASE("password_env: read at load", "[config][security]") {
  ::setenv("SPLITPOINT_TEST_PW", "from-env", 1);
  const Config c = load_ok(
      "users:\n  - name: app\n    password_env: SPLITPOINT_TEST_PW\n"
      "shards:\n  - name: s0\n    password_env: SPLITPOINT_TEST_PW\n");
  CHECK(c.users[0].password == "from-env");
  CHECK(c.shards[0].password == "from-env");
  ::unsetenv("SPLITPOINT_TEST_PW");
}

TEST_CASE("password sources: exactly one, and clear errors with their line", "[config][security][errors]") {
  const std::string shards = "shards:\n  - name: s0\n";
  TempFile pw("x\n"), empty("\n");
  expect_one_error("users:\n  - name: app\n    password: a\n    password_env: HOME\n" + shards, 4,
                   "users[0]: give only one of password, password_file and password_env");
  expect_one_error("users:\n  - name: app\n    admin: true\n" + shards, 2,
                   "users[0]: missing required key \"password\" (or password_file / password_env)");
  expect_one_error("users:\n  - name: app\n    password_file: /nonexistent/pw\n" + shards, 3,
                   "users[0].password_file: cannot read \"/nonexistent/pw\": No such file or directory");
  expect_one_error("users:\n  - name: app\n    password_file: " + empty.path.string() + "\n" + shards, 3,
                   "is empty");
  ::unsetenv("SPLITPOINT_TEST_UNSET");
  expect_one_error("users:\n  - name: app\n    password_env: SPLITPOINT_TEST_UNSET\n" + shards, 3,
                   "users[0].password_env: environment variable \"SPLITPOINT_TEST_UNSET\" is not set");
  ::setenv("SPLITPOINT_TEST_EMPTY", "", 1);
  expect_one_error("users:\n  - name: app\n    password_env: SPLITPOINT_TEST_EMPTY\n" + shards, 3,
                   "environment variable \"SPLITPOINT_TEST_EMPTY\" is empty");
  expect_one_error("shards:\n  - name: s0\n    password: a\n    password_file: " + pw.path.string() + "\n", 4,
                   "shards[0]: give only one of password, password_file and password_env");
  expect_one_error("shards:\n  - name: s0\n    password_file: /\n", 3, "cannot read \"/\"");
}

TEST_CASE("allow: in users", "[config][security]") {
  const Config c = load_ok(
      "users:\n  - name: app\n    password: a\n    allow: [10.0.0.0/8, '::1/128']\n"
      "  - name: one\n    password: b\n    allow: 127.0.0.1\n"
      "  - name: any\n    password: c\n"
      "shards:\n  - name: s0\n");
  REQUIRE(c.users[0].allow.size() == 2);
  CHECK(c.users[0].allow[1].v6);
  REQUIRE(c.users[1].allow.size() == 1);
  CHECK(c.users[1].allow[0].prefix == 32);
  CHECK(c.users[2].allow.empty());
  expect_one_error("users:\n  - name: app\n    password: a\n    allow:\n      - 10.0.0.0/8\n      - 10.1.0.0/33\n"
                   "shards:\n  - name: s0\n",
                   6, "users[0].allow[1]: the prefix length must be between 0 and 32, got \"10.1.0.0/33\"");
  expect_one_error("users:\n  - name: app\n    password: a\n    allow: []\nshards:\n  - name: s0\n", 4, "users[0].allow: expected at least one address range");
}

TEST_CASE("auth: trust beyond loopback without tls refuses to load", "[config][security][errors]") {
  const std::string shards = "shards:\n  - name: s0\n";
  expect_one_error("listen: 0.0.0.0:6432\nauth: trust\n" + shards, 2,
                   "auth: trust on listen 0.0.0.0:6432 (beyond loopback) without tls");
  // trust is the default: the error points at listen.
  expect_one_error("listen: '[::]:6432'\n" + shards, 1, "auth: trust on listen :::6432");
  expect_one_error("listen: 10.1.2.3:6432\n" + shards, 1, "beyond loopback");
  load_ok("listen: 127.0.0.1:6432\nauth: trust\n" + shards);
  load_ok("listen: 127.0.0.2:6432\n" + shards);
  load_ok("listen: '[::1]:6432'\n" + shards);
  load_ok("listen: localhost:6432\n" + shards);
  load_ok("listen: 0.0.0.0:6432\nauth: scram-sha-256\nusers:\n  - { name: a, password: b }\n" + shards);
  load_ok("listen: 0.0.0.0:6432\nauth: trust\ntls: { cert: /c.pem, key: /k.pem }\n" + shards);
}

TEST_CASE("auth: passthrough and auth_query (SPEC 14)", "[config][security]") {
  const std::string shards = "shards:\n  - name: s0\n  - name: s1\n";
  auto c = load_ok("auth: passthrough\nauth_query: { user: look, password_env: HOME }\n" + shards);
  REQUIRE(c.auth_query);
  CHECK(c.auth == AuthMethod::passthrough);
  CHECK(c.auth_query->user == "look");
  CHECK(c.auth_query->database == "postgres");
  CHECK(c.auth_query->shard == 0);
  CHECK_THAT(c.auth_query->query, Catch::Matchers::Contains("pg_authid WHERE rolname = $1"));
  c = load_ok("auth: passthrough\nauth_query: { user: look, password: x, database: d, shard: s1, "
              "query: 'SELECT f($1)' }\n" + shards);
  CHECK(c.auth_query->shard == 1);
  CHECK(c.auth_query->database == "d");
  CHECK(c.auth_query->query == "SELECT f($1)");
  expect_one_error("auth: passthrough\n" + shards, 1, "auth: passthrough needs auth_query");
  expect_one_error("auth: md5\nauth_query: { user: look, password: x }\n" + shards, 2,
                   "auth_query is used only with auth: passthrough");
  expect_one_error("auth: passthrough\nauth_query: { user: look }\n" + shards, 2, "missing required key \"password\"");
  expect_one_error("auth: passthrough\nauth_query: { user: look, password: x, query: SELECT 1 }\n" + shards, 2,
                   "needs $1");
  expect_one_error("auth: passthrough\nauth_query: { user: look, password: x, shard: s9 }\n" + shards, 2, "s9");
}

TEST_CASE("tls: per shard, as libpq's sslmode", "[config][security]") {
  TempFile ca("-----BEGIN CERTIFICATE-----\n", "ca");
  const Config c = load_ok("shards:\n  - name: s0\n    tls: { mode: verify-full, ca: " + ca.path.string() +
                           " }\n  - name: s1\n    tls: { mode: require }\n  - name: s2\n");
  CHECK(c.shards[0].tls.mode == ShardTlsMode::verify_full);
  CHECK(c.shards[0].tls.ca == ca.path.string());
  CHECK(c.shards[1].tls.mode == ShardTlsMode::require);
  CHECK(c.shards[2].tls.mode == ShardTlsMode::disable);
  expect_one_error("shards:\n  - name: s0\n    tls: { mode: verify-ca }\n", 3,
                   "shards[0].tls: mode verify-ca needs ca:");
  expect_one_error("shards:\n  - name: s0\n    tls: { mode: require, ca: " + ca.path.string() + " }\n", 3,
                   "shards[0].tls.ca: only used with mode verify-ca or verify-full");
  expect_one_error("shards:\n  - name: s0\n    tls: { mode: verify-full, ca: /nonexistent/ca.pem }\n", 3,
                   "shards[0].tls.ca: cannot read \"/nonexistent/ca.pem\": No such file or directory");
  expect_one_error("shards:\n  - name: s0\n    tls: { mode: prefer }\n", 3,
                   "shards[0].tls.mode: expected one of disable | require | verify-ca | verify-full, got \"prefer\"");
  expect_one_error("shards:\n  - name: s0\n    tls: { ca: /x }\n", 3, "shards[0].tls: missing required key \"mode\"");
}

TEST_CASE("indexes: each with a hash distribution of its own for its entries", "[config]") {
  const std::string base = std::string(kTwoShards) + R"(distributions:
  - name: by_user
    method: hash
    partitions: 16
    tables: { users: id, orders: user_id }
indexes:
)";
  const Config c = load_ok(base + R"(  - { table: users, columns: [email], unique: true }
  - { table: users, columns: [city, zip] }
  - { table: orders, columns: sku, name: orders_by_sku }
)");
  REQUIRE(c.indexes.size() == 3);
  CHECK(c.indexes[0].name == "users_email_key");
  CHECK(c.indexes[0].unique);
  CHECK(c.indexes[0].key_column == "id");
  CHECK(c.indexes[0].entries_table() == "splitpoint.users_email_key_entries");
  CHECK(c.indexes[1].name == "users_city_zip_idx");
  CHECK(c.indexes[1].columns == std::vector<std::string>{"city", "zip"});
  CHECK_FALSE(c.indexes[1].unique);
  CHECK(c.indexes[2].name == "orders_by_sku");
  REQUIRE(c.distributions.size() == 4);
  const Distribution& d = c.distributions[c.indexes[0].distribution];
  CHECK(d.name == "splitpoint.users_email_key");
  CHECK(d.partitions == 16);
  CHECK(d.placement.size() == 16);
  CHECK(d.tables == std::vector<std::pair<std::string, std::string>>{{"splitpoint.users_email_key_entries", "email"}});

  const LoadResult bad = load_string(base + R"(  - { table: nowhere, columns: [email] }
  - { table: users, columns: [id] }
  - { table: users, columns: [Email] }
  - { table: users, columns: [email] }
  - { table: users, columns: [email] }
)");
  INFO(describe(bad));
  CHECK(has_error(bad, 10, "\"nowhere\" is not a table of any distribution"));
  CHECK(has_error(bad, 11, "\"id\" is the table's distribution key"));
  CHECK(has_error(bad, 12, "a column name as PostgreSQL stores it"));
  CHECK(has_error(bad, 14, "index name \"users_email_idx\" twice"));
  const LoadResult refuse = load_string(base + "  - { table: users, columns: [email] }\ntransactions:\n  cross_shard_writes: refuse\n");
  INFO(describe(refuse));
  CHECK(has_error(refuse, 9, "global indexes need transactions.cross_shard_writes: two_phase"));
}

TEST_CASE("salt: on a hash distribution, checked like the rest", "[config][salt]") {
  const std::string base = std::string(kTwoShards) +
                           "distributions:\n  - name: d\n    method: hash\n    partitions: 16\n"
                           "    tables: { sales: product_id, returns: product_id }\n";
  SECTION("loads") {
    const Config c = load_ok(base + "    salt: { column: order_id, buckets: 8, keys: [5, 6] }\n");
    REQUIRE(c.distributions[0].salt);
    CHECK(c.distributions[0].salt->column == "order_id");
    CHECK(c.distributions[0].salt->buckets == 8);
    CHECK(c.distributions[0].salt->keys == std::vector<std::string>{"5", "6"});
    CHECK_FALSE(load_ok(base).distributions[0].salt);
  }
  SECTION("buckets out of range, column missing, unknown field") {
    expect_one_error(base + "    salt: { column: order_id, buckets: 0 }\n", 9, "must be between 1 and 1024");
    expect_one_error(base + "    salt: { buckets: 8 }\n", 9, "column");
    expect_one_error(base + "    salt: { column: order_id, buckets: 8, bukets: 2 }\n", 9, "bukets");
  }
  SECTION("the salt column must not be a table's key") {
    expect_one_error(base + "    salt: { column: product_id, buckets: 8 }\n", 9,
                     "\"product_id\" is the key of table \"sales\"");
  }
  SECTION("range and list distributions are refused") {
    const std::string range = std::string(kTwoShards) +
                              "distributions:\n  - name: r\n    method: range\n"
                              "    ranges: [{ upto: 10, shard: s0 }, { shard: s1 }]\n    tables: { t: id }\n"
                              "    salt: { column: order_id, buckets: 8 }\n";
    expect_one_error(range, 9, "salting is built for hash distributions only, not for method: range");
  }
}
