#!/usr/bin/env python3
"""TLS from the proxy to a shard (SPEC §11, `tls: {mode, ca}` per shard, libpq's sslmode
semantics) against a PostgreSQL 15 of its own started with ssl=on and a pg_hba.conf
that accepts only TLS connections (hostssl), with a CA and a server certificate made
here with openssl (SAN IP:127.0.0.1 only):
  - verify-full to 127.0.0.1 (the name in the certificate): logins, queries, a 200 kB
    value and COPY in and out work, and pg_stat_ssl on the server shows the proxy's
    connection encrypted;
  - verify-full to "localhost" (not in the certificate): the client gets FATAL 08006
    naming the shard and the host-name mismatch; verify-ca to "localhost" works (no
    name check);
  - verify-ca with another CA: FATAL 08006 'certificate verify failed';
  - require works with no CA at all (the certificate is not checked);
  - disable: the server's own refusal ("no pg_hba.conf entry ... no encryption");
  - a bad ca path and verify-full without ca are configuration errors with their line.
Run by tests/run (PG0_PORT, SP_BIN, TEST_TMP, SP_ROOT; PYTHONPATH=tests/lib).
"""

import io
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_shard_tls")
PG_SH = os.path.join(sptest.SP_ROOT, "tests", "lib", "pg.sh")
PG_DIR = os.path.join(WORK, "pgssl")
PG_PORT = None
CERTS = {}
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def pg(*args):
    r = subprocess.run(["bash", PG_SH, *args], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise AssertionError(f"pg.sh {' '.join(args)} failed: {r.stderr[-2000:]}")
    return r.stdout


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=CERT_DIR, timeout=60)


CERT_DIR = os.path.join(PG_DIR, "certs")


def make_certs():
    os.makedirs(CERT_DIR, exist_ok=True)
    for ca in ("ca", "other_ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=splitpoint test {ca}",
                "-keyout", f"{ca}.key", "-out", f"{ca}.crt")
    with open(os.path.join(CERT_DIR, "san.ext"), "w") as f:
        f.write("subjectAltName = IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
            "-out", "server.csr")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
    st = os.stat(os.path.join(PG_DIR, "data"))
    for name in os.listdir(CERT_DIR):
        os.chown(os.path.join(CERT_DIR, name), st.st_uid, st.st_gid)
    os.chown(CERT_DIR, st.st_uid, st.st_gid)
    os.chmod(os.path.join(CERT_DIR, "server.key"), 0o600)
    os.chmod(CERT_DIR, 0o755)
    for k in ("ca", "other_ca", "server"):
        CERTS[k] = os.path.join(CERT_DIR, k + ".crt")


def setup():
    global PG_PORT
    PG_PORT = sptest.free_port()
    pg("pg_start", PG_DIR, str(PG_PORT))
    make_certs()
    hba = os.path.join(PG_DIR, "data", "pg_hba.conf")
    with open(hba, "w") as f:
        f.write("local all all trust\n"
                "hostssl all all 127.0.0.1/32 scram-sha-256\n")
    c = sptest.superuser(PG_PORT)
    cur = c.cursor()
    cur.execute("ALTER SYSTEM SET ssl = on")
    cur.execute("ALTER SYSTEM SET ssl_cert_file = %s", (os.path.join(CERT_DIR, "server.crt"),))
    cur.execute("ALTER SYSTEM SET ssl_key_file = %s", (os.path.join(CERT_DIR, "server.key"),))
    cur.execute("SELECT pg_reload_conf()")
    c.close()
    # From now on only TLS connections get in (psycopg2's default sslmode=prefer does TLS).
    c = sptest.connect(PG_PORT, "app", sslmode="require")
    cur = c.cursor()
    cur.execute("SHOW ssl")
    assert cur.fetchone()[0] == "on"
    c.close()


def teardown():
    if PG_PORT:
        pg("pg_stop", PG_DIR)


def proxy_body(host, tls):
    return (f"auth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
            f"shards:\n  - {{ name: s0, host: {host}, port: {PG_PORT}, database: app, user: app, password: secret,"
            f" tls: {tls} }}\n")


def login_fails(p):
    """The login's ErrorResponse (raw protocol: the proxy opens its first backend at login)."""
    try:
        pgwire.connect(HOST, p.port, "app", "app", password="secret", timeout=20).close()
    except pgwire.PgError as e:
        return e
    raise AssertionError("login succeeded")


def encrypted_backends():
    """Rows of pg_stat_ssl for the app user's connections (other than this one)."""
    c = sptest.connect(PG_PORT, "app", "postgres", "postgres", sslmode="require")
    try:
        cur = c.cursor()
        cur.execute("SELECT s.ssl, s.version FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                    "WHERE a.usename = 'app'")
        return cur.fetchall()
    finally:
        c.close()


@test
def verify_full_matching_name():
    with sptest.Proxy("verify-full", proxy_body("127.0.0.1", f"{{ mode: verify-full, ca: {CERTS['ca']} }}"),
                      WORK) as p:
        c = p.connect("app")
        cur = c.cursor()
        for i in range(3):
            cur.execute("SELECT %s::int + 1, current_user", (i,))
            assert cur.fetchone() == (i + 1, "app")
        cur.execute("SELECT repeat('x', 200000)")  # more than one TLS record and relay buffer
        assert len(cur.fetchone()[0]) == 200000
        # COPY both ways, through the relay.
        cur.execute("DROP TABLE IF EXISTS tls_copy")
        cur.execute("CREATE TABLE tls_copy (id int PRIMARY KEY, v text)")
        data = "".join(f"{i}\tv{i}\n" for i in range(5000))
        cur.copy_expert("COPY tls_copy FROM STDIN", io.StringIO(data))
        out = io.StringIO()
        cur.copy_expert("COPY (SELECT * FROM tls_copy ORDER BY id) TO STDOUT", out)
        assert out.getvalue() == data
        cur.execute("DROP TABLE tls_copy")
        rows = encrypted_backends()
        assert rows and all(r[0] for r in rows), f"proxy's connections not encrypted: {rows}"
        c.close()


@test
def verify_full_mismatching_name():
    with sptest.Proxy("verify-full-bad", proxy_body("localhost", f"{{ mode: verify-full, ca: {CERTS['ca']} }}"),
                      WORK) as p:
        e = login_fails(p)
        assert e.sqlstate == "08006" and e.fields.get("S") == "FATAL", e.fields
        assert 'shard "s0" at localhost:' in e.message and "TLS handshake failed" in e.message, e.message
        assert 'does not name "localhost"' in e.message, e.message
        try:
            p.connect("app").close()
            raise AssertionError("psycopg2 logged in")
        except psycopg2.OperationalError as oe:
            assert "TLS handshake failed" in str(oe), str(oe)
    # verify-ca does not check the name.
    with sptest.Proxy("verify-ca", proxy_body("localhost", f"{{ mode: verify-ca, ca: {CERTS['ca']} }}"),
                      WORK) as p:
        assert sptest.query(p.port, "app", "SELECT 1") == [(1,)]


@test
def verify_ca_other_ca_fails():
    with sptest.Proxy("verify-ca-bad", proxy_body("127.0.0.1", f"{{ mode: verify-ca, ca: {CERTS['other_ca']} }}"),
                      WORK) as p:
        e = login_fails(p)
        assert e.sqlstate == "08006", e.fields
        assert "certificate verify failed" in e.message, e.message


@test
def require_without_checking():
    with sptest.Proxy("require", proxy_body("localhost", "{ mode: require }"), WORK) as p:
        assert sptest.query(p.port, "app", "SELECT 2") == [(2,)]


@test
def disable_refused_by_hostssl():
    with sptest.Proxy("disable", proxy_body("127.0.0.1", "{ mode: disable }"), WORK) as p:
        e = login_fails(p)
        assert e.sqlstate == "28000", e.fields
        assert "no pg_hba.conf entry" in e.message and "no encryption" in e.message, e.message


@test
def bad_tls_config_rejected_with_line():
    path = os.path.join(WORK, "bad-tls.yaml")
    with open(path, "w") as f:
        f.write("shards:\n  - name: s0\n    tls: { mode: verify-full }\n"
                "  - name: s1\n    tls: { mode: verify-ca, ca: /nonexistent/ca.pem }\n"
                "  - name: s2\n    tls: { mode: prefer }\n")
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert f"{path}:3: shards[0].tls: mode verify-full needs ca:" in r.stderr, r.stderr
    assert f'{path}:5: shards[1].tls.ca: cannot read "/nonexistent/ca.pem": No such file or directory' in r.stderr, \
        r.stderr
    assert f"{path}:7: shards[2].tls.mode: expected one of disable | require | verify-ca | verify-full" in r.stderr, \
        r.stderr


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
