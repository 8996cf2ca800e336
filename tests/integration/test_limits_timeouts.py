#!/usr/bin/env python3
"""Limits and timeouts of splitpoint, against a real PostgreSQL 15.

Each scenario gets its own proxy: timeouts.client_login 1s (silent clients, clients
that stall during authentication or trickle their startup packet), timeouts.client_idle
1s (idle sessions get FATAL 57P05; busy ones are not touched), max_client_connections
3 (the 4th login gets 53300, a slot frees when a client leaves), and
timeouts.server_connect 1s against a shard that accepts TCP connections and never
speaks (the client gets an error instead of a hang), a shard that refuses another
connection (53300, its user's connection limit) while the pool's are busy (the client
waits for one of them), a shard slow to accept a connection (a fault relay delays new
connections past server_connect: a client is served by a connection another one
releases meanwhile, and gets the timeout only when none is), and timeouts.query 1s (statements
shorter than it run, back to back too; a longer one gets 57014 from the cancel, in a
transaction block too, and the connection goes on; a write on both shards (s1 on the
second instance) too; the blackholed shard's case, where
the cancel gets no answer either, is tests/integration/test_faults.py's), and TCP
keepalive on the proxy's shard connections (ss shows the kernel's keepalive timer).
Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""

import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
from faultrelay import FaultRelay  # noqa: E402

import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORKDIR = sptest.workdir("limits_timeouts")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

USERS = """
users:
  - { name: app, password: secret }
"""
SHARD = f"{{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}"
STARTED = []
HOLE = None  # the listener that accepts and never speaks


def proxy(name, extra, shard=SHARD):
    p = sptest.Proxy(name, f"""
auth: scram-sha-256
{textwrap.dedent(extra).strip()}
{USERS.strip()}
shards:
  - {shard}
""", WORKDIR).start()
    STARTED.append(p)
    return p


class BlackHole:
    """Accepts TCP connections and keeps them open without sending a byte."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = sptest.free_port()
        self.sock.bind((HOST, self.port))
        self.sock.listen(64)
        self.conns = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(c)

    def close(self):
        self.stop = True
        for c in self.conns:
            c.close()
        self.sock.close()


def setup():
    global HOLE
    HOLE = BlackHole()


def teardown():
    errors = []
    for p in STARTED:
        if p.alive():
            rc = p.stop(check=True)
            if rc != 0:
                errors.append(f"{p.name} exited with {rc}")
    if HOLE:
        HOLE.close()
    assert not errors, errors


def login(p, timeout=10):
    return pgwire.connect(HOST, p.port, "app", "app", password="secret", timeout=timeout)


def wait_closed(c, within):
    """Seconds until the server closed c (optionally after an ErrorResponse, returned
    too); AssertionError if still open after `within` seconds."""
    t0 = time.monotonic()
    error = None
    while True:
        left = within - (time.monotonic() - t0)
        if left <= 0:
            raise AssertionError(f"connection still open after {within}s")
        try:
            t, body = c.recv(timeout=left)
        except (pgwire.ConnectionClosed, ConnectionResetError):
            return time.monotonic() - t0, error
        except TimeoutError:
            raise AssertionError(f"connection still open after {within}s") from None
        if t == "E":
            error = pgwire.decode_fields(body)


# ------------------------------------------------------------------ client_login

SHARED = {}  # name -> a proxy the scenarios of one setting share


def shared_proxy(name, extra, shard=SHARD):
    if name not in SHARED:
        SHARED[name] = proxy(name, extra, shard)
    return SHARED[name]


def login_proxy():
    return shared_proxy("login", "timeouts:\n  client_login: 1s")


@test
def silent_client_is_closed_after_client_login():
    p = login_proxy()
    c = pgwire.Connection.open(HOST, p.port, timeout=10)
    try:
        took, err = wait_closed(c, within=10)
        assert took > 0.7, f"closed after {took:.2f}s, before client_login (1s) elapsed"
        print(f"     silent client closed after {took:.2f}s (error: {err})")
    finally:
        c.sock.close()


@test
def client_stalling_in_authentication_is_closed():
    p = login_proxy()
    c = pgwire.Connection.open(HOST, p.port, timeout=10)
    try:
        c.send(pgwire.startup_message("app", "app"))
        t, body = c.recv()
        assert t == "R" and pgwire.decode_authentication(body)[0] == pgwire.AUTH_SASL, (t, body)
        took, err = wait_closed(c, within=10)  # never answers the SASL request
        print(f"     stalled client closed after {took:.2f}s (error: {err})")
    finally:
        c.sock.close()
    # stalling between the two SCRAM round trips
    c = pgwire.Connection.open(HOST, p.port, timeout=10)
    try:
        c.send(pgwire.startup_message("app", "app"))
        c.expect("R")
        scram = pgwire.ScramClient("secret")
        c.send(pgwire.sasl_initial_response(scram.MECHANISM, scram.client_first()))
        code, _ = pgwire.decode_authentication(c.expect("R"))
        assert code == pgwire.AUTH_SASL_CONTINUE, code
        wait_closed(c, within=10)
    finally:
        c.sock.close()


@test
def trickled_startup_packet_is_closed_by_the_overall_login_deadline():
    # One byte every 0.25s keeps every single read short; the deadline is for the
    # whole login, so the proxy must still close it within a few seconds.
    p = login_proxy()
    c = pgwire.Connection.open(HOST, p.port, timeout=10)
    msg = pgwire.startup_message("app", "app", application_name="slowloris" * 4)
    t0 = time.monotonic()
    closed_after = None
    try:
        for i in range(len(msg)):
            try:
                c.sock.sendall(msg[i:i + 1])
            except OSError:
                closed_after = time.monotonic() - t0
                break
            c.sock.settimeout(0.25)
            try:
                if c.sock.recv(1024) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except TimeoutError:
                pass
            except OSError:
                closed_after = time.monotonic() - t0
                break
            if time.monotonic() - t0 > 10:
                break
        assert closed_after is not None, (f"trickling client still connected after "
                                          f"{time.monotonic() - t0:.1f}s (client_login is 1s)")
        assert closed_after < 8, closed_after
    finally:
        c.sock.close()


@test
def login_deadline_does_not_apply_after_login():
    p = login_proxy()
    with login(p) as c:
        time.sleep(2.5)  # longer than client_login
        assert c.scalar("SELECT 'still here'") == "still here"


@test
def proxy_usable_after_login_timeouts():
    p = login_proxy()
    assert p.alive(), p.log_tail()
    with login(p) as c:
        assert c.scalar("SELECT 1") == "1"


# ------------------------------------------------------------------ client_idle

def idle_proxy():
    return shared_proxy("idle", "timeouts:\n  client_idle: 1s")


def expect_idle_kill(c, within=10):
    t0 = time.monotonic()
    try:
        t, body = c.recv(timeout=within)
    except TimeoutError:
        raise AssertionError(f"idle client not closed within {within}s") from None
    except pgwire.ConnectionClosed:
        raise AssertionError("idle client closed without an ErrorResponse (want FATAL 57P05)") from None
    took = time.monotonic() - t0
    assert t == "E", (t, body)
    f = pgwire.decode_fields(body)
    assert f.get("C") == "57P05" and f.get("S") == "FATAL", f
    assert c.is_closed(5), "not closed after the idle-timeout error"
    return took


@test
def idle_client_gets_57P05():
    p = idle_proxy()
    c = login(p)  # logs in, never sends a query
    try:
        took = expect_idle_kill(c)
        assert took > 0.7, f"killed after {took:.2f}s, before client_idle (1s)"
    finally:
        c.sock.close()


@test
def idle_client_after_queries_gets_57P05():
    # The usual case: a client runs something, its backend goes back to the pool, and
    # then it sits idle.
    p = idle_proxy()
    c = login(p)
    try:
        assert c.scalar("SELECT 1") == "1"
        r = c.extended("SELECT $1::int", [2])
        assert r.rows == [["2"]], r.rows
        took = expect_idle_kill(c)
        assert took > 0.7, f"killed after {took:.2f}s, before client_idle (1s)"
    finally:
        c.sock.close()


@test
def busy_client_is_not_killed_by_client_idle():
    p = idle_proxy()
    c = login(p)
    try:
        r = c.query("SELECT pg_sleep(2), 'survived'", timeout=20)
        assert r.error is None and r.rows[0][1] == "survived", r.error
        # extended protocol, also longer than client_idle
        r = c.extended("SELECT pg_sleep($1::float8), 'again'", ["1.5"], timeout=20)
        assert r.error is None and r.rows[0][1] == "again", r.error
    finally:
        c.close()


@test
def idleness_counts_from_the_end_of_the_statement():
    # client_idle 1s. A statement of 0.8s, then 0.5s of quiet: the client was idle for
    # 0.5s, not 1s. (The proxy's look at 1s after the statement began found it idle an
    # instant after the answer, and closed it: seen once in a full run, with a statement
    # of exactly 2s.)
    p = idle_proxy()
    c = login(p)
    try:
        for i in range(3):
            r = c.query("SELECT pg_sleep(0.8), 'slept'", timeout=20)
            assert r.error is None and r.rows[0][1] == "slept", r.error
            time.sleep(0.5)
            assert c.scalar(f"SELECT {i}") == str(i), f"round {i}"
        took = expect_idle_kill(c)  # and it is still closed once idle
        assert took > 0.7, f"killed after {took:.2f}s, before client_idle (1s)"
    finally:
        c.sock.close()


@test
def active_client_is_not_killed_by_client_idle():
    p = idle_proxy()
    with login(p) as c:
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 3:  # three client_idle periods, never idle for long
            assert c.scalar(f"SELECT {n}") == str(n)
            n += 1
            time.sleep(0.3)


# ------------------------------------------------------------------ max_client_connections

@test
def max_client_connections_refuses_the_fourth():
    p = proxy("maxconn", "max_client_connections: 3")
    conns = [login(p) for _ in range(3)]
    try:
        for _ in range(3):  # refused again and again: refusals must not keep a slot
            try:
                extra = login(p)
            except pgwire.PgError as e:
                assert e.sqlstate == "53300" and e.fields.get("S") == "FATAL", e.fields
                assert "too many clients" in e.message, e.message
            else:
                extra.close()
                raise AssertionError("4th client logged in with max_client_connections: 3")
        for i, c in enumerate(conns):  # the three are unaffected
            assert c.scalar(f"SELECT {i}") == str(i)
        conns.pop().close()
        deadline = time.monotonic() + 10
        while True:
            try:
                conns.append(login(p))
                break
            except pgwire.PgError as e:
                if e.sqlstate != "53300" or time.monotonic() > deadline:
                    raise AssertionError(f"no slot freed 10s after a client left: {e}") from None
                time.sleep(0.1)
        assert conns[-1].scalar("SELECT 'new one'") == "new one"
        try:
            login(p).close()
            raise AssertionError("4th client logged in after a slot was reused")
        except pgwire.PgError as e:
            assert e.sqlstate == "53300", e.fields
    finally:
        for c in conns:
            c.close()


# ------------------------------------------------------------------ server_connect

@test
def shard_that_never_speaks_gives_an_error_not_a_hang():
    p = proxy("blackhole", "timeouts:\n  server_connect: 1s",
              shard=f"{{ name: s0, host: {HOST}, port: {HOLE.port}, database: app, user: app, password: secret }}")
    for attempt in range(3):  # a failed connect must not keep a pool slot or hang later clients
        t0 = time.monotonic()
        err = None
        c = None
        try:
            c = login(p, timeout=15)
            r = c.query("SELECT 1", timeout=15)
            err = r.error
        except pgwire.PgError as e:
            err = e.fields
        except TimeoutError:
            raise AssertionError(f"attempt {attempt}: no answer within 15s (server_connect is 1s)") from None
        finally:
            if c is not None:
                c.sock.close()
        took = time.monotonic() - t0
        assert err is not None, f"attempt {attempt}: query through a mute shard succeeded?"
        assert took < 10, f"attempt {attempt}: error only after {took:.1f}s (server_connect is 1s)"
        print(f"     attempt {attempt}: {err.get('S')} {err.get('C')} {err.get('M')!r} after {took:.2f}s")
    assert len(HOLE.conns) >= 1, "the proxy never connected to the shard"
    assert p.alive(), p.log_tail()
    # the same settings with a working shard: usable
    good = proxy("good", "timeouts:\n  server_connect: 1s")
    with login(good) as c:
        assert c.scalar("SELECT 'good shard'") == "good shard"
        r = c.extended("SELECT $1::text", ["extended too"])
        assert r.rows == [["extended too"]], r.rows


@test
def refused_connect_waits_for_a_busy_connection():
    """The shard refuses another connection (the shard user's CONNECTION LIMIT 2, as a
    server at max_connections would) while the pool's two are in use: a third client
    waits for one of them, as in a full pool, and runs once one is released; with none
    released, it gets the shard's error at the wait's deadline (client_login, 2s here),
    not at once."""
    sptest.query(PG0, "app", "DROP ROLE IF EXISTS sp_limited", user="postgres", password="postgres")
    sptest.query(PG0, "app", "CREATE ROLE sp_limited LOGIN PASSWORD 'secret' CONNECTION LIMIT 2",
                 user="postgres", password="postgres")
    p = proxy("limited", "timeouts:\n  client_login: 2s",
              shard=f"{{ name: s0, host: {HOST}, port: {PG0}, database: app, user: sp_limited, password: secret, "
                    "pool_size: 4 }")
    holders = [login(p) for _ in range(2)]
    waiter = login(p)
    try:
        for c in holders:
            c.query("BEGIN").raise_error()
            assert c.scalar("SELECT 1") == "1"
        for released in (True, False):
            out = {}

            def run():
                t0 = time.monotonic()
                out["r"] = waiter.query("SELECT 'third'", timeout=15)
                out["took"] = time.monotonic() - t0
            t = threading.Thread(target=run, daemon=True)
            t.start()
            if released:
                time.sleep(1.0)
                holders[0].query("COMMIT").raise_error()
            t.join(15)
            assert not t.is_alive(), "the third client got no answer within 15s"
            r = out["r"]
            if released:
                assert r.error is None and r.rows == [["third"]], (r.error, r.rows)
                assert out["took"] >= 0.9, out["took"]
                holders[0].query("BEGIN").raise_error()  # (holds a connection again)
                assert holders[0].scalar("SELECT 1") == "1"
            else:
                assert r.error is not None and r.error.get("C") == "53300", r.error
                assert "too many connections" in r.error.get("M", ""), r.error
                assert 1.5 <= out["took"] < 10, out["took"]
    finally:
        for c in holders + [waiter]:
            c.sock.close()
        p.stop()
        sptest.query(PG0, "app", "DROP ROLE IF EXISTS sp_limited", user="postgres", password="postgres")


@test
def slow_connect_gives_way_to_a_released_connection():
    """New connections to the shard take longer than timeouts.server_connect (a relay
    holds each one 4 s, as a postmaster busy forking under load does): a client whose
    connect is still pending is served by the connection another client releases
    meanwhile, not failed when its connect times out; with no connection released, it
    gets that timeout (08001), and the proxy serves everyone once connects are fast."""
    relay = FaultRelay(PG0, name="slow-accept").start()
    # No configured shard user: no background task (two-phase recovery, the deadlock
    # search) opens connections of its own in the clients' pool.
    p = proxy("slow_accept", "timeouts:\n  server_connect: 2s\n  client_login: 5s",
              shard=f"{{ name: s0, host: {HOST}, port: {relay.port}, database: app, pool_size: 2 }}")
    holder, second, third = login(p), login(p), login(p)
    try:
        holder.query("BEGIN").raise_error()
        assert holder.scalar("SELECT 'first'") == "first"  # one connection, opened at once
        relay.connect_delay = 4.0
        out = {}

        def run(c, key, sql):
            t0 = time.monotonic()
            out[key] = c.query(sql, timeout=20)
            out[key + "_took"] = time.monotonic() - t0
        t = threading.Thread(target=run, args=(second, "second", "SELECT 'second'"), daemon=True)
        t.start()
        time.sleep(0.5)  # its connect is pending in the relay
        holder.query("COMMIT").raise_error()
        t.join(20)
        r = out["second"]
        assert r.error is None and r.rows == [["second"]], r.error
        # (the released connection served it: before its own connect could end)
        assert out["second_took"] < 2.0, out["second_took"]

        # Nothing released: the pending connect's timeout is the client's answer.
        holder.query("BEGIN").raise_error()
        assert holder.scalar("SELECT 1") == "1"
        time.sleep(2.5)  # the second's connect has ended (timed out); a place is free
        assert "a connect failed after its client was served otherwise" in p.log_text(), p.log_tail()
        run(third, "third", "SELECT 'third'")
        r = out["third"]
        assert r.error is not None and r.error.get("C") == "08001", r.error
        assert "timeout connecting" in r.error.get("M", ""), r.error
        assert 1.5 <= out["third_took"] < 4.5, out["third_took"]

        relay.connect_delay = 0.0
        holder.query("COMMIT").raise_error()
        for c in (holder, second, third):
            assert c.scalar("SELECT 'again'") == "again"
    finally:
        for c in (holder, second, third):
            c.sock.close()
        p.stop()
        relay.close()


# ------------------------------------------------------------------ query

def query_proxy():
    # server_connect (the wait for the cancel's answer) longer than the bound on the
    # cancelled statements: a statement right after a cancel is timed from its own start.
    return shared_proxy("query", "timeouts:\n  query: 1s\n  server_connect: 5s")


@test
def statements_shorter_than_query_timeout_run():
    with login(query_proxy()) as c:
        r = c.query("SELECT pg_sleep(0.5), 'ran'", timeout=20)
        assert r.error is None and r.rows[0][1] == "ran", r.error
        r = c.extended("SELECT pg_sleep($1::float8), 'extended'", ["0.5"], timeout=20)
        assert r.error is None and r.rows[0][1] == "extended", r.error
        # Back to back for longer than the timeout: each statement is timed on its own.
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 2.5:
            r = c.query(f"SELECT pg_sleep(0.1), {n}", timeout=20)
            assert r.error is None and r.rows[0][1] == str(n), (n, r.error)
            n += 1
        # In a transaction block, between statements (idle in transaction): not timed.
        assert c.query("BEGIN").error is None
        assert c.query("SELECT pg_sleep(0.6)").error is None
        time.sleep(1.5)
        r = c.query("SELECT pg_sleep(0.6), 'in block'", timeout=20)
        assert r.error is None and r.rows[0][1] == "in block" and r.status == "T", (r.error, r.status)
        assert c.query("COMMIT").status == "I"


@test
def statement_longer_than_query_timeout_gets_57014_from_the_cancel():
    with login(query_proxy()) as c:
        for sql in ("SELECT pg_sleep(3)", "SELECT 1 FROM pg_sleep(3)"):
            t0 = time.monotonic()
            r = c.query(sql, timeout=20)
            took = time.monotonic() - t0
            print(f"     {sql}: {r.sqlstate} {r.error and r.error.get('M')!r} after {took:.2f}s")
            assert r.sqlstate == "57014", r.error
            assert "timeouts.query (1s)" in r.error["M"] and '"s0"' in r.error["M"], r.error
            assert 0.9 <= took < 2.9, f"cancelled after {took:.2f}s (timeouts.query 1s, the statement 3s)"
            assert r.status == "I", r.status
            assert c.scalar("SELECT 'usable'") == "usable"
        r = c.extended("SELECT pg_sleep($1::float8)", ["3"], timeout=20)
        assert r.sqlstate == "57014", r.error
        assert c.scalar("SELECT 'usable after extended'") == "usable after extended"
        # In a transaction block: the block fails, as with PostgreSQL's statement_timeout.
        assert c.query("BEGIN").error is None
        r = c.query("SELECT pg_sleep(3)", timeout=20)
        assert r.sqlstate == "57014" and r.status == "E", (r.error, r.status)
        assert c.query("SELECT 1").sqlstate == "25P02"
        assert c.query("ROLLBACK").status == "I"
        assert c.scalar("SELECT 'usable after the block'") == "usable after the block"


@test
def write_on_every_shard_longer_than_query_timeout_gets_57014():
    # A write to an unlisted (reference) table runs on both shards in turn (MultiShardWrite):
    # each shard's part is bounded by timeouts.query too.
    s1 = f"{{ name: s1, host: {HOST}, port: {sptest.PG_PORTS[1]}, database: app, user: app, password: secret }}"
    p = shared_proxy("query2", "timeouts:\n  query: 1s\n  server_connect: 5s", shard=f"{SHARD}\n  - {s1}")
    with login(p) as c:
        c.query("DROP TABLE IF EXISTS lt_query_ref").raise_error()
        c.query("CREATE TABLE lt_query_ref (id int)").raise_error()
        try:
            t0 = time.monotonic()
            r = c.query("INSERT INTO lt_query_ref SELECT 1 FROM pg_sleep(0.3)", timeout=20)
            assert r.error is None and r.tag == "INSERT 0 1", (r.error, r.tag)
            r = c.query("INSERT INTO lt_query_ref SELECT 2 FROM pg_sleep(3)", timeout=20)
            took = time.monotonic() - t0
            print(f"     write on both shards: {r.sqlstate} {r.error and r.error.get('M')!r} after {took:.2f}s")
            assert r.sqlstate == "57014" and "applied on no shard" in r.error.get("H", ""), r.error
            assert took < 5.9, f"answered after {took:.2f}s (timeouts.query 1s per shard, 2 shards)"
            assert c.scalar("SELECT count(*) FROM lt_query_ref") == "1"
        finally:
            c.query("DROP TABLE IF EXISTS lt_query_ref")


@test
def shard_connections_have_tcp_keepalive():
    # A pooled (idle) connection to the shard shows the kernel's keepalive timer, within
    # the 30 s idle time the proxy sets (the kernel's default is 2 h); the user timeout
    # shows in ss's extended socket information only on some kernels, so it is not
    # checked here.
    p = query_proxy()
    with login(p) as c:
        assert c.scalar("SELECT 'pooled'") == "pooled"
        out = subprocess.run(["ss", "-tnop", "state", "established", f"( dport = :{PG0} )"],
                             capture_output=True, text=True, check=True).stdout
    mine = [line for line in out.splitlines() if f"pid={p.proc.pid}," in line]
    assert mine, f"no connection of the proxy (pid {p.proc.pid}) to the shard:\n{out}"
    timers = [re.search(r"timer:\(keepalive,([0-9.]+)(ms|sec|min)", line) for line in mine]
    assert all(timers), f"a shard connection without keepalive:\n{out}"
    seconds = [float(t.group(1)) * {"ms": 0.001, "sec": 1, "min": 60}[t.group(2)] for t in timers]
    print(f"     {len(mine)} shard connection(s), keepalive timers {seconds} s")
    assert all(s <= 30 for s in seconds), f"keepalive timers {seconds}, expected at most 30 s"


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
