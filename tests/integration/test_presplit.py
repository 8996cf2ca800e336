#!/usr/bin/env python3
"""PRESPLIT <range distribution> INTO n [FROM SAMPLE query] (#48): bounds at quantiles of
the keys, then REBALANCE's moves.

Shards s0 and s1, the catalog in a database of its own. A range distribution by_id over
items(id), (-inf, 1000) on s0 and [1000, inf) on s1, holding ids 0..3999 (loaded on the
shards directly), and a hash one (by_user) for the refusals. One proxy.
- PRESPLIT by_id INTO 4: the quantiles 1000 (a bound already), 2000 and 3000 make four
  ranges; s1 holding three, one move to s0 is queued (REBALANCE's choice, the last range);
  once done, every row is on the shard SHOW PARTITIONS names for its range.
- FROM SAMPLE: the first column of a query on the first shard (ids 5000..5999 to come)
  adds the bound 5500; the shards hold 3 and 2 ranges, so no move.
- refusals: not a range distribution (SPA01), INTO 1 (22023), too few distinct keys
  (SPA01), a bad sample query (its own SQLSTATE), syntax (42601).
"""
# test-timeout: 180

import os
import secrets
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402
import split_load  # noqa: E402
from split_load import admin, refused, wait_move  # noqa: E402

WORKDIR = sptest.workdir("presplit")
DB = CAT = P = None
TESTS = []


def config(db):
    dsn = f"'host=127.0.0.1 port={sptest.PG_PORTS[1]} dbname={CAT} user=postgres password=postgres'"
    return split_load.config_head(db) + """
    distributions:
      - name: by_user
        method: hash
        partitions: 4
        tables: { counters: id }
      - name: by_id
        method: range
        ranges:
          - { upto: 1000, shard: s0 }
          - { shard: s1 }
        tables: { items: id }
    """ + split_load.config_tail(dsn)


def test(fn):
    TESTS.append(fn)
    return fn


def ranges():
    return [(int(r[1]), r[5], r[6], r[2]) for r in admin(P, "SHOW PARTITIONS") if r[0] == "by_id"]


def direct(i, sql):
    return sptest.query(sptest.PG_PORTS[i], DB, sql, None, "postgres", "postgres")


def setup():
    global DB, CAT, P
    CAT = "pscat_" + secrets.token_hex(4)
    sptest.create_databases(CAT)
    DB = sptest.Databases("ps").name
    split_load.DB = DB
    P = sptest.Proxy("presplit", config(DB), WORKDIR)
    P.start()
    c = P.connect(DB)
    c.cursor().execute("CREATE TABLE items (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    c.cursor().execute("CREATE TABLE counters (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    c.close()
    direct(0, "INSERT INTO items SELECT g, 0 FROM generate_series(0, 999) g")
    direct(1, "INSERT INTO items SELECT g, 0 FROM generate_series(1000, 3999) g")


@test
def refusals():
    refused(P, "PRESPLIT by_user INTO 4", "SPA01", "PRESPLIT needs a range distribution")
    refused(P, "PRESPLIT nowhere INTO 4", "SPA01", "unknown distribution")
    refused(P, "PRESPLIT by_id INTO 1", "22023", "INTO needs at least 2 ranges")
    refused(P, "PRESPLIT by_id INTO many", "42601", "usage: PRESPLIT distribution INTO n")
    refused(P, "PRESPLIT by_id", "42601", "usage")
    refused(P, "PRESPLIT by_id INTO 3 FROM", "42601", "usage")
    refused(P, "PRESPLIT by_id INTO 3 FROM SAMPLE SELECT 7 UNION ALL SELECT 8", "SPA01", "2 distinct values")
    refused(P, "PRESPLIT by_id INTO 3 FROM SAMPLE SELECT nothing FROM nowhere", "42P01", "PRESPLIT's sample")
    assert ranges() == [(0, None, "1000", "s0"), (1, "1000", None, "s1")], ranges()


@test
def presplit_existing_keys():
    rows = admin(P, "PRESPLIT by_id INTO 4")
    print(f"  {rows}")
    assert [r[:5] for r in rows] == [("by_id", "0", None, "1000", "s0"), ("by_id", "1", "1000", "2000", "s1"),
                                     ("by_id", "2", "2000", "3000", "s1"), ("by_id", "3", "3000", None, "s1")], rows
    moving = [r for r in rows if r[5] is not None]
    assert len(moving) == 1 and moving[0][1] == "3" and moving[0][6] == "s0", rows
    wait_move(P, int(moving[0][5]))
    want = [(0, None, "1000", "s0"), (1, "1000", "2000", "s1"), (2, "2000", "3000", "s1"), (3, "3000", None, "s0")]
    assert ranges() == want, ranges()
    assert direct(0, "SELECT count(*), min(id), max(id) FROM items WHERE id >= 3000") == [(1000, 3000, 3999)]
    assert direct(1, "SELECT count(*) FROM items WHERE id >= 3000") == [(0,)]
    c = P.connect(DB)
    cur = c.cursor()
    cur.execute("SELECT count(*), sum(id) FROM items")
    assert cur.fetchone() == (4000, sum(range(4000)))
    c.close()


@test
def presplit_from_sample():
    rows = admin(P, "PRESPLIT by_id INTO 2 FROM SAMPLE SELECT g FROM generate_series(5000, 5999) g;")
    print(f"  {rows}")
    assert [r[:5] for r in rows][3:] == [("by_id", "3", "3000", "5500", "s0"), ("by_id", "4", "5500", None, "s0")], rows
    assert all(r[5] is None for r in rows), rows  # s0: 3 ranges, s1: 2


def teardown():
    if P:
        P.stop()
    if DB:
        sptest.drop_databases(DB)
    if CAT:
        sptest.drop_databases(CAT)


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
