#!/usr/bin/env python3
"""SPLIT RANGE and MERGE RANGE (SPEC 9): metadata-only changes of a range distribution's
ranges in the catalog, while writers go on through two proxies.

Shards s0 and s1 (databases sr_<random> on the two shared instances), the catalog in a
database of its own (srcat_<random> on the second instance), given to `catalog:` as a
libpq connection string (SPEC §9: a shard name or a connection string).
A range distribution by_range (items: id) with ranges [.., 1000) on s0, [1000, 2000)
and [2000, ..) on s1, and a hash one (by_user: counters) for the refusals. Two proxies,
A and B, follow the catalog.

While writers upsert items (`INSERT ... ON CONFLICT (id) DO UPDATE SET n = n + 1`, a
per-key counter) through A and B:
- SPLIT RANGE by_range AT 1500 through A: partitions 1 = [1000, 1500) and 2 = [1500,
  2000), both on s1; both proxies run the new epoch and show the same ranges; B,
  restarted from a file that still has three ranges, takes the catalog's four;
- MOVE PARTITION by_range:1 TO s0 moves one half; SPLIT/MERGE refused while it runs;
  MERGE RANGE AT 1500 refused while the halves are on two shards; the half moved back;
  MERGE RANGE AT 1500 then joins them again;
- refusals and their SQLSTATEs (SPA01, 42601; SPLIT PARTITION of a range distribution:
  SPA01), the command-line form, and a proxy without catalog: (SPA01).
Afterwards every acknowledged increment is there exactly once (each row's n equals its
acknowledged upserts) and every row is on the shard the catalog names for its range.
"""
# test-timeout: 240

import os
import secrets
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from split_load import INCREMENTS, SPM01, Load, admin, cli, direct, epochs, refused, wait_move  # noqa: E402
import split_load  # noqa: E402

WORKDIR = sptest.workdir("split-range")
DB = None
CAT = None
A = B = None
TESTS = []
CATALOG_DSN = "'host=127.0.0.1 port={port} dbname={cat} user=postgres password=postgres'"


def config(db, catalog=True):
    return split_load.config_head(db) + f"""
    distributions:
      - name: by_user
        method: hash
        partitions: 4
        tables: {{ counters: id }}
      - name: by_range
        method: range
        ranges:
          - {{ upto: 1000, shard: s0 }}
          - {{ upto: 2000, shard: s1 }}
          - {{ shard: s1 }}
        tables: {{ items: id }}
      - name: by_region
        method: list
        lists: {{ s0: [jp, kr], s1: [us, eu] }}
        default: s0
        tables: {{ visits: region }}
    """ + split_load.config_tail(CATALOG_DSN.format(port=sptest.PG_PORTS[1], cat=CAT) if catalog else False)


def test(fn):
    TESTS.append(fn)
    return fn


def ranges(proxy):
    """by_range's partitions as the proxy shows them: [(partition, lower, upper, shard)]."""
    return [(int(r[1]), r[5], r[6], r[2]) for r in admin(proxy, "SHOW PARTITIONS") if r[0] == "by_range"]


def check_rows(expect_ranges):
    """Every acknowledged upsert exactly once, every row on the shard its range names."""
    rows = {}
    for i, shard in enumerate(("s0", "s1")):
        for key, n in direct(i, "SELECT id, n FROM items"):
            assert key not in rows, f"item {key} on both shards"
            rows[key] = (n, shard)
    assert {k: n for k, (n, _) in rows.items()} == INCREMENTS, "acknowledged upserts differ from the rows"
    print(f"  {sum(INCREMENTS.values())} acknowledged upserts on {len(rows)} rows, {SPM01[0]} SPM01", flush=True)
    for key, (_, shard) in rows.items():
        want = [s for _, lo, hi, s in expect_ranges
                if (lo is None or key >= int(lo)) and (hi is None or key < int(hi))]
        assert want == [shard], (key, shard, want)


def setup():
    global DB, CAT, A, B
    CAT = "srcat_" + secrets.token_hex(4)  # the catalog's own database (on the second instance)
    sptest.create_databases(CAT)
    DB, A, B = split_load.start("sr", config, ("split-a", "split-b"), "items", WORKDIR)


@test
def split_under_load():
    with Load():
        rows = admin(A, "SPLIT RANGE by_range AT 1500")
        assert rows == [("by_range", "1", "1000", "1500", "s1"), ("by_range", "2", "1500", "2000", "s1")], rows
        time.sleep(1)
    want = [(0, None, "1000", "s0"), (1, "1000", "1500", "s1"), (2, "1500", "2000", "s1"), (3, "2000", None, "s1")]
    assert ranges(A) == want and ranges(B) == want, (ranges(A), ranges(B))
    e = epochs(A)
    assert len(e) == 2 and len(set(e.values())) == 1, e
    check_rows(want)
    # B restarted from a file with three ranges takes the catalog's four.
    B.stop()
    B.start()
    assert ranges(B) == want, ranges(B)


@test
def refusals():
    refused(A, "SPLIT RANGE by_range AT 1500", "SPA01", "already the bound between partitions 1 and 2")
    refused(A, "SPLIT RANGE by_range AT 1000", "SPA01", "already the bound")
    refused(A, "SPLIT RANGE by_range AT abc", "SPA01", "the ranges' bounds are integers and \"abc\" is not one")
    refused(A, "MERGE RANGE by_range AT 1234", "SPA01", "not a bound between two ranges")
    refused(A, "SPLIT RANGE by_user AT 5", "SPA01", "needs a range distribution")
    refused(A, "SPLIT RANGE nowhere AT 5", "SPA01", "unknown distribution")
    refused(A, "SPLIT RANGE by_range", "42601", "usage: SPLIT RANGE distribution AT value")
    refused(A, "MERGE RANGE by_range AT", "42601", "usage: MERGE RANGE")
    refused(A, "SPLIT RANGE by_range AT '12", "42601", "usage")
    refused(A, "SPLIT PARTITION by_range:1", "SPA01", "SPLIT PARTITION needs a hash distribution")
    with sptest.Proxy("split-nocat", config(DB, catalog=False), WORKDIR) as p:
        refused(p, "SPLIT RANGE by_range AT 1500", "SPA01", "no catalog")
        refused(p, "MERGE RANGE by_range AT 1000", "SPA01", "no catalog")


@test
def move_half_then_merge():
    four = [(0, None, "1000", "s0"), (1, "1000", "1500", "s1"), (2, "1500", "2000", "s1"), (3, "2000", None, "s1")]
    with Load():
        move = int(admin(A, "MOVE PARTITION by_range:1 TO s0")[0][0])
        refused(B, "SPLIT RANGE by_range AT 1700", "SPA01", f"move {move} of partition by_range:1 is unfinished")
        refused(B, "MERGE RANGE by_range AT 1500", "SPA01", "is unfinished")
        wait_move(A, move)
        refused(A, "MERGE RANGE by_range AT 1500", "SPA01",
                "are on different shards: MOVE PARTITION one of them to the other's shard first")
    moved = [(0, None, "1000", "s0"), (1, "1000", "1500", "s0"), (2, "1500", "2000", "s1"), (3, "2000", None, "s1")]
    assert ranges(A) == moved and ranges(B) == moved, (ranges(A), ranges(B))
    check_rows(moved)
    with Load():
        wait_move(A, int(admin(B, "MOVE PARTITION by_range:1 TO s1")[0][0]))
        rows = admin(B, "MERGE RANGE by_range AT 1500")
        assert rows == [("by_range", "1", "1000", "2000", "s1")], rows
        time.sleep(0.5)
    three = [(0, None, "1000", "s0"), (1, "1000", "2000", "s1"), (2, "2000", None, "s1")]
    assert ranges(A) == three and ranges(B) == three, (ranges(A), ranges(B), four)
    e = epochs(A)
    assert len(set(e.values())) == 1, e
    check_rows(three)


@test
def counters_follow_ranges():
    """SHOW PARTITIONS' counters follow the ranges when a split or merge renumbers them:
    the lower half keeps the range's counts, the upper half counts from zero, the ranges
    above keep theirs under their new numbers, and a merged range shows both halves'."""
    def queries():
        return {int(r[1]): int(r[3]) for r in admin(A, "SHOW PARTITIONS") if r[0] == "by_range"}

    c = A.connect(DB)
    cur = c.cursor()
    for key, times in ((1200, 3), (2500, 7)):
        for _ in range(times):
            cur.execute("SELECT n FROM items WHERE id = %s", (key,))
            cur.fetchall()
    before = queries()
    assert len(before) == 3 and before[1] >= 3 and before[2] >= 7, before
    admin(A, "SPLIT RANGE by_range AT 1500")
    split = queries()
    assert split == {0: before[0], 1: before[1], 2: 0, 3: before[2]}, (before, split)
    cur.execute("SELECT n FROM items WHERE id = 1700")
    cur.fetchall()
    assert queries()[2] == 1
    admin(A, "MERGE RANGE by_range AT 1500")
    merged = queries()
    assert merged == {0: before[0], 1: before[1] + 1, 2: before[2]}, (before, merged)
    c.close()


@test
def list_partition_moves():
    # by_region: partition 0 = jp, kr (s0), 1 = us, eu (s1), 2 = the default (s0).
    c = A.connect(DB)
    c.cursor().execute("CREATE TABLE visits (region text NOT NULL, id int NOT NULL, PRIMARY KEY (region, id))")
    for r in ("jp", "kr", "us", "eu", "br"):
        c.cursor().execute("INSERT INTO visits SELECT %s, g FROM generate_series(1, 100) g", (r,))
    c.close()
    acked, errors, stop = [], [], threading.Event()

    def write():  # through B, into the moving partition and another one, while it moves
        conn, i = B.connect(DB), 1000
        while not stop.is_set():
            for r in ("us", "jp"):
                try:
                    conn.cursor().execute("INSERT INTO visits VALUES (%s, %s)", (r, i))
                    acked.append((r, i))
                except psycopg2.Error as e:
                    if e.pgcode != "SPM01":
                        errors.append(e)
            i += 1
        conn.close()

    t = threading.Thread(target=write)
    t.start()
    try:
        move = int(admin(A, "MOVE PARTITION by_region:1 TO s0")[0][0])
        wait_move(A, move)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert any(r == "us" for r, _ in acked), "no write reached the moving partition"
    refused(A, "MOVE PARTITION by_region:2 TO s1", "SPA01", "default")
    parts = {r[1]: r[2] for p in (A, B) for r in admin(p, "SHOW PARTITIONS") if r[0] == "by_region"}
    assert parts == {"0": "s0", "1": "s0", "2": "s0"}, parts
    want = {(r, i) for r in ("jp", "kr", "us", "eu", "br") for i in range(1, 101)} | set(acked)
    got = [tuple(r) for r in sptest.query(A.port, DB, "SELECT region, id FROM visits")]
    assert len(got) == len(set(got)) and set(got) == want, (len(got), len(want))
    on_s0 = {tuple(r) for r in direct(0, "SELECT region, id FROM visits")}
    assert want <= on_s0, len(want - on_s0)
    deadline = time.monotonic() + 30  # the source's copy goes after the cleanup's grace period
    while direct(1, "SELECT count(*) FROM visits WHERE region IN ('us', 'eu')")[0][0] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert direct(1, "SELECT count(*) FROM visits")[0][0] == 0


@test
def catalog_by_connection_string():
    # The topology is in the catalog's own database, on no shard; SHOW CONFIG hides its password.
    shown = dict(sptest.admin(A.port, "SHOW CONFIG"))["catalog"]
    assert shown == f"host=127.0.0.1 port={sptest.PG_PORTS[1]} dbname={CAT} user=postgres password=***", shown
    cat = sptest.connect(sptest.PG_PORTS[1], CAT, "postgres", "postgres")
    cur = cat.cursor()
    cur.execute("SELECT count(*) FROM splitpoint.proxies WHERE lease_until > now()")
    assert cur.fetchone()[0] == 2
    cat.close()
    for i in (0, 1):
        d = sptest.connect(sptest.PG_PORTS[i], DB, "postgres", "postgres")
        cur = d.cursor()
        cur.execute("SELECT to_regclass('splitpoint.topology') IS NULL")
        assert cur.fetchone()[0], f"catalog tables on shard s{i}"
        d.close()


@test
def ddl_through_one_proxy_reaches_the_other():
    # B knows counters' columns (an INSERT without a column list needs the key's place);
    # the table is made again through A with a column before the key. B forgets what it
    # knew once the catalog counts A's DDL (moves.poll here: 100ms): before, its INSERT
    # routed by the wrong value and a read of the new column failed (42703).
    def on(proxy, sql):
        return sptest.query(proxy.port, "app", sql)

    def shard_of(key):
        return admin(B, f"SHOW ROUTE SELECT * FROM counters WHERE id = {key}")[0][1]

    on(B, "INSERT INTO counters VALUES (900001, 1) ON CONFLICT (id) DO NOTHING")
    key = 900002
    pad = next(k for k in range(900003, 900100) if shard_of(k) != shard_of(key))
    owner = shard_of(key)
    on(A, "DROP TABLE counters")
    on(A, "CREATE TABLE counters (pad bigint, id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    time.sleep(1)
    # (B's admin console cannot read the new columns itself: SHOW ROUTE says so, and the proxy stays up)
    r = admin(B, f"SHOW ROUTE SELECT * FROM counters WHERE id = {key}")[0]
    assert r[0] == "needs table definitions" and "not known to this proxy yet" in (r[5] or ""), r
    on(B, f"INSERT INTO counters VALUES ({pad}, {key}, 5)")
    where = [i for i in (0, 1) if direct(i, f"SELECT count(*) FROM counters WHERE id = {key}")[0][0] == 1]
    assert where == [int(owner[1:])], (where, owner)
    on(B, "SELECT count(DISTINCT n) FROM counters")  # (B learns the shape again)
    on(A, "ALTER TABLE counters ADD COLUMN extra int DEFAULT 7")
    time.sleep(1)
    assert on(B, "SELECT count(DISTINCT extra), sum(pad) FROM counters") == [(1, pad)]


@test
def a_proxy_starts_while_the_catalog_is_read():
    # Every proxy's follower reads the catalog's tables; a proxy starting meanwhile must
    # not take their exclusive locks (its schema's ADD COLUMN did even when the column
    # was there: CI saw the starting proxy and another's follower deadlock, SQLSTATE 40P01).
    c = psycopg2.connect(host=sptest.HOST, port=sptest.PG_PORTS[1], dbname=CAT, user="postgres", password="postgres")
    try:
        cur = c.cursor()
        cur.execute("SELECT count(*) FROM splitpoint.moves, splitpoint.topology, splitpoint.placement")
        B.stop()
        B.start()
        assert sptest.query(B.port, "app", "SELECT 1") == [(1,)]
    finally:
        c.close()


@test
def command_line():
    rc, out, err = cli(A, "--csv", "SPLIT", "RANGE", "by_range", "AT", "2500")
    assert rc == 0 and out.splitlines() == ["distribution,partition,lower,upper,shard", "by_range,2,2000,2500,s1",
                                            "by_range,3,2500,,s1"], (rc, out, err)
    rc, out, err = cli(A, "SPLIT RANGE by_range AT 2500")
    assert rc == 1 and err.startswith("ERROR: SPA01: SPLIT RANGE by_range: \"2500\" is already the bound"), (rc, err)
    rc, out, err = cli(A, "MERGE", "RANGE", "by_range", "AT", "'2500'")
    assert rc == 0 and "(1 row)" in out, (rc, out, err)
    three = [(0, None, "1000", "s0"), (1, "1000", "2000", "s1"), (2, "2000", None, "s1")]
    assert ranges(A) == three and ranges(B) == three, (ranges(A), ranges(B))


def teardown():
    split_load.teardown()
    if CAT:
        sptest.drop_databases(CAT)


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
