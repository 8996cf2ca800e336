#!/usr/bin/env python3
"""Transaction pooling and session mode through splitpoint, with psycopg2 clients and
raw protocol clients (tests/lib/pgwire.py). Each group starts its own proxy (pool_size
2 unless said otherwise) in front of the shared instance pg0; the backend-restart group
uses a private PostgreSQL instance so restarting it disturbs nobody.

  - six clients interleaved over two backends: every client's transactions really move
    between backends (pg_backend_pid), and never more than pool_size backends exist;
  - protocol-level named prepared statements (Parse once, Bind/Execute in later
    transactions on other backends, Describe, Close then re-Parse with another text),
    and the unnamed statement across round trips;
  - session state: application_name from the startup packet; SET search_path,
    statement_timeout, TimeZone, DateStyle and a custom GUC visible (SHOW) in later
    transactions on any backend and not leaking to other clients; SET inside a rolled
    back transaction not kept, SET LOCAL not kept; SET in a committed transaction
    (first statement, later statement, inside one multi-statement query) kept; a SET
    sent together with other statements in one Query carried over without them (the
    other statements must not run again on the next backend); RESET, RESET ALL; SET
    ROLE stays with its client (not on the backend for the next one, nor at a login);
  - LISTEN pins the session: a NOTIFY from another client arrives by itself;
  - a client that vanishes mid-transaction, in a failed transaction or mid-COPY FROM
    STDIN leaves no backend idle in transaction, no partial data, no lost pool slot;
  - the PostgreSQL behind the proxy restarts: existing and new clients (including
    their prepared statements and SETs) work again without restarting the proxy, and
    while it is down a query fails with an error instead of hanging;
  - session mode: one backend per session for its lifetime; the next session on that
    backend sees none of the previous one's temp tables, settings or statements.
Run by tests/run (PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR; PYTHONPATH=tests/lib).
"""
# test-timeout: 300

import contextlib
import faulthandler
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
PG_SH = os.path.join(sptest.SP_ROOT, "tests/lib/pg.sh")
WORK = sptest.workdir("test_transaction_pooling")


# ------------------------------------------------------------------ helpers: proxy and PostgreSQL

class Proxy(sptest.Proxy):
    """splitpoint in front of one PostgreSQL, users app/secret; used with `with`."""

    def __init__(self, name: str, pg_port: int = PG0, pool_size: int = 2, mode: str = "transaction",
                 extra: str = ""):
        super().__init__(name, f"pool_mode: {mode}\nauth: scram-sha-256\n"
                               "users:\n  - { name: app, password: secret }\n"
                               f"shards:\n  - {{ name: s0, host: {HOST}, port: {pg_port}, database: app, "
                               f"pool_size: {pool_size} }}\n{extra}", WORK)

    # clients
    def psql(self, **kw):
        """A psycopg2 connection through the proxy (autocommit: explicit BEGIN/COMMIT)."""
        return self.connect("app", sslmode="disable", **kw)

    def raw(self, **params) -> pgwire.Connection:
        return pgwire.connect(HOST, self.port, "app", "app", password="secret", timeout=15, **params)


def direct(port: int = PG0, dbname: str = "app"):
    """A superuser connection straight to PostgreSQL, to see what the proxy really did."""
    return sptest.superuser(port, dbname)


@contextlib.contextmanager
def made_directly(drop, *make):
    """Objects a test needs, made straight on PostgreSQL (`drop`, then `make`), and
    dropped again after it, however it ends."""
    with direct() as d:
        for sql in (drop,) + make:
            q(d, sql)
    try:
        yield
    finally:
        with direct() as d:
            q(d, drop)


def q(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None


def one(conn, sql, params=None):
    return q(conn, sql, params)[0][0]


def wait_until(what: str, fn, timeout: float = 15.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def app_backends(port: int = PG0) -> list[tuple]:
    """(pid, state, application_name) of app's backends in database app."""
    with direct(port) as d:
        return q(d, "SELECT pid, state, application_name FROM pg_stat_activity "
                    "WHERE usename = 'app' AND datname = 'app' AND backend_type = 'client backend'")


def idle_in_transaction(port: int = PG0) -> list[tuple]:
    return [b for b in app_backends(port) if (b[1] or "").startswith("idle in transaction")]


# ------------------------------------------------------------------ tests

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


class Holder:
    """Keeps one backend busy: BEGIN + a statement on its own client."""

    def __init__(self, conn):
        self.conn = conn
        self.pid = None

    def __enter__(self):
        q(self.conn, "BEGIN")
        self.pid = one(self.conn, "SELECT pg_backend_pid()")
        return self

    def __exit__(self, *exc):
        q(self.conn, "COMMIT")


def elsewhere(h1, h2, last_pid, fn):
    """Runs fn() (which must run its statements in one transaction or one round trip)
    while backend `last_pid` is held by another client, so that with pool_size 2 fn
    lands on the other backend. h1 and h2 are two other clients (psycopg2)."""
    q(h1, "BEGIN")
    p1 = one(h1, "SELECT pg_backend_pid()")
    if p1 == last_pid:
        try:
            return fn()
        finally:
            q(h1, "COMMIT")
    # h1 got the other backend: park h2 on last_pid, then free h1's for fn.
    q(h2, "BEGIN")
    one(h2, "SELECT pg_backend_pid()")
    q(h1, "COMMIT")
    try:
        return fn()
    finally:
        q(h2, "COMMIT")


@test
def interleaved_clients_move_between_backends():
    with Proxy("interleave") as p:
        clients = [p.psql(application_name=f"tp_client_{i}") for i in range(6)]
        pids_by_client = {i: set() for i in range(6)}
        all_pids = set()
        last = {}

        def txn(c):
            q(c, "BEGIN")
            pid = one(c, "SELECT pg_backend_pid()")
            assert one(c, "SELECT pg_backend_pid()") == pid, "backend changed inside a transaction"
            q(c, "COMMIT")
            return pid

        for step in range(36):
            i = step % 6
            c = clients[i]
            if (step // 6) % 2:
                h1, h2 = clients[(i + 1 + step // 6) % 6], clients[(i + 2 + step // 6) % 6]
                if h1 is c or h2 is c:
                    h1, h2 = clients[(i + 3) % 6], clients[(i + 4) % 6]
                pid = elsewhere(h1, h2, last[i], lambda: txn(c))
                assert pid != last[i], f"client {i} stayed on backend {pid} although it was held by another"
            else:
                pid = one(c, "SELECT pg_backend_pid()")
            last[i] = pid
            pids_by_client[i].add(pid)
            all_pids.add(pid)
            assert one(c, "SHOW application_name") == f"tp_client_{i}"
        moved = [i for i, s in pids_by_client.items() if len(s) >= 2]
        assert len(moved) == 6, f"clients that never changed backend: {pids_by_client}"
        assert len(all_pids) == 2, f"pool_size 2 but backends {all_pids}"
        live = app_backends()
        assert len([b for b in live if b[0] in all_pids]) == 2, live
        # Two transactions at once from two threads, many times: still only 2 backends.
        errors = []

        def work(conn, n):
            try:
                for k in range(n):
                    q(conn, "BEGIN")
                    all_pids.add(one(conn, "SELECT pg_backend_pid()"))
                    q(conn, "SELECT pg_sleep(0.001)")
                    q(conn, "COMMIT")
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work, args=(c, 30)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert len(all_pids) == 2, f"pool_size 2 but backends {all_pids}"
        for c in clients:
            c.close()


@test
def one_backend_shared_by_every_worker_thread():
    # Clients are spread over the worker threads; a pooled connection is moved to the
    # thread of the session that takes it (Backend::move_to) and handed to waiters on
    # any thread. With pool_size 1 and four workers, the one backend moves between
    # threads on almost every transaction, and eight clients queue for it at once.
    with Proxy("workers", pool_size=1, extra="workers: 4\n") as p:
        clients = [p.psql(application_name=f"tp_worker_{i}") for i in range(8)]
        pids = {one(c, "SELECT pg_backend_pid()") for c in clients}
        assert len(pids) == 1, f"pool_size 1 but backends {pids}"
        errors = []

        def work(i, conn, n):
            try:
                for k in range(n):
                    if k % 3 == 2:
                        q(conn, "BEGIN")
                        assert one(conn, "SELECT %s::int * 2", (k,)) == 2 * k
                        assert one(conn, "SHOW application_name") == f"tp_worker_{i}"
                        q(conn, "COMMIT")
                    else:
                        assert one(conn, "SELECT %s::int + %s::int", (i, k)) == i + k
                    pids.add(one(conn, "SELECT pg_backend_pid()"))
            except Exception as e:  # noqa: BLE001
                errors.append(f"client {i}: {e!r}")

        threads = [threading.Thread(target=work, args=(i, c, 150)) for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert len(pids) == 1, f"pool_size 1 but backends {pids}"
        # Protocol-level statements too, from a raw client on yet another thread.
        r = p.raw()
        r.send([pgwire.parse_msg("SELECT $1::int + 1", "s1"), pgwire.sync_msg()])
        assert r.query_collect().error is None
        for k in range(20):
            q(clients[k % 8], "SELECT 1")  # the backend was just on another thread
            r.send([pgwire.bind_msg([k], statement="s1"), pgwire.execute_msg(), pgwire.sync_msg()])
            res = r.query_collect()
            assert res.error is None, res.error
            assert res.rows == [[str(k + 1)]], res.rows
        assert len([b for b in app_backends() if b[0] in pids]) == 1
        for c in clients:
            c.close()


@test
def protocol_named_prepared_statements():
    with Proxy("prepared") as p:
        others = [p.psql() for _ in range(3)]
        c = p.raw()
        # Parse once, in its own round trip.
        c.send([pgwire.parse_msg("SELECT $1::int * 10, pg_backend_pid()", "stmt1"), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None, r.error
        assert [t for t, _ in r.messages] == ["1", "Z"], r.messages
        pids = set()
        last_pid = int(c.scalar("SELECT pg_backend_pid()"))

        def run_stmt1(i):
            c.send([pgwire.bind_msg([i], statement="stmt1"), pgwire.execute_msg(), pgwire.sync_msg()])
            return c.query_collect()

        for i in range(24):
            # Other clients use the backends in between; every other time the backend
            # used last is held by another client.
            q(others[i % 3], "SELECT 1")
            if i % 2:
                r = elsewhere(others[(i + 1) % 3], others[(i + 2) % 3], last_pid, lambda: run_stmt1(i))
            else:
                r = run_stmt1(i)
            assert r.error is None, f"Bind/Execute stmt1 in transaction {i}: {r.error}"
            assert r.rows[0][0] == str(i * 10), r.rows
            if i % 2:
                assert int(r.rows[0][1]) != last_pid, "stmt1 ran on a backend held by another client"
            last_pid = int(r.rows[0][1])
            pids.add(last_pid)
        assert len(pids) == 2, f"stmt1 ran on backends {pids}: pooling not exercised"

        # Describe in a later transaction, on whichever backend.
        with Holder(others[0]):
            c.send([pgwire.describe_msg("S", "stmt1"), pgwire.sync_msg()])
            r = c.query_collect()
        assert r.error is None, r.error
        kinds = [t for t, _ in r.messages]
        assert kinds == ["t", "T", "Z"], kinds
        assert pgwire.decode_parameter_description(r.messages[0][1]) == [23], r.messages[0]

        # A second statement, both used in one pipeline.
        c.send([pgwire.parse_msg("SELECT upper($1::text)", "stmt2"), pgwire.sync_msg()])
        assert c.query_collect().error is None
        c.send([pgwire.bind_msg([3], statement="stmt1"), pgwire.execute_msg(),
                pgwire.bind_msg(["abc"], statement="stmt2"), pgwire.execute_msg(), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None, r.error
        assert [res.rows for res in r.results] == [[["30", r.results[0].rows[0][1]]], [["ABC"]]], r.results

        # Close, then the name is gone; re-Parse with another text works on any backend.
        c.send([pgwire.close_msg("S", "stmt1"), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None and [t for t, _ in r.messages] == ["3", "Z"], r.messages
        c.send([pgwire.bind_msg([1], statement="stmt1"), pgwire.execute_msg(), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.sqlstate == "26000", f"Bind of a closed statement: {r.error}"
        c.send([pgwire.parse_msg("SELECT $1::text || '-v2', pg_backend_pid()", "stmt1"), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None, f"re-Parse after Close: {r.error}"
        pids = set()
        last_pid = int(c.scalar("SELECT pg_backend_pid()"))

        def run_v2(i):
            c.send([pgwire.bind_msg([f"x{i}"], statement="stmt1"), pgwire.execute_msg(), pgwire.sync_msg()])
            return c.query_collect()

        for i in range(8):
            if i % 2:
                r = elsewhere(others[i % 3], others[(i + 1) % 3], last_pid, lambda: run_v2(i))
            else:
                r = run_v2(i)
            assert r.error is None, r.error
            assert r.rows[0][0] == f"x{i}-v2", f"stale statement text after re-Parse: {r.rows}"
            last_pid = int(r.rows[0][1])
            pids.add(last_pid)
        assert len(pids) == 2, pids
        # stmt2 untouched by all that.
        c.send([pgwire.bind_msg(["z"], statement="stmt2"), pgwire.execute_msg(), pgwire.sync_msg()])
        assert c.query_collect().rows == [["Z"]]

        # A second client may use the same statement names with other texts.
        c2 = p.raw()
        c2.send([pgwire.parse_msg("SELECT 'client two'", "stmt1"), pgwire.sync_msg()])
        assert c2.query_collect().error is None
        for conn, want in ((c, "y-v2"), (c2, "client two"), (c, "y-v2")):
            params = ["y"] if conn is c else []
            conn.send([pgwire.bind_msg(params, statement="stmt1"), pgwire.execute_msg(), pgwire.sync_msg()])
            r = conn.query_collect()
            assert r.error is None and r.rows[0][0] == want, (r.error, r.rows)

        # Unnamed statement: Parse in one round trip, Bind/Execute in the next.
        c.send([pgwire.parse_msg("SELECT $1::int + 100"), pgwire.sync_msg()])
        assert c.query_collect().error is None
        with Holder(others[1]):
            q(others[2], "SELECT 1")
            c.send([pgwire.bind_msg([5]), pgwire.execute_msg(), pgwire.sync_msg()])
            r = c.query_collect()
        assert r.error is None and r.rows == [["105"]], (r.error, r.rows)

        # Parse of a name that exists is an error (42P05), as in PostgreSQL, and the
        # statement keeps its text.
        c.send([pgwire.parse_msg("SELECT 'replaced'", "stmt2"), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.sqlstate == "42P05", f"Parse of an existing statement name: {r.error}"
        c.send([pgwire.bind_msg(["still"], statement="stmt2"), pgwire.execute_msg(), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None and r.rows == [["STILL"]], (r.error, r.rows)
        c.close()
        c2.close()
        for o in others:
            o.close()


SETS = {
    "search_path": ("SET search_path = tp_schema, public", "tp_schema, public"),
    "statement_timeout": ("SET statement_timeout = '12s'", "12s"),
    "TimeZone": ("SET TimeZone = 'Asia/Tokyo'", "Asia/Tokyo"),
    "DateStyle": ("SET DateStyle = 'SQL, DMY'", "SQL, DMY"),
    "myapp.x": ("SET myapp.x = 'hello world'", "hello world"),
}


@test
def session_parameters_follow_the_client():
    with direct() as d:
        q(d, "DROP SCHEMA IF EXISTS tp_schema CASCADE")
        q(d, "CREATE SCHEMA tp_schema AUTHORIZATION app")
        q(d, "CREATE TABLE tp_schema.marker (v text)")
        q(d, "INSERT INTO tp_schema.marker VALUES ('in tp_schema')")
        q(d, "GRANT SELECT ON tp_schema.marker TO app")
        defaults = {name: one(d, f"SHOW {name}") for name in SETS if "." not in name}
    try:
        with Proxy("session-state") as p:
            x = p.psql(application_name="tp_setter")
            others = [p.psql(application_name=f"tp_other_{i}") for i in range(3)]
            for sql, _ in SETS.values():
                q(x, sql)

            def check_x(where):
                for name, (_, want) in SETS.items():
                    got = one(x, f"SHOW {name}")
                    assert got == want, f"{where}: SHOW {name} = {got!r}, want {want!r}"
                assert one(x, "SHOW application_name") == "tp_setter", where
                assert one(x, "SELECT v FROM marker") == "in tp_schema", where
                assert one(x, "SELECT '2024-01-02 03:04:05+00'::timestamptz::text") == "02/01/2024 12:04:05 JST"

            def check_clean(conn, i, where):
                for name, default in defaults.items():
                    got = one(conn, f"SHOW {name}")
                    assert got == default, f"{where}: SET of another client leaked: {name} = {got!r}"
                got = one(conn, "SELECT current_setting('myapp.x', true)")
                assert got in (None, ""), f"{where}: myapp.x leaked: {got!r}"
                assert one(conn, "SHOW application_name") == f"tp_other_{i}", where

            def checked_txn(where):
                q(x, "BEGIN")
                pid = one(x, "SELECT pg_backend_pid()")
                check_x(f"{where} (in a transaction on backend {pid})")
                q(x, "COMMIT")
                return pid

            pids = set()
            last_pid = one(x, "SELECT pg_backend_pid()")
            for step in range(12):
                o = others[step % 3]
                q(o, "SELECT 1")
                if step % 2:
                    pid = elsewhere(others[(step + 1) % 3], others[(step + 2) % 3], last_pid,
                                    lambda: checked_txn(f"step {step}"))
                    assert pid != last_pid
                else:
                    pid = one(x, "SELECT pg_backend_pid()")
                    check_x(f"step {step} (autocommit statements)")
                last_pid = pid
                pids.add(pid)
                check_clean(o, step % 3, f"step {step}, other client")
            assert len(pids) == 2, f"the setter ran on backends {pids}: pooling not exercised"

            # SET in a transaction that rolls back is not kept; SET LOCAL is never kept.
            q(x, "BEGIN")
            q(x, "SET myapp.x = 'rolled back'")
            q(x, "SET search_path = public")
            q(x, "SET LOCAL statement_timeout = '1min'")
            assert one(x, "SHOW myapp.x") == "rolled back", "SET inside a transaction not visible in it"
            q(x, "ROLLBACK")
            q(x, "BEGIN")
            q(x, "SET LOCAL TimeZone = 'UTC'")
            q(x, "COMMIT")
            # A transaction that fails and is rolled back loses its SET too.
            q(x, "BEGIN")
            q(x, "SET DateStyle = 'ISO, MDY'")
            try:
                q(x, "SELECT 1/0")
            except psycopg2.Error:
                pass
            q(x, "ROLLBACK")
            last_pid = one(x, "SELECT pg_backend_pid()")
            for step in range(6):
                if step % 2:
                    last_pid = elsewhere(others[step % 3], others[(step + 1) % 3], last_pid,
                                         lambda: checked_txn(f"after rollback, step {step}"))
                else:
                    check_x(f"after rollback, step {step}")

            # A multi-statement query that sets and reads.
            r = q(x, "SET myapp.z = 'multi'; SELECT current_setting('myapp.z')")
            assert r == [("multi",)], r
            assert one(x, "SHOW myapp.z") == "multi"

            # RESET of one parameter, then RESET ALL.
            q(x, "RESET statement_timeout")
            with Holder(others[0]):
                assert one(x, "SHOW statement_timeout") == defaults["statement_timeout"]
                assert one(x, "SHOW TimeZone") == "Asia/Tokyo"
            q(x, "RESET ALL")

            def check_reset(where):
                q(x, "BEGIN")
                pid = one(x, "SELECT pg_backend_pid()")
                for name, default in defaults.items():
                    got = one(x, f"SHOW {name}")
                    assert got == default, f"after RESET ALL, {where}: {name} = {got!r}"
                for name in ("myapp.x", "myapp.z"):
                    got = one(x, f"SELECT current_setting('{name}', true)")
                    assert got in (None, ""), f"after RESET ALL, {where}: {name} = {got!r}"
                # As in PostgreSQL, RESET ALL goes back to the startup packet's values.
                assert one(x, "SHOW application_name") == "tp_setter", \
                    f"RESET ALL lost the startup application_name ({where})"
                q(x, "COMMIT")
                return pid

            pids = set()
            last_pid = one(x, "SELECT pg_backend_pid()")
            for step in range(6):
                if step % 2:
                    last_pid = elsewhere(others[step % 3], others[(step + 1) % 3], last_pid,
                                         lambda: check_reset(f"step {step}"))
                else:
                    last_pid = check_reset(f"step {step}")
                pids.add(last_pid)
            assert len(pids) == 2, pids
            # And new SETs after RESET ALL work as before.
            q(x, "SET TimeZone = 'America/New_York'")
            with Holder(others[1]):
                assert one(x, "SHOW TimeZone") == "America/New_York"
            assert one(x, "SHOW TimeZone") == "America/New_York"
            x.close()
            for o in others:
                o.close()
    finally:
        with direct() as d:
            q(d, "DROP SCHEMA IF EXISTS tp_schema CASCADE")


@test
def set_in_committed_transaction_is_kept():
    with Proxy("set-in-transaction") as p:
        x = p.psql()
        others = [p.psql() for _ in range(2)]
        # SET as the first statement of a transaction, and after another statement.
        q(x, "BEGIN")
        q(x, "SET myapp.first = 'committed 1'")
        q(x, "COMMIT")
        q(x, "BEGIN")
        q(x, "SELECT 1")
        q(x, "SET myapp.later = 'committed 2'")
        q(x, "SET LOCAL myapp.local = 'not kept'")
        q(x, "COMMIT")
        # In one multi-statement query; and outside a transaction after another statement.
        q(x, "BEGIN; SET myapp.multi = 'committed 3'; COMMIT")
        q(x, "SELECT 1; SET myapp.after_select = 'kept 4'")

        def check(where):
            q(x, "BEGIN")
            pid = one(x, "SELECT pg_backend_pid()")
            names = ("first", "later", "multi", "after_select", "local")
            got = [one(x, f"SELECT current_setting('myapp.{n}', true)") for n in names]
            q(x, "COMMIT")
            assert got[:4] == ["committed 1", "committed 2", "committed 3", "kept 4"] and got[4] in (None, ""), \
                f"SETs on backend {pid} ({where}): " + ", ".join(f"myapp.{n} = {v!r}" for n, v in zip(names, got))
            return pid

        last_pid = check("same backend")
        pids = {last_pid}
        for step in range(4):
            last_pid = elsewhere(others[0], others[1], last_pid, lambda: check(f"other backend, step {step}"))
            pids.add(last_pid)
        assert len(pids) == 2, pids
        for c in [x] + others:
            c.close()


@test
def set_with_other_statements_in_one_query_replays_only_the_set():
    # The proxy carries SETs to other backends; it must never carry the statements that
    # came with them in the same Query message (that would run them again).
    with made_directly("DROP TABLE IF EXISTS tp_replay", "CREATE TABLE tp_replay (id int)", "GRANT ALL ON tp_replay TO app"):
        with Proxy("set-replay") as p:
            x = p.psql()
            others = [p.psql() for _ in range(2)]
            q(x, "SET myapp.r = 'with insert'; INSERT INTO tp_replay VALUES (1)")

            def check(where):
                q(x, "BEGIN")
                pid = one(x, "SELECT pg_backend_pid()")
                setting = one(x, "SELECT current_setting('myapp.r', true)")
                q(x, "COMMIT")
                with direct() as d:
                    rows = one(d, "SELECT count(*) FROM tp_replay")
                assert rows == 1, f"the INSERT sent with a SET ran {rows} times ({where}, backend {pid})"
                assert setting == "with insert", f"myapp.r = {setting!r} on backend {pid} ({where})"
                return pid

            last_pid = check("same backend")
            pids = {last_pid}
            for step in range(4):
                last_pid = elsewhere(others[0], others[1], last_pid, lambda: check(f"other backend, step {step}"))
                pids.add(last_pid)
            assert len(pids) == 2, pids
            for c in [x] + others:
                c.close()


@test
def set_role_stays_with_its_client():
    # RESET ALL, with which a backend takes the next client's settings, leaves the role
    # (and the session authorization): a client's SET ROLE reached every client after it
    # on that backend, at login too.
    with made_directly("DROP ROLE IF EXISTS tp_role", "CREATE ROLE tp_role", "GRANT tp_role TO app"):
        with Proxy("role", pool_size=1) as p:
            a = p.psql()
            b = p.psql()
            q(a, "SET ROLE tp_role")
            assert one(a, "SELECT current_user") == "tp_role"
            assert one(b, "SELECT current_user") == "app", "another client's SET ROLE reached this one"
            assert one(a, "SELECT current_user") == "tp_role"
            c = p.psql()
            assert one(c, "SELECT current_user") == "app", "another client's SET ROLE reached a new login"
            q(a, "RESET ROLE")
            assert one(a, "SELECT current_user") == "app"
            for x in (a, b, c):
                x.close()


@test
def listen_pins_the_session():
    with Proxy("listen") as p:
        listener = p.raw()
        r = listener.query("LISTEN tp_channel")
        assert r.error is None and r.tag == "LISTEN", (r.error, r.tag)
        pid = listener.scalar("SELECT pg_backend_pid()")
        others = [p.psql() for _ in range(3)]
        # The others share the remaining backend meanwhile.
        for i in range(9):
            q(others[i % 3], "BEGIN")
            assert one(others[i % 3], "SELECT pg_backend_pid()") != int(pid), "a pinned backend was shared"
            q(others[i % 3], "COMMIT")
        q(others[0], "NOTIFY tp_channel, 'first'")
        q(others[1], "SELECT pg_notify('tp_channel', 'second')")
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 2 and time.monotonic() < deadline:
            try:
                t, body = listener.recv(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if t == pgwire.NOTIFICATION_RESPONSE:
                r = pgwire.Reader(body)
                got.append((r.i32(), r.cstr(), r.cstr()))
        assert [(ch, payload) for _, ch, payload in got] == [("tp_channel", "first"), ("tp_channel", "second")], \
            f"notifications received without a query: {got}"
        # The session kept its backend throughout.
        assert listener.scalar("SELECT pg_backend_pid()") == pid
        # A notification arriving while the listener runs a query comes with it.
        q(others[2], "NOTIFY tp_channel, 'third'")
        time.sleep(0.2)
        r = listener.query("SELECT 1")
        kinds = [t for t, _ in r.messages]
        if "A" not in kinds:
            t, _ = listener.recv(timeout=10)
            kinds.append(t)
        assert "A" in kinds, f"third notification not delivered: {kinds}"
        assert listener.scalar("SELECT pg_backend_pid()") == pid
        listener.close()
        for o in others:
            o.close()


def _wait_no_stuck_backend(what: str):
    wait_until(f"no backend idle in transaction after {what}", lambda: not idle_in_transaction(), timeout=15)


@test
def client_vanishes_mid_transaction_or_copy():
    with made_directly("DROP TABLE IF EXISTS tp_abandon", "CREATE TABLE tp_abandon (id int, v text)", "GRANT ALL ON tp_abandon TO app"):
        with Proxy("vanish") as p:
            def count():
                with direct() as d:
                    return one(d, "SELECT count(*) FROM tp_abandon")

            # 1. BEGIN; INSERT; socket closed without Terminate.
            c = p.raw()
            assert c.query("BEGIN").status == "T"
            r = c.query("INSERT INTO tp_abandon VALUES (1, 'uncommitted')")
            assert r.error is None and r.status == "T", r.error
            c.sock.close()
            _wait_no_stuck_backend("a client closed its socket inside a transaction")
            assert count() == 0, "data of an abandoned transaction became visible"

            # 2. In a failed transaction.
            c = p.raw()
            c.query("BEGIN")
            c.query("INSERT INTO tp_abandon VALUES (2, 'uncommitted')")
            assert c.query("SELECT 1/0").status == "E"
            c.sock.close()
            _wait_no_stuck_backend("a client left in a failed transaction")

            # 3. Mid-COPY FROM STDIN (autocommit COPY): some rows sent, then gone.
            c = p.raw()
            c.send(pgwire.query_msg("COPY tp_abandon FROM STDIN"))
            c.expect(pgwire.COPY_IN_RESPONSE)
            c.send(pgwire.copy_data_msg(b"".join(b"%d\tpartial\n" % i for i in range(1000))))
            time.sleep(0.2)
            c.sock.close()
            _wait_no_stuck_backend("a client vanished during COPY FROM STDIN")
            with direct() as d:
                wait_until("the COPY backend to be gone", lambda: one(
                    d, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY tp_abandon%' "
                       "AND state <> 'idle'") == 0)
            assert count() == 0, "rows of an unfinished COPY became visible"

            # 4. Mid-COPY inside an explicit transaction, with a half-sent message.
            c = p.raw()
            c.query("BEGIN")
            c.query("INSERT INTO tp_abandon VALUES (4, 'uncommitted')")
            c.send(pgwire.query_msg("COPY tp_abandon FROM STDIN"))
            c.expect(pgwire.COPY_IN_RESPONSE)
            msg = pgwire.copy_data_msg(b"5\tpartial\n6\tpartial\n")
            c.send(msg[: len(msg) - 5])
            time.sleep(0.2)
            c.sock.close()
            _wait_no_stuck_backend("a client vanished mid-message during COPY in a transaction")
            assert count() == 0

            # 5. Reset by peer (SO_LINGER 0) mid-transaction.
            c = p.raw()
            c.query("BEGIN")
            c.query("INSERT INTO tp_abandon VALUES (7, 'uncommitted')")
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.sock.close()
            _wait_no_stuck_backend("a connection reset inside a transaction")
            assert count() == 0

            # No pool slot was lost: two transactions can still be open at once, and the
            # next clients work (and commit).
            a, b = p.psql(), p.psql()
            q(a, "BEGIN")
            q(b, "BEGIN")
            pa, pb = one(a, "SELECT pg_backend_pid()"), one(b, "SELECT pg_backend_pid()")
            assert pa != pb
            q(a, "INSERT INTO tp_abandon VALUES (100, 'committed')")
            q(b, "INSERT INTO tp_abandon VALUES (101, 'committed')")
            q(a, "COMMIT")
            q(b, "COMMIT")
            for i in range(6):
                c = p.psql()
                assert one(c, "SELECT count(*) FROM tp_abandon") == 2
                c.close()
            assert count() == 2
            a.close()
            b.close()
            assert not idle_in_transaction()


@test
def backend_restart_without_proxy_restart():
    pgdir = os.path.join(WORK, "private-pg")
    pgport = sptest.free_port()
    subprocess.run(["bash", PG_SH, "pg_start", pgdir, str(pgport)], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    try:
        with Proxy("restart", pg_port=pgport, extra="timeouts:\n  server_connect: 3s\n") as p:
            a, b = p.psql(application_name="tp_restart_a"), p.psql()
            q(a, "SET myapp.x = 'kept'")
            q(a, "CREATE TABLE IF NOT EXISTS tp_restart (id int)")
            raw = p.raw()
            raw.send([pgwire.parse_msg("SELECT $1::int + 1", "ps_restart"), pgwire.sync_msg()])
            assert raw.query_collect().error is None
            before = {one(a, "SELECT pg_backend_pid()"), one(b, "SELECT pg_backend_pid()")}

            subprocess.run(["bash", PG_SH, "pg_restart", pgdir], check=True, timeout=120,
                           stdout=subprocess.DEVNULL)

            # Idle clients just go on: their next statements run on new backends.
            after = one(a, "SELECT pg_backend_pid()")
            assert after not in before, "a backend of the old server survived its restart?"
            assert one(a, "SHOW myapp.x") == "kept", "SET lost across the server restart"
            assert one(a, "SHOW application_name") == "tp_restart_a"
            assert one(b, "SELECT 41 + 1") == 42
            q(b, "INSERT INTO tp_restart VALUES (1)")
            raw.send([pgwire.bind_msg([1], statement="ps_restart"), pgwire.execute_msg(), pgwire.sync_msg()])
            r = raw.query_collect()
            assert r.error is None and r.rows == [["2"]], f"prepared statement after restart: {r.error}"
            n = p.psql()
            assert one(n, "SELECT count(*) FROM tp_restart") == 1
            n.close()

            # While the server is down a query fails quickly with an error, the client
            # stays connected, and works again once the server is back.
            subprocess.run(["bash", PG_SH, "pg_stop", pgdir], check=True, timeout=120, stdout=subprocess.DEVNULL)
            t0 = time.monotonic()
            try:
                one(a, "SELECT 1")
            except psycopg2.Error as e:
                print(f"     while down: {type(e).__name__}: {str(e).strip()}")
            else:
                raise AssertionError("a query succeeded while the server was down")
            assert time.monotonic() - t0 < 15, "the failing query took too long"
            subprocess.run(["bash", PG_SH, "pg_start", pgdir, str(pgport)], check=True, timeout=120,
                           stdout=subprocess.DEVNULL)
            assert not a.closed, "the proxy closed an idle client because the server was down"
            assert one(a, "SELECT 'back'") == "back"
            assert one(a, "SHOW myapp.x") == "kept"
            assert one(b, "SELECT count(*) FROM tp_restart") == 1
            raw.send([pgwire.bind_msg([2], statement="ps_restart"), pgwire.execute_msg(), pgwire.sync_msg()])
            r = raw.query_collect()
            assert r.error is None and r.rows == [["3"]], f"prepared statement after stop/start: {r.error}"
            n = p.psql()
            assert one(n, "SELECT 'new client'") == "new client"
            for c in (a, b, n):
                c.close()
            raw.close()
    finally:
        subprocess.run(["bash", PG_SH, "pg_stop", pgdir], timeout=120, stdout=subprocess.DEVNULL)


@test
def session_mode_one_backend_per_session():
    with Proxy("session", mode="session") as p:
        s1, s2 = p.psql(), p.psql()
        pid1, pid2 = one(s1, "SELECT pg_backend_pid()"), one(s2, "SELECT pg_backend_pid()")
        assert pid1 != pid2
        for i in range(10):
            s = (s1, s2)[i % 2]
            want = (pid1, pid2)[i % 2]
            q(s, "BEGIN")
            assert one(s, "SELECT pg_backend_pid()") == want
            q(s, "COMMIT")
            assert one(s, "SELECT pg_backend_pid()") == want, "a session changed backend"
        # Session state of all kinds, which the next session must not see.
        for s in (s1, s2):
            q(s, "CREATE TEMP TABLE tp_temp (v text)")
            q(s, "INSERT INTO tp_temp VALUES ('secret')")
            q(s, "SET myapp.x = 'previous session'")
            q(s, "SET search_path = pg_catalog")
        s1.close()
        s2.close()
        seen = set()
        for _ in range(4):
            s = p.psql()
            pid = one(s, "SELECT pg_backend_pid()")
            seen.add(pid)
            assert pid in (pid1, pid2), f"new backend {pid}: the pool did not reuse {pid1}, {pid2}"
            assert one(s, "SELECT to_regclass('tp_temp')") is None, "temp table of a previous session visible"
            assert one(s, "SELECT current_setting('myapp.x', true)") in (None, ""), "SET of a previous session"
            assert one(s, "SHOW search_path") == '"$user", public', "search_path of a previous session"
            s.close()
        assert seen <= {pid1, pid2}
        # Protocol-level prepared statements of a session die with it.
        r1 = p.raw()
        r1.send([pgwire.parse_msg("SELECT 1", "sess_stmt"), pgwire.bind_msg(statement="sess_stmt"),
                 pgwire.execute_msg(), pgwire.sync_msg()])
        r = r1.query_collect()
        assert r.error is None and r.rows == [["1"]], (r.error, r.rows)
        r1.close()
        for _ in range(2):
            r2 = p.raw()
            assert r2.scalar("SELECT count(*) FROM pg_prepared_statements") == "0", \
                "prepared statements of a previous session left on the backend"
            r2.send([pgwire.parse_msg("SELECT 2", "sess_stmt"), pgwire.bind_msg(statement="sess_stmt"),
                     pgwire.execute_msg(), pgwire.sync_msg()])
            r = r2.query_collect()
            assert r.error is None and r.rows == [["2"]], (r.error, r.rows)
            r2.close()
        # A session that listened: the next one does not (whether or not the proxy keeps
        # that backend).
        s = p.psql()
        q(s, "LISTEN tp_session_channel")
        s.close()
        for _ in range(3):
            s = p.psql()
            assert one(s, "SELECT count(*) FROM pg_listening_channels()") == 0, "LISTEN of a previous session"
            s.close()


def main():
    faulthandler.dump_traceback_later(280, exit=True)  # a hang shows where it hung
    return sptest.run_tests(TESTS + [sptest.clean_shutdown])


if __name__ == "__main__":
    sys.exit(main())
