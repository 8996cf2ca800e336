#!/usr/bin/env python3
"""Issue #45 (SPEC §14): types made by CREATE TYPE (an enum, a domain over int, a
composite) read through splitpoint over three shards, by drivers that look a type's OID
up in the catalog: asyncpg (its type introspection) and psycopg 3 (an enum registered
with EnumInfo.fetch + register_enum, read back as Python enum values). Each type has a
different OID on each shard (a few padding types are made on some shards first); the
client must meet only the catalog shard's (docs/compatibility.md, "Tools").

Databases: sptest.ThreeShards (shards ut0, ut1 on PG0, ut2 on PG1, and one plain
database on PG1 with the same schema and rows). Table `items` hash-sharded on
tenant_id (12 tenants). Each case runs on both sides and the results must be identical:
- asyncpg: fetch of every row (all shards), an enum parameter, a domain parameter,
  conn.prepare() then fetch, executemany of rows with enum/domain/composite values over
  several shards, copy_records_to_table, a read of the tenants of the two shards that
  are not the catalog shard (the catalog shard does not take part), and a read of one
  tenant on a non-catalog shard (its key a constant, then a parameter), an array of
  the enum (array_agg), then a column of an enum made after those reads;
- psycopg 3: the same reads with the enum registered (server-side binding: each
  statement is described with its portal), the composite registered with
  CompositeInfo + register_composite.

Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 40

import asyncio
import os
import pprint
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-asyncpg", "python3-psycopg")

import asyncpg  # noqa: E402
import psycopg  # noqa: E402
from psycopg.types.composite import CompositeInfo, register_composite  # noqa: E402
from psycopg.types.enum import EnumInfo, register_enum  # noqa: E402

WORK = sptest.workdir("user_types")
DBS = sptest.ThreeShards("ut")
DB = DBS.plain[1]  # the name every client gives, through the proxy too
# Proxy bugs still open (reported as KNOWN FAILURE): check name -> diagnosis.
KNOWN = {}
CHECKS = sptest.Checks(KNOWN, label="DIFFERENCE")
PROXY = None
SIDES = {}  # "plain"/"proxy" -> port
TENANTS = {}  # shard index -> its tenants (read on the shards after the load)

SCHEMA = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN qty AS int CHECK (VALUE > 0)",
    "CREATE TYPE pair AS (a int, b text)",
    """CREATE TABLE items (tenant_id int NOT NULL, id int NOT NULL, m mood NOT NULL, q qty, p pair,
         PRIMARY KEY (tenant_id, id))""",
]
ROWS = [(1 + n % 12, n, ("sad", "ok", "happy")[n % 3], n % 7 + 1, (n, f"p{n}")) for n in range(1, 61)]


def config():
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{DBS.shards_yaml()}
distributions:
  - name: by_tenant
    method: hash
    partitions: 12
    tables: {{ items: tenant_id }}
"""


def same(cid, plain, proxy):
    a, b = pprint.pformat(plain, width=120), pprint.pformat(proxy, width=120)
    return CHECKS.check(a == b, cid, lambda: f"plain: {a}\n    proxy: {b}")


def setup():
    global PROXY
    DBS.create()
    for i, (port, db) in enumerate(DBS.shards[1:], 1):  # OIDs unlike the catalog shard's (s0)
        for k in range(i * 2):
            sptest.query(port, db, f"CREATE DOMAIN pad{k} AS int")
    PROXY = sptest.Proxy("user_types", config(), WORK).start()
    SIDES.update(plain=DBS.plain[0], proxy=PROXY.port)
    for side, port in SIDES.items():
        c = sptest.connect(port, DB)
        for sql in SCHEMA:
            c.cursor().execute(sql)
        for r in ROWS[:40]:
            c.cursor().execute("INSERT INTO items VALUES (%s, %s, %s, %s, ROW(%s, %s))", r[:4] + r[4])
        c.close()
    oids = [sptest.query(port, db, "SELECT 'mood'::regtype::oid")[0][0] for port, db in DBS.shards]
    assert len(set(oids)) == 3, f"the enum has the same OID on two shards: {oids}"
    for i, (port, db) in enumerate(DBS.shards):
        TENANTS[i] = sorted(r[0] for r in sptest.query(port, db, "SELECT DISTINCT tenant_id FROM items"))
    assert all(TENANTS[i] for i in range(3)), TENANTS


def teardown():
    if PROXY is not None:
        PROXY.stop()
    DBS.drop()


async def asyncpg_side(port):
    """Every asyncpg case on one side: {case: result}."""
    c = await asyncpg.connect(f"postgresql://app:secret@{sptest.HOST}:{port}/{DB}")
    out = {}
    order = " ORDER BY tenant_id, id"
    cols = "SELECT tenant_id, id, m, q, p FROM items"
    t1, t2 = TENANTS[1][0], TENANTS[2][0]
    try:
        out["all rows"] = await c.fetch(cols + order)
        out["enum parameter"] = await c.fetch("SELECT id, m FROM items WHERE m = $1" + order, "happy")
        out["domain parameter"] = await c.fetch("SELECT id, q FROM items WHERE q = $1::qty" + order, 3)
        st = await c.prepare("SELECT m, p, q FROM items WHERE m <> $1" + order)
        out["prepare"] = (await st.fetch("sad"), [(a.name, a.type.name) for a in st.get_attributes()])
        out["non-catalog shards"] = await c.fetch(cols + f" WHERE tenant_id IN ({t1}, {t2})" + order)
        out["one non-catalog tenant, constant"] = await c.fetch(cols + f" WHERE tenant_id = {t1}" + order)
        out["one non-catalog tenant, parameter"] = await c.fetch(cols + " WHERE tenant_id = $1" + order, t2)
        await c.executemany("INSERT INTO items VALUES ($1, $2, $3, $4, $5)", ROWS[40:50])
        await c.copy_records_to_table("items", records=ROWS[50:])
        out["after writes"] = await c.fetch(cols + order)
        out["enum array"] = await c.fetch("SELECT tenant_id, array_agg(m ORDER BY id) FROM items GROUP BY tenant_id"
                                          " ORDER BY tenant_id")
        # A type made now (the proxy learns the shards' types again after DDL).
        await c.execute("CREATE TYPE size AS ENUM ('s', 'm', 'l'); ALTER TABLE items ADD COLUMN sz size DEFAULT 'm'")
        out["type made later, one tenant"] = await c.fetch(f"SELECT id, sz FROM items WHERE tenant_id = {t2}" + order)
        out["type made later, all"] = await c.fetch("SELECT id, sz FROM items" + order)
    finally:
        await c.close()
    return {k: [tuple(r) if isinstance(r, asyncpg.Record) else r for r in v] if isinstance(v, list) else v
            for k, v in out.items()}


def psycopg_side(port):
    """Every psycopg 3 case on one side (enum and composite registered): {case: result}."""
    out = {}
    with psycopg.connect(host=sptest.HOST, port=port, dbname=DB, user="app", password="secret",
                         autocommit=True) as c:
        register_enum(EnumInfo.fetch(c, "mood"), c)
        register_composite(CompositeInfo.fetch(c, "pair"), c)
        order = " ORDER BY tenant_id, id"
        cols = "SELECT tenant_id, id, m, q, p FROM items"
        t1, t2 = TENANTS[1][0], TENANTS[2][0]
        for binary in (False, True):
            cur = c.cursor(binary=binary)
            k = " (binary)" if binary else ""
            show = lambda rows: [(*r[:2], repr(r[2]), r[3], repr(r[4])) for r in rows]  # noqa: E731
            out["all rows" + k] = show(cur.execute(cols + order).fetchall())
            out["non-catalog shards" + k] = show(cur.execute(cols + " WHERE tenant_id IN (%s, %s)" + order,
                                                             (t1, t2)).fetchall())
            out["one non-catalog tenant" + k] = show(cur.execute(cols + " WHERE tenant_id = %s" + order,
                                                                 (t1,)).fetchall())
            out["enum parameter" + k] = [repr(r) for r in cur.execute(
                "SELECT m FROM items WHERE m = %s" + order, ("ok",)).fetchall()]
            out["types" + k] = [d.type_code for d in cur.execute(cols + " LIMIT 0").description]
    return out


def test_asyncpg():
    results = {side: asyncio.run(asyncpg_side(port)) for side, port in SIDES.items()}
    for case in results["plain"]:
        same(f"asyncpg {case}", results["plain"][case], results["proxy"].get(case))


def test_psycopg():
    results = {side: psycopg_side(port) for side, port in SIDES.items()}
    oid = {side: sptest.query(port, DB, "SELECT 'mood'::regtype::oid, 'qty'::regtype::oid, 'pair'::regtype::oid")
           for side, port in SIDES.items()}
    for case in results["plain"]:
        plain, proxy = results["plain"][case], results["proxy"].get(case)
        if case.startswith("types"):  # each side's own OIDs, by name
            names = {side: dict(zip(oid[side][0], ("mood", "qty", "pair"))) for side in oid}
            plain = [names["plain"].get(t, t) for t in plain]
            proxy = [names["proxy"].get(t, t) for t in proxy or []]
        same(f"psycopg {case}", plain, proxy)


def test_clean():
    for i, (port, db) in enumerate(DBS.shards):
        left = sptest.query(port, db, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
        CHECKS.check(not left, f"prepared s{i}", lambda: f"prepared transactions left: {left}")


TESTS = [test_asyncpg, test_psycopg, test_clean]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown, checks=CHECKS,
                              watch=lambda: [PROXY] if PROXY else []))
