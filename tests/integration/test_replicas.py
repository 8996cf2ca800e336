#!/usr/bin/env python3
"""Replicas and failover (SPEC 10) with real streaming replication.

A private PostgreSQL P (started here, port of its own) is shard s0's primary, and R a
standby of it made with `pg_basebackup -R`; s1 is a database on the first shared
instance, without replicas. The proxy runs with `reads: primary`, health checks every
200 ms, max_replica_lag 1s. A hash distribution `kv` (id) over s0/s1.

- reads go to the primary by default; the hint reads=replica and SET splitpoint.reads
  send a SELECT to the standby (pg_is_in_recovery() answers which host ran it);
  SELECT ... FOR UPDATE and nextval() stay on the primary; queries_total{target} counts;
- read-your-writes: with the standby made slow (recovery_min_apply_delay 1.5s) every
  read right after the session's own write sees it (from the primary), and reads go back
  to the standby once it has replayed; a read pipelined behind a slow write sees it;
- a standby lagging beyond max_replica_lag is not used by a session that wrote nothing;
- scatter reads use the standby for s0 (SHOW splitpoint.last_scatter says which host);
- the standby killed: reads fall back to the primary with no client error, the host is
  banned (splitpoint_host_bans_total); restarted, it serves reads again;
- planned switchover with the shard listed as `hosts: [P, R]` and writers running:
  PAUSE s0, stop P, promote R, RESUME s0: no client error, no acknowledged write lost,
  writes land on R (the new primary); P, rebuilt as a standby of R, serves reads again;
- unplanned failover: the primary killed (immediate shutdown) under writers and the
  standby (synchronous) promoted: only statements in flight fail (08006), writes
  resume within moves.max_hold, no acknowledged write lost;
- two hosts out of recovery: writes refused with SPH01.
"""
# test-timeout: 300

import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import psycopg2  # noqa: E402
import sptest  # noqa: E402

WORKDIR = sptest.workdir("replicas")
PG_SH = os.path.join(sptest.SP_ROOT, "tests", "lib", "pg.sh")
DB = "rep"
P_DIR, R_DIR = os.path.join(WORKDIR, "p"), os.path.join(WORKDIR, "r")
P_PORT = R_PORT = None
SHARED = None  # the database on the shared instance (s1)
PROXY = None


def pg(*args, extra_conf=None):
    env = dict(os.environ)
    if extra_conf:
        env["EXTRA_CONF"] = extra_conf
    r = subprocess.run(["bash", PG_SH, *args], capture_output=True, text=True, env=env, timeout=180)
    if r.returncode != 0:
        raise AssertionError(f"pg.sh {' '.join(args)} failed: {r.stderr[-2000:]}")
    return r.stdout


def direct(port, sql, args=None, db=None):
    return sptest.query(port, db or DB, sql, args)


def config(s0_hosts):
    p0 = sptest.PG_PORTS[0]
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - name: s0
        {s0_hosts}
        database: {DB}
        user: app
        password: secret
        pool_size: 8
      - {{ name: s1, host: 127.0.0.1, port: {p0}, database: {SHARED.name}, user: app, password: secret }}
    distributions:
      - {{ name: d, method: hash, partitions: 8, tables: {{ kv: id }} }}
    reads: primary
    max_replica_lag: 1s
    health: {{ interval: 200ms, timeout: 1s, ban: 500ms }}
    moves: {{ max_hold: 8s }}
    timeouts: {{ client_login: 20s }}
    """


REPLICA_HOSTS = None  # set in setup: `host/port + replicas:` lines


def admin(sql):
    return sptest.admin(PROXY.port, sql)


def hosts():
    return {(r[0], int(r[2])): r for r in admin("SHOW HOSTS")}


def wait_until(pred, secs, what):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {secs}s waiting for {what() if callable(what) else what}")


def standby_ready():
    """The proxy's checks see R as a standby within the lag limit."""
    def ok():
        h = hosts().get(("s0", R_PORT))
        return h is not None and h[3] == "standby" and h[4] is not None and float(h[4]) == 0.0 and h[6] is None
    wait_until(ok, 30, f"R (port {R_PORT}) usable as a standby: {hosts()}")


def key_on_s0():
    """Rows 1..100 inserted through the proxy; the ids that landed on s0 (on P)."""
    c = PROXY.connect(DB)
    for i in range(1, 101):
        c.cursor().execute("INSERT INTO kv VALUES (%s, 'init')", (i,))
    c.close()
    keys = sorted(r[0] for r in direct(P_PORT, "SELECT id FROM kv"))
    assert len(keys) >= 10, keys
    return keys


S0_KEYS = []


def setup():
    global P_PORT, R_PORT, SHARED, PROXY, REPLICA_HOSTS
    P_PORT, R_PORT = sptest.free_port(), sptest.free_port()
    pg("pg_start", P_DIR, str(P_PORT))
    c = sptest.superuser(P_PORT)
    c.cursor().execute(f"CREATE DATABASE {DB} OWNER app")
    c.close()
    SHARED = sptest.Databases("rep")
    for port, db in ((P_PORT, DB), (sptest.PG_PORTS[0], SHARED.name)):
        c = sptest.connect(port, db)
        c.cursor().execute("CREATE TABLE kv (id int PRIMARY KEY, v text); CREATE SEQUENCE seq")
        c.close()
    pg("pg_replica", P_DIR, R_DIR, str(R_PORT))
    REPLICA_HOSTS = (f"host: 127.0.0.1\n        port: {P_PORT}\n"
                     f"        replicas: [ {{ host: 127.0.0.1, port: {R_PORT} }} ]")
    PROXY = sptest.Proxy("replicas", config(REPLICA_HOSTS), WORKDIR).start()
    # The checks need credentials: the configured user has them from the start.
    standby_ready()
    S0_KEYS.extend(key_on_s0())


def teardown():
    if PROXY:
        PROXY.stop()
    for d in (R_DIR, P_DIR):
        try:
            pg("pg_stop", d)
        except AssertionError as e:
            print(e)
    if SHARED:
        SHARED.drop()


def one(cur, sql, args=None):
    cur.execute(sql, args)
    return cur.fetchone()


def reads_go_where_asked():
    # (setup's inserts: until a check sees the standby replay them, it may be behind —
    # with no replayed commit yet, by an unknown lag — and serves no reads)
    standby_ready()
    c = PROXY.connect(DB)
    cur = c.cursor()
    # (A session's first read: after it used the primary, a standby must also have
    # replayed what the primary had then, which the checks see within their interval.)
    assert one(cur, "/* splitpoint: shard=s0, reads=replica */ SELECT pg_is_in_recovery()")[0] is True
    assert one(cur, "/* splitpoint: shard=s0 */ SELECT pg_is_in_recovery()")[0] is False
    time.sleep(0.5)
    before = PROXY.metric("splitpoint_queries_total", {"target": "replica"})
    cur.execute("SET splitpoint.reads = replica")
    assert one(cur, "SHOW splitpoint.reads")[0] == "replica"
    for _ in range(20):
        assert one(cur, "SELECT pg_is_in_recovery() FROM kv WHERE id = %s", (S0_KEYS[0],))[0] is True
    assert PROXY.metric("splitpoint_queries_total", {"target": "replica"}) - before >= 20
    settings = dict(admin("SHOW CONFIG"))
    assert settings["reads"] == "primary" and settings["max_replica_lag"] == "1000ms", settings
    assert settings["health.interval"] == "200ms" and f"127.0.0.1:{R_PORT}" in settings["shards"], settings
    # Not for a standby: row locks, sequences, a transaction block.
    assert one(cur, "SELECT pg_is_in_recovery() FROM kv WHERE id = %s FOR UPDATE", (S0_KEYS[0],))[0] is False
    assert one(cur, "/* splitpoint: shard=s0 */ SELECT nextval('seq'), pg_is_in_recovery()")[1] is False
    c.autocommit = False
    assert one(cur, "/* splitpoint: shard=s0 */ SELECT pg_is_in_recovery()")[0] is False
    c.rollback()
    c.autocommit = True
    cur.execute("RESET splitpoint.reads")
    assert one(cur, "/* splitpoint: shard=s0 */ SELECT pg_is_in_recovery()")[0] is False
    c.close()
    # asyncpg-style extended protocol with psycopg 3 server-side prepare, if installed.
    try:
        import psycopg
    except ImportError:
        return
    with psycopg.connect(host=sptest.HOST, port=PROXY.port, dbname=DB, user="app", password="secret",
                         autocommit=True, prepare_threshold=0) as c3:
        # (SET splitpoint.* is simple-protocol only: the hint, in every statement.)
        read = "/* splitpoint: reads=replica */ SELECT pg_is_in_recovery(), v FROM kv WHERE id = %s"
        for _ in range(5):
            row = c3.execute(read, (S0_KEYS[1],)).fetchone()
            assert row[0] is True, row
        c3.execute("INSERT INTO kv VALUES (%s, 'p3') ON CONFLICT (id) DO UPDATE SET v = 'p3'", (S0_KEYS[1],))
        row = c3.execute(read, (S0_KEYS[1],)).fetchone()
        assert row[1] == "p3", row


def set_apply_delay(value):
    c = sptest.superuser(R_PORT)
    c.cursor().execute(f"ALTER SYSTEM SET recovery_min_apply_delay = '{value}'")
    c.cursor().execute("SELECT pg_reload_conf()")
    c.close()


def read_your_writes():
    set_apply_delay("1500ms")
    try:
        c = PROXY.connect(DB)
        cur = c.cursor()
        cur.execute("SET splitpoint.reads = replica")
        on_primary = 0
        for i, k in enumerate(S0_KEYS[:10]):
            cur.execute("INSERT INTO kv VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET v = excluded.v",
                        (k, f"w{i}"))
            row = one(cur, "SELECT v, pg_is_in_recovery() FROM kv WHERE id = %s", (k,))
            assert row is not None and row[0] == f"w{i}", f"read after own write of id {k}: {row}"
            on_primary += row[1] is False
        assert on_primary >= 8, f"only {on_primary} of 10 reads after a write went to the primary"

        # Once the standby replayed them (1.5 s delay), reads are on it again and see them.
        time.sleep(2.5)
        row = wait_until(lambda: (lambda r: r if r[1] else None)(
            one(cur, "SELECT v, pg_is_in_recovery() FROM kv WHERE id = %s", (S0_KEYS[9],))), 10,
            "reads back on the standby")
        assert row[0] == "w9", row
        c.close()
        # A session that wrote nothing: with the standby behind by more than the 1 s limit
        # (it replays the write elsewhere 3 s late; 1.5 s after it, the checks have seen
        # it hold no more than the primary had 1.3 s or longer ago), its reads go to the
        # primary.
        set_apply_delay("3s")
        w = PROXY.connect(DB)
        w.cursor().execute("UPDATE kv SET v = 'lag' WHERE id = %s", (S0_KEYS[0],))
        r = PROXY.connect(DB)
        rc = r.cursor()
        rc.execute("SET splitpoint.reads = replica")
        time.sleep(1.5)
        got = one(rc, "SELECT v, pg_is_in_recovery() FROM kv WHERE id = %s", (S0_KEYS[0],))
        assert got == ("lag", False), f"read with the standby beyond max_replica_lag: {got}; hosts {hosts()}"
        lag = PROXY.metric("splitpoint_replica_lag_seconds", {"shard": "s0"})
        print(f"     replica lag seen by the proxy while delayed: {lag:.2f} s")
        w.close()
        r.close()
    finally:
        set_apply_delay("0")
    standby_ready()


def pipelined_read_your_writes():
    """The read is sent before the write's answer came back (the write takes 300 ms to
    commit): it must wait for the write on the primary, not go to the standby with
    the LSN the primary had before the commit."""
    import pgwire
    standby_ready()
    with pgwire.Connection.open(sptest.HOST, PROXY.port) as w:
        w.startup("app", DB, "secret")
        assert w.query("SET splitpoint.reads = replica").error is None
        for i, k in enumerate(S0_KEYS[10:14]):
            w.send([pgwire.query_msg(f"UPDATE kv SET v = 'pipe{i}' WHERE id = {k} AND pg_sleep(0.3) IS NOT NULL"),
                    pgwire.query_msg(f"SELECT v FROM kv WHERE id = {k}")])
            first, second = w.query_collect(), w.query_collect()
            assert first.error is None and second.error is None, (first.error, second.error)
            assert second.rows == [[f"pipe{i}"]], f"pipelined read after own write of id {k}: {second.rows}"


def scatter_on_standby():
    expected = direct(P_PORT, "SELECT count(*) FROM kv")[0][0] + direct(sptest.PG_PORTS[0], "SELECT count(*) FROM kv", db=SHARED.name)[0][0]
    c = PROXY.connect(DB)
    cur = c.cursor()
    cur.execute("SET splitpoint.reads = replica")
    cur.execute("SELECT count(*) FROM kv")
    n = cur.fetchone()[0]
    assert n == expected, (n, expected)
    cur.execute("SHOW splitpoint.last_scatter")
    cols = [d[0] for d in cur.description]
    rows = {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}
    assert rows["s0"]["host"] == f"127.0.0.1:{R_PORT}", rows
    assert rows["s1"]["host"] == f"127.0.0.1:{sptest.PG_PORTS[0]}", rows
    cur.execute("RESET splitpoint.reads")
    cur.execute("SELECT count(*) FROM kv")
    assert cur.fetchone()[0] == n
    c.close()


def standby_killed_and_back():
    bans = PROXY.metric("splitpoint_host_bans_total", {"shard": "s0"})
    pg("pg_kill", R_DIR)
    c = PROXY.connect(DB)
    cur = c.cursor()
    cur.execute("SET splitpoint.reads = replica")
    primary_reads = 0
    for _ in range(50):
        row = one(cur, "SELECT pg_is_in_recovery() FROM kv WHERE id = %s", (S0_KEYS[2],))
        primary_reads += row[0] is False
        time.sleep(0.02)
    assert primary_reads == 50, f"{primary_reads} of 50 reads on the primary with the standby down"
    assert PROXY.metric("splitpoint_host_bans_total", {"shard": "s0"}) > bans
    h = hosts()[("s0", R_PORT)]
    assert h[3] == "down" and h[6] is not None, h
    # Restarted: used again once a check finds it.
    pg("pg_restart", R_DIR)
    standby_ready()
    assert one(cur, "SELECT pg_is_in_recovery() FROM kv WHERE id = %s", (S0_KEYS[2],))[0] is True
    c.close()


class Writers:
    """Threads inserting unique ids through the proxy (a new connection after an error),
    recording what was acknowledged and every error."""

    def __init__(self, base, n=4):
        self.base, self.stop_event = base, threading.Event()
        self.acked, self.errors, self.lock = [], [], threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def run(self, n):
        c, i = None, 0
        while not self.stop_event.is_set():
            k = self.base + n * 100000 + i
            i += 1
            try:
                if c is None:
                    c = PROXY.connect(DB)
                c.cursor().execute("INSERT INTO kv VALUES (%s, 'w')", (k,))
                with self.lock:
                    self.acked.append(k)
            except psycopg2.Error as e:
                with self.lock:
                    self.errors.append((e.pgcode, f"{k}: {str(e).strip()}"))
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
                c = None
                time.sleep(0.05)
        if c:
            c.close()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def wait_for_more(self, n, secs, what):
        n0 = len(self.acked)
        wait_until(lambda: len(self.acked) > n0 + n, secs, what)

    def check_nothing_lost(self, primary_port):
        on_primary = {r[0] for r in direct(primary_port, "SELECT id FROM kv WHERE id >= %s", (self.base,))}
        on_s1 = {r[0] for r in direct(sptest.PG_PORTS[0], "SELECT id FROM kv WHERE id >= %s", (self.base,),
                                      db=SHARED.name)}
        missing = [k for k in self.acked if k not in on_primary and k not in on_s1]
        assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"


def rebuild_old_primary_as_standby():
    """The old primary (P) comes back as a standby of the new one (R) and serves reads;
    then the names swap: P is the primary again, R the standby."""
    global P_PORT, R_PORT, P_DIR, R_DIR
    subprocess.run(["rm", "-rf", os.path.join(P_DIR, "data")], check=True)
    pg("pg_replica", R_DIR, P_DIR, str(P_PORT))
    wait_until(lambda: hosts()[("s0", P_PORT)][3] == "standby", 30, f"P seen as a standby: {hosts()}")
    c = PROXY.connect(DB)
    cur = c.cursor()
    got = wait_until(lambda: one(cur, "/* splitpoint: shard=s0, reads=replica */ SELECT pg_is_in_recovery(), "
                                      "inet_server_port()")[0], 10, "a read on the rebuilt standby")
    assert got is True
    assert one(cur, "/* splitpoint: shard=s0 */ SELECT pg_is_in_recovery(), inet_server_port()") == (False, R_PORT)
    c.close()
    P_PORT, R_PORT = R_PORT, P_PORT
    P_DIR, R_DIR = R_DIR, P_DIR


def switchover():
    """hosts: [P, R] (either may be primary); writers running; planned switchover."""
    PROXY.reload(config(f"hosts: [ 127.0.0.1:{P_PORT}, 127.0.0.1:{R_PORT} ]"))
    wait_until(lambda: hosts().get(("s0", P_PORT), [None] * 4)[3] == "primary"
               and hosts().get(("s0", R_PORT), [None] * 4)[3] == "standby", 20, f"both hosts checked: {hosts()}")
    w = Writers(100000).start()
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        admin("PAUSE s0")
        pg("pg_stop", P_DIR)
        pg("pg_promote", R_DIR)
        wait_until(lambda: hosts()[("s0", R_PORT)][3] == "primary", 20, f"R seen as primary: {hosts()}")
        admin("RESUME s0")
        w.wait_for_more(50, 20, "writes after the switchover")
        took = time.monotonic() - t0
        time.sleep(1.0)
    finally:
        w.stop()
    assert not w.errors, f"{len(w.errors)} client errors during the switchover: {w.errors[:5]}"
    w.check_nothing_lost(R_PORT)
    assert PROXY.metric("splitpoint_failovers_total", {"shard": "s0"}) >= 1
    print(f"     switchover: {len(w.acked)} writes acknowledged, none lost, no client error; "
          f"writes resumed {took:.1f} s after PAUSE")
    rebuild_old_primary_as_standby()


def unplanned_failover():
    """The primary killed (immediate shutdown) under writers, the standby promoted: only
    the statements in flight at that moment fail (their connection broke), the next ones
    wait for the new primary and succeed; nothing acknowledged is lost. (With
    synchronous replication: asynchronously, what the standby had not received when the
    primary died is lost by PostgreSQL whatever the proxy does.)"""
    c = sptest.superuser(P_PORT)
    c.cursor().execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
    c.cursor().execute("ALTER SYSTEM SET synchronous_commit = on")
    c.cursor().execute("SELECT pg_reload_conf()")

    def sync_state():
        cur = c.cursor()
        cur.execute("SELECT sync_state FROM pg_stat_replication")
        return cur.fetchall() == [("sync",)]
    wait_until(sync_state, 10, "the standby synchronous")
    c.close()
    failovers = PROXY.metric("splitpoint_failovers_total", {"shard": "s0"})
    w = Writers(1000000).start()
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        pg("pg_kill", P_DIR)
        pg("pg_promote", R_DIR)
        w.wait_for_more(50, 20, "writes after the failover")
        took = time.monotonic() - t0
        time.sleep(0.5)
    finally:
        w.stop()
    w.check_nothing_lost(R_PORT)
    codes = sorted({code for code, _ in w.errors})
    assert set(codes) <= {"08006", "57P01", None}, f"unexpected errors: {w.errors[:5]}"
    assert len(w.errors) <= 2 * len(w.threads), f"{len(w.errors)} errors for 4 writers: {w.errors[:8]}"
    assert took < 8.0, f"writes resumed {took:.1f} s after the kill (moves.max_hold 8s)"
    assert PROXY.metric("splitpoint_failovers_total", {"shard": "s0"}) > failovers
    print(f"     unplanned failover: {len(w.acked)} writes acknowledged, none lost; {len(w.errors)} statements "
          f"in flight failed ({', '.join(str(c) for c in codes)}); writes resumed {took:.1f} s after the kill")
    rebuild_old_primary_as_standby()


def two_primaries_refused():
    """After the switchover R is primary; P promoted too: writes to s0 refused (SPH01)."""
    pg("pg_promote", R_DIR)  # the rebuilt standby (the old primary)
    wait_until(lambda: any("second" in h[3] for h in admin("SHOW HOSTS")), 20, f"two primaries seen: {hosts()}")
    c = PROXY.connect(DB)
    try:
        c.cursor().execute("/* splitpoint: shard=s0 */ INSERT INTO kv VALUES (-1, 'x')")
        raise AssertionError("a write with two primaries was accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "SPH01", (e.pgcode, str(e))
        print(f"     two primaries: {e.pgcode} {str(e).strip()}")
    finally:
        c.close()


TESTS = [reads_go_where_asked, read_your_writes, pipelined_read_your_writes, scatter_on_standby, standby_killed_and_back,
         switchover, unplanned_failover, two_primaries_refused]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, watch=lambda: [PROXY] if PROXY else []))
