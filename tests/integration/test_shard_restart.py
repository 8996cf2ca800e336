#!/usr/bin/env python3
"""Issue #44, probe 1: a shard restarted under write load leaves no error behind it that
a proxy could have hidden.

Three shards: s0 and s2 are two databases on the shared instance PG0, s1 a database on
PG1. Eight writers (psycopg2, autocommit, simple protocol) insert rows with ids of their
own into three tables: `items` (hash-distributed on id; a one-row INSERT goes to one
shard), the same with two rows of different shards in one INSERT (a multi-shard write,
one two-phase transaction), and `ref` (a reference table, written on every shard with
two-phase commit). While they run, PG1 is restarted twice: `pg_ctl restart -m fast`,
then `-m immediate` (pg.sh pg_kill + pg_start); each waits until it accepts connections
again. Writers that get an error reconnect and go on. Both pool modes, one proxy each.

Asserted:
- no acknowledged write lost or doubled: every acknowledged id is on its shard(s) exactly
  once (a reference row on all three), an id whose statement failed is there at most once
  (on all shards of a reference row or on none);
- errors only for statements in flight when the shard went down: at most one per writer
  per restart, none once the writers have run a second past the restart;
- the proxy stays up;
- (transaction pooling, after the writers) the pool's idle connections to s1 are dropped
  when s1 restarts with no client asking (SHOW POOLS), not found later by one.

Run by tests/run (PG0_PORT, PG1_PORT, PG0_DIR, PG1_DIR, SP_BIN, SP_ROOT, TEST_WORKDIR).
"""
# test-timeout: 240

import os
import subprocess
import sys
import threading
import time

import psycopg2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import sptest  # noqa: E402

WORK = sptest.workdir("test_shard_restart")
PG_SH = os.path.join(sptest.SP_ROOT, "tests", "lib", "pg.sh")
WRITERS = 8
CHECKS = sptest.Checks()


def check(ok, cid, text):
    return CHECKS.check(ok, cid, lambda: text)


DBS = None    # the database of s0 (PG0) and s1 (PG1)
DBS2 = None   # the database of s2 (PG0)


def pg_sh(*args):
    r = subprocess.run(["bash", PG_SH, *args], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise AssertionError(f"pg.sh {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")


def restart_fast():
    pg_sh("pg_restart", os.environ["PG1_DIR"])


def restart_immediate():
    pg_sh("pg_kill", os.environ["PG1_DIR"])
    pg_sh("pg_start", os.environ["PG1_DIR"], os.environ["PG1_PORT"])


def config(mode):
    p = sptest.PG_PORTS
    return f"""
    pool_mode: {mode}
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p[0]}, database: {DBS.name}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p[1]}, database: {DBS.name}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s2, host: 127.0.0.1, port: {p[0]}, database: {DBS2.name}, user: app, password: secret, pool_size: 10 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 12
        tables: {{ items: id }}
    reference_tables: [ref]
    transactions:
      cross_shard_writes: two_phase
    """


def shard_conns():
    return [DBS.shard(0), DBS.shard(1), sptest.connect(sptest.PG_PORTS[0], DBS2.name)]


class Writer(threading.Thread):
    """One client: writes in a loop until `stop`, reconnecting after an error. Each
    statement is recorded as acknowledged or failed (with its time and SQLSTATE)."""

    def __init__(self, proxy, n, stop):
        super().__init__(daemon=True)
        self.proxy, self.n, self.stop = proxy, n, stop
        self.acked = {"one": [], "two": [], "ref": []}
        self.failed = {"one": [], "two": [], "ref": []}
        self.errors = []  # (monotonic time, sqlstate, message)
        self.conn = None

    def statement(self, i):
        kind = ("one", "two", "ref")[i % 3]
        base = self.n * 1_000_000 + i * 2
        if kind == "one":
            return kind, [base], "INSERT INTO items VALUES (%s, 'w')", (base,)
        if kind == "two":
            return kind, [base, base + 1], "INSERT INTO items VALUES (%s, 'w'), (%s, 'w')", (base, base + 1)
        return kind, [base], "INSERT INTO ref VALUES (%s, 'w')", (base,)

    def run(self):
        i = 0
        while not self.stop.is_set():
            kind, ids, sql, params = self.statement(i)
            i += 1
            try:
                if self.conn is None:
                    self.conn = self.proxy.connect(DBS.name)
                self.conn.cursor().execute(sql, params)
                self.acked[kind] += ids
            except psycopg2.Error as e:
                self.failed[kind] += ids
                self.errors.append((time.monotonic(), e.pgcode, str(e).strip().splitlines()[0] if str(e) else ""))
                try:
                    if self.conn is not None:
                        self.conn.close()
                except psycopg2.Error:
                    pass
                self.conn = None
                time.sleep(0.05)
            time.sleep(0.005)
        if self.conn is not None:
            self.conn.close()


def verify(writers, label):
    items, refs = {}, [{}, {}, {}]
    for s, c in enumerate(shard_conns()):
        cur = c.cursor()
        cur.execute("SELECT id FROM items")
        for (i,) in cur.fetchall():
            items.setdefault(i, []).append(s)
        cur.execute("SELECT id FROM ref")
        for (i,) in cur.fetchall():
            refs[s][i] = refs[s].get(i, 0) + 1
        c.close()
    acked = failed = 0
    for w in writers:
        for i in w.acked["one"] + w.acked["two"]:
            acked += 1
            check(len(items.get(i, [])) == 1, f"{label}: acked item", f"id {i} on shards {items.get(i)}")
        for i in w.failed["one"] + w.failed["two"]:
            failed += 1
            check(len(items.get(i, [])) <= 1, f"{label}: failed item", f"id {i} on shards {items.get(i)}")
        for i in w.acked["ref"]:
            acked += 1
            counts = [refs[s].get(i, 0) for s in range(3)]
            check(counts == [1, 1, 1], f"{label}: acked ref", f"ref id {i}: copies per shard {counts}")
        for i in w.failed["ref"]:
            failed += 1
            counts = [refs[s].get(i, 0) for s in range(3)]
            check(counts in ([0, 0, 0], [1, 1, 1]), f"{label}: failed ref", f"ref id {i}: copies per shard {counts}")
    print(f"{label}: {acked} acknowledged ids, {failed} ids of failed statements checked")


def run_mode(mode):
    name = f"restart_{mode}"
    with sptest.Proxy(name, config(mode), WORK) as proxy:
        c = proxy.connect(DBS.name)
        for table in ("items", "ref"):
            c.cursor().execute(f"DROP TABLE IF EXISTS {table}")
            c.cursor().execute(f"CREATE TABLE {table} (id bigint, v text)")
        c.close()
        stop = threading.Event()
        writers = [Writer(proxy, n + 1, stop) for n in range(WRITERS)]
        for w in writers:
            w.start()
        time.sleep(1.0)
        windows = []  # (label, start, end) of each restart
        for label, restart in (("fast", restart_fast), ("immediate", restart_immediate)):
            t0 = time.monotonic()
            restart()
            t1 = time.monotonic()
            windows.append((label, t0, t1))
            print(f"{mode}: restart -m {label} took {t1 - t0:.2f}s")
            time.sleep(1.5)
        stop.set()
        for w in writers:
            w.join(30)
        check(proxy.alive(), f"{mode}: proxy up", "the proxy exited")
        # A COMMIT PREPARED the restart interrupted is finished by the proxy's recovery.
        deadline = time.monotonic() + 30
        while True:
            left = []
            for port in sptest.PG_PORTS:
                su = sptest.superuser(port)
                cur = su.cursor()
                cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database IN (%s, %s)", (DBS.name, DBS2.name))
                left += [r[0] for r in cur.fetchall()]
                su.close()
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(not left, f"{mode}: prepared transactions resolved", f"left: {left}")
        # Every acknowledged write is committed: no backend is left inside a transaction.
        for port in sptest.PG_PORTS:
            su = sptest.superuser(port)
            cur = su.cursor()
            cur.execute("SELECT datname, state, left(query, 80) FROM pg_stat_activity WHERE datname IN (%s, %s) "
                        "AND state LIKE 'idle in transaction%%'", (DBS.name, DBS2.name))
            stuck = cur.fetchall()
            su.close()
            check(not stuck, f"{mode}: no backend left in a transaction", f"port {port}: {stuck}")
        total = sum(len(w.errors) for w in writers)
        print(f"{mode}: {sum(len(w.acked[k]) for w in writers for k in w.acked)} ids acknowledged, "
              f"{total} client errors")
        for w in writers:
            for t, code, msg in w.errors:
                print(f"  writer {w.n}: {code} {msg} at {t - windows[0][1]:+.2f}s")
            for label, t0, t1 in windows:
                during = [e for e in w.errors if t0 - 0.5 <= e[0] <= t1 + 1.0]
                check(len(during) <= 1, f"{mode}: errors per restart", f"writer {w.n}: {len(during)} errors around "
                      f"restart -m {label}: {[(e[1], e[2]) for e in during]}")
            outside = [e for e in w.errors if not any(t0 - 0.5 <= e[0] <= t1 + 1.0 for _, t0, t1 in windows)]
            check(not outside, f"{mode}: errors outside restarts", f"writer {w.n}: {[(e[1], e[2]) for e in outside]}")
        verify(writers, mode)
        if mode == "transaction":
            idle_pool_dropped(proxy)


def s1_idle(proxy):
    return sum(int(r[3]) for r in sptest.admin(proxy.port, "SHOW POOLS") if r[0] == "s1")


def idle_pool_dropped(proxy):
    """The pool's idle connections to a shard that restarts are dropped when the server
    closes them, with no client asking (SHOW POOLS), not found later by one."""
    before = s1_idle(proxy)
    check(before > 0, "transaction: idle connections to s1 before", f"SHOW POOLS idle for s1: {before}")
    restart_fast()
    deadline = time.monotonic() + 5
    while s1_idle(proxy) and time.monotonic() < deadline:
        time.sleep(0.05)
    after = s1_idle(proxy)
    print(f"transaction: idle connections to s1 {before} -> {after} after a restart with no client")
    check(after == 0, "transaction: idle connections dropped", f"still {after} idle after 5 s")


def test_restart_transaction_pooling():
    run_mode("transaction")


def test_restart_session_pooling():
    run_mode("session")


def setup():
    global DBS, DBS2
    DBS = sptest.Databases("restart")
    DBS2 = sptest.Databases("restart2")
    # The shared instances run with synchronous_commit off (speed): an acknowledged commit
    # would not survive the immediate restart there, by PostgreSQL's own design.
    for port in sptest.PG_PORTS:
        su = sptest.superuser(port)
        for d in (DBS, DBS2):
            su.cursor().execute(f"ALTER DATABASE {d.name} SET synchronous_commit = on")
        su.close()


def teardown():
    for d in (DBS, DBS2):
        if d is not None:
            d.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([test_restart_transaction_pooling, test_restart_session_pooling], setup, teardown,
                              checks=CHECKS))
