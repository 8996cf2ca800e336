#!/usr/bin/env python3
"""Real clients, unmodified: asyncpg through splitpoint with sharding on.

asyncpg speaks only the extended protocol, prepares every statement under a name of
its own (its statement cache: `__asyncpg_stmt_N__`, reused on the next execution of
the same text), pipelines Parse/Describe/Bind/Execute, asks for binary results for
every type it knows and sends binary parameters. Through a transaction-pooling proxy
that means named statements must follow the client from backend to backend.

Two shards (the shared instances PG0 and PG1, each with a fresh database
drv_asyncpg_<random>, dropped at the end); accounts hash-sharded, events
range-sharded, currencies a reference table (tests/lib/clients.py). Exercised:
connect with a DSN (scram-sha-256; a wrong password refused), DDL, parameterized
single-shard reads and writes, a multi-row INSERT across shards, scatter ORDER
BY/LIMIT/OFFSET, aggregates and GROUP BY in binary format compared with values
computed in the test, the statement cache (the same text many times with different
keys), an explicit conn.prepare() statement, executemany, copy_records_to_table
(binary COPY split by key), transactions (commit, rollback, SPT01 for a second written
shard), errors followed by good statements, and a cancel through asyncpg's own API (a
timeout on the query makes asyncpg send a CancelRequest; the 57014 the proxy sends is
consumed by asyncpg, so it is checked in splitpoint_errors_total). Finally both
shards are read directly: every row is on the shard owning its key.

Installs python3-asyncpg when missing.
Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 600

import asyncio
import os
import secrets
import sys
import time
import traceback
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402

clients.ensure_apt("python3-asyncpg")

import asyncpg  # noqa: E402
import client_scenario as sc  # noqa: E402

DB = "drv_asyncpg_" + secrets.token_hex(4)
WORK = clients.workdir("client_asyncpg")


def dsn(proxy, password="secret"):
    return f"postgresql://app:{password}@{clients.HOST}:{proxy.port}/{DB}"


def rows3(records):
    return [(r[0], r[1], r[2]) for r in records]


async def scenario(chk, proxy, shard_of):
    m = sc.Model()

    # -- connect and auth -------------------------------------------------------------
    conn = await asyncpg.connect(dsn(proxy), timeout=10)
    row = await conn.fetchrow("SELECT current_user, current_database()")
    chk.eq("connect with scram-sha-256: current_user, current_database", tuple(row), ("app", DB))
    chk.ok(f"server_version as asyncpg sees it: {conn.get_server_version()}")
    try:
        bad = await asyncpg.connect(dsn(proxy, "wrong"), timeout=10)
        await bad.close()
        chk.true("wrong password is refused", False, "connected")
    except asyncpg.InvalidPasswordError as e:
        chk.eq("wrong password: SQLSTATE", e.sqlstate, "28P01")

    # -- DDL ---------------------------------------------------------------------------
    for stmt in sc.SCHEMA:
        await conn.execute(stmt)
    chk.ok("DROP/CREATE TABLE accounts, events, currencies through the proxy")

    # -- reference table ------------------------------------------------------------------
    tag = await conn.execute("INSERT INTO currencies (code, name) VALUES ($1, $2), ($3, $4), ($5, $6)",
                             *[x for pair in sc.CURRENCIES for x in pair])
    chk.eq("multi-row INSERT into reference table: command tag", tag, "INSERT 0 3")
    m.currencies.update(sc.CURRENCIES)

    # -- single-row inserts: the same text 10 times (statement cache) ----------------------
    for i in sc.ACCOUNT_IDS[:10]:
        tag = await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)",
                                 i, sc.owner_of(i), sc.balance_of(i))
        if tag != "INSERT 0 1":
            chk.eq(f"INSERT id={i} tag", tag, "INSERT 0 1")
        m.accounts[i] = (sc.owner_of(i), sc.balance_of(i))
    chk.ok("10 single-row INSERTs with binary parameters, one cached statement")

    # -- multi-row insert across shards with RETURNING --------------------------------------
    rest = sc.ACCOUNT_IDS[10:]
    values = ", ".join(f"(${3 * k + 1}, ${3 * k + 2}, ${3 * k + 3})" for k in range(len(rest)))
    params = [x for i in rest for x in (i, sc.owner_of(i), sc.balance_of(i))]
    got = await conn.fetch(f"INSERT INTO accounts (id, owner, balance) VALUES {values} RETURNING id", *params)
    chk.eq(f"multi-row INSERT of {len(rest)} accounts on both shards: RETURNING ids", sorted(r[0] for r in got), rest)
    for i in rest:
        m.accounts[i] = (sc.owner_of(i), sc.balance_of(i))
    ev_values = ", ".join(f"(${2 * k + 1}, ${2 * k + 2})" for k in range(len(sc.EVENT_IDS)))
    tag = await conn.execute(f"INSERT INTO events (id, kind) VALUES {ev_values}",
                             *[x for i in sc.EVENT_IDS for x in (i, sc.kind_of(i))])
    chk.eq("multi-row INSERT into range-sharded events (both ranges): tag", tag, f"INSERT 0 {len(sc.EVENT_IDS)}")
    m.events.update({i: sc.kind_of(i) for i in sc.EVENT_IDS})

    # -- statement cache: the same SELECT text with many keys -------------------------------
    for i in sc.ACCOUNT_IDS:
        row = await conn.fetchrow("SELECT owner, balance FROM accounts WHERE id = $1", i)
        if tuple(row) != m.accounts[i]:
            chk.eq(f"cached single-shard SELECT id={i}", tuple(row), m.accounts[i])
    chk.ok(f"cached single-shard SELECT executed {len(sc.ACCOUNT_IDS)} times with keys on both shards")
    tag = await conn.execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", Decimal("0.50"), 7)
    chk.eq("single-shard UPDATE tag", tag, "UPDATE 1")
    m.accounts[7] = (m.accounts[7][0], m.accounts[7][1] + Decimal("0.50"))
    chk.eq("UPDATE visible", await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", 7), m.accounts[7][1])
    got = await conn.fetch("SELECT a.id, c.name FROM accounts a JOIN currencies c ON c.code = $1 WHERE a.id = $2",
                           "EUR", 3)
    chk.eq("single-shard join with a reference table", [tuple(r) for r in got], [(3, "Euro")])
    got = await conn.fetch("SELECT id, kind FROM events WHERE id BETWEEN $1 AND $2 ORDER BY id", 990, 1010)
    chk.eq("range read across the bound", [tuple(r) for r in got],
           [(i, sc.kind_of(i)) for i in sc.EVENT_IDS if 990 <= i <= 1010])

    # -- scatter reads, binary results ------------------------------------------------------
    got = await conn.fetch("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 5")
    chk.eq("binary scatter ORDER BY balance DESC, id LIMIT 5", rows3(got), m.top(5))
    got = await conn.fetch("SELECT id, owner, balance FROM accounts ORDER BY id LIMIT $1 OFFSET $2", 5, 10)
    chk.eq("binary scatter ORDER BY id LIMIT $1 OFFSET $2", rows3(got), m.by_id(5, 10))
    row = await conn.fetchrow("SELECT count(*), sum(balance), min(balance), max(balance) FROM accounts")
    chk.eq("binary scatter count/sum/min/max", tuple(row), m.aggregates())
    got_avg = await conn.fetchval("SELECT avg(balance) FROM accounts")
    want_avg = sc.pg_avg(DB, [v[1] for v in m.accounts.values()])
    chk.eq("binary scatter avg(balance) equals PostgreSQL's avg over all rows", got_avg, want_avg)
    got = await conn.fetch("SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner ORDER BY owner")
    chk.eq("binary scatter GROUP BY owner ORDER BY owner", [tuple(r) for r in got], m.by_owner())

    # -- explicit prepared statement -------------------------------------------------------
    stmt = await conn.prepare("SELECT id, owner, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id")
    for keys in ([1, 2, 3], [17, 31, 40], [5]):
        got = await stmt.fetch(keys)
        chk.eq(f"conn.prepare() id = ANY($1) {keys}", rows3(got), [(k,) + m.accounts[k] for k in sorted(keys)])
    top = await conn.prepare("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT $1")
    chk.eq("conn.prepare() scatter ORDER BY ... LIMIT $1", rows3(await top.fetch(3)), m.top(3))
    chk.eq("prepared statement's result columns", [a.name for a in top.get_attributes()], ["id", "owner", "balance"])

    # -- executemany ----------------------------------------------------------------------
    ids0 = [i for i in range(41, 120) if shard_of[i] == 0][:6]
    tag = await conn.executemany("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)",
                                 [(i, "many0", Decimal(i)) for i in ids0])
    for i in ids0:
        m.accounts[i] = ("many0", Decimal(i))
    n = await conn.fetchval("SELECT count(*) FROM accounts WHERE owner = 'many0'")
    chk.eq("executemany of 6 INSERTs on one shard", n, len(ids0))
    both = list(range(120, 136))
    try:
        await conn.executemany("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)",
                               [(i, "many", Decimal(i) / 4) for i in both])
        for i in both:
            m.accounts[i] = ("many", Decimal(i) / 4)
        chk.ok(f"executemany of {len(both)} INSERTs with keys on both shards")
    except asyncpg.PostgresError as e:
        # asyncpg's executemany is atomic: one Sync for all rows = one implicit
        # transaction, which would write two shards.
        chk.eq("executemany with keys on both shards (one implicit transaction): SQLSTATE", e.sqlstate, "SPT01")
    n = await conn.fetchval("SELECT count(*) FROM accounts WHERE owner = 'many'")
    chk.true("executemany with keys on both shards: all rows or none", n in (0, len(both)), f"{n} rows")

    # -- copy_records_to_table: binary COPY split by key -----------------------------------
    recs = [(i, f"copy-{i}", Decimal(i) / 8) for i in range(200, 260)]
    tag = await conn.copy_records_to_table("accounts", records=recs, columns=["id", "owner", "balance"])
    chk.eq("copy_records_to_table (binary COPY) of 60 rows: tag", tag, "COPY 60")
    for i, o, b in recs:
        m.accounts[i] = (o, b)
    row = await conn.fetchrow("SELECT count(*), sum(balance) FROM accounts WHERE id >= 200 AND id < 260")
    chk.eq("COPYed rows readable through the proxy", tuple(row), (60, sum(b for _, _, b in recs)))
    recs2 = [(i, sc.kind_of(i)) for i in (990, 995, 1005, 3000)]
    tag = await conn.copy_records_to_table("events", records=recs2)
    chk.eq("copy_records_to_table into the range-sharded table without a column list", tag, "COPY 4")
    m.events.update(dict(recs2))

    # -- transactions ------------------------------------------------------------------
    s0 = sorted(i for i in m.accounts if shard_of[i] == 0)
    s1 = sorted(i for i in m.accounts if shard_of[i] == 1)
    new0 = [i for i in range(300, 400) if shard_of[i] == 0]
    new1 = [i for i in range(300, 400) if shard_of[i] == 1]
    a, b, d = s0[0], s0[1], s1[0]
    async with conn.transaction():
        await conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = $1", a)
        await conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = $1", b)
        await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", new0[0], "txn", Decimal(1))
        n = await conn.fetchval("SELECT count(*) FROM accounts")
        chk.eq("scatter read inside a transaction sees its own insert", n, len(m.accounts) + 1)
        chk.eq("read of the other shard inside the write transaction",
               await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", d), m.accounts[d][1])
    m.accounts[a] = (m.accounts[a][0], m.accounts[a][1] - 5)
    m.accounts[b] = (m.accounts[b][0], m.accounts[b][1] + 5)
    m.accounts[new0[0]] = ("txn", Decimal(1))
    got = await conn.fetch("SELECT id, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id",
                           [a, b, new0[0]])
    chk.eq("committed transaction is visible", [tuple(r) for r in got],
           sorted((i, m.accounts[i][1]) for i in (a, b, new0[0])))

    class Boom(Exception):
        pass

    try:
        async with conn.transaction():
            await conn.execute("UPDATE accounts SET balance = 0 WHERE id = $1", d)
            await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", new1[0], "gone",
                               Decimal(2))
            chk.eq("transaction reads its own uncommitted update",
                   await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", d), Decimal(0))
            raise Boom()
    except Boom:
        pass
    got = await conn.fetch("SELECT id, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id", [d, new1[0]])
    chk.eq("rolled-back transaction left nothing", [tuple(r) for r in got], [(d, m.accounts[d][1])])

    try:
        async with conn.transaction():
            await conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = $1", a)
            await conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = $1", d)
        chk.true("a write to a second shard in one transaction is refused", False, "committed")
    except asyncpg.PostgresError as e:
        chk.eq("a write to a second shard in one transaction: SQLSTATE", e.sqlstate, "SPT01")
    got = await conn.fetch("SELECT id, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id", [a, d])
    chk.eq("after SPT01 neither write is there", [tuple(r) for r in got],
           sorted([(a, m.accounts[a][1]), (d, m.accounts[d][1])]))

    # -- errors followed by good statements -----------------------------------------------
    try:
        await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", 1, "dup", Decimal(0))
        chk.true("duplicate key is an error", False)
    except asyncpg.UniqueViolationError as e:
        chk.eq("duplicate key: SQLSTATE", e.sqlstate, "23505")
    chk.eq("good statement after the error",
           await conn.fetchval("SELECT owner FROM accounts WHERE id = $1", 1), m.accounts[1][0])
    try:
        await conn.fetch("SELEC 1")
        chk.true("syntax error is an error", False)
    except asyncpg.PostgresSyntaxError as e:
        chk.eq("syntax error: SQLSTATE", e.sqlstate, "42601")
    chk.eq("good scatter statement after the syntax error",
           await conn.fetchval("SELECT count(*) FROM accounts"), len(m.accounts))
    tr = conn.transaction()
    await tr.start()
    try:
        await conn.fetchval("SELECT 1 / (balance - balance) FROM accounts WHERE id = $1", 2)
        chk.true("division by zero is an error", False)
    except asyncpg.DivisionByZeroError as e:
        chk.eq("error inside a transaction: SQLSTATE", e.sqlstate, "22012")
    try:
        await conn.fetchval("SELECT 2")
        chk.true("statement in an aborted transaction is refused", False)
    except asyncpg.InFailedSQLTransactionError as e:
        chk.eq("statement in the aborted transaction: SQLSTATE", e.sqlstate, "25P02")
    await tr.rollback()
    chk.eq("good statement after ROLLBACK of the failed transaction",
           await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", 2), m.accounts[2][1])

    # -- cancel through asyncpg's API --------------------------------------------------
    before = proxy.metric("splitpoint_errors_total", {"sqlstate": "57014"})
    t0 = time.monotonic()
    try:
        await conn.fetch("SELECT pg_sleep(30) FROM accounts WHERE id = $1", 1, timeout=1.0)
        chk.true("timeout=1.0 cancels SELECT pg_sleep(30)", False, "query finished")
    except asyncio.TimeoutError:
        elapsed = time.monotonic() - t0
        chk.true(f"fetch(timeout=1.0) raised TimeoutError after {elapsed:.1f}s (< 10s)", elapsed < 10)
    chk.eq("connection usable after the cancel (SELECT 1)", await conn.fetchval("SELECT 1"), 1)
    chk.eq("single-shard read after the cancel",
           await conn.fetchval("SELECT owner FROM accounts WHERE id = $1", 1), m.accounts[1][0])
    after = proxy.metric("splitpoint_errors_total", {"sqlstate": "57014"})
    chk.true("the query was cancelled with 57014 (splitpoint_errors_total{sqlstate=57014} grew)",
             after >= before + 1, f"{before} -> {after}")
    # The same through task cancellation.
    task = asyncio.ensure_future(conn.fetch("SELECT pg_sleep(30) FROM accounts WHERE id = $1", 2))
    await asyncio.sleep(1.0)
    t0 = time.monotonic()
    task.cancel()
    try:
        await task
        chk.true("task.cancel() cancels the query", False, "query finished")
    except asyncio.CancelledError:
        chk.true(f"task.cancel(): query ended {time.monotonic() - t0:.1f}s later", time.monotonic() - t0 < 10)
    chk.eq("connection usable after task.cancel()", await conn.fetchval("SELECT count(*) FROM events"),
           len(m.events))

    # -- final state ------------------------------------------------------------------------
    got = await conn.fetch("SELECT id, owner, balance FROM accounts ORDER BY id")
    chk.eq(f"final accounts through the proxy ({len(m.accounts)} rows)", rows3(got), m.all_accounts())
    got = await conn.fetch("SELECT id, kind FROM events ORDER BY id")
    chk.eq("final events through the proxy", [tuple(r) for r in got], sorted(m.events.items()))
    got = await conn.fetch("SELECT code, name FROM currencies ORDER BY code")
    chk.eq("final currencies through the proxy", [tuple(r) for r in got], sorted(m.currencies.items()))
    await conn.close()


def main():
    print(f"asyncpg {asyncpg.__version__} (Debian python3-asyncpg {clients.deb_version('python3-asyncpg')})")
    clients.create_dbs(DB)
    proxy = clients.Proxy("client_asyncpg", DB, WORK)
    chk = clients.Checker("asyncpg")
    rc = 0
    try:
        proxy.start()
        shard_of = clients.shard_of_accounts(DB, range(1, 400))
        t0 = time.monotonic()
        asyncio.run(asyncio.wait_for(scenario(chk, proxy, shard_of), 120))
        print(f"--- asyncpg scenario: {time.monotonic() - t0:.1f}s")
        problems = clients.verify_placement(DB)
        for p in problems:
            print(f"FAIL placement: {p}")
        if problems:
            rc = 1
        else:
            print("ok   placement: every row on the shard owning its key; reference tables identical")
        if not proxy.alive():
            print("FAIL: splitpoint died")
            rc = 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        print(f"splitpoint: {proxy.state()}; log tail:\n{proxy.log_tail()}")
        rc = 1
    finally:
        proxy.stop()
        clients.drop_dbs(DB)
    chk.summary()
    print("test_client_asyncpg: " + ("all passed" if rc == 0 else "FAILED"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
