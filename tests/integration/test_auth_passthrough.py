#!/usr/bin/env python3
"""`auth: passthrough` (SPEC §14, issue #50): users and passwords come from the shards'
PostgreSQL through `auth_query`, not from the configuration file.

Two shards (pg0, pg1), a table hashed over both, no shard user configured (the proxy
logs in to the shards as the client). Roles made for the test on both instances:
  - sp_pt_scram: a SCRAM verifier, the same on both (pg1's role is created with pg0's
    verifier as its password, as `ALTER ROLE ... PASSWORD 'SCRAM-SHA-256$...'` does);
  - md5user (made by tests/lib/pg.sh, pg_hba md5 for it): an md5 verifier, the same on
    both by construction;
  - sp_pt_split: SCRAM with different salts on the two shards;
  - sp_pt_nologin: a password but NOLOGIN;
  - sp_pt_auth: the auth_query user of the second proxy, not a superuser: it may only
    call a SECURITY DEFINER function (docs/configuration.md's) that reads pg_authid.
Checks, through psycopg2 (libpq):
  - a SCRAM and an md5 role log in with their passwords, the client asked for SCRAM
    resp. md5, and write and read rows on both shards as themselves (the proxy logged in
    to each shard with the client's SCRAM key, or the md5 verifier);
  - a wrong password, an unknown user and a NOLOGIN role: 28P01 "password authentication
    failed for user ...", as PostgreSQL says;
  - a role whose verifier differs between the shards: its login works, a statement on
    the other shard fails with 28P01 naming the differing verifier;
  - a user listed under `users:` (the admin) still authenticates from the file;
  - the non-superuser auth_query through the function works the same;
  - an auth_query that cannot log in: the client gets 08006 "could not look up the
    password ...", the proxy's log says why.
Through psql (PGPASSWORD): the SCRAM and the md5 role log in and run a query; a wrong
password (SCRAM role, md5 role) and an unknown user get psql's own `FATAL:  password
authentication failed for user "..."`, exit status 2.
Through pgjdbc (Debian libpostgresql-jdbc-java; tests/integration/jdbc/
PassthroughLogin.java, compiled once, one JVM for every login): the SCRAM and the md5
role log in and `SELECT current_user` answers; a wrong password and an unknown user get
SQLSTATE 28P01 and the same message.
Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, TEST_TMP, SP_ROOT; PYTHONPATH=tests/lib).
"""
# test-timeout: 120

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_auth_passthrough")
PG = sptest.PG_PORTS
ROLES = ["sp_pt_scram", "sp_pt_split", "sp_pt_nologin", "sp_pt_auth"]
LOOKUP_FN = "sp_pt_lookup"
DB = None
TESTS = []
PROXY = {}


def test(fn):
    TESTS.append(fn)
    return fn


def su(i, db="postgres"):
    return sptest.superuser(PG[i], db)


def run_su(i, sql, params=None, db="postgres"):
    with su(i, db) as c, c.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None


def config(auth_query):
    return f"""
    auth: passthrough
    auth_query:
    {auth_query}
    users:
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: {HOST}, port: {PG[0]} }}
      - {{ name: s1, host: {HOST}, port: {PG[1]} }}
    distributions:
      - name: by_id
        method: hash
        partitions: 4
        tables: {{ pt: id }}
    """


def drop_roles():
    for i in (0, 1):
        try:
            run_su(i, f"DROP FUNCTION IF EXISTS {LOOKUP_FN}(text)")
            for r in ROLES:
                run_su(i, f"DROP ROLE IF EXISTS {r}")
        except Exception as e:  # noqa: BLE001
            print(f"warning: pg{i}: {e}")


def setup():
    global DB
    drop_roles()
    DB = sptest.Databases("authpt").name
    run_su(0, "SET password_encryption = 'scram-sha-256'; CREATE ROLE sp_pt_scram LOGIN PASSWORD 'scram-pw'")
    scram = run_su(0, "SELECT rolpassword FROM pg_authid WHERE rolname = 'sp_pt_scram'")[0][0]
    run_su(1, "CREATE ROLE sp_pt_scram LOGIN PASSWORD %s", (scram,))
    for i in (0, 1):
        run_su(i, "SET password_encryption = 'scram-sha-256'; CREATE ROLE sp_pt_split LOGIN PASSWORD 'split-pw'")
        run_su(i, "CREATE ROLE sp_pt_nologin NOLOGIN PASSWORD 'nologin-pw'")
        run_su(i, "CREATE ROLE sp_pt_auth LOGIN PASSWORD 'auth-pw'")
        # docs/configuration.md's function for an auth_query user that is not a superuser
        run_su(i, f"""CREATE FUNCTION {LOOKUP_FN}(name text) RETURNS text LANGUAGE sql SECURITY DEFINER
                      SET search_path = pg_catalog AS $$
                      SELECT rolpassword FROM pg_authid WHERE rolname = name AND rolcanlogin
                      AND (rolvaliduntil IS NULL OR rolvaliduntil > now()) $$""")
        run_su(i, f"REVOKE ALL ON FUNCTION {LOOKUP_FN}(text) FROM PUBLIC")
        run_su(i, f"GRANT EXECUTE ON FUNCTION {LOOKUP_FN}(text) TO sp_pt_auth")
        run_su(i, "CREATE TABLE pt (id int PRIMARY KEY, who text)", db=DB)
        run_su(i, "GRANT ALL ON pt TO sp_pt_scram, md5user, sp_pt_split", db=DB)
    PROXY["su"] = sptest.Proxy("su", config("  { user: postgres, password: postgres }"), WORK).start()
    PROXY["fn"] = sptest.Proxy("fn", config(f"  {{ user: sp_pt_auth, password: auth-pw, "
                                            f"query: 'SELECT {LOOKUP_FN}($1)' }}"), WORK).start()


def teardown():
    sptest.kill_all()
    if DB:
        sptest.drop_databases(DB)
    drop_roles()


def login(proxy, user, password):
    return psycopg2.connect(host=HOST, port=PROXY[proxy].port, user=user, password=password, dbname=DB,
                            connect_timeout=10, sslmode="disable")


def first_auth_request(proxy, user):
    """The code of the proxy's first Authentication request to `user`."""
    c = pgwire.Connection.open(HOST, PROXY[proxy].port)
    try:
        c.send(pgwire.startup_message(user, DB))
        t, body = c.recv()
        assert t == pgwire.AUTHENTICATION, (t, body)
        return pgwire.decode_authentication(body)[0]
    finally:
        c.sock.close()


def refused(proxy, user, password, code, words):
    """libpq reports a refused login without its SQLSTATE; the raw protocol shows it."""
    try:
        login(proxy, user, password).close()
    except psycopg2.OperationalError as e:
        text = str(e)
        assert words in text, text
        assert raw_login_error(proxy, user) == code
        return text
    raise AssertionError(f"{user} logged in with {password!r}")


def raw_login_error(proxy, user):
    """The SQLSTATE of the FATAL a login as `user` with a wrong password or none gets."""
    c = pgwire.Connection.open(HOST, PROXY[proxy].port)
    try:
        c.send(pgwire.startup_message(user, DB))
        t, body = c.recv()
        if t == pgwire.AUTHENTICATION and pgwire.decode_authentication(body)[0] == pgwire.AUTH_MD5:
            c.send(pgwire.password_message("md5" + "0" * 32))
            t, body = c.recv()
        elif t == pgwire.AUTHENTICATION and pgwire.decode_authentication(body)[0] == pgwire.AUTH_SASL:
            c.send(pgwire.sasl_initial_response("SCRAM-SHA-256", b"n,,n=,r=abcdefghijklmnop"))
            t, body = c.recv()
            if t == pgwire.AUTHENTICATION:
                nonce = dict(kv.split("=", 1) for kv in pgwire.decode_authentication(body)[1].decode().split(","))["r"]
                c.send(pgwire.sasl_response(f"c=biws,r={nonce},p={'A' * 43}=".encode()))
                t, body = c.recv()
        assert t == pgwire.ERROR_RESPONSE, (t, body)
        return pgwire.decode_fields(body)["C"]
    finally:
        c.sock.close()


def writes_on_both_shards(proxy, user, password, base):
    c = login(proxy, user, password)
    try:
        c.autocommit = True
        cur = c.cursor()
        for k in range(base, base + 8):  # 8 keys over 4 partitions on 2 shards
            cur.execute("INSERT INTO pt VALUES (%s, current_user)", (k,))
        cur.execute("SELECT count(*), min(who), max(who) FROM pt WHERE id >= %s AND id < %s", (base, base + 8))
        assert cur.fetchone() == (8, user, user)
    finally:
        c.close()
    per_shard = [run_su(i, f"SELECT count(*) FROM pt WHERE id >= {base} AND id < {base + 8}", db=DB)[0][0]
                 for i in (0, 1)]
    assert all(n > 0 for n in per_shard) and sum(per_shard) == 8, per_shard


@test
def scram_role_logs_in_and_reaches_both_shards():
    assert first_auth_request("su", "sp_pt_scram") == pgwire.AUTH_SASL
    writes_on_both_shards("su", "sp_pt_scram", "scram-pw", 0)


@test
def md5_role_logs_in_and_reaches_both_shards():
    assert first_auth_request("su", "md5user") == pgwire.AUTH_MD5
    writes_on_both_shards("su", "md5user", "md5pw", 100)


@test
def wrong_password_unknown_user_and_nologin_are_refused_as_postgresql_refuses():
    for user, pw in (("sp_pt_scram", "nope"), ("md5user", "nope"), ("sp_pt_ghost", "x"),
                     ("sp_pt_nologin", "nologin-pw")):
        refused("su", user, pw, "28P01", f'password authentication failed for user "{user}"')
    # an unknown user is asked for SCRAM, as a real one
    assert first_auth_request("su", "sp_pt_ghost") == pgwire.AUTH_SASL


def psql(user, password):
    """psql as `user` through the proxy with PGPASSWORD: (exit status, stdout, stderr)."""
    r = subprocess.run(["psql", "-X", "-At", "-h", HOST, "-p", str(PROXY["su"].port), "-U", user, "-d", DB, "-c",
                        "SELECT current_user, count(*) FROM pt"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PGPASSWORD=password, PGSSLMODE="disable", PGCONNECT_TIMEOUT="10"))
    return r.returncode, r.stdout.strip(), r.stderr


@test
def psql_logs_in_and_is_refused_as_from_postgresql():
    for user, pw in (("sp_pt_scram", "scram-pw"), ("md5user", "md5pw")):
        rc, out, err = psql(user, pw)
        assert rc == 0 and out.startswith(f"{user}|"), (user, rc, out, err)
    for user in ("sp_pt_scram", "md5user", "sp_pt_ghost"):
        rc, out, err = psql(user, "wrong")
        assert rc == 2 and f'FATAL:  password authentication failed for user "{user}"' in err, (user, rc, err)


@test
def jdbc_logs_in_and_gets_28p01():
    """pgjdbc (Debian libpostgresql-jdbc-java), one JVM for every login (PassthroughLogin.java)."""
    pkgs = ["libpostgresql-jdbc-java"] + ([] if shutil.which("javac") else ["default-jdk-headless"])
    clients.ensure_apt(*pkgs)
    jar, classes = "/usr/share/java/postgresql.jar", os.path.join(WORK, "classes")
    subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", jar,
                    os.path.join(HERE, "jdbc", "PassthroughLogin.java")], check=True, timeout=120)
    cases = {"sp_pt_scram:scram-pw": "ok sp_pt_scram", "md5user:md5pw": "ok md5user",
             "sp_pt_scram:wrong": "error 28P01", "md5user:wrong": "error 28P01", "sp_pt_ghost:x": "error 28P01"}
    r = subprocess.run(["java", "-cp", f"{classes}:{jar}", "PassthroughLogin", str(PROXY["su"].port), DB] +
                       list(cases), capture_output=True, text=True, timeout=120)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == len(cases), (r.returncode, r.stdout, r.stderr)
    for (case, want), line in zip(cases.items(), lines):
        user = case.split(":")[0]
        assert line.startswith(f"{user} {want}"), (case, line)
        if want.startswith("error"):
            assert f'password authentication failed for user "{user}"' in line, line


@test
def a_verifier_that_differs_between_shards_is_named():
    c = login("su", "sp_pt_split", "split-pw")
    try:
        c.autocommit = True
        cur = c.cursor()
        errors = []
        for k in range(200, 208):
            try:
                cur.execute("INSERT INTO pt VALUES (%s, current_user)", (k,))
            except psycopg2.Error as e:
                errors.append((e.pgcode, str(e)))
        assert errors and len(errors) < 8, errors  # the auth shard's keys work, the other's do not
        assert all(code == "28P01" and "verifier differs" in text for code, text in errors), errors
    finally:
        c.close()


@test
def a_user_in_the_file_authenticates_from_the_file():
    assert sptest.admin(PROXY["su"].port, "SHOW SHARDS")
    refused("su", "admin", "wrong", "28P01", 'password authentication failed for user "admin"')


@test
def a_non_superuser_auth_query_through_a_function():
    writes_on_both_shards("fn", "sp_pt_scram", "scram-pw", 300)
    writes_on_both_shards("fn", "md5user", "md5pw", 400)
    refused("fn", "sp_pt_scram", "nope", "28P01", 'password authentication failed for user "sp_pt_scram"')


@test
def an_auth_query_that_fails_says_so():
    with sptest.Proxy("broken", config("  { user: sp_pt_auth, password: wrong }"), WORK) as p:
        PROXY["broken"] = p
        text = refused("broken", "sp_pt_scram", "scram-pw", "08006",
                       'could not look up the password of user "sp_pt_scram"')
        assert "see the proxy's log" in text, text
        log = p.log_text()
        assert "auth_query for user sp_pt_scram failed" in log and "sp_pt_auth" in log, p.log_tail()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup=setup, teardown=teardown))
