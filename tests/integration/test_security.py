#!/usr/bin/env python3
"""SPEC §11 security settings through real clients (psycopg2, raw protocol via
tests/lib/pgwire.py) against the shared instance pg0:
  - password_file: / password_env: for a user and a shard: logins work with the
    passwords they hold; SHOW CONFIG and the log never show them; a rotated file is
    read at SIGHUP (the old password stops working, the new one works); a reload whose
    file is missing is rejected with the path in the log and the old passwords stay;
  - allow: a user allowed from 127.0.0.1/32 logs in; one allowed only from 10.0.0.0/8
    and ::1 gets FATAL 28000 'no allow entry for host "127.0.0.1", user ..., SSL off'
    as the first answer to its startup packet (before any authentication request),
    wrong password or right one alike; a reload that adds 127.0.0.0/8 lets it in;
  - auth: trust on a non-loopback listen without tls: `--check` and start-up exit
    non-zero with the reason; a reload of a running proxy to such a file is rejected
    (SIGHUP and admin RELOAD) and the old config stays in force.
(The audit log of admin commands is checked in test_observability.py.)
Run by tests/run (PG0_PORT, SP_BIN, TEST_TMP, SP_ROOT; PYTHONPATH=tests/lib).
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORK = sptest.workdir("test_security")
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def login(port, user, password, db="app"):
    """SELECT current_user through the proxy (psycopg2)."""
    c = psycopg2.connect(host=HOST, port=port, user=user, password=password, dbname=db, connect_timeout=10)
    try:
        with c.cursor() as cur:
            cur.execute("SELECT current_user")
            return cur.fetchone()[0]
    finally:
        c.close()


def login_error(port, user, password, db="app"):
    """The PgError of a raw-protocol login that must fail."""
    try:
        pgwire.connect(HOST, port, user, db, password=password, timeout=10).close()
    except pgwire.PgError as e:
        return e
    raise AssertionError(f"{user} logged in with {password!r}")


def wait_for(cond, within, what):
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        time.sleep(0.1)


# ------------------------------------------------------------------ password_file / password_env

def secrets_body(user_file, shard_file):
    return (f"auth: scram-sha-256\n"
            f"users:\n"
            f"  - {{ name: app, password_file: {user_file} }}\n"
            f"  - {{ name: admin, password_env: SP_TEST_ADMIN_PW, admin: true }}\n"
            f"shards:\n"
            f"  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password_file: {shard_file} }}\n")


@test
def passwords_from_file_and_env():
    user_file, shard_file = os.path.join(WORK, "app.pw"), os.path.join(WORK, "shard.pw")
    write(user_file, "client-pw-1\n")  # the trailing newline is not part of it
    write(shard_file, "secret\n")      # app's real password on pg0
    os.environ["SP_TEST_ADMIN_PW"] = "admin-pw-env"
    with sptest.Proxy("secrets", secrets_body(user_file, shard_file), WORK) as p:
        assert login(p.port, "app", "client-pw-1") == "app"   # client side: file; backend: file
        e = login_error(p.port, "app", "client-pw-1\n")
        assert e.sqlstate == "28P01", e.fields
        rows = sptest.admin(p.port, "SHOW CONFIG", "admin", "admin-pw-env")  # env
        text = "\n".join(" ".join(str(v) for v in r) for r in rows)
        for secret in ("client-pw-1", "admin-pw-env", "secret"):
            assert secret not in text, f"SHOW CONFIG shows {secret!r}:\n{text}"

        # Rotation: the file is read again at SIGHUP.
        write(user_file, "client-pw-2\n")
        p.reload()
        wait_for(lambda: "configuration reloaded" in p.log_text(), 10, "reload")
        e = login_error(p.port, "app", "client-pw-1")
        assert e.sqlstate == "28P01", e.fields
        assert login(p.port, "app", "client-pw-2") == "app"

        # A reload with the file gone is rejected, naming it; the old passwords stay.
        os.unlink(shard_file)
        p.reload()
        wait_for(lambda: "reload rejected" in p.log_text(), 10, "rejected reload")
        line = [ln for ln in p.log_text().splitlines() if "reload rejected" in ln][0]
        assert f'shards[0].password_file: cannot read "{shard_file}": No such file or directory' in line, line
        assert ":8:" in line, f"no line number: {line}"
        assert login(p.port, "app", "client-pw-2") == "app"
        log = p.log_text()
        for secret in ("client-pw-1", "client-pw-2", "admin-pw-env"):
            assert secret not in log, f"the log shows {secret!r}"


@test
def password_sources_bad_config_exit_with_line():
    path = os.path.join(WORK, "bad-secrets.yaml")
    os.environ.pop("SP_TEST_UNSET_PW", None)
    write(path, "listen: 127.0.0.1:6432\nusers:\n  - name: app\n    password: a\n    password_env: HOME\n"
                "  - name: b\n    password_env: SP_TEST_UNSET_PW\n"
                "shards:\n  - { name: s0, password_file: /nonexistent/pw }\n")
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert f"{path}:5: users[0]: give only one of password, password_file and password_env" in r.stderr, r.stderr
    assert f'{path}:7: users[1].password_env: environment variable "SP_TEST_UNSET_PW" is not set' in r.stderr, \
        r.stderr
    assert f'{path}:9: shards[0].password_file: cannot read "/nonexistent/pw"' in r.stderr, r.stderr


# ------------------------------------------------------------------ allow:

def allow_body(extra_allow=""):
    return (f"auth: scram-sha-256\n"
            f"users:\n"
            f"  - {{ name: app, password: secret, allow: [127.0.0.1/32] }}\n"
            f"  - {{ name: outsider, password: secret, allow: [10.0.0.0/8, '::1/128'{extra_allow}] }}\n"
            f"  - {{ name: admin, password: adminpw, admin: true, allow: 10.9.9.9 }}\n"
            f"shards:\n"
            f"  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}\n")


@test
def allow_cidrs_checked_before_authentication():
    with sptest.Proxy("allow", allow_body(), WORK) as p:
        assert login(p.port, "app", "secret") == "app"
        want = 'no allow entry for host "127.0.0.1", user "outsider", database "app", SSL off'
        for pw in ("secret", "wrong"):
            e = login_error(p.port, "outsider", pw)
            assert e.sqlstate == "28000" and e.fields.get("S") == "FATAL", e.fields
            assert e.message == want, e.fields
        # The first answer to the startup packet: no authentication request at all.
        c = pgwire.Connection.open(HOST, p.port)
        try:
            c.send(pgwire.startup_message("outsider", "app"))
            t, body = c.recv()
            assert t == pgwire.ERROR_RESPONSE, (t, body)
            assert pgwire.decode_fields(body).get("C") == "28000", body
        finally:
            c.sock.close()
        try:
            login(p.port, "outsider", "secret")
            raise AssertionError("psycopg2: outsider logged in")
        except psycopg2.OperationalError as e:
            assert want in str(e), str(e)
        # The admin console too.
        e = login_error(p.port, "admin", "adminpw", db="splitpoint")
        assert e.sqlstate == "28000", e.fields
        assert "closed: host 127.0.0.1 is not in user outsider's allow list" in p.log_text()

        p.reload(allow_body(", 127.0.0.0/8"))
        wait_for(lambda: "configuration reloaded" in p.log_text(), 10, "reload")
        assert login(p.port, "outsider", "secret") == "app"


@test
def allow_bad_cidr_rejected_with_line():
    path = os.path.join(WORK, "bad-allow.yaml")
    write(path, "users:\n  - name: app\n    password: a\n    allow:\n      - 10.0.0.1/8\n      - 300.0.0.0/8\n"
                "shards:\n  - name: s0\n")
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert f"{path}:5: users[0].allow[0]: the address has bits set beyond the /8 prefix" in r.stderr, r.stderr
    assert f"{path}:6: users[0].allow[1]: expected an IPv4 or IPv6 address" in r.stderr, r.stderr


# ------------------------------------------------------------------ auth: trust beyond loopback

TRUST_EXPOSED = "auth: trust on listen 0.0.0.0:{port} (beyond loopback) without tls"


@test
def trust_beyond_loopback_refused():
    port = sptest.free_port()
    path = os.path.join(WORK, "trust-exposed.yaml")
    body = f"listen: 0.0.0.0:{port}\nmetrics_listen: 127.0.0.1:{sptest.free_port()}\nauth: trust\n" \
           f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}\n"
    write(path, body)
    want = TRUST_EXPOSED.format(port=port)
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and f"{path}:3: {want}" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([sptest.SP_BIN, "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and want in r.stderr, (r.returncode, r.stderr)
    # Allowed: loopback, or a password method, or TLS (checked in the unit tests).
    write(path, body.replace("0.0.0.0", "127.0.0.1"))
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    write(path, body.replace("auth: trust", "auth: scram-sha-256\nusers: [{ name: app, password: secret }]"))
    r = subprocess.run([sptest.SP_BIN, "--check", "--config", path], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


@test
def trust_beyond_loopback_reload_rejected():
    shard = f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}\n"
    users = "users:\n  - { name: app, password: secret }\n  - { name: admin, password: adminpw, admin: true }\n"
    with sptest.Proxy("trust-reload", "auth: trust\n" + users + shard, WORK) as p:
        assert login(p.port, "app", None) == "app"
        exposed = (f"listen: 0.0.0.0:{p.port}\nmetrics_listen: {HOST}:{p.metrics_port}\nauth: trust\n" +
                   users + shard)
        p.reload(exposed, raw=True)
        wait_for(lambda: "reload rejected" in p.log_text(), 10, "rejected reload")
        assert TRUST_EXPOSED.format(port=p.port) in p.log_text(), p.log_tail()
        try:
            sptest.admin(p.port, "RELOAD")
            raise AssertionError("RELOAD accepted auth: trust on 0.0.0.0")
        except psycopg2.Error as e:
            assert "configuration rejected, the old one stays in force" in str(e), str(e)
            assert "beyond loopback" in str(e), str(e)
        assert login(p.port, "app", None) == "app"
        assert p.alive()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown]))
