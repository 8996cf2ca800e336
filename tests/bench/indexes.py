#!/usr/bin/python3
"""Global secondary indexes (issue #47, docs/indexes.md), by hand: docs/performance.md,
"Global indexes: reads by email, and what maintaining one costs".

    tests/bench/indexes.py                 # about 8 minutes
    QUICK=1 tests/bench/indexes.py         # smoke run, about 2 minutes
    CLIENTS="1 4 16" ROUNDS=5 tests/bench/indexes.py
    PHASES=reads READ_MODES=prepared tests/bench/indexes.py
    PHASES=backfill ROWS=1000000 tests/bench/indexes.py   # the build under writes (#47)

Two PostgreSQL 15 instances (tests/lib/pg.sh, free ports under $BENCH_WORK) and two
splitpoints over 4 shards each, shard i on instance i % 2 (two databases per instance
and proxy):
- `index`: databases ix0..ix3, config with
  `indexes: [{table: users, columns: [email], unique: true}]`;
- `scatter`: databases px0..px3, the same config without `indexes:` (its shards have no
  trigger and no entries, so its writes pay for nothing of the index).
Both hold the same `users (id bigint PRIMARY KEY, email text UNIQUE, city text)`, hashed
by id over PARTITIONS (16) partitions with the default placement (shard i of 4 owns
remainders [4i, 4i+4)), ROWS (200 000) rows `(g, 'user<g>@example.com', 'city<g%1000>')`
loaded on the shards directly, each shard given the rows PostgreSQL's own hash
partitioning puts in its partitions (satisfies_hash_partition on a scratch table, as
tests/bench/run trims). The index proxy builds its entries at start; the run waits for
`SHOW INDEXES` to say ready (the build time is reported), then checks through both
proxies that point reads by id and by email find the rows (placement and index).

Phase `backfill` (alone: only the index proxy): BUILD_WRITERS (4) clients write through the
index proxy from its start until `SHOW INDEXES` says ready — 60% inserts of new users,
20% updates of a loaded row's email, 20% deletes of loaded rows, those two only of ids
above READ_MAX (90% of ROWS) — then `CHECK INDEX` must find nothing missing and no
orphan (and the final check below compares every entry with every row). INDEX_TIMEOUT
(1800 s) bounds the build.

Phase `reads`: `SELECT * FROM users WHERE email = <random existing email>`, each result
checked (exactly the row of that id), READ_MODES: `simple` (psycopg2: the value is a
literal in a Query message) and `prepared` (psycopg 3, `prepare=True`: Parse once, then
Bind `$1` / Execute). Phase `writes`: single-row `INSERT INTO users VALUES (...)` of new
users (psycopg2, simple protocol: extended-protocol writes to an indexed table are
refused for now), autocommit. For every cell (mode, clients in CLIENTS / WRITE_CLIENTS)
the two targets run back to back, which goes first alternating, ROUNDS (3) rounds of
DURATION (10) s, after WARMUP (2) s of each target unrecorded. Clients are processes
(one connection each), timing every statement themselves (perf_counter): tps, p50, p99,
mean, max; per run also /proc/loadavg at start and end, CPU per statement of the proxy,
of the PostgreSQL instances (every process), of the clients and of other work on the
machine (/proc/stat busy minus those), the proxy's `splitpoint_queries_total` by route
and `splitpoint_two_phase_total` (metrics port). After the writes: which inserted rows
have their entry on another shard than the row (asked of the shards), the write
latencies of those and of one-shard writes apart, and every entry against every row
(none missing, none orphaned) and no prepared transaction left.

Results in RESULTS (default tests/bench/results/indexes-YYYYMMDD-HHMMSS/): runs.csv
(every run), summary.md (the tables it prints), meta.env, logs/ (the proxies' configs and
logs). Other variables: SP_BIN (default /work/bench-bin/splitpoint-indexes), POOL_SIZE (20
per shard), SP_WORKERS (0: one per hardware thread), SP_LOG_LEVEL (warn),
SCHED_AUTOGROUP (default 0: as tests/bench/run, the kernel's session groups off for the
run and put back after; `keep` leaves them), KEEP_WORK=1 (keep the instances).
"""

import array
import csv
import functools
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402
import psycopg2  # noqa: E402


def env(name, default):
    return os.environ.get(name, default)


QUICK = env("QUICK", "0") == "1"
SP_BIN = env("SP_BIN", "/work/bench-bin/splitpoint-indexes")
WORK = env("BENCH_WORK", f"/tmp/splitpoint-bench-indexes-{os.getpid()}")
RESULTS = env("RESULTS", os.path.join(ROOT, "tests", "bench", "results", "indexes-" + time.strftime("%Y%m%d-%H%M%S")))
ROWS = int(env("ROWS", "100000" if QUICK else "200000"))
ROUNDS = int(env("ROUNDS", "1" if QUICK else "3"))
DURATION = float(env("DURATION", "3" if QUICK else "10"))
WARMUP = float(env("WARMUP", "1" if QUICK else "2"))
CLIENTS = [int(x) for x in env("CLIENTS", "1 8").split()]
WRITE_CLIENTS = [int(x) for x in env("WRITE_CLIENTS", " ".join(map(str, CLIENTS))).split()]
READ_MODES = env("READ_MODES", "simple prepared").split()
PHASES = env("PHASES", "reads writes").split()
BUILD_WRITERS = int(env("BUILD_WRITERS", "4"))
PARTITIONS = int(env("PARTITIONS", "16"))
POOL_SIZE = int(env("POOL_SIZE", "20"))
SP_WORKERS = int(env("SP_WORKERS", "0"))
SP_LOG_LEVEL = env("SP_LOG_LEVEL", "warn")
SHARDS = 4
# Phase `backfill` alone needs no scatter proxy to compare with.
TARGETS = ("index", "scatter") if {"reads", "writes"} & set(PHASES) else ("index",)
# With `backfill`, its writers update and delete only the loaded rows above READ_MAX, so
# that reads and the answers' check keep finding the rows below it unchanged.
READ_MAX = ROWS * 9 // 10 if "backfill" in PHASES else ROWS
INDEX = "users_email_key"
READ_SQL = "SELECT * FROM users WHERE email = %s"
WRITE_SQL = "INSERT INTO users VALUES (%s, %s, %s)"
NEW_IDS = 1_000_000_000  # inserted users' ids start above this (loaded ones are 1..ROWS)
sh = functools.partial(benchlib.sh, WORK)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def email_of(i):
    return f"user{i}@example.com"


def connect(port, db, user="postgres", password="postgres"):
    c = psycopg2.connect(host="127.0.0.1", port=port, dbname=db, user=user, password=password, connect_timeout=10)
    c.autocommit = True
    return c


def q(port, db, sql, args=None, user="postgres", password="postgres"):
    c = connect(port, db, user, password)
    try:
        cur = c.cursor()
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else None
    finally:
        c.close()


def machine_busy():
    """(busy, total) CPU ticks of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    total = sum(v[:8])
    return total - idle, total


def proc_cpu(pid):
    u, s = benchlib.cpu_seconds(benchlib.stat_fields(pid))
    return u + s


def metrics(port):
    """{(name, frozenset(labels)): value} of the proxy's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)", line)
        if not m or line.startswith("#"):
            continue
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(snapshot, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in snapshot.items() if n == name and want <= set(ls))


def pct(sorted_values, p):
    v = benchlib.percentile(sorted_values, p)
    return None if v is None else v / 1000.0  # us -> ms


# ---------------------------------------------------------------- clients (processes)

def client(kind, mode, port, seed, id_base, ready_q, go, deadline, out_q):
    """One client: connect, say ready, wait for go, run statements until the deadline,
    send back latencies (us), the inserted ids (writes), errors and wrong answers."""
    rnd = random.Random(seed)
    lat = array.array("I")
    ids = array.array("q")
    errors, wrong = {}, []
    try:
        if mode == "prepared":
            import psycopg

            def open_conn():
                return psycopg.connect(host="127.0.0.1", port=port, dbname="app", user="app", password="secret",
                                       autocommit=True, connect_timeout=10)
            dberror = psycopg.Error
        else:
            def open_conn():
                return connect(port, "app", "app", "secret")
            dberror = psycopg2.Error
        conn = open_conn()
        cur = conn.cursor()
        ready_q.put(("ready", seed, None))
    except Exception as e:  # noqa: BLE001
        ready_q.put(("error", seed, str(e).strip()))
        return
    go.wait()
    end = deadline.value
    cpu0 = os.times()
    next_id = id_base
    perf = time.perf_counter
    while time.monotonic() < end:
        if kind == "churn":  # while the index builds: until the lead says stop
            end = deadline.value
            r = rnd.random()
            if r < 0.6:
                next_id += 1
                key = next_id
                sql, args = WRITE_SQL, (key, f"new{key}@example.com", f"city{key % 1000}")
            elif r < 0.8:
                key = rnd.randint(READ_MAX + 1, ROWS)
                sql, args = "UPDATE users SET email = %s WHERE id = %s", (f"moved{key}-{seed}-{next_id}@example.com", key)
                next_id += 1
            else:
                key = rnd.randint(READ_MAX + 1, ROWS)
                sql, args = "DELETE FROM users WHERE id = %s", (key,)
        elif kind == "read":
            key = rnd.randint(1, READ_MAX)
            args = (email_of(key),)
        else:
            next_id += 1
            key = next_id
            args = (key, f"new{key}@example.com", f"city{key % 1000}")
        t0 = perf()
        try:
            if kind == "churn":
                cur.execute(sql, args)
            elif kind == "read":
                if mode == "prepared":
                    cur.execute(READ_SQL, args, prepare=True)
                else:
                    cur.execute(READ_SQL, args)
                rows = cur.fetchall()
            else:
                cur.execute(WRITE_SQL, args)
            t1 = perf()
        except dberror as e:
            code = getattr(e, "pgcode", None) or getattr(e, "sqlstate", None) or type(e).__name__
            msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            errors.setdefault(code, [0, msg])[0] += 1
            if conn.closed:
                try:
                    conn = open_conn()
                    cur = conn.cursor()
                except Exception:  # noqa: BLE001
                    time.sleep(0.1)
            continue
        lat.append(int((t1 - t0) * 1e6))
        if kind == "read":
            if len(rows) != 1 or rows[0][0] != key or rows[0][1] != args[0]:
                if len(wrong) < 5:
                    wrong.append(f"{args[0]}: {rows[:3]}")
                else:
                    wrong.append("")
        elif kind == "write":
            ids.append(key)
    cpu1 = os.times()
    out_q.put({"seed": seed, "lat": lat.tobytes(), "ids": ids.tobytes(), "errors": errors,
               "wrong": len(wrong), "wrong_examples": [w for w in wrong if w],
               "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)})
    try:
        conn.close()
    except Exception:  # noqa: BLE001
        pass


# ---------------------------------------------------------------- the set-up

class Bench:
    def __init__(self):
        self.ports = []
        self.proxies = {}  # target -> dict(port, mport, proc, dbs)
        self.next_block = 0
        self.problems = []
        self.runs = []

    # PostgreSQL and data
    def start_instances(self):
        for i in range(2):
            port = int(sh("free_port"))
            sh("pg_start", f"{WORK}/pg{i}", str(port))
            self.ports.append(port)
        self.datadirs = [f"{WORK}/pg{i}/data" for i in range(2)]

    def shard_dbs(self, target):
        prefix = "ix" if target == "index" else "px"
        return [(self.ports[i % 2], f"{prefix}{i}") for i in range(SHARDS)]

    def load(self, target):
        for i, (port, db) in enumerate(self.shard_dbs(target)):
            q(port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            q(port, "postgres", f"CREATE DATABASE {db}")
            q(port, db, "CREATE TABLE users (id bigint PRIMARY KEY, email text UNIQUE, city text)")
            q(port, db, "CREATE TABLE chk (k bigint) PARTITION BY HASH (k)")
            lo, hi = i * PARTITIONS // SHARDS, (i + 1) * PARTITIONS // SHARDS
            cond = " OR ".join(f"satisfies_hash_partition('chk'::regclass, {PARTITIONS}, {r}, g)" for r in range(lo, hi))
            q(port, db, f"INSERT INTO users SELECT g, 'user' || g || '@example.com', 'city' || (g % 1000) "
                        f"FROM generate_series(1::bigint, {ROWS}) g WHERE {cond}")
            q(port, db, "DROP TABLE chk")
            q(port, db, "VACUUM ANALYZE users")
        counts = [q(p, d, "SELECT count(*) FROM users")[0][0] for p, d in self.shard_dbs(target)]
        if sum(counts) != ROWS:
            raise SystemExit(f"{target}: shards hold {counts}, not {ROWS} rows in all")
        return counts

    # proxies
    def config(self, target, port, mport):
        shards = "\n".join(f"  - {{ name: s{i}, host: 127.0.0.1, port: {p}, database: {db}, user: postgres, "
                           f"password: postgres, pool_size: {POOL_SIZE} }}"
                           for i, (p, db) in enumerate(self.shard_dbs(target)))
        text = f"""listen: 127.0.0.1:{port}
metrics_listen: 127.0.0.1:{mport}
auth: scram-sha-256
workers: {SP_WORKERS}
log_level: {SP_LOG_LEVEL}
users:
  - {{ name: app, password: secret }}
  - {{ name: admin, password: adminpw, admin: true }}
shards:
{shards}
distributions:
  - name: by_id
    method: hash
    partitions: {PARTITIONS}
    tables: {{ users: id }}
"""
        if target == "index":
            text += "indexes:\n  - { table: users, columns: [email], unique: true }\n"
        return text

    def start_proxy(self, target):
        port, mport = int(sh("free_port")), int(sh("free_port"))
        path = os.path.join(RESULTS, "logs", f"{target}.yaml")
        with open(path, "w") as f:
            f.write(self.config(target, port, mport))
        logf = open(os.path.join(RESULTS, "logs", f"{target}.log"), "a")
        proc = subprocess.Popen([SP_BIN, "--config", path], stdout=logf, stderr=subprocess.STDOUT)
        sh("wait_port", str(port), "15")
        self.proxies[target] = {"port": port, "mport": mport, "proc": proc, "started": time.monotonic()}
        return self.proxies[target]

    def admin(self, target, sql):
        return q(self.proxies[target]["port"], "splitpoint", sql, user="admin", password="adminpw")

    def wait_index_ready(self, timeout=float(env("INDEX_TIMEOUT", "1800"))):
        p = self.proxies["index"]
        last = None
        while True:
            rows = self.admin("index", "SHOW INDEXES")
            row = [r for r in rows if r[0] == INDEX]
            state = row[0][4] if row else "(not listed)"
            if state != last:
                log(f"  SHOW INDEXES: {row[0] if row else rows}")
                last = state
            if state == "ready":
                return time.monotonic() - p["started"], row[0]
            if state == "failed":
                raise SystemExit(f"index build failed: {row[0]}")
            if time.monotonic() - p["started"] > timeout:
                raise SystemExit(f"index not ready after {timeout}s: {rows}")
            time.sleep(0.1)

    def check_answers(self):
        """Point reads by id and by email through both proxies find their rows (the
        placement of the loaded rows and the index's entries)."""
        rnd = random.Random(1)
        keys = [rnd.randint(1, READ_MAX) for _ in range(300)]
        for target in TARGETS:
            c = connect(self.proxies[target]["port"], "app", "app", "secret")
            cur = c.cursor()
            cur.execute("SELECT count(*) FROM users")
            total = cur.fetchone()[0]
            if total != ROWS and "backfill" not in PHASES:
                raise SystemExit(f"{target}: count(*) through the proxy {total}, not {ROWS}")
            bad = []
            for k in keys:
                cur.execute("SELECT email FROM users WHERE id = %s", (k,))
                r = cur.fetchall()
                if r != [(email_of(k),)]:
                    bad.append((k, r))
                cur.execute(READ_SQL, (email_of(k),))
                r = cur.fetchall()
                if len(r) != 1 or r[0][0] != k:
                    bad.append((email_of(k), r))
            c.close()
            if bad:
                raise SystemExit(f"{target}: wrong point reads (placement?): {bad[:5]}")
        log(f"  point reads by id and by email through {' and '.join(TARGETS)}: 300/300 found; count(*) {total}")

    def entries(self):
        out = []
        for port, db in self.shard_dbs("index"):
            out += q(port, db, f"SELECT email, id FROM splitpoint.{INDEX}_entries")
        return out

    # one measured run
    def run(self, target, kind, mode, clients, seconds, rnd_no=None, record=True, until=None):
        """`until`: the clients run (kind churn) until it returns, not for `seconds`."""
        p = self.proxies[target]
        ctx = mp.get_context("fork")
        ready_q, out_q = ctx.Queue(), ctx.Queue()
        go, deadline = ctx.Event(), ctx.Value("d", 0.0)
        procs = []
        for i in range(clients):
            seed = random.randrange(1 << 30)
            base = NEW_IDS + self.next_block * 1_000_000
            self.next_block += 1
            procs.append(ctx.Process(target=client, args=(kind, mode, p["port"], seed, base, ready_q, go, deadline,
                                                          out_q), daemon=True))
        for pr in procs:
            pr.start()
        failed = []
        for _ in procs:
            state, _seed, err = ready_q.get(timeout=60)
            if state != "ready":
                failed.append(err)
        if failed:
            go.set()
            deadline.value = 0
            for pr in procs:
                pr.join(10)
            raise SystemExit(f"{target}: clients could not connect: {failed[:3]}")
        load0 = loadavg()
        m0 = metrics(p["mport"])
        cpu0 = (proc_cpu(p["proc"].pid), sum(sum(benchlib.instance_times(d)) for d in self.datadirs), machine_busy())
        t0 = time.monotonic()
        deadline.value = t0 + (3600 if until else seconds)
        go.set()
        if until:
            until()
            deadline.value = time.monotonic()
            seconds = deadline.value - t0
        results = [out_q.get(timeout=(0 if until else seconds) + 120) for _ in procs]
        elapsed = time.monotonic() - t0
        for pr in procs:
            pr.join(30)
        time.sleep(0.3)  # the last statements' backends' CPU: until /proc has it
        cpu1 = (proc_cpu(p["proc"].pid), sum(sum(benchlib.instance_times(d)) for d in self.datadirs), machine_busy())
        m1 = metrics(p["mport"])
        load1 = loadavg()
        lat = array.array("I")
        ids = array.array("q")
        errors = {}
        for r in results:
            lat.frombytes(r["lat"])
            ids.frombytes(r["ids"])
            for code, (n, msg) in r["errors"].items():
                errors.setdefault(code, [0, msg])[0] += n
        if not record:  # a warm-up: only its errors matter
            if errors or any(r["wrong"] for r in results):
                self.problems.append(f"warm-up {target} {kind} {mode} c={clients}: errors {errors}, wrong "
                                     f"{sum(r['wrong'] for r in results)}")
            return None
        n = len(lat)
        s = sorted(lat)
        busy, total = cpu1[2][0] - cpu0[2][0], cpu1[2][1] - cpu0[2][1]
        ncpu = os.cpu_count()
        wall = total / ncpu / benchlib.TICK if total else elapsed  # seconds of wall time /proc/stat saw
        proxy_s, pg_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
        client_s = sum(r["cpu"] for r in results)
        busy_s = busy / benchlib.TICK

        def dm(name, **labels):
            return metric(m1, name, **labels) - metric(m0, name, **labels)

        row = {
            "phase": kind, "round": rnd_no, "mode": mode, "clients": clients, "target": target,
            "seconds": f"{seconds:.1f}", "statements": n, "tps": f"{n / seconds:.1f}",
            "p50_ms": f"{pct(s, 50):.3f}" if n else "", "p99_ms": f"{pct(s, 99):.3f}" if n else "",
            "mean_ms": f"{sum(s) / n / 1000:.3f}" if n else "", "max_ms": f"{s[-1] / 1000:.3f}" if n else "",
            "errors": sum(v[0] for v in errors.values()),
            "error_codes": "; ".join(f"{c} x{v[0]}: {v[1]}" for c, v in errors.items()),
            "wrong": sum(r["wrong"] for r in results),
            "route_single": int(dm("splitpoint_queries_total", route="single", target="primary")),
            "route_multi": int(dm("splitpoint_queries_total", route="multi", target="primary")),
            "route_all": int(dm("splitpoint_queries_total", route="all", target="primary")),
            "two_phase_committed": int(dm("splitpoint_two_phase_total", outcome="committed")),
            "two_phase_other": int(sum(dm("splitpoint_two_phase_total", outcome=o)
                                       for o in ("rolled_back", "unknown", "recovered_committed",
                                                 "recovered_rolled_back"))),
            "two_phase_share": "", "proxy_us": f"{proxy_s * 1e6 / n:.1f}" if n else "",
            "pg_us": f"{pg_s * 1e6 / n:.1f}" if n else "", "client_us": f"{client_s * 1e6 / n:.1f}" if n else "",
            "machine_busy_cpus": f"{busy_s / wall:.2f}",
            "other_cpus": f"{max(0.0, busy_s - proxy_s - pg_s - client_s) / wall:.2f}",
            "load_start": load0, "load_end": load1,
        }
        if kind == "write" and n:
            row["two_phase_share"] = f"{row['two_phase_committed'] / n:.3f}"
        examples = [w for r in results for w in r["wrong_examples"]]
        if row["wrong"]:
            self.problems.append(f"{target} {kind} {mode} c={clients} round {rnd_no}: {row['wrong']} wrong answers, "
                                 f"e.g. {examples[:3]}")
        if errors:
            self.problems.append(f"{target} {kind} {mode} c={clients} round {rnd_no}: errors {row['error_codes']}")
        if row["two_phase_other"]:
            self.problems.append(f"{target} {kind} c={clients} round {rnd_no}: two-phase outcomes other than "
                                 f"committed: {row['two_phase_other']}")
        if proc_dead := [t for t, pp in self.proxies.items() if pp["proc"].poll() is not None]:
            raise SystemExit(f"proxy died: {proc_dead}")
        log(f"  {kind:5} {mode:8} c={clients:<2} {target:7} {row['tps']:>8} tps  p50 {row['p50_ms']} ms  "
            f"p99 {row['p99_ms']} ms  single/multi {row['route_single']}/{row['route_multi']}  "
            f"2pc {row['two_phase_committed']}  err {row['errors']}  wrong {row['wrong']}  "
            f"proxy {row['proxy_us']} pg {row['pg_us']} client {row['client_us']} us/stmt  "
            f"other {row['other_cpus']} CPUs  load {load0} -> {load1}")
        self.runs.append((row, lat, ids))
        return row


# ---------------------------------------------------------------- the report

def spread(values):
    med = statistics.median(values)
    return med, min(values), max(values), ((max(values) - min(values)) / med * 100 if med else 0)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def f0(x):
    return f"{x:,.0f}"


def main():
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(os.path.join(RESULTS, "logs"), exist_ok=True)
    if not os.access(SP_BIN, os.X_OK):
        raise SystemExit(f"SP_BIN={SP_BIN} is not executable")
    autogroup = "/proc/sys/kernel/sched_autogroup_enabled"
    want_ag = env("SCHED_AUTOGROUP", "0")
    ag_was = None
    b = Bench()

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_start": loadavg(), "nproc": os.cpu_count(),
            "kernel": os.uname().release, "sp_bin": SP_BIN, "rows": ROWS, "partitions": PARTITIONS,
            "shards": SHARDS, "rounds": ROUNDS, "duration": DURATION, "clients": " ".join(map(str, CLIENTS)),
            "write_clients": " ".join(map(str, WRITE_CLIENTS)), "read_modes": " ".join(READ_MODES),
            "pool_size": POOL_SIZE, "sp_workers": SP_WORKERS, "phases": " ".join(PHASES)}
    started = time.monotonic()
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
        log(f"indexes: results in {RESULTS}; binary {SP_BIN}; load {loadavg()}")
        b.start_instances()
        log(f"PostgreSQL on ports {b.ports}; loading {ROWS} rows into each target's 4 shards")
        for target in TARGETS:
            t = time.monotonic()
            counts = b.load(target)
            log(f"  {target}: rows per shard {counts} ({time.monotonic() - t:.1f}s)")
            meta[f"rows_per_shard_{target}"] = " ".join(map(str, counts))
        for target in TARGETS:
            b.start_proxy(target)
        if "backfill" in PHASES:
            log(f"backfill: {BUILD_WRITERS} clients insert new users, update the emails of and delete loaded ones "
                f"(ids above {READ_MAX}) while {INDEX} builds")
            got = {}
            churn = b.run("index", "churn", "simple", BUILD_WRITERS, 0, until=lambda: got.update(r=b.wait_index_ready()))
            build_s, row = got["r"]
            meta["backfill_writes"] = churn["statements"]
            meta["backfill_write_tps"] = churn["tps"]
            meta["backfill_write_p99_ms"] = churn["p99_ms"]
            t = time.monotonic()
            check = b.admin("index", f"CHECK INDEX {INDEX}")[0]
            meta["check_index"] = " | ".join(str(x) for x in check)
            meta["check_index_s"] = f"{time.monotonic() - t:.1f}"
            log(f"  CHECK INDEX ({meta['check_index_s']}s): index, rows, entries, missing, orphans, repaired, "
                f"examples = {check}")
            if int(check[3]) or int(check[4]):
                b.problems.append(f"CHECK INDEX after the build under writes: {check}")
        else:
            build_s, row = b.wait_index_ready()
        meta["index_ready_after_s"] = f"{build_s:.1f}"
        meta["show_indexes"] = " | ".join(str(x) for x in row)
        n_entries = len(b.entries())
        log(f"  {INDEX} ready {build_s:.1f}s after the proxy started; {n_entries} entries")
        if n_entries != ROWS and "backfill" not in PHASES:
            b.problems.append(f"after the build: {n_entries} entries for {ROWS} rows")
        per_shard = [q(p, d, f"SELECT count(*) FROM splitpoint.{INDEX}_entries")[0][0] for p, d in b.shard_dbs("index")]
        meta["entries_per_shard"] = " ".join(map(str, per_shard))
        b.check_answers()

        if "reads" in PHASES:
            log("reads: SELECT * FROM users WHERE email = <random existing>")
            for mode in READ_MODES:
                for target in TARGETS:
                    if WARMUP > 0:
                        b.run(target, "read", mode, max(CLIENTS), WARMUP, record=False)
            cell = 0
            for r in range(1, ROUNDS + 1):
                for mode in READ_MODES:
                    for c in CLIENTS:
                        order = TARGETS if (r + cell) % 2 else TARGETS[::-1]
                        cell += 1
                        for target in order:
                            b.run(target, "read", mode, c, DURATION, r)
        if "writes" in PHASES:
            log("writes: INSERT INTO users VALUES (<new id>, <new email>, <city>), one per statement, autocommit")
            for target in TARGETS:  # the first two-shard commit alone (the decision table), then a warm-up
                b.run(target, "write", "simple", 1, 0.5, record=False)
                if WARMUP > 0:
                    b.run(target, "write", "simple", max(WRITE_CLIENTS), WARMUP, record=False)
            cell = 0
            for r in range(1, ROUNDS + 1):
                for c in WRITE_CLIENTS:
                    order = TARGETS if (r + cell) % 2 else TARGETS[::-1]
                    cell += 1
                    for target in order:
                        b.run(target, "write", "simple", c, DURATION, r)
            # Which inserted rows have their entry on another shard than the row.
            row_shard, entry_shard = {}, {}
            for i, (p, d) in enumerate(b.shard_dbs("index")):
                for (k,) in q(p, d, "SELECT id FROM users WHERE id > %s", (NEW_IDS,)):
                    row_shard[k] = i
                for (k,) in q(p, d, f"SELECT id FROM splitpoint.{INDEX}_entries WHERE id > %s", (NEW_IDS,)):
                    entry_shard[k] = i
            meta["inserted_rows_index"] = len(row_shard)
            meta["inserted_rows_other_shard"] = sum(1 for k, s in row_shard.items() if entry_shard.get(k) != s)
            for row, lat, ids in b.runs:
                if row["phase"] != "write" or row["target"] != "index":
                    continue
                same = sorted(v for v, k in zip(lat, ids) if entry_shard.get(k) == row_shard.get(k))
                other = sorted(v for v, k in zip(lat, ids) if entry_shard.get(k) != row_shard.get(k))
                missing = sum(1 for k in ids if k not in row_shard or k not in entry_shard)
                row["other_shard_share"] = f"{len(other) / len(ids):.3f}" if ids else ""
                row["one_shard_p50_ms"] = f"{pct(same, 50):.3f}" if same else ""
                row["one_shard_p99_ms"] = f"{pct(same, 99):.3f}" if same else ""
                row["two_shard_p50_ms"] = f"{pct(other, 50):.3f}" if other else ""
                row["two_shard_p99_ms"] = f"{pct(other, 99):.3f}" if other else ""
                if missing:
                    b.problems.append(f"index write round {row['round']} c={row['clients']}: {missing} acknowledged "
                                      f"inserts without their row or entry")

        # Every entry against every row; nothing left prepared.
        rows = []
        for p, d in b.shard_dbs("index"):
            rows += q(p, d, "SELECT email, id FROM users WHERE email IS NOT NULL")
        entries = b.entries()
        rs, es = set(rows), set(entries)
        meta["final_rows_index"] = len(rows)
        meta["final_entries"] = len(entries)
        meta["entries_missing"] = len(rs - es)
        meta["entries_orphaned"] = len(es - rs)
        if rs != es or len(entries) != len(es):
            b.problems.append(f"entries against rows: {len(rs - es)} missing, {len(es - rs)} orphaned, "
                              f"{len(entries) - len(es)} duplicated, e.g. {sorted(rs - es)[:3]} {sorted(es - rs)[:3]}")
        # The change log the writes went through (rows are deleted as they are applied).
        stats = [q(p, d, "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                         "WHERE relid = 'splitpoint.index_changes'::regclass")[0] for p, d in b.shard_dbs("index")]
        meta["index_changes_live_dead_bytes"] = " ".join(f"{a}/{b_}/{c}" for a, b_, c in stats)
        prepared = sum(q(p, "postgres", "SELECT count(*) FROM pg_prepared_xacts")[0][0] for p in b.ports)
        meta["prepared_xacts_left"] = prepared
        if prepared:
            b.problems.append(f"{prepared} prepared transactions left on the instances")
        log(f"final: {len(rows)} rows with an email, {len(entries)} entries, missing {meta['entries_missing']}, "
            f"orphaned {meta['entries_orphaned']}; prepared transactions left {prepared}")
    finally:
        for target, p in b.proxies.items():
            proc = p["proc"]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    b.problems.append(f"{target}: proxy did not stop on SIGTERM in 20 s")
            meta[f"exit_{target}"] = proc.returncode
            if proc.returncode != 0:
                b.problems.append(f"{target}: proxy exited {proc.returncode}")
            with open(os.path.join(RESULTS, "logs", f"{target}.log"), errors="replace") as f:
                bad = [line.strip() for line in f if re.search(r"\b(error|ERROR|fatal|FATAL|warn|WARN)", line)]
            meta[f"log_warnings_{target}"] = len(bad)
            if bad:
                b.problems.append(f"{target}: {len(bad)} warning/error lines in its log, first: {bad[0][:300]}")
        for i in range(len(b.ports)):
            try:
                sh("pg_stop", f"{WORK}/pg{i}")
            except subprocess.CalledProcessError:
                pass
        if env("KEEP_WORK", "0") != "1":
            shutil.rmtree(WORK, ignore_errors=True)
        if ag_was is not None and ag_was != want_ag:
            with open(autogroup, "w") as f:
                f.write(ag_was)
        meta["loadavg_end"] = loadavg()
        meta["wall_seconds"] = f"{time.monotonic() - started:.0f}"
        report(b, meta)


def report(b, meta):
    runs = [r for r, _, _ in b.runs]
    if runs:
        fields = list(runs[0])
        for r in runs:
            fields += [k for k in r if k not in fields]
        with open(os.path.join(RESULTS, "runs.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in runs:
                w.writerow(r)
    with open(os.path.join(RESULTS, "meta.env"), "w") as f:
        for k, v in meta.items():
            f.write(f"{k}={v!r}\n" if isinstance(v, str) and " " in v else f"{k}={v}\n")
    out = [f"# Global indexes bench, {meta['date']}", "",
           f"nproc {meta['nproc']}, kernel {meta['kernel']}, loadavg {meta['loadavg_start']} at start, "
           f"{meta.get('loadavg_end', '?')} at end, sched_autogroup {meta.get('sched_autogroup', '?')}; "
           f"{meta['rows']} rows, {meta['partitions']} partitions over 4 shards (2 databases per instance and "
           f"target); binary {meta['sp_bin']}; {meta['rounds']} rounds x {meta['duration']} s; wall "
           f"{meta.get('wall_seconds', '?')} s", "",
           f"Index ready {meta.get('index_ready_after_s', '?')} s after the proxy started; entries per shard "
           f"{meta.get('entries_per_shard', '?')}; rows per shard {meta.get('rows_per_shard_index', '?')}", ""]
    if "check_index" in meta:
        out += [f"Built under writes: {meta['backfill_writes']} statements by {BUILD_WRITERS} clients while it built "
                f"({meta['backfill_write_tps']} a second, p99 {meta['backfill_write_p99_ms']} ms); then CHECK INDEX "
                f"in {meta['check_index_s']} s: {meta['check_index']} (index | rows | entries | missing | orphans | "
                f"repaired | examples)", ""]

    def cells(kind):
        keys = []
        for r in runs:
            k = (r["mode"], r["clients"])
            if r["phase"] == kind and k not in keys:
                keys.append(k)
        return keys

    def med(rs, field):
        vals = [float(r[field]) for r in rs if r.get(field) not in ("", None)]
        return statistics.median(vals) if vals else None

    for kind, title in (("read", "Reads by email"), ("write", "Single-row INSERTs")):
        rows = []
        for mode, c in cells(kind):
            meds = {}
            for target in TARGETS:
                rs = [r for r in runs if r["phase"] == kind and r["mode"] == mode and r["clients"] == c
                      and r["target"] == target]
                if not rs:
                    continue
                tps = [float(r["tps"]) for r in rs]
                m, lo, hi, sp = spread(tps)
                meds[target] = (m, med(rs, "p50_ms"), med(rs, "p99_ms"))
                loads = [float(r["load_start"].split()[0]) for r in rs] + [float(r["load_end"].split()[0]) for r in rs]
                row = [mode, c, target, f0(m), f"{f0(lo)}–{f0(hi)} ({sp:.0f}%)", f"{med(rs, 'p50_ms'):.2f}",
                       f"{med(rs, 'p99_ms'):.2f}"]
                if kind == "read":
                    row += [f"{med(rs, 'route_single'):.0f} / {med(rs, 'route_multi'):.0f}"]
                else:
                    share = med(rs, "two_phase_share")
                    row += [f"{share * 100:.1f}%" if share is not None else ""]
                row += [f"{med(rs, 'proxy_us'):.0f}", f"{med(rs, 'pg_us'):.0f}", f"{med(rs, 'client_us'):.0f}",
                        f"{med(rs, 'other_cpus'):.2f}", f"{min(loads):.1f}–{max(loads):.1f}",
                        sum(int(r["errors"]) for r in rs), sum(int(r["wrong"]) for r in rs)]
                rows.append(row)
            if len(meds) == 2 and meds["scatter"][0]:
                i, s = meds["index"], meds["scatter"]
                rows.append([mode, c, "**index / scatter**", f"**{i[0] / s[0]:.2f}x**", "",
                             f"{i[1] / s[1]:.2f}x", f"{i[2] / s[2]:.2f}x", "", "", "", "", "", "", "", ""])
        header = ["mode", "clients", "target", "tps (median)", "min–max (spread)", "p50 ms", "p99 ms",
                  "single / multi routes per run" if kind == "read" else "two-phase share (metric)",
                  "proxy µs/stmt", "PostgreSQL µs/stmt", "client µs/stmt", "other work CPUs", "loadavg 1 min",
                  "errors", "wrong"]
        if rows:
            out += [f"## {title}", "", table(header, rows), ""]
    wr = [r for r in runs if r["phase"] == "write" and r["target"] == "index" and r.get("other_shard_share")]
    if wr:
        rows = []
        for c in sorted({r["clients"] for r in wr}):
            rs = [r for r in wr if r["clients"] == c]
            rows.append([c, f"{med(rs, 'two_phase_share') * 100:.1f}%", f"{med(rs, 'other_shard_share') * 100:.1f}%",
                         f"{med(rs, 'one_shard_p50_ms'):.2f}", f"{med(rs, 'one_shard_p99_ms'):.2f}",
                         f"{med(rs, 'two_shard_p50_ms'):.2f}", f"{med(rs, 'two_shard_p99_ms'):.2f}"])
        out += ["## Index writes: one shard against two-phase commit (medians of rounds)", "",
                table(["clients", "two-phase commits / inserts (metric)", "entry on another shard (asked of the shards)",
                       "one-shard p50 ms", "one-shard p99 ms", "two-shard p50 ms", "two-shard p99 ms"], rows), "",
                f"All inserted rows (index target): {meta.get('inserted_rows_index')}, entry on another shard than "
                f"the row: {meta.get('inserted_rows_other_shard')}", ""]
    out += [f"Final check: {meta.get('final_rows_index')} rows with an email, {meta.get('final_entries')} entries, "
            f"missing {meta.get('entries_missing')}, orphaned {meta.get('entries_orphaned')}; prepared transactions "
            f"left {meta.get('prepared_xacts_left')}; proxies' exit status {meta.get('exit_index')} / "
            f"{meta.get('exit_scatter')}; splitpoint.index_changes per shard (live/dead rows/bytes): "
            f"{meta.get('index_changes_live_dead_bytes')}", "", "## Problems", ""]
    out += [f"- {p}" for p in b.problems] or ["none"]
    text = "\n".join(out) + "\n"
    with open(os.path.join(RESULTS, "summary.md"), "w") as f:
        f.write(text)
    if b.problems:
        with open(os.path.join(RESULTS, "problems.txt"), "w") as f:
            f.write("\n".join(b.problems) + "\n")
    print()
    print(text)


if __name__ == "__main__":
    main()
