#!/usr/bin/env python3
"""TLS between clients and splitpoint, against a real PostgreSQL 15 behind it.

Makes a throw-away self-signed certificate (openssl req -x509 ... /CN=localhost),
starts a proxy with `tls:` in front of the shared instance PG0 and checks: raw
SSLRequest + handshake, psycopg2 and psql with sslmode=require (and verify-full against
the certificate), that data sent after SSLRequest before the handshake is refused
(CVE-2021-23214), that failed or stalled handshakes leave the proxy up, and that
plain connections (sslmode=disable) still work. SCRAM-SHA-256-PLUS (SPEC §11, RFC 5929
tls-server-end-point): libpq's channel_binding=require works over TLS (also with a
certificate signed with SHA-384, whose hash is SHA-384) and fails without TLS; by
hand, the binding data must be the certificate's hash, and a "y" client is refused
over TLS (downgrade).
Run by tests/run (env: PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""

import hashlib
import os
import socket
import ssl
import struct
import subprocess
import sys
import time

import psycopg2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402

import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORKDIR = sptest.workdir("tls")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ fixtures

TLSP = None
CERT = os.path.join(WORKDIR, "tls.crt")
KEY = os.path.join(WORKDIR, "tls.key")
PSQL = os.path.join(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"), "psql")
if not os.path.exists(PSQL):
    PSQL = "psql"


def setup():
    global TLSP
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", KEY, "-out", CERT],
                   check=True, capture_output=True)
    TLSP = sptest.Proxy("tls", f"""
        auth: scram-sha-256
        tls:
          cert: {CERT}
          key: {KEY}
        timeouts:
          client_login: 2s
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}
        """, WORKDIR).start()


def teardown():
    if TLSP is not None and TLSP.alive():
        rc = TLSP.stop(check=True)
        assert rc == 0, f"proxy exited with {rc}"


def dsn(**kw):
    parts = {"host": HOST, "port": str(TLSP.port), "user": "app", "password": "secret", "dbname": "app",
             "connect_timeout": "10"}
    parts.update(kw)
    return " ".join(f"{k}={v}" for k, v in parts.items())


def assert_alive():
    assert TLSP.alive(), f"proxy died (exit {TLSP.proc.returncode}); log:\n{TLSP.log_tail()}"


def tls_connect():
    return pgwire.connect(HOST, TLSP.port, "app", "app", password="secret", timeout=10, tls=True)


# ------------------------------------------------------------------ tests

@test
def raw_sslrequest_handshake_and_queries():
    with tls_connect() as c:
        assert isinstance(c.sock, ssl.SSLSocket), type(c.sock)
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3"), c.sock.version()
        peer = ssl.DER_cert_to_PEM_cert(c.sock.getpeercert(binary_form=True))
        with open(CERT) as f:
            assert peer.strip() == f.read().strip(), "the proxy did not present the configured certificate"
        assert c.scalar("SELECT 'over tls'") == "over tls"
        r = c.extended("SELECT $1::int + 1", [41])
        assert r.rows == [["42"]], r.rows
        # results bigger than a TLS record and than a socket buffer
        r = c.query("SELECT repeat('t', 3000000) AS big, g FROM generate_series(1, 3) g")
        assert r.error is None and [len(row[0]) for row in r.rows] == [3000000] * 3, r.error
        r = c.query("SELECT g, md5(g::text) FROM generate_series(1, 20000) g")
        assert r.error is None and len(r.rows) == 20000 and r.rows[-1][0] == "20000"
        # a large message from the client
        big = "x" * 1_000_000
        assert c.scalar(f"SELECT length('{big}')") == "1000000"


@test
def psycopg2_sslmode_require():
    conn = psycopg2.connect(dsn(sslmode="require"))
    try:
        assert conn.info.ssl_in_use is True, "psycopg2 reports no TLS"
        assert conn.info.ssl_attribute("protocol") in ("TLSv1.2", "TLSv1.3"), conn.info.ssl_attribute("protocol")
        with conn.cursor() as cur:
            cur.execute("SELECT %s::int * 2, current_user", (21,))
            assert cur.fetchone() == (42, "app")
            cur.execute("SELECT g FROM generate_series(1, 1000) g")
            assert len(cur.fetchall()) == 1000
        conn.rollback()
    finally:
        conn.close()


def select_over_tls(text, **kw):
    """Logs in with psycopg2 (dsn(**kw)), checks TLS is on and a SELECT of `text`."""
    conn = psycopg2.connect(dsn(**kw))
    try:
        assert conn.info.ssl_in_use is True
        with conn.cursor() as cur:
            cur.execute("SELECT %s", (text,))
            assert cur.fetchone() == (text,)
    finally:
        conn.close()


@test
def psycopg2_sslmode_verify_full_accepts_the_proxy_certificate():
    select_over_tls("verified", host="localhost", hostaddr=HOST, sslmode="verify-full", sslrootcert=CERT)


@test
def psql_sslmode_require_conninfo():
    env = dict(os.environ, PGPASSWORD="secret", PGCONNECT_TIMEOUT="10")
    conn = f"host={HOST} port={TLSP.port} user=app dbname=app sslmode=require"
    out = subprocess.run([PSQL, "-X", "-v", "ON_ERROR_STOP=1", conn, "-c", "\\conninfo", "-c", "SELECT 'psql-ok'"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    assert "SSL connection (protocol: TLS" in out.stdout, out.stdout
    assert "psql-ok" in out.stdout, out.stdout


@test
def sslrequest_with_extra_bytes_in_same_write_is_refused():
    # SSLRequest and a StartupMessage in one write: the startup bytes were not
    # encrypted, so they must not be used (CVE-2021-23214): no handshake, no login.
    for extra in (pgwire.startup_message("app", "app"), b"\x16\x03\x01\x00\x05hello"):
        c = pgwire.Connection.open(HOST, TLSP.port, timeout=10)
        try:
            c.send(pgwire.ssl_request() + extra)
            data = b""
            closed = False
            c.sock.settimeout(10)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 10:
                try:
                    chunk = c.sock.recv(65536)
                except ConnectionResetError:
                    closed = True
                    break
                except TimeoutError:
                    break
                if not chunk:
                    closed = True
                    break
                data += chunk
            assert closed and time.monotonic() - t0 < 10, f"connection not closed; got {data!r}"
            # Allowed: nothing, or an answer byte, optionally followed by a protocol-
            # violation error. Not allowed: an authentication request or TLS records.
            rest = data[1:] if data[:1] in (b"S", b"N") else data
            if rest:
                assert rest[:1] == b"E", f"unexpected answer {data!r}"
                (length,) = struct.unpack("!i", rest[1:5])
                assert len(rest) == 1 + length, f"unexpected answer {data!r}"
                fields = pgwire.decode_fields(rest[5:])
                assert fields.get("C") == "08P01", fields
            assert b"R\x00\x00\x00" not in data, f"startup was processed: {data!r}"
        finally:
            c.sock.close()
    assert_alive()
    with tls_connect() as c:
        assert c.scalar("SELECT 1") == "1"


@test
def failed_and_stalled_handshakes_leave_the_proxy_up():
    # garbage instead of a ClientHello
    c = pgwire.Connection.open(HOST, TLSP.port, timeout=10)
    try:
        assert c.request_ssl(wrap=False) == "S"
        c.send(b"this is not a TLS ClientHello at all" * 10)
        assert c.is_closed(timeout=10), "proxy kept a connection with a failed handshake open"
    finally:
        c.sock.close()
    # a client that asks for TLS and never starts the handshake: the login deadline
    # (client_login: 2s) covers the handshake too
    c = pgwire.Connection.open(HOST, TLSP.port, timeout=10)
    try:
        assert c.request_ssl(wrap=False) == "S"
        t0 = time.monotonic()
        assert c.is_closed(timeout=15), "stalled TLS handshake not closed within 15s"
        assert time.monotonic() - t0 > 1.0, "closed before client_login elapsed"
    finally:
        c.sock.close()
    # a client that completes the handshake and vanishes
    s = socket.create_connection((HOST, TLSP.port), timeout=10)
    s.sendall(pgwire.ssl_request())
    assert s.recv(1) == b"S"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ts = ctx.wrap_socket(s, server_hostname="localhost")
    ts.close()
    # a client that verifies the certificate against the wrong CA and aborts
    s = socket.create_connection((HOST, TLSP.port), timeout=10)
    s.sendall(pgwire.ssl_request())
    assert s.recv(1) == b"S"
    ctx = ssl.create_default_context()  # system CAs: the self-signed certificate fails
    try:
        ctx.wrap_socket(s, server_hostname="localhost").close()
        raise AssertionError("self-signed certificate verified against the system CAs")
    except ssl.SSLError:
        pass
    finally:
        s.close()
    assert_alive()
    with tls_connect() as c:
        assert c.scalar("SELECT 'after bad handshakes'") == "after bad handshakes"


@test
def plain_connections_still_work():
    conn = psycopg2.connect(dsn(sslmode="disable"))
    try:
        assert conn.info.ssl_in_use is False
        with conn.cursor() as cur:
            cur.execute("SELECT 'plain'")
            assert cur.fetchone() == ("plain",)
    finally:
        conn.close()
    with pgwire.connect(HOST, TLSP.port, "app", "app", password="secret", timeout=10) as c:
        assert not isinstance(c.sock, ssl.SSLSocket)
        assert c.scalar("SELECT 'plain raw'") == "plain raw"
    # refusing TLS after asking is not possible in the protocol, but a client may ask
    # for GSS encryption first and then for TLS (libpq with gssencmode=prefer)
    c = pgwire.Connection.open(HOST, TLSP.port, timeout=10)
    try:
        c.send(pgwire.gssenc_request())
        assert c._recv_exact(1) == b"N"
        assert c.request_ssl() == "S"
        c.startup("app", "app", "secret")
        assert c.scalar("SELECT 'gss then tls'") == "gss then tls"
    finally:
        c.close()


@test
def many_tls_clients_at_once():
    import concurrent.futures

    def one(i):
        conn = psycopg2.connect(dsn(sslmode="require"))
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT %s", (i,))
                return cur.fetchone()[0]
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert sorted(ex.map(one, range(32))) == list(range(32))


# ------------------------------------------------------------------ channel binding

GS2_PLUS = "p=tls-server-end-point,,"


def certificate_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def scram_by_hand(port, mechanism, gs2, cbind_data=b"", tls=True):
    """One SCRAM login written out: returns (mechanisms offered, error fields or None)."""
    c = pgwire.Connection.open(HOST, port, timeout=10)
    try:
        if tls:
            assert c.request_ssl() == "S"
        c.send(pgwire.startup_message("app", "app"))
        scram = pgwire.ScramClient("secret", gs2=gs2, cbind_data=cbind_data)
        offered = None
        while True:
            t, body = c.recv()
            if t == pgwire.ERROR_RESPONSE:
                return offered, pgwire.decode_fields(body)
            assert t == pgwire.AUTHENTICATION, t
            code, data = pgwire.decode_authentication(body)
            if code == pgwire.AUTH_SASL:
                offered = [m.decode() for m in data.split(b"\0") if m]
                c.send(pgwire.sasl_initial_response(mechanism, scram.client_first()))
            elif code == pgwire.AUTH_SASL_CONTINUE:
                c.send(pgwire.sasl_response(scram.client_final(data)))
            else:
                assert code == pgwire.AUTH_SASL_FINAL, code
                scram.verify_server_final(data)
                return offered, None
    finally:
        c.sock.close()


@test
def channel_binding_libpq_require_over_tls():
    select_over_tls("bound", sslmode="require", channel_binding="require")
    # prefer (libpq's default) picks -PLUS too; disable picks SCRAM-SHA-256 over TLS
    for mode in ("prefer", "disable"):
        conn = psycopg2.connect(dsn(sslmode="require", channel_binding=mode))
        conn.close()


@test
def channel_binding_require_without_tls_fails():
    try:
        psycopg2.connect(dsn(sslmode="disable", channel_binding="require")).close()
        raise AssertionError("channel_binding=require without TLS logged in")
    except psycopg2.OperationalError as e:
        assert "channel binding" in str(e), str(e)
    # plain TCP: only SCRAM-SHA-256 offered, and -PLUS chosen anyway is refused
    offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256", "n,,", tls=False)
    assert offered == ["SCRAM-SHA-256"] and err is None, (offered, err)
    offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256-PLUS", GS2_PLUS, b"x" * 32, tls=False)
    assert err and err.get("C") == "08P01", err
    assert "invalid SASL authentication mechanism" in err.get("M", ""), err
    assert_alive()


@test
def channel_binding_by_hand():
    cert_hash = hashlib.sha256(certificate_der(CERT)).digest()  # an RSA/SHA-256 certificate
    offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256-PLUS", GS2_PLUS, cert_hash)
    assert offered == ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"], offered
    assert err is None, err
    wrong = bytes([cert_hash[0] ^ 1]) + cert_hash[1:]
    for data in (wrong, b"", cert_hash + b"x", hashlib.sha384(certificate_der(CERT)).digest()):
        offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256-PLUS", GS2_PLUS, data)
        assert err and err.get("C") == "08P01" and "channel binding check failed" in err.get("M", ""), (data, err)
    # "y": the client could bind but believes the server cannot, while it offered -PLUS
    offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256", "y,,")
    assert err and err.get("C") == "08P01", err
    assert err.get("M") == "SCRAM channel binding negotiation error", err
    # "n" (cannot bind) over TLS is fine
    offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256", "n,,")
    assert err is None, err
    # -PLUS with "n", or another binding type
    for gs2 in ("n,,", "p=tls-unique,,"):
        offered, err = scram_by_hand(TLSP.port, "SCRAM-SHA-256-PLUS", gs2, cert_hash)
        assert err and err.get("C") == "08P01", (gs2, err)
    assert_alive()


@test
def channel_binding_hash_follows_the_certificate_signature():
    # RFC 5929 section 4.1: the signature's hash (here SHA-384), not always SHA-256.
    cert, key = os.path.join(WORKDIR, "tls384.crt"), os.path.join(WORKDIR, "tls384.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384",
                    "-sha384", "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    proxy = sptest.Proxy("tls384", f"""
        auth: scram-sha-256
        tls: {{ cert: {cert}, key: {key} }}
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}
        """, WORKDIR).start()
    try:
        select_over_tls("bound", port=str(proxy.port), sslmode="require", channel_binding="require")
        der = certificate_der(cert)
        assert scram_by_hand(proxy.port, "SCRAM-SHA-256-PLUS", GS2_PLUS, hashlib.sha384(der).digest())[1] is None
        err = scram_by_hand(proxy.port, "SCRAM-SHA-256-PLUS", GS2_PLUS, hashlib.sha256(der).digest())[1]
        assert err and err.get("C") == "08P01", err
    finally:
        assert proxy.stop(check=True) == 0


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
