#!/usr/bin/env python3
"""A slow client must not hurt others, and CancelRequest must reach exactly the right
query -- against a real PostgreSQL 15 (the shared instance PG0).

Slow client: A asks for ~50 MB and does not read; B runs 200 short queries meanwhile;
the proxy applies backpressure (PostgreSQL waits in ClientWrite, the proxy's memory
stays small) and cleans up when A goes away. Cancel: psycopg2 and raw CancelRequest
with the BackendKeyData the proxy sent cancel a pg_sleep with 57014 and the session
goes on. Isolation (pool_size 1): a key of a client whose backend went back to the
pool does not cancel the next user of that backend; wrong secrets and unknown pids are
ignored.
Run by tests/run (env: PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""

import os
import random
import socket
import sys
import threading
import time

import psycopg2
import psycopg2.errors

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402

import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORKDIR = sptest.workdir("slow_client_cancel")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

MAIN = None  # pool_size 3
ISO = None   # pool_size 1


def shard(pool_size):
    return (f"{{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret, "
            f"pool_size: {pool_size} }}")


def setup():
    global MAIN, ISO
    for name, size in (("main", 3), ("iso", 1)):
        p = sptest.Proxy(name, f"""
            auth: scram-sha-256
            users:
              - {{ name: app, password: secret }}
            shards:
              - {shard(size)}
            """, WORKDIR).start()
        if name == "main":
            MAIN = p
        else:
            ISO = p


def teardown():
    errors = []
    for p in (MAIN, ISO):
        if p is not None and p.alive():
            rc = p.stop(check=True)
            if rc != 0:
                errors.append(f"{p.name} exited with {rc}")
    assert not errors, errors


def login(p, timeout=10):
    return pgwire.connect(HOST, p.port, "app", "app", password="secret", timeout=timeout)


def direct():
    return pgwire.connect(HOST, PG0, "app", "app", password="secret", timeout=10)


def activity(c, marker):
    """(state, wait_event) of the backends whose current query contains marker."""
    r = c.query(f"SELECT state, coalesce(wait_event, '') FROM pg_stat_activity "
                f"WHERE query LIKE '%{marker}%' AND pid <> pg_backend_pid()").raise_error()
    return [tuple(row) for row in r.rows]


def wait_until(cond, within, what):
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        time.sleep(0.05)


def wait_running(marker, within=10):
    with direct() as d:
        wait_until(lambda: ("active", "PgSleep") in activity(d, marker), within,
                   f"query /* {marker} */ running on PostgreSQL")


def send_cancel(port, pid, secret):
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(pgwire.cancel_request(pid, secret))
        s.settimeout(10)
        try:
            assert s.recv(1) == b"", "CancelRequest got an answer"
        except ConnectionResetError:
            pass


# ------------------------------------------------------------------ slow client

@test
def slow_client_does_not_block_others():
    marker = f"slow_reader_{os.getpid()}"
    with login(MAIN) as warm:  # pool and parameters initialised before measuring
        assert warm.scalar("SELECT 1") == "1"
    rss_before = sptest.rss_kb(MAIN.proc.pid)
    a = login(MAIN)
    a.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        # ~50 MB of rows; A never reads them
        a.send(pgwire.query_msg(f"SELECT repeat('x', 1000) || g AS filler FROM generate_series(1, 50000) g "
                                f"/* {marker} */"))
        with direct() as d:
            # Backpressure: PostgreSQL ends up blocked writing to the proxy.
            wait_until(lambda: ("active", "ClientWrite") in activity(d, marker), 30,
                       "PostgreSQL blocked in ClientWrite while the client does not read (backpressure)")
        t0 = time.monotonic()
        with login(MAIN) as b:
            for i in range(200):
                r = b.query(f"SELECT {i} AS n, 'b' AS who")
                assert r.error is None and r.rows == [[str(i), "b"]], (i, r.error, r.rows)
                if time.monotonic() - t0 > 60:
                    raise AssertionError(f"only {i} of 200 queries of B in 60s while A is stalled")
        print(f"     B: 200 queries in {time.monotonic() - t0:.2f}s while A was stalled")
        with direct() as d:
            assert ("active", "ClientWrite") in activity(d, marker), "A's query finished although A never read"
        grown = sptest.rss_kb(MAIN.proc.pid) - rss_before
        print(f"     proxy RSS grew by {grown} kB while holding back a 50 MB result")
        assert grown < 30 * 1024, f"proxy RSS grew by {grown} kB: it buffers the result of a client that does not read"
    finally:
        a.sock.close()  # unread data pending: the proxy sees a reset
    with direct() as d:
        wait_until(lambda: not any(s == "active" for s, _ in activity(d, marker)), 20,
                   "A's backend stops working for A after A is gone")
    assert MAIN.alive(), MAIN.log_tail()
    # all three pool slots are usable again (A's was freed): three transactions at once
    conns = [login(MAIN) for _ in range(3)]
    try:
        for c in conns:
            c.query("BEGIN").raise_error()
            assert c.scalar("SELECT 'slot'") == "slot"
        for c in conns:
            c.query("COMMIT").raise_error()
    finally:
        for c in conns:
            c.close()


# ------------------------------------------------------------------ cancel

@test
def psycopg2_cancel_pg_sleep():
    marker = f"pg2_cancel_{os.getpid()}"
    conn = psycopg2.connect(host=HOST, port=MAIN.port, user="app", password="secret", dbname="app",
                            connect_timeout=10)
    conn.autocommit = True
    try:
        errors = []

        def canceller():
            try:
                wait_running(marker)
                conn.cancel()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=canceller)
        t.start()
        t0 = time.monotonic()
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT pg_sleep(30) /* {marker} */")
                raise AssertionError("pg_sleep(30) was not cancelled")
            except psycopg2.errors.QueryCanceled as e:
                assert e.pgcode == "57014", e.pgcode
        took = time.monotonic() - t0
        t.join()
        assert not errors, errors
        assert took < 15, f"cancelled only after {took:.1f}s"
        with conn.cursor() as cur:
            cur.execute("SELECT 'usable after cancel'")
            assert cur.fetchone() == ("usable after cancel",)
        # inside a transaction as well
        conn.autocommit = False
        t = threading.Thread(target=canceller)
        t.start()
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            try:
                cur.execute(f"SELECT pg_sleep(30) /* {marker} */")
                raise AssertionError("pg_sleep(30) in a transaction was not cancelled")
            except psycopg2.errors.QueryCanceled:
                pass
        t.join()
        assert not errors, errors
        conn.rollback()
        with conn.cursor() as cur:
            cur.execute("SELECT 2")
            assert cur.fetchone() == (2,)
        conn.commit()
    finally:
        conn.close()


@test
def raw_cancel_request_with_proxy_key():
    marker = f"raw_cancel_{os.getpid()}"
    with login(MAIN) as c:
        assert c.pid is not None and c.secret is not None, "no BackendKeyData from the proxy"
        for kind in ("simple", "extended"):
            if kind == "simple":
                c.send(pgwire.query_msg(f"SELECT pg_sleep(30) /* {marker} */"))
            else:
                c.send([pgwire.parse_msg(f"SELECT pg_sleep($1::float8) /* {marker} */"),
                        pgwire.bind_msg(["30"]), pgwire.execute_msg(), pgwire.sync_msg()])
            wait_running(marker)
            t0 = time.monotonic()
            send_cancel(MAIN.port, c.pid, c.secret)
            r = c.query_collect(timeout=15)
            assert r.sqlstate == "57014", (kind, r.error)
            assert r.status == "I", r.status
            assert time.monotonic() - t0 < 10
            assert c.scalar(f"SELECT '{kind} ok'") == f"{kind} ok"


# ------------------------------------------------------------------ cancel isolation (pool_size 1)

def run_sleep_expect_result(b, marker, seconds, send_bad_cancel):
    """B runs pg_sleep(seconds); while it runs, send_bad_cancel() is called; B's query
    must then complete normally. Returns the backend pid B ran on."""
    t0 = time.monotonic()
    b.send(pgwire.query_msg(f"SELECT pg_backend_pid(), pg_sleep({seconds}) /* {marker} */"))
    wait_running(marker)
    send_bad_cancel()
    r = b.query_collect(timeout=seconds + 15)
    assert r.error is None, f"B's query was cancelled by someone else's CancelRequest: {r.error}"
    assert time.monotonic() - t0 >= seconds - 0.1, "B's pg_sleep returned early"
    return r.rows[0][0]


@test
def cancel_key_of_idle_client_does_not_hit_next_user_of_its_backend():
    a = login(ISO)
    b = login(ISO)
    try:
        a_backend = a.scalar("SELECT pg_backend_pid()")  # then A is idle, its backend back in the pool
        marker = f"iso_a_{os.getpid()}"
        b_backend = run_sleep_expect_result(b, marker, 3.5, lambda: send_cancel(ISO.port, a.pid, a.secret))
        assert b_backend == a_backend, ("pool_size 1 but B ran on another backend than A; "
                                        f"the scenario did not happen ({a_backend} vs {b_backend})")
        assert a.scalar("SELECT 'a fine'") == "a fine"
    finally:
        a.close()
        b.close()


@test
def cancel_with_wrong_secret_or_unknown_pid_is_ignored():
    b = login(ISO)
    try:
        marker = f"iso_bad_{os.getpid()}"
        run_sleep_expect_result(b, marker + "_secret", 3.5,
                                lambda: send_cancel(ISO.port, b.pid, b.secret ^ 0x5A5A5A5A))
        unknown = b.pid
        rnd = random.Random(b.pid)
        while unknown == b.pid:
            unknown = rnd.randint(1, 0x7FFFFFFF)
        run_sleep_expect_result(b, marker + "_pid", 3.5,
                                lambda: (send_cancel(ISO.port, unknown, b.secret),
                                         send_cancel(ISO.port, 0, 0), send_cancel(ISO.port, -1, b.secret)))
        # positive control: B's own key does cancel
        b.send(pgwire.query_msg(f"SELECT pg_sleep(30) /* {marker}_own */"))
        wait_running(marker + "_own")
        send_cancel(ISO.port, b.pid, b.secret)
        r = b.query_collect(timeout=15)
        assert r.sqlstate == "57014", r.error
        assert b.scalar("SELECT 'b after cancel'") == "b after cancel"
    finally:
        b.close()
    # the cancelled backend is not handed out again, but the one slot is still usable
    with login(ISO) as c:
        assert c.scalar("SELECT 'slot ok'") == "slot ok"
    assert ISO.alive(), ISO.log_tail()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
