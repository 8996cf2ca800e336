#!/usr/bin/python3
"""Throughput that grows with every shard (issue #49 part 1), by hand: docs/performance.md,
"Scaling out with shards under CPU quotas".

    tests/bench/scale_out.py                      # full run, about 11 minutes
    QUICK=1 tests/bench/scale_out.py              # smoke run, about 4 minutes
    PHASES=static POOL_SIZE=8 tests/bench/scale_out.py
    QUOTA=0.15 CLIENTS=16 tests/bench/scale_out.py

Needs root: every shard's PostgreSQL runs in a cgroup of its own with a CPU quota
(cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`, or v2 `cpu.max`), QUOTA CPUs each
(default 0.2), so that the shards, not the proxy, are the bottleneck, as separate
servers would be. The postmaster and all its children are moved into the cgroup (later
backends inherit it); the cgroups are removed at exit. When no quota can be applied the
run stops (exit 3), unless ALLOW_NO_QUOTA=1, and then every line it prints says NO QUOTA.

PostgreSQL 15 instances (tests/lib/pg.sh, free ports under $BENCH_WORK): pg0..pg3, one
per shard, quota'd, and `cat`, not quota'd, holding the elastic phase's catalog (a
database of its own, as a dedicated catalog server). Data: pgbench's tables, the same
amount on every shard: SCALE_PER_SHARD (default 5) x 100 000 accounts per shard, so an
N-shard configuration holds scale SCALE_PER_SHARD*N in all; accounts and history hashed
by aid over PARTITIONS (8) partitions, each shard given the rows of its partitions
(asked of PostgreSQL's own hash partitioning, as tests/bench/run trims); branches and
tellers reference tables (a full copy of the N-shard scale on each shard). Each
configuration has databases of its own on the instances (n1 on pg0; n2 on pg0, pg1; n4
on pg0..pg3), all loaded before the quotas are applied.

Phase `static`: `pgbench -n -S` and `pgbench -n -N` (simple-update: UPDATE accounts,
SELECT, INSERT history, all keyed by aid: one shard per transaction) with CLIENTS (32)
clients for DURATION (10) s, ROUNDS (3) rounds, targets alternating within a round (the
first rotated each round): `direct` (pgbench on pg0's n1, CLIENTS clients),
`direct_pool` (the same with POOL_SIZE clients: as many backends as the proxy opens to
one shard), and splitpoint over 1, 2 and 4 shards (`sp1`, `sp2`, `sp4`; transaction
pooling, POOL_SIZE (4) per shard, SP_WORKERS threads). Per run: tps, mean latency, the
proxy's CPU (utime+stime from /proc/PID/stat), each shard's CPU (its cgroup's usage)
and throttled periods, pgbench's CPU, /proc/loadavg before and after.

Phase `elastic`: a proxy with `catalog:` and one shard (pg0's database el, scale
ELASTIC_SCALE, default 4: 400k accounts) under `pgbench -n -S -c ELASTIC_CLIENTS (32)
--progress=1 -l` for the whole phase; after BASELINE (20) s, three times: `ADD SHARD sK`
(database el, empty, on pgK), `REBALANCE by_aid`, wait for its moves, HOLD (15) s; then
TAIL (20) s. One sample a second: tps and p99 (from pgbench's per-transaction log),
client errors (pgbench's aborted clients and failed transactions), moves' states
(`SHOW MOVES ALL` on the admin console), each shard's, the proxy's and pgbench's CPU,
the machine's busy CPUs (/proc/stat) and the part of them that is other work. CSV and a
PNG plot (PLOT, default docs/img/scale_out.png; matplotlib).

The instances' data directories ($BENCH_WORK/pg-*) are removed at the end (KEEP_WORK=1
keeps them). PG_LOG_SLOW=200ms makes the instances log slower statements and lock waits;
SP_LOG_LEVEL=info the proxies' log (RESULTS/logs/*.log).

Results: RESULTS (default tests/bench/results/scale-out-YYYYMMDD-HHMMSS/): static.csv,
elastic.csv, events.csv, summary.txt, logs. SCHED_AUTOGROUP (default 0) as
tests/bench/run: the kernel's session groups are switched off for the run.
"""

import csv
import errno
import functools
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402
import psycopg2  # noqa: E402


def env(name, default):
    return os.environ.get(name, default)


QUICK = env("QUICK", "0") == "1"
SP_BIN = env("SP_BIN", "/work/bench-bin/splitpoint")
WORK = env("BENCH_WORK", "/tmp/splitpoint-bench-scale-out")
PG_BIN = env("PG_BIN", "/usr/lib/postgresql/15/bin")
PGBENCH = os.path.join(PG_BIN, "pgbench")
QUOTA = float(env("QUOTA", "0.2"))
PERIOD_US = 100000
SCALE_PER_SHARD = int(env("SCALE_PER_SHARD", "1" if QUICK else "5"))
SHARD_COUNTS = [int(x) for x in env("SHARDS", "1 2 4").split()]
PARTITIONS = int(env("PARTITIONS", "8"))
CLIENTS = int(env("CLIENTS", "32"))
POOL_SIZE = int(env("POOL_SIZE", "4"))
SP_WORKERS = int(env("SP_WORKERS", "0"))
ROUNDS = int(env("ROUNDS", "1" if QUICK else "3"))
DURATION = int(env("DURATION", "4" if QUICK else "10"))
WORKLOADS = env("WORKLOADS", "select simple-update").split()
MODE = env("MODE", "simple")
PHASES = env("PHASES", "static elastic").split()
ELASTIC_SCALE = int(env("ELASTIC_SCALE", "1" if QUICK else "4"))
ELASTIC_CLIENTS = int(env("ELASTIC_CLIENTS", str(CLIENTS)))
ELASTIC_SHARDS = int(env("ELASTIC_SHARDS", "4"))
BASELINE = int(env("BASELINE", "6" if QUICK else "20"))
HOLD = int(env("HOLD", "4" if QUICK else "15"))
TAIL = int(env("TAIL", "6" if QUICK else "20"))
ELASTIC_MAX = int(env("ELASTIC_MAX", "600"))
PLOT = env("PLOT", os.path.join(ROOT, "docs", "img", "scale_out.png"))
RESULTS = env("RESULTS", os.path.join(ROOT, "tests", "bench", "results",
                                      time.strftime("scale-out-%Y%m%d-%H%M%S")))
ALLOW_NO_QUOTA = env("ALLOW_NO_QUOTA", "0") == "1"
SHARED_BUFFERS = env("PG_SHARED_BUFFERS", "512MB")
PG_LOG_SLOW = env("PG_LOG_SLOW", "")  # e.g. 200ms: log_min_duration_statement, log_lock_waits on
SP_LOG_LEVEL = env("SP_LOG_LEVEL", "warn")
TARGET_ORDER = ["direct", "direct_pool"] + [f"sp{n}" for n in SHARD_COUNTS]
WORKLOAD_FLAG = {"select": "-S", "simple-update": "-N"}

sh = functools.partial(benchlib.sh, WORK)
CHILDREN = []  # proxies and the elastic phase's pgbench: stopped at exit if still running
NOQ = ""  # " [NO QUOTA]" when the quota could not be applied


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}{NOQ}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def connect(port, db, user="postgres", password="postgres"):
    c = psycopg2.connect(host="127.0.0.1", port=port, dbname=db, user=user, password=password,
                         connect_timeout=20)
    c.autocommit = True
    return c


def q(port, db, sql, args=None):
    c = connect(port, db)
    try:
        cur = c.cursor()
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else None
    finally:
        c.close()


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads) in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def machine_cpu_s():
    """CPU seconds used (all but idle and iowait) and elapsed (all fields) over all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    tck = os.sysconf("SC_CLK_TCK")
    return (sum(v) - v[3] - v[4]) / tck


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return out


# ---------------------------------------------------------------- cgroups

class Cgroups:
    """One cgroup per shard instance with a CPU quota; v1 (cpu controller) or v2."""

    def __init__(self):
        self.version = None
        self.dirs = {}      # name -> cpu cgroup dir
        self.acct = {}      # name -> cpuacct dir (v1, when cpuacct is a separate hierarchy)
        self.base = self.acct_base = None
        self.why = ""
        tag = f"splitpoint-bench-{os.getpid()}"
        if os.geteuid() != 0:
            self.why = "not root"
            return
        v1 = "/sys/fs/cgroup/cpu"
        if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
            self.version, self.root, self.base = 1, v1, os.path.join(v1, tag)
            acct = "/sys/fs/cgroup/cpuacct"
            if not os.path.exists(os.path.join(v1, "cpuacct.usage")) and os.path.exists(os.path.join(acct, "cpuacct.usage")):
                self.acct_root, self.acct_base = acct, os.path.join(acct, tag)
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            with open("/sys/fs/cgroup/cgroup.controllers") as f:
                if "cpu" in f.read().split():
                    self.version, self.root, self.base = 2, "/sys/fs/cgroup", os.path.join("/sys/fs/cgroup", tag)
                else:
                    self.why = "cgroup v2 without the cpu controller"
        else:
            self.why = "no cgroup cpu controller found (/sys/fs/cgroup/cpu, /sys/fs/cgroup/cgroup.controllers)"
        if self.version:
            try:
                os.makedirs(self.base, exist_ok=True)
                if self.acct_base:
                    os.makedirs(self.acct_base, exist_ok=True)
                if self.version == 2:
                    for d in (self.root, self.base):
                        with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                            f.write("+cpu")
            except OSError as e:
                self.why = f"cannot create {self.base}: {e}"
                self.version = None

    def ok(self):
        return self.version is not None

    def add(self, name, datadir):
        """Creates cgroup NAME with the quota and moves the postmaster of DATADIR and all its
        children into it. Returns the pids moved."""
        d = os.path.join(self.base, name)
        os.makedirs(d, exist_ok=True)
        if self.version == 1:
            with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                f.write(str(PERIOD_US))
            with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(QUOTA * PERIOD_US)))
        else:
            with open(os.path.join(d, "cpu.max"), "w") as f:
                f.write(f"{int(QUOTA * PERIOD_US)} {PERIOD_US}")
        self.dirs[name] = d
        a = None
        if self.acct_base:
            a = os.path.join(self.acct_base, name)
            os.makedirs(a, exist_ok=True)
            self.acct[name] = a
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            pm = int(f.readline())
        pids = [pm] + children_of(pm)
        for target in [d] + ([a] if a else []):
            for pid in pids:
                try:
                    with open(os.path.join(target, "cgroup.procs"), "w") as f:
                        f.write(str(pid))
                except OSError:
                    pass  # exited meanwhile
        with open(os.path.join(d, "cgroup.procs")) as f:
            inside = {int(x) for x in f.read().split()}
        if pm not in inside:
            raise RuntimeError(f"postmaster {pm} is not in {d}")
        return pids

    def stats(self, name):
        """usage (s), nr_periods, nr_throttled, throttled (s) of cgroup NAME."""
        d = self.dirs[name]
        st = {}
        with open(os.path.join(d, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                st[k] = int(v)
        if self.version == 2:
            return {"usage": st.get("usage_usec", 0) / 1e6, "periods": st.get("nr_periods", 0),
                    "throttled": st.get("nr_throttled", 0), "throttled_s": st.get("throttled_usec", 0) / 1e6}
        path = os.path.join(self.acct.get(name, d), "cpuacct.usage")
        usage = None
        if os.path.exists(path):
            with open(path) as f:
                usage = int(f.read()) / 1e9
        return {"usage": usage, "periods": st.get("nr_periods", 0), "throttled": st.get("nr_throttled", 0),
                "throttled_s": st.get("throttled_time", 0) / 1e9}

    def cleanup(self):
        for base, root in ((self.base, getattr(self, "root", None)), (self.acct_base, getattr(self, "acct_root", None))):
            if not base or not os.path.isdir(base):
                continue
            for name in os.listdir(base):
                d = os.path.join(base, name)
                if not os.path.isdir(d):
                    continue
                try:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        left = f.read().split()
                    for pid in left:  # should be none: PostgreSQL is stopped first
                        with open(os.path.join(root, "cgroup.procs"), "w") as f:
                            f.write(pid)
                    rmdir_busy(d)
                except OSError as e:
                    print(f"scale_out: could not remove cgroup {d}: {e}", file=sys.stderr)
            try:
                rmdir_busy(base)
            except OSError as e:
                print(f"scale_out: could not remove cgroup {base}: {e}", file=sys.stderr)


def rmdir_busy(d, seconds=5.0):
    """rmdir, tried again for up to SECONDS while the kernel says EBUSY: a cgroup whose last
    process (a PostgreSQL backend that was stopped) is still exiting stays busy a moment."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.rmdir(d)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# ---------------------------------------------------------------- set-up

class Instance:
    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(WORK, f"pg-{name}")
        self.port = None

    def start(self):
        self.port = int(sh("free_port"))
        sh("pg_start", self.dir, str(self.port))
        q(self.port, "postgres", f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}'")
        q(self.port, "postgres", "ALTER SYSTEM SET max_connections = 400")
        # No autovacuum: its workers would run inside the shard's quota at random moments.
        q(self.port, "postgres", "ALTER SYSTEM SET autovacuum = off")
        if PG_LOG_SLOW:  # lock waits and slow statements into the instance's log
            q(self.port, "postgres", "ALTER SYSTEM SET log_lock_waits = on")
            q(self.port, "postgres", "ALTER SYSTEM SET deadlock_timeout = '100ms'")
            q(self.port, "postgres", f"ALTER SYSTEM SET log_min_duration_statement = '{PG_LOG_SLOW}'")
        sh("pg_restart", self.dir)

    def stop(self):
        try:
            sh("pg_stop", self.dir)
        except subprocess.CalledProcessError as e:
            print(f"scale_out: pg_stop {self.dir}: {e.stderr}", file=sys.stderr)


PGBENCH_DDL = """
CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
CREATE TABLE pgbench_tellers (tid int NOT NULL, bid int, tbalance int, filler char(84)) WITH (fillfactor = 100);
CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100);
CREATE TABLE pgbench_branches (bid int NOT NULL, bbalance int, filler char(88)) WITH (fillfactor = 100);
ALTER TABLE pgbench_history REPLICA IDENTITY FULL;
"""


def owned(i, n):
    return range(i * PARTITIONS // n, (i + 1) * PARTITIONS // n)


def load_shard(inst, db, scale, i, n):
    """Database DB on INST with pgbench's tables of scale SCALE: branches and tellers whole,
    accounts only the rows of shard i of n's hash partitions (by aid)."""
    q(inst.port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    q(inst.port, "postgres", f"CREATE DATABASE {db}")
    c = connect(inst.port, db)
    cur = c.cursor()
    cur.execute(PGBENCH_DDL)
    cur.execute("CREATE TABLE sp_probe (k int) PARTITION BY HASH (k)")
    cur.execute(f"INSERT INTO pgbench_branches SELECT b, 0 FROM generate_series(1, {scale}) b")
    cur.execute(f"INSERT INTO pgbench_tellers SELECT t, (t - 1) / 10 + 1, 0 FROM generate_series(1, {10 * scale}) t")
    parts = owned(i, n)
    cond = "true" if len(parts) == PARTITIONS else " OR ".join(
        f"satisfies_hash_partition('sp_probe'::regclass, {PARTITIONS}, {r}, a)" for r in parts)
    cur.execute(f"INSERT INTO pgbench_accounts SELECT a, (a - 1) / 100000 + 1, 0, '' "
                f"FROM generate_series(1, {100000 * scale}) a WHERE {cond}")
    cur.execute("DROP TABLE sp_probe")
    cur.execute("ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid)")
    cur.execute("ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid)")
    cur.execute("ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid)")
    cur.execute("VACUUM ANALYZE")
    cur.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    for t in ("pgbench_accounts", "pgbench_accounts_pkey", "pgbench_branches", "pgbench_tellers"):
        cur.execute(f"SELECT pg_prewarm('{t}')")
    cur.execute("SELECT count(*) FROM pgbench_accounts")
    rows = cur.fetchone()[0]
    c.close()
    return rows


def config_head(port, mport, shards, log_level=None):
    """A proxy config's lines up to its distributions: listeners, users app and admin,
    SHARDS (name, Instance, database) with pool_size POOL_SIZE."""
    lines = [f"listen: 127.0.0.1:{port}", f"metrics_listen: 127.0.0.1:{mport}", "pool_mode: transaction",
             "auth: scram-sha-256", f"log_level: {log_level or SP_LOG_LEVEL}", f"workers: {SP_WORKERS}", "users:",
             "  - { name: app, password: secret }", "  - { name: admin, password: adminpw, admin: true }",
             "shards:"]
    for name, inst, db in shards:
        lines.append(f"  - {{ name: {name}, host: 127.0.0.1, port: {inst.port}, database: {db}, user: postgres, "
                     f"password: postgres, pool_size: {POOL_SIZE} }}")
    return lines


def proxy_config(port, mport, shards, catalog=None):
    lines = config_head(port, mport, shards)
    lines += ["distributions:", "  - name: by_aid", "    method: hash", f"    partitions: {PARTITIONS}",
              "    tables: { pgbench_accounts: aid, pgbench_history: aid }",
              "reference_tables: [pgbench_branches, pgbench_tellers]"]
    if catalog:
        lines += [f"catalog: '{catalog}'", "moves: { max_hold: 5s, poll: 200ms, lease: 3s }"]
    return "\n".join(lines) + "\n"


def start_proxy(name, shards, catalog=None):
    return launch_proxy(name, lambda port, mport: proxy_config(port, mport, shards, catalog))


def launch_proxy(name, make_config):
    """Writes WORK/NAME.yaml with make_config(port, metrics port), checks it and starts SP_BIN
    on it (its log in RESULTS/logs/NAME.log); (the Popen, its port) once it listens."""
    port, mport = int(sh("free_port")), int(sh("free_port"))
    path = os.path.join(WORK, name + ".yaml")
    with open(path, "w") as f:
        f.write(make_config(port, mport))
    chk = subprocess.run([SP_BIN, "--check", "--config", path], capture_output=True, text=True)
    if chk.returncode != 0:
        raise RuntimeError(f"splitpoint --check {path}: {chk.stdout}{chk.stderr}")
    logf = open(os.path.join(RESULTS, "logs", name + ".log"), "w")
    p = subprocess.Popen([SP_BIN, "--config", path], stdout=logf, stderr=subprocess.STDOUT)
    CHILDREN.append(p)
    sh("wait_port", str(port), "20")
    return p, port


# ---------------------------------------------------------------- static phase

PGB_TPS = re.compile(r"^tps = ([0-9.]+)", re.M)
PGB_LAT = re.compile(r"^latency average = ([0-9.]+) ms", re.M)
PGB_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.M)
PGB_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def pgbench_cmd(workload, clients, seconds, port, db, user):
    return [PGBENCH, "-n", WORKLOAD_FLAG[workload], "-M", MODE, "-c", str(clients), "-j", str(min(clients, 2)),
            "-T", str(seconds), "-h", "127.0.0.1", "-p", str(port), "-U", user, db]


def run_pgbench(target, workload, seconds, targets, cg, shard_names, tag):
    port, db, user, clients, proxy = targets[target]
    password = "postgres" if user == "postgres" else "secret"
    cmd = pgbench_cmd(workload, clients, seconds, port, db, user)
    la0 = loadavg()
    before = {s: cg.stats(s) for s in shard_names} if cg.ok() else {}
    p0 = proc_cpu_s(proxy.pid) if proxy else None
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PGPASSWORD=password),
                       timeout=seconds + 120)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p1 = proc_cpu_s(proxy.pid) if proxy else None
    after = {s: cg.stats(s) for s in shard_names} if cg.ok() else {}
    la1 = loadavg()
    with open(os.path.join(RESULTS, "logs", f"pgbench-{tag}.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    out = r.stdout + r.stderr
    m = PGB_TPS.search(out)
    tps = float(m.group(1)) if m else None
    lat = float(PGB_LAT.search(out).group(1)) if PGB_LAT.search(out) else None
    failed = int(PGB_FAILED.search(out).group(1)) if PGB_FAILED.search(out) else None
    processed = int(PGB_PROCESSED.search(out).group(1)) if PGB_PROCESSED.search(out) else 0
    aborted = len(re.findall(r"aborted", r.stderr))
    status = "ok" if r.returncode == 0 and tps and not failed and not aborted else \
        f"rc={r.returncode} failed={failed} aborted={aborted}" + ("" if tps else " no tps: " + (
            (r.stderr.strip() or r.stdout.strip()).splitlines() or [""])[-1][:80])
    # Only the shards this target uses: pg0 for direct, pg0..pg(N-1) for spN.
    used = shard_names[:1] if target.startswith("direct") else shard_names[:int(target[2:])]
    shard_cores = [(after[s]["usage"] - before[s]["usage"]) / wall for s in used
                   if after and after[s]["usage"] is not None]
    throttled = [(after[s]["throttled"] - before[s]["throttled"]) / max(1, after[s]["periods"] - before[s]["periods"])
                 for s in used] if after else []
    row = {
        "target": target, "workload": workload, "clients": clients, "tps": tps, "lat_ms": lat,
        "transactions": processed, "failed": failed, "aborted": aborted, "status": status,
        "proxy_cpu_pct": round((p1 - p0) / wall * 100, 1) if p0 is not None and p1 is not None else "",
        "proxy_us_per_tx": round((p1 - p0) / processed * 1e6, 1) if p0 is not None and processed else "",
        "pgbench_cpu_pct": round(((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / wall * 100, 1),
        "shard_cores": " ".join(f"{x:.3f}" for x in shard_cores),
        "shard_cores_sum": round(sum(shard_cores), 3) if shard_cores else "",
        "throttled_share": " ".join(f"{x:.2f}" for x in throttled),
        "loadavg_start": la0, "loadavg_end": la1, "wall_s": round(wall, 1),
    }
    return row


def static_phase(cg, insts):
    log(f"static: loading scale {SCALE_PER_SHARD} per shard for {SHARD_COUNTS} shards")
    total = {}
    jobs = []
    for n in SHARD_COUNTS:
        for i in range(n):
            jobs.append((insts[i], f"n{n}", SCALE_PER_SHARD * n, i, n))
    # One loader thread per instance (psycopg2 releases the GIL).
    by_inst = {}
    for j in jobs:
        by_inst.setdefault(j[0].name, []).append(j)
    errors = []

    def loader(js):
        try:
            for inst, db, scale, i, n in js:
                rows = load_shard(inst, db, scale, i, n)
                total.setdefault(n, []).append(rows)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=loader, args=(js,)) for js in by_inst.values()]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    for n in SHARD_COUNTS:
        want = 100000 * SCALE_PER_SHARD * n
        if sum(total[n]) != want:
            raise RuntimeError(f"{n} shards hold {sum(total[n])} accounts, not {want}")
        log(f"static: {n} shard(s): accounts per shard {sorted(total[n])} (total {want})")
    return total


def static_run(cg, insts, shard_names):
    proxies = {}
    targets = {"direct": (insts[0].port, "n1", "postgres", CLIENTS, None),
               "direct_pool": (insts[0].port, "n1", "postgres", POOL_SIZE, None)}
    for n in SHARD_COUNTS:
        p, port = start_proxy(f"sp{n}", [(f"s{i}", insts[i], f"n{n}") for i in range(n)])
        proxies[n] = p
        targets[f"sp{n}"] = (port, f"n{n}", "app", CLIENTS, p)
    rows = []
    order = [t for t in TARGET_ORDER if t in targets]
    log("static: warm-up, 3 s per target (backend connections opened, not recorded)")
    for t in order:
        run_pgbench(t, "select", 3, targets, cg, shard_names, f"warmup-{t}")
    for rnd in range(ROUNDS):
        for w in WORKLOADS:
            k = rnd % len(order)
            for t in order[k:] + order[:k]:
                row = run_pgbench(t, w, DURATION, targets, cg, shard_names, f"r{rnd}-{w}-{t}")
                row["round"] = rnd + 1
                rows.append(row)
                log(f"static round {rnd + 1} {w:13s} {t:11s} tps {row['tps'] or 0:8.0f}  lat {row['lat_ms'] or 0:7.2f} ms  "
                    f"shard cores {row['shard_cores']:24s} proxy {row['proxy_cpu_pct']}% CPU  load {row['loadavg_end']}  "
                    f"{row['status']}")
    for n, p in proxies.items():
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
    keys = ["round", "workload", "target", "clients", "tps", "lat_ms", "transactions", "failed", "aborted",
            "proxy_cpu_pct", "proxy_us_per_tx", "pgbench_cpu_pct", "shard_cores", "shard_cores_sum",
            "throttled_share", "loadavg_start", "loadavg_end", "wall_s", "status"]
    with open(os.path.join(RESULTS, "static.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: r.get(k, "") for k in keys})
    return rows


def static_table(rows):
    out = []
    header = ["workload", "target", "clients", "rounds", "tps median", "tps min-max", "spread %", "x sp1",
              "x direct", "x direct_pool", "lat ms", "shard cores", "shard us/tx", "proxy CPU %", "proxy us/tx",
              "pgbench CPU %", "status"]
    for w in WORKLOADS:
        med = {}
        for t in TARGET_ORDER:
            ok = [r["tps"] for r in rows if r["workload"] == w and r["target"] == t and r["tps"]]
            med[t] = statistics.median(ok) if ok else None
        for t in TARGET_ORDER:
            rs = [r for r in rows if r["workload"] == w and r["target"] == t]
            if not rs:
                continue
            tps = [r["tps"] for r in rs if r["tps"]]

            def m(key):
                v = [float(r[key]) for r in rs if r.get(key) not in (None, "")]
                return statistics.median(v) if v else None

            def ratio(a, b):
                return f"{a / b:.2f}" if a and b else ""
            bad = sorted({r["status"] for r in rs if r["status"] != "ok"})
            out.append([w, t, rs[0]["clients"], len(rs), f"{med[t]:.0f}" if med[t] else "",
                        f"{min(tps):.0f}-{max(tps):.0f}" if tps else "",
                        f"{(max(tps) - min(tps)) / med[t] * 100:.0f}" if tps and med[t] else "",
                        ratio(med[t], med.get("sp1")) if t.startswith("sp") else "",
                        ratio(med[t], med.get("direct")), ratio(med[t], med.get("direct_pool")),
                        f"{m('lat_ms'):.2f}" if m("lat_ms") else "",
                        f"{m('shard_cores_sum'):.2f}" if m("shard_cores_sum") is not None else "",
                        f"{m('shard_cores_sum') / med[t] * 1e6:.0f}" if m("shard_cores_sum") is not None and med[t] else "",
                        f"{m('proxy_cpu_pct'):.0f}" if m("proxy_cpu_pct") is not None else "",
                        f"{m('proxy_us_per_tx'):.1f}" if m("proxy_us_per_tx") is not None else "",
                        f"{m('pgbench_cpu_pct'):.0f}" if m("pgbench_cpu_pct") is not None else "",
                        "ok" if not bad else "; ".join(bad)])
    return header, out


# ---------------------------------------------------------------- elastic phase

def admin_rows(port, sql):
    c = psycopg2.connect(host="127.0.0.1", port=port, dbname="splitpoint", user="admin", password="adminpw",
                         connect_timeout=10)
    c.autocommit = True
    try:
        cur = c.cursor()
        cur.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()
    finally:
        c.close()


def elastic_phase(cg, insts, cat, shard_names):
    n = ELASTIC_SHARDS
    log(f"elastic: pg0's database el has scale {ELASTIC_SCALE}; empty databases el on pg1..pg{n - 1}")
    rows0 = q(insts[0].port, "el", "SELECT count(*) FROM pgbench_accounts")[0][0]
    for i in range(1, n):
        q(insts[i].port, "postgres", "DROP DATABASE IF EXISTS el WITH (FORCE)")
        q(insts[i].port, "postgres", "CREATE DATABASE el")
    q(cat.port, "postgres", "DROP DATABASE IF EXISTS catalog WITH (FORCE)")
    q(cat.port, "postgres", "CREATE DATABASE catalog")
    catalog = f"host=127.0.0.1 port={cat.port} dbname=catalog user=postgres password=postgres"
    proxy, port = start_proxy("elastic", [("s0", insts[0], "el")], catalog)
    time.sleep(1.5)
    edir = os.path.join(RESULTS, "elastic")
    os.makedirs(edir, exist_ok=True)
    prefix = os.path.join(edir, "pgbench_log")
    cmd = [PGBENCH, "-n", "-S", "-M", MODE, "-c", str(ELASTIC_CLIENTS), "-j", "2", "-T", str(ELASTIC_MAX),
           "--progress=1", "-l", f"--log-prefix={prefix}", "-h", "127.0.0.1", "-p", str(port), "-U", "app", "el"]
    events = []   # (t, what)
    errors = []   # (t, line)
    samples = []  # dicts, one a second
    la0 = loadavg()
    t0 = time.time()
    pgb = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, PGPASSWORD="secret"))
    CHILDREN.append(pgb)
    out_lines = []

    def reader():
        for line in pgb.stdout:
            out_lines.append((time.time() - t0, line.rstrip("\n")))
            if re.search(r"aborted|error|failed to|ERROR", line) and not line.startswith("progress:"):
                errors.append((time.time() - t0, line.strip()))
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    stop = threading.Event()

    def sampler():
        prev = {s: cg.stats(s) for s in shard_names} if cg.ok() else {}
        pprev = proc_cpu_s(proxy.pid)
        bprev = proc_cpu_s(pgb.pid)
        mprev = machine_cpu_s()
        tprev = time.time()
        while not stop.is_set():
            time.sleep(max(0.0, 1.0 - (time.time() - tprev)))
            now = time.time()
            cur = {s: cg.stats(s) for s in shard_names} if cg.ok() else {}
            pc = proc_cpu_s(proxy.pid)
            bc = proc_cpu_s(pgb.pid)
            mc = machine_cpu_s()
            dt = now - tprev
            sample = {"t": round(now - t0, 2), "loadavg": loadavg()}
            ours = 0.0
            for s in shard_names:
                if cur and cur[s]["usage"] is not None:
                    sample[f"{s}_cores"] = round((cur[s]["usage"] - prev[s]["usage"]) / dt, 3)
                    ours += sample[f"{s}_cores"]
            sample["proxy_cores"] = round((pc - pprev) / dt, 3) if pc is not None and pprev is not None else ""
            sample["pgbench_cores"] = round((bc - bprev) / dt, 3) if bc is not None and bprev is not None else ""
            sample["machine_busy"] = round((mc - mprev) / dt, 3)
            ours += sum(x for x in (sample["proxy_cores"], sample["pgbench_cores"]) if x != "")
            # Everything else on the machine (other work, the kernel's share not charged to
            # these processes, the catalog instance, this script).
            sample["other_cores"] = round(sample["machine_busy"] - ours, 3)
            try:
                _, mv = admin_rows(port, "SHOW MOVES ALL")
                states = {}
                active = []
                for r in mv:
                    states[r[5]] = states.get(r[5], 0) + 1
                    if r[5] not in ("done", "failed", "cancelled"):
                        active.append(f"{r[1]}:{r[2]} {r[3]}->{r[4]} {r[5]}")
                sample["moves"] = " ".join(f"{k}={v}" for k, v in sorted(states.items()))
                sample["active_move"] = "; ".join(active)
            except psycopg2.Error as e:
                sample["moves"] = f"admin error: {str(e).strip()[:80]}"
                sample["active_move"] = ""
            samples.append(sample)
            prev, pprev, bprev, mprev, tprev = cur, pc, bc, mc, now
    st = threading.Thread(target=sampler, daemon=True)
    st.start()

    def event(what):
        t = time.time() - t0
        events.append((round(t, 2), what))
        log(f"elastic t={t:6.1f}s  {what}")

    def wait_moves(deadline):
        while time.time() < deadline:
            try:
                _, mv = admin_rows(port, "SHOW MOVES")
                if not mv:
                    return True
            except psycopg2.Error as e:
                log(f"elastic: SHOW MOVES: {e}")
            time.sleep(0.5)
        return False

    deadline = t0 + ELASTIC_MAX - TAIL - 5
    finished = True
    time.sleep(BASELINE)
    for k in range(1, n):
        if pgb.poll() is not None:
            finished = False
            break
        try:
            c = psycopg2.connect(host="127.0.0.1", port=port, dbname="splitpoint", user="admin", password="adminpw")
            c.autocommit = True
            cur = c.cursor()
            event(f"ADD SHARD s{k}")
            cur.execute(f"ADD SHARD s{k} host=127.0.0.1 port={insts[k].port} database=el")
            event(f"ADD SHARD s{k} answered")
            cur.execute("REBALANCE by_aid")
            planned = cur.fetchall()
            event(f"REBALANCE by_aid: {len(planned)} moves " + " ".join(f"{r[2]}:{r[3]}->{r[4]}" for r in planned))
            c.close()
        except psycopg2.Error as e:
            event(f"ERROR {e.pgcode}: {str(e).strip()}")
            finished = False
            break
        if not wait_moves(deadline):
            event("moves did not finish in time")
            finished = False
            break
        event(f"moves done, {k + 1} shards")
        time.sleep(HOLD if k < n - 1 else TAIL)
    t_end = time.time() - t0
    la1 = loadavg()
    if pgb.poll() is None:
        pgb.send_signal(signal.SIGINT)
    try:
        pgb.wait(30)
    except subprocess.TimeoutExpired:
        pgb.kill()
        pgb.wait()
    stop.set()
    st.join(5)
    rt.join(5)
    _, mv_all = admin_rows(port, "SHOW MOVES ALL")
    cols, parts = admin_rows(port, "SHOW PARTITIONS")
    proxy.terminate()
    try:
        proxy.wait(20)
    except subprocess.TimeoutExpired:
        proxy.kill()
    with open(os.path.join(edir, "pgbench_output.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + "\n".join(f"{t:.2f} {line}" for t, line in out_lines) + "\n")

    # Per-second tps and p99 from the per-transaction logs (completion time).
    import glob
    per = {}
    failed = {}
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                fl = line.split()
                if len(fl) < 6:
                    continue
                try:
                    end = int(fl[4]) + int(fl[5]) / 1e6
                except ValueError:
                    continue
                sec = int(end - t0)
                if fl[2].isdigit():
                    per.setdefault(sec, []).append(int(fl[2]))
                elif fl[2] == "failed":
                    failed[sec] = failed.get(sec, 0) + 1
    last = int(t_end) - 1  # the last second may be cut by the SIGINT
    err_by_sec = {}
    for t, _ in errors:
        err_by_sec[int(t)] = err_by_sec.get(int(t), 0) + 1
    by_sample = {int(s["t"]) - 1: s for s in samples}  # a sample at t covers [t-1, t)
    timeline = []
    for sec in range(0, last):
        lat = sorted(per.get(sec, []))
        row = {"t": sec, "tps": len(lat),
               "p99_ms": round(benchlib.percentile(lat, 99) / 1000, 2) if lat else "",
               "mean_ms": round(sum(lat) / len(lat) / 1000, 2) if lat else "",
               "errors": err_by_sec.get(sec, 0) + failed.get(sec, 0)}
        s = by_sample.get(sec, {})
        row["shards"] = 1 + sum(1 for t, w in events if t <= sec + 1 and w.endswith("answered"))
        row["moves"] = s.get("moves", "")
        row["active_move"] = s.get("active_move", "")
        for name in shard_names[:n]:
            row[f"{name}_cores"] = s.get(f"{name}_cores", "")
        for k in ("proxy_cores", "pgbench_cores", "machine_busy", "other_cores", "loadavg"):
            row[k] = s.get(k, "")
        timeline.append(row)
    keys = ["t", "tps", "p99_ms", "mean_ms", "errors", "shards"] + [f"{s}_cores" for s in shard_names[:n]] + \
        ["proxy_cores", "pgbench_cores", "machine_busy", "other_cores", "moves", "active_move", "loadavg"]
    with open(os.path.join(RESULTS, "elastic.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        for r in timeline:
            wr.writerow(r)
    with open(os.path.join(RESULTS, "events.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["t", "event"])
        wr.writerows(events)
    with open(os.path.join(edir, "moves.txt"), "w") as f:
        f.write("\n".join(" | ".join(str(x) for x in r) for r in mv_all) + "\n\n")
        f.write(" | ".join(cols) + "\n" + "\n".join(" | ".join(str(x) for x in r) for r in parts) + "\n")
    # Summary figures.
    base = [r["tps"] for r in timeline if 3 <= r["t"] < BASELINE]
    final = [r["tps"] for r in timeline if r["t"] >= t_end - TAIL + 3 and r["t"] < last]
    base_p99 = [r["p99_ms"] for r in timeline if 3 <= r["t"] < BASELINE and r["p99_ms"] != ""]
    final_p99 = [r["p99_ms"] for r in timeline if r["t"] >= t_end - TAIL + 3 and r["p99_ms"] != ""]
    steps = []  # median tps of each steady stretch: after "moves done, K shards" until the next event
    done_events = [(t, w) for t, w in events if w.startswith("moves done")]
    for t, w in done_events:
        nxt = min([e for e, _ in events if e > t] + [t_end])
        v = [r["tps"] for r in timeline if t + 2 <= r["t"] < nxt - 1]
        if v:
            steps.append((w.split(",")[1].strip(), statistics.median(v)))
    res = {
        "rows_el": rows0, "finished": finished, "events": events,
        "baseline_tps": statistics.median(base) if base else None,
        "final_tps": statistics.median(final) if final else None,
        "baseline_p99": statistics.median(base_p99) if base_p99 else None,
        "final_p99": statistics.median(final_p99) if final_p99 else None,
        "max_p99": max([r["p99_ms"] for r in timeline if r["p99_ms"] != ""] or [0]),
        "errors": len(errors) + sum(failed.values()), "error_lines": errors[:10],
        "moves": [(r[0], f"{r[1]}:{r[2]}", r[3], r[4], r[5], r[10]) for r in mv_all],
        "steps": steps, "loadavg_start": la0, "loadavg_end": la1, "seconds": round(t_end, 1),
    }
    res["ratio"] = res["final_tps"] / res["baseline_tps"] if res["final_tps"] and res["baseline_tps"] else None
    with open(os.path.join(RESULTS, "elastic.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    plot(timeline, events, res, n, shard_names)
    return res


def plot(timeline, events, res, n, shard_names):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("elastic: no matplotlib (apt-get install python3-matplotlib): no plot")
        return
    ts = [r["t"] for r in timeline]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 1.4, 1.4]})
    ax1.plot(ts, [r["tps"] for r in timeline], color="tab:blue", lw=1.2, label="tps (pgbench -S)")
    if res.get("baseline_tps"):
        for k in range(1, n + 1):
            ax1.axhline(res["baseline_tps"] * k, color="grey", lw=0.6, ls=":")
            ax1.text(ts[-1] if ts else 0, res["baseline_tps"] * k, f" {k}x", va="center", fontsize=8, color="grey")
    for t, w in events:
        if w.startswith("ADD SHARD") and not w.endswith("answered"):
            for ax in (ax1, ax2, ax3):
                ax.axvline(t, color="tab:green", lw=0.8, ls="--")
            ax1.text(t, ax1.get_ylim()[1] * 0.97, " +" + w.split()[-1], color="tab:green", fontsize=8, va="top")
    # Shade the seconds a move was running.
    active = [r["t"] for r in timeline if r["active_move"]]
    for t in active:
        ax1.axvspan(t, t + 1, color="tab:orange", alpha=0.12, lw=0)
    errs = [(r["t"], r["tps"]) for r in timeline if r["errors"]]
    if errs:
        ax1.scatter([e[0] for e in errs], [e[1] for e in errs], color="red", marker="x", label="client errors", zorder=5)
    ax1.set_ylabel("transactions/s")
    ratio = f"{res['ratio']:.2f}x" if res.get("ratio") else "?"
    ax1.set_title(f"splitpoint, pgbench -S -c {ELASTIC_CLIENTS}, shards under {QUOTA} CPU each{NOQ}: "
                  f"1 -> {n} shards online, {ratio}, {res['errors']} client errors")
    ax1.plot([], [], color="tab:orange", alpha=0.3, lw=6, label="a partition move running")
    ax1.legend(loc="upper left", fontsize=8)
    ax1.grid(alpha=0.3)
    ax2.plot(ts, [r["p99_ms"] if r["p99_ms"] != "" else None for r in timeline], color="tab:red", lw=1)
    ax2.set_ylabel("p99 latency (ms)")
    ax2.grid(alpha=0.3)
    for name in shard_names[:n]:
        ax3.plot(ts, [r[f"{name}_cores"] if r[f"{name}_cores"] != "" else None for r in timeline], lw=0.9, label=name)
    ax3.plot(ts, [r["proxy_cores"] if r["proxy_cores"] != "" else None for r in timeline], lw=0.9, color="black",
             ls="--", label="proxy")
    ax3.plot(ts, [r["other_cores"] if r["other_cores"] != "" else None for r in timeline], lw=0.9, color="grey",
             ls=":", label="other work on the machine")
    ax3.axhline(QUOTA, color="grey", lw=0.6, ls=":")
    ax3.set_ylabel("CPUs used")
    ax3.set_xlabel("seconds")
    ax3.legend(loc="upper left", fontsize=7, ncol=n + 2)
    ax3.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=90)
    log(f"elastic: plot written to {PLOT}")


# ---------------------------------------------------------------- main

def quota_cgroups(prog):
    """The Cgroups, or None (the caller exits 3) when no quota can be applied and
    ALLOW_NO_QUOTA is not set; without a quota NOQ marks every figure."""
    global NOQ
    cg = Cgroups()
    if not cg.ok():
        msg = f"{prog}: NO QUOTA: the CPU quota cannot be applied ({cg.why})"
        if not ALLOW_NO_QUOTA:
            print(msg + "; stopping (ALLOW_NO_QUOTA=1 runs without it, every figure marked NO QUOTA)", file=sys.stderr)
            return None
        print(msg + "; going on, every figure marked NO QUOTA", file=sys.stderr)
        NOQ = " [NO QUOTA]"
    return cg


def print_summary(lines):
    """Prints the report LINES and writes them to RESULTS/summary.txt."""
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(RESULTS, "summary.txt"), "w") as f:
        f.write(text + "\n")


def stop_all(stopping, cg):
    """Stops the CHILDREN still running, the instances STOPPING, removes the cgroups and,
    unless KEEP_WORK=1, the instances' data directories."""
    for p in CHILDREN:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for inst in reversed(stopping):
        inst.stop()
    cg.cleanup()
    if env("KEEP_WORK", "0") != "1":  # the instances' data (GBs at the default scale)
        import shutil
        for inst in stopping:
            shutil.rmtree(inst.dir, ignore_errors=True)


def text_table(header, rows):
    w = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w[i]) for i, x in enumerate(r))  # noqa: E731
    return "\n".join([line(header), line(["-" * x for x in w])] + [line(r) for r in rows])


def main():
    if not os.access(SP_BIN, os.X_OK):
        print(f"scale_out: SP_BIN={SP_BIN} is not executable", file=sys.stderr)
        return 2
    cg = quota_cgroups("scale_out")
    if cg is None:
        return 3
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(os.path.join(RESULTS, "logs"), exist_ok=True)
    insts = []
    cat = None
    autogroup = "/proc/sys/kernel/sched_autogroup_enabled"
    ag_was = None
    want_ag = env("SCHED_AUTOGROUP", "0")
    stopping = []

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_start": loadavg(), "nproc": os.cpu_count(),
            "kernel": os.uname().release, "sp_bin": SP_BIN, "quota": QUOTA if cg.ok() else "NO QUOTA",
            "cgroup": f"v{cg.version}" if cg.ok() else cg.why, "scale_per_shard": SCALE_PER_SHARD,
            "partitions": PARTITIONS, "clients": CLIENTS, "pool_size": POOL_SIZE, "sp_workers": SP_WORKERS,
            "rounds": ROUNDS, "duration": DURATION, "mode": MODE, "elastic_scale": ELASTIC_SCALE,
            "elastic_clients": ELASTIC_CLIENTS, "phases": " ".join(PHASES)}
    try:
        if want_ag != "keep" and os.path.exists(autogroup):
            with open(autogroup) as f:
                ag_was = f.read().strip()
            if ag_was != want_ag:
                try:
                    with open(autogroup, "w") as f:
                        f.write(want_ag)
                except OSError:
                    ag_was = None
        with open(autogroup) as f:
            meta["sched_autogroup"] = f.read().strip()
        log(f"scale_out: results in {RESULTS}; quota {QUOTA if cg.ok() else 'NONE'} CPU per shard "
            f"(cgroup {meta['cgroup']}); load {loadavg()}")
        nmax = max(SHARD_COUNTS + ([ELASTIC_SHARDS] if "elastic" in PHASES else []))
        insts = [Instance(f"pg{i}") for i in range(nmax)]
        for inst in insts:
            inst.start()
            stopping.append(inst)
        if "elastic" in PHASES:
            cat = Instance("cat")
            cat.start()
            stopping.append(cat)
        shard_names = [inst.name for inst in insts]
        static_rows = None
        if "static" in PHASES:
            static_phase(cg, insts)
        if "elastic" in PHASES:  # loaded before the quota, as the static data
            log(f"elastic: loading scale {ELASTIC_SCALE} into pg0 (database el)")
            load_shard(insts[0], "el", ELASTIC_SCALE, 0, 1)
        if cg.ok():
            for inst in insts:
                pids = cg.add(inst.name, os.path.join(inst.dir, "data"))
                log(f"cgroup {inst.name}: {len(pids)} processes moved (postmaster {pids[0]}), quota "
                    f"{int(QUOTA * PERIOD_US)}/{PERIOD_US} us")
        if "static" in PHASES:
            static_rows = static_run(cg, insts, shard_names)
        el = None
        if "elastic" in PHASES:
            el = elastic_phase(cg, insts, cat, shard_names)
        meta["loadavg_end"] = loadavg()
        # ---- report
        lines = [f"scale_out{NOQ}: {json.dumps(meta)}"]
        if static_rows:
            h, rows = static_table(static_rows)
            lines += ["", f"== static: pgbench -M {MODE}, {DURATION} s x {ROUNDS} rounds, scale {SCALE_PER_SHARD} "
                      f"per shard, quota {QUOTA if cg.ok() else 'NONE'} CPU per shard, pool_size {POOL_SIZE}{NOQ} ==",
                      text_table(h, rows)]
            for w in WORKLOADS:
                med = {}
                for t in TARGET_ORDER:
                    v = [r["tps"] for r in static_rows if r["workload"] == w and r["target"] == t and r["tps"]]
                    med[t] = statistics.median(v) if v else None
                checks = []
                for n in SHARD_COUNTS:
                    if n > 1 and med.get(f"sp{n}") and med.get("sp1"):
                        r = med[f"sp{n}"] / med["sp1"]
                        checks.append(f"sp{n}/sp1 = {r:.2f} (target >= {0.9 * n:.1f}: {'met' if r >= 0.9 * n else 'MISSED'})")
                if med.get("sp1") and med.get("direct"):
                    r = med["sp1"] / med["direct"]
                    checks.append(f"sp1/direct = {r:.2f} (target >= 0.90: {'met' if r >= 0.9 else 'MISSED'})")
                if med.get("sp1") and med.get("direct_pool"):
                    checks.append(f"sp1/direct_pool = {med['sp1'] / med['direct_pool']:.2f}")
                lines.append(f"{w}: " + "; ".join(checks))
        if el:
            lines += ["", f"== elastic: pgbench -S -c {ELASTIC_CLIENTS}, 1 -> {ELASTIC_SHARDS} shards online "
                      f"(scale {ELASTIC_SCALE}, {PARTITIONS} partitions){NOQ} ==",
                      text_table(["figure", "value"], [
                          ["baseline tps (1 shard, median)", f"{el['baseline_tps'] or 0:.0f}"],
                          *[[f"steady tps with {s}", f"{v:.0f} ({v / el['baseline_tps']:.2f}x)" if el['baseline_tps'] else f"{v:.0f}"]
                            for s, v in el["steps"]],
                          ["final tps (median of the tail)", f"{el['final_tps'] or 0:.0f}"],
                          ["final / baseline", f"{el['ratio']:.2f}x (target >= 3.5: {'met' if (el['ratio'] or 0) >= 3.5 else 'MISSED'})"
                           if el["ratio"] else "?"],
                          ["p99 ms baseline / final / worst second", f"{el['baseline_p99']} / {el['final_p99']} / {el['max_p99']}"],
                          ["client errors", f"{el['errors']} (target 0: {'met' if el['errors'] == 0 else 'MISSED'})"],
                          ["moves", ", ".join(f"{m[1]} {m[2]}->{m[3]} {m[4]} hold {m[5]}ms" for m in el["moves"])],
                          ["all steps finished", str(el["finished"])],
                          ["seconds, loadavg start / end", f"{el['seconds']}, {el['loadavg_start']} / {el['loadavg_end']}"],
                      ])]
            for t, line in el["error_lines"]:
                lines.append(f"  error at {t:.1f}s: {line}")
        lines.append(f"\nloadavg at start {meta['loadavg_start']}, at end {meta['loadavg_end']}; results in {RESULTS}")
        print_summary(lines)
        return 0
    finally:
        stop_all(stopping, cg)
        if ag_was is not None and ag_was != want_ag:
            with open(autogroup, "w") as f:
                f.write(ag_was)


if __name__ == "__main__":
    sys.exit(main())
