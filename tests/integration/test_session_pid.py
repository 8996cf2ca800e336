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
  on the same backend;
- over two shards (a second proxy, a table hashed over both): LISTEN, NOTIFY, pg_notify()
  and pg_backend_pid() go to the catalog shard, so other sessions' notifications all
  arrive and the client's own pid is the one it was given.
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


def config(two_shards=False):
    """One shard; or two (instance 0 and 1) with a table hashed over both."""
    p0, p1 = sptest.PG_PORTS
    shard = "  - {{ name: s{i}, host: {h}, port: {p}, database: {d}, user: app, password: secret, pool_size: {n} }}\n"
    out = "pool_mode: session\nauth: scram-sha-256\nusers:\n  - { name: app, password: secret }\nshards:\n"
    if not two_shards:
        return out + shard.format(i=0, h=sptest.HOST, p=p0, d=DBS.name, n=4)
    out += "".join(shard.format(i=i, h=sptest.HOST, p=p, d=DBS.name, n=8) for i, p in enumerate((p0, p1)))
    return out + "distributions:\n  - { name: by_id, method: hash, partitions: 4, tables: { kv: id } }\n"


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


def wait_notifies(conn, n, timeout=10):
    deadline = time.monotonic() + timeout
    while len(conn.notifies) < n and time.monotonic() < deadline:
        conn.poll()
        time.sleep(0.02)
    return [(x.channel, x.payload, x.pid) for x in conn.notifies]


@test
def two_shards_notifications_and_pid():
    """Over two shards, as on one server: every NOTIFY and pg_notify() of other sessions
    reaches a LISTEN, whichever shard their earlier statements used, and the pid of the
    client's own notification and pg_backend_pid() are the pid it was given, also after
    a statement on the other shard (before: LISTEN and NOTIFY went to whichever shard the
    session was on, so notifications were lost and the pids differed)."""
    proxy = sptest.Proxy("pid2", config(two_shards=True), WORK).start()
    try:
        setup_c = proxy.connect(DBS.name)
        setup_c.autocommit = True
        setup_c.cursor().execute("CREATE TABLE kv (id int PRIMARY KEY, v int)")
        setup_c.cursor().execute("INSERT INTO kv SELECT g, 0 FROM generate_series(1, 20) g")
        setup_c.close()
        listener = proxy.connect(DBS.name)
        listener.autocommit = True
        pid = listener.get_backend_pid()
        for k in range(1, 21):  # statements on both shards first
            assert one(listener, "SELECT v FROM kv WHERE id = %s", (k,)) == 0
            assert one(listener, "SELECT pg_backend_pid()") == pid
        listener.cursor().execute("LISTEN ch")
        sent = []
        for i in range(6):
            c = proxy.connect(DBS.name)
            c.autocommit = True
            one(c, "SELECT v FROM kv WHERE id = %s", (i + 1,))
            c.cursor().execute(f"NOTIFY ch, 'n{i}'")
            c.cursor().execute("SELECT pg_notify('ch', %s)", (f"p{i}",))
            sent += [f"n{i}", f"p{i}"]
            c.close()
        got = wait_notifies(listener, len(sent))
        assert sorted(p for _, p, _ in got) == sorted(sent), (got, sent)
        assert all(x != pid for _, _, x in got), got
        one(listener, "SELECT v FROM kv WHERE id = 7")
        listener.cursor().execute("NOTIFY ch, 'me'")
        got = wait_notifies(listener, len(sent) + 1)
        assert got[-1] == ("ch", "me", pid), (got[-1], pid)
        assert one(listener, "SELECT pg_listening_channels()") == "ch"
        listener.close()
    finally:
        proxy.stop()


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
