#!/usr/bin/env python3
"""Wire-protocol robustness of splitpoint against a real PostgreSQL 15.

Starts its own proxies (max_message_size: 64kB; one with pool_size 1) in front of the
shared instance PG0 and feeds them malformed, oversized, split, pipelined and random
input. Where PostgreSQL has an answer of its own (pipelined extended protocol, COPY,
bad startup and authentication messages) the same bytes are sent to PostgreSQL
directly and the two answers are compared; after a differential run on the pool_size 1
proxy, a second client must get the one backend (the session's bookkeeping of what the
backend still owes it must be right, or the backend is never given back).
Run by tests/run (env: PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""

import concurrent.futures
import os
import random
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402

import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORKDIR = sptest.workdir("protocol_robustness")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

MAIN = None   # the proxy most tests use: max_message_size 64kB
SMALL = None  # pool_size 1: shows whether a backend went back to the pool
TABLE = f"robust_copy_{os.getpid()}"


def setup():
    global MAIN, SMALL
    MAIN = sptest.Proxy("main", f"""
        auth: scram-sha-256
        max_message_size: 64kB
        max_client_connections: 40
        timeouts:
          client_login: 3s
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret, pool_size: 10 }}
        """, WORKDIR).start()
    SMALL = sptest.Proxy("small", f"""
        auth: scram-sha-256
        max_message_size: 64kB
        timeouts:
          client_login: 5s
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret, pool_size: 1 }}
        """, WORKDIR).start()
    with direct() as c:
        for t in (TABLE, TABLE + "_p"):
            c.query(f"DROP TABLE IF EXISTS {t}").raise_error()
            c.query(f"CREATE TABLE {t} (id int, v text)").raise_error()


def teardown():
    try:
        with direct() as c:
            for t in (TABLE, TABLE + "_p"):
                c.query(f"DROP TABLE IF EXISTS {t}")
    finally:
        for p in (MAIN, SMALL):
            if p is not None and p.alive():
                rc = p.stop(check=True)
                assert rc == 0, f"{p.name} exited with {rc}"


def direct():
    """A connection straight to PostgreSQL (the reference answer)."""
    return pgwire.connect(HOST, PG0, "app", "app", password="secret", timeout=10)


def proxied(proxy=None):
    return pgwire.connect(HOST, (proxy or MAIN).port, "app", "app", password="secret", timeout=10)


def raw(proxy=None, timeout=10):
    return pgwire.Connection.open(HOST, (proxy or MAIN).port, timeout=timeout)


def read_error_then_close(c, code, within=5.0, severity="FATAL"):
    """The next message (notices and ParameterStatus aside) must be an ErrorResponse
    with `code`, arriving within `within` seconds; then the server must close."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no ErrorResponse {code} within {within}s")
        try:
            t, body = c.recv(timeout=left)
        except TimeoutError:
            raise AssertionError(f"no ErrorResponse {code} within {within}s (connection still open)") from None
        except (pgwire.ConnectionClosed, ConnectionResetError):
            raise AssertionError(f"connection closed without ErrorResponse {code}") from None
        if t in ("N", "S"):
            continue
        assert t == "E", f"expected ErrorResponse {code}, got {t!r} {body[:200]!r}"
        fields = pgwire.decode_fields(body)
        assert fields.get("C") == code, f"expected SQLSTATE {code}, got {fields}"
        if severity:
            assert fields.get("S") == severity, f"expected severity {severity}: {fields}"
        break
    assert c.is_closed(timeout=5), "server did not close the connection after the error"
    return fields


def assert_proxy_works(proxy=None):
    p = proxy or MAIN
    assert p.alive(), f"{p.name} is not running (exit {p.proc.returncode}); log:\n{p.log_tail()}"
    with proxied(p) as c:
        assert c.scalar("SELECT 'still ' || 'fine'") == "still fine"


def normalize(msgs):
    """Backend messages in a form that is equal for equal behaviour: error code and
    text, row contents, tags and column names/types; nothing process-specific."""
    out = []
    for t, body in msgs:
        if t in ("N", "S"):
            continue
        if t == "E":
            f = pgwire.decode_fields(body)
            out.append(("E", f.get("S"), f.get("C"), f.get("M")))
        elif t == "T":
            out.append(("T", [(col.name, col.type_oid) for col in pgwire.decode_row_description(body)]))
        elif t in ("D", "C", "Z", "t", "d", "G", "H"):
            out.append((t, body))
        else:
            out.append((t,))
    return out


def collect_z(c, n, timeout=15.0):
    """All messages up to and including the n-th ReadyForQuery; then checks that nothing
    else arrives for a moment (an extra message would be a bug as well)."""
    msgs = []
    zs = 0
    deadline = time.monotonic() + timeout
    while zs < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"only {zs} of {n} ReadyForQuery within {timeout}s; got {[m[0] for m in msgs]}")
        try:
            m = c.recv(timeout=left)
        except TimeoutError:
            raise AssertionError(f"only {zs} of {n} ReadyForQuery within {timeout}s; got "
                                 f"{[m[0] for m in msgs]}") from None
        msgs.append(m)
        if m[0] == "Z":
            zs += 1
    try:
        extra = c.recv(timeout=0.5)
        raise AssertionError(f"unexpected message after the last ReadyForQuery: {extra!r}")
    except TimeoutError:
        pass
    return msgs


def second_client_gets_the_backend(first_label):
    """On SMALL (pool_size 1, client_login 5s): a second client must get the only
    backend while the first client stays connected and idle. Fails when the first
    session kept its backend although its transaction was over."""
    with proxied(SMALL) as second:
        r = second.query("SELECT 'second client'", timeout=20)
        assert r.error is None and r.rows == [["second client"]], (
            f"after {first_label}, with the first client idle (ReadyForQuery 'I'), a second client did not "
            f"get the pool's only backend: {r.error}")


def differential(script, label):
    """Runs script(conn) -> list of messages on a direct PostgreSQL connection and on a
    proxied one (SMALL, pool_size 1); both must be equal after normalize(). Then the
    proxied session must be in a sane state: its backend goes back to the pool when
    the client is idle, and the client can go on. Returns the normalized answer."""
    with direct() as d:
        want = normalize(script(d))
    with proxied(SMALL) as p:
        got = normalize(script(p))
        if got != want:
            lines = [f"{label}: proxy answer differs from PostgreSQL's"]
            for i in range(max(len(got), len(want))):
                w = want[i] if i < len(want) else "-"
                g = got[i] if i < len(got) else "-"
                mark = "  " if w == g else "!!"
                lines.append(f"{mark} {i:3d} postgres={w!r}\n{'':8}proxy   ={g!r}")
            raise AssertionError("\n".join(lines))
        if p.status == "I":
            second_client_gets_the_backend(label)
        assert p.scalar("SELECT 'after'") == "after"
        r = p.extended("SELECT $1::int * 3", [5])
        assert r.error is None and r.rows == [["15"]] and r.status == p.status, (r.error, r.rows, r.status)
    return want


# ------------------------------------------------------------------ startup packet

@test
def startup_length_below_8_is_08P01():
    for length in (7, 4, 0, -1):
        c = raw()
        try:
            c.send(struct.pack("!i", length))  # header only: the answer must not wait for a body
            read_error_then_close(c, "08P01")
        finally:
            c.sock.close()


@test
def startup_length_above_10000_is_08P01_at_once():
    for length in (10001, 1 << 30):
        c = raw()
        try:
            c.send(struct.pack("!i", length) + pgwire.i32(pgwire.PROTOCOL_VERSION))
            read_error_then_close(c, "08P01")
        finally:
            c.sock.close()
    # exactly 10000 is still a startup packet (PostgreSQL's MAX_STARTUP_PACKET_LENGTH)
    c = raw()
    try:
        pad = "x" * (10000 - len(pgwire.startup_message("app", "app", application_name="")))
        msg = pgwire.startup_message("app", "app", application_name=pad)
        assert len(msg) == 10000
        c.send(msg)
        t, body = c.recv()
        assert t == "R", (t, body[:100])
    finally:
        c.sock.close()
    assert_proxy_works()


@test
def startup_packet_bad_layout_is_08P01_like_postgres():
    # version 3.0, "user\0app" without the closing NUL of the parameter list
    bad = pgwire.untyped(pgwire.i32(pgwire.PROTOCOL_VERSION) + b"user\0app\0database\0app")
    codes = []
    for port in (PG0, MAIN.port):
        c = pgwire.Connection.open(HOST, port, timeout=10)
        try:
            c.send(bad)
            codes.append(read_error_then_close(c, "08P01")["C"])
        finally:
            c.sock.close()


def read_all_until_close(c, within=5.0):
    data = bytes(c.buf)
    c.sock.settimeout(within)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = c.sock.recv(65536)
        except ConnectionResetError:
            return data, True
        except TimeoutError:
            break
        if not chunk:
            return data, True
        data += chunk
    return data, False


@test
def protocol_2_is_refused():
    c = raw()
    try:
        c.send(pgwire.startup_message("app", "app", version=2 << 16))
        data, closed = read_all_until_close(c)
    finally:
        c.sock.close()
    assert closed, f"connection not closed after refusing protocol 2.0; got {data!r}"
    assert data[:1] == b"E", f"expected an ErrorResponse, got {data!r}"
    # PostgreSQL itself answers a 2.0 client in the 2.0 format ('E' + text); the v3
    # format is fine too. Either way the text must say what is wrong.
    (length,) = struct.unpack("!i", data[1:5])
    if length == len(data) - 1:
        fields = pgwire.decode_fields(data[5:])
        text = fields.get("M", "")
        assert fields.get("C") == "0A000" and fields.get("S") == "FATAL", fields  # as PostgreSQL
    else:
        text = data[1:].decode(errors="replace")
    assert "unsupported" in text.lower() and "protocol" in text.lower(), text


@test
def gssenc_request_answered_N_then_startup_works():
    c = raw()
    try:
        c.send(pgwire.gssenc_request())
        assert c._recv_exact(1) == b"N"
        c.startup("app", "app", "secret")
        assert c.scalar("SELECT 'gss-n'") == "gss-n"
    finally:
        c.close()


@test
def ssl_request_without_tls_answered_N_then_startup_works():
    c = raw()
    try:
        assert c.request_ssl() == "N"
        c.startup("app", "app", "secret")
        assert c.scalar("SELECT 'ssl-n'") == "ssl-n"
    finally:
        c.close()
    # both refusals in a row (what libpq does with gssencmode=prefer sslmode=prefer)
    c = raw()
    try:
        c.send(pgwire.gssenc_request())
        assert c._recv_exact(1) == b"N"
        assert c.request_ssl() == "N"
        c.startup("app", "app", "secret")
        assert c.scalar("SELECT 2") == "2"
    finally:
        c.close()


def auth_phase_answer(port, payload):
    """Starts up as app, gets the SASL request, sends payload instead of the
    SASLInitialResponse; returns (first message or None, closed)."""
    c = pgwire.Connection.open(HOST, port, timeout=10)
    try:
        c.send(pgwire.startup_message("app", "app"))
        t, body = c.recv()
        assert t == "R" and pgwire.decode_authentication(body)[0] == pgwire.AUTH_SASL, (t, body)
        c.send(payload)
        try:
            first = c.recv(timeout=5)
        except (pgwire.ConnectionClosed, ConnectionResetError):
            return None, True
        except TimeoutError:
            return None, False
        return first, c.is_closed(5)
    finally:
        c.sock.close()


@test
def wrong_message_during_authentication_is_08P01_like_postgres():
    # PostgreSQL: FATAL 08P01 "expected SASL response, got message type 81".
    payload = pgwire.query_msg("SELECT 1")
    want, _ = auth_phase_answer(PG0, payload)
    assert want and want[0] == "E" and pgwire.decode_fields(want[1])["C"] == "08P01", want
    got, closed = auth_phase_answer(MAIN.port, payload)
    assert got is not None, ("proxy closed the connection without an ErrorResponse when a Query came "
                             "instead of the SASL response (PostgreSQL: FATAL 08P01)")
    assert got[0] == "E", got
    f = pgwire.decode_fields(got[1])
    assert f.get("C") == "08P01" and f.get("S") == "FATAL", f
    assert closed, "not closed after the error"


@test
def bad_length_during_authentication_is_an_error_then_close():
    # PostgreSQL answers these with FATAL 28P01; a protocol violation (08P01) is as good.
    for label, payload in (("length 20000 (> 10000 allowed for auth messages)", b"p" + pgwire.i32(20000)),
                           ("length 2", b"p" + pgwire.i32(2))):
        got, closed = auth_phase_answer(MAIN.port, payload)
        assert got is not None, f"{label}: proxy closed without an ErrorResponse"
        assert got[0] == "E", (label, got)
        f = pgwire.decode_fields(got[1])
        assert f.get("C") in ("08P01", "28P01") and f.get("S") == "FATAL", (label, f)
        assert closed, f"{label}: not closed after the error"
    assert_proxy_works()


# ------------------------------------------------------------------ regular messages

@test
def message_above_max_message_size_is_refused_before_the_body():
    c = proxied()
    try:
        # Header only, claiming 1 MB (> 64kB): the proxy must answer without waiting
        # for (or allocating) the body.
        c.send(b"Q" + pgwire.i32(1 << 20))
        read_error_then_close(c, "08P01", within=5)
    finally:
        c.sock.close()
    c = proxied()
    try:
        c.send(b"Q" + pgwire.i32(0x7FFFFFFF))
        read_error_then_close(c, "08P01", within=5)
    finally:
        c.sock.close()
    assert_proxy_works()


@test
def max_message_size_boundary():
    limit = 64 * 1024
    with proxied() as c:
        # length field (which counts itself) == 64kB exactly: accepted
        sql = "SELECT 'edge' --"
        sql += "x" * (limit - 4 - 1 - len(sql))
        msg = pgwire.query_msg(sql)
        assert struct.unpack("!i", msg[1:5])[0] == limit
        c.send(msg)
        r = c.query_collect()
        assert r.error is None and r.rows == [["edge"]], (r.error, r.rows)
        # one byte more: refused
        msg = pgwire.query_msg(sql + "y")
        c.send(msg[:5])
        read_error_then_close(c, "08P01")


@test
def fixed_size_message_with_wrong_length_is_08P01():
    cases = [
        ("Sync length 8", b"S" + pgwire.i32(8) + b"\0\0\0\0"),
        ("Terminate length 5", b"X" + pgwire.i32(5) + b"\0"),
        ("Flush length 6", b"H" + pgwire.i32(6) + b"\0\0"),
        ("CopyDone length 5", b"c" + pgwire.i32(5) + b"\0"),
    ]
    for label, data in cases:
        c = proxied()
        try:
            c.send(data)
            try:
                read_error_then_close(c, "08P01")
            except AssertionError as e:
                raise AssertionError(f"{label}: {e}") from None
        finally:
            c.sock.close()
    assert_proxy_works()


@test
def length_below_4_is_08P01():
    for t in (b"Q", b"S", b"P"):
        for length in (3, 0, -5):
            c = proxied()
            try:
                c.send(t + pgwire.i32(length))
                try:
                    read_error_then_close(c, "08P01")
                except AssertionError as e:
                    raise AssertionError(f"type {t!r} length {length}: {e}") from None
            finally:
                c.sock.close()


@test
def unknown_frontend_message_type_is_08P01():
    for t in ("y", "Z", "p", "\x00"):
        c = proxied()
        try:
            c.send(pgwire.message(t, b"hello\0"))
            try:
                read_error_then_close(c, "08P01")
            except AssertionError as e:
                raise AssertionError(f"type {t!r}: {e}") from None
        finally:
            c.sock.close()
    assert_proxy_works()


@test
def backend_message_above_max_message_size_gives_an_error():
    # max_message_size applies to messages from the shard too: a 100 kB DataRow is
    # refused -- the client must get an error (not a hang), and the proxy stays up.
    with proxied() as c:
        c.send(pgwire.query_msg("SELECT repeat('x', 100000)"))
        t0 = time.monotonic()
        msgs = []
        try:
            while True:
                m = c.recv(timeout=10)
                msgs.append(m)
                if m[0] == "Z":
                    break
        except (pgwire.ConnectionClosed, ConnectionResetError):
            pass
        except TimeoutError:
            raise AssertionError(f"no answer within 10s to a too-large result; got {[m[0] for m in msgs]}") from None
        assert time.monotonic() - t0 < 10
        assert any(m[0] == "E" for m in msgs), f"no ErrorResponse: {[m[0] for m in msgs]}"
        assert not any(m[0] == "D" for m in msgs), "a DataRow above max_message_size reached the client"
    assert_proxy_works()


# ------------------------------------------------------------------ random garbage

def garbage_connection(seed):
    rnd = random.Random(seed)
    kind = seed % 5
    c = raw(timeout=5)
    try:
        if kind == 0:  # pure noise
            data = rnd.randbytes(rnd.randint(1, 3000))
        elif kind == 1:  # plausible startup length, random body
            n = rnd.randint(8, 300)
            data = pgwire.i32(n) + rnd.randbytes(rnd.randint(0, n + 50))
        elif kind == 2:  # SSLRequest / GSSENCRequest, then noise
            data = rnd.choice([pgwire.ssl_request(), pgwire.gssenc_request()]) + rnd.randbytes(rnd.randint(0, 500))
        elif kind == 3:  # startup, then noise instead of the SASL answer
            data = pgwire.startup_message("app", "app") + rnd.randbytes(rnd.randint(1, 500))
        else:  # logged in, then random typed messages
            c.startup("app", "app", "secret")
            parts = []
            for _ in range(rnd.randint(1, 6)):
                t = rnd.choice(b"QPBEDCSHdcfpyX\x00Z")
                body = rnd.randbytes(rnd.randint(0, 200))
                length = len(body) + 4 if rnd.random() < 0.7 else rnd.randint(-10, 100000)
                parts.append(bytes([t]) + struct.pack("!i", length) + body)
            data = b"".join(parts)
        cut = rnd.randint(1, len(data))
        c.send(data[:cut])
        if cut < len(data):
            c.send(data[cut:])
        try:
            c.sock.settimeout(0.2)
            while c.sock.recv(65536):
                pass
        except OSError:
            pass
    except (OSError, pgwire.ProtocolError, pgwire.PgError):
        pass
    finally:
        c.sock.close()


@test
def random_garbage_connections_leave_the_proxy_up():
    base = int(os.environ.get("GARBAGE_SEED", "20240601"))
    print(f"     garbage seed base {base}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(garbage_connection, range(base, base + 200)))
    assert MAIN.alive(), f"proxy died (exit {MAIN.proc.returncode}); log:\n{MAIN.log_tail()}"
    assert_proxy_works()
    # Nothing leaked: 30 clients at once (max_client_connections: 40), 10 of them in a
    # transaction at the same time (pool_size: 10). Sessions of the garbage clients may
    # take a moment to end, hence the retries.
    deadline = time.monotonic() + 15
    while True:
        conns = []
        try:
            conns = [proxied() for _ in range(30)]
            for i, c in enumerate(conns[10:]):
                assert c.scalar(f"SELECT {i} + 1") == str(i + 1)
            for c in conns[:10]:  # each holds a backend until the end
                c.query("BEGIN").raise_error()
                assert c.scalar("SELECT 'in txn'") == "in txn"
            break
        except pgwire.PgError as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"client or backend slots leaked by the garbage connections: {e}") from None
            time.sleep(0.5)
        finally:
            for c in conns:
                c.close()


# ------------------------------------------------------------------ pipelining (differential)

def pbe(sql, params=(), name=""):
    return [pgwire.parse_msg(sql, name), pgwire.bind_msg(params, statement=name), pgwire.describe_msg("P"),
            pgwire.execute_msg()]


FAILS_IN_EXECUTE = "SELECT 10 / (g - 3) AS q FROM generate_series(1, 5) g"  # 2 rows, then 22012


@test
def pipelined_extended_protocol_matches_postgres():
    S = [pgwire.sync_msg()]
    msgs = (pbe("SELECT 1 AS a") + S +
            pbe(FAILS_IN_EXECUTE) + S +
            pbe("SELECT $1::text AS three", ["three"]) + S +
            # a batch without Sync: ok, fails, then work that must be skipped
            pbe("SELECT 4 AS four") + pbe(FAILS_IN_EXECUTE) + pbe("SELECT 5 AS skipped") +
            [pgwire.parse_msg("SELECT 'skipped'", "")] + S +
            pbe("SELECT 6 AS six") + S)
    syncs = 5

    def script(c):
        c.send(b"".join(msgs))  # one write
        return collect_z(c, syncs)

    want = differential(script, "pipelined P/B/D/E/S")
    # sanity of the reference answer itself
    assert [m for m in want if m[0] == "Z"] == [("Z", b"I")] * syncs, want
    errors = [m for m in want if m[0] == "E"]
    assert [e[2] for e in errors] == ["22012", "22012"], errors
    assert ("D", pgwire.i16(1) + pgwire.i32(1) + b"5") not in want  # skipped after the error


@test
def pipelined_error_inside_transaction_matches_postgres():
    S = [pgwire.sync_msg()]
    msgs = (pbe("BEGIN") + S + pbe("SELECT 1") + pbe(FAILS_IN_EXECUTE) + pbe("SELECT 2") + S +
            pbe("SELECT 3") + S + pbe("ROLLBACK") + S + pbe("SELECT 4") + S)

    def script(c):
        c.send(b"".join(msgs))
        return collect_z(c, 5)

    want = differential(script, "pipelined transaction with error")
    assert [m[1] for m in want if m[0] == "Z"] == [b"T", b"E", b"E", b"I", b"I"], want


@test
def simple_query_inside_skipped_region_matches_postgres():
    # A Query message after an extended-protocol error and before Sync is discarded
    # by PostgreSQL like everything else: no ReadyForQuery of its own.
    S = [pgwire.sync_msg()]
    msgs = pbe(FAILS_IN_EXECUTE) + [pgwire.query_msg("SELECT 'skipped simple query'")] + S + pbe("SELECT 8") + S

    def script(c):
        c.send(b"".join(msgs))
        return collect_z(c, 2)

    want = differential(script, "Query inside the skipped region")
    assert ("D", pgwire.i16(1) + pgwire.i32(1) + b"8") in want, want


@test
def skipped_named_parse_does_not_exist_afterwards():
    # After an error, PostgreSQL skips everything until Sync -- including a Parse of a
    # named statement, which therefore does not exist later (26000).
    stmt = f"robust_s_{os.getpid()}"
    S = [pgwire.sync_msg()]
    first = pbe(FAILS_IN_EXECUTE) + [pgwire.parse_msg("SELECT 7 AS seven", stmt)] + S
    second = [pgwire.bind_msg(statement=stmt), pgwire.execute_msg()] + S

    def script(c):
        c.send(b"".join(first))
        out = collect_z(c, 1)
        c.send(b"".join(second))
        return out + collect_z(c, 1)

    want = differential(script, "named Parse skipped after an error")
    assert [m[2] for m in want if m[0] == "E"] == ["22012", "26000"], want


@test
def named_statements_and_close_pipelined_match_postgres():
    S = [pgwire.sync_msg()]
    msgs = ([pgwire.parse_msg("SELECT $1::int * 2 AS dbl", "st_a", [23]), pgwire.describe_msg("S", "st_a")] + S +
            [pgwire.bind_msg([21], statement="st_a"), pgwire.execute_msg(),
             pgwire.bind_msg([5], statement="st_a"), pgwire.execute_msg(),
             pgwire.close_msg("S", "st_a"), pgwire.bind_msg([1], statement="st_a"), pgwire.execute_msg()] + S +
            [pgwire.parse_msg("SELECT generate_series(1, 5) AS g", "st_b"), pgwire.bind_msg(statement="st_b"),
             pgwire.execute_msg(max_rows=2), pgwire.execute_msg(max_rows=2), pgwire.execute_msg()] + S)

    def script(c):
        c.send(b"".join(msgs))
        return collect_z(c, 3)

    want = differential(script, "named statements, Close, partial Execute")
    assert [m[2] for m in want if m[0] == "E"] == ["26000"], want


# ------------------------------------------------------------------ split and coalesced messages

class TrickleConnection(pgwire.Connection):
    """Sends every byte in its own write (TCP_NODELAY is on)."""

    def send(self, data):
        if not isinstance(data, (bytes, bytearray)):
            data = b"".join(data)
        for i in range(len(data)):
            self.sock.sendall(data[i:i + 1])
            time.sleep(0.001)


@test
def message_split_byte_by_byte():
    sock = socket.create_connection((HOST, MAIN.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = TrickleConnection(sock, timeout=10)
    try:
        c.startup("app", "app", "secret")  # startup and SCRAM messages trickled too
        assert c.scalar("SELECT 'split' || 'ted'") == "splitted"
        r = c.extended("SELECT $1::int + $2::int AS s", [40, 2])
        assert r.error is None and r.rows == [["42"]], (r.error, r.rows)
        r = c.query("SELECT 1/0")
        assert r.sqlstate == "22012" and r.status == "I", r.error
    finally:
        c.close()


@test
def two_messages_in_one_write_and_one_and_a_half():
    with proxied() as c:
        c.send(pgwire.query_msg("SELECT 'one'") + pgwire.query_msg("SELECT 'two'"))
        r1 = c.query_collect()
        r2 = c.query_collect()
        assert r1.rows == [["one"]] and r2.rows == [["two"]], (r1.rows, r2.rows)
        # a whole message and the first half of the next
        m1, m2 = pgwire.query_msg("SELECT 'three'"), pgwire.query_msg("SELECT 'four'")
        c.send(m1 + m2[:7])
        r3 = c.query_collect()
        assert r3.rows == [["three"]], r3.rows
        time.sleep(0.2)
        c.send(m2[7:])
        r4 = c.query_collect()
        assert r4.rows == [["four"]], r4.rows
        # header split from its body across writes
        m5 = pgwire.query_msg("SELECT 'five'")
        c.send(m5[:3])
        time.sleep(0.1)
        c.send(m5[3:5])
        time.sleep(0.1)
        c.send(m5[5:])
        assert c.query_collect().rows == [["five"]]


# ------------------------------------------------------------------ COPY

@test
def copy_simple_protocol():
    with proxied() as c:
        c.query(f"TRUNCATE {TABLE}").raise_error()
        r = c.query(f"COPY {TABLE} FROM STDIN", copy_in=b"1\ta\n2\tb\n3\t\\N\n")
        assert r.error is None and r.tag == "COPY 3", (r.error, r.tag)
        r = c.query(f"COPY (SELECT * FROM {TABLE} ORDER BY id) TO STDOUT")
        assert r.error is None, r.error
        assert b"".join(r.results[0].copy_data) == b"1\ta\n2\tb\n3\t\\N\n", r.results[0].copy_data
        assert r.status == "I"
        # CopyFail: the COPY fails with 57014 and the session goes on
        r = c.query(f"COPY {TABLE} FROM STDIN")
        assert r.sqlstate == "57014", r.error
        assert c.scalar(f"SELECT count(*) FROM {TABLE}") == "3"
        # a bigger stream in many CopyData messages, each below max_message_size
        c.send(pgwire.query_msg(f"COPY {TABLE} FROM STDIN"))
        c.expect(pgwire.COPY_IN_RESPONSE)
        rows = 0
        for chunk in range(50):
            data = b"".join(b"%d\t%s\n" % (1000 + chunk * 400 + i, b"v" * 100) for i in range(400))
            rows += 400
            c.send(pgwire.copy_data_msg(data))
        c.send(pgwire.copy_done_msg())
        r = c.query_collect()
        assert r.error is None and r.tag == f"COPY {rows}", (r.error, r.tag)
        r = c.query(f"COPY {TABLE} TO STDOUT")
        assert r.error is None
        assert sum(d.count(b"\n") for d in r.results[0].copy_data) == rows + 3


def copy_extended_script(c):
    c.query(f"TRUNCATE {TABLE}").raise_error()
    out = []
    # COPY FROM STDIN through the extended protocol (Flush, then data, then Sync)
    c.send([pgwire.parse_msg(f"COPY {TABLE} FROM STDIN"), pgwire.bind_msg(), pgwire.execute_msg(),
            pgwire.flush_msg()])
    out += c.recv_until("G", "E", "Z")
    c.send([pgwire.copy_data_msg(b"10\tx\n11\ty\n"), pgwire.copy_done_msg(), pgwire.sync_msg()])
    out += collect_z(c, 1)
    # COPY TO STDOUT through the extended protocol
    c.send([pgwire.parse_msg(f"COPY (SELECT * FROM {TABLE} ORDER BY id) TO STDOUT"), pgwire.bind_msg(),
            pgwire.describe_msg("P"), pgwire.execute_msg(), pgwire.sync_msg()])
    out += collect_z(c, 1)
    # CopyFail through the extended protocol
    c.send([pgwire.parse_msg(f"COPY {TABLE} FROM STDIN"), pgwire.bind_msg(), pgwire.execute_msg(),
            pgwire.flush_msg()])
    out += c.recv_until("G", "E", "Z")
    c.send([pgwire.copy_fail_msg("client gave up"), pgwire.sync_msg()])
    out += collect_z(c, 1)
    c.send(pgwire.query_msg(f"SELECT count(*) FROM {TABLE}"))
    out += collect_z(c, 1)
    return out


@test
def copy_extended_protocol_matches_postgres():
    want = differential(copy_extended_script, "COPY over the extended protocol")
    assert ("C", b"COPY 2\0") in want and ("d", b"10\tx\n") in want, want
    assert [m[2] for m in want if m[0] == "E"] == ["57014"], want


@test
def copy_extended_protocol_returns_backend_to_pool():
    # pool_size: 1. After a libpq-style extended COPY (Sync before and after the
    # data; PostgreSQL answers both with one ReadyForQuery) the transaction is over,
    # so a second client must get the one backend while the first stays connected.
    with direct() as d:
        d.query(f"TRUNCATE {TABLE}_p").raise_error()
    first = proxied(SMALL)
    try:
        first.send([pgwire.parse_msg(f"COPY {TABLE}_p FROM STDIN"), pgwire.bind_msg(), pgwire.execute_msg(),
                    pgwire.sync_msg()])
        first.expect("1")
        first.expect("2")
        first.expect("G")
        first.send([pgwire.copy_data_msg(b"1\tz\n"), pgwire.copy_done_msg(), pgwire.sync_msg()])
        first.expect("C")
        assert first.expect("Z") == b"I"
        with proxied(SMALL) as second:
            r = second.query("SELECT 'second client'", timeout=15)
            assert r.error is None and r.rows == [["second client"]], (
                f"second client did not get the pool's only backend after the first one's COPY "
                f"finished: {r.error}")
        # and the first client's own next statements are answered in order
        assert first.scalar("SELECT 'first again'") == "first again"
        r = first.extended("SELECT 1/0")
        assert r.sqlstate == "22012" and r.status == "I", r.error
        assert first.scalar("SELECT 3") == "3"
    finally:
        first.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
