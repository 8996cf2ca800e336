#!/usr/bin/env python3
"""Issue #44, probe 2: every routing input applies the same to simple queries, unnamed
and named prepared statements, and statements a driver's cache prepares after N runs.

Two shards (a fresh database on each shared instance). `ledger` is an unlisted table
created directly on s0 only, so a statement that reaches s1 fails with 42P01. Through
the proxy, each driver runs statements routed to s0 by
- a comment hint `/* splitpoint: shard=s0 */`, and
- `SET splitpoint.shard = s0` earlier in the session (by the driver's own way of sending
  a statement without parameters),
ten times each, so that psycopg 3 (prepare_threshold 5: unnamed statements, then a named
Parse+Bind+Execute in one batch, then Bind+Execute of the named one) and asyncpg (named
statements at once; an explicit prepare(); executemany) cross their cache thresholds.
Every execution must succeed and every row land on s0. (JDBC's prepareThreshold is
covered by tests/integration/jdbc/ClientTest.java.)

Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_WORKDIR).
"""
# test-timeout: 120

import asyncio
import os
import sys

import asyncpg
import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sptest  # noqa: E402

WORK = sptest.workdir("test_prepared_hints")
DBS = None
PROXY = None
HINT = "/* splitpoint: shard=s0 */ "


def config():
    p = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
      - {{ name: s1, host: 127.0.0.1, port: {p[1]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 4
        tables: {{ items: id }}
    """


def dsn():
    return f"host=127.0.0.1 port={PROXY.port} user=app password=secret dbname={DBS.name}"


def ledger_ids():
    c = DBS.shard(0)
    cur = c.cursor()
    cur.execute("SELECT id FROM ledger ORDER BY id")
    ids = [r[0] for r in cur.fetchall()]
    c.close()
    return ids


def test_psycopg3_hint():
    with psycopg.connect(dsn(), autocommit=True) as c:
        for i in range(10):
            c.execute(HINT + "INSERT INTO ledger VALUES (%s, %s)", (100 + i, "p3"))
            n = c.execute(HINT + "SELECT count(*) FROM ledger WHERE note = %s", ("p3",)).fetchone()[0]
            assert n == i + 1, f"execution {i + 1}: count {n}"
        # prepare=True: named at once.
        for i in range(3):
            c.execute(HINT + "INSERT INTO ledger VALUES (%s, %s)", (150 + i, "p3"), prepare=True)
    assert [i for i in ledger_ids() if 100 <= i < 200] == list(range(100, 110)) + [150, 151, 152]


def test_psycopg3_set_shard():
    with psycopg.connect(dsn(), autocommit=True) as c:
        c.execute("SET splitpoint.shard = s0")
        assert c.execute("SHOW splitpoint.shard").fetchone()[0] == "s0"
        for i in range(10):
            c.execute("INSERT INTO ledger VALUES (%s, %s)", (200 + i, "p3set"))
            n = c.execute("SELECT count(*) FROM ledger WHERE note = %s", ("p3set",)).fetchone()[0]
            assert n == i + 1, f"execution {i + 1}: count {n}"
        c.execute("RESET splitpoint.shard")
        # Without the setting the unlisted table is read on any shard: not asserted.
    # The same through the extended protocol with parameters-free statements prepared.
    with psycopg.connect(dsn(), autocommit=True) as c:
        c.execute("SET splitpoint.shard = s0", prepare=True)
        n = c.execute("SELECT count(*) FROM ledger", prepare=True).fetchone()[0]
        assert n >= 10, n
    assert [i for i in ledger_ids() if 200 <= i < 300] == list(range(200, 210))


def test_asyncpg_hint():
    async def run():
        c = await asyncpg.connect(host="127.0.0.1", port=PROXY.port, user="app", password="secret",
                                  database=DBS.name)
        try:
            for i in range(10):
                await c.execute(HINT + "INSERT INTO ledger VALUES ($1, $2)", 300 + i, "apg")
                n = await c.fetchval(HINT + "SELECT count(*) FROM ledger WHERE note = $1", "apg")
                assert n == i + 1, f"execution {i + 1}: count {n}"
            assert await c.fetchval(HINT + "SELECT count(*) FROM ledger") >= 10
            st = await c.prepare(HINT + "SELECT id FROM ledger WHERE id = $1")
            for i in range(10):
                assert await st.fetchval(300 + i) == 300 + i
            await c.executemany(HINT + "INSERT INTO ledger VALUES ($1, $2)", [(320 + i, "apg") for i in range(5)])
            # SET splitpoint.shard (simple protocol: no arguments), then statements prepared at once.
            await c.execute("SET splitpoint.shard = s0")
            for i in range(6):
                await c.execute("INSERT INTO ledger VALUES ($1, $2)", 340 + i, "apgset")
            assert await c.fetchval("SELECT count(*) FROM ledger WHERE note = $1", "apgset") == 6
        finally:
            await c.close()

    asyncio.run(run())
    want = list(range(300, 310)) + list(range(320, 325)) + list(range(340, 346))
    assert [i for i in ledger_ids() if 300 <= i < 400] == want


def test_admin_console_prepared():
    """The admin console answers the extended protocol (issue #45): psycopg 3 prepares
    SHOW POOLS at its sixth run, asyncpg prepares every statement."""
    admin = f"host=127.0.0.1 port={PROXY.port} user=admin password=adminpw dbname=splitpoint"
    with psycopg.connect(admin, autocommit=True) as c:
        for i in range(8):
            rows = c.execute("SHOW SHARDS").fetchall()
            assert [r[0] for r in rows] == ["s0", "s1"], f"run {i + 1}: {rows}"
        cur = c.execute("SHOW POOLS", prepare=True)
        assert cur.description[0].name == "shard", cur.description
        try:
            c.execute("SHOW NONSENSE", prepare=True)
            raise AssertionError("SHOW NONSENSE succeeded")
        except psycopg.Error as e:
            assert e.sqlstate is not None, e
        assert c.execute("SHOW SHARDS").fetchall()[0][0] == "s0"  # usable after the error

    async def run():
        c = await asyncpg.connect(host="127.0.0.1", port=PROXY.port, user="admin", password="adminpw",
                                  database="splitpoint")
        try:
            for _ in range(3):
                rows = await c.fetch("SHOW SHARDS")
                assert [r[0] for r in rows] == ["s0", "s1"], rows
        finally:
            await c.close()

    asyncio.run(run())


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("hints")
    c = DBS.shard(0)
    c.cursor().execute("CREATE TABLE ledger (id int, note text)")
    c.close()
    PROXY = sptest.Proxy("hints", config(), WORK).start()


def teardown():
    if PROXY is not None:
        PROXY.stop()
    if DBS is not None:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([test_psycopg3_hint, test_psycopg3_set_shard, test_asyncpg_hint,
                               test_admin_console_prepared], setup, teardown,
                              watch=lambda: [PROXY]))
