#!/usr/bin/env python3
"""Scatter-gather under faults (SPEC §4): deadlines from every source, partial results
allowed and denied, a stopped shard (timeout) and a killed shard (down), and healthy
pools afterwards.

Shards: s0 (database on PG0), s1 (database on PG1), s2 and s3 (two databases on a
private PostgreSQL instance started for this test with tests/lib/pg.sh — the shared
instances are never stopped). Table t is range-distributed on id: [..1000) s0,
[1000, 2000) s1, [2000, 3000) s2, [3000, ..) s3, 300 rows per shard, so the rows of
the shards that answered are known exactly.

First, with every shard up, a statement that runs 30 s on s2 (pg_sleep): at a 1 s
deadline s2 is missing (rows of s0/s1 with 01SP1 under allow, SPS01 under deny), its
statement is cancelled (no longer active on the server) and the connection is usable.

Phase 1, the private instance SIGSTOPped (every process of it): a statement that
needs s2 (and s3) waits for its deadline. Deadline sources, checked by the time the
answer takes (lower bound: the deadline was waited for; upper bound: below the next
weaker source in force) and by SHOW splitpoint.last_scatter (columns shard, status,
rows, elapsed_ms, error, host; the stopped shards 'timeout' with elapsed_ms about the
deadline and an error text, s0/s1 'ok' with their row counts, untouched shards
'skipped'): scatter.deadline, SET splitpoint.deadline, SET LOCAL splitpoint.deadline
inside BEGIN (gone after COMMIT/ROLLBACK), a /* splitpoint: deadline=300ms */ hint,
and scatter.max_deadline capping a larger hint and a larger SET. Under
partial_results deny: SPS01 whose message names every missing shard and why, and
never a healthy one; under allow: exactly the rows of s0 and s1 (ORDER BY merge, plain
concatenation, DISTINCT, LIMIT and aggregates), preceded by one WARNING 01SP1 naming
the missing shards; hints partial=allow / partial=deny override the configuration and
SET splitpoint.partial_results. Also through the extended protocol (text and binary).
A statement that touches only s0/s1 is unaffected. A proxy that had no pooled
connection to the stopped server must still answer by the deadline.
Then SIGCONT: the next statement on every connection works (simple and extended),
and a statement touching every shard returns all 1200 rows, also on new connections.

Phase 2, the private instance shut down (connection refused) with a 10 s deadline:
the missing shards are reported at once (within 3 s), SPS01 (deny) or the rows of
s0/s1 with 01SP1 (allow), last_scatter status error. Then the instance is started
again and every connection works again without restarting the proxy.

A check that fails because of a known proxy bug is listed in KNOWN (printed as
"KNOWN FAILURE: ..." without failing the run).

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import os
import re
import secrets
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402

HOST = sptest.HOST
SP_ROOT = sptest.SP_ROOT
PG_SH = os.path.join(SP_ROOT, "tests", "lib", "pg.sh")
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("sc-faults")
SUFFIX = secrets.token_hex(4)
PRIV_DIR = os.path.join(WORKDIR, "pgpriv")
PRIV_PORT = None

DB0 = (PG0, f"scf0_{SUFFIX}")
DB1 = (PG1, f"scf1_{SUFFIX}")
DB2 = f"scf2_{SUFFIX}"
DB3 = f"scf3_{SUFFIX}"
ROWS_PER_SHARD = 300
SHARD_IDS = {f"s{i}": [i * 1000 + 100 + k for k in range(ROWS_PER_SHARD)] for i in range(4)}
LIVE_IDS = sorted(SHARD_IDS["s0"] + SHARD_IDS["s1"])
ALL_IDS = sorted(i for v in SHARD_IDS.values() for i in v)

KNOWN = {}

# ------------------------------------------------------------------ harness


def sh(*args, check=True):
    r = subprocess.run(["bash", PG_SH, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"pg.sh {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r.stdout.strip()


free_port = sptest.free_port
class Proxy(sptest.Proxy):
    """One splitpoint process (tests/lib/sptest.py) with its config and log in WORKDIR."""

    def __init__(self, name, body):
        super().__init__(name, body, WORKDIR)

    def connect(self):
        c = pgwire.connect(HOST, self.port, "app", "app", password="secret", timeout=30)
        CONNS.append((self, c))
        return c
PROXIES = sptest.PROXIES  # every proxy started
CONNS = []  # (proxy, connection): every client connection, checked after the faults

# ------------------------------------------------------------------ checks

CHECKS = sptest.Checks(KNOWN)
check = CHECKS.check  # check(ok, cid, detail): detail is a function building the failure text


DROPPED = []  # connections given up on (no answer): not used again


def drop(c, e):
    """The proxy did not answer: the connection's protocol state is unknown from here on."""
    DROPPED.append(c)
    for i, (_, x) in enumerate(CONNS):
        if x is c:
            del CONNS[i]
            break
    try:
        c.sock.close()
    except OSError:
        pass
    return pgwire.QueryResult(error={"C": "(none)", "M": f"no answer from the proxy within 30s: {e!r}"})


def timed(c, sql):
    t0 = time.monotonic()
    try:
        r = c.query(sql, timeout=30)
    except (TimeoutError, pgwire.ConnectionClosed, ConnectionResetError) as e:
        r = drop(c, e)
    return r, time.monotonic() - t0


def timed_ext(c, sql, params=(), binary=False):
    t0 = time.monotonic()
    try:
        r = c.extended(sql, list(params), result_formats=[1] if binary else [], timeout=30)
    except (TimeoutError, pgwire.ConnectionClosed, ConnectionResetError) as e:
        r = drop(c, e)
    return r, time.monotonic() - t0


def last_scatter(c):
    if c in DROPPED:
        return [], {}
    r = c.query("SHOW splitpoint.last_scatter", timeout=30)
    if r.error:
        raise AssertionError(f"SHOW splitpoint.last_scatter: {r.error}")
    names = r.results[-1].column_names if r.results else []
    return names, {row[0]: row for row in r.rows}


def ids_of(rows):
    return [int(r[0]) for r in rows]


def warning_of(r):
    return [n for n in r.notices if n.get("C") == "01SP1"]


def describe(r):
    if r.error:
        return f"error {r.error.get('C')}: {r.error.get('M')}"
    return f"{len(r.rows)} rows, notices {[(n.get('C'), n.get('M')) for n in r.notices]}"


MISSING_WHY = {"timeout": re.compile(r"timeout|deadline|timed out", re.I),
               "down": re.compile(r"refused|unreachable|connect|down|closed", re.I),
               "any": re.compile(r"timeout|deadline|timed out|refused|unreachable|connect|down|closed", re.I)}


def expect_denied(cid, r, missing, why):
    """SPS01 naming every missing shard and why."""
    if not check(r.error is not None and r.error.get("C") == "SPS01", cid,
                 lambda: f"expected SQLSTATE SPS01, got {describe(r)}"):
        return
    msg = r.error.get("M", "")
    for s in missing:
        check(re.search(rf"\b{s}\b", msg) is not None, cid, lambda: f"SPS01 message does not name {s}: {msg!r}")
    check(MISSING_WHY[why].search(msg) is not None, cid, lambda: f"SPS01 message does not say why ({why}): {msg!r}")
    for s in ("s0", "s1"):
        check(re.search(rf"\b{s}\b", msg) is None, cid, lambda: f"SPS01 message names healthy shard {s}: {msg!r}")


def expect_partial(cid, r, missing, why, want_ids=None, ordered=True):
    """The rows of s0 and s1 exactly, after one WARNING 01SP1 naming the missing shards."""
    if not check(r.error is None, cid, lambda: f"expected rows of s0 and s1, got {describe(r)}"):
        return
    if want_ids is not None:
        got = ids_of(r.rows)
        if not ordered:
            got = sorted(got)
        check(got == want_ids, cid,
              lambda: f"rows: expected {len(want_ids)} ids {want_ids[:5]}..., got {len(got)}: {got[:5]}...")
    w = warning_of(r)
    if not check(len(w) == 1, cid, lambda: f"expected one 01SP1 notice, got notices {r.notices}"):
        return
    n = w[0]
    check(n.get("S") == "WARNING" or n.get("V") == "WARNING", cid, lambda: f"01SP1 notice severity: {n}")
    msg = n.get("M", "")
    for s in missing:
        check(re.search(rf"\b{s}\b", msg) is not None, cid, lambda: f"01SP1 message does not name {s}: {msg!r}")
    check(MISSING_WHY[why].search(msg) is not None, cid, lambda: f"01SP1 message does not say why: {msg!r}")
    # the notice comes before the first row
    kinds = [t for t, _ in r.messages]
    if "D" in kinds and "N" in kinds:
        check(kinds.index("N") < kinds.index("D"), cid, lambda: "01SP1 notice arrives after the first DataRow")


def expect_last_scatter(cid, c, statuses, deadline_ms=None, rows=None):
    """statuses: shard -> expected status; rows: shard -> expected row count."""
    if c in DROPPED:
        return {}
    names, ls = last_scatter(c)
    check(names == ["shard", "status", "rows", "elapsed_ms", "error", "host"], cid,
          lambda: f"SHOW splitpoint.last_scatter columns: {names}")
    for s, want in statuses.items():
        row = ls.get(s)
        if not check(row is not None, cid, lambda: f"last_scatter has no row for {s}: {ls}"):
            continue
        check(row[1] == want, cid, lambda: f"last_scatter[{s}].status: expected {want}, got {row[1]} ({row})")
        if want in ("timeout", "error"):
            check(row[4] not in (None, ""), cid, lambda: f"last_scatter[{s}].error is empty: {row}")
            check(row[2] == "0", cid, lambda: f"last_scatter[{s}].rows for a missing shard: {row}")
        if want == "timeout" and deadline_ms is not None:
            el = float(row[3])
            check(deadline_ms * 0.95 <= el < deadline_ms + 5000, cid,
                  lambda: f"last_scatter[{s}].elapsed_ms {el} for deadline {deadline_ms} ms")
        if want == "ok":
            check(row[4] in (None, ""), cid, lambda: f"last_scatter[{s}].error set for an ok shard: {row}")
        if rows and s in rows:
            check(row[2] == str(rows[s]), cid, lambda: f"last_scatter[{s}].rows: expected {rows[s]}, got {row}")
    return ls


def expect_elapsed(cid, elapsed, lo, hi):
    check(lo <= elapsed < hi, cid, lambda: f"answer took {elapsed:.2f}s, expected within [{lo}, {hi})")


# ------------------------------------------------------------------ the private instance

STOPPED = []


def postmaster_pid():
    with open(os.path.join(PRIV_DIR, "data", "postmaster.pid")) as f:
        return int(f.readline().strip())


def instance_pids():
    """The postmaster and every process it forked."""
    pm = postmaster_pid()
    pids = [pm]
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pm:
            pids.append(int(d))
    return pids


def sigstop_instance():
    pids = instance_pids()
    for p in pids:  # the postmaster first: it forks nothing new while stopped
        try:
            os.kill(p, signal.SIGSTOP)
        except ProcessLookupError:
            continue  # a backend that ended since it was listed
        STOPPED.append(p)  # as it goes: whatever was stopped is continued later
    print(f"     SIGSTOP {len(pids)} processes of the private instance (postmaster {pids[0]})")


def sigcont_instance():
    while STOPPED:
        p = STOPPED.pop()
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pass


def priv_psql(db, sql):
    r = subprocess.run(["/usr/lib/postgresql/15/bin/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", PRIV_DIR,
                        "-p", str(PRIV_PORT), "-U", "postgres", "-d", db, "-c", sql],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"psql on the private instance: {r.stderr}")


# ------------------------------------------------------------------ setup

def shared_su(port, db="postgres"):
    c = pgwire.connect(HOST, port, "postgres", db, password="postgres", timeout=30)
    return c


def create_table(run):
    run("CREATE TABLE t (id bigint PRIMARY KEY, v text, n int)")


def fill_sql(shard):
    ids = SHARD_IDS[shard]
    return (f"INSERT INTO t SELECT g, 'v' || g, g % 7 FROM generate_series({ids[0]}, {ids[-1]}) g")


def config(partial, deadline, max_deadline, server_connect="1s"):
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
  - {{ name: s0, host: {HOST}, port: {DB0[0]}, database: {DB0[1]}, user: app, password: secret }}
  - {{ name: s1, host: {HOST}, port: {DB1[0]}, database: {DB1[1]}, user: app, password: secret }}
  - {{ name: s2, host: {HOST}, port: {PRIV_PORT}, database: {DB2}, user: app, password: secret }}
  - {{ name: s3, host: {HOST}, port: {PRIV_PORT}, database: {DB3}, user: app, password: secret }}
distributions:
  - name: by_id
    method: range
    ranges:
      - {{ upto: 1000, shard: s0 }}
      - {{ upto: 2000, shard: s1 }}
      - {{ upto: 3000, shard: s2 }}
      - {{ shard: s3 }}
    tables:
      t: id
scatter:
  deadline: {deadline}
  max_deadline: {max_deadline}
  partial_results: {partial}
timeouts:
  server_connect: {server_connect}
"""


DENY = ALLOW = CAP = COLD = None


def setup():
    global PRIV_PORT, DENY, ALLOW, CAP, COLD
    PRIV_PORT = free_port()
    sh("pg_start", PRIV_DIR, str(PRIV_PORT))
    for port, db in (DB0, DB1):
        with shared_su(port) as c:
            c.query(f"CREATE DATABASE {db} OWNER app").raise_error()
        with pgwire.connect(HOST, port, "app", db, password="secret") as c:
            create_table(lambda s: c.query(s).raise_error())
            c.query(fill_sql("s0" if db == DB0[1] else "s1")).raise_error()
    for db, shard in ((DB2, "s2"), (DB3, "s3")):
        priv_psql("postgres", f"CREATE DATABASE {db} OWNER app")
        with pgwire.connect(HOST, PRIV_PORT, "app", db, password="secret") as c:
            create_table(lambda s: c.query(s).raise_error())
            c.query(fill_sql(shard)).raise_error()
    DENY = Proxy("deny", config("deny", "4s", "30s")).start()
    ALLOW = Proxy("allow", config("allow", "4s", "30s")).start()
    CAP = Proxy("cap", config("deny", "1s", "2s")).start()
    COLD = Proxy("cold", config("allow", "8s", "30s", server_connect="5s"))  # started while s2/s3 are stopped


def teardown():
    sigcont_instance()
    for _, c in CONNS:
        try:
            c.sock.close()
        except OSError:
            pass
    for p in PROXIES:
        p.stop()
    for port, db in (DB0, DB1):
        try:
            with shared_su(port) as c:
                c.query(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {db}: {e}")
    sh("pg_stop", PRIV_DIR, check=False)


def warm(proxy, n):
    """n idle connections to every shard in the proxy's pools: n sessions each inside a
    transaction that read from every shard, then all committed."""
    cs = [pgwire.connect(HOST, proxy.port, "app", "app", password="secret", timeout=30) for _ in range(n)]
    for c in cs:
        c.query("BEGIN").raise_error()
        r = c.query("SELECT count(*) FROM t").raise_error()
        assert r.rows == [[str(len(ALL_IDS))]], r.rows
    for c in cs:
        c.query("COMMIT").raise_error()
        c.close()


# ------------------------------------------------------------------ tests

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


SQL_ORDERED = "SELECT id, v FROM t ORDER BY id"            # every shard
SQL_AGG = "SELECT count(*), sum(id), min(id), max(id) FROM t"
# s0, s1, s2 only (s3 skipped): one stopped shard, so the proxy's clean-up after a
# timeout (cancel + drain per stopped shard, bounded by server_connect) stays short
Q_ORDERED = "SELECT id, v FROM t WHERE id < 3000 ORDER BY id"
Q_CONCAT = "SELECT id, n FROM t WHERE id < 3000"
Q_AGG = "SELECT count(*), sum(id), min(id), max(id) FROM t WHERE id < 3000"
LIVE_AGG = [str(len(LIVE_IDS)), str(sum(LIVE_IDS)), str(LIVE_IDS[0]), str(LIVE_IDS[-1])]
ALL4 = ("s0", "s1", "s2", "s3")
S2_MISSING = {"s0": "ok", "s1": "ok", "s2": "timeout", "s3": "skipped"}
BOTH_MISSING = {"s0": "ok", "s1": "ok", "s2": "timeout", "s3": "timeout"}
LIVE_ROWS = {"s0": ROWS_PER_SHARD, "s1": ROWS_PER_SHARD}


@test
def healthy_baseline():
    # Every statement that times out on a stopped shard closes that backend; the deny
    # proxy has 9 such statements: keep enough idle connections that none of them has
    # to connect to the stopped server (that case is stopped_cold_pool_... below).
    for p in (DENY, ALLOW, CAP):
        warm(p, 12)
    c = DENY.connect()
    r = c.query(SQL_ORDERED)
    check(r.error is None and ids_of(r.rows) == ALL_IDS, "baseline", lambda: f"all rows in order: {describe(r)}")
    expect_last_scatter("baseline", c, {s: "ok" for s in ALL4}, rows={s: ROWS_PER_SHARD for s in ALL4})
    r = c.query("SELECT count(*) FROM t WHERE id < 2000")
    check(r.error is None and r.rows == [["600"]], "baseline", lambda: f"count on s0+s1: {describe(r)}")
    expect_last_scatter("baseline", c, {"s0": "ok", "s1": "ok", "s2": "skipped", "s3": "skipped"})
    for p in (ALLOW, CAP):
        c = p.connect()
        r = c.query(SQL_AGG)
        check(r.error is None and r.rows[0][0] == "1200", "baseline", lambda: f"{p.name}: {describe(r)}")
        r = c.extended("SELECT id FROM t WHERE id > $1 ORDER BY id", ["0"])
        check(r.error is None and ids_of(r.rows) == ALL_IDS, "baseline-ext", lambda: f"{p.name}: {describe(r)}")


SLOW_MARK = f"sp_slow_{SUFFIX}"
# 1 kB per row: 300 kB per shard, more than the proxy reads from a shard at once, so
# s0/s1 are still streaming (not fully buffered in the proxy) while the merge waits
# for s2's first row
SLOW_SQL = (f"SELECT id, '{SLOW_MARK}' AS mk, repeat(v, 200) AS pad FROM t WHERE id < 3000 AND "
            f"(CASE WHEN id >= 2000 THEN pg_sleep(30)::text IS NOT NULL ELSE true END) ORDER BY id")


def slow_queries_on_private_instance():
    with pgwire.connect(HOST, PRIV_PORT, "postgres", "postgres", password="postgres", timeout=30) as d:
        return int(d.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                            f"AND query LIKE '%{SLOW_MARK}%' AND pid <> pg_backend_pid()"))


@test
def slow_shard_cancelled_at_deadline():
    """s2 runs a 30 s statement: at the 1 s deadline it is missing, gets a CancelRequest
    (it stops running) and its connection stays usable."""
    for p in (ALLOW, DENY):
        cid = f"slow-{p.name}"
        c = p.connect()
        r, el = timed(c, "/* splitpoint: deadline=1s */ " + SLOW_SQL)
        if p is ALLOW:
            expect_partial(cid, r, ["s2"], "timeout", LIVE_IDS)
        else:
            expect_denied(cid, r, ["s2"], "timeout")
        expect_elapsed(cid + "-time", el, 0.95, 4)
        expect_last_scatter(cid, c, S2_MISSING, deadline_ms=1000)
        deadline = time.monotonic() + 5
        n = slow_queries_on_private_instance()
        while n and time.monotonic() < deadline:
            time.sleep(0.1)
            n = slow_queries_on_private_instance()
        check(n == 0, cid + "-cancel",
              lambda: f"{n} shard statement(s) still running 5s after the deadline (not cancelled)")
        r, el = timed(c, SQL_AGG)
        check(r.error is None and r.rows and r.rows[0][0] == "1200", cid + "-after",
              lambda: f"same connection, every shard, after the cancel: {describe(r)}")


@test
def stop_private_instance():
    sigstop_instance()


# ---- phase 1, deny (scatter.deadline 4s, partial_results deny)

@test
def stopped_deny_config_deadline():
    c = DENY.connect()
    r, el = timed(c, SQL_ORDERED)
    expect_denied("deny-config", r, ["s2", "s3"], "timeout")
    expect_elapsed("deny-config", el, 3.9, 10)
    expect_last_scatter("deny-config", c, BOTH_MISSING, deadline_ms=4000)
    check(c.status == "I", "deny-config", lambda: f"status after the error: {c.status}")


@test
def stopped_deny_set_deadline():
    c = DENY.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    r = c.query("SHOW splitpoint.deadline").raise_error()
    check(r.rows == [["2s"]], "deny-set", lambda: f"SHOW splitpoint.deadline: {r.rows}")
    r, el = timed(c, Q_AGG)
    expect_denied("deny-set", r, ["s2"], "timeout")
    expect_elapsed("deny-set", el, 1.95, 3.9)
    expect_last_scatter("deny-set", c, S2_MISSING, deadline_ms=2000)


@test
def stopped_deny_set_local_deadline():
    c = DENY.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    c.query("BEGIN").raise_error()
    c.query("SET LOCAL splitpoint.deadline = '800ms'").raise_error()
    r, el = timed(c, Q_CONCAT)
    expect_denied("deny-set-local", r, ["s2"], "timeout")
    expect_elapsed("deny-set-local", el, 0.78, 1.95)
    check(c.status == "E", "deny-set-local", lambda: f"transaction status after SPS01: {c.status} (expected E)")
    r = c.query("ROLLBACK")
    check(r.error is None and c.status == "I", "deny-set-local", lambda: f"ROLLBACK: {describe(r)} {c.status}")
    expect_last_scatter("deny-set-local", c, S2_MISSING, deadline_ms=800)
    r = c.query("SHOW splitpoint.deadline").raise_error()
    check(r.rows == [["2s"]], "deny-set-local", lambda: f"SET LOCAL outlived its transaction: {r.rows}")


@test
def stopped_deny_hint_deadline():
    c = DENY.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    r, el = timed(c, "/* splitpoint: deadline=300ms */ " + Q_ORDERED)
    expect_denied("deny-hint", r, ["s2"], "timeout")
    expect_elapsed("deny-hint", el, 0.28, 1.95)
    expect_last_scatter("deny-hint", c, S2_MISSING, deadline_ms=300)


@test
def stopped_deny_hint_partial_allow():
    c = DENY.connect()
    r, el = timed(c, "SELECT id, v FROM t /* splitpoint: partial=allow, deadline=400ms */ WHERE id < 3000 "
                     "ORDER BY id")
    expect_partial("deny-hint-allow", r, ["s2"], "timeout", LIVE_IDS)
    expect_elapsed("deny-hint-allow", el, 0.38, 3.9)
    expect_last_scatter("deny-hint-allow", c, S2_MISSING, deadline_ms=400, rows=LIVE_ROWS)


@test
def stopped_deny_set_partial_allow():
    c = DENY.connect()
    c.query("SET splitpoint.partial_results = allow").raise_error()
    r, el = timed(c, "/* splitpoint: deadline=400ms */ " + Q_AGG)
    if check(r.error is None, "deny-set-allow", lambda: f"aggregate over s0+s1: {describe(r)}"):
        check(r.rows == [LIVE_AGG], "deny-set-allow", lambda: f"aggregate: expected {LIVE_AGG}, got {r.rows}")
        check(len(warning_of(r)) == 1, "deny-set-allow", lambda: f"notices: {r.notices}")
    # a hint partial=deny beats the session's allow
    r, el = timed(c, "/* splitpoint: partial=deny, deadline=300ms */ " + Q_AGG)
    expect_denied("deny-set-allow-hint-deny", r, ["s2"], "timeout")


@test
def stopped_deny_extended_protocol():
    c = DENY.connect()
    r, el = timed_ext(c, "/* splitpoint: deadline=300ms */ SELECT id, v FROM t WHERE id > $1 AND id < 3000 "
                         "ORDER BY id", ["-1"])
    expect_denied("deny-ext", r, ["s2"], "timeout")
    check(c.status == "I", "deny-ext", lambda: f"ReadyForQuery status after the error: {c.status}")
    expect_elapsed("deny-ext", el, 0.28, 3.9)


@test
def stopped_deny_extended_binary_partial_allow():
    c = DENY.connect()
    r, el = timed_ext(c, "/* splitpoint: deadline=300ms, partial=allow */ SELECT id, v FROM t WHERE id > $1 "
                         "AND id < 3000 ORDER BY id", ["-1"], binary=True)
    if check(r.error is None, "deny-ext-allow", lambda: describe(r)):
        got = [int.from_bytes(row[0], "big", signed=True) for row in r.rows]
        check(got == LIVE_IDS, "deny-ext-allow", lambda: f"binary rows: {len(got)} {got[:5]}")
        check(len(warning_of(r)) == 1, "deny-ext-allow", lambda: f"notices: {r.notices}")
    expect_elapsed("deny-ext-allow", el, 0.28, 3.9)
    expect_last_scatter("deny-ext-allow", c, S2_MISSING, deadline_ms=300)


@test
def stopped_subset_unaffected():
    c = DENY.connect()
    r, el = timed(c, "SELECT id FROM t WHERE id < 2000 ORDER BY id")
    check(r.error is None and ids_of(r.rows) == LIVE_IDS and not r.notices, "subset",
          lambda: f"s0+s1 statement while s2/s3 are stopped: {describe(r)}")
    expect_elapsed("subset", el, 0, 3)
    expect_last_scatter("subset", c, {"s0": "ok", "s1": "ok", "s2": "skipped", "s3": "skipped"})
    r, el = timed_ext(c, "SELECT count(*) FROM t WHERE id < $1", ["2000"])
    check(r.error is None and r.rows == [["600"]] and not r.notices, "subset-ext", lambda: describe(r))
    expect_elapsed("subset-ext", el, 0, 3)


# ---- phase 1, allow (scatter.deadline 4s, partial_results allow)

@test
def stopped_allow_config_deadline():
    c = ALLOW.connect()
    r, el = timed(c, SQL_ORDERED)
    expect_partial("allow-config", r, ["s2", "s3"], "timeout", LIVE_IDS)
    expect_elapsed("allow-config", el, 3.9, 10)
    expect_last_scatter("allow-config", c, BOTH_MISSING, deadline_ms=4000, rows=LIVE_ROWS)


@test
def stopped_allow_set_deadline():
    c = ALLOW.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    r, el = timed(c, Q_CONCAT)
    expect_partial("allow-set", r, ["s2"], "timeout", LIVE_IDS, ordered=False)
    expect_elapsed("allow-set", el, 1.95, 3.9)
    expect_last_scatter("allow-set", c, S2_MISSING, deadline_ms=2000, rows=LIVE_ROWS)


@test
def stopped_allow_set_local_deadline():
    c = ALLOW.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    c.query("BEGIN").raise_error()
    c.query("SET LOCAL splitpoint.deadline = '800ms'").raise_error()
    r, el = timed(c, "SELECT id FROM t WHERE id < 3000 ORDER BY id DESC LIMIT 5")
    expect_partial("allow-set-local", r, ["s2"], "timeout", LIVE_IDS[::-1][:5])
    expect_elapsed("allow-set-local", el, 0.78, 1.95)
    r = c.query("COMMIT")
    check(r.error is None and r.tag == "COMMIT" and c.status == "I", "allow-set-local",
          lambda: f"COMMIT after a partial read: {describe(r)} tag={r.tag} status={c.status}")
    r = c.query("SHOW splitpoint.deadline").raise_error()
    check(r.rows == [["2s"]], "allow-set-local", lambda: f"SET LOCAL outlived its transaction: {r.rows}")


@test
def stopped_allow_hint_deadline_and_partial_deny():
    c = ALLOW.connect()
    c.query("SET splitpoint.deadline = '2s'").raise_error()
    r, el = timed(c, "SELECT DISTINCT n FROM t WHERE id < 3000 ORDER BY n /* splitpoint: deadline=300ms */")
    if check(r.error is None, "allow-hint", lambda: describe(r)):
        check([x[0] for x in r.rows] == [str(i) for i in range(7)], "allow-hint", lambda: f"rows {r.rows}")
        check(len(warning_of(r)) == 1, "allow-hint", lambda: f"notices: {r.notices}")
    expect_elapsed("allow-hint", el, 0.28, 1.95)
    expect_last_scatter("allow-hint", c, S2_MISSING, deadline_ms=300)
    r, el = timed(c, "/* splitpoint: partial=deny, deadline=300ms */ " + Q_ORDERED)
    expect_denied("allow-hint-deny", r, ["s2"], "timeout")


@test
def stopped_allow_extended_protocol():
    c = ALLOW.connect()
    r, el = timed_ext(c, "/* splitpoint: deadline=300ms */ SELECT id, v FROM t WHERE id >= $1 AND id < 3000 "
                         "ORDER BY id LIMIT $2", ["0", "1000"])
    expect_partial("allow-ext", r, ["s2"], "timeout", LIVE_IDS)
    expect_elapsed("allow-ext", el, 0.28, 3.9)


# ---- phase 1, max_deadline (scatter.deadline 1s, max_deadline 2s, deny)

@test
def stopped_allow_wide_rows():
    """As above with 1 kB rows (300 kB per shard): s0 and s1 answer in full before the
    deadline, but their rows are still on the way when it passes."""
    c = ALLOW.connect()
    r, el = timed(c, "/* splitpoint: deadline=300ms */ SELECT id, repeat(v, 200) AS pad FROM t WHERE id < 3000 "
                     "ORDER BY id")
    expect_partial("allow-wide", r, ["s2"], "timeout", LIVE_IDS)
    if r.error is None:
        check(all(len(row[1]) == 200 * len(f"v{row[0]}") for row in r.rows), "allow-wide", lambda: "pad column")
    expect_elapsed("allow-wide-time", el, 0.28, 3.9)
    expect_last_scatter("allow-wide", c, S2_MISSING, deadline_ms=300, rows=LIVE_ROWS)


@test
def stopped_max_deadline_caps_hint_and_set():
    c = CAP.connect()
    r, el = timed(c, "/* splitpoint: deadline=60s */ " + Q_ORDERED)
    expect_denied("cap-hint", r, ["s2"], "timeout")
    expect_elapsed("cap-hint", el, 1.95, 8)
    expect_last_scatter("cap-hint", c, S2_MISSING, deadline_ms=2000)
    c = CAP.connect()
    c.query("SET splitpoint.deadline = '30s'").raise_error()
    r, el = timed(c, Q_AGG)
    expect_denied("cap-set", r, ["s2"], "timeout")
    expect_elapsed("cap-set", el, 1.95, 8)


@test
def stopped_cold_pool_still_meets_deadline():
    """A proxy that never connected to s2: connecting to a stopped server hangs, yet the
    statement must be answered by its deadline (server_connect is 5s here)."""
    COLD.start()
    c = COLD.connect()
    r, el = timed(c, "/* splitpoint: deadline=500ms */ " + Q_ORDERED)
    expect_partial("cold-pool", r, ["s2"], "any", LIVE_IDS)
    expect_elapsed("cold-pool", el, 0.45, 3)


# ---- after SIGCONT

def all_shards_work(cid, c):
    try:
        r = c.query(SQL_ORDERED, timeout=30)
    except Exception as e:  # noqa: BLE001
        why = repr(e)
        check(False, cid, lambda: f"connection unusable: {why}")
        return
    if not check(r.error is None and ids_of(r.rows) == ALL_IDS and not warning_of(r), cid,
                 lambda: f"every shard: {describe(r)}"):
        return
    expect_last_scatter(cid, c, {s: "ok" for s in ALL4}, rows={s: ROWS_PER_SHARD for s in ALL4})
    r = c.extended("SELECT count(*) FROM t WHERE id > $1", ["-1"], timeout=30)
    check(r.error is None and r.rows == [["1200"]], cid + "-ext", lambda: describe(r))


def wait_instance_answers(limit_s=20.0):
    """After SIGCONT the postmaster first forks a backend for every connection attempt
    queued in its backlog while it was stopped (each finds its client gone); on a loaded
    2-core machine that takes longer than the proxies' 1 s server_connect. What is
    checked next is the proxies' pools, so wait for the instance itself to answer."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        r = subprocess.run(["/usr/lib/postgresql/15/bin/pg_isready", "-q", "-h", HOST, "-p", str(PRIV_PORT), "-t", "1"])
        if r.returncode == 0:
            print(f"     the private instance answers {time.monotonic() - t0:.2f} s after SIGCONT")
            return
        time.sleep(0.1)
    check(False, "sigcont", lambda: f"the private instance did not answer within {limit_s} s of SIGCONT")


@test
def sigcont_pools_healthy():
    sigcont_instance()
    wait_instance_answers()
    for proxy, c in list(CONNS):
        all_shards_work(f"after-sigcont-{proxy.name}", c)
    for p in (DENY, ALLOW, CAP, COLD):
        if p.alive():
            all_shards_work(f"after-sigcont-new-{p.name}", p.connect())


# ---- phase 2: the private instance shut down

@test
def killed_shard_reported_at_once():
    sh("pg_stop", PRIV_DIR)
    for p in (DENY, ALLOW):
        c = p.connect()
        c.query("SET splitpoint.deadline = '10s'").raise_error()
        cid = f"down-{p.name}"
        r, el = timed(c, SQL_ORDERED)
        if p is DENY:
            expect_denied(cid, r, ["s2", "s3"], "down")
        else:
            expect_partial(cid, r, ["s2", "s3"], "down", LIVE_IDS)
        expect_elapsed(cid, el, 0, 3)
        ls = expect_last_scatter(cid, c, {"s0": "ok", "s1": "ok", "s2": "error", "s3": "error"},
                                 rows=None if p is DENY else LIVE_ROWS)
        for s in ("s2", "s3"):
            el_ms = float(ls[s][3]) if s in ls else -1
            check(0 <= el_ms < 3000, cid, lambda: f"last_scatter[{s}].elapsed_ms {el_ms} for a down shard")
        r, el = timed(c, "/* splitpoint: partial=allow */ " + SQL_AGG)
        if check(r.error is None, cid + "-agg", lambda: describe(r)):
            check(r.rows == [LIVE_AGG], cid + "-agg", lambda: f"aggregate over s0+s1: {r.rows}")
        expect_elapsed(cid + "-agg", el, 0, 3)
        r = c.query("SELECT count(*) FROM t WHERE id < 2000")
        check(r.error is None and r.rows == [["600"]] and not r.notices, cid + "-subset", lambda: describe(r))
        r, el = timed_ext(c, "SELECT id FROM t WHERE id <> $1 ORDER BY id", ["-5"])
        if p is DENY:
            expect_denied(cid + "-ext", r, ["s2", "s3"], "down")
        else:
            expect_partial(cid + "-ext", r, ["s2", "s3"], "down", LIVE_IDS)
        expect_elapsed(cid + "-ext", el, 0, 3)


@test
def restarted_shard_pools_healthy():
    sh("pg_start", PRIV_DIR, str(PRIV_PORT))
    for proxy, c in list(CONNS):
        all_shards_work(f"after-restart-{proxy.name}", c)


# ------------------------------------------------------------------ main

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, checks=CHECKS, watch=lambda: PROXIES))
