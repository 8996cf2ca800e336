#!/usr/bin/env python3
"""Issue #45 (SPEC §14): extended-protocol batches and pipelines exactly as PostgreSQL.

After an error, PostgreSQL skips every message until Sync and rolls back the implicit
transaction the batch was; notices stay in order before the error; an error at COMMIT
inside a pipeline leaves the connection usable. Each case is a list of statements sent
as one pipeline (Parse/Bind/Describe/Execute, unnamed, with a Sync wherever the case
says), sent byte for byte the same to one plain PostgreSQL and through splitpoint:
- over one shard (nothing sharded, session pooling), and
- over two shards in transaction pooling, with `t` hash-distributed (ids 1..8 spread
  over both shards) and `u` unlisted.
The answers (message types, SQLSTATEs, command tags, rows) and the tables' contents
afterwards must be identical.

Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_WORKDIR).
"""
# test-timeout: 120

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402

WORK = sptest.workdir("test_pipeline_atomicity")
SYNC = ("SYNC", ())
SCHEMA = ["CREATE TABLE t (id int PRIMARY KEY, v text)",
          "CREATE TABLE u (id int, v text, CONSTRAINT u_once UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)"]

CASES = {
    # PostgreSQL rolls the whole implicit transaction back: nothing of it stays.
    "error_mid_batch": [("INSERT INTO t VALUES (1, 'a')", ()), ("SELECT 1/0", ()),
                        ("INSERT INTO t VALUES (2, 'b')", ()), ("INSERT INTO u VALUES (1, 'x')", ()), SYNC],
    "error_then_next_batch": [("INSERT INTO t VALUES (1, 'a')", ()), SYNC,
                              ("INSERT INTO t VALUES (2, 'b')", ()), ("SELECT 1/0", ()),
                              ("INSERT INTO t VALUES (3, 'c')", ()), SYNC,
                              ("INSERT INTO t VALUES (4, 'd')", ()), SYNC],
    "keys_on_both_shards": [("INSERT INTO t VALUES (1, 'a')", ()), ("INSERT INTO t VALUES (2, 'b')", ()),
                            ("INSERT INTO t VALUES (3, 'c')", ()), ("INSERT INTO t VALUES (4, 'd')", ()),
                            ("INSERT INTO t VALUES ($1, 'e')", ("5",)), ("SELECT 1/0", ()),
                            ("INSERT INTO t VALUES (6, 'f')", ()), SYNC,
                            ("SELECT count(*) FROM t", ()), SYNC],
    "duplicate_key_mid_batch": [("INSERT INTO t VALUES (1, 'a')", ()), SYNC,
                                ("INSERT INTO t VALUES (7, 'a')", ()), ("INSERT INTO t VALUES (1, 'again')", ()),
                                ("INSERT INTO t VALUES (8, 'h')", ()), SYNC],
    "block_across_syncs": [("BEGIN", ()), ("INSERT INTO t VALUES (1, 'a')", ()), SYNC,
                           ("INSERT INTO t VALUES (2, 'b')", ()), ("SELECT 1/0", ()),
                           ("INSERT INTO t VALUES (3, 'c')", ()), SYNC,
                           ("INSERT INTO t VALUES (4, 'd')", ()), SYNC,
                           ("COMMIT", ()), SYNC, ("INSERT INTO t VALUES (5, 'e')", ()), SYNC],
    "notice_before_error": [("DROP TABLE IF EXISTS no_such_table", ()), ("SELECT 1/0", ()), SYNC,
                            ("DROP TABLE IF EXISTS no_such_table", ()), SYNC],
    "error_at_commit": [("BEGIN", ()), ("INSERT INTO u VALUES (1, 'x')", ()), ("INSERT INTO u VALUES (1, 'y')", ()),
                        ("COMMIT", ()), SYNC, ("SELECT count(*) FROM u", ()), SYNC,
                        ("INSERT INTO u VALUES (2, 'z')", ()), SYNC],
    "read_after_error": [("INSERT INTO t VALUES (1, 'a')", ()), ("SELECT v FROM t WHERE id = 1", ()),
                         ("SELECT 1/0", ()), ("SELECT v FROM t WHERE id = 1", ()), SYNC,
                         ("SELECT count(*) FROM t", ()), SYNC],
}

DBS = None
DIRECT = None  # a database on PG0 that no proxy uses: the plain PostgreSQL
PROXIES = {}


def config(mode):
    p = sptest.PG_PORTS
    if mode == "one_shard":
        return f"""
        pool_mode: session
        auth: scram-sha-256
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: 127.0.0.1, port: {p[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
        """
    return f"""
    pool_mode: transaction
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
      - {{ name: s1, host: 127.0.0.1, port: {p[1]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 8
        tables: {{ t: id }}
    transactions:
      cross_shard_writes: two_phase
    """


def pipeline_bytes(steps):
    out = b""
    for sql, params in steps:
        if sql == "SYNC":
            out += pgwire.sync_msg()
            continue
        out += pgwire.parse_msg(sql) + pgwire.bind_msg(list(params)) + pgwire.describe_msg("P") + pgwire.execute_msg()
    return out


def answers(conn, steps):
    """Sends the whole pipeline at once and reads every answer up to the last Sync's."""
    conn.send(pipeline_bytes(steps))
    syncs = sum(1 for s in steps if s[0] == "SYNC")
    got = []
    while syncs:
        t, body = conn.recv(timeout=20)
        if t == "S":
            continue  # ParameterStatus: not part of the comparison
        if t in ("E", "N"):
            f = pgwire.decode_fields(body)
            got.append(f"{t} {f.get('C')}")
        elif t == "C":
            got.append("C " + pgwire.decode_command_complete(body))
        elif t == "D":
            got.append("D " + repr(pgwire.decode_data_row(body)))
        elif t == "Z":
            got.append("Z " + body.decode())
            syncs -= 1
        else:
            got.append(t)
    return got


def contents(conn):
    out = []
    for table in ("t", "u"):
        r = conn.query(f"SELECT id, v FROM {table} ORDER BY id, v")
        out.append((table, r.results[0].rows))
    return out


def reset(conn):
    conn.query("TRUNCATE t; TRUNCATE u")


def open_direct():
    return pgwire.connect("127.0.0.1", sptest.PG_PORTS[0], "app", DIRECT.name, password="secret")


def open_proxy(mode):
    return pgwire.connect("127.0.0.1", PROXIES[mode].port, "app", DBS.name, password="secret")


def run_case(mode, name):
    steps = CASES[name]
    with open_direct() as d, open_proxy(mode) as p:
        reset(d)
        reset(p)
        want, got = answers(d, steps), answers(p, steps)
        assert got == want, f"{mode} {name}: answers differ\n  direct: {want}\n  proxy:  {got}"
        # Still usable, and the same data.
        assert contents(p) == contents(d), f"{mode} {name}: contents differ\n  direct: {contents(d)}\n  proxy:  {contents(p)}"


def make_tests():
    tests = []
    for mode in ("one_shard", "two_shards"):
        for name in CASES:
            def fn(mode=mode, name=name):
                run_case(mode, name)
            fn.__name__ = f"{mode}_{name}"
            tests.append(fn)
    return tests


def setup():
    global DBS, DIRECT
    DBS = sptest.Databases("pipe")
    DIRECT = sptest.Databases("pipe_direct")
    c = sptest.connect(sptest.PG_PORTS[0], DIRECT.name)
    for s in SCHEMA:
        c.cursor().execute(s)
    c.close()
    for mode in ("one_shard", "two_shards"):
        PROXIES[mode] = sptest.Proxy("pipe_" + mode, config(mode), WORK).start()
    # Through the two-shard proxy: DDL reaches both shards (and the one-shard proxy's s0).
    with open_proxy("two_shards") as p:
        for s in SCHEMA:
            p.query(s).raise_error()


def teardown():
    for p in PROXIES.values():
        p.stop()
    for d in (DBS, DIRECT):
        if d is not None:
            d.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(make_tests(), setup, teardown, watch=lambda: list(PROXIES.values())))
