#!/usr/bin/env python3
"""The backend pid in session pooling (issue #45, SPEC §14): the pid a client is given
in BackendKeyData is its backend's, so that what PostgreSQL's own tools compare agrees,
while a CancelRequest with that pid and the proxy's secret still reaches the session.

One shard (a fresh database drvpid_<random> on instance 0), pool_mode: session,
pool_size 4. Through the proxy, with psycopg2 (libpq):
- get_backend_pid() (BackendKeyData) equals `SELECT pg_backend_pid()`, and the row of
  pg_stat_activity with the connection's application_name has that pid; two sessions
  have two pids, each its own;
- LISTEN/NOTIFY on the same connection: the notification's pid is that pid ("from me");
- isolationtester's check: session A holds a row lock, B's UPDATE of the row waits, and a
  third session sees pg_isolation_test_session_is_blocked(B's pid, {A's pid}) true,
  polled with a deadline; A's COMMIT lets B go on;
- a CancelRequest with the right pid and a wrong secret cancels nothing; conn.cancel()
  (that pid and the proxy's secret) cancels a pg_sleep (57014), and the session goes on
  on the same backend.
"""
# test-timeout: 120

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402

WORK = sptest.workdir("session_pid")
DBS = None
PROXY = None


def config():
    return f"""
pool_mode: session
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
  - {{ name: s0, host: {sptest.HOST}, port: {sptest.PG_PORTS[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
"""


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("drvpid")
    PROXY = sptest.Proxy("pid", config(), WORK).start()
    c = PROXY.connect(DBS.name)
    c.cursor().execute("CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0)")
    c.close()


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def one(conn, sql, params=None):
    cur = conn.cursor()
    cur.execute(sql, params)
    return cur.fetchone()[0]


@test
def backend_key_is_the_backends_pid():
    a = PROXY.connect(DBS.name, application_name="pid_a")
    b = PROXY.connect(DBS.name, application_name="pid_b")
    try:
        pa, pb = a.get_backend_pid(), b.get_backend_pid()
        assert pa != pb, (pa, pb)
        assert one(a, "SELECT pg_backend_pid()") == pa, (one(a, "SELECT pg_backend_pid()"), pa)
        assert one(b, "SELECT pg_backend_pid()") == pb
        assert one(a, "SELECT pid FROM pg_stat_activity WHERE application_name = 'pid_b'") == pb
        a.cursor().execute("LISTEN ch")
        a.cursor().execute("NOTIFY ch, 'me'")
        deadline = time.monotonic() + 10
        while not a.notifies and time.monotonic() < deadline:
            a.poll()
            time.sleep(0.02)
        assert a.notifies and a.notifies[0].pid == pa and a.notifies[0].payload == "me", (a.notifies, pa)
    finally:
        a.close()
        b.close()


@test
def isolation_tester_sees_the_wait():
    a = PROXY.connect(DBS.name)
    b = PROXY.connect(DBS.name)
    watcher = PROXY.connect(DBS.name)
    try:
        a.cursor().execute("BEGIN; UPDATE t SET v = v + 1 WHERE id = 1")
        errors = []
        waiter = threading.Thread(target=lambda: run_or_note(b, "UPDATE t SET v = v + 10 WHERE id = 1", errors))
        waiter.start()
        sql = "SELECT pg_isolation_test_session_is_blocked(%s, %s)"
        deadline = time.monotonic() + 20
        while not one(watcher, sql, (b.get_backend_pid(), [a.get_backend_pid()])):
            assert time.monotonic() < deadline, "B's wait for A's lock was never seen by its pid"
            time.sleep(0.05)
        a.cursor().execute("COMMIT")
        waiter.join(20)
        assert not waiter.is_alive() and not errors, errors
        assert one(watcher, "SELECT v FROM t WHERE id = 1") == 11
    finally:
        for c in (a, b, watcher):
            c.close()


def run_or_note(conn, sql, errors):
    try:
        conn.cursor().execute(sql)
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


@test
def cancel_by_pid_and_secret():
    c = PROXY.connect(DBS.name)
    watcher = PROXY.connect(DBS.name)
    try:
        pid = c.get_backend_pid()
        errors = []
        sleeper = threading.Thread(target=lambda: run_or_note(c, "SELECT pg_sleep(30)", errors))
        sleeper.start()
        active = ("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND query = 'SELECT pg_sleep(30)' "
                  "AND state = 'active'")
        deadline = time.monotonic() + 10
        while one(watcher, active, (pid,)) == 0:
            assert time.monotonic() < deadline, "the sleep never started on the backend of the pid given"
            time.sleep(0.05)
        # The right pid with a wrong secret cancels nothing (the key is the pair); the
        # proxy closes a cancel connection once it has sent the cancels it concerns.
        raw = pgwire.Connection.open(sptest.HOST, PROXY.port)
        raw.send(pgwire.cancel_request(pid, 12345))
        assert raw.is_closed(5)
        raw.close()
        assert one(watcher, active, (pid,)) == 1 and sleeper.is_alive(), errors
        c.cancel()
        sleeper.join(10)
        assert not sleeper.is_alive() and errors and "QueryCanceled" in errors[0], errors
        assert one(c, "SELECT pg_backend_pid()") == pid
    finally:
        watcher.close()
        c.close()


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
