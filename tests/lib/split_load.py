"""Shared by test_split_range and test_split_partition: writers that upsert a per-key
counter (`INSERT ... ON CONFLICT (id) DO UPDATE SET n = n + 1`) through two proxies that
follow one catalog while the topology changes, the acknowledged increments they count,
and the admin console helpers both use.

start() sets PROXIES (the proxies writers go through) and TABLE (the table they upsert).
"""
import os
import random
import subprocess
import threading
import time

import psycopg2
import sptest

PROXIES = []
TABLE = None
DB = None
KEYS = 3000
INCREMENTS = {}  # key -> acknowledged increments
ERRORS = []
SPM01 = [0]  # held statements past max_hold (not applied)
LOCK = threading.Lock()
STOP = threading.Event()


def config_head(db):
    """The users and the two shards (databases `db`) of both tests' configurations."""
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: postgres, password: postgres, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: postgres, password: postgres, pool_size: 10 }}
    """


def config_tail(catalog):
    """The catalog (on s0; `catalog` itself when a string; none when false), moves and
    scatter settings of both."""
    return f"""
    {f"catalog: {catalog if isinstance(catalog, str) else 's0'}" if catalog else ""}
    moves: {{ max_hold: 5s, poll: 100ms, lease: 2s }}
    scatter: {{ deadline: 10s }}
    """


def start(prefix, config, names, table, workdir):
    """A database on each shard, the two proxies `names` on `config(db)`, and the tables
    counters (by_user) and items (by_range); writers upsert `table`. (db, A, B)"""
    global DB, TABLE
    DB = sptest.Databases(prefix).name
    TABLE = table
    PROXIES[:] = [sptest.Proxy(name, config(DB), workdir) for name in names]
    for p in PROXIES:
        p.start()
    c = PROXIES[0].connect(DB)
    cur = c.cursor()
    cur.execute("CREATE TABLE counters (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    cur.execute("CREATE TABLE items (id int PRIMARY KEY, n bigint NOT NULL)")
    c.close()
    return DB, PROXIES[0], PROXIES[1]


def direct(i, sql, params=None):
    """One statement on shard i's database, not through a proxy."""
    return sptest.query(sptest.PG_PORTS[i], DB, sql, params, "postgres", "postgres")


def cli(proxy, *args):
    """`splitpoint admin` against `proxy`: (exit status, stdout, stderr)."""
    env = dict(os.environ, SP_TEST_ADMIN_PW="adminpw")
    p = subprocess.run([os.environ["SP_BIN"], "admin", "--host", sptest.HOST, "--port", str(proxy.port), "--user",
                        "admin", "--password-env", "SP_TEST_ADMIN_PW", *args], env=env, capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def teardown():
    for p in PROXIES:
        p.stop()
    if DB:
        sptest.drop_databases(DB)


def admin(proxy, sql):
    return sptest.admin(proxy.port, sql)


refused = sptest.admin_refused


def epochs(proxy):
    """The epoch each live proxy runs, as the catalog says (SHOW TOPOLOGY)."""
    return {r[0]: int(r[2]) for r in admin(proxy, "SHOW TOPOLOGY") if r[4] == "yes"}


def wait_move(proxy, move, states=("done",), timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = {int(r[0]): r for r in admin(proxy, "SHOW MOVES ALL")}
        if move in rows and rows[move][5] in states:
            return rows[move]
        time.sleep(0.1)
    raise AssertionError(f"move {move} not {states}: {admin(proxy, 'SHOW MOVES ALL')}")


def writer(seed):
    rnd = random.Random(seed)
    conns = {}
    while not STOP.is_set():
        proxy = rnd.choice(PROXIES)
        try:
            c = conns.get(proxy.name)
            if c is None:
                c = conns[proxy.name] = proxy.connect(DB)
            key = rnd.randrange(KEYS)
            cur = c.cursor()
            cur.execute(f"INSERT INTO {TABLE} (id, n) VALUES (%s, 1) ON CONFLICT (id) DO UPDATE SET n = {TABLE}.n + 1",
                        (key,))
            assert cur.rowcount == 1, ("upsert", key, cur.rowcount)
            with LOCK:
                INCREMENTS[key] = INCREMENTS.get(key, 0) + 1
        except psycopg2.Error as e:
            if getattr(e, "pgcode", None) == "SPM01":  # a held statement past max_hold: not applied
                with LOCK:
                    SPM01[0] += 1
                continue
            with LOCK:
                ERRORS.append(f"{proxy.name}: {getattr(e, 'pgcode', None)} {e}".strip())
            conns.pop(proxy.name, None)
        time.sleep(0.002)
    for c in conns.values():
        c.close()


class Load:
    """Writers through PROXIES for the duration of a `with`."""

    def __enter__(self):
        STOP.clear()
        self.threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(4)]
        for t in self.threads:
            t.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        time.sleep(0.5)
        STOP.set()
        for t in self.threads:
            t.join(30)
        assert not ERRORS, ERRORS[:10]
