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
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-asyncpg")

import asyncpg  # noqa: E402
import client_scenario as sc  # noqa: E402

DB = "drv_asyncpg_" + secrets.token_hex(4)
WORK = sptest.workdir("client_asyncpg")

# Checks that fail because of the PROXY (reported as KNOWN FAILURE, not fatal); see
# docs/compatibility.md. Keyed by the check's name, value: the diagnosis.
# (none at the moment: B1 and B2 were fixed in 50bcaec)
KNOWN = {}
CHK = clients.Checker("asyncpg", KNOWN)


def dsn(proxy, password="secret"):
    return f"postgresql://app:{password}@{sptest.HOST}:{proxy.port}/{DB}"



def asyncpg_scenario(proxy, shard_of):
    asyncio.run(asyncio.wait_for(scenario(CHK, proxy, shard_of), 120))


async def scenario(chk, proxy, shard_of):
    m = sc.Model()

    # -- connect and auth -------------------------------------------------------------
    conn = await asyncpg.connect(dsn(proxy), timeout=10)

    def fetch(sql, *args, conv=lambda r: [tuple(x) for x in r], **kw):
        async def run():
            return conv(await conn.fetch(sql, *args, **kw))
        return run

    def execute(sql, *args):
        async def run():
            return await conn.execute(sql, *args)
        return run

    await chk.aeq("connect with scram-sha-256: current_user, current_database",
                  fetch("SELECT current_user, current_database()"), [("app", DB)])
    chk.ok(f"server_version as asyncpg sees it: {conn.get_server_version()}")
    try:
        bad = await asyncpg.connect(dsn(proxy, "wrong"), timeout=10)
        await bad.close()
        chk.true("wrong password is refused", False, "connected")
    except asyncpg.InvalidPasswordError as e:
        chk.eq("wrong password: SQLSTATE", e.sqlstate, "28P01")

    # -- DDL (no arguments: asyncpg uses the simple protocol) -----------------------------
    for stmt in sc.SCHEMA:
        await conn.execute(stmt)
    chk.ok("DROP/CREATE TABLE accounts, events, currencies through the proxy")

    # -- reference table ------------------------------------------------------------------
    if await chk.aeq("multi-row INSERT into reference table (parameters): tag",
                     execute("INSERT INTO currencies (code, name) VALUES ($1, $2), ($3, $4), ($5, $6)",
                             *[x for pair in sc.CURRENCIES for x in pair]), "INSERT 0 3") is False:
        sc.fallback(chk, "currencies: one INSERT with literals per row (simple protocol)")
        for code, name in sc.CURRENCIES:
            await conn.execute(f"INSERT INTO currencies (code, name) VALUES ('{code}', '{name}')")
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
    if await chk.aeq(f"multi-row INSERT of {len(rest)} accounts on both shards (parameters): RETURNING ids",
                     fetch(f"INSERT INTO accounts (id, owner, balance) VALUES {values} RETURNING id", *params,
                           conv=lambda r: sorted(x[0] for x in r)), rest) is False:
        sc.fallback(chk, "accounts 11..40: single-row INSERTs")
        for i in rest:
            await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                               i, sc.owner_of(i), sc.balance_of(i))
    for i in rest:
        m.accounts[i] = (sc.owner_of(i), sc.balance_of(i))
    ev_values = ", ".join(f"(${2 * k + 1}, ${2 * k + 2})" for k in range(len(sc.EVENT_IDS)))
    if await chk.aeq("multi-row INSERT into range-sharded events (both ranges, parameters): tag",
                     execute(f"INSERT INTO events (id, kind) VALUES {ev_values}",
                             *[x for i in sc.EVENT_IDS for x in (i, sc.kind_of(i))]),
                     f"INSERT 0 {len(sc.EVENT_IDS)}") is False:
        sc.fallback(chk, "events: single-row INSERTs")
        for i in sc.EVENT_IDS:
            await conn.execute("INSERT INTO events (id, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING", i, sc.kind_of(i))
    m.events.update({i: sc.kind_of(i) for i in sc.EVENT_IDS})

    # -- statement cache: the same SELECT text with many keys -------------------------------
    for i in sc.ACCOUNT_IDS:
        row = await conn.fetchrow("SELECT owner, balance FROM accounts WHERE id = $1", i)
        if tuple(row) != m.accounts[i]:
            chk.eq(f"cached single-shard SELECT id={i}", tuple(row), m.accounts[i])
    chk.ok(f"cached single-shard SELECT executed {len(sc.ACCOUNT_IDS)} times with keys on both shards")
    await chk.aeq("single-shard UPDATE tag",
                  execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", Decimal("0.50"), 7), "UPDATE 1")
    m.accounts[7] = (m.accounts[7][0], m.accounts[7][1] + Decimal("0.50"))
    await chk.aeq("UPDATE visible", fetch("SELECT balance FROM accounts WHERE id = $1", 7), [(m.accounts[7][1],)])
    await chk.aeq("single-shard join with a reference table",
                  fetch("SELECT a.id, c.name FROM accounts a JOIN currencies c ON c.code = $1 WHERE a.id = $2",
                        "EUR", 3), [(3, "Euro")])
    await chk.aeq("range read across the bound (BETWEEN $1 AND $2)",
                  fetch("SELECT id, kind FROM events WHERE id BETWEEN $1 AND $2 ORDER BY id", 990, 1010),
                  [(i, sc.kind_of(i)) for i in sc.EVENT_IDS if 990 <= i <= 1010])

    # -- scatter reads, binary results ------------------------------------------------------
    await chk.aeq("binary scatter ORDER BY balance DESC, id LIMIT 5",
                  fetch("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 5"), m.top(5))
    await chk.aeq("binary scatter ORDER BY id LIMIT $1 OFFSET $2",
                  fetch("SELECT id, owner, balance FROM accounts ORDER BY id LIMIT $1 OFFSET $2", 5, 10),
                  m.by_id(5, 10))
    await chk.aeq("binary scatter count/sum/min/max",
                  fetch("SELECT count(*), sum(balance), min(balance), max(balance) FROM accounts"),
                  [m.aggregates()])
    want_avg = sc.pg_avg(DB, [v[1] for v in m.accounts.values()])
    await chk.aeq("binary scatter avg(balance) equals PostgreSQL's avg over all rows",
                  fetch("SELECT avg(balance) FROM accounts"), [(want_avg,)])
    await chk.aeq("binary scatter GROUP BY owner ORDER BY owner",
                  fetch("SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner ORDER BY owner"),
                  m.by_owner())
    await chk.aeq("multi-shard read by key list (id = ANY($1))",
                  fetch("SELECT id, owner, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id",
                        [1, 2, 3, 17, 31]), [(k,) + m.accounts[k] for k in (1, 2, 3, 17, 31)])

    # -- explicit prepared statement -------------------------------------------------------
    stmt = await conn.prepare("SELECT id, owner, balance FROM accounts WHERE id = ANY($1::bigint[]) ORDER BY id")
    for keys in ([1, 2, 3], [17, 31, 40], [5]):
        await chk.aeq(f"conn.prepare() id = ANY($1) {keys}", lambda: stmt.fetch(keys),
                      [(k,) + m.accounts[k] for k in sorted(keys)])
    top = await conn.prepare("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT $1")
    chk.eq("prepared statement's result columns", [a.name for a in top.get_attributes()], ["id", "owner", "balance"])

    async def top3():
        return [tuple(r) for r in await top.fetch(3)]
    await chk.aeq("conn.prepare() scatter ORDER BY ... LIMIT $1", top3, m.top(3))

    # -- executemany ----------------------------------------------------------------------
    ids0 = [i for i in range(41, 120) if shard_of[i] == 0][:6]

    async def many_one_shard():
        await asyncio.wait_for(conn.executemany("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)",
                                                [(i, "many0", Decimal(i)) for i in ids0]), 20)
        return [i for i in ids0 if await conn.fetchval("SELECT owner FROM accounts WHERE id = $1", i) == "many0"]
    await chk.aeq("executemany of 6 INSERTs on one shard", many_one_shard, ids0)
    for i in ids0:
        if await conn.fetchval("SELECT 1 FROM accounts WHERE id = $1", i):
            m.accounts[i] = ("many0", Decimal(i))
    both = list(range(120, 136))
    status, detail = await bounded(conn.executemany("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)",
                                                    [(i, "many", Decimal(i) / 4) for i in both]), 20)
    # asyncpg's executemany is atomic (one Sync: one implicit transaction), which would
    # write two shards: SPT01 (SPEC section 5); applying it whole is acceptable too.
    chk.true("executemany with keys on both shards (one Sync): applied whole or refused with SPT01",
             status == "ok" or detail.startswith("SPT01:"), f"{status}: {detail}")
    if status == "timeout" or conn.is_closed():
        sc.fallback(chk, "executemany left the connection unusable: new connection")
        conn.terminate()
        conn = await asyncpg.connect(dsn(proxy), timeout=10)
    present = [i for i in both if await conn.fetchval("SELECT 1 FROM accounts WHERE id = $1", i)]
    chk.true("executemany with keys on both shards: all rows or none",
             len(present) in (0, len(both)), f"{len(present)} of {len(both)} present: {present}")
    for i in present:
        m.accounts[i] = ("many", Decimal(i) / 4)

    # -- copy_records_to_table: binary COPY split by key -----------------------------------
    recs = [(i, f"copy-{i}", Decimal(i) / 8) for i in range(200, 260)]
    if await chk.aeq("copy_records_to_table (binary COPY) of 60 rows: tag",
                     lambda: conn.copy_records_to_table("accounts", records=recs, columns=["id", "owner", "balance"]),
                     "COPY 60") is False:
        sc.fallback(chk, "accounts 200..259: single-row INSERTs")
        for i, o, b in recs:
            await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                               i, o, b)
    for i, o, b in recs:
        m.accounts[i] = (o, b)
    await chk.aeq("COPYed rows readable through the proxy",
                  fetch("SELECT count(*), sum(balance) FROM accounts WHERE id >= $1 AND id < $2", 200, 260),
                  [(60, sum(b for _, _, b in recs))])
    recs2 = [(i, sc.kind_of(i)) for i in (990, 995, 1005, 3000)]
    if await chk.aeq("copy_records_to_table into the range-sharded table without a column list",
                     lambda: conn.copy_records_to_table("events", records=recs2), "COPY 4") is False:
        sc.fallback(chk, "events: single-row INSERTs")
        for i, k in recs2:
            await conn.execute("INSERT INTO events (id, kind) VALUES ($1, $2) ON CONFLICT DO NOTHING", i, k)
    m.events.update(dict(recs2))

    # -- transactions ------------------------------------------------------------------
    s0 = sorted(i for i in m.accounts if shard_of[i] == 0)
    s1 = sorted(i for i in m.accounts if shard_of[i] == 1)
    new0 = [i for i in range(300, 400) if shard_of[i] == 0]
    new1 = [i for i in range(300, 400) if shard_of[i] == 1]
    a, b, d = s0[0], s0[1], s1[0]

    def balances(ids):
        """Balances of ids, one single-shard read each."""
        async def run():
            out = []
            for i in sorted(ids):
                out += [tuple(r) for r in await conn.fetch("SELECT id, balance FROM accounts WHERE id = $1", i)]
            return out
        return run

    async with conn.transaction():
        await conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = $1", a)
        await conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = $1", b)
        await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", new0[0], "txn", Decimal(1))
        await chk.aeq("read of the other shard inside the write transaction",
                      fetch("SELECT balance FROM accounts WHERE id = $1", d), [(m.accounts[d][1],)])
    m.accounts[a] = (m.accounts[a][0], m.accounts[a][1] - 5)
    m.accounts[b] = (m.accounts[b][0], m.accounts[b][1] + 5)
    m.accounts[new0[0]] = ("txn", Decimal(1))
    await chk.aeq("committed transaction (2 updates + 1 insert on one shard) is visible", balances((a, b, new0[0])),
                  sorted((i, m.accounts[i][1]) for i in (a, b, new0[0])))

    class Boom(Exception):
        pass

    # Rolled back at the end whatever happens inside, so a failed check in it cannot
    # change what the later checks see.
    try:
        async with conn.transaction():
            await conn.execute("UPDATE accounts SET balance = 0 WHERE id = $1", d)
            await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", new1[0], "gone",
                               Decimal(2))
            await chk.aeq("transaction reads its own uncommitted update",
                          fetch("SELECT balance FROM accounts WHERE id = $1", d), [(Decimal(0),)])
            await chk.aeq("scatter read inside a transaction sees its own insert",
                          fetch("SELECT count(*) FROM accounts"), [(len(m.accounts) + 1,)])
            raise Boom()
    except Boom:
        pass
    await chk.aeq("rolled-back transaction left nothing", balances((d, new1[0])), [(d, m.accounts[d][1])])

    try:
        async with conn.transaction():
            await conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = $1", a)
            await conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = $1", d)
        chk.true("a write to a second shard in one transaction is refused", False, "committed")
    except asyncpg.PostgresError as e:
        chk.eq("a write to a second shard in one transaction: SQLSTATE", e.sqlstate, "SPT01")
    await chk.aeq("after SPT01 neither write is there", balances((a, d)),
                  sorted([(a, m.accounts[a][1]), (d, m.accounts[d][1])]))

    # -- errors followed by good statements -----------------------------------------------
    try:
        await conn.execute("INSERT INTO accounts (id, owner, balance) VALUES ($1, $2, $3)", 1, "dup", Decimal(0))
        chk.true("duplicate key is an error", False)
    except asyncpg.UniqueViolationError as e:
        chk.eq("duplicate key: SQLSTATE", e.sqlstate, "23505")
    await chk.aeq("good statement after the error", fetch("SELECT owner FROM accounts WHERE id = $1", 1),
                  [(m.accounts[1][0],)])
    try:
        await conn.fetch("SELEC 1")
        chk.true("syntax error is an error", False)
    except asyncpg.PostgresSyntaxError as e:
        chk.eq("syntax error: SQLSTATE", e.sqlstate, "42601")
    await chk.aeq("good scatter statement after the syntax error (extended protocol)",
                  fetch("SELECT count(*) FROM accounts"), [(len(m.accounts),)])
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
    await chk.aeq("good statement after ROLLBACK of the failed transaction",
                  fetch("SELECT balance FROM accounts WHERE id = $1", 2), [(m.accounts[2][1],)])

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
    chk.eq("connection usable after task.cancel()",
           await conn.fetchval("SELECT owner FROM accounts WHERE id = $1", 2), m.accounts[2][0])

    # -- final state ------------------------------------------------------------------------
    await chk.aeq("final accounts through the proxy",
                  fetch("SELECT id, owner, balance FROM accounts ORDER BY id"), m.all_accounts())
    await chk.aeq("final events through the proxy", fetch("SELECT id, kind FROM events ORDER BY id"),
                  sorted(m.events.items()))
    await chk.aeq("final currencies through the proxy", fetch("SELECT code, name FROM currencies ORDER BY code"),
                  sorted(m.currencies.items()))
    await conn.close()


async def bounded(coro, seconds):
    """("ok", ""), ("error", "SQLSTATE: message") or ("timeout", ...) for `coro`."""
    try:
        await asyncio.wait_for(coro, seconds)
        return "ok", ""
    except asyncio.TimeoutError:
        return "timeout", f"no answer within {seconds}s"
    except asyncpg.PostgresError as e:
        return "error", f"{e.sqlstate}: {str(e).splitlines()[0]}"


def main():
    print(f"asyncpg {asyncpg.__version__} (Debian python3-asyncpg {clients.deb_version('python3-asyncpg')})")
    return clients.run_client_test("client_asyncpg", DB, WORK, [asyncpg_scenario], [CHK], range(1, 400))


if __name__ == "__main__":
    sys.exit(main())
