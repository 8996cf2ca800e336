#!/usr/bin/env python3
"""The named statements a backend connection holds stay within max_prepared_statements:
the proxy closes the least recently used there before it prepares one more, and keeps
track of a Close PostgreSQL skipped after an error.

Shards: a fresh database on each shared instance, table t (id bigint, v int) hash-sharded
on id, rows 1..100 (v = id * 10). The proxy: pool_size 1 per shard (so every statement of
a shard runs on one backend, whose pg_prepared_statements is read through the proxy with
a shard hint) and max_prepared_statements: 3. Checks:

  - in a transaction block, a portal Executed one row at a time keeps working while five
    new statements are prepared and run in that block, its own statement closed to make
    room (PostgreSQL keeps a portal's plan when its statement is closed);
  - eight named one-shard statements, each Parsed once and then executed in rotation:
    every answer right, each shard's backend holds at most 3 protocol-level statements;
  - six named multi-shard statements (no key) in rotation: the same;
  - a batch whose first Bind fails: PostgreSQL skips the rest, the Close the proxy put
    before the batch's Parse included; every statement held before is still bound by
    name afterwards (a statement the proxy thought closed would be Parsed again: 42P05);
  - the same for a statement re-created (Close + Parse) for a client's Parse of a text
    the backend holds, in a batch skipped after an error.
Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 180

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_backend_statements")
CAP = 3
DBS = None
PROXY = None


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("bst")
    for i in range(2):
        c = DBS.shard(i)
        c.cursor().execute("CREATE TABLE t (id bigint PRIMARY KEY, v int)")
        c.close()
    shards = "".join(f"  - {{ name: s{i}, host: {HOST}, port: {p}, database: {DBS.name}, pool_size: 1 }}\n"
                     for i, p in enumerate(sptest.PG_PORTS))
    PROXY = sptest.Proxy("bst", f"auth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
                                f"max_prepared_statements: {CAP}\n"
                                f"shards:\n{shards}distributions:\n  - name: d\n    method: hash\n"
                                "    partitions: 8\n    tables:\n      t: id\n", WORK).start()
    c = connect()
    c.query("INSERT INTO t SELECT g, g * 10 FROM generate_series(1, 100) g").raise_error()
    c.close()


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


def connect():
    return pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)


def parse(c, name, sql):
    c.send([pgwire.parse_msg(sql, name), pgwire.sync_msg()])
    c.query_collect().raise_error()


def execute(c, name, params):
    c.send([pgwire.bind_msg(params, "", name), pgwire.execute_msg(), pgwire.sync_msg()])
    return c.query_collect()


def held_on_each_shard(c):
    """The protocol-level statements each shard's one backend holds."""
    out = []
    for s in ("s0", "s1"):
        r = c.query(f"/* splitpoint: shard={s} */ SELECT name FROM pg_prepared_statements "
                    "WHERE NOT from_sql ORDER BY name").raise_error()
        out.append([row[0] for row in r.rows])
    return out


def rotate(what, texts, rounds, case):
    """Parses each text as a named statement, then executes them in rotation (case(k,
    round) gives the parameters and the rows wanted); at most CAP held per backend."""
    c = connect()
    for k, text in enumerate(texts):
        parse(c, f"{what}{k}", text)
    for rnd in range(rounds):
        for k in range(len(texts)):
            params, want = case(k, rnd)
            r = execute(c, f"{what}{k}", params).raise_error()
            assert r.rows == want, (what, k, params, r.rows)
    held = held_on_each_shard(c)
    print(f"     statements held per shard after {rounds} rounds of {len(texts)} {what}: {[len(h) for h in held]}")
    assert all(len(h) <= CAP for h in held), held
    c.close()


def one_shard_statements_rotate():
    def case(k, rnd):
        key = 1 + (k * 7 + rnd) % 100
        return [key], [[str(key * 10 + k)]]
    rotate("one-shard", [f"SELECT v + {k} FROM t WHERE id = $1" for k in range(8)], 3, case)


def scatter_statements_rotate():
    def case(k, rnd):
        low = 10 * (k + rnd)
        return [low], [[str(100 - low // 10)]]
    rotate("multi-shard", [f"SELECT count(*) FROM t WHERE v > $1 AND id > -{k}" for k in range(6)], 2, case)


def data_rows(r):
    return [[v.decode() for v in pgwire.decode_data_row(body)] for t, body in r.messages if t == "D"]


def open_portal_survives_new_statements():
    # First, while the backends hold no statement: the portal's is the least recently
    # used one when room is made (closed there by the third new statement).
    c = connect()
    parse(c, "rows", "SELECT g FROM t, generate_series(1, 10) g WHERE t.id = $1 ORDER BY g")
    c.query("BEGIN").raise_error()
    c.send([pgwire.bind_msg([5], "p", "rows"), pgwire.execute_msg("p", 1), pgwire.sync_msg()])
    r = c.query_collect()
    assert r.error is None and data_rows(r) == [["1"]], (r.error, data_rows(r))
    for k in range(5):
        c.send([pgwire.execute_msg("p", 1), pgwire.parse_msg(f"SELECT v + {100 + k} FROM t WHERE id = $1", f"new{k}"),
                pgwire.bind_msg([5], "", f"new{k}"), pgwire.execute_msg(), pgwire.sync_msg()])
        r = c.query_collect()
        assert r.error is None, (k, r.error)
        assert data_rows(r) == [[str(k + 2)], [str(150 + k)]], (k, data_rows(r))
    c.send([pgwire.execute_msg("p", 0), pgwire.sync_msg()])
    r = c.query_collect()
    assert r.error is None and data_rows(r) == [[str(g)] for g in range(7, 11)], (r.error, data_rows(r))
    c.query("COMMIT").raise_error()
    c.close()


def skipped_close_keeps_statement():
    c = connect()
    names = [f"keep{k}" for k in range(CAP)]
    for k, name in enumerate(names):
        parse(c, name, f"SELECT v * $2::int + {k} FROM t WHERE id = $1")
        execute(c, name, [7, 2]).raise_error()
    # Key 7's shard holds these three now (others were closed to make room). A batch
    # whose first Bind fails there (22P02 for $2; $1 routes it): PostgreSQL skips the
    # rest, the Close the proxy put before the new Parse included.
    c.send([pgwire.bind_msg([7, "x"], "", names[0]), pgwire.execute_msg(),
            pgwire.parse_msg("SELECT v * 100 FROM t WHERE id = $1", "fresh"), pgwire.sync_msg()])
    r = c.query_collect()
    assert r.sqlstate == "22P02", (r.sqlstate, r.error)
    for k, name in enumerate(names):
        r = execute(c, name, [7, 3])
        assert r.error is None, (name, r.error)
        assert r.rows == [[str(210 + k)]], (name, r.rows)
    r = execute(c, "fresh", [7])
    assert r.sqlstate == "26000", (r.sqlstate, r.error)  # its Parse was skipped too
    c.close()


def skipped_recreate_keeps_statement():
    # A client Parses a text a backend already holds (another name of the client's, or
    # another client's statement): the proxy re-creates it there with Close + Parse. In a
    # batch PostgreSQL skips after an error, both are skipped and the old one stays.
    c = connect()
    parse(c, "first", "SELECT v * $2::int + 1000 FROM t WHERE id = $1")
    execute(c, "first", [9, 1]).raise_error()
    c.send([pgwire.bind_msg([9, "x"], "", "first"), pgwire.execute_msg(),
            pgwire.parse_msg("SELECT v * $2::int + 1000 FROM t WHERE id = $1", "second"), pgwire.sync_msg()])
    r = c.query_collect()
    assert r.sqlstate == "22P02", (r.sqlstate, r.error)
    r = execute(c, "first", [9, 2])
    assert r.error is None, r.error
    assert r.rows == [["1180"]], r.rows
    c.close()


TESTS = [open_portal_survives_new_statements, one_shard_statements_rotate, scatter_statements_rotate,
         skipped_close_keeps_statement, skipped_recreate_keeps_statement]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
