"""The scenario every Python DB-API driver runs against splitpoint (psycopg2, psycopg 3).

Data model and expected answers are computed here, in the test, never read back from
the proxy: accounts 1..40 (hash sharded), events on both sides of the range bound,
three currencies (reference table).
"""

import threading
import time
from decimal import Decimal

import clients

ACCOUNT_IDS = list(range(1, 41))
EVENT_IDS = [5, 10, 500, 999, 1000, 1001, 1500, 5000]
CURRENCIES = [("EUR", "Euro"), ("USD", "US Dollar"), ("JPY", "Yen")]

SCHEMA = [
    "DROP TABLE IF EXISTS accounts, events, currencies",
    "CREATE TABLE accounts (id bigint PRIMARY KEY, owner text, balance numeric)",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text)",
    "CREATE TABLE currencies (code text PRIMARY KEY, name text)",
]


def owner_of(i):
    return f"owner-{i % 5}"


def balance_of(i):
    return Decimal(i * 37 % 101) + Decimal(i) / 100


def kind_of(i):
    return "open" if i % 2 else "close"


class Model:
    def __init__(self):
        self.accounts = {}   # id -> (owner, balance)
        self.events = {}     # id -> kind
        self.currencies = {}

    def top(self, n, offset=0):
        rows = sorted(self.accounts.items(), key=lambda kv: (-kv[1][1], kv[0]))
        return [(k, o, b) for k, (o, b) in rows[offset:offset + n]]

    def by_id(self, n, offset=0):
        rows = sorted(self.accounts.items())
        return [(k, o, b) for k, (o, b) in rows[offset:offset + n]]

    def aggregates(self):
        b = [v[1] for v in self.accounts.values()]
        return len(b), sum(b), min(b), max(b)

    def by_owner(self):
        out = {}
        for o, b in self.accounts.values():
            c, s = out.get(o, (0, Decimal(0)))
            out[o] = (c + 1, s + b)
        return [(o, c, s) for o, (c, s) in sorted(out.items())]

    def all_accounts(self):
        return [(k, o, b) for k, (o, b) in sorted(self.accounts.items())]


def pg_avg(db, values):
    """avg() of `values` as one PostgreSQL holding all rows computes it (direct to shard 0)."""
    c = clients.shard_conn(0, db)
    cur = c.cursor()
    cur.execute("SELECT avg(x)::text FROM unnest(%s::numeric[]) x", ([str(v) for v in values],))
    out = cur.fetchone()[0]
    c.close()
    return Decimal(out)


def sqlstate(e):
    return getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)


def rows3(rows):
    return [(int(r[0]), r[1], Decimal(r[2])) for r in rows]


def run_dbapi(chk, drv, connect, db, shard_of, proxy, tag):
    """The common part for a DB-API driver module `drv` (psycopg2 or psycopg).

    connect() -> a new autocommit connection through the proxy. shard_of: {id: 0|1}.
    Returns (conn, model) for driver-specific extras."""
    errors = drv.errors
    m = Model()

    # -- connect and auth (scram-sha-256) -----------------------------------------
    t0 = time.monotonic()
    conn = connect()
    cur = conn.cursor()
    cur.execute("SELECT current_user, current_database()")
    chk.eq("connect with scram-sha-256: current_user, current_database", cur.fetchone(), ("app", db))
    chk.ok(f"connected in {1000 * (time.monotonic() - t0):.0f} ms")
    try:
        bad = connect(password="wrong")
        bad.close()
        chk.true("wrong password is refused", False, "connected with a wrong password")
    except drv.OperationalError as e:
        chk.true("wrong password is refused (password authentication failed)",
                 "password authentication failed" in str(e), str(e))

    # -- DDL through the proxy (every shard) ----------------------------------------
    for stmt in SCHEMA:
        cur.execute(stmt)
    chk.ok("DROP/CREATE TABLE accounts, events, currencies through the proxy")

    # -- reference table: one multi-row insert, written on every shard ---------------
    cur.execute("INSERT INTO currencies (code, name) VALUES (%s, %s), (%s, %s), (%s, %s)",
                [x for pair in CURRENCIES for x in pair])
    chk.eq("multi-row INSERT into reference table: rowcount", cur.rowcount, 3)
    m.currencies.update(CURRENCIES)

    # -- single-shard writes with parameters -----------------------------------------
    for i in ACCOUNT_IDS[:10]:
        cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (i, owner_of(i), balance_of(i)))
        if cur.rowcount != 1:
            chk.eq(f"INSERT id={i} rowcount", cur.rowcount, 1)
        m.accounts[i] = (owner_of(i), balance_of(i))
    chk.ok("10 single-row parameterized INSERTs into accounts (rowcount 1 each)")

    # -- multi-row insert spanning both shards, with RETURNING ----------------------
    rest = ACCOUNT_IDS[10:]
    values = ", ".join(["(%s, %s, %s)"] * len(rest))
    params = [x for i in rest for x in (i, owner_of(i), balance_of(i))]
    cur.execute(f"INSERT INTO accounts (id, owner, balance) VALUES {values} RETURNING id", params)
    returned = sorted(r[0] for r in cur.fetchall())
    chk.eq(f"multi-row INSERT of {len(rest)} accounts on both shards: RETURNING ids", returned, rest)
    chk.eq("multi-row INSERT rowcount", cur.rowcount, len(rest))
    for i in rest:
        m.accounts[i] = (owner_of(i), balance_of(i))
    ev_values = ", ".join(["(%s, %s)"] * len(EVENT_IDS))
    cur.execute(f"INSERT INTO events (id, kind) VALUES {ev_values}", [x for i in EVENT_IDS for x in (i, kind_of(i))])
    chk.eq("multi-row INSERT into range-sharded events (both ranges): rowcount", cur.rowcount, len(EVENT_IDS))
    m.events.update({i: kind_of(i) for i in EVENT_IDS})

    # -- single-shard reads and an update with parameters -------------------------
    for i in (1, 7, 23, 40):
        cur.execute("SELECT owner, balance FROM accounts WHERE id = %s", (i,))
        got = cur.fetchall()
        chk.eq(f"single-shard SELECT id={i}", [(o, Decimal(b)) for o, b in got], [m.accounts[i]])
    cur.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (Decimal("0.50"), 7))
    chk.eq("single-shard UPDATE rowcount", cur.rowcount, 1)
    m.accounts[7] = (m.accounts[7][0], m.accounts[7][1] + Decimal("0.50"))
    cur.execute("SELECT balance FROM accounts WHERE id = %s", (7,))
    chk.eq("UPDATE visible", Decimal(cur.fetchone()[0]), m.accounts[7][1])
    cur.execute("SELECT a.id, c.name FROM accounts a JOIN currencies c ON c.code = %s WHERE a.id = %s", ("EUR", 3))
    chk.eq("single-shard join with a reference table", cur.fetchall(), [(3, "Euro")])
    cur.execute("SELECT id, kind FROM events WHERE id BETWEEN %s AND %s ORDER BY id", (990, 1010))
    chk.eq("range read across the bound (BETWEEN 990 AND 1010)", cur.fetchall(),
           [(i, kind_of(i)) for i in EVENT_IDS if 990 <= i <= 1010])

    # -- scatter reads: ORDER BY / LIMIT / OFFSET, aggregates, GROUP BY -------------
    cur.execute("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 5")
    chk.eq("scatter ORDER BY balance DESC, id LIMIT 5", rows3(cur.fetchall()), m.top(5))
    cur.execute("SELECT id, owner, balance FROM accounts ORDER BY id LIMIT %s OFFSET %s", (5, 10))
    chk.eq("scatter ORDER BY id LIMIT 5 OFFSET 10 (parameters)", rows3(cur.fetchall()), m.by_id(5, 10))
    cur.execute("SELECT count(*), sum(balance), min(balance), max(balance) FROM accounts")
    c, s, lo, hi = cur.fetchone()
    chk.eq("scatter count/sum/min/max", (c, Decimal(s), Decimal(lo), Decimal(hi)), m.aggregates())
    cur.execute("SELECT avg(balance) FROM accounts")
    got_avg = Decimal(cur.fetchone()[0])
    want_avg = pg_avg(db, [v[1] for v in m.accounts.values()])
    chk.eq("scatter avg(balance) equals PostgreSQL's avg over all rows", got_avg, want_avg)
    cur.execute("SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner ORDER BY owner")
    chk.eq("scatter GROUP BY owner ORDER BY owner", [(o, n, Decimal(x)) for o, n, x in cur.fetchall()], m.by_owner())
    cur.execute("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind")
    want = sorted({k: sum(1 for v in m.events.values() if v == k) for k in set(m.events.values())}.items())
    chk.eq("scatter GROUP BY on the range-sharded table", cur.fetchall(), want)

    # -- transactions ------------------------------------------------------------------
    s0 = [i for i in ACCOUNT_IDS if shard_of[i] == 0]
    s1 = [i for i in ACCOUNT_IDS if shard_of[i] == 1]
    new0 = [i for i in range(41, 80) if shard_of[i] == 0]
    new1 = [i for i in range(41, 80) if shard_of[i] == 1]
    a, b, d = s0[0], s0[1], s1[0]
    conn.autocommit = False
    cur.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", (a,))
    cur.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (b,))
    cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (new0[0], "txn", Decimal(1)))
    cur.execute("SELECT count(*) FROM accounts")  # a read of every shard inside the transaction
    chk.eq("scatter read inside a transaction sees its own insert", cur.fetchone()[0], len(m.accounts) + 1)
    cur.execute("SELECT balance FROM accounts WHERE id = %s", (d,))  # a read on the other shard
    chk.eq("read of the other shard inside the write transaction", Decimal(cur.fetchone()[0]), m.accounts[d][1])
    conn.commit()
    m.accounts[a] = (m.accounts[a][0], m.accounts[a][1] - 5)
    m.accounts[b] = (m.accounts[b][0], m.accounts[b][1] + 5)
    m.accounts[new0[0]] = ("txn", Decimal(1))
    conn.autocommit = True
    cur.execute("SELECT id, balance FROM accounts WHERE id IN (%s, %s, %s) ORDER BY id", (a, b, new0[0]))
    chk.eq("committed transaction (2 updates + 1 insert on one shard) is visible",
           [(i, Decimal(x)) for i, x in cur.fetchall()], sorted((i, m.accounts[i][1]) for i in (a, b, new0[0])))

    conn.autocommit = False
    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (d,))
    cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (new1[0], "gone", Decimal(2)))
    cur.execute("SELECT balance FROM accounts WHERE id = %s", (d,))
    chk.eq("transaction reads its own uncommitted update", Decimal(cur.fetchone()[0]), Decimal(0))
    conn.rollback()
    conn.autocommit = True
    cur.execute("SELECT id, balance FROM accounts WHERE id IN (%s, %s) ORDER BY id", (d, new1[0]))
    chk.eq("rolled-back transaction left nothing", [(i, Decimal(x)) for i, x in cur.fetchall()],
           [(d, m.accounts[d][1])])

    # A second written shard in one transaction: SPT01, the transaction is aborted.
    conn.autocommit = False
    cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (a,))
    try:
        cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (d,))
        chk.true("a write to a second shard in one transaction is refused", False, "accepted")
    except drv.Error as e:
        chk.eq("a write to a second shard in one transaction: SQLSTATE", sqlstate(e), "SPT01")
    conn.rollback()
    conn.autocommit = True
    cur.execute("SELECT id, balance FROM accounts WHERE id IN (%s, %s) ORDER BY id", (a, d))
    chk.eq("after SPT01 and ROLLBACK neither write is there", [(i, Decimal(x)) for i, x in cur.fetchall()],
           sorted([(a, m.accounts[a][1]), (d, m.accounts[d][1])]))

    # -- an error, then a good statement on the same connection ----------------------
    try:
        cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (1, "dup", Decimal(0)))
        chk.true("duplicate key is an error", False)
    except errors.UniqueViolation as e:
        chk.eq("duplicate key: SQLSTATE", sqlstate(e), "23505")
    cur.execute("SELECT owner FROM accounts WHERE id = %s", (1,))
    chk.eq("good statement after the error", cur.fetchone()[0], m.accounts[1][0])
    try:
        cur.execute("SELEC 1")
        chk.true("syntax error is an error", False)
    except errors.SyntaxError as e:
        chk.eq("syntax error: SQLSTATE", sqlstate(e), "42601")
    cur.execute("SELECT count(*) FROM accounts")
    chk.eq("good scatter statement after the syntax error", cur.fetchone()[0], len(m.accounts))
    conn.autocommit = False
    try:
        cur.execute("SELECT 1 / (balance - balance) FROM accounts WHERE id = %s", (2,))
        chk.true("division by zero is an error", False)
    except errors.DivisionByZero as e:
        chk.eq("error inside a transaction: SQLSTATE", sqlstate(e), "22012")
    try:
        cur.execute("SELECT 1")
        chk.true("statement in an aborted transaction is refused", False)
    except errors.InFailedSqlTransaction as e:
        chk.eq("statement in the aborted transaction: SQLSTATE", sqlstate(e), "25P02")
    conn.rollback()
    conn.autocommit = True
    cur.execute("SELECT balance FROM accounts WHERE id = %s", (2,))
    chk.eq("good statement after ROLLBACK of the failed transaction", Decimal(cur.fetchone()[0]), m.accounts[2][1])

    # -- cancel a long single-shard query through the driver's cancel API -------------
    check_cancel(chk, drv, conn, cur, m, proxy)

    return conn, m


def check_cancel(chk, drv, conn, cur, m, proxy, label="conn.cancel()"):
    before = proxy.metric("splitpoint_errors_total", {"sqlstate": "57014"})
    timer = threading.Timer(1.0, conn.cancel)
    t0 = time.monotonic()
    timer.start()
    try:
        cur.execute("SELECT pg_sleep(30) FROM accounts WHERE id = %s", (1,))
        chk.true(f"{label} cancels SELECT pg_sleep(30)", False, "query finished")
    except drv.errors.QueryCanceled as e:
        elapsed = time.monotonic() - t0
        chk.eq(f"{label}: SQLSTATE", sqlstate(e), "57014")
        chk.true(f"{label}: cancelled after {elapsed:.1f}s (< 10s)", elapsed < 10)
    finally:
        timer.cancel()
    cur.execute("SELECT 1")
    chk.eq("connection usable after the cancel (SELECT 1)", cur.fetchone()[0], 1)
    cur.execute("SELECT owner FROM accounts WHERE id = %s", (1,))
    chk.eq("single-shard read after the cancel", cur.fetchone()[0], m.accounts[1][0])
    after = proxy.metric("splitpoint_errors_total", {"sqlstate": "57014"})
    chk.true("proxy counted the 57014 it sent (splitpoint_errors_total)", after >= before + 1, f"{before} -> {after}")


def final_state(chk, cur, m):
    cur.execute("SELECT id, owner, balance FROM accounts ORDER BY id")
    chk.eq(f"final accounts through the proxy ({len(m.accounts)} rows)", rows3(cur.fetchall()), m.all_accounts())
    cur.execute("SELECT id, kind FROM events ORDER BY id")
    chk.eq("final events through the proxy", cur.fetchall(), sorted(m.events.items()))
    cur.execute("SELECT code, name FROM currencies ORDER BY code")
    chk.eq("final currencies through the proxy", cur.fetchall(), sorted(m.currencies.items()))
