// Statements pointed at the views that hide rows a shard holds but does not own
// (routing/hide_rows.hpp, SPEC §9).
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "routing/hide_rows.hpp"

using splitpoint::routing::read_through_views;

namespace {
const std::map<std::string, std::string, std::less<>> kViews{{"users", "splitpoint_m7"}, {"orders", "splitpoint_m7"}};
}

TEST_CASE("read_through_views points sharded tables at the move's views", "[hide_rows]") {
  auto r = read_through_views("SELECT count(*) FROM users WHERE users.age > 3", kViews);
  REQUIRE(r);
  CHECK(*r == "SELECT count(*) FROM splitpoint_m7.users users WHERE users.age > 3");

  r = read_through_views("SELECT u.id, o.n FROM public.users u JOIN orders o ON o.user_id = u.id", kViews);
  REQUIRE(r);
  CHECK(r->find("splitpoint_m7.users u") != std::string::npos);
  CHECK(r->find("splitpoint_m7.orders o") != std::string::npos);

  r = read_through_views("UPDATE users SET n = n + 1 WHERE age > 3", kViews);
  REQUIRE(r);
  CHECK(*r == "UPDATE splitpoint_m7.users users SET n = n + 1 WHERE age > 3");

  r = read_through_views("SELECT * FROM countries WHERE id IN (SELECT user_id FROM orders)", kViews);
  REQUIRE(r);
  CHECK(r->find("FROM countries") != std::string::npos);
  CHECK(r->find("FROM splitpoint_m7.orders orders") != std::string::npos);
}

TEST_CASE("read_through_views leaves other texts alone", "[hide_rows]") {
  CHECK_FALSE(read_through_views("SELECT 1", kViews));
  CHECK_FALSE(read_through_views("SELECT * FROM other.users", kViews));
  CHECK_FALSE(read_through_views("SELECT * FROM countries", kViews));
  CHECK_FALSE(read_through_views("SELEC broken", kViews));
  CHECK_FALSE(read_through_views("SELECT * FROM users", {}));
}

TEST_CASE("read_through_views turns COPY TO of a table into COPY of a query", "[hide_rows]") {
  auto r = read_through_views("COPY users (id, name) TO STDOUT WITH (FORMAT csv)", kViews);
  REQUIRE(r);
  CHECK(r->find("COPY (SELECT id, name FROM splitpoint_m7.users") == 0);
  CHECK(r->find("TO STDOUT") != std::string::npos);
  r = read_through_views("COPY users TO STDOUT", kViews);
  REQUIRE(r);
  CHECK(r->find("COPY (SELECT * FROM splitpoint_m7.users") == 0);
}
