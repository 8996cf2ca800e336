// SELECT lastval() / currval(...) alone in a text: read for the proxy to answer from the
// values it drew (server/session/keys.cpp, answer_from_drawn).
#include <catch2/catch.hpp>

#include "routing/sequence_read.hpp"

using namespace splitpoint::routing;

TEST_CASE("sequence reads: the shapes drivers send for the last id", "[router][sequences]") {
  struct Case {
    const char* sql;
    bool lastval;
    const char* argument;
    const char* column;
  };
  for (const Case& c : {Case{"SELECT lastval()", true, "", "lastval"},
                        Case{"select  LASTVAL ( ) ;", true, "", "lastval"},
                        Case{"SELECT pg_catalog.lastval() AS \"Id\"", true, "", "\"Id\""},
                        Case{"SELECT currval('orders_id_seq')", false, "'orders_id_seq'", "currval"},
                        Case{"SELECT CURRVAL($1)", false, "$1", "currval"},
                        Case{"SELECT currval('public.s'::regclass) AS last_id", false, "'public.s'::regclass", "last_id"},
                        Case{"SELECT currval(pg_get_serial_sequence('t', 'id'))", false,
                             "pg_get_serial_sequence('t', 'id')", "currval"},
                        Case{"/* c */ SELECT currval(E'a''b')", false, "E'a''b'", "currval"}}) {
    INFO(c.sql);
    auto r = sequence_read(c.sql);
    REQUIRE(r);
    CHECK(r->lastval == c.lastval);
    CHECK(r->argument == c.argument);
    CHECK(r->column == c.column);
  }
  for (const char* sql : {"SELECT nextval('s')", "SELECT lastval(), 1", "SELECT lastval() FROM t", "SELECT currval()",
                          "SELECT lastval(1)", "SELECT currval('s') + 1", "SELECT 1; SELECT lastval()",
                          "SELECT lastval(); SELECT 1", "SELECT lastval() AS 'x'", "SELECT x.lastval()"}) {
    INFO(sql);
    CHECK_FALSE(sequence_read(sql));
  }
}
