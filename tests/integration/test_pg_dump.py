#!/usr/bin/env python3
"""pg_dump through splitpoint: the dump of the sharded database is one database's.

Two shards (databases dump_<random> on the two shared instances) and a plain database
(dumpplain_<random>); through the proxy: a reference table `kinds`, a table `notes`
sharded by tenant_id with an `id bigserial` the proxy fills, 300 rows over 30 tenants,
and one block that writes both shards (two-phase commit: the proxy's own decision table
exists on the first shard, in schema splitpoint). Then:

- `pg_dump` (plain format) through the proxy exits 0: its catalog reads go to one shard,
  its `LOCK TABLE`s of the proxy's own tables (on the first shard only) go there, every
  sharded table's `COPY ... TO STDOUT` is every shard's rows;
- the dump restored with `psql -v ON_ERROR_STOP=1` into the plain database gives the
  rows the proxy answers, table by table, and the sequence's value the proxy draws
  from (the first shard's copy), so the restored database goes on numbering after the
  last id;
- a dump without the proxy's own schema (`--exclude-schema=splitpoint`: the other
  proxy has its own) restored through a second proxy over two empty shards (its CREATEs go
  to every shard, its COPYs are split by key, its setval goes to the first shard): the
  same rows through it, each row on the shard that owns it, and a new row's id after
  the last.
"""
# test-timeout: 300

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402

WORK = sptest.workdir("pg_dump")
DBS = None
PLAIN = None
AGAIN = None
PROXY = None


def config(db):
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: app, password: secret, pool_size: 10 }}
    distributions:
      - {{ name: by_tenant, method: hash, partitions: 8, tables: {{ notes: tenant_id }} }}
    reference_tables: [kinds]
    """


def setup():
    global DBS, PLAIN, AGAIN, PROXY
    DBS = sptest.Databases("dump")
    PLAIN = sptest.Databases("dumpplain")
    AGAIN = sptest.Databases("dumpagain")
    PROXY = sptest.Proxy("pg_dump", config(DBS.name), WORK).start()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE kinds (id int PRIMARY KEY, name text NOT NULL)")
    cur.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, tenant_id int NOT NULL, kind int, body text)")
    cur.execute("INSERT INTO kinds VALUES (1, 'memo'), (2, 'todo'), (3, 'tab\there')")
    for t in range(30):
        cur.execute("INSERT INTO notes (tenant_id, kind, body) VALUES " +
                    ", ".join(f"({t}, {1 + n % 3}, 'note {t}/{n}')" for n in range(10)))
    c.autocommit = False
    cur.execute("UPDATE notes SET body = body || ' (both)' WHERE tenant_id IN (0, 1, 2, 3, 4, 5)")
    c.commit()
    c.close()


def teardown():
    if PROXY:
        PROXY.stop()
    for d in (DBS, PLAIN, AGAIN):
        if d:
            d.drop()


def rows(port, db, sql):
    return sptest.query(port, db, sql)


def dump_and_restore():
    shards = [rows(p, DBS.name, "SELECT count(*) FROM notes")[0][0] for p in sptest.PG_PORTS]
    assert all(shards) and sum(shards) == 300, shards
    two_phase = rows(sptest.PG_PORTS[0], DBS.name, "SELECT count(*) FROM pg_tables "
                     "WHERE (schemaname, tablename) = ('splitpoint', 'two_phase_decisions')")
    assert two_phase == [(1,)], "the block did not commit in two phases"
    path = os.path.join(WORK, "dump.sql")
    env = dict(os.environ, PGPASSWORD="secret")
    p = subprocess.run(["pg_dump", "-h", sptest.HOST, "-p", str(PROXY.port), "-U", "app", "-d", DBS.name,
                        "--no-owner", "-f", path], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", sptest.HOST, "-p", str(sptest.PG_PORTS[0]),
                        "-U", "app", "-d", PLAIN.name, "-f", path], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    for table, order in (("kinds", "id"), ("notes", "id")):
        want = rows(PROXY.port, DBS.name, f"SELECT * FROM {table} ORDER BY {order}")
        got = rows(sptest.PG_PORTS[0], PLAIN.name, f"SELECT * FROM {table} ORDER BY {order}")
        assert got == want, f"{table}: {len(got)} rows restored, {len(want)} through the proxy"
    drawn = rows(sptest.PG_PORTS[0], DBS.name, "SELECT last_value FROM notes_id_seq")[0][0]
    restored = rows(sptest.PG_PORTS[0], PLAIN.name, "SELECT last_value FROM notes_id_seq")[0][0]
    assert restored == drawn, (restored, drawn)
    top = rows(sptest.PG_PORTS[0], PLAIN.name, "SELECT max(id) FROM notes")[0][0]
    assert restored >= top, (restored, top)


def restore_through_the_proxy():
    path = os.path.join(WORK, "dump-tables.sql")
    env = dict(os.environ, PGPASSWORD="secret")
    p = subprocess.run(["pg_dump", "-h", sptest.HOST, "-p", str(PROXY.port), "-U", "app", "-d", DBS.name,
                        "--no-owner", "--exclude-schema=splitpoint", "-f", path], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with sptest.Proxy("pg_restore", config(AGAIN.name), WORK) as again:
        p = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", sptest.HOST, "-p", str(again.port),
                            "-U", "app", "-d", AGAIN.name, "-f", path], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        for table in ("kinds", "notes"):
            want = rows(PROXY.port, DBS.name, f"SELECT * FROM {table} ORDER BY id")
            got = rows(again.port, AGAIN.name, f"SELECT * FROM {table} ORDER BY id")
            assert got == want, f"{table}: {len(got)} rows restored, {len(want)} in the source"
        for i, port in enumerate(sptest.PG_PORTS):  # each row where the source had it (same partitions, same shards)
            src = rows(port, DBS.name, "SELECT id FROM notes ORDER BY id")
            dst = rows(port, AGAIN.name, "SELECT id FROM notes ORDER BY id")
            assert src == dst, f"s{i}: {len(dst)} rows, the source shard {len(src)}"
        top = rows(again.port, AGAIN.name, "SELECT max(id) FROM notes")[0][0]
        new = rows(again.port, AGAIN.name, "INSERT INTO notes (tenant_id, body) VALUES (7, 'new') RETURNING id")[0][0]
        assert new > top, (new, top)


TESTS = [dump_and_restore, restore_through_the_proxy]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
