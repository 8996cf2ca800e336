#!/usr/bin/env python3
"""Adopting an existing database (issue #50): one PostgreSQL database with data and an
application running on it directly, then splitpoint in front of it, then a second shard
added and the data rebalanced while the application keeps running through the proxy.
docs/operations.md, "Adopting an existing database", follows these steps.

1. The existing database: adopt_<random> on the first shared instance, loaded by
   `pgbench -i -s 1` directly (100 000 accounts, the application's data), and the
   application, `pgbench -N` (simple-update: UPDATE pgbench_accounts, SELECT, INSERT
   pgbench_history, all by aid), run against it directly for a moment.
2. Prepared for moves: `ALTER TABLE pgbench_history REPLICA IDENTITY FULL` (it has no
   primary key; a move publishes it with a row filter on aid). An empty database of the
   same name on the second instance for the new shard.
3. splitpoint in front: one shard s0 (the existing database), `catalog: s0`,
   distribution by_aid (hash, 4 partitions, all on s0) with pgbench_accounts and
   pgbench_history by aid, pgbench_branches and pgbench_tellers reference tables.
4. The application switched to the proxy: three `pgbench -N -j 1 -R 270 -T 50` at once
   through it, one in each query protocol (`-M simple`, `-M extended`, `-M prepared`,
   3 clients each; 810 transactions a second in all), and while they run,
   on the admin console with psql: ADD SHARD s1 (the empty database), REBALANCE by_aid
   (2 of the 4 partitions move to s1), SHOW MOVES polled until empty; every move must
   be done, each cutover at its first attempt, while pgbench still runs
   (ADOPT_PGBENCH="..." adds options to each run, for a run by hand).
   Three proxy bugs this found (server/session/moves.cpp, route.cpp): a transaction
   whose BEGIN came before a cutover and whose first statement came after it went to
   the partition's old shard and got SPM01 from the fence (every client aborted; then,
   with the simple BEGIN held, 9 clients of -M prepared, whose BEGIN reached a shard at
   once); and a statement of a transaction that had written the partition was held,
   while the cutover waited for that transaction, until the cutover gave up (3
   attempts for one move).
5. Checks: both pgbench runs exit 0 with zero failed transactions; read on each shard
   directly: every account once (100 000 rows, aids 1..100 000, none on both shards),
   sum(abalance) = sum(delta) of pgbench_history, the history rows = the transactions
   both runs reported; every row on the shard SHOW PARTITIONS names for its partition
   (PostgreSQL's satisfies_hash_partition), and SHOW ROUTE agrees for sample keys;
   branches and tellers identical on both shards; no slot, publication, subscription
   or prepared transaction left.
"""
# test-timeout: 150

import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402

WORKDIR = sptest.workdir("adopt")
DB = f"adopt_{os.urandom(4).hex()}"
SCALE = 1
ACCOUNTS = 100000 * SCALE
PARTITIONS = 4
P0, P1 = sptest.PG_PORTS
PROXY = None
TESTS = []
EXTRA = os.environ.get("ADOPT_PGBENCH", "").split()  # extra pgbench options for a run by hand
MODES = {"simple": 3, "extended": 3, "prepared": 3}  # query protocol -> clients (270 transactions a second each)
RUNS = {}  # pgbench run name -> transactions it reported


def test(fn):
    TESTS.append(fn)
    return fn


def direct(port, sql):
    """Rows of one statement on a shard's database, as its superuser, not through the proxy."""
    return sptest.query(port, DB, sql, None, "postgres", "postgres")


def psql(dsn, sql):
    """psql -At -c SQL: its output lines (as a user runs the admin commands)."""
    r = subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", dsn, "-c", sql], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"psql {sql}: exit {r.returncode}: {r.stderr}"
    return r.stdout.splitlines()


def admin_dsn():
    return f"postgresql://admin:adminpw@127.0.0.1:{PROXY.port}/splitpoint"


def pgbench(name, dsn, args, seconds):
    """Runs pgbench -n -N (simple-update); returns the Popen (output in WORKDIR/pgbench-NAME.log)."""
    log = open(os.path.join(WORKDIR, f"pgbench-{name}.log"), "w")
    env = dict(os.environ, PGPASSWORD="secret", PGCONNECT_TIMEOUT="10")
    return subprocess.Popen(["pgbench", "-n", "-N", "-T", str(seconds)] + args + [dsn], stdout=log,
                            stderr=subprocess.STDOUT, env=env)


def pgbench_result(name, proc, timeout):
    """Waits for a pgbench run; asserts exit 0 and zero failed transactions; returns its count."""
    rc = proc.wait(timeout)
    with open(os.path.join(WORKDIR, f"pgbench-{name}.log")) as f:
        out = f.read()
    assert rc == 0, f"pgbench {name}: exit {rc}:\n{out[-3000:]}"
    failed = re.search(r"^number of failed transactions: (\d+)", out, re.M)
    assert failed and failed.group(1) == "0", f"pgbench {name}: failed transactions:\n{out[-3000:]}"
    n = int(re.search(r"^number of transactions actually processed: (\d+)", out, re.M).group(1))
    assert n > 0 and not re.search(r"aborted|ERROR|FATAL", out), f"pgbench {name}:\n{out[-3000:]}"
    tps = re.search(r"^tps = ([0-9.]+)", out, re.M).group(1)
    print(f"pgbench {name}: {n} transactions, {tps} tps, 0 failed", flush=True)
    RUNS[name] = n
    return n


def config():
    return f"""
    # the application's role as clients log in with it; admin for the console
    users: [ {{ name: app, password: secret }}, {{ name: admin, password: adminpw, admin: true }} ]
    # the existing database is the first shard; a superuser (CREATE SUBSCRIPTION needs one)
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {P0}, database: {DB}, user: postgres, password: postgres }}
    catalog: s0   # the topology in schema splitpoint of s0's database
    distributions:
      - name: by_aid
        method: hash
        partitions: {PARTITIONS}
        tables: {{ pgbench_accounts: aid, pgbench_history: aid }}
    reference_tables: [pgbench_branches, pgbench_tellers]
    moves: {{ poll: 100ms, lease: 2s }}
    """


def setup():
    for port in (P0, P1):
        assert sptest.query(port, "postgres", "SHOW wal_level", None, "postgres", "postgres")[0][0] == "logical"
    c = sptest.superuser(P0)
    c.cursor().execute(f"CREATE DATABASE {DB} OWNER app")
    c.close()


@test
def existing_database_and_application():
    dsn = f"postgresql://app@127.0.0.1:{P0}/{DB}"
    r = subprocess.run(["pgbench", "-i", "-q", "-s", str(SCALE), dsn], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PGPASSWORD="secret"))
    assert r.returncode == 0, r.stderr
    pgbench_result("direct", pgbench("direct", dsn, ["-c", "4", "-j", "2"], 2), 30)


@test
def prepare_for_moves():
    direct(P0, "ALTER TABLE pgbench_history REPLICA IDENTITY FULL")
    c = sptest.superuser(P1)
    c.cursor().execute(f"CREATE DATABASE {DB} OWNER app")
    c.close()


@test
def proxy_in_front():
    global PROXY
    PROXY = sptest.Proxy("adopt", config(), WORKDIR).start()
    parts = psql(admin_dsn(), "SHOW PARTITIONS")
    assert len(parts) == PARTITIONS and all(p.split("|")[2] == "s0" for p in parts), parts
    n = sptest.query(PROXY.port, DB, "SELECT count(*) FROM pgbench_accounts")[0][0]
    assert n == ACCOUNTS, n


@test
def add_shard_and_rebalance_under_load():
    dsn = f"postgresql://app@127.0.0.1:{PROXY.port}/{DB}"
    seconds = 50
    started = time.monotonic()
    runs = {f"proxy-{m}": pgbench(f"proxy-{m}", dsn, ["-M", m, "-c", str(c), "-j", "1", "-R", "270"] + EXTRA, seconds)
            for m, c in MODES.items()}
    try:
        wait_for_transactions()
        psql(admin_dsn(), f"ADD SHARD s1 host=127.0.0.1 port={P1} database={DB}")
        planned = psql(admin_dsn(), "REBALANCE by_aid")
        assert len(planned) == PARTITIONS // 2, planned
        deadline = time.monotonic() + seconds - 5
        while psql(admin_dsn(), "SHOW MOVES"):
            assert all(r.poll() is None for r in runs.values()), "pgbench ended before the moves: raise its -T"
            assert time.monotonic() < deadline, f"moves still running: {psql(admin_dsn(), 'SHOW MOVES')}"
            time.sleep(0.2)
        moved = time.monotonic() - started
        assert all(r.poll() is None for r in runs.values()), "pgbench ended before the moves: raise its -T"
        done = [m.split("|") for m in psql(admin_dsn(), "SHOW MOVES ALL")]
        states = [m[5] for m in done]
        assert states == ["done"] * (PARTITIONS // 2), states
        # (a cutover that waited for a transaction whose next statement it held gave up and retried)
        attempts = [int(m[11]) for m in done]
        assert attempts == [1] * len(done), f"cutover attempts per move: {attempts}"
        print(f"ADD SHARD + REBALANCE: {len(states)} moves done {moved:.1f}s after pgbench started", flush=True)
    finally:
        for name, run in runs.items():
            pgbench_result(name, run, seconds + 60)


def wait_for_transactions():
    """Polls until the proxy has run some of the application's writes (pgbench is connected)."""
    deadline = time.monotonic() + 15
    while direct(P0, "SELECT count(*) FROM pgbench_history")[0][0] <= RUNS["direct"]:
        assert time.monotonic() < deadline, "no pgbench transaction through the proxy after 15 s"
        time.sleep(0.1)


def rows_on(port, owned):
    """(aids of pgbench_accounts, sum(abalance), history rows, sum(delta), misplaced rows) on one
    shard, read directly; a row is misplaced when its partition (PostgreSQL's own hash
    partitioning) is not in `owned`."""
    c = sptest.connect(port, DB, "postgres", "postgres")
    try:
        cur = c.cursor()
        cur.execute("CREATE TEMP TABLE chk_hash (k int) PARTITION BY HASH (k)")
        part = (f"(SELECT r FROM generate_series(0, {PARTITIONS - 1}) r "
                f"WHERE satisfies_hash_partition('chk_hash'::regclass, {PARTITIONS}, r, aid))")
        cur.execute(f"SELECT aid, abalance, {part} FROM pgbench_accounts")
        accounts = cur.fetchall()
        cur.execute(f"SELECT delta, {part} FROM pgbench_history")
        history = cur.fetchall()
    finally:
        c.close()
    misplaced = [("account", a[0], a[2]) for a in accounts if a[2] not in owned]
    misplaced += [("history", None, h[1]) for h in history if h[1] not in owned]
    return [a[0] for a in accounts], sum(a[1] for a in accounts), len(history), sum(h[0] for h in history), misplaced


@test
def every_row_once_on_its_shard():
    placement = {}
    for line in psql(admin_dsn(), "SHOW PARTITIONS"):
        f = line.split("|")
        placement.setdefault(f[2], set()).add(int(f[1]))
    assert sorted(len(v) for v in placement.values()) == [PARTITIONS // 2] * 2, placement
    aids, balance, history, delta = [], 0, 0, 0
    for name, port in (("s0", P0), ("s1", P1)):
        a, b, h, d, misplaced = rows_on(port, placement[name])
        assert not misplaced, f"{name}: rows of partitions it does not own: {misplaced[:5]}"
        print(f"{name}: {len(a)} accounts, {h} history rows, partitions {sorted(placement[name])}", flush=True)
        aids += a
        balance, history, delta = balance + b, history + h, delta + d
    assert len(aids) == ACCOUNTS and len(set(aids)) == ACCOUNTS and min(aids) == 1 and max(aids) == ACCOUNTS, \
        (len(aids), len(set(aids)))
    assert history == sum(RUNS.values()), (history, RUNS)
    assert balance == delta, (balance, delta)
    routed = set()
    for aid in list(range(1, 11)) + [ACCOUNTS]:  # the proxy's own answer for a key: SHOW ROUTE
        route = sptest.admin(PROXY.port, f"SHOW ROUTE SELECT abalance FROM pgbench_accounts WHERE aid = {aid}")[0]
        shard, part = route[1], route[2]
        assert shard in placement and part.startswith("by_aid:") and int(part[7:]) in placement[shard], route
        assert direct(P0 if shard == "s0" else P1, f"SELECT aid FROM pgbench_accounts WHERE aid = {aid}") == \
            [(aid,)], (aid, route)
        routed.add(shard)
    assert routed == {"s0", "s1"}, routed
    for t in ("pgbench_branches", "pgbench_tellers"):
        q = f"SELECT * FROM {t} ORDER BY 1"
        assert direct(P0, q) == direct(P1, q), f"{t} differs between the shards"


@test
def nothing_left_behind():
    for port in (P0, P1):
        left = direct(port, "SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = "
                            "current_database() UNION ALL SELECT 'publication ' || pubname FROM pg_publication "
                            "UNION ALL SELECT 'subscription ' || subname FROM pg_subscription s JOIN pg_database d "
                            "ON d.oid = s.subdbid AND d.datname = current_database() "
                            "UNION ALL SELECT 'prepared ' || gid FROM pg_prepared_xacts WHERE database = "
                            "current_database()")
        assert not left, left


def teardown():
    if PROXY:
        PROXY.stop()
    sptest.drop_databases(DB)


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
