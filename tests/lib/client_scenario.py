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
    Every statement runs inside a check (chk.eq / chk.do with a callable), so a check
    the proxy is known to fail (chk.known_map) is reported and the scenario goes on;
    where a failed write would leave the data short, the rows are written again one
    by one (single-shard statements) and that fallback is printed.
    Returns (conn, model) for driver-specific extras."""
    errors = drv.errors
    m = Model()

    # -- connect and auth (scram-sha-256) -----------------------------------------
    t0 = time.monotonic()
    conn = connect()
    cur = conn.cursor()

    def q(sql, params=None):
        cur.execute(sql, params)
        return cur.fetchall()

    def x(sql, params=None):
        cur.execute(sql, params)
        return cur.rowcount

    def dec_rows(rows):
        return [tuple(Decimal(v) if isinstance(v, (Decimal, float)) else v for v in r) for r in rows]

    chk.eq("connect with scram-sha-256: current_user, current_database",
           lambda: q("SELECT current_user, current_database()"), [("app", db)])
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
    what = "multi-row INSERT into reference table (parameters): rowcount"
    if chk.eq(what, lambda: x("INSERT INTO currencies (code, name) VALUES (%s, %s), (%s, %s), (%s, %s)",
                              [v for pair in CURRENCIES for v in pair]), 3) is False:
        fallback(chk, "currencies: one INSERT with literals per row (simple protocol)")
        for code, name in CURRENCIES:
            cur.execute(f"INSERT INTO currencies (code, name) VALUES ('{code}', '{name}')")
    m.currencies.update(CURRENCIES)

    # -- single-shard writes with parameters -----------------------------------------
    for i in ACCOUNT_IDS[:10]:
        n = x("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (i, owner_of(i), balance_of(i)))
        if n != 1:
            chk.eq(f"INSERT id={i} rowcount", n, 1)
        m.accounts[i] = (owner_of(i), balance_of(i))
    chk.ok("10 single-row parameterized INSERTs into accounts (rowcount 1 each)")

    # -- multi-row insert spanning both shards, with RETURNING ----------------------
    rest = ACCOUNT_IDS[10:]
    values = ", ".join(["(%s, %s, %s)"] * len(rest))
    params = [v for i in rest for v in (i, owner_of(i), balance_of(i))]
    what = f"multi-row INSERT of {len(rest)} accounts on both shards (parameters): RETURNING ids"
    if chk.eq(what, lambda: sorted(r[0] for r in q(f"INSERT INTO accounts (id, owner, balance) VALUES {values} "
                                                   f"RETURNING id", params)), rest) is False:
        fallback(chk, "accounts 11..40: single-row INSERTs")
        for i in rest:
            cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                        (i, owner_of(i), balance_of(i)))
    else:
        chk.eq("multi-row INSERT rowcount", cur.rowcount, len(rest))
    for i in rest:
        m.accounts[i] = (owner_of(i), balance_of(i))
    ev_values = ", ".join(["(%s, %s)"] * len(EVENT_IDS))
    what = "multi-row INSERT into range-sharded events (both ranges, parameters): rowcount"
    if chk.eq(what, lambda: x(f"INSERT INTO events (id, kind) VALUES {ev_values}",
                              [v for i in EVENT_IDS for v in (i, kind_of(i))]), len(EVENT_IDS)) is False:
        fallback(chk, "events: single-row INSERTs")
        for i in EVENT_IDS:
            cur.execute("INSERT INTO events (id, kind) VALUES (%s, %s) ON CONFLICT DO NOTHING", (i, kind_of(i)))
    m.events.update({i: kind_of(i) for i in EVENT_IDS})

    # -- single-shard reads and an update with parameters -------------------------
    for i in (1, 7, 23, 40):
        chk.eq(f"single-shard SELECT id={i}", lambda: dec_rows(q("SELECT owner, balance FROM accounts WHERE id = %s",
                                                                  (i,))), [m.accounts[i]])
    chk.eq("single-shard UPDATE rowcount",
           lambda: x("UPDATE accounts SET balance = balance + %s WHERE id = %s", (Decimal("0.50"), 7)), 1)
    m.accounts[7] = (m.accounts[7][0], m.accounts[7][1] + Decimal("0.50"))
    chk.eq("UPDATE visible", lambda: dec_rows(q("SELECT balance FROM accounts WHERE id = %s", (7,))),
           [(m.accounts[7][1],)])
    chk.eq("single-shard join with a reference table",
           lambda: q("SELECT a.id, c.name FROM accounts a JOIN currencies c ON c.code = %s WHERE a.id = %s",
                     ("EUR", 3)), [(3, "Euro")])
    chk.eq("range read across the bound (BETWEEN 990 AND 1010, parameters)",
           lambda: q("SELECT id, kind FROM events WHERE id BETWEEN %s AND %s ORDER BY id", (990, 1010)),
           [(i, kind_of(i)) for i in EVENT_IDS if 990 <= i <= 1010])

    # -- scatter reads: ORDER BY / LIMIT / OFFSET, aggregates, GROUP BY -------------
    chk.eq("scatter ORDER BY balance DESC, id LIMIT 5",
           lambda: rows3(q("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 5")), m.top(5))
    chk.eq("scatter ORDER BY id LIMIT 5 OFFSET 10 (parameters)",
           lambda: rows3(q("SELECT id, owner, balance FROM accounts ORDER BY id LIMIT %s OFFSET %s", (5, 10))),
           m.by_id(5, 10))
    chk.eq("scatter count/sum/min/max",
           lambda: dec_rows(q("SELECT count(*), sum(balance), min(balance), max(balance) FROM accounts")),
           [m.aggregates()])
    want_avg = pg_avg(db, [v[1] for v in m.accounts.values()])
    chk.eq("scatter avg(balance) equals PostgreSQL's avg over all rows",
           lambda: dec_rows(q("SELECT avg(balance) FROM accounts")), [(want_avg,)])
    chk.eq("scatter GROUP BY owner ORDER BY owner",
           lambda: dec_rows(q("SELECT owner, count(*), sum(balance) FROM accounts GROUP BY owner ORDER BY owner")),
           m.by_owner())
    want = sorted({k: sum(1 for v in m.events.values() if v == k) for k in set(m.events.values())}.items())
    chk.eq("scatter GROUP BY on the range-sharded table",
           lambda: q("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind"), want)
    chk.eq("multi-shard read by key list (id IN (1, 2, 3, 17, 31) with parameters)",
           lambda: rows3(q("SELECT id, owner, balance FROM accounts WHERE id IN (%s, %s, %s, %s, %s) ORDER BY id",
                           (1, 2, 3, 17, 31))), [(k,) + m.accounts[k] for k in (1, 2, 3, 17, 31)])

    # -- transactions ------------------------------------------------------------------
    s0 = [i for i in ACCOUNT_IDS if shard_of[i] == 0]
    s1 = [i for i in ACCOUNT_IDS if shard_of[i] == 1]
    new0 = [i for i in range(41, 80) if shard_of[i] == 0]
    new1 = [i for i in range(41, 80) if shard_of[i] == 1]
    a, b, d = s0[0], s0[1], s1[0]

    def ids_balances(ids):
        """Balances of `ids`, read one key at a time (single-shard statements)."""
        out = []
        for i in sorted(ids):
            r = dec_rows(q("SELECT id, balance FROM accounts WHERE id = %s", (i,)))
            out.extend(r)
        return out

    conn.autocommit = False
    cur.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", (a,))
    cur.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (b,))
    cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (new0[0], "txn", Decimal(1)))
    chk.eq("read of the other shard inside the write transaction",
           lambda: dec_rows(q("SELECT balance FROM accounts WHERE id = %s", (d,))), [(m.accounts[d][1],)])
    conn.commit()
    m.accounts[a] = (m.accounts[a][0], m.accounts[a][1] - 5)
    m.accounts[b] = (m.accounts[b][0], m.accounts[b][1] + 5)
    m.accounts[new0[0]] = ("txn", Decimal(1))
    conn.autocommit = True
    chk.eq("committed transaction (2 updates + 1 insert on one shard) is visible",
           lambda: ids_balances((a, b, new0[0])), sorted((i, m.accounts[i][1]) for i in (a, b, new0[0])))

    # Rolled back at the end whatever happens inside, so a failed check in it cannot
    # change what the later checks see.
    conn.autocommit = False
    cur.execute("UPDATE accounts SET balance = 0 WHERE id = %s", (d,))
    cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (new1[0], "gone", Decimal(2)))
    chk.eq("transaction reads its own uncommitted update",
           lambda: dec_rows(q("SELECT balance FROM accounts WHERE id = %s", (d,))), [(Decimal(0),)])
    chk.eq("scatter read inside a transaction sees its own insert", lambda: q("SELECT count(*) FROM accounts"),
           [(len(m.accounts) + 1,)])
    chk.eq("scatter read with a parameter inside a transaction",
           lambda: q("SELECT count(*) FROM accounts WHERE balance >= %s", (Decimal(0),)), [(len(m.accounts) + 1,)])
    conn.rollback()
    conn.autocommit = True
    chk.eq("rolled-back transaction left nothing", lambda: ids_balances((d, new1[0])), [(d, m.accounts[d][1])])

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
    chk.eq("after SPT01 and ROLLBACK neither write is there", lambda: ids_balances((a, d)),
           sorted([(a, m.accounts[a][1]), (d, m.accounts[d][1])]))

    # -- an error, then a good statement on the same connection ----------------------
    try:
        cur.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (1, "dup", Decimal(0)))
        chk.true("duplicate key is an error", False)
    except errors.UniqueViolation as e:
        chk.eq("duplicate key: SQLSTATE", sqlstate(e), "23505")
    chk.eq("good statement after the error", lambda: q("SELECT owner FROM accounts WHERE id = %s", (1,)),
           [(m.accounts[1][0],)])
    try:
        cur.execute("SELEC 1")
        chk.true("syntax error is an error", False)
    except errors.SyntaxError as e:
        chk.eq("syntax error: SQLSTATE", sqlstate(e), "42601")
    chk.eq("good scatter statement after the syntax error", lambda: q("SELECT count(*) FROM accounts"),
           [(len(m.accounts),)])
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
    chk.eq("good statement after ROLLBACK of the failed transaction",
           lambda: dec_rows(q("SELECT balance FROM accounts WHERE id = %s", (2,))), [(m.accounts[2][1],)])

    # -- cancel a long single-shard query through the driver's cancel API -------------
    check_cancel(chk, drv, conn, cur, m, proxy)

    return conn, m


def fallback(chk, what):
    print(f"     {chk.client}: fallback so the scenario can go on: {what}", flush=True)


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
    def q(sql):
        cur.execute(sql)
        return cur.fetchall()
    chk.eq("final accounts through the proxy",
           lambda: rows3(q("SELECT id, owner, balance FROM accounts ORDER BY id")), m.all_accounts())
    chk.eq("final events through the proxy", lambda: q("SELECT id, kind FROM events ORDER BY id"),
           sorted(m.events.items()))
    chk.eq("final currencies through the proxy", lambda: q("SELECT code, name FROM currencies ORDER BY code"),
           sorted(m.currencies.items()))
