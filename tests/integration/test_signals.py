#!/usr/bin/env python3
"""Signals: SIGHUP reloads the configuration (a broken file is rejected and the old
configuration stays in force), SIGTERM shuts down gracefully within timeouts.shutdown.

Against a real PostgreSQL 15 (the shared instance PG0). Scenario 1: users alice, then
bob added by a reload, then two broken files rejected; then SIGTERM while one client
is inside a transaction and another is idle: new connections are refused, the idle one
gets 57P01, the transaction can finish and commit, the proxy exits 0. Scenario 2: a
transaction that never ends does not keep the proxy alive past timeouts.shutdown.
Run by tests/run (env: PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""

import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402

import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORKDIR = sptest.workdir("signals")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

TABLE = f"sig_rows_{os.getpid()}"
SHARD = f"{{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}"


def config(users, shutdown="5s", extra=""):
    lines = "\n".join(f"  - {{ name: {u}, password: {pw} }}" for u, pw in users)
    return f"""
auth: scram-sha-256
timeouts:
  shutdown: {shutdown}
users:
{lines}
shards:
  - {SHARD}
{extra}
"""


ALICE = ("alice", "alicepw")
BOB = ("bob", "bobpw")


def setup():
    with direct() as c:
        c.query(f"DROP TABLE IF EXISTS {TABLE}").raise_error()
        c.query(f"CREATE TABLE {TABLE} (id int PRIMARY KEY)").raise_error()


def teardown():
    with direct() as c:
        c.query(f"DROP TABLE IF EXISTS {TABLE}")


def direct():
    return pgwire.connect(HOST, PG0, "app", "app", password="secret", timeout=10)


def login(p, user, timeout=10):
    return pgwire.connect(HOST, p.port, user[0], "app", password=user[1], timeout=timeout)


def can_login(p, user):
    try:
        with login(p, user) as c:
            return c.scalar("SELECT current_user") == "app"  # backend user is the shard's
    except pgwire.PgError as e:
        if e.sqlstate == "28P01":
            return False
        raise


def wait_until(cond, within, what):
    deadline = time.monotonic() + within
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        time.sleep(0.1)


REJECTED = re.compile(r"reload.*reject|reject.*reload|reload.*(fail|error)", re.I)


def rejected_count(p):
    return sum(1 for line in p.log_text().splitlines() if REJECTED.search(line))


def wait_exit(p, within):
    try:
        return p.proc.wait(within)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{p.name} still running {within}s after SIGTERM; log:\n{p.log_tail()}") from None


def assert_login_refused(p):
    """A new client must not get a session (connection refused, or an error)."""
    try:
        c = pgwire.connect(HOST, p.port, ALICE[0], "app", password=ALICE[1], timeout=5)
    except (ConnectionRefusedError, ConnectionResetError, pgwire.ConnectionClosed, TimeoutError):
        return "refused"
    except pgwire.PgError as e:
        assert e.fields.get("S") == "FATAL", e.fields
        return f"error {e.sqlstate}"
    c.close()
    raise AssertionError("a new client logged in during shutdown")


# ------------------------------------------------------------------ scenario 1

P1 = None


@test
def sighup_adds_a_user():
    global P1
    P1 = sptest.Proxy("reload", config([ALICE]), WORKDIR).start()
    assert can_login(P1, ALICE)
    assert not can_login(P1, BOB), "bob logged in before being configured"
    before = login(P1, ALICE)  # a session from before the reload
    try:
        P1.reload(config([ALICE, BOB]))
        wait_until(lambda: can_login(P1, BOB), 10, "bob can log in after SIGHUP")
        assert can_login(P1, ALICE)
        assert before.scalar("SELECT 'old session'") == "old session"
    finally:
        before.close()


@test
def sighup_with_broken_file_keeps_old_config():
    assert P1 is not None and P1.alive()
    broken = [
        # YAML syntax error
        "shards: [ { name: s0, host: 127.0.0.1\nusers: :\n  - {",
        # valid YAML, invalid configuration; also drops bob -- must not be half-applied
        config([ALICE], extra="no_such_setting: 1"),
        # no shards at all
        "auth: scram-sha-256\nusers:\n  - { name: alice, password: alicepw }\n",
    ]
    for i, text in enumerate(broken):
        n = rejected_count(P1)
        P1.reload(text, raw=True)
        wait_until(lambda: rejected_count(P1) > n or not P1.alive(), 10,
                   f"broken file #{i}: a 'reload rejected' line in the log")
        assert P1.alive(), f"proxy exited after a broken reload (#{i}); log:\n{P1.log_tail()}"
        assert can_login(P1, BOB), f"broken file #{i}: bob lost"
        assert can_login(P1, ALICE), f"broken file #{i}: alice lost"
    # the file on disk stays broken; the configuration in force has shutdown: 5s


@test
def sigterm_lets_open_transaction_finish():
    assert P1 is not None and P1.alive()
    txn = login(P1, BOB)
    idle = login(P1, ALICE)
    try:
        txn.query("BEGIN").raise_error()
        txn.query(f"INSERT INTO {TABLE} VALUES (1)").raise_error()
        assert txn.status == "T"
        assert idle.scalar("SELECT 'idle now'") == "idle now"
        time.sleep(0.2)
        t0 = time.monotonic()
        P1.proc.send_signal(signal.SIGTERM)
        # the idle client is told and closed
        try:
            t, body = idle.recv(timeout=10)
        except TimeoutError:
            raise AssertionError("idle client not closed within 10s of SIGTERM") from None
        except pgwire.ConnectionClosed:
            raise AssertionError("idle client closed without ErrorResponse 57P01") from None
        assert t == "E", (t, body)
        f = pgwire.decode_fields(body)
        assert f.get("C") == "57P01" and f.get("S") == "FATAL", f
        assert idle.is_closed(5)
        # new clients do not get in
        how = assert_login_refused(P1)
        print(f"     new connection during shutdown: {how}")
        # the transaction goes on and commits
        assert P1.alive(), "proxy exited while a transaction was open (timeouts.shutdown is 5s)"
        r = txn.query(f"INSERT INTO {TABLE} VALUES (2)")
        assert r.error is None and r.status == "T", r.error
        r = txn.query("COMMIT")
        assert r.error is None and r.tag == "COMMIT" and r.status == "I", (r.error, r.tag)
        assert time.monotonic() - t0 < 5, "test too slow to be meaningful"
        rc = wait_exit(P1, 15)
        print(f"     proxy exited {time.monotonic() - t0:.2f}s after SIGTERM")
        assert rc == 0, f"exit status {rc}; log:\n{P1.log_tail()}"
        assert txn.is_closed(5), "in-transaction client still connected after the proxy exited"
    finally:
        txn.sock.close()
        idle.sock.close()
    with direct() as c:
        rows = c.query(f"SELECT id FROM {TABLE} ORDER BY id").raise_error().rows
        assert rows == [["1"], ["2"]], rows


# ------------------------------------------------------------------ scenario 2

MARKER = f"sig_never_commits_{os.getpid()}"


@test
def sigterm_with_endless_transaction_exits_after_shutdown_timeout():
    p = sptest.Proxy("endless", config([ALICE], shutdown="2s"), WORKDIR).start()
    txn = login(p, ALICE)
    try:
        txn.query("BEGIN").raise_error()
        txn.query(f"INSERT INTO {TABLE} VALUES (99) /* {MARKER} */").raise_error()
        assert txn.status == "T"
        t0 = time.monotonic()
        p.proc.send_signal(signal.SIGTERM)
        rc = wait_exit(p, 15)
        took = time.monotonic() - t0
        print(f"     exited with {rc} after {took:.2f}s (timeouts.shutdown 2s)")
        assert took > 1.5, f"exited after {took:.2f}s without waiting for the transaction (shutdown: 2s)"
        assert rc >= 0, f"killed by signal {-rc}"
        assert txn.is_closed(5), "client still connected after the proxy exited"
    finally:
        txn.sock.close()
    # the backend that held the transaction is gone (rolled back), nothing committed
    with direct() as c:
        wait_until(lambda: c.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%{MARKER}%' "
                                    f"AND pid <> pg_backend_pid()") == "0",
                   10, "the proxy's backend inside the transaction closed")
        assert c.scalar(f"SELECT count(*) FROM {TABLE} WHERE id = 99") == "0"



@test
def scheduling_batch_covers_every_thread():
    # `scheduling: batch` (docs/configuration.md): every thread of the proxy, the workers
    # made after the setting included, runs under SCHED_BATCH and statements still run;
    # the default leaves them SCHED_OTHER.
    for value, policy in (("batch", os.SCHED_BATCH), ("normal", os.SCHED_OTHER)):
        p = sptest.Proxy(f"sched_{value}", config([ALICE], extra=f"scheduling: {value}\nworkers: 2"),
                         WORKDIR).start()
        try:
            with login(p, ALICE) as c:
                assert c.scalar("SELECT 41 + 1") == "42"
            tids = [int(t) for t in os.listdir(f"/proc/{p.proc.pid}/task")]
            policies = {t: os.sched_getscheduler(t) for t in tids}
            assert len(tids) >= 2, tids
            assert set(policies.values()) == {policy}, f"scheduling: {value}: thread policies {policies}"
        finally:
            p.stop()

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
