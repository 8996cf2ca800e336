// The pure parts of SPEC §11: client CIDRs (allow:), loopback listen addresses, and
// the audit log's redaction.
#include "config/cidr.hpp"

#include <catch2/catch.hpp>
#include <string>

#include "config/redact.hpp"

using namespace splitpoint::config;

namespace {

Cidr cidr(const std::string& text) {
  std::string why;
  auto c = Cidr::parse(text, &why);
  INFO(text << ": " << why);
  REQUIRE(c.has_value());
  return *c;
}

}  // namespace

TEST_CASE("Cidr: parse and match IPv4 and IPv6 as pg_hba", "[config][security]") {
  CHECK(cidr("10.0.0.0/8").contains("10.200.3.4"));
  CHECK_FALSE(cidr("10.0.0.0/8").contains("11.0.0.1"));
  CHECK(cidr("192.168.1.7").contains("192.168.1.7"));
  CHECK_FALSE(cidr("192.168.1.7").contains("192.168.1.8"));
  CHECK(cidr("192.168.0.0/23").contains("192.168.1.255"));
  CHECK_FALSE(cidr("192.168.0.0/23").contains("192.168.2.0"));
  CHECK(cidr("0.0.0.0/0").contains("203.0.113.9"));
  CHECK_FALSE(cidr("0.0.0.0/0").contains("::1"));  // IPv4 entries match IPv4 clients
  CHECK(cidr("::1/128").contains("::1"));
  CHECK(cidr("::1").contains("::1"));
  CHECK_FALSE(cidr("::1/128").contains("127.0.0.1"));
  CHECK(cidr("fd00::/8").contains("fd12:3456::1"));
  CHECK_FALSE(cidr("fd00::/8").contains("fe80::1"));
  CHECK(cidr("2001:db8::/33").contains("2001:db8:7fff::1"));
  CHECK_FALSE(cidr("2001:db8::/33").contains("2001:db8:8000::1"));
  CHECK(cidr("::/0").contains("2001:db8::1"));
  // A dual-stack listener reports IPv4 clients as IPv4-mapped IPv6.
  CHECK(cidr("127.0.0.0/8").contains("::ffff:127.0.0.1"));
  CHECK_FALSE(cidr("10.0.0.0/8").contains("::ffff:127.0.0.1"));
  CHECK(cidr("fe80::/10").contains("fe80::1%eth0"));
  CHECK_FALSE(cidr("10.0.0.0/8").contains("not an address"));

  std::string why;
  CHECK_FALSE(Cidr::parse("10.0.0.1/8", &why));
  CHECK_THAT(why, Catch::Matchers::Contains("bits set beyond the /8 prefix (the network is 10.0.0.0/8)"));
  CHECK_FALSE(Cidr::parse("10.0.0.0/33", &why));
  CHECK_THAT(why, Catch::Matchers::Contains("between 0 and 32"));
  CHECK_FALSE(Cidr::parse("::/129", &why));
  CHECK_FALSE(Cidr::parse("10.0.0.0/", &why));
  CHECK_FALSE(Cidr::parse("10.0.0.0/8x", &why));
  CHECK_FALSE(Cidr::parse("example.com", &why));
  CHECK_FALSE(Cidr::parse("10.0.0/8", &why));

  CHECK(allowed({}, "198.51.100.1"));
  CHECK(allowed({cidr("10.0.0.0/8"), cidr("::1/128")}, "::1"));
  CHECK_FALSE(allowed({cidr("10.0.0.0/8"), cidr("::1/128")}, "127.0.0.1"));
}

TEST_CASE("is_loopback_host: only loopback addresses and localhost", "[config][security]") {
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("::ffff:127.0.0.1"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("::"));
  CHECK_FALSE(is_loopback_host("db.example.com"));
}

TEST_CASE("redact_passwords: the audit log never shows a password", "[config][security]") {
  CHECK(redact_passwords("ADD SHARD s2 host=10.0.0.9 port=5432 password=hunter2 user=app") ==
        "ADD SHARD s2 host=10.0.0.9 port=5432 password=*** user=app");
  CHECK(redact_passwords("add shard s2 PASSWORD=x\npool_size=3") == "add shard s2 PASSWORD=*** pool_size=3");
  CHECK(redact_passwords("postgresql://cat:s3cret@db.example:5432/catalog") == "postgresql://cat:***@db.example:5432/catalog");
  CHECK(redact_passwords("postgres://cat@db/x") == "postgres://cat@db/x");
  CHECK(redact_passwords("postgres://db:5432/x") == "postgres://db:5432/x");
  CHECK(redact_passwords("SHOW POOLS") == "SHOW POOLS");
  CHECK(redact_passwords("ADD SHARD s2 password=") == "ADD SHARD s2 password=***");
  CHECK(redact_passwords("SHOW ROUTE SELECT 1 -- password_x=1") == "SHOW ROUTE SELECT 1 -- password_x=1");
}
