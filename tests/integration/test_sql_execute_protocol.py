#!/usr/bin/env python3
"""SQL EXECUTE of a statement prepared with the protocol (issue #45, SPEC §14): in
PostgreSQL SQL and protocol prepared statements share one namespace, so a statement a
client prepared with Parse (a name) runs with `EXECUTE name(args)` in a simple Query.

Differential, with a raw pgwire client: the same exchange byte for byte on one plain
PostgreSQL database and through splitpoint (each answer's columns, rows, tag and
SQLSTATE compared), over

  - one shard in session pooling and in transaction pooling, and
  - two shards (kv hash-sharded by id) in both pool modes: each EXECUTE is routed as
    Bind/Execute of the statement with those arguments would be, so the rows of
    `EXECUTE ins(k, ...)` land on the shard that owns k (the one a plain INSERT picks),
    and `EXECUTE get(k)` reads there; in transaction pooling the backend it runs on is
    often not the one the Parse went to (the proxy prepares it there first).

Steps: untyped and typed (int8) parameters, NULL, a row that is not there, a block
rolled back, a wrong argument count (42601), a duplicate key (23505), EXECUTE after the
protocol Close and after SQL DEALLOCATE (26000), and over one shard a non-constant
argument and a bad value (22P02). Over two shards a non-constant argument, a value that is no
key (routed nowhere in particular), and a statement that would run on several shards,
are refused with 0A000 as they are for SQL PREPARE's statements (a
limit documented in docs/compatibility.md).

Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 120

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_sql_execute_protocol")
DBS = None  # the shards' databases
PLAIN = None  # the plain PostgreSQL's (on the first instance)
PROXIES = {}


def config(mode, shards):
    body = "".join(f"  - {{ name: s{i}, host: {HOST}, port: {sptest.PG_PORTS[i]}, database: {DBS.name}, "
                   "pool_size: 3 }\n" for i in range(shards))
    text = (f"pool_mode: {mode}\nworkers: 1\nauth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
            f"shards:\n{body}")
    if shards > 1:
        text += "distributions:\n  - name: by_id\n    method: hash\n    partitions: 8\n    tables:\n      kv: id\n      kv2: id\n"
    return text


def parse(c, name, sql, oids=()):
    """Parse with a name and Sync: the statement the EXECUTEs below run."""
    c.send([pgwire.parse_msg(sql, name, oids), pgwire.sync_msg()])
    got = c.recv_until("Z")
    errors = [pgwire.decode_error(b) for t, b in got if t == "E"]
    assert not errors, errors


def close(c, name):
    c.send([pgwire.close_msg("S", name), pgwire.sync_msg()])
    assert [t for t, _ in c.recv_until("Z")] == ["3", "Z"]


def answer(c, sql):
    """A simple Query's answer as comparable values: columns (name, type), rows, tag,
    SQLSTATE."""
    c.send(pgwire.query_msg(sql))
    cols, rows, tag, state = None, [], None, None
    for t, b in c.recv_until("Z"):
        if t == "T":
            cols = [(col.name, col.type_oid) for col in pgwire.decode_row_description(b)]
        elif t == "D":
            rows.append([v.decode() if v is not None else None for v in pgwire.decode_data_row(b)])
        elif t == "C":
            tag = pgwire.decode_command_complete(b)
        elif t == "E":
            state = pgwire.decode_error(b)["C"]
    return (sql, cols, rows, tag, state)


def exchange(c, one_shard):
    """The steps; returns every answer in order."""
    out = []
    parse(c, "ins", "INSERT INTO kv (id, v) VALUES ($1, $2)")
    parse(c, "get", "SELECT id, v, $1::text AS asked FROM kv WHERE id = $1", [20])
    for k in range(1, 9):
        out.append(answer(c, f"EXECUTE ins({k}, 'v{k}')"))
    out.append(answer(c, "EXECUTE ins(9, NULL)"))
    for k in (3, 7, 9, 42):
        out.append(answer(c, f"execute get ({k})"))
    for sql in ("BEGIN", "EXECUTE ins(20, 'gone')", "EXECUTE get(20)", "ROLLBACK", "EXECUTE get(20)"):
        out.append(answer(c, sql))
    out.append(answer(c, "EXECUTE get(1, 2)"))
    out.append(answer(c, "EXECUTE ins(1, 'again')"))  # 23505
    if one_shard:
        out.append(answer(c, "EXECUTE get('one')"))
        out.append(answer(c, "EXECUTE get(1 + 2)"))
        parse(c, "cnt", "SELECT count(*) FROM kv")
        out.append(answer(c, "EXECUTE cnt"))
    close(c, "get")
    out.append(answer(c, "EXECUTE get(3)"))
    out.append(answer(c, "DEALLOCATE ins"))
    out.append(answer(c, "EXECUTE ins(30, 'x')"))
    out.append(answer(c, "SELECT id, v FROM kv ORDER BY id"))
    return out


def reset(name):
    for port in sptest.PG_PORTS:
        sptest.query(port, DBS.name, "DELETE FROM kv")
    sptest.query(sptest.PG_PORTS[0], PLAIN.name, "DELETE FROM kv")


def differential(name, one_shard):
    reset(name)
    with pgwire.connect(HOST, sptest.PG_PORTS[0], "app", PLAIN.name, password="secret", timeout=15) as c:
        want = exchange(c, one_shard)
    reset(name)
    with pgwire.connect(HOST, PROXIES[name].port, "app", DBS.name, password="secret", timeout=15) as c:
        got = exchange(c, one_shard)
    for w, g in zip(want, got):
        assert w == g, f"{name}: {g[0]!r}\n  PostgreSQL: {w[1:]}\n  splitpoint: {g[1:]}"
    assert len(want) == len(got)


def placed_by_key(name):
    """Each row EXECUTE inserted is on the shard a plain INSERT of that key picks (into
    kv2, in the same distribution)."""
    with pgwire.connect(HOST, PROXIES[name].port, "app", DBS.name, password="secret", timeout=15) as c:
        c.query("DELETE FROM kv2").raise_error()
        for k in range(1, 9):
            c.query(f"INSERT INTO kv2 (id) VALUES ({k})").raise_error()
    for port in sptest.PG_PORTS:
        executed = {r[0] for r in sptest.query(port, DBS.name, "SELECT id FROM kv WHERE id < 9")}
        plain = {r[0] for r in sptest.query(port, DBS.name, "SELECT id FROM kv2")}
        assert executed == plain, f"{name}: on port {port} EXECUTE put {sorted(executed)}, INSERT {sorted(plain)}"
    counts = [sptest.query(port, DBS.name, "SELECT count(*) FROM kv WHERE id < 9")[0][0] for port in sptest.PG_PORTS]
    assert all(counts), f"{name}: every key on one shard ({counts}): the test shows no routing"


def refused_over_two_shards(name):
    with pgwire.connect(HOST, PROXIES[name].port, "app", DBS.name, password="secret", timeout=15) as c:
        parse(c, "get", "SELECT id FROM kv WHERE id = $1", [20])
        parse(c, "cnt", "SELECT count(*) FROM kv")
        for sql in ("EXECUTE get(1 + 2)", "EXECUTE cnt", "EXECUTE get('one')"):
            r = c.query(sql)
            assert r.sqlstate == "0A000", (name, sql, r.error)
        assert c.query("EXECUTE get(3)").error is None


def setup():
    global DBS, PLAIN
    DBS = sptest.Databases("sqlexec")
    PLAIN = sptest.Databases("sqlexecplain")
    for port in sptest.PG_PORTS:
        sptest.query(port, DBS.name, "CREATE TABLE kv (id bigint PRIMARY KEY, v text); CREATE TABLE kv2 (id bigint)")
    sptest.query(sptest.PG_PORTS[0], PLAIN.name, "CREATE TABLE kv (id bigint PRIMARY KEY, v text)")
    for mode in ("session", "transaction"):
        PROXIES["one-" + mode] = sptest.Proxy("one-" + mode, config(mode, 1), WORK).start()
        PROXIES["two-" + mode] = sptest.Proxy("two-" + mode, config(mode, 2), WORK).start()


def teardown():
    for p in PROXIES.values():
        p.stop()
    for d in (DBS, PLAIN):
        if d:
            d.drop()


def test_one_shard_session():
    differential("one-session", True)


def test_one_shard_transaction():
    differential("one-transaction", True)


def two_shards(mode):
    for step in (differential, placed_by_key, refused_over_two_shards):
        step("two-" + mode, False) if step is differential else step("two-" + mode)


def test_two_shards_session():
    two_shards("session")


def test_two_shards_transaction():
    two_shards("transaction")


if __name__ == "__main__":
    sys.exit(sptest.run_tests([test_one_shard_session, test_one_shard_transaction, test_two_shards_session,
                               test_two_shards_transaction], setup, teardown, watch=lambda: list(PROXIES.values())))
