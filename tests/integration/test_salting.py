#!/usr/bin/env python3
"""Salted distributions (SPEC §13, issue #48; docs/operations.md "Salting hot keys").

Databases: sptest.ThreeShards (shards salt0, salt1 on PG0, salt2 on PG1, and one plain
database on PG1 with the same schema and rows); the catalog on s0. Two salted hash
distributions: by_product (sales: product_id bigint; salt column order_id bigint, 4
buckets, 12 partitions) and by_user (visits: user_id text; salt column visit text, 3
buckets, 6 partitions, only users u1, u3, u5 salted: `keys`).
- differential: the same statements through the proxy and on the plain database give
  the same rows, tags and errors: reads by key, by key and salt column (=, IN), by the
  salt column alone, by neither, aggregates per key, a self-join on the key; writes
  (INSERT one row and several, INSERT ... SELECT, UPDATE and DELETE by key and salt
  column and by key alone, a duplicate key), in the simple protocol (psycopg2) and the
  extended one (psycopg 3, prepared), and a block writing one key's several partitions
  committed (two-phase commit), one rolled back;
- an INSERT without the salt column and an UPDATE of the salt column are refused
  (SPR01), COPY FROM STDIN too (0A000);
- a hot key's rows are on several shards (counted on the shards directly), a read by
  key and salt column is a one-shard statement (SHOW ROUTE: one partition; the proxy's
  counters: one single-shard statement on that shard each);
- each row's partition as SHOW ROUTE names it is PostgreSQL's: a table PARTITION BY
  HASH (key, bucket int4) with the bucket from a table PARTITION BY HASH (salt), for the
  bigint and the text salt column;
- `keys`: an unsalted user's read reaches one partition, a salted one's several; a
  move of a by_user partition puts exactly its rows on the target;
- MOVE PARTITION of a salted partition while writers insert: afterwards every row is on
  the shard SHOW ROUTE names for it (the move's row filter agrees with the router).
"""
# test-timeout: 120

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import psycopg  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402

WORK = sptest.workdir("salting")
DBS = sptest.ThreeShards("salt")
DB = DBS.plain[1]  # the name every client gives, through the proxy too
PROXY = None
SIDES = {}  # "plain"/"proxy" -> port
TESTS = []
PARTS, BUCKETS = 12, 4
HOT = 7  # the hot product: many orders
SALTED_USERS = ["u1", "u3", "u5"]  # by_user's `keys`: the other users are not salted

SCHEMA = [
    "CREATE TABLE sales (product_id bigint NOT NULL, order_id bigint NOT NULL, qty int NOT NULL, "
    "PRIMARY KEY (product_id, order_id))",
    "CREATE TABLE visits (user_id text NOT NULL, visit text NOT NULL, n int, PRIMARY KEY (user_id, visit))",
]
SALES = [(HOT, o, o % 5 + 1) for o in range(1, 61)] + [(p, 100 + p, p) for p in range(1, 30) if p != HOT]
VISITS = [(f"u{u}", f"v{v}", u * v) for u in range(8) for v in range(6)]


def config():
    shards = "\n".join(f"  - {{ name: s{i}, host: {sptest.HOST}, port: {port}, database: {db}, user: postgres, "
                       f"password: postgres, pool_size: 10 }}" for i, (port, db) in enumerate(DBS.shards))
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
  - {{ name: admin, password: adminpw, admin: true }}
shards:
{shards}
distributions:
  - name: by_product
    method: hash
    partitions: {PARTS}
    tables: {{ sales: product_id }}
    salt: {{ column: order_id, buckets: {BUCKETS} }}
  - name: by_user
    method: hash
    partitions: 6
    tables: {{ visits: user_id }}
    salt: {{ column: visit, buckets: 3, keys: [{", ".join(SALTED_USERS)}] }}
catalog: s0
moves: {{ max_hold: 5s, poll: 100ms, lease: 2s }}
"""


def test(fn):
    TESTS.append(fn)
    return fn


def admin(sql):
    return sptest.admin(PROXY.port, sql)


def setup():
    global PROXY
    DBS.create()
    PROXY = sptest.Proxy("salting", config(), WORK).start()
    SIDES.update(plain=DBS.plain[0], proxy=PROXY.port)
    for port in SIDES.values():
        c = sptest.connect(port, DB)
        cur = c.cursor()
        for sql in SCHEMA:
            cur.execute(sql)
        cur.executemany("INSERT INTO sales VALUES (%s, %s, %s)", SALES)
        cur.executemany("INSERT INTO visits VALUES (%s, %s, %s)", VISITS)
        c.close()


def teardown():
    for c in ADMIN:
        c.close()
    if PROXY is not None:
        PROXY.stop()
    DBS.drop()


def run(cur, sql, params=None, **kw):
    """(tag, sorted rows) or (SQLSTATE, None)."""
    try:
        cur.execute(sql, params, **kw)
        rows = sorted(cur.fetchall()) if cur.description else None
        return cur.statusmessage, rows
    except (psycopg2.Error, psycopg.Error) as e:
        code = e.pgcode if isinstance(e, psycopg2.Error) else e.sqlstate
        return code, None


def same(statements, extended=False):
    """Each statement on both sides (in order: writes change both alike): same tag, rows, error."""
    conns = {side: (psycopg.connect(host=sptest.HOST, port=port, dbname=DB, user="app", password="secret",
                                    autocommit=True) if extended else sptest.connect(port, DB))
             for side, port in SIDES.items()}
    try:
        for sql, params in statements:
            got = {side: run(c.cursor(), sql, params, **({"prepare": True} if extended else {}))
                   for side, c in conns.items()}
            assert got["plain"] == got["proxy"], (sql, params, got)
    finally:
        for c in conns.values():
            c.close()


READS = [
    ("SELECT product_id, order_id, qty FROM sales WHERE product_id = %s", (HOT,)),
    ("SELECT product_id, order_id, qty FROM sales WHERE product_id = %s AND order_id = %s", (HOT, 33)),
    ("SELECT order_id, qty FROM sales WHERE product_id IN (%s, %s) AND order_id IN (%s, %s, %s)",
     (HOT, 3, 33, 34, 103)),
    ("SELECT product_id, qty FROM sales WHERE order_id = %s", (34,)),
    ("SELECT count(*), sum(qty), min(order_id), max(order_id) FROM sales", None),
    ("SELECT count(*), sum(qty), max(order_id) FROM sales WHERE product_id = %s", (HOT,)),
    ("SELECT product_id, count(*), sum(qty) FROM sales GROUP BY product_id", None),
    ("SELECT qty, count(*) FROM sales WHERE product_id = %s GROUP BY qty", (HOT,)),
    ("SELECT * FROM visits WHERE user_id = %s", ("u3",)),
    ("SELECT * FROM visits WHERE user_id = %s AND visit = %s", ("u3", "v4")),
    ("SELECT user_id, sum(n) FROM visits GROUP BY user_id", None),
    ("SELECT count(*), sum(a.qty * b.qty) FROM sales a JOIN sales b ON a.product_id = b.product_id "
     "WHERE a.product_id = %s", (HOT,)),
    ("SELECT order_id, qty FROM sales WHERE product_id = %s ORDER BY qty DESC, order_id LIMIT 5", (HOT,)),
]


@test
def differential_reads():
    same(READS)
    same(READS, extended=True)


@test
def differential_writes():
    writes = [
        ("INSERT INTO sales VALUES (%s, %s, %s)", (HOT, 1001, 3)),
        ("INSERT INTO sales VALUES (%s, %s, 1), (%s, %s, 2), (%s, %s, 3)", (HOT, 1002, HOT, 1003, 2, 1004)),
        ("INSERT INTO sales VALUES (%s, %s, %s)", (HOT, 1001, 9)),  # duplicate: 23505
        ("UPDATE sales SET qty = qty + 10 WHERE product_id = %s AND order_id = %s", (HOT, 33)),
        ("UPDATE sales SET qty = qty + 1 WHERE product_id = %s", (HOT,)),
        ("DELETE FROM sales WHERE product_id = %s AND order_id = %s", (HOT, 34)),
        ("DELETE FROM sales WHERE product_id = %s AND order_id IN (%s, %s)", (HOT, 35, 36)),
        ("DELETE FROM sales WHERE product_id = %s", (3,)),
        ("UPDATE visits SET n = n * 2 WHERE user_id = %s AND visit = %s", ("u2", "v1")),
        ("INSERT INTO visits VALUES (%s, %s, %s)", ("u9", "v9", 1)),
        ("INSERT INTO sales SELECT product_id, order_id + 10000, qty FROM sales WHERE product_id = %s "
         "AND order_id < %s", (HOT, 6)),
    ] + READS
    same(writes)
    extended = [
        ("INSERT INTO sales VALUES (%s, %s, %s)", (HOT, 2001, 4)),
        ("UPDATE sales SET qty = %s WHERE product_id = %s AND order_id = %s", (50, HOT, 2001)),
        ("UPDATE sales SET qty = qty - 1 WHERE product_id = %s", (HOT,)),
        ("DELETE FROM sales WHERE product_id = %s AND order_id = %s", (HOT, 37)),
        ("DELETE FROM sales WHERE product_id = %s", (4,)),
        ("INSERT INTO visits VALUES (%s, %s, %s)", ("u9", "v10", 2)),
    ] + READS
    same(extended, extended=True)


@test
def writes_in_a_block():
    """A block writing one key's several partitions (two-phase commit through the proxy),
    then one rolled back: the same rows on both sides."""
    committed = PROXY.metric("splitpoint_two_phase_total", {"outcome": "committed"})
    for port in SIDES.values():
        c = sptest.connect(port, DB, autocommit=False)
        cur = c.cursor()
        cur.execute("UPDATE sales SET qty = qty + 5 WHERE product_id = %s", (HOT,))
        cur.execute("INSERT INTO sales VALUES (%s, 3001, 1), (%s, 3002, 2), (%s, 3003, 3)", (HOT, HOT, HOT))
        c.commit()
        cur.execute("DELETE FROM sales WHERE product_id = %s AND order_id > 3001", (HOT,))
        c.rollback()
        c.close()
    assert PROXY.metric("splitpoint_two_phase_total", {"outcome": "committed"}) == committed + 1
    same(READS)


@test
def refusals():
    c = sptest.connect(PROXY.port, DB)
    cur = c.cursor()
    for sql, words in [("INSERT INTO sales (product_id, qty) VALUES (7, 1)", 'salt column "order_id"'),
                       ("UPDATE sales SET order_id = 5000 WHERE product_id = 7 AND order_id = 1",
                        'cannot update the salt column "order_id"'),
                       ("COPY sales FROM STDIN", "salted table")]:
        try:
            cur.execute(sql)
            raise AssertionError(f"not refused: {sql}")
        except psycopg2.Error as e:
            assert e.pgcode in ("SPR01", "0A000") and words in e.pgerror, (sql, e.pgcode, e.pgerror)
    c.close()


def shard_of_rows(table, key, salt):
    """{(key, salt): shard index} read on the shards directly (each row on exactly one)."""
    where = {}
    for i, (port, db) in enumerate(DBS.shards):
        for k, s in sptest.query(port, db, f"SELECT {key}, {salt} FROM {table}", None, "postgres", "postgres"):
            assert (k, s) not in where, f"{table} row {(k, s)} on shards {where[(k, s)]} and {i}"
            where[(k, s)] = i
    return where


ADMIN = []  # one admin console connection for the many SHOW ROUTEs


def routed(table, key, salt, k, s):
    """SHOW ROUTE of a read by key and salt column: (shards, partitions)."""
    if not ADMIN:
        ADMIN.append(sptest.connect(PROXY.port, "splitpoint", "admin", "adminpw"))
    lit = (lambda v: f"'{v}'") if isinstance(k, str) else str
    cur = ADMIN[0].cursor()
    cur.execute(f"SHOW ROUTE SELECT * FROM {table} WHERE {key} = {lit(k)} AND {salt} = {lit(s)}")
    row = cur.fetchall()[0]
    return row[1], row[2]


@test
def hot_key_spreads_and_point_reads_are_one_shard():
    rows = shard_of_rows("sales", "product_id", "order_id")
    hot_shards = {i for (k, _), i in rows.items() if k == HOT}
    assert len(hot_shards) >= 2, f"product {HOT}'s rows are all on shards {hot_shards}"
    shards, parts = routed("sales", "product_id", "order_id", HOT, 33)
    assert "," not in shards and "," not in parts and parts.startswith("by_product:"), (shards, parts)
    key_alone = admin(f"SHOW ROUTE SELECT * FROM sales WHERE product_id = {HOT}")[0]
    assert 1 < len(key_alone[2].split(",")) <= BUCKETS, key_alone
    # The statement itself: a one-shard statement, by the proxy's counters.
    def counts():
        return [PROXY.metric("splitpoint_queries_total", {"route": "single"})] + [
            PROXY.metric("splitpoint_shard_query_duration_seconds_count", {"shard": f"s{i}"}) for i in range(3)]
    before = counts()
    c = sptest.connect(PROXY.port, DB)
    cur = c.cursor()
    for _ in range(20):
        cur.execute("SELECT qty FROM sales WHERE product_id = %s AND order_id = %s", (HOT, 33))
    c.close()
    diff = [a - b for a, b in zip(counts(), before)]
    want = [20] + [20 if shards == f"s{i}" else 0 for i in range(3)]
    assert diff == want, (diff, want, shards)


def pg_partitions(port, db, rows, key_type, salt_type, parts, buckets, salted=None):
    """{(key, salt): partition} as PostgreSQL's hash partitioning computes them (`salted`:
    the keys salted, the others in bucket 0; None: all)."""
    c = sptest.connect(port, db, "postgres", "postgres")
    cur = c.cursor()
    cur.execute(f"CREATE TEMP TABLE b1 (s {salt_type}) PARTITION BY HASH (s)")
    cur.execute(f"CREATE TEMP TABLE h2 (k {key_type}, b int4) PARTITION BY HASH (k, b)")
    cur.execute(f"""SELECT k, s, (SELECT r FROM generate_series(0, {parts - 1}) r WHERE satisfies_hash_partition(
                      'h2'::regclass, {parts}, r, k, CASE WHEN %s::{key_type}[] IS NULL OR k = ANY(%s)
                      THEN (SELECT b FROM generate_series(0, {buckets - 1}) b
                      WHERE satisfies_hash_partition('b1'::regclass, {buckets}, b, s)) ELSE 0 END))
                    FROM unnest(%s::{key_type}[], %s::{salt_type}[]) AS t(k, s)""",
                [salted, salted, [k for k, _ in rows], [s for _, s in rows]])
    out = {(k, s): p for k, s, p in cur.fetchall()}
    c.close()
    return out


@test
def partitions_are_postgresqls():
    port, db = DBS.plain
    for table, key, salt, dist, types, parts, buckets in [
            ("sales", "product_id", "order_id", "by_product", ("bigint", "bigint"), PARTS, BUCKETS),
            ("visits", "user_id", "visit", "by_user", ("text", "text"), 6, 3)]:
        rows = sorted(shard_of_rows(table, key, salt))
        want = pg_partitions(port, db, rows, *types, parts, buckets, SALTED_USERS if table == "visits" else None)
        for k, s in rows:
            shards, part = routed(table, key, salt, k, s)
            assert part == f"{dist}:{want[(k, s)]}", (table, k, s, part, want[(k, s)])


@test
def salt_keys():
    """`keys`: an unsalted user's rows in one partition, a salted one's in its buckets';
    a move of a partition holding a salted user's rows puts exactly the rows the router
    sends there on the target."""
    one = admin("SHOW ROUTE SELECT * FROM visits WHERE user_id = 'u0'")[0][2]
    assert "," not in one, one
    spread = admin("SHOW ROUTE SELECT * FROM visits WHERE user_id = 'u1'")[0][2]
    assert len(spread.split(",")) > 1, spread
    placement = {f"{r[0]}:{r[1]}": r[2] for r in admin("SHOW PARTITIONS")}
    rows = shard_of_rows("visits", "user_id", "visit")
    pg = pg_partitions(*DBS.plain, sorted(rows), "text", "text", 6, 3, SALTED_USERS)
    part = next(f"by_user:{p}" for (k, _), p in sorted(pg.items()) if k == "u1")
    target = next(s for s in ("s0", "s1", "s2") if s != placement[part])
    wait_move(int(admin(f"MOVE PARTITION {part} TO {target}")[0][0]))
    placement = {f"{r[0]}:{r[1]}": r[2] for r in admin("SHOW PARTITIONS")}
    assert placement[part] == target, (part, placement)
    after = shard_of_rows("visits", "user_id", "visit")
    assert set(after) == set(rows)
    for (k, s), i in after.items():
        p = f"by_user:{pg[(k, s)]}"
        assert placement[p] == f"s{i}" and routed("visits", "user_id", "visit", k, s) == (f"s{i}", p), (k, s, p, i)


def wait_move(move, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        state = {int(r[0]): r for r in admin("SHOW MOVES ALL")}[move][5]
        if state in ("done", "failed", "cancelled"):
            assert state == "done", admin("SHOW MOVES ALL")
            return
        assert time.monotonic() < deadline, f"move {move}: {state}"
        time.sleep(0.1)


@test
def move_keeps_rows_where_routed():
    rows = shard_of_rows("sales", "product_id", "order_id")
    # A partition holding some of the hot key's rows, and a shard it is not on.
    part = routed("sales", "product_id", "order_id", HOT, 33)[1]
    src = int(routed("sales", "product_id", "order_id", HOT, 33)[0][1:])
    target = f"s{(src + 1) % 3}"
    stop, errors, written = threading.Event(), [], []

    def writer():
        c = sptest.connect(PROXY.port, DB)
        o = 50000
        while not stop.is_set():
            o += 1
            try:
                c.cursor().execute("INSERT INTO sales VALUES (%s, %s, 1)", (HOT, o))
                written.append(o)
            except psycopg2.Error as e:
                if e.pgcode != "SPM01":  # a statement held past max_hold: retried
                    errors.append((e.pgcode, e.pgerror))
        c.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        wait_move(int(admin(f"MOVE PARTITION {part} TO {target}")[0][0]))
    finally:
        stop.set()
        t.join()
    assert not errors and written, (errors, len(written))
    after = shard_of_rows("sales", "product_id", "order_id")
    assert set(after) == set(rows) | {(HOT, o) for o in written}, "rows lost or added by the move"
    # Every row on its partition's shard (PostgreSQL's partition: the router's, as
    # partitions_are_postgresqls shows), and the router's own word for a sample.
    placement = {f"{r[0]}:{r[1]}": r[2] for r in admin("SHOW PARTITIONS")}
    assert placement[part] == target, (part, placement)
    port, db = DBS.plain
    pg = pg_partitions(port, db, sorted(after), "bigint", "bigint", PARTS, BUCKETS)
    moved = 0
    for (k, s), i in sorted(after.items()):
        p = f"by_product:{pg[(k, s)]}"
        assert placement[p] == f"s{i}", f"row {(k, s)} of {p} is on s{i}, not on {placement[p]}"
        moved += p == part
    for (k, s) in sorted(after)[::max(1, len(after) // 200)]:
        assert routed("sales", "product_id", "order_id", k, s) == (placement[f"by_product:{pg[(k, s)]}"],
                                                                  f"by_product:{pg[(k, s)]}"), (k, s)
    assert moved > 0 and any(i != src for (k, s), i in after.items() if k == HOT)
    print(f"  {moved} rows of {part} on {target}; {len(written)} inserts during the move", flush=True)


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
