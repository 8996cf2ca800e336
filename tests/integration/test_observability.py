#!/usr/bin/env python3
"""Observability and the admin console: /metrics, /healthz, /readyz, counters against a
known workload, hot keys and skew, SHOW PARTITIONS / ROUTE / SHARDS / POOLS / CLIENTS /
CONFIG, RELOAD, PAUSE / RESUME, and a real Prometheus scrape.

Two shards (the shared instances PG0 and PG1, each with a fresh database obs_<random>
made for this run and dropped at the end). One hash distribution `by_user` over 16
partitions (default placement: partitions 0-7 on s0, 8-15 on s1) for the tables
users(id bigint primary key, v int) and ledger(id, seq, v) (several rows per key); a
reference table countries. Client users: app (plain) and admin (admin: true), auth
scram-sha-256; the shards are reached as app/secret.

The expected partition of every key comes from PostgreSQL itself: a scratch table
`PARTITION BY HASH (k)` with MODULUS 16 on shard PG0 (each key's tableoid gives its
remainder).

Checks:
 1. `promtool check metrics` accepts /metrics; /healthz 200; /readyz 200 with both
    shards up, 503 naming the shard on a proxy whose second shard is a closed port.
 2. 1000 single-shard SELECTs and 10 scatter count(*): exact deltas of
    splitpoint_queries_total per route, splitpoint_partition_queries_total per partition,
    splitpoint_query_duration_seconds_count.
 2b. Every SPEC §8 metric on a fresh proxy: queries_total for all / reference / admin,
    shard_query_duration_seconds and pool_wait_seconds per shard, client_connections and
    server_connections while a statement runs, errors_total from a shard and from the
    proxy, scatter_missing_total for a timeout and an unreachable shard.
 3. A skewed workload on a fresh proxy: SHOW HOT KEYS lists the hot key first and
    splitpoint_partition_skew is what the partition counters say (>= 8 here), well above
    the main proxy's value after an even workload.
 4. SHOW PARTITIONS: 16 rows with the default placement; queries equal the metrics;
    rows_written equal the rows loaded per partition.
 4b. rows written per partition (fresh proxy, table ledger with several rows per key):
    COPY text/csv, split INSERT, ON CONFLICT DO NOTHING, UPDATE/DELETE of 3 / 0 rows,
    extended protocol (two portals in one batch), several partitions of one shard, two
    shards, keyless UPDATE, commit and rollback, reads and reference writes: SHOW
    PARTITIONS rows_written and splitpoint_partition_writes_total equal the workload.
 5. SHOW ROUTE for each routing case, and the shown statements are not executed.
 6. Admin access: app refused with 42501, wrong admin password 28P01; SHOW SHARDS /
    POOLS / CLIENTS / CONFIG (no password), RELOAD good and broken file, PAUSE / RESUME
    of one shard and of all, PAUSE of an unknown shard (22023). The audit log (SPEC
    §11): one info line per admin command with user, address and text, ADD SHARD's
    password redacted.
 7. A real Prometheus (/usr/bin/prometheus) scrapes the proxy; its value of
    splitpoint_queries_total{route="single"} matches /metrics.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 240

import http.client
import io
import json
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
import psycopg2  # noqa: E402

# ------------------------------------------------------------------ local harness helpers

HOST = sptest.HOST
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("observability")
PROXIES = sptest.PROXIES  # every proxy started (sptest.Proxy.start adds it)
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


free_port = sptest.free_port
class Proxy(sptest.Proxy):
    """One splitpoint process (tests/lib/sptest.py) with its config and log in WORKDIR."""

    def __init__(self, name, body):
        super().__init__(name, body, WORKDIR)

    def write_raw(self, text):
        self.write_config(text, raw=True)

    def start(self, timeout=15):
        """Also waits for the metrics port."""
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((HOST, self.metrics_port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: metrics not listening on {self.metrics_port}") from None
                time.sleep(0.05)

    def stop(self, timeout=20):
        return super().stop(timeout, check=True)
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

DB = f"obs_{secrets.token_hex(4)}"
APP_PW = f"app-pw-{secrets.token_hex(4)}"
ADMIN_PW = f"adm-pw-{secrets.token_hex(4)}"
SHARD_PW = "secret"
PARTS = 16
DIST = "by_user"
ROWS = 2000  # users 1..ROWS, v = 10 * id
SHARD_OF_PG = {"s0": PG0, "s1": PG1}


def proxy_config(s1_port=PG1, client_login="4s", deadline="5s"):
    return f"""
auth: scram-sha-256
timeouts:
  client_login: {client_login}
scatter:
  deadline: {deadline}
users:
  - {{ name: app, password: {APP_PW} }}
  - {{ name: admin, password: {ADMIN_PW}, admin: true }}
shards:
  - {{ name: s0, host: {HOST}, port: {PG0}, database: {DB}, user: app, password: {SHARD_PW} }}
  - {{ name: s1, host: {HOST}, port: {s1_port}, database: {DB}, user: app, password: {SHARD_PW} }}
distributions:
  - name: {DIST}
    method: hash
    partitions: {PARTS}
    tables:
      users: id
      ledger: id
reference_tables: [countries]
"""


def superuser(port, db="postgres"):
    c = psycopg2.connect(host=HOST, port=port, user="postgres", password="postgres", dbname=db,
                         connect_timeout=10)
    c.autocommit = True
    return c


def on_shard(shard, sql, args=None):
    """Runs sql directly on a shard's obs database (as the superuser); returns all rows."""
    c = superuser(SHARD_OF_PG[shard], DB)
    try:
        with c.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else []
    finally:
        c.close()


def app_conn(p, db=None):
    c = psycopg2.connect(host=HOST, port=p.port, user="app", password=APP_PW, dbname=db or DB,
                         connect_timeout=10)
    c.autocommit = True
    return c


def admin_conn(p):
    c = psycopg2.connect(host=HOST, port=p.port, user="admin", password=ADMIN_PW, dbname="splitpoint",
                         connect_timeout=10)
    c.autocommit = True
    return c


def admin(p, sql):
    """(column names, rows) of one admin command."""
    c = admin_conn(p)
    try:
        with c.cursor() as cur:
            cur.execute(sql)
            if cur.description is None:
                return [], [], cur.statusmessage
            return [d.name for d in cur.description], cur.fetchall(), cur.statusmessage
    finally:
        c.close()


def admin_dicts(p, sql):
    cols, rows, _ = admin(p, sql)
    return [dict(zip(cols, r)) for r in rows]


def http_get(port, path, timeout=15):
    c = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?$", line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metrics(p):
    status, body = http_get(p.metrics_port, "/metrics")
    assert status == 200, (status, body[:200])
    return parse_metrics(body)


def settled_metrics(p, done=None, within=10):
    """/metrics once the proxy has finished its bookkeeping: a statement's latency is
    observed right after its reply is written, so a scrape made the instant the client
    has its answer may miss the last observation. Polls until `done(m)` holds (or, without
    `done`, two scrapes 100 ms apart agree); returns the last scrape either way, so the
    caller's exact assertions still decide."""
    deadline = time.monotonic() + within
    prev = metrics(p)
    while True:
        if done is not None and done(prev):
            return prev
        if time.monotonic() > deadline:
            return prev
        time.sleep(0.1)
        cur = metrics(p)
        if done is None and cur == prev:
            return cur
        prev = cur


def mv(m, name, **labels):
    """The value of the series `name` with these labels, summed over any further labels
    (queries_total{route} over its target)."""
    want = frozenset(labels.items())
    hits = [v for (n, ls), v in m.items() if n == name and want <= ls]
    assert hits, f"no series {name}{labels} in /metrics"
    return sum(hits)


ROUTES = ["single", "multi", "all", "reference", "admin"]


def routes(m):
    return {r: mv(m, "splitpoint_queries_total", route=r) for r in ROUTES}


def partition_counts(m, name="splitpoint_partition_queries_total"):
    return [mv(m, name, distribution=DIST, partition=str(i)) for i in range(PARTS)]


PARTITION_OF = {}  # key -> hash partition, from PostgreSQL
P = None  # the main proxy


def compute_partitions(keys):
    """Each key's remainder under PARTITION BY HASH (k bigint) MODULUS 16, by PostgreSQL."""
    c = superuser(PG0, DB)
    try:
        with c.cursor() as cur:
            cur.execute("CREATE TABLE obs_scratch (k bigint) PARTITION BY HASH (k)")
            for r in range(PARTS):
                cur.execute(f"CREATE TABLE obs_scratch_{r} PARTITION OF obs_scratch "
                            f"FOR VALUES WITH (MODULUS {PARTS}, REMAINDER {r})")
            cur.execute("INSERT INTO obs_scratch SELECT unnest(%s::bigint[])", (list(keys),))
            cur.execute("SELECT k, tableoid::regclass::text FROM obs_scratch")
            for k, rel in cur.fetchall():
                PARTITION_OF[int(k)] = int(rel.rsplit("_", 1)[1])
            cur.execute("DROP TABLE obs_scratch")
    finally:
        c.close()
    assert len(PARTITION_OF) == len(set(keys))


def shard_of_key(k):
    return "s0" if PARTITION_OF[k] < PARTS // 2 else "s1"


def setup():
    global P
    for port in (PG0, PG1):
        c = superuser(port)
        try:
            with c.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DB} OWNER app")
        finally:
            c.close()
    compute_partitions(range(1, ROWS + 1001))
    P = Proxy("main", proxy_config()).start()
    c = app_conn(P)
    try:
        with c.cursor() as cur:
            cur.execute("CREATE TABLE users (id bigint PRIMARY KEY, v int)")
            cur.execute("CREATE TABLE countries (code text PRIMARY KEY, name text)")
            cur.execute("CREATE TABLE ledger (id bigint NOT NULL, seq int NOT NULL, v int, PRIMARY KEY (id, seq))")
            cur.execute("INSERT INTO countries (code, name) VALUES ('jp', 'Japan'), ('us', 'United States')")
            for start in range(1, ROWS + 1, 500):
                values = ", ".join(f"({k}, {10 * k})" for k in range(start, min(start + 500, ROWS + 1)))
                cur.execute(f"INSERT INTO users (id, v) VALUES {values}")
                assert cur.rowcount == min(500, ROWS + 1 - start), cur.rowcount
    finally:
        c.close()
    # the rows are where the default placement says
    for shard in ("s0", "s1"):
        ids = sorted(r[0] for r in on_shard(shard, "SELECT id FROM users"))
        want = sorted(k for k in range(1, ROWS + 1) if shard_of_key(k) == shard)
        assert ids == want, f"{shard} holds {len(ids)} rows, expected {len(want)} (placement)"
        assert on_shard(shard, "SELECT count(*) FROM countries") == [(2,)]


def teardown():
    for p in PROXIES:
        try:
            p.stop()
        except Exception as e:  # noqa: BLE001
            print(f"teardown: {p.name}: {e}")
    for port in (PG0, PG1):
        try:
            c = superuser(port)
            try:
                with c.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001
            print(f"teardown: drop {DB} on {port}: {e}")


def wait_until(cond, within, what):
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        time.sleep(0.2)


# ------------------------------------------------------------------ 1. HTTP endpoints

@test
def http_endpoints_and_promtool():
    status, body = http_get(P.metrics_port, "/metrics")
    assert status == 200, status
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"promtool check metrics exit {r.returncode}:\n{r.stdout}{r.stderr}"
    for name in ("splitpoint_client_connections", "splitpoint_server_connections", "splitpoint_queries_total",
                 "splitpoint_query_duration_seconds", "splitpoint_shard_query_duration_seconds",
                 "splitpoint_scatter_missing_total", "splitpoint_partition_queries_total",
                 "splitpoint_errors_total", "splitpoint_pool_wait_seconds", "splitpoint_config_reloads_total"):
        assert f"# TYPE {name} " in body, f"/metrics has no TYPE line for {name}"

    status, body = http_get(P.metrics_port, "/healthz")
    assert status == 200, (status, body)
    status, body = http_get(P.metrics_port, "/readyz")
    assert status == 200, f"/readyz with both shards up: {status} {body!r}"

    bad = Proxy("bad-shard", proxy_config(s1_port=free_port())).start()
    try:
        status, body = http_get(bad.metrics_port, "/healthz")
        assert status == 200, (status, body)
        status, body = http_get(bad.metrics_port, "/readyz")
        assert status == 503, f"/readyz with s1 on a closed port: {status} {body!r}"
        assert "s1" in body and "s0" not in body, f"/readyz body should name s1 (only): {body!r}"
    finally:
        assert bad.stop() == 0


# ------------------------------------------------------------------ 2. counters vs workload

@test
def counters_match_known_workload():
    rnd = random.Random(20240601)
    keys = [rnd.randint(1, ROWS) for _ in range(1000)]
    expect = [0] * PARTS
    for k in keys:
        expect[PARTITION_OF[k]] += 1

    c = app_conn(P)
    try:
        cur = c.cursor()
        dur = "splitpoint_query_duration_seconds_count"
        m0 = settled_metrics(P)
        for k in keys:
            cur.execute("SELECT v FROM users WHERE id = %s", (k,))
            assert cur.fetchall() == [(10 * k,)], k
        m1 = settled_metrics(P, lambda m: mv(m, dur, route="single") - mv(m0, dur, route="single") >= 1000)
        for _ in range(10):
            cur.execute("SELECT count(*) FROM users")
            assert cur.fetchall() == [(ROWS,)]
        m2 = settled_metrics(P, lambda m: mv(m, dur, route="multi") - mv(m1, dur, route="multi") >= 10)
    finally:
        c.close()

    r0, r1, r2 = routes(m0), routes(m1), routes(m2)
    d1 = {r: r1[r] - r0[r] for r in ROUTES}
    d2 = {r: r2[r] - r1[r] for r in ROUTES}
    assert d1 == {"single": 1000, "multi": 0, "all": 0, "reference": 0, "admin": 0}, \
        f"queries_total deltas after 1000 single-shard SELECTs: {d1}"
    assert d2 == {"single": 0, "multi": 10, "all": 0, "reference": 0, "admin": 0}, \
        f"queries_total deltas after 10 scatter SELECTs: {d2}"

    dd1 = {r: mv(m1, dur, route=r) - mv(m0, dur, route=r) for r in ROUTES}
    dd2 = {r: mv(m2, dur, route=r) - mv(m1, dur, route=r) for r in ROUTES}
    assert dd1 == {"single": 1000, "multi": 0, "all": 0, "reference": 0, "admin": 0}, \
        f"{dur} deltas after 1000 single-shard SELECTs: {dd1}"
    assert dd2 == {"single": 0, "multi": 10, "all": 0, "reference": 0, "admin": 0}, \
        f"{dur} deltas after 10 scatter SELECTs: {dd2}"

    p0, p1, p2 = partition_counts(m0), partition_counts(m1), partition_counts(m2)
    single_part = [p1[i] - p0[i] for i in range(PARTS)]
    assert single_part == expect, \
        f"per-partition deltas for the single-shard queries: got {single_part}, expected (PostgreSQL) {expect}"
    scatter_part = [p2[i] - p1[i] for i in range(PARTS)]
    # a keyless scatter counts either no partition or every partition it covers, equally
    assert len(set(scatter_part)) == 1 and scatter_part[0] in (0, 10), \
        f"per-partition deltas for 10 keyless scatters: {scatter_part}"
    total = sum(p2) - sum(p0)
    assert total == 1000 + sum(scatter_part), total
    print(f"     scatter contributes {scatter_part[0]:.0f} per partition over 10 statements; "
          f"single-shard partition deltas {[int(x) for x in single_part]}")
    # writes untouched by reads
    assert partition_counts(m2, "splitpoint_partition_writes_total") == \
        partition_counts(m0, "splitpoint_partition_writes_total")


# ------------------------------------------------------------------ 2b. every SPEC §8 metric moves as it should

@test
def spec_metrics_follow_the_workload():
    """SPEC §8, each metric against what was done, on a fresh proxy: queries_total for
    the routes all / reference / admin too; shard_query_duration_seconds and
    pool_wait_seconds per shard; client_connections and server_connections while a
    statement runs and after; errors_total from a shard and from the proxy;
    scatter_missing_total for shards past the deadline and one that is down."""
    q = Proxy("spec8", proxy_config()).start()
    k0, k1 = key_on("s0"), key_on("s1")
    conns = []
    try:
        conns = [app_conn(q) for _ in range(3)]
        cur = conns[0].cursor()
        dur = "splitpoint_query_duration_seconds_count"
        m0 = settled_metrics(q)
        cur.execute("SELECT * FROM countries WHERE code = 'jp'")  # reference
        cur.fetchall()
        cur.execute("CREATE TABLE obs_spec8 (a int)")  # all
        cur.execute("DROP TABLE obs_spec8")  # all
        cur.execute("UPDATE users SET v = v WHERE v < 0")  # all (no key)
        admin(q, "SHOW SHARDS")  # admin
        admin(q, "SHOW POOLS")  # admin
        m1 = settled_metrics(q, lambda m: mv(m, dur, route="all") - mv(m0, dur, route="all") >= 3)
        d = {r: routes(m1)[r] - routes(m0)[r] for r in ROUTES}
        assert d == {"single": 0, "multi": 0, "all": 3, "reference": 1, "admin": 2}, f"queries_total deltas: {d}"
        # the statements on every shard are timed per shard too, with their pool waits
        sq, pw = "splitpoint_shard_query_duration_seconds_count", "splitpoint_pool_wait_seconds_count"
        for name in (sq, pw):
            got = {s: mv(m1, name, shard=s) - mv(m0, name, shard=s) for s in ("s0", "s1")}
            assert sum(got.values()) == 7 and min(got.values()) >= 3, \
                f"{name} deltas after 3 statements on every shard and a reference read on one: {got}"

        # per shard: 5 statements on s0, 3 on s1, each taking a backend from the pool
        for k in [k0] * 5 + [k1] * 3:
            cur.execute("SELECT v FROM users WHERE id = %s", (k,))
            assert cur.fetchall() == [(10 * k,)]
        m2 = settled_metrics(q, lambda m: mv(m, sq, shard="s1") - mv(m1, sq, shard="s1") >= 3
                             and mv(m, sq, shard="s0") - mv(m1, sq, shard="s0") >= 5)
        for name in (sq, pw):
            got = {s: mv(m2, name, shard=s) - mv(m1, name, shard=s) for s in ("s0", "s1")}
            assert got == {"s0": 5, "s1": 3}, f"{name} deltas after 5 statements on s0 and 3 on s1: {got}"

        # clients and backends: 3 idle clients; one statement running on s0
        m = settled_metrics(q, lambda m: mv(m, "splitpoint_client_connections", state="idle") == 3)
        assert (mv(m, "splitpoint_client_connections", state="idle"),
                mv(m, "splitpoint_client_connections", state="active")) == (3, 0), "3 idle app clients"
        assert mv(m, "splitpoint_server_connections", shard="s0", state="active") == 0
        done = threading.Event()

        def sleeper():
            with conns[1].cursor() as c1:
                c1.execute(f"SELECT pg_sleep(2) FROM users WHERE id = {k0}")
            done.set()

        t = threading.Thread(target=sleeper, daemon=True)
        t.start()
        m = settled_metrics(q, lambda m: mv(m, "splitpoint_client_connections", state="active") == 1, within=1.5)
        assert not done.is_set(), "pg_sleep(2) ended before the check"
        got = (mv(m, "splitpoint_client_connections", state="active"),
               mv(m, "splitpoint_client_connections", state="idle"),
               mv(m, "splitpoint_server_connections", shard="s0", state="active"),
               mv(m, "splitpoint_server_connections", shard="s1", state="active"))
        assert got == (1, 2, 1, 0), f"while one client runs a statement on s0: (active, idle clients, s0 active, " \
                                    f"s1 active backends) = {got}"
        t.join(10)
        assert done.is_set()
        m = settled_metrics(q, lambda m: mv(m, "splitpoint_client_connections", state="active") == 0)
        assert mv(m, "splitpoint_client_connections", state="idle") == 3
        assert mv(m, "splitpoint_server_connections", shard="s0", state="active") == 0
        assert mv(m, "splitpoint_server_connections", shard="s0", state="idle") >= 1

        # errors_total: one from a shard (22012), one from the proxy (SPR01)
        def errors(m, code):
            return m.get(("splitpoint_errors_total", frozenset({("sqlstate", code)})), 0)
        e0 = metrics(q)
        for sql in ("SELECT 1 / 0", "INSERT INTO users (v) VALUES (1)"):
            try:
                cur.execute(sql)
                raise AssertionError(f"{sql} succeeded")
            except psycopg2.Error:
                pass
        e1 = metrics(q)
        assert (errors(e1, "22012") - errors(e0, "22012"), errors(e1, "SPR01") - errors(e0, "SPR01")) == (1, 1), \
            "errors_total deltas for a division by zero (shard) and an INSERT without key (proxy)"

        # scatter_missing_total{reason="timeout"}: both shards sleep past the deadline. (Only
        # one slow shard would also hit the known scatter bug that marks a finished shard
        # whose rows the merge has not read yet as timed out: test_scatter_faults [allow-wide].)
        miss = "splitpoint_scatter_missing_total"

        def missing_after_failure(sql, code):
            """scatter_missing_total deltas over a statement that must fail with `code`."""
            keys = [(s, r) for s in ("s0", "s1") for r in ("timeout", "error", "unreachable")]
            before = {k: mv(metrics(q), miss, shard=k[0], reason=k[1]) for k in keys}
            try:
                cur.execute(sql)
                raise AssertionError(f"{sql} succeeded")
            except psycopg2.Error as e:
                assert e.pgcode == code, (sql, e.pgcode, e.pgerror)
            after = {k: mv(metrics(q), miss, shard=k[0], reason=k[1]) for k in keys}
            return {k: after[k] - before[k] for k in keys if after[k] != before[k]}

        delta = missing_after_failure(
            f"/* splitpoint: deadline=300ms */ SELECT id, pg_sleep(1.5) FROM users WHERE id IN ({k0}, {k1})", "SPS01")
        assert delta == {("s0", "timeout"): 1, ("s1", "timeout"): 1}, \
            f"scatter_missing_total deltas after both shards missed the deadline: {delta}"
        # reason="error": a keyless UPDATE that fails on s1 only (division by zero at k1's
        # row; on s0 it adds 1 / (a multiple of 10) = 0)
        delta = missing_after_failure(f"UPDATE users SET v = v + 1 / (v - {10 * k1})", "22012")
        assert delta == {("s1", "error"): 1}, f"scatter_missing_total deltas after a write failed on s1: {delta}"
    finally:
        for c in conns:
            c.close()
        assert q.stop() == 0

    # reason="unreachable": s1 is a closed port
    bad = Proxy("spec8-down", proxy_config(s1_port=free_port())).start()
    try:
        c = app_conn(bad)
        try:
            with c.cursor() as cur:
                cur.execute("/* splitpoint: partial=allow */ SELECT count(*) FROM users")
                n = cur.fetchall()[0][0]
                assert 0 < n < ROWS, n
        finally:
            c.close()
        m = metrics(bad)
        got = {(s, r): mv(m, "splitpoint_scatter_missing_total", shard=s, reason=r)
               for s in ("s0", "s1") for r in ("timeout", "error", "unreachable")}
        assert {k: v for k, v in got.items() if v} == {("s1", "unreachable"): 1}, got
    finally:
        assert bad.stop() == 0


# ------------------------------------------------------------------ 3. hot keys and skew

@test
def skewed_workload_hot_keys_and_skew():
    even_skew = mv(metrics(P), "splitpoint_partition_skew", distribution=DIST)
    q = Proxy("skew", proxy_config()).start()
    try:
        assert mv(metrics(q), "splitpoint_partition_skew", distribution=DIST) == 0, "skew before any traffic"
        rnd = random.Random(99)
        hot = 777
        cold = rnd.sample([k for k in range(1, ROWS + 1) if k != hot], 500)
        keys = [hot] * 1000 + cold * 2
        rnd.shuffle(keys)
        expect = [0] * PARTS
        for k in keys:
            expect[PARTITION_OF[k]] += 1
        c = app_conn(q)
        try:
            cur = c.cursor()
            for k in keys:
                cur.execute("SELECT v FROM users WHERE id = %s", (k,))
                assert cur.fetchall() == [(10 * k,)], k
        finally:
            c.close()
        m = settled_metrics(q)
        assert partition_counts(m) == expect, f"partition counters {partition_counts(m)} != {expect}"
        skew = mv(m, "splitpoint_partition_skew", distribution=DIST)
        want = max(expect) / sum(expect) * PARTS
        assert abs(skew - want) < 1e-6, f"skew gauge {skew}, busiest share x partitions = {want}"
        assert skew >= 8 - 1e-9, f"half of the traffic on one key: skew {skew} should be >= 8"
        assert even_skew < 2, f"main proxy's skew after an even workload: {even_skew}"
        print(f"     skew: even workload {even_skew:.2f}, skewed workload {skew:.2f}")

        rows = [r for r in admin_dicts(q, "SHOW HOT KEYS") if r["distribution"] == DIST]
        assert rows, "SHOW HOT KEYS: no row for the distribution"
        top = rows[0]
        assert top["key"] == str(hot), f"SHOW HOT KEYS first key {top['key']!r}, expected {hot}; rows {rows[:3]}"
        count, err = int(top["count"]), int(top["max_error"])
        assert count >= 1000 and count - err <= 1000, f"hot key count {count} (max_error {err}), true 1000"
        assert len(rows) <= 10, len(rows)
        assert abs(float(top["skew"]) - skew) < 0.01, (top["skew"], skew)
    finally:
        assert q.stop() == 0


# ------------------------------------------------------------------ 4. SHOW PARTITIONS

@test
def show_partitions_placement_and_queries():
    rows = [r for r in admin_dicts(P, "SHOW PARTITIONS") if r["distribution"] == DIST]
    m = metrics(P)
    assert len(rows) == PARTS, f"{len(rows)} rows for {DIST}"
    assert [int(r["partition"]) for r in rows] == list(range(PARTS)), [r["partition"] for r in rows]
    for r in rows:
        p = int(r["partition"])
        want = "s0" if p < PARTS // 2 else "s1"
        assert r["shard"] == want, f"partition {p} on {r['shard']}, default placement says {want}"
    got = [int(r["queries"]) for r in rows]
    assert got == [int(x) for x in partition_counts(m)], f"SHOW PARTITIONS queries {got} != metrics"


@test
def show_partitions_rows_written():
    """SPEC §7: rows written since start, per partition; setup loaded ROWS rows in 4 INSERTs
    and nothing else has written to users since."""
    rows = [r for r in admin_dicts(P, "SHOW PARTITIONS") if r["distribution"] == DIST]
    want = [0] * PARTS
    for k in range(1, ROWS + 1):
        want[PARTITION_OF[k]] += 1
    got = [int(r["rows_written"]) for r in rows]
    assert got == want, (f"SHOW PARTITIONS rows_written after loading {ROWS} rows with 4 multi-row INSERTs: "
                         f"got {got} (sum {sum(got)}), expected rows per partition {want} (sum {sum(want)})")


# ------------------------------------------------------------------ 4b. rows written per partition

def rows_written(p):
    """(SHOW PARTITIONS rows_written, splitpoint_partition_writes_total) per partition."""
    shown = [int(r["rows_written"]) for r in admin_dicts(p, "SHOW PARTITIONS") if r["distribution"] == DIST]
    return shown, [int(x) for x in partition_counts(metrics(p), "splitpoint_partition_writes_total")]


def spread(n, parts):
    """docs/metrics.md: rows a shard reports for several partitions, evenly, the
    remainder one each to the lowest-numbered partitions."""
    parts = sorted(parts)
    base, extra = divmod(n, len(parts))
    return {q: base + (1 if i < extra else 0) for i, q in enumerate(parts)}


def ledger_rows(k):
    """Rows of key k loaded by the text COPY below (seq 1..n)."""
    return k % 3 + 1


@test
def rows_written_count_real_rows():
    """SPEC §7 SHOW PARTITIONS rows written: the rows the shards report (CommandComplete),
    per partition: COPY rows split by key, UPDATE/DELETE rows (several per key here, or
    none), INSERT ... ON CONFLICT DO NOTHING only the rows inserted, extended protocol
    (two portals in one batch), multi-shard writes, transactions; reads and reference
    writes count nothing. Table ledger(id, seq) has several rows per key. A fresh proxy,
    so every counter starts at 0; after each step the counters must equal the workload
    exactly (the documented even split where one shard's count covers several partitions)."""
    w = Proxy("rows", proxy_config()).start()
    expect = [0] * PARTS
    used = {5, 8, 9, 11}

    def check(what):
        shown, metric = rows_written(w)
        assert shown == expect, f"after {what}: SHOW PARTITIONS rows_written\n {shown}, expected\n {expect}"
        assert metric == expect, f"after {what}: splitpoint_partition_writes_total\n {metric}, expected\n {expect}"

    def add(k, n):
        expect[PARTITION_OF[k]] += n

    def pick(pred=lambda k: True, lo=1, hi=200):
        k = next(k for k in range(lo, hi + 1) if k not in used and pred(k))
        used.add(k)
        return k

    c = app_conn(w)
    cur = c.cursor()
    try:
        check("start")
        # COPY text: keys 1..200, k % 3 + 1 rows each
        data = "".join(f"{k}\t{s}\t{10 * k}\n" for k in range(1, 201) for s in range(1, ledger_rows(k) + 1))
        cur.copy_expert("COPY ledger (id, seq, v) FROM STDIN", io.StringIO(data))
        assert cur.rowcount == sum(ledger_rows(k) for k in range(1, 201)), cur.rowcount
        for k in range(1, 201):
            add(k, ledger_rows(k))
        check("COPY text of 200 keys")
        # COPY csv with a header: keys 201..260, one row each
        data = "id,seq,v\n" + "".join(f"{k},1,{10 * k}\n" for k in range(201, 261))
        cur.copy_expert("COPY ledger (id, seq, v) FROM STDIN WITH (FORMAT csv, HEADER true)", io.StringIO(data))
        assert cur.rowcount == 60, cur.rowcount
        for k in range(201, 261):
            add(k, 1)
        check("COPY csv of 60 keys")
        # multi-row INSERT split over both shards
        cur.execute("INSERT INTO ledger (id, seq, v) VALUES " +
                    ", ".join(f"({k}, 1, {10 * k})" for k in range(261, 301)))
        assert cur.rowcount == 40
        for k in range(261, 301):
            add(k, 1)
        check("INSERT of 40 rows over both shards")
        # ON CONFLICT DO NOTHING: 4 rows in the statement, 2 inserted
        cur.execute("INSERT INTO ledger (id, seq, v) VALUES (5, 1, 0), (5, 2, 0), (5, 10, 0), (5, 11, 0) "
                    "ON CONFLICT DO NOTHING")
        assert cur.rowcount == 2, cur.rowcount
        add(5, 2)
        check("INSERT ... ON CONFLICT DO NOTHING inserting 2 of 4 rows")
        # UPDATE / DELETE by key: the rows the shard reports, 3 / 0 / 3
        cur.execute("UPDATE ledger SET v = v + 1 WHERE id = 8")
        assert cur.rowcount == 3
        add(8, 3)
        cur.execute("UPDATE ledger SET v = 0 WHERE id = 9 AND v < 0")
        assert cur.rowcount == 0
        cur.execute("DELETE FROM ledger WHERE id = 11")
        assert cur.rowcount == 3
        add(11, 3)
        check("UPDATE of 3 rows, UPDATE of 0 rows, DELETE of 3 rows, each by key")

        # extended protocol: one portal, then two portals in one batch (same shard)
        x = pgwire.connect(HOST, w.port, "app", DB, password=APP_PW, timeout=10)
        try:
            k = pick(lambda k: ledger_rows(k) == 3)
            r = x.extended("UPDATE ledger SET v = v + 1 WHERE id = $1", [k]).raise_error()
            assert r.results[-1].tag == "UPDATE 3", r.results[-1].tag
            add(k, 3)
            new = pick(lo=2501, hi=3000)
            r = x.extended("INSERT INTO ledger (id, seq, v) VALUES ($1, 1, 0)", [new]).raise_error()
            assert r.results[-1].tag == "INSERT 0 1", r.results[-1].tag
            add(new, 1)
            a = pick(lambda k: ledger_rows(k) == 2)
            b = pick(lambda k: ledger_rows(k) == 1 and shard_of_key(k) == shard_of_key(a))
            x.send([pgwire.parse_msg("DELETE FROM ledger WHERE id = $1"), pgwire.bind_msg([a]), pgwire.execute_msg(),
                    pgwire.bind_msg([b]), pgwire.execute_msg(), pgwire.sync_msg()])
            r = x.query_collect().raise_error()
            assert [s.tag for s in r.results] == ["DELETE 2", "DELETE 1"], [s.tag for s in r.results]
            add(a, 2)
            add(b, 1)
            # an Execute followed by a simple Query before any Sync: the rows are the portal's
            k = pick(lambda k: ledger_rows(k) == 2 and shard_of_key(k) == shard_of_key(a))
            x.send([pgwire.parse_msg("UPDATE ledger SET v = v + 1 WHERE id = $1"), pgwire.bind_msg([k]),
                    pgwire.execute_msg(), pgwire.query_msg(f"SELECT v FROM ledger WHERE id = {a}")])
            r = x.query_collect().raise_error()
            assert [s.tag for s in r.results] == ["UPDATE 2", "SELECT 0"], [s.tag for s in r.results]
            add(k, 2)
        finally:
            x.close()
        check("extended-protocol UPDATE (3 rows), INSERT (1 row), two DELETE portals in one batch (2 + 1 rows), "
              "an UPDATE portal (2 rows) then a Query before Sync")

        # several partitions on one shard: the shard's count spread evenly (docs/metrics.md)
        a = pick(lambda k: ledger_rows(k) == 3)
        b = pick(lambda k: ledger_rows(k) == 2 and shard_of_key(k) == shard_of_key(a)
                 and PARTITION_OF[k] != PARTITION_OF[a])
        cur.execute(f"DELETE FROM ledger WHERE id IN ({a}, {b})")
        assert cur.rowcount == 5
        for q, n in spread(5, [PARTITION_OF[a], PARTITION_OF[b]]).items():
            expect[q] += n
        check(f"DELETE of 3 + 2 rows in partitions {PARTITION_OF[a]} and {PARTITION_OF[b]} of one shard")

        # keys on both shards: each shard's count goes to its own partition, exactly
        d0 = pick(lambda k: shard_of_key(k) == "s0" and ledger_rows(k) == 2)
        d1 = pick(lambda k: shard_of_key(k) == "s1" and ledger_rows(k) == 3)
        cur.execute(f"UPDATE ledger SET v = -1 WHERE id IN ({d0}, {d1})")
        assert cur.rowcount == 5
        add(d0, 2)
        add(d1, 3)
        e0 = pick(lambda k: shard_of_key(k) == "s0", 2501, 3000)
        e1 = pick(lambda k: shard_of_key(k) == "s1", 2501, 3000)
        cur.execute(f"INSERT INTO ledger (id, seq, v) VALUES ({e0}, 1, 0), ({e1}, 1, 0), ({e1}, 2, 0)")
        assert cur.rowcount == 3
        add(e0, 1)
        add(e1, 2)
        check("UPDATE of 2 + 3 rows on two shards, INSERT of 1 + 2 rows on two shards")

        # without the key: every shard, each shard's count over its partitions
        keyless = list(range(261, 301))
        cur.execute("UPDATE ledger SET v = v + 1 WHERE id BETWEEN 261 AND 300")
        assert cur.rowcount == 40
        for shard, parts in (("s0", range(0, PARTS // 2)), ("s1", range(PARTS // 2, PARTS))):
            n = sum(1 for k in keyless if shard_of_key(k) == shard)
            for q, m in spread(n, parts).items():
                expect[q] += m
        check("keyless UPDATE of 40 rows")

        # transactions: committed rows count; rolled-back ones too (as PostgreSQL's n_tup_*)
        t = pick(lambda k: ledger_rows(k) == 3)
        u = pick(lambda k: ledger_rows(k) == 2)
        c.autocommit = False
        cur.execute(f"UPDATE ledger SET v = 1 WHERE id = {t}")
        c.commit()
        add(t, 3)
        cur.execute(f"DELETE FROM ledger WHERE id = {u}")
        c.rollback()
        add(u, 2)
        c.autocommit = True
        check("committed UPDATE of 3 rows, rolled-back DELETE of 2 rows")

        # reads and reference-table writes write no partition's rows
        cur.execute("SELECT count(*) FROM ledger")
        cur.fetchall()
        cur.execute("SELECT * FROM ledger WHERE id = 7")
        cur.fetchall()
        cur.execute("UPDATE countries SET name = name WHERE code = 'jp'")
        assert cur.rowcount == 1
        check("reads and a reference-table UPDATE")
        assert sum(expect) > 500, expect
        print(f"     rows written per partition: {expect}")
    finally:
        c.close()
        assert w.stop() == 0


# ------------------------------------------------------------------ 5. SHOW ROUTE

def route(sql):
    rows = admin_dicts(P, "SHOW ROUTE " + sql)
    assert len(rows) == 1, rows
    r = rows[0]
    r["shard_list"] = [s.strip() for s in (r["shards"] or "").split(",") if s.strip()]
    return r


def key_on(shard, skip=()):
    return next(k for k in range(1, ROWS + 1) if shard_of_key(k) == shard and k not in skip)


@test
def show_route_each_case():
    users_before = {s: on_shard(s, "SELECT id, v FROM users ORDER BY id") for s in ("s0", "s1")}
    countries_before = {s: on_shard(s, "SELECT * FROM countries ORDER BY code") for s in ("s0", "s1")}
    cases = []

    # key = literal: one shard, the key's partition
    k = 42
    r = route(f"SELECT * FROM users WHERE id = {k}")
    cases.append(r)
    assert r["shard_list"] == [shard_of_key(k)], r
    assert r["partitions"] == f"{DIST}:{PARTITION_OF[k]}", r
    assert r["keys"] == str(k), r
    assert r["error"] is None, r
    assert "none" in r["merge"], r
    assert r["steps"] == "one_shard", r  # the executors the session tries (routing/dispatch.hpp)

    # IN list over two shards
    a, b = key_on("s0"), key_on("s1")
    r = route(f"SELECT * FROM users WHERE id IN ({a}, {b})")
    assert r["shard_list"] == ["s0", "s1"], r
    parts = sorted(x.strip() for x in r["partitions"].split(","))
    assert parts == sorted({f"{DIST}:{PARTITION_OF[a]}", f"{DIST}:{PARTITION_OF[b]}"}), r
    assert r["error"] is None, r

    # keyless SELECT: all shards with a merge description
    r = route("SELECT count(*) FROM users")
    assert r["shard_list"] == ["s0", "s1"], f"keyless count(*): shards {r['shards']!r} (each shard once)"
    assert r["steps"] == "scatter_read", r
    assert r["merge"] and not r["merge"].startswith("none") and "refused" not in r["merge"], r
    assert r["error"] is None, r
    r = route("SELECT id, v FROM users ORDER BY v DESC LIMIT 5")
    assert r["shard_list"] == ["s0", "s1"], f"keyless ORDER BY: shards {r['shards']!r} (each shard once)"
    assert r["merge"] and not r["merge"].startswith("none") and "refused" not in r["merge"], r

    # count(DISTINCT non-key): the combine step, its pull and combine query in the merge column
    r = route("SELECT count(DISTINCT v) FROM users")
    assert (r["merge"] or "").startswith("combine:") and "sp_combine_1" in r["merge"], r
    # FOR UPDATE with LIMIT over several shards: refused with SPC01 in the merge column
    r = route("SELECT v FROM users ORDER BY v LIMIT 1 FOR UPDATE")
    assert "SPC01" in (r["merge"] or "") and "refused" in r["merge"], r

    # multi-row INSERT across shards: split
    n0, n1 = ROWS + 101, None
    n1 = next(k for k in range(ROWS + 102, ROWS + 1000) if shard_of_key(k) != shard_of_key(n0))
    r = route(f"INSERT INTO users (id, v) VALUES ({n0}, 1), ({n1}, 2)")
    assert r["shard_list"] == ["s0", "s1"], r
    assert "split" in (r["merge"] or ""), r
    assert r["error"] is None, r

    # UPDATE without key: all shards
    r = route("UPDATE users SET v = v + 1")
    assert r["route"] == "all shards" and r["shard_list"] == ["s0", "s1"], r
    assert r["steps"] == "several_shards", r
    r = route("DELETE FROM users WHERE v > 100")
    assert r["route"] == "all shards" and r["shard_list"] == ["s0", "s1"], r

    # DDL: all shards
    r = route("CREATE TABLE obs_should_not_exist (a int)")
    assert r["route"] == "all shards" and r["shard_list"] == ["s0", "s1"], r
    r = route("DROP TABLE users")
    assert r["route"] == "all shards" and r["shard_list"] == ["s0", "s1"], r

    # reference read: any one shard
    r = route("SELECT * FROM countries WHERE code = 'jp'")
    assert r["route"] == "any shard", r
    assert "any" in (r["merge"] or ""), r

    # reference write: all shards
    r = route("INSERT INTO countries (code, name) VALUES ('zz', 'Nowhere')")
    assert r["route"] == "all shards" and r["shard_list"] == ["s0", "s1"], r

    # syntax error: error column with 42601
    r = route("SELEC * FROM users")
    assert r["route"] == "error", r
    assert (r["error"] or "").startswith("42601"), r
    assert r["steps"] == "shard_error, one_shard", r  # PostgreSQL's own error, from a shard
    r = route("BEGIN")
    assert r["steps"] == "transaction, one_shard", r

    # nothing was executed
    for s in ("s0", "s1"):
        assert on_shard(s, "SELECT id, v FROM users ORDER BY id") == users_before[s], f"users changed on {s}"
        assert on_shard(s, "SELECT * FROM countries ORDER BY code") == countries_before[s], \
            f"countries changed on {s}"
        assert on_shard(s, "SELECT to_regclass('obs_should_not_exist') IS NULL") == [(True,)], \
            f"SHOW ROUTE CREATE TABLE created the table on {s}"
    assert users_before["s0"] and users_before["s1"]


# ------------------------------------------------------------------ 6. admin access and commands

@test
def admin_access_refused():
    try:
        c = pgwire.connect(HOST, P.port, "app", "splitpoint", password=APP_PW, timeout=10)
    except pgwire.PgError as e:
        assert e.sqlstate == "42501", f"app on database splitpoint: {e.sqlstate} {e.fields}"
    else:
        c.close()
        raise AssertionError("user app (not admin) got into the admin console")
    # psycopg2 too: no session, no data
    try:
        psycopg2.connect(host=HOST, port=P.port, user="app", password=APP_PW, dbname="splitpoint",
                         connect_timeout=10).close()
        raise AssertionError("psycopg2: user app got into the admin console")
    except psycopg2.OperationalError as e:
        assert "permission denied" in str(e) or "42501" in str(e), str(e)
    try:
        c = pgwire.connect(HOST, P.port, "admin", "splitpoint", password="wrong-" + ADMIN_PW, timeout=10)
    except pgwire.PgError as e:
        assert e.sqlstate == "28P01", f"wrong admin password: {e.sqlstate} {e.fields}"
    else:
        c.close()
        raise AssertionError("admin logged in with a wrong password")


@test
def admin_show_commands():
    app = app_conn(P)  # an app client for SHOW CLIENTS
    try:
        shards = admin_dicts(P, "SHOW SHARDS")
        assert [s["shard"] for s in shards] == ["s0", "s1"], shards
        for s, port in zip(shards, (PG0, PG1)):
            assert s["port"] == str(port) and s["database"] == DB and s["user"] == "app", s
            assert s["paused"] == "no", s
        pools = admin_dicts(P, "SHOW POOLS")
        assert {p["shard"] for p in pools} == {"s0", "s1"}, pools
        for p in pools:
            assert p["database"] == DB and p["user"] == "app", p
        clients = admin_dicts(P, "SHOW CLIENTS")
        assert any(c["user"] == "app" and c["database"] == DB for c in clients), clients
        assert any(c["user"] == "admin" and c["state"] == "admin" for c in clients), clients
        cols, rows, _ = admin(P, "SHOW CONFIG")
        text = "\n".join(" ".join(str(v) for v in r) for r in rows)
        assert rows, "SHOW CONFIG is empty"
        for secret in (APP_PW, ADMIN_PW, SHARD_PW, "SCRAM-SHA-256$"):
            assert secret not in text, f"SHOW CONFIG shows a password ({secret!r}):\n{text}"
        assert DIST in text and "countries" in text, text
        # SPEC §11 audit log: each admin command once, at info, with user, client address
        # and the text; a password in ADD SHARD is not (no catalog here: it fails, but is
        # logged all the same).
        marker = f"audit{os.getpid()}"
        admin(P, f"SHOW ROUTE SELECT '{marker}'")
        try:
            admin(P, f"ADD SHARD {marker} host=127.0.0.1 port=1 password=hunter2-{marker}")
        except psycopg2.Error:
            pass
        def audit_lines():
            return [ln for ln in P.log_text().splitlines() if marker in ln]
        lines = wait_until(lambda: len(audit_lines()) >= 2 and audit_lines(), 10, "audit log lines")
        assert len(lines) == 2, lines
        assert "[info]" in lines[0] and re.search(
            r"admin command user=admin address=127\.0\.0\.1:\d+: SHOW ROUTE SELECT '" + marker + "'", lines[0]), lines
        assert "ADD SHARD " + marker + " host=127.0.0.1 port=1 password=***" in lines[1], lines
        assert "hunter2" not in P.log_text(), "the audit log shows an ADD SHARD password"
    finally:
        app.close()


def serves_reads(p):
    """The proxy still answers a single-shard read correctly."""
    c = app_conn(p)
    try:
        with c.cursor() as cur:
            cur.execute("SELECT v FROM users WHERE id = 5")
            assert cur.fetchall() == [(50,)]
    finally:
        c.close()


def config_value(p, key):
    for r in admin_dicts(p, "SHOW CONFIG"):
        if r["key"] == key:
            return r["value"]
    raise AssertionError(f"SHOW CONFIG has no {key}")


@test
def admin_reload_good_and_broken():
    m0 = metrics(P)
    ok0 = mv(m0, "splitpoint_config_reloads_total", result="success")
    bad0 = mv(m0, "splitpoint_config_reloads_total", result="failure")
    assert config_value(P, "scatter.deadline") in ("5000ms", "5s"), config_value(P, "scatter.deadline")

    P.write_config(proxy_config(deadline="4s"))
    _, _, tag = admin(P, "RELOAD")
    assert tag == "RELOAD", tag
    assert config_value(P, "scatter.deadline") in ("4000ms", "4s"), config_value(P, "scatter.deadline")
    m1 = metrics(P)
    assert mv(m1, "splitpoint_config_reloads_total", result="success") == ok0 + 1
    assert mv(m1, "splitpoint_config_reloads_total", result="failure") == bad0

    good_text = open(P.config_path).read()
    P.write_raw(good_text + "no_such_setting: 1\n")
    try:
        admin(P, "RELOAD")
        raise AssertionError("RELOAD of a broken file succeeded")
    except psycopg2.Error as e:
        assert e.pgerror and "no_such_setting" in e.pgerror, f"RELOAD error should give the reason: {e.pgerror!r}"
    P.write_raw("shards: [ { name: s0, host: 127.0.0.1\nusers: :\n  - {\n")  # YAML syntax error
    try:
        admin(P, "RELOAD")
        raise AssertionError("RELOAD of a file with a YAML syntax error succeeded")
    except psycopg2.Error:
        pass
    P.write_raw(good_text)  # leave a valid file on disk

    assert P.alive()
    serves_reads(P)
    assert config_value(P, "scatter.deadline") in ("4000ms", "4s"), "old config not kept after a broken RELOAD"
    m2 = metrics(P)
    assert mv(m2, "splitpoint_config_reloads_total", result="failure") == bad0 + 2, \
        f"failures {mv(m2, 'splitpoint_config_reloads_total', result='failure')} (before {bad0}, two broken RELOADs)"
    assert mv(m2, "splitpoint_config_reloads_total", result="success") == ok0 + 1


@test
def admin_pause_resume():
    k0, k1 = key_on("s0", skip=(5,)), key_on("s1")
    waiting = app_conn(P)
    other = app_conn(P)
    adm = admin_conn(P)
    result = {}

    def run():
        try:
            with waiting.cursor() as cur:
                cur.execute("SELECT v FROM users WHERE id = %s", (k0,))
                result["rows"] = cur.fetchall()
        except Exception as e:  # noqa: BLE001
            result["error"] = e

    t = None
    try:
        acur = adm.cursor()
        acur.execute("PAUSE s0")
        assert acur.statusmessage == "PAUSE", acur.statusmessage
        acur.execute("SHOW SHARDS")
        paused = {r[0]: r[6] for r in acur.fetchall()}
        assert paused == {"s0": "yes", "s1": "no"}, paused
        t = threading.Thread(target=run, daemon=True)
        t.start()
        time.sleep(0.5)
        # s1 is not paused: a query there runs while the one on s0 waits
        with other.cursor() as cur:
            cur.execute("SELECT v FROM users WHERE id = %s", (k1,))
            assert cur.fetchall() == [(10 * k1,)]
        assert t.is_alive(), f"query on paused shard s0 did not wait: {result}"
        acur.execute("RESUME s0")
        assert acur.statusmessage == "RESUME", acur.statusmessage
        t.join(30)
        assert not t.is_alive(), "query on s0 still waiting 30s after RESUME"
        assert "error" not in result, f"query on s0 after RESUME failed: {result.get('error')!r}"
        assert result.get("rows") == [(10 * k0,)], result
        acur.execute("SHOW SHARDS")
        assert all(r[6] == "no" for r in acur.fetchall())
    finally:
        try:
            adm.cursor().execute("RESUME")
        except Exception:  # noqa: BLE001
            pass
        if t is not None:
            t.join(10)
        for c in (waiting, other, adm):
            c.close()


@test
def admin_pause_resume_all_and_unknown_shard():
    """SPEC §7 PAUSE / RESUME without a shard act on every shard; an unknown shard is an
    error (22023) that pauses nothing."""
    adm = admin_conn(P)
    try:
        cur = adm.cursor()
        try:
            cur.execute("PAUSE nosuch")
            raise AssertionError("PAUSE of an unknown shard succeeded")
        except psycopg2.Error as e:
            assert e.pgcode == "22023" and "nosuch" in e.pgerror, (e.pgcode, e.pgerror)
        cur.execute("SHOW SHARDS")
        assert [r[6] for r in cur.fetchall()] == ["no", "no"]
        cur.execute("PAUSE")
        assert cur.statusmessage == "PAUSE", cur.statusmessage
        cur.execute("SHOW SHARDS")
        assert [r[6] for r in cur.fetchall()] == ["yes", "yes"]
        cur.execute("SHOW POOLS")
        cols = [d.name for d in cur.description]
        assert all(dict(zip(cols, r))["paused"] == "yes" for r in cur.fetchall())
        cur.execute("RESUME")
        assert cur.statusmessage == "RESUME", cur.statusmessage
        cur.execute("SHOW SHARDS")
        assert [r[6] for r in cur.fetchall()] == ["no", "no"]
    finally:
        try:
            adm.cursor().execute("RESUME")
        except Exception:  # noqa: BLE001
            pass
        adm.close()
    serves_reads(P)


# ------------------------------------------------------------------ 7. Prometheus scrape

@test
def prometheus_scrapes_the_proxy():
    d = os.path.join(WORKDIR, "prometheus")
    os.makedirs(d, exist_ok=True)
    port = free_port()
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(textwrap.dedent(f"""\
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: splitpoint
                static_configs:
                  - targets: ['{HOST}:{P.metrics_port}']
            """))
    log = open(os.path.join(d, "prometheus.log"), "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(d, 'data')}",
                             f"--web.listen-address={HOST}:{port}"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def api(path):
        try:
            status, body = http_get(port, path, timeout=5)
        except OSError:
            return None
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {proc.returncode}")
        return json.loads(body) if status == 200 else None

    def target_up():
        j = api("/api/v1/targets")
        if not j:
            return None
        return [t for t in j["data"]["activeTargets"] if t.get("health") == "up"
                and t.get("scrapeUrl", "").endswith(f":{P.metrics_port}/metrics")]

    try:
        before = mv(metrics(P), "splitpoint_queries_total", route="single")
        wait_until(target_up, 60, "prometheus target up")

        def single_series():
            j = api("/api/v1/query?" + urllib.parse.urlencode({"query": "splitpoint_queries_total"}))
            if not j or j.get("status") != "success":
                return None
            s = [x for x in j["data"]["result"]
                 if x["metric"].get("route") == "single" and x["metric"].get("target") == "primary"]
            return s or None

        series = wait_until(single_series, 30,
                            "splitpoint_queries_total{route=\"single\", target=\"primary\"} in prometheus")
        assert len(series) == 1, series
        assert series[0]["metric"].get("job") == "splitpoint", series
        prom_value = float(series[0]["value"][1])
        now = mv(metrics(P), "splitpoint_queries_total", route="single")
        assert before <= prom_value <= now, f"prometheus has {prom_value}, /metrics {before}..{now}"
        assert prom_value >= 1000, prom_value  # test 2 alone ran 1000 single-shard queries here
        print(f"     prometheus: splitpoint_queries_total{{route=\"single\"}} = {prom_value:.0f}, /metrics {now:.0f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
