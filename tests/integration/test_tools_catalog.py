#!/usr/bin/env python3
"""Issue #45 (SPEC §14): tools that read the catalogs see one PostgreSQL.

Two shards (a fresh database on each shared instance), transaction pooling. s1 makes and
drops a table of its own first, so the same table has another OID on each shard (as on the
demo, where `\\d users` answered "Did not find any relation with OID 16403").
- psql's `\\d users`, `\\d+ orders` and `\\d order_totals` through the proxy, ten times
  each: every one describes the table (its statements read the catalogs of one shard);
- `SELECT pg_catalog.set_config('search_path', '', false)` holds for the session's next
  statements on whichever backend they run (another client holds the backends the first
  ran on); pg_dump --schema-only through the proxy writes the view as
  `FROM public.orders`, as pg_dump against PostgreSQL does;
- psql's \\lo_import, \\lo_export and \\lo_unlink (fast-path function calls) and lo_get;
- DROP DATABASE of a database whose last client just left (the pool's idle connections
  to it closed first);
- the proxy's own tables are in schema splitpoint, not the application's: after a
  two-phase commit (its decision table made on s0), psql's `\\dt` and
  `pg_dump -n public` through the proxy name no splitpoint object.

Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_WORKDIR).
"""
# test-timeout: 120

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sptest  # noqa: E402

WORK = sptest.workdir("test_tools_catalog")
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
DBS = None
PROXY = None


def config():
    p = sptest.PG_PORTS
    return f"""
    pool_mode: transaction
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
      - {{ name: s1, host: 127.0.0.1, port: {p[1]}, database: {DBS.name}, user: app, password: secret, pool_size: 4 }}
    distributions:
      - name: by_user
        method: hash
        partitions: 4
        tables: {{ users: id, orders: user_id }}
    """


def env():
    return dict(os.environ, PGPASSWORD="secret", PGCONNECT_TIMEOUT="10")


def psql(*args):
    r = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(PROXY.port), "-U", "app", "-d", DBS.name, *args],
                       capture_output=True, text=True, env=env(), timeout=30)
    return r.returncode, r.stdout + r.stderr


def test_describe_tables():
    oids = []
    for i in range(2):
        c = DBS.shard(i)
        cur = c.cursor()
        cur.execute("SELECT 'users'::regclass::oid")
        oids.append(cur.fetchone()[0])
        c.close()
    assert oids[0] != oids[1], f"the shards should number users differently: {oids}"
    for cmd, words in (("\\d users", ["email", "users_pkey"]), ("\\d+ orders", ["amount", "user_id"]),
                       ("\\d order_totals", ["total", "View"])):
        for i in range(10):
            rc, out = psql("-c", cmd)
            assert rc == 0 and all(w in out for w in words), f"{cmd} (run {i + 1}): exit {rc}\n{out}"
    rc, out = psql("-c", "\\dt")
    assert rc == 0 and "users" in out and "orders" in out, out


def test_set_config_holds():
    a = PROXY.connect(DBS.name)
    b = PROXY.connect(DBS.name)
    try:
        a.cursor().execute("SELECT pg_catalog.set_config('search_path', '', false)")
        # b holds the backends a used (one per shard, in a transaction): a's next
        # statements run on others, which must get the setting too.
        b.autocommit = False
        for shard in ("s0", "s1"):
            b.cursor().execute(f"/* splitpoint: shard={shard} */ SELECT 1")
        for _ in range(3):
            cur = a.cursor()
            cur.execute("SELECT current_setting('search_path')")
            got = cur.fetchone()[0]
            # (Empty, as PostgreSQL shows it after set_config; the default is "$user", public.)
            assert got == "", f"search_path after set_config, on another backend: {got!r}"
        b.rollback()
    finally:
        a.close()
        b.close()
    r = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "--schema-only", "-h", "127.0.0.1", "-p", str(PROXY.port),
                        "-U", "app", DBS.name], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0, r.stderr
    view = r.stdout[r.stdout.index("CREATE VIEW public.order_totals"):]
    view = view[:view.index(";")]
    assert "FROM public.orders" in view, f"pg_dump wrote the view without its schema:\n{view}"


def test_large_objects():
    """psql's \\lo_import / \\lo_export / \\lo_unlink (fast-path function calls, which ended
    the session before) and the lo_* functions, all on one shard."""
    src = os.path.join(WORK, "lo_in.bin")
    dst = os.path.join(WORK, "lo_out.bin")
    data = bytes(range(256)) * 64
    with open(src, "wb") as f:
        f.write(data)
    rc, out = psql("-A", "-t", "-c", f"\\lo_import {src}")
    assert rc == 0 and out.startswith("lo_import "), f"exit {rc}: {out}"
    oid = out.split()[1]
    rc, out = psql("-A", "-t", "-c", f"SELECT length(lo_get({oid}))")
    assert rc == 0 and out.strip() == str(len(data)), out
    rc, out = psql("-c", f"\\lo_export {oid} {dst}")
    assert rc == 0, out
    with open(dst, "rb") as f:
        assert f.read() == data, "the exported large object differs"
    rc, out = psql("-c", f"\\lo_unlink {oid}")
    assert rc == 0 and "lo_unlink" in out, out


def test_drop_database_after_its_clients_left():
    """DROP DATABASE right after the last client of it left (Django's and asyncpg's test
    runners): the pools' idle connections to it are closed first."""
    victim = sptest.Databases("tools_victim")
    body = f"""
    pool_mode: transaction
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {sptest.PG_PORTS[0]}, user: app, password: secret, pool_size: 4 }}
      - {{ name: s1, host: 127.0.0.1, port: {sptest.PG_PORTS[1]}, user: app, password: secret, pool_size: 4 }}
    """
    dropped = False
    with sptest.Proxy("tools_drop", body, WORK) as proxy:
        c = proxy.connect(victim.name)
        for shard in ("s0", "s1"):
            c.cursor().execute(f"/* splitpoint: shard={shard} */ SELECT 1")
        c.close()
        c = proxy.connect(DBS.name)  # another database, as a test runner's own connection
        try:
            c.cursor().execute(f"DROP DATABASE {victim.name}")
            dropped = True
        finally:
            c.close()
            if not dropped:
                victim.drop()


def test_own_tables_not_in_public():
    c = PROXY.connect(DBS.name)
    try:
        # Rows of both shards in one statement: a two-phase commit, whose record goes in
        # the recorder's table (made at the first one if recovery has not made it).
        c.cursor().execute("INSERT INTO users SELECT g, 'own' || g FROM generate_series(1001, 1016) g")
    finally:
        c.close()
    assert all(sptest.query(p, DBS.name, "SELECT count(*) FROM users WHERE id > 1000")[0][0]
               for p in sptest.PG_PORTS), "the INSERT did not reach both shards"
    made = sptest.query(sptest.PG_PORTS[0], DBS.name, "SELECT to_regclass('splitpoint.two_phase_decisions')")
    assert made == [("splitpoint.two_phase_decisions",)], made
    rc, out = psql("-c", "\\dt")
    assert rc == 0 and "users" in out and "splitpoint" not in out, out
    r = subprocess.run([os.path.join(PG_BIN, "pg_dump"), "-n", "public", "-h", "127.0.0.1", "-p", str(PROXY.port),
                        "-U", "app", DBS.name], capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "CREATE TABLE public.users" in r.stdout and "\town1001" in r.stdout, r.stdout[:2000]
    named = [line for line in r.stdout.splitlines() if "splitpoint" in line]
    assert not named, named


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("tools")
    c = DBS.shard(1)
    c.cursor().execute("CREATE TABLE shifts_oids (a int)")  # (its OIDs stay used)
    c.cursor().execute("DROP TABLE shifts_oids")
    c.close()
    PROXY = sptest.Proxy("tools", config(), WORK).start()
    c = PROXY.connect(DBS.name)
    for ddl in ("CREATE TABLE users (id int PRIMARY KEY, email text)",
                "CREATE TABLE orders (user_id int, amount numeric)",
                "CREATE VIEW order_totals AS SELECT user_id, sum(amount) AS total FROM orders GROUP BY user_id"):
        c.cursor().execute(ddl)
    c.close()


def teardown():
    if PROXY is not None:
        PROXY.stop()
    if DBS is not None:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([test_describe_tables, test_set_config_holds, test_large_objects,
                               test_drop_database_after_its_clients_left, test_own_tables_not_in_public], setup, teardown,
                              watch=lambda: [PROXY]))
