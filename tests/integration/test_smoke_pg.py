#!/usr/bin/env python3
"""Proves tests/lib/pgwire.py against the shared PostgreSQL instances (no proxy):
every auth method, simple and extended protocol, errors, transactions status, COPY,
cancel, SSLRequest. Run by tests/run (needs PG0_PORT, PG1_PORT; PYTHONPATH=tests/lib).
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402

HOST = "127.0.0.1"
PG0 = int(os.environ["PG0_PORT"])
PG1 = int(os.environ["PG1_PORT"])

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def connect(port=PG0, user="app", password="secret", database="app", **kw):
    return pgwire.connect(HOST, port, user, database, password=password, timeout=10, **kw)


@test
def scram_auth_both_instances():
    for port in (PG0, PG1):
        with connect(port) as c:
            assert c.status == "I", c.status
            assert c.pid and c.secret is not None
            assert c.parameters["server_version"].startswith("15"), c.parameters
            assert c.parameters["server_encoding"] == "UTF8"
            assert c.scalar("SELECT current_user") == "app"


@test
def md5_and_trust_and_superuser():
    with connect(PG1, "md5user", "md5pw") as c:
        assert c.scalar("SELECT 1") == "1"
    with connect(PG0, "trustuser", None) as c:
        assert c.scalar("SELECT current_user") == "trustuser"
    with connect(PG0, "postgres", "postgres", "postgres") as c:
        assert c.scalar("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") == "t"


@test
def wrong_password_is_28P01():
    for user, pw in (("app", "nope"), ("md5user", "nope")):
        try:
            connect(PG0, user, pw)
        except pgwire.PgError as e:
            assert e.sqlstate == "28P01", e.fields
            assert e.fields["S"] == "FATAL"
        else:
            raise AssertionError(f"{user} logged in with a wrong password")


@test
def missing_password_is_reported():
    try:
        connect(PG0, "app", None)
    except pgwire.ProtocolError as e:
        assert "password" in str(e)
    else:
        raise AssertionError("startup without password succeeded")


@test
def simple_query_multiple_statements():
    with connect() as c:
        r = c.query("SELECT 1 AS a, NULL::text AS b; SELECT g FROM generate_series(1,3) g; ")
        assert r.error is None and r.status == "I"
        assert len(r.results) == 2, r.results
        assert r.results[0].column_names == ["a", "b"]
        assert r.results[0].rows == [["1", None]]
        assert r.results[0].tag == "SELECT 1"
        assert r.results[1].rows == [["1"], ["2"], ["3"]]
        assert r.tag == "SELECT 3"
        assert c.query("").results[0].tag == ""  # EmptyQueryResponse


@test
def error_fields_and_transaction_status():
    with connect() as c:
        r = c.query("SELEC 1")
        assert r.sqlstate == "42601", r.error
        assert r.error["S"] == "ERROR" and "syntax error" in r.error["M"]
        assert r.error["P"] == "1", r.error  # position
        assert r.status == "I"
        assert c.query("BEGIN").status == "T"
        r = c.query("SELECT 1/0")
        assert r.sqlstate == "22012" and r.status == "E"
        assert c.query("SELECT 1").sqlstate == "25P02"
        assert c.query("ROLLBACK").status == "I"
        r = c.query("DO $$BEGIN RAISE WARNING 'careful' USING ERRCODE = '01SP1'; END$$")
        assert r.notices and r.notices[0]["C"] == "01SP1" and r.notices[0]["M"] == "careful", r.notices


@test
def extended_protocol():
    with connect() as c:
        r = c.extended("SELECT $1::int + 1 AS n, $2::text AS t, $3::text AS z", [41, "héllo", None])
        assert r.error is None and r.status == "I"
        assert r.rows == [["42", "héllo", None]], r.rows
        kinds = [t for t, _ in r.messages]
        assert kinds == ["1", "2", "T", "D", "C", "Z"], kinds
        # binary result format
        r = c.extended("SELECT 7::int4", result_formats=[1])
        assert r.rows == [[b"\x00\x00\x00\x07"]], r.rows
        # named statement, Describe statement
        c.send([pgwire.parse_msg("SELECT $1::bigint * 2", "dbl"), pgwire.describe_msg("S", "dbl"),
                pgwire.sync_msg()])
        c.expect(pgwire.PARSE_COMPLETE)
        assert pgwire.decode_parameter_description(c.expect(pgwire.PARAMETER_DESCRIPTION)) == [20]
        cols = pgwire.decode_row_description(c.expect(pgwire.ROW_DESCRIPTION))
        assert cols[0].type_oid == 20
        c.expect(pgwire.READY_FOR_QUERY)
        for v in (1, 5):
            c.send([pgwire.bind_msg([v], statement="dbl"), pgwire.execute_msg(), pgwire.sync_msg()])
            r = c.query_collect()
            assert r.rows == [[str(v * 2)]], r.rows
        # partial execute: PortalSuspended
        c.send([pgwire.parse_msg("SELECT generate_series(1,5)"), pgwire.bind_msg(),
                pgwire.execute_msg(max_rows=2), pgwire.sync_msg()])
        r = c.query_collect()
        assert [t for t, _ in r.messages][-2:] == ["s", "Z"] and len(r.rows) == 2
        # error in extended protocol skips to Sync
        r = c.extended("SELECT nope")
        assert r.sqlstate == "42703" and r.status == "I"


@test
def copy_in_and_out():
    with connect() as c:
        c.query("DROP TABLE IF EXISTS pgwire_smoke").raise_error()
        c.query("CREATE TABLE pgwire_smoke (id int, v text)").raise_error()
        try:
            r = c.query("COPY pgwire_smoke FROM STDIN", copy_in=b"1\ta\n2\tb\n")
            assert r.error is None and r.tag == "COPY 2", (r.error, r.tag)
            r = c.query("COPY (SELECT * FROM pgwire_smoke ORDER BY id) TO STDOUT")
            assert b"".join(r.results[0].copy_data) == b"1\ta\n2\tb\n", r.results
            r = c.query("COPY pgwire_smoke FROM STDIN")  # no data -> CopyFail
            assert r.sqlstate == "57014", r.error
        finally:
            c.query("DROP TABLE pgwire_smoke").raise_error()


@test
def cancel_request():
    with connect() as c:
        c.send(pgwire.query_msg("SELECT pg_sleep(30)"))
        time.sleep(0.3)
        t0 = time.monotonic()
        c.cancel()
        r = c.query_collect(timeout=10)
        assert r.sqlstate == "57014", r.error
        assert time.monotonic() - t0 < 5


@test
def ssl_request_refused_then_startup():
    c = pgwire.Connection.open(HOST, PG0)
    try:
        assert c.request_ssl() == "N"  # the test instances run without TLS
        c.startup("app", "app", "secret")
        assert c.scalar("SELECT 2") == "2"
    finally:
        c.close()


@test
def bad_startup_and_timeouts():
    c = pgwire.Connection.open(HOST, PG0, timeout=5)
    try:
        c.send(pgwire.startup_message("app", "app", version=(9 << 16)))
        t, body = c.recv()
        assert t == "E" and pgwire.decode_fields(body)["C"] == "0A000", (t, body)
        assert c.is_closed()
    finally:
        c.sock.close()
    with connect() as c:
        try:
            c.recv(timeout=0.2)
        except TimeoutError:
            pass
        else:
            raise AssertionError("recv returned without a message")


@test
def concurrent_connections():
    errors = []

    def work(i):
        try:
            with connect(PG0 if i % 2 else PG1) as c:
                assert c.scalar(f"SELECT {i}") == str(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@test
def scram_client_rfc7677_vector():
    # RFC 7677 section 3 example (user "user", password "pencil").
    s = pgwire.ScramClient("pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    s.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = s.client_final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                           b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="), final
    s.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS))
