#!/usr/bin/env python3
"""CREATE INDEX / DROP INDEX on the admin console with a catalog (SPEC 12, issue #47,
docs/indexes.md): two proxies on one catalog (s0), a table of 300 rows; CREATE UNIQUE
INDEX on proxy A is built online by both, SHOW INDEXES on both says ready with the rows
the build indexed; a duplicate email through B is PostgreSQL's 23505, a read by email
through B finds its row, CHECK INDEX is clean; errors (a name taken 42P07, a table of no
distribution 42P01, an unknown index 42704, an index of the file SPA01, bad syntax
42601); DROP INDEX on B: gone from SHOW INDEXES on both, its trigger and entries gone
from every shard, and the duplicate the index refused is accepted; made again, its build
fails naming the duplicate (on both proxies), and it is dropped again. Without a catalog
both commands are refused (SPA01)."""
# test-timeout: 120

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import psycopg2  # noqa: E402
import split_load  # noqa: E402
import sptest  # noqa: E402

WORK = sptest.workdir("index_console")
DBS = A = B = C = None


def config(db, catalog=True):
    return split_load.config_head(db) + f"""
    distributions:
      - name: by_id
        method: hash
        partitions: 8
        tables: {{ users: id, things: id }}
    indexes:
      - {{ table: things, columns: [label] }}
    {"catalog: s0" if catalog else ""}
    moves: {{ poll: 100ms, lease: 2s }}
    """


def wait(what, fn, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what} after {timeout}s"
        time.sleep(0.05)


def indexes(proxy):
    return {r[0]: r for r in sptest.admin(proxy.port, "SHOW INDEXES")}


def setup():
    global DBS, A, B, C
    DBS = sptest.Databases("gsic")
    A = sptest.Proxy("index_console-a", config(DBS.name), WORK).start()
    B = sptest.Proxy("index_console-b", config(DBS.name), WORK).start()
    c = A.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE users (id bigint PRIMARY KEY, email text, city text)")
    cur.execute("CREATE TABLE things (id bigint PRIMARY KEY, label text)")
    cur.execute("INSERT INTO users SELECT g, 'u' || g || '@x', 'c' FROM generate_series(1, 300) g")
    c.close()


def teardown():
    for p in (A, B, C):
        if p:
            p.stop()
    if DBS:
        DBS.drop()


def create_and_drop():
    assert sptest.admin(A.port, "CREATE UNIQUE INDEX users_email_key ON users (email)") is None
    for p in (A, B):
        row = wait("ready", lambda: (lambda r: r if r and r[4] == "ready" else None)(indexes(p).get("users_email_key")))
        assert row[1] == "users" and row[3] in ("yes", "true", "t"), row
    built = [indexes(p)["users_email_key"][5] for p in (A, B)]
    assert any("300" in d for d in built) or all(d == "built earlier" for d in built), built
    c = B.connect(DBS.name)
    cur = c.cursor()
    try:
        cur.execute("INSERT INTO users VALUES (1001, 'u7@x', 'dup')")
        raise AssertionError("a duplicate email was accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "23505" and e.diag.constraint_name == "users_email_key", e
        assert e.diag.message_detail == "Key (email)=(u7@x) already exists.", e.diag.message_detail
    cur.execute("SELECT id FROM users WHERE email = 'u42@x'")
    assert cur.fetchall() == [(42,)]
    check = sptest.admin(B.port, "CHECK INDEX users_email_key")[0]
    assert (check[1], check[3], check[4]) == ("300", "0", "0"), check

    sptest.admin_refused(A, "CREATE UNIQUE INDEX users_email_key ON users (email)", "42P07", "already exists")
    sptest.admin_refused(A, "CREATE INDEX nope_idx ON nope (x)", "42P01", "not a table of any distribution")
    sptest.admin_refused(A, "CREATE INDEX users_id_idx ON users (id)", "22023", "distribution key")
    sptest.admin_refused(A, "CREATE INDEX ON users", "42601", "usage")
    sptest.admin_refused(A, "DROP INDEX nope", "42704", "does not exist")
    sptest.admin_refused(A, "DROP INDEX things_label_idx", "SPA01", "configuration file")

    assert sptest.admin(B.port, "DROP INDEX users_email_key") is None
    for p in (A, B):
        wait("dropped", lambda: "users_email_key" not in indexes(p))
    p0, p1 = sptest.PG_PORTS
    for port in (p0, p1):
        left = sptest.query(port, DBS.name, "SELECT to_regclass('splitpoint.users_email_key_entries') IS NULL, "
                                            "NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'splitpoint_users_email_key')",
                            user="postgres", password="postgres")
        assert left == [(True, True)], left
    cur.execute("INSERT INTO users VALUES (1001, 'u7@x', 'dup')")  # (the index no longer refuses it)
    c.close()
    # Made again over the duplicate: the build fails and names it, on both proxies.
    assert sptest.admin(B.port, "create unique index users_email_key on users(email);") is None
    for p in (A, B):
        row = wait("failed", lambda: (lambda r: r if r and r[4] == "failed" else None)(indexes(p).get("users_email_key")))
        assert "u7@x" in row[5], row
    assert sptest.admin(A.port, "DROP INDEX users_email_key") is None


def refused_without_catalog():
    global C
    C = sptest.Proxy("index_console-c", config(DBS.name, catalog=False), WORK).start()
    sptest.admin_refused(C, "CREATE INDEX users_city_idx ON users (city)", "SPA01", "no catalog")
    sptest.admin_refused(C, "DROP INDEX things_label_idx", "SPA01", "no catalog")


if __name__ == "__main__":
    sys.exit(sptest.run_tests([create_and_drop, refused_without_catalog], setup=setup, teardown=teardown,
                              watch=lambda: [p for p in (A, B, C) if p]))
