#!/usr/bin/env python3
"""Real clients, unmodified: psycopg2 and psycopg 3 through splitpoint with sharding on.

Two shards (the shared instances PG0 and PG1, each with a fresh database
drv_psycopg_<random>, dropped at the end); accounts hash-sharded, events range-sharded,
currencies a reference table (tests/lib/clients.py). Each driver connects with its
ordinary connection URL (scram-sha-256, app/secret) and runs the common scenario
(tests/lib/client_scenario.py): DDL, parameterized single-shard reads and writes, a
multi-row INSERT across shards, scatter ORDER BY/LIMIT/OFFSET, aggregates and GROUP BY
compared with values computed in the test, a committed and a rolled-back transaction,
SPT01 for a second written shard, errors followed by good statements, and a
conn.cancel() of `SELECT pg_sleep(30) FROM accounts WHERE id = 1` (57014, connection
usable afterwards).

psycopg2 extras: named (server-side) cursors over both shards, in a transaction and
WITH HOLD in autocommit.

psycopg 3 extras: server-side binding (extended protocol), explicit prepare=True and
the automatic prepare after prepare_threshold executions, binary parameters and
results (a binary scatter ORDER BY merge), a pipeline block, executemany, COPY FROM
STDIN in text and binary format split by key, nested transaction blocks (savepoints).

Finally both shards are read directly: every row is on the shard owning its key.
Installs python3-psycopg2 and python3-psycopg when missing.
Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 600

import os
import secrets
import subprocess
import sys
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg2", "python3-psycopg")

import client_scenario as sc
import psycopg  # noqa: E402
import psycopg2  # noqa: E402
import psycopg2.errors  # noqa: E402

DB = "drv_psycopg_" + secrets.token_hex(4)
WORK = sptest.workdir("client_psycopg")

# Checks that fail because of the PROXY (reported as KNOWN FAILURE, not fatal); see
# docs/compatibility.md. Keyed by the check's name, value: the diagnosis.
KNOWN_PSYCOPG2 = {}
KNOWN_PSYCOPG3 = {}
CHK2 = clients.Checker("psycopg2", KNOWN_PSYCOPG2)
CHK3 = clients.Checker("psycopg3", KNOWN_PSYCOPG3)


def url(proxy, password="secret"):
    return f"postgresql://app:{password}@{sptest.HOST}:{proxy.port}/{DB}?connect_timeout=10"


def run_psycopg2(proxy, shard_of):
    chk = CHK2

    def connect(password="secret"):
        c = psycopg2.connect(url(proxy, password))
        c.autocommit = True
        return c

    conn, m = sc.run_dbapi(chk, psycopg2, connect, DB, shard_of, proxy, "psycopg2")
    chk.ok("prepared-statement path: none (psycopg2 interpolates parameters on the client, simple protocol)")

    # Server-side (named) cursors over both shards: DECLARE, FETCH FORWARD itersize,
    # CLOSE in a transaction; WITH HOLD in autocommit (Django's .iterator() does this).
    def named_cursor(withhold):
        c = psycopg2.connect(url(proxy))
        c.autocommit = withhold
        cur = c.cursor(name="scan_hold" if withhold else "scan", withhold=withhold)
        cur.itersize = 3
        cur.execute("SELECT id, owner, balance FROM accounts ORDER BY id")
        rows = sc.rows3(list(cur))
        cur.close()
        if not withhold:
            c.commit()
        c.close()
        return rows
    chk.eq("named cursor over both shards (itersize 3)", lambda: named_cursor(False), m.all_accounts())
    chk.eq("named cursor WITH HOLD over both shards, autocommit", lambda: named_cursor(True), m.all_accounts())
    sc.final_state(chk, conn.cursor(), m)
    conn.close()


def run_psycopg3(proxy, shard_of):
    chk = CHK3

    def connect(password="secret"):
        return psycopg.connect(url(proxy, password), autocommit=True)

    conn, m = sc.run_dbapi(chk, psycopg, connect, DB, shard_of, proxy, "psycopg3")
    cur = conn.cursor()

    def q(sql, params=None, **kw):
        cur.execute(sql, params, **kw)
        return cur.fetchall()

    def x(sql, params=None, **kw):
        cur.execute(sql, params, **kw)
        return cur.rowcount

    # -- explicit server-side prepared statement (prepare=True) -------------------------
    for i in (2, 3, 17, 31):
        chk.eq(f"prepare=True single-shard SELECT id={i}",
               lambda: q("SELECT owner, balance FROM accounts WHERE id = %s", (i,), prepare=True), [m.accounts[i]])
    chk.eq("prepare=True scatter ORDER BY ... LIMIT $1",
           lambda: sc.rows3(q("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT %s", (5,),
                              prepare=True)), m.top(5))
    chk.eq("prepare=True UPDATE rowcount",
           lambda: x("UPDATE accounts SET balance = balance + %s WHERE id = %s", (Decimal(1), 12), prepare=True), 1)
    m.accounts[12] = (m.accounts[12][0], m.accounts[12][1] + 1)

    # -- automatic prepare after prepare_threshold (5) executions --------------------------
    chk.eq("prepare_threshold default", conn.prepare_threshold, 5)
    for i in range(1, 13):
        got = q("SELECT balance FROM accounts WHERE id = %s", (i,))
        if got != [(m.accounts[i][1],)]:
            chk.eq(f"auto-prepared SELECT id={i} (execution {i})", got, [(m.accounts[i][1],)])
    chk.ok("same SELECT executed 12 times with different keys (prepared by psycopg from the 6th on)")

    # -- binary parameters and results; a binary scatter ORDER BY merge ------------------
    chk.eq("binary single-shard SELECT",
           lambda: sc.rows3(q("SELECT id, owner, balance FROM accounts WHERE id = %b", (9,), binary=True)),
           [(9,) + m.accounts[9]])
    chk.eq("binary results: scatter ORDER BY balance DESC, id LIMIT 7",
           lambda: sc.rows3(q("SELECT id, owner, balance FROM accounts ORDER BY balance DESC, id LIMIT 7",
                              binary=True)), m.top(7))
    agg = m.aggregates()
    chk.eq("binary results: scatter aggregates",
           lambda: q("SELECT count(*), sum(balance), max(balance) FROM accounts", binary=True),
           [(agg[0], agg[1], agg[3])])

    # -- pipeline mode ----------------------------------------------------------------
    if psycopg.Pipeline.is_supported():
        ids1 = [i for i in range(80, 120) if shard_of[i] == 1][:4]
        out = {}

        def pipeline_one_shard():
            with conn.pipeline() as p:
                c2 = conn.cursor()
                for i in ids1:
                    c2.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)",
                               (i, "pipe", Decimal(i)))
                p.sync()
                c2.execute("SELECT count(*) FROM accounts WHERE owner = %s", ("pipe",))
                out["n"] = c2.fetchone()[0]
            return out["n"]

        chk.eq("pipeline block: 4 INSERTs (one shard) + sync + scatter count($1)", pipeline_one_shard, len(ids1))
        n = q("SELECT count(*) FROM accounts WHERE owner = 'pipe'")[0][0]
        chk.true("pipeline block: its INSERTs are all there", n == len(ids1), f"{n} rows")
        for i in ids1:
            m.accounts[i] = ("pipe", Decimal(i))
        both = list(range(120, 130))
        # A pipeline of INSERTs with keys on both shards before one Sync (one implicit
        # transaction in PostgreSQL). Run in a child process with a deadline: a proxy
        # that never answers must not hang this test.
        status, detail = isolated(proxy, f"""
with conn.pipeline():
    c3 = conn.cursor()
    for i in {both!r}:
        c3.execute("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", (i, "pipe2", Decimal(i)))
""")
        # Writing two shards in one implicit transaction is the SPT01 case (SPEC 5);
        # applying it whole would be acceptable too. Anything else is not.
        chk.true("pipeline block with keys on both shards before one Sync: applied whole or refused with SPT01",
                 status == "ok" or detail.startswith("SPT01:"), f"{status}: {detail}")
        present = [i for i in both if q("SELECT 1 FROM accounts WHERE id = %s", (i,))]
        chk.true("pipeline with keys on both shards: all rows or none",
                 len(present) in (0, len(both)), f"{len(present)} of {len(both)} present: {present}")
        for i in present:
            m.accounts[i] = ("pipe2", Decimal(i))
    else:
        chk.ok("pipeline mode not supported by this libpq: skipped")

    # -- executemany ----------------------------------------------------------------------
    many = [(i, "many", Decimal(i) / 4) for i in range(130, 146)]
    status, detail = isolated(proxy, f"""
conn.cursor().executemany("INSERT INTO accounts (id, owner, balance) VALUES (%s, %s, %s)", {many!r})
""")
    chk.true("executemany with keys on both shards (pipelined, one Sync): applied whole or refused with SPT01",
             status == "ok" or detail.startswith("SPT01:"), f"{status}: {detail}")
    present = [i for i, _, _ in many if q("SELECT 1 FROM accounts WHERE id = %s", (i,))]
    chk.true("executemany with keys on both shards: all rows or none",
             len(present) in (0, len(many)), f"{len(present)} of {len(many)} present: {present}")
    for i, o, b in many:
        if i in present:
            m.accounts[i] = (o, b)

    # -- COPY FROM STDIN, text and binary, split by key ------------------------------------
    text_rows = [(i, f"copy-{i}", Decimal(i) + Decimal("0.25")) for i in range(200, 230)]

    def copy_text():
        with cur.copy("COPY accounts (id, owner, balance) FROM STDIN") as cp:
            for r in text_rows:
                cp.write_row(r)
        return cur.rowcount

    chk.eq("COPY FROM STDIN (text) of 30 rows: rowcount", copy_text, len(text_rows))
    for i, o, b in text_rows:
        m.accounts[i] = (o, b)
    bin_rows = [(i, f"bcopy-{i}", Decimal(i) / 8) for i in range(230, 260)]

    def copy_binary():
        with cur.copy("COPY accounts (id, owner, balance) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["int8", "text", "numeric"])
            for r in bin_rows:
                cp.write_row(r)
        return cur.rowcount

    chk.eq("COPY FROM STDIN (binary) of 30 rows: rowcount", copy_binary, len(bin_rows))
    for i, o, b in bin_rows:
        m.accounts[i] = (o, b)
    chk.eq("COPYed rows readable through the proxy",
           lambda: q("SELECT count(*), sum(balance) FROM accounts WHERE id >= 200 AND id < 260"),
           [(60, sum(b for _, _, b in text_rows + bin_rows))])

    def copy_out():
        with cur.copy("COPY (SELECT id, owner FROM accounts WHERE id BETWEEN 200 AND 204 ORDER BY id) "
                      "TO STDOUT") as cp:
            return [(int(i), o) for i, o in cp.rows()]

    chk.eq("COPY (scatter SELECT ... ORDER BY) TO STDOUT", copy_out, [(i, f"copy-{i}") for i in range(200, 205)])

    # -- transaction blocks: commit, rollback, nested (savepoint) -------------------------
    a = sorted(i for i in m.accounts if shard_of.get(i) == 0)[0]

    def tx_nested():
        with conn.transaction():
            cur.execute("UPDATE accounts SET owner = %s WHERE id = %s", ("tx-block", a))
            with conn.transaction():  # SAVEPOINT
                cur.execute("UPDATE accounts SET owner = %s WHERE id = %s", ("inner", a))
                raise psycopg.Rollback()
            cur.execute("SELECT owner FROM accounts WHERE id = %s", (a,))
            return cur.fetchall()

    chk.eq("nested transaction block rolled back to its savepoint (SAVEPOINT / ROLLBACK TO)", tx_nested,
           [("tx-block",)])
    chk.eq("transaction block committed", lambda: q("SELECT owner FROM accounts WHERE id = %s", (a,)),
           [("tx-block",)])
    m.accounts[a] = ("tx-block", m.accounts[a][1])

    def tx_rollback():
        with conn.transaction():
            cur.execute("UPDATE accounts SET owner = %s WHERE id = %s", ("never", a))
            raise psycopg.Rollback()

    tx_rollback()
    chk.eq("transaction block rolled back (psycopg.Rollback)",
           lambda: q("SELECT owner FROM accounts WHERE id = %s", (a,)), [("tx-block",)])

    sc.final_state(chk, cur, m)
    conn.close()


def isolated(proxy, body, deadline=20):
    """Runs `body` (Python, with `conn` an autocommit psycopg connection to the proxy)
    in a child process. Returns ("ok", ""), ("error", "SQLSTATE: message") or
    ("timeout", what it printed)."""
    code = ("import psycopg, sys\nfrom decimal import Decimal\n"
            f"conn = psycopg.connect({url(proxy)!r}, autocommit=True)\n"
            "try:\n" + "".join("    " + line + "\n" for line in body.strip().splitlines()) +
            "except psycopg.Error as e:\n"
            "    print(f'ERROR {e.sqlstate}: {str(e).splitlines()[0]}')\n"
            "    sys.exit(3)\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=deadline)
    except subprocess.TimeoutExpired:
        return "timeout", f"no answer within {deadline}s (child killed)"
    if r.returncode == 0:
        return "ok", ""
    if r.returncode == 3:
        return "error", r.stdout.strip()[len("ERROR "):]
    return "error", f"child exit {r.returncode}: {(r.stdout + r.stderr).strip()[-300:]}"


def sqlstate_of(e):
    return getattr(e, "sqlstate", None) or getattr(getattr(e, "diag", None), "sqlstate", None)


def main():
    print(f"psycopg2 {psycopg2.__version__} (Debian python3-psycopg2 {clients.deb_version('python3-psycopg2')}), "
          f"libpq {psycopg2.extensions.libpq_version()}")
    print(f"psycopg {psycopg.__version__} (Debian python3-psycopg {clients.deb_version('python3-psycopg')}), "
          f"implementation {psycopg.pq.__impl__}, libpq {psycopg.pq.version()}, "
          f"pipeline supported: {psycopg.Pipeline.is_supported()}")
    return clients.run_client_test("client_psycopg", DB, WORK, [run_psycopg2, run_psycopg3], [CHK2, CHK3],
                                   range(1, 300))


if __name__ == "__main__":
    sys.exit(main())
