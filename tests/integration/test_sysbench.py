#!/usr/bin/env python3
"""sysbench (Debian's, a benchmark nobody here wrote) through splitpoint: every OLTP
workload it ships runs, and its statements answer as one PostgreSQL does.

Two shards (databases sb_<random> on the two shared instances), sbtest1..4 hashed by id
over 8 partitions, the proxy in its defaults (session pooling, two-phase commit):

- `sysbench oltp_read_write prepare --threads=4`, sysbench's default `--auto_inc=on`:
  CREATE TABLE with `id serial`, 4 tables made and filled at once, INSERTs of 100 rows
  that leave the key out (the proxy generates it), CREATE INDEX; then every row once,
  4 x 1000 of them;
- each of oltp_point_select, oltp_read_only, oltp_read_write, oltp_write_only,
  oltp_update_index, oltp_update_non_index, oltp_delete, oltp_insert,
  select_random_points and select_random_ranges for 1 s with 4 threads, in
  `--db-ps-mode=auto` (server-side prepared statements) and `disable` (literal texts):
  exit status 0, transactions done, no FATAL. (Errors sysbench ignores: duplicate keys
  and deadlocks, which its write workloads get from plain PostgreSQL too);
- afterwards, on the shards directly: no id on two shards, each sampled row on the
  shard the proxy routes its id to;
- the shards' final rows copied into one plain database; sysbench's read statements
  (point, the four range forms, random points, random ranges), 40 of each with seeded
  parameters, through the proxy and on the plain database, in the simple (psycopg2)
  and extended (psycopg 3, prepared) protocols: the same rows (as a multiset where the
  statement has no ORDER BY).
"""
# test-timeout: 600

import os
import random
import subprocess
import sys
from collections import Counter
from io import StringIO

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("sysbench", "python3-psycopg")
import psycopg  # noqa: E402

WORK = sptest.workdir("sysbench")
TABLES, ROWS = 4, 1000
DBS = None
PLAIN = None
PROXY = None
WORKLOADS = ("oltp_point_select", "oltp_read_only", "oltp_read_write", "oltp_write_only", "oltp_update_index",
             "oltp_update_non_index", "oltp_delete", "oltp_insert", "select_random_points", "select_random_ranges")


def config(db):
    p0, p1 = sptest.PG_PORTS
    tables = ", ".join(f"sbtest{i}: id" for i in range(1, TABLES + 1))
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: app, password: secret, pool_size: 10 }}
    distributions:
      - {{ name: by_id, method: hash, partitions: 8, tables: {{ {tables} }} }}
    """


def setup():
    global DBS, PLAIN, PROXY
    DBS = sptest.Databases("sb")
    PLAIN = sptest.Databases("sbplain")
    PROXY = sptest.Proxy("sysbench", config(DBS.name), WORK).start()


def teardown():
    if PROXY:
        PROXY.stop()
    for d in (DBS, PLAIN):
        if d:
            d.drop()


def sysbench(test, command, *extra, timeout=120):
    """`sysbench test command` through the proxy: (exit status, output)."""
    args = ["sysbench", test, "--db-driver=pgsql", f"--pgsql-host={sptest.HOST}", f"--pgsql-port={PROXY.port}",
            "--pgsql-user=app", "--pgsql-password=secret", f"--pgsql-db={DBS.name}", f"--tables={TABLES}",
            f"--table-size={ROWS}", "--threads=4", *extra, command]
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def shard_rows(i, table, cols="id"):
    return sptest.query(sptest.PG_PORTS[i], DBS.name, f"SELECT {cols} FROM {table}")


def prepare():
    rc, out = sysbench("oltp_read_write", "prepare")
    assert rc == 0 and "FATAL" not in out, out[-2000:]
    for t in range(1, TABLES + 1):
        ids = [r[0] for i in (0, 1) for r in shard_rows(i, f"sbtest{t}")]
        assert sorted(ids) == list(range(1, ROWS + 1)), f"sbtest{t}: {len(ids)} rows, {len(set(ids))} ids"
        assert all(shard_rows(i, f"sbtest{t}") for i in (0, 1)), f"sbtest{t}: every row on one shard"


def workloads():
    failed = []
    for test in WORKLOADS:
        for mode in ("auto", "disable"):
            rc, out = sysbench(test, "run", "--time=1", f"--db-ps-mode={mode}")
            done = [line for line in out.splitlines() if line.strip().startswith("transactions:")]
            if rc != 0 or "FATAL" in out or not done or int(done[0].split()[1]) == 0:
                failed.append(f"{test} --db-ps-mode={mode} (exit {rc}):\n{out[-1500:]}")
    assert not failed, "\n".join(failed)


def owner(table, key):
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute(f"SELECT inet_server_port() FROM {table} WHERE id = %s", (key,))
    row = cur.fetchone()
    c.close()
    return row[0] if row else None


def rows_on_their_shard():
    for t in range(1, TABLES + 1):
        table = f"sbtest{t}"
        rows = [(sptest.PG_PORTS[i], r[0]) for i in (0, 1) for r in shard_rows(i, table)]
        ids = [r[1] for r in rows]
        assert len(ids) == len(set(ids)), f"{table}: an id on two shards"
        for port, key in rows[:: max(1, len(rows) // 20)]:
            assert owner(table, key) == port, f"{table} id {key} stored on port {port}, routed elsewhere"


def copy_to_plain():
    plain = sptest.connect(sptest.PG_PORTS[0], PLAIN.name)
    pcur = plain.cursor()
    for t in range(1, TABLES + 1):
        table = f"sbtest{t}"
        pcur.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, k integer NOT NULL DEFAULT 0, "
                     "c character(120) NOT NULL DEFAULT '', pad character(60) NOT NULL DEFAULT '')")
        pcur.execute(f"CREATE INDEX k_{t} ON {table}(k)")
        for i in (0, 1):
            buf = StringIO()
            shard = DBS.shard(i)
            shard.cursor().copy_expert(f"COPY {table} (id, k, c, pad) TO STDOUT", buf)
            shard.close()
            buf.seek(0)
            pcur.copy_expert(f"COPY {table} (id, k, c, pad) FROM STDIN", buf)
        pcur.execute(f"ANALYZE {table}")
    plain.close()


def statements():
    """sysbench's read statements (oltp_common.lua, select_random_*.lua) with seeded
    parameters: (sql with %s placeholders, params, ordered)."""
    rnd = random.Random(7)
    out = []
    for _ in range(40):
        t = f"sbtest{rnd.randint(1, TABLES)}"
        a = rnd.randint(1, ROWS)
        b = a + 99
        ks = [rnd.randint(1, ROWS) for _ in range(10)]
        out += [
            (f"SELECT c FROM {t} WHERE id=%s", (a,), False),
            (f"SELECT c FROM {t} WHERE id BETWEEN %s AND %s", (a, b), False),
            (f"SELECT SUM(k) FROM {t} WHERE id BETWEEN %s AND %s", (a, b), False),
            (f"SELECT c FROM {t} WHERE id BETWEEN %s AND %s ORDER BY c", (a, b), True),
            (f"SELECT DISTINCT c FROM {t} WHERE id BETWEEN %s AND %s ORDER BY c", (a, b), True),
            (f"SELECT id, k, c, pad FROM {t} WHERE k IN ({', '.join(['%s'] * 10)})", tuple(ks), False),
            (f"SELECT count(k) FROM {t} WHERE " + " OR ".join(["k BETWEEN %s AND %s"] * 5),
             tuple(v for _ in range(5) for v in (lambda s: (s, s + 5))(rnd.randint(1, ROWS))), False),
        ]
    return out


def answers_as_plain():
    copy_to_plain()
    stmts = statements()

    def simple(port, db):
        c = sptest.connect(port, db)
        cur = c.cursor()
        got = []
        for sql, params, _ in stmts:
            cur.execute(sql, params)
            got.append(cur.fetchall())
        c.close()
        return got

    def extended(port, db):
        url = f"host={sptest.HOST} port={port} dbname={db} user=app password=secret"
        with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c:
            return [[tuple(r) for r in c.execute(sql, params).fetchall()] for sql, params, _ in stmts]

    differ = []
    for name, run in (("simple", simple), ("extended", extended)):
        want = run(sptest.PG_PORTS[0], PLAIN.name)
        got = run(PROXY.port, DBS.name)
        for (sql, params, ordered), w, g in zip(stmts, want, got):
            if (w != g) if ordered else (Counter(w) != Counter(g)):
                differ.append(f"{name}: {sql} {params}: plain {w[:3]}... ({len(w)} rows), proxy {g[:3]}... "
                              f"({len(g)} rows)")
    assert not differ, f"{len(differ)} of {2 * len(stmts)} differ:\n" + "\n".join(differ[:10])


TESTS = [prepare, workloads, rows_on_their_shard, answers_as_plain]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
