#!/usr/bin/env python3
"""Client and backend authentication through splitpoint, with psycopg2 (libpq) and raw
protocol exchanges (tests/lib/pgwire.py), against the shared instance pg0.

Client side, one proxy per `auth:` method (trust, password, md5, scram-sha-256), each
with users stored as a plaintext password, as a SCRAM verifier copied from PostgreSQL's
pg_authid and as an md5 verifier copied from pg_authid:
  - the proxy asks for the method configured (first Authentication request);
  - the right password logs in (psycopg2) for every stored form the method can use;
  - a wrong password and an unknown user both fail with SQLSTATE 28P01, FATAL,
    'password authentication failed for user "NAME"' (no difference that would tell a
    probing client which users exist);
  - SCRAM: for a wrong password and for an unknown user the server still answers the
    client-first message with a well-formed server-first message (nonce, salt,
    iterations as for real users, the same salt on every attempt) and fails only
    after the client's proof.
Backend side: shards configured with app/secret (SCRAM on PostgreSQL), md5user/md5pw
(md5 on PostgreSQL) and trustuser (trust), explicitly and through the defaults (the
client's own name and password); a wrong shard password is reported at login.
Run by tests/run (PG0_PORT, PG0_DIR, SP_BIN, TEST_TMP, SP_ROOT; PYTHONPATH=tests/lib).
"""

import base64
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORK = sptest.workdir("test_auth")

SCRAM_ROLE, SCRAM_PW = "sp_auth_scram", "scram-pw-1"
MD5_ROLE, MD5_PW = "sp_auth_md5", "md5-pw-1"


# ------------------------------------------------------------------ PostgreSQL helpers

def pg_admin():
    return sptest.superuser(PG0)


def create_roles() -> dict[str, str]:
    """Creates a role with a SCRAM and one with an md5 password; returns their verifiers
    as stored in pg_authid."""
    verifiers = {}
    with pg_admin() as c, c.cursor() as cur:
        for role, pw, enc in ((SCRAM_ROLE, SCRAM_PW, "scram-sha-256"), (MD5_ROLE, MD5_PW, "md5")):
            cur.execute(f"DROP ROLE IF EXISTS {role}")
            cur.execute(f"SET password_encryption = '{enc}'")
            cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (pw,))
            cur.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,))
            verifiers[role] = cur.fetchone()[0]
    assert verifiers[SCRAM_ROLE].startswith("SCRAM-SHA-256$4096:"), verifiers[SCRAM_ROLE]
    want_md5 = "md5" + hashlib.md5((MD5_PW + MD5_ROLE).encode()).hexdigest()
    assert verifiers[MD5_ROLE] == want_md5, (verifiers[MD5_ROLE], want_md5)
    return verifiers


def setup() -> None:
    VERIFIERS.update(create_roles())


def drop_roles() -> None:
    try:
        with pg_admin() as c, c.cursor() as cur:
            for role in (SCRAM_ROLE, MD5_ROLE):
                cur.execute(f"DROP ROLE IF EXISTS {role}")
    except Exception as e:  # noqa: BLE001
        print(f"warning: could not drop test roles: {e}")


# ------------------------------------------------------------------ client helpers

def pg_connect(port: int, user: str, password: str | None, dbname: str = "app"):
    kw = dict(host=HOST, port=port, user=user, dbname=dbname, connect_timeout=10, sslmode="disable")
    if password is not None:
        kw["password"] = password
    return psycopg2.connect(**kw)


def assert_login_works(port: int, user: str, password: str | None, backend_user: str = "app") -> None:
    conn = pg_connect(port, user, password)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user, %s::int + 1", (41,))
            row = cur.fetchone()
            assert row == (backend_user, 42), row
    finally:
        conn.close()


def first_auth_request(port: int, user: str) -> int:
    """The code of the proxy's first Authentication message for USER."""
    c = pgwire.Connection.open(HOST, port)
    try:
        c.send(pgwire.startup_message(user, "app"))
        t, body = c.recv()
        if t == pgwire.ERROR_RESPONSE:
            raise pgwire.PgError(pgwire.decode_fields(body))
        assert t == pgwire.AUTHENTICATION, (t, body)
        return pgwire.decode_authentication(body)[0]
    finally:
        c.sock.close()


def assert_auth_failed(port: int, user: str, password: str | None) -> None:
    """Login must fail with FATAL 28P01 'password authentication failed for user "USER"'
    (checked on the raw protocol) and psycopg2 must see the same text."""
    want = f'password authentication failed for user "{user}"'
    try:
        pgwire.connect(HOST, port, user, "app", password=password, timeout=10).close()
    except pgwire.PgError as e:
        assert e.sqlstate == "28P01", e.fields
        assert e.fields.get("S") == "FATAL", e.fields
        assert e.message == want, e.fields
    else:
        raise AssertionError(f"{user} logged in with password {password!r}")
    try:
        pg_connect(port, user, password).close()
    except psycopg2.OperationalError as e:
        assert want in str(e), str(e)
    else:
        raise AssertionError(f"psycopg2: {user} logged in with password {password!r}")


def scram_exchange(port: int, user: str, password: str):
    """A raw SCRAM exchange. Returns (server_first attributes, final message type,
    final body fields or data)."""
    c = pgwire.Connection.open(HOST, port)
    try:
        c.send(pgwire.startup_message(user, "app"))
        code, data = pgwire.decode_authentication(c.expect(pgwire.AUTHENTICATION))
        assert code == pgwire.AUTH_SASL, code
        mechanisms = [m for m in data.split(b"\0") if m]
        assert b"SCRAM-SHA-256" in mechanisms, mechanisms
        scram = pgwire.ScramClient(password)
        c.send(pgwire.sasl_initial_response("SCRAM-SHA-256", scram.client_first()))
        t, body = c.recv()
        assert t == pgwire.AUTHENTICATION, f"expected SASLContinue, got {t!r}: {body!r}"
        code, server_first = pgwire.decode_authentication(body)
        assert code == pgwire.AUTH_SASL_CONTINUE, code
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        assert attrs["r"].startswith(scram.nonce) and len(attrs["r"]) > len(scram.nonce), attrs
        assert len(base64.b64decode(attrs["s"])) >= 16, attrs
        c.send(pgwire.sasl_response(scram.client_final(server_first)))
        t, body = c.recv()
        if t == pgwire.ERROR_RESPONSE:
            return attrs, t, pgwire.decode_fields(body)
        code, final = pgwire.decode_authentication(body)
        assert code == pgwire.AUTH_SASL_FINAL, code
        scram.verify_server_final(final)
        return attrs, t, final
    finally:
        c.sock.close()


# ------------------------------------------------------------------ tests

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


VERIFIERS: dict[str, str] = {}
BACKEND_APP = f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: secret }}\n"


def users_yaml() -> str:
    return ("users:\n"
            "  - { name: app, password: secret }\n"
            f"  - {{ name: {SCRAM_ROLE}, password: '{VERIFIERS[SCRAM_ROLE]}' }}\n"
            f"  - {{ name: {MD5_ROLE}, password: '{VERIFIERS[MD5_ROLE]}' }}\n")


def client_proxy(method: str) -> sptest.Proxy:
    return sptest.Proxy(f"client-{method}", f"auth: {method}\n{users_yaml()}{BACKEND_APP}", WORK)


@test
def client_trust():
    with client_proxy("trust") as p:
        assert first_auth_request(p.port, "app") == pgwire.AUTH_OK
        assert_login_works(p.port, "app", None)
        # libpq only sends a password when asked: any password "works" under trust.
        assert_login_works(p.port, "app", "whatever")
        assert_login_works(p.port, SCRAM_ROLE, None)
        assert_login_works(p.port, MD5_ROLE, None)
        assert p.proc.poll() is None


@test
def client_password():
    with client_proxy("password") as p:
        assert first_auth_request(p.port, "app") == pgwire.AUTH_CLEARTEXT
        assert_login_works(p.port, "app", "secret")
        # Cleartext can be checked against either verifier.
        assert_login_works(p.port, SCRAM_ROLE, SCRAM_PW)
        assert_login_works(p.port, MD5_ROLE, MD5_PW)
        assert_auth_failed(p.port, "app", "wrong")
        assert_auth_failed(p.port, SCRAM_ROLE, "wrong")
        assert_auth_failed(p.port, MD5_ROLE, "wrong")
        assert_auth_failed(p.port, "ghost", "secret")
        # The request for an unknown user looks the same as for a known one.
        assert first_auth_request(p.port, "ghost") == pgwire.AUTH_CLEARTEXT


@test
def client_md5():
    with client_proxy("md5") as p:
        assert first_auth_request(p.port, "app") == pgwire.AUTH_MD5
        assert first_auth_request(p.port, "ghost") == pgwire.AUTH_MD5
        assert_login_works(p.port, "app", "secret")
        assert_login_works(p.port, MD5_ROLE, MD5_PW)
        assert_auth_failed(p.port, "app", "wrong")
        assert_auth_failed(p.port, MD5_ROLE, "wrong")
        assert_auth_failed(p.port, "ghost", "secret")
        # Two md5 requests never carry the same salt.
        salts = set()
        for _ in range(5):
            c = pgwire.Connection.open(HOST, p.port)
            try:
                c.send(pgwire.startup_message("app", "app"))
                code, data = pgwire.decode_authentication(c.expect(pgwire.AUTHENTICATION))
                assert code == pgwire.AUTH_MD5 and len(data) == 4, (code, data)
                salts.add(data)
            finally:
                c.sock.close()
        assert len(salts) == 5, salts


@test
def client_md5_with_scram_verifier_uses_scram():
    # PostgreSQL: "md5 ... if the password is stored as SCRAM, SCRAM-SHA-256 is used
    # instead". libpq follows whatever the server asks for.
    with client_proxy("md5") as p:
        assert first_auth_request(p.port, SCRAM_ROLE) == pgwire.AUTH_SASL
        assert_login_works(p.port, SCRAM_ROLE, SCRAM_PW)
        assert_auth_failed(p.port, SCRAM_ROLE, "wrong")


@test
def client_scram():
    with client_proxy("scram-sha-256") as p:
        assert first_auth_request(p.port, "app") == pgwire.AUTH_SASL
        assert_login_works(p.port, "app", "secret")
        assert_login_works(p.port, SCRAM_ROLE, SCRAM_PW)
        assert_auth_failed(p.port, "app", "wrong")
        assert_auth_failed(p.port, SCRAM_ROLE, "wrong")
        assert_auth_failed(p.port, "ghost", "secret")
        # An md5 verifier cannot answer SCRAM (as in PostgreSQL): refused, same error.
        assert_auth_failed(p.port, MD5_ROLE, MD5_PW)

        # Right password: server signature verified by the client.
        attrs, t, final = scram_exchange(p.port, SCRAM_ROLE, SCRAM_PW)
        assert t == pgwire.AUTHENTICATION, final
        # The proxy uses the verifier's own salt and iterations from pg_authid.
        _, rest = VERIFIERS[SCRAM_ROLE].split("$", 1)
        iters, salt = rest.split("$")[0].split(":")
        assert attrs["i"] == iters and attrs["s"] == salt, (attrs, VERIFIERS[SCRAM_ROLE])

        # Wrong password / unknown user: a normal server-first, failure only at the end.
        real_attrs, t, fields = scram_exchange(p.port, "app", "wrong")
        assert t == pgwire.ERROR_RESPONSE and fields["C"] == "28P01", fields
        assert fields["M"] == 'password authentication failed for user "app"', fields
        ghost1, t, fields = scram_exchange(p.port, "ghost", "secret")
        assert t == pgwire.ERROR_RESPONSE and fields["C"] == "28P01", fields
        assert fields["M"] == 'password authentication failed for user "ghost"', fields
        assert fields["S"] == "FATAL", fields
        ghost2, _, _ = scram_exchange(p.port, "ghost", "other")
        # Same mock salt every time (a random one would reveal the user does not exist),
        # iterations as for real users, a salt of the same size.
        assert ghost1["s"] == ghost2["s"], (ghost1, ghost2)
        assert ghost1["i"] == real_attrs["i"], (ghost1, real_attrs)
        assert len(base64.b64decode(ghost1["s"])) == len(base64.b64decode(real_attrs["s"])), (ghost1, real_attrs)
        other, _, _ = scram_exchange(p.port, "ghost2", "secret")
        assert other["s"] != ghost1["s"], "two unknown users share a salt"
        # Real users keep their salt too.
        again, _, _ = scram_exchange(p.port, "app", "wrong again")
        assert again["s"] == real_attrs["s"], (again, real_attrs)


@test
def client_scram_after_failures_still_serves():
    # Many failed logins in a row do not disturb the proxy or later logins.
    with client_proxy("scram-sha-256") as p:
        for i in range(10):
            assert_auth_failed(p.port, "app" if i % 2 else f"nobody{i}", f"bad{i}")
        assert_login_works(p.port, "app", "secret")


@test
def backend_auth_explicit_credentials():
    # Clients log in as "client" (trust); each shard definition names the backend user.
    for user, password, method in (("app", "secret", "scram"), ("md5user", "md5pw", "md5"),
                                   ("trustuser", None, "trust")):
        shard = f"{{ name: s0, host: {HOST}, port: {PG0}, database: app, user: {user}"
        shard += f", password: {password} }}" if password else " }"
        body = f"auth: trust\nusers:\n  - {{ name: client, password: clientpw }}\nshards:\n  - {shard}\n"
        with sptest.Proxy(f"backend-{method}", body, WORK) as p:
            for _ in range(3):  # fresh and pooled backend connections
                assert_login_works(p.port, "client", None, backend_user=user)


@test
def backend_auth_from_client_credentials():
    # No user/password on the shard: the client's own name and (plaintext) password.
    body = (f"auth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
            f"  - {{ name: md5user, password: md5pw }}\n  - {{ name: trustuser, password: tpw }}\n"
            f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, database: app }}\n")
    with sptest.Proxy("backend-defaults", body, WORK) as p:
        assert_login_works(p.port, "app", "secret", backend_user="app")
        assert_login_works(p.port, "md5user", "md5pw", backend_user="md5user")
        assert_login_works(p.port, "trustuser", "tpw", backend_user="trustuser")
        assert_auth_failed(p.port, "md5user", "secret")


@test
def backend_wrong_password_reported_at_login():
    body = (f"auth: trust\nusers:\n  - {{ name: app, password: secret }}\n"
            f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, database: app, user: app, password: nope }}\n")
    with sptest.Proxy("backend-bad-password", body, WORK) as p:
        try:
            pgwire.connect(HOST, p.port, "app", "app", timeout=15).close()
        except pgwire.PgError as e:
            assert e.fields.get("S") == "FATAL", e.fields
            assert "password authentication failed" in e.message, e.fields
        else:
            raise AssertionError("login succeeded although the shard password is wrong")
        # The proxy is still there and says the same to the next client.
        try:
            pg_connect(p.port, "app", None).close()
        except psycopg2.OperationalError as e:
            assert "password authentication failed" in str(e), str(e)
        else:
            raise AssertionError("second login succeeded although the shard password is wrong")


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, drop_roles))
