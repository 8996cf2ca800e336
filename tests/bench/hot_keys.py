#!/usr/bin/python3
"""Hot keys handled, not only shown (issue #48, SPEC §13), by hand: docs/performance.md,
"Hot keys: automatic splits and salting".

    tests/bench/hot_keys.py                 # full run, about 6 minutes
    QUICK=1 tests/bench/hot_keys.py         # smoke run, about 4 minutes (mostly starting the instances)
    PHASES=salt HOT_ROUNDS=5 tests/bench/hot_keys.py

Needs root, as tests/bench/scale_out.py, whose cgroups, instances and proxy start it uses:
each shard's PostgreSQL (pg0..pg3) runs in a cgroup of its own with a CPU quota of QUOTA
CPUs (default 0.2), so that the shards, not the proxy, are the bottleneck; `cat`, not
quota'd, holds the catalogs. Without a quota the run stops (exit 3) unless
ALLOW_NO_QUOTA=1, and then every line says NO QUOTA.

Phase `zipf`: a range distribution `by_k` of table kv (k int primary key), keys 1..KEYS
in four equal ranges, one per shard; ZIPF_CLIENTS (32) pgbench clients run
`UPDATE kv SET v = v + 1 WHERE k = random_zipfian(1, KEYS, ZIPF_S)`: the low keys, all in
s0's range, take most of the load. Twice, each with a catalog and data of its own: run A
with `moves.auto_split: off` throughout, run B with `off` for BASELINE (20) s, then `on`
(the config rewritten and SIGHUP; `auto_split_window` WINDOW (5s), `auto_split_interval`
INTERVAL (10s)) for AFTER (80) s. One sample a second: tps, p99 (pgbench's
per-transaction log), client errors, each shard's CPU (its cgroup's usage), the moves'
states (`SHOW MOVES ALL`) and the distribution's partitions (`SHOW PARTITIONS`: a split
adds one). Before = seconds 3..BASELINE, after = the last TAIL (20) s; the hottest
shard's share = its CPU over all shards' CPU in that window.

Phase `salt`: a hash distribution `by_product` of table sales (product_id, order_id)
over HOT_PARTITIONS (16) partitions on the four shards with `salt: { column: order_id,
buckets: B }`, B = 1 and B = 8 (databases of their own); SALT_ROWS rows of product 7
loaded through the proxy, then SALT_CLIENTS (32) clients each run an UPDATE of a random
one of them and an INSERT of a new one (product 7, an order_id of its own): one key
only. HOT_DURATION (10) s per run, HOT_ROUNDS (3) rounds, the order alternating. tps,
p99, each shard's CPU, the ratio B=8 / B=1 of the median tps.

Results: RESULTS (default tests/bench/results/hot-keys-YYYYMMDD-HHMMSS/): zipf-A.csv,
zipf-B.csv (timelines), events.csv, salt.csv, summary.txt, logs; the plot PLOT (default
docs/img/hot_keys.png; matplotlib).
"""

import csv
import glob
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
os.environ.setdefault("BENCH_WORK", "/tmp/splitpoint-bench-hot-keys")
os.environ.setdefault("SP_BIN", "/work/bench-bin/splitpoint-25cb7a5")  # main at 25cb7a5: salt, auto_split
os.environ.setdefault("RESULTS", os.path.join(ROOT, "tests", "bench", "results",
                                              time.strftime("hot-keys-%Y%m%d-%H%M%S")))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402
import psycopg2  # noqa: E402
import scale_out as so  # noqa: E402  (reads BENCH_WORK and RESULTS at import)

env = so.env
QUICK = so.QUICK
RESULTS = so.RESULTS
PHASES = env("PHASES", "zipf salt").split()
KEYS = int(env("KEYS", "40000"))
ZIPF_S = float(env("ZIPF_S", "1.05"))
ZIPF_CLIENTS = int(env("ZIPF_CLIENTS", "32"))
BASELINE = int(env("BASELINE", "8" if QUICK else "20"))
AFTER = int(env("AFTER", "20" if QUICK else "80"))
TAIL = int(env("TAIL", "6" if QUICK else "20"))
WINDOW = env("WINDOW", "5s")
INTERVAL = env("INTERVAL", "10s")
SALT_PARTITIONS = int(env("HOT_PARTITIONS", "16"))
SALT_ROWS = int(env("SALT_ROWS", "20000"))
SALT_CLIENTS = int(env("SALT_CLIENTS", "32"))
BUCKETS = [int(x) for x in env("BUCKETS", "1 8").split()]
HOT_DURATION = int(env("HOT_DURATION", "4" if QUICK else "10"))
HOT_ROUNDS = int(env("HOT_ROUNDS", "1" if QUICK else "3"))
PLOT = env("PLOT", os.path.join(ROOT, "docs", "img", "hot_keys.png"))
SHARDS = ["pg0", "pg1", "pg2", "pg3"]


def log(msg):
    so.log(msg)


def pgbench(script_name, script, clients, seconds, port, db, tag, extra=()):
    """Starts pgbench on SCRIPT through the proxy at PORT, one log line per transaction
    under RESULTS/TAG/; (the Popen, the log prefix)."""
    d = os.path.join(RESULTS, tag)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, script_name)
    with open(path, "w") as f:
        f.write(script)
    prefix = os.path.join(d, "pgbench_log")
    cmd = [so.PGBENCH, "-n", "-f", path, "-M", so.MODE, "-c", str(clients), "-j", "2", "-T", str(seconds),
           "-l", f"--log-prefix={prefix}", "-h", "127.0.0.1", "-p", str(port), "-U", "app", *extra, db]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PGPASSWORD="secret"))
    so.CHILDREN.append(p)
    return p, prefix


def transactions(prefix):
    """(end time, latency us or None when failed) of every transaction in pgbench's logs."""
    out = []
    for path in glob.glob(prefix + ".*"):
        with open(path) as f:
            for line in f:
                fl = line.split()
                if len(fl) < 6 or not fl[4].isdigit():
                    continue
                end = int(fl[4]) + int(fl[5]) / 1e6
                out.append((end, int(fl[2]) if fl[2].isdigit() else None))
    return out


def client_errors(text):
    return [line.strip() for line in text.splitlines()
            if re.search(r"aborted|error|failed to|ERROR", line) and not line.startswith("progress:")]


def shard_cpu(cg):
    return {s: cg.stats(s)["usage"] for s in SHARDS} if cg.ok() else {}


def hottest_share(cores):
    """The largest shard's part of all shards' CPU, and which shard: (share, name)."""
    total = sum(cores.values())
    if not total:
        return None, ""
    name = max(cores, key=cores.get)
    return cores[name] / total, name


# ---------------------------------------------------------------- zipf phase

def zipf_config(port, mport, shards, catalog, auto_split):
    r = KEYS // 4
    lines = so.config_head(port, mport, shards, env("SP_LOG_LEVEL", "info"))
    lines += ["distributions:", "  - name: by_k", "    method: range", "    tables: { kv: k }", "    ranges:"]
    for i, (name, _, _) in enumerate(shards):
        upto = f"upto: {(i + 1) * r + 1}, " if i < len(shards) - 1 else ""
        lines.append(f"      - {{ {upto}shard: {name} }}")
    lines += [f"catalog: '{catalog}'",
              f"moves: {{ max_hold: 5s, poll: 200ms, lease: 3s, auto_split: {auto_split}, auto_merge: off, "
              f"auto_split_window: {WINDOW}, auto_split_interval: {INTERVAL} }}"]
    return "\n".join(lines) + "\n"


def zipf_load(insts, cat, db):
    r = KEYS // 4
    for i, inst in enumerate(insts):
        so.q(inst.port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        so.q(inst.port, "postgres", f"CREATE DATABASE {db}")
        so.q(inst.port, db, "CREATE TABLE kv (k int PRIMARY KEY, v int NOT NULL DEFAULT 0, pad text)")
        so.q(inst.port, db, f"INSERT INTO kv SELECT k, 0, repeat('x', 80) FROM generate_series({i * r + 1}, "
                            f"{KEYS if i == len(insts) - 1 else (i + 1) * r}) k")
        so.q(inst.port, db, "VACUUM ANALYZE kv")
    so.q(cat.port, "postgres", f"DROP DATABASE IF EXISTS cat_{db} WITH (FORCE)")
    so.q(cat.port, "postgres", f"CREATE DATABASE cat_{db}")
    return f"host=127.0.0.1 port={cat.port} dbname=cat_{db} user=postgres password=postgres"


def admin_state(port):
    """Moves' states, the active moves and by_k's partitions (number, lower, upper, shard)."""
    _, mv = so.admin_rows(port, "SHOW MOVES ALL")
    states, active = {}, []
    for r in mv:
        states[r[5]] = states.get(r[5], 0) + 1
        if r[5] not in ("done", "failed", "cancelled"):
            active.append(f"{r[1]}:{r[2]} {r[3]}->{r[4]} {r[5]}")
    cols, parts = so.admin_rows(port, "SHOW PARTITIONS")
    ix = {c: i for i, c in enumerate(cols)}
    mine = [(r[ix["partition"]], r[ix["lower"]], r[ix["upper"]], r[ix["shard"]]) for r in parts
            if r[ix["distribution"]] == "by_k"]
    return " ".join(f"{k}={v}" for k, v in sorted(states.items())), "; ".join(active), sorted(mine, key=str), mv


class Sampler(threading.Thread):
    """One sample a second of the shards' CPU, the rows each shard updated (kv's n_tup_upd)
    and the admin console's moves and partitions."""

    def __init__(self, cg, port, t0, events, insts, db):
        super().__init__(daemon=True)
        self.cg, self.port, self.t0, self.events = cg, port, t0, events
        self.conns = {inst.name: so.connect(inst.port, db) for inst in insts}
        self.samples, self.stop = [], threading.Event()

    def updated(self):
        out = {}
        for name, c in self.conns.items():
            cur = c.cursor()
            cur.execute("SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables WHERE relname = 'kv'")
            out[name] = int(cur.fetchone()[0])
        return out

    def run(self):
        prev, tprev, parts_prev, uprev = shard_cpu(self.cg), time.time(), None, self.updated()
        while not self.stop.is_set():
            time.sleep(max(0.0, 1.0 - (time.time() - tprev)))
            now, cur, upd = time.time(), shard_cpu(self.cg), self.updated()
            s = {"t": round(now - self.t0, 2), "loadavg": so.loadavg()}
            for name in SHARDS:
                s[f"{name}_rows"] = upd[name] - uprev[name]
                if cur and cur[name] is not None:
                    s[f"{name}_cores"] = round((cur[name] - prev[name]) / (now - tprev), 3)
            try:
                s["moves"], s["active_move"], parts, _ = admin_state(self.port)
                s["partitions"] = len(parts)
                if parts_prev is not None and parts != parts_prev:
                    self.events.append((round(now - self.t0, 2), "partitions: " + " ".join(
                        f"{p}[{lo},{hi})@{sh}" for p, lo, hi, sh in parts)))
                parts_prev = parts
            except psycopg2.Error as e:
                s["moves"], s["active_move"] = f"admin error: {str(e).strip()[:80]}", ""
            self.samples.append(s)
            prev, tprev, uprev = cur, now, upd
        for c in self.conns.values():
            c.close()


def zipf_run(cg, insts, cat, label):
    """Run A (label 'A': auto_split off) or B ('B': off, then on after BASELINE s)."""
    db = f"z{label.lower()}"
    catalog = zipf_load(insts, cat, db)
    shards = [(f"s{i}", inst, db) for i, inst in enumerate(insts)]
    ports = {}

    def config(auto_split):
        return lambda p, m: ports.update(p=p, m=m) or zipf_config(p, m, shards, catalog, auto_split)
    proxy, port = so.launch_proxy(f"zipf-{label}", config("off"))
    total = BASELINE + AFTER
    script = f"\\set k random_zipfian(1, {KEYS}, {ZIPF_S})\nUPDATE kv SET v = v + 1 WHERE k = :k;\n"
    events = []
    warm, _ = pgbench("zipf.sql", script, ZIPF_CLIENTS, 3, port, db, f"zipf-{label}-warmup")
    warm.communicate(timeout=60)  # the backends opened, not recorded
    t0 = time.time()
    pgb, prefix = pgbench("zipf.sql", script, ZIPF_CLIENTS, total, port, db, f"zipf-{label}")
    sampler = Sampler(cg, port, t0, events, insts, db)
    sampler.start()
    la0 = so.loadavg()
    time.sleep(BASELINE)
    if label == "B":
        with open(os.path.join(so.WORK, f"zipf-{label}.yaml"), "w") as f:
            f.write(config("on")(ports["p"], ports["m"]))
        proxy.send_signal(signal.SIGHUP)
        events.append((round(time.time() - t0, 2), f"auto_split: on (window {WINDOW}, interval {INTERVAL})"))
        log(f"zipf {label}: auto_split on at t={time.time() - t0:.1f}s")
    out, _ = pgb.communicate(timeout=total + 60)
    t_end = time.time() - t0
    sampler.stop.set()
    sampler.join(5)
    _, _, parts, mv = admin_state(port)
    proxy.terminate()
    proxy.wait(20)
    with open(os.path.join(RESULTS, f"zipf-{label}", "pgbench_output.txt"), "w") as f:
        f.write(out)
    errors = client_errors(out)
    with open(os.path.join(RESULTS, "logs", f"zipf-{label}.log")) as f:
        auto = [line.strip() for line in f if "auto split" in line or "auto merge" in line]
    res = zipf_summary(label, t0, t_end, transactions(prefix), sampler.samples, events, errors,
                        parts, mv, la0)
    res["auto_log"] = auto
    return res


def per_second(txs, t0, last):
    """Per second: transactions, p99 and mean latency (ms), failed transactions."""
    per, failed = {}, {}
    for end, lat in txs:
        sec = int(end - t0)
        if lat is None:
            failed[sec] = failed.get(sec, 0) + 1
        else:
            per.setdefault(sec, []).append(lat)
    rows = []
    for sec in range(last):
        lat = sorted(per.get(sec, []))
        rows.append({"t": sec, "tps": len(lat),
                     "p99_ms": round(benchlib.percentile(lat, 99) / 1000, 2) if lat else "",
                     "mean_ms": round(sum(lat) / len(lat) / 1000, 2) if lat else "",
                     "errors": failed.get(sec, 0)})
    return rows


def window(timeline, lo, hi):
    """Median tps and p99 of seconds [lo, hi), the shards' mean CPU and the hottest shard's share."""
    rows = [r for r in timeline if lo <= r["t"] < hi]
    cores = {s: statistics.mean([r[f"{s}_cores"] for r in rows if r.get(f"{s}_cores", "") != ""] or [0])
             for s in SHARDS}
    share, hot = hottest_share(cores)
    upd = {s: sum(r[f"{s}_rows"] for r in rows if r.get(f"{s}_rows", "") != "") for s in SHARDS}
    rshare, rhot = hottest_share(upd)
    p99 = [r["p99_ms"] for r in rows if r["p99_ms"] != ""]
    return {"tps": statistics.median([r["tps"] for r in rows]) if rows else None,
            "tps_min": min([r["tps"] for r in rows] or [0]), "tps_max": max([r["tps"] for r in rows] or [0]),
            "p99": round(statistics.median(p99), 2) if p99 else None, "share": share, "hot": hot,
            "cores": {s: round(v, 3) for s, v in cores.items()}, "rows_share": rshare, "rows_hot": rhot,
            "rows": upd}


def zipf_summary(label, t0, t_end, txs, samples, events, errors, parts, mv, la0):
    last = int(t_end) - 1
    timeline = per_second(txs, t0, last)
    by_sample = {int(s["t"]) - 1: s for s in samples}  # a sample at t covers [t-1, t)
    for r in timeline:
        s = by_sample.get(r["t"], {})
        for k in [f"{n}_cores" for n in SHARDS] + [f"{n}_rows" for n in SHARDS] + ["moves", "active_move", "partitions", "loadavg"]:
            r[k] = s.get(k, "")
    keys = ["t", "tps", "p99_ms", "mean_ms", "errors"] + [f"{n}_cores" for n in SHARDS] + \
        [f"{n}_rows" for n in SHARDS] + \
        ["partitions", "moves", "active_move", "loadavg"]
    with open(os.path.join(RESULTS, f"zipf-{label}.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(timeline)
    res = {"label": label, "timeline": timeline, "events": events,
           "before": window(timeline, 3, BASELINE), "after": window(timeline, last - TAIL, last),
           "errors": len(errors) + sum(r["errors"] for r in timeline), "error_lines": errors[:10],
           "partitions": [list(map(str, p)) for p in parts],
           "moves": [f"{r[1]}:{r[2]} {r[3]}->{r[4]} {r[5]} hold {r[10]}ms" for r in mv],
           "loadavg_start": la0, "loadavg_end": so.loadavg(), "seconds": round(t_end, 1)}
    for t, what in events:
        log(f"zipf {label} t={t:6.1f}s {what}")
    return res


# ---------------------------------------------------------------- salt phase

def salt_config(port, mport, shards, buckets):
    lines = so.config_head(port, mport, shards)
    lines += ["distributions:", "  - name: by_product", "    method: hash", f"    partitions: {SALT_PARTITIONS}",
              "    tables: { sales: product_id }", f"    salt: {{ column: order_id, buckets: {buckets} }}"]
    return "\n".join(lines) + "\n"


def salt_setup(insts, buckets):
    db = f"salt{buckets}"
    for inst in insts:
        so.q(inst.port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        so.q(inst.port, "postgres", f"CREATE DATABASE {db}")
        so.q(inst.port, db, "CREATE TABLE sales (product_id int NOT NULL, order_id int NOT NULL, "
                            "qty int NOT NULL DEFAULT 0, PRIMARY KEY (product_id, order_id))")
    shards = [(f"s{i}", inst, db) for i, inst in enumerate(insts)]
    proxy, port = so.launch_proxy(f"salt{buckets}", lambda p, m: salt_config(p, m, shards, buckets))
    c = psycopg2.connect(host="127.0.0.1", port=port, dbname=db, user="app", password="secret")
    c.autocommit = True
    cur = c.cursor()
    for lo in range(1, SALT_ROWS + 1, 500):
        cur.execute("INSERT INTO sales (product_id, order_id, qty) VALUES " +
                    ", ".join(f"(7, {o}, 0)" for o in range(lo, min(lo + 500, SALT_ROWS + 1))))
    c.close()
    rows = {inst.name: so.q(inst.port, db, "SELECT count(*) FROM sales")[0][0] for inst in insts}
    for inst in insts:
        so.q(inst.port, db, "VACUUM ANALYZE sales")
    log(f"salt B={buckets}: {SALT_ROWS} rows of product 7 loaded, per shard {rows}")
    return proxy, port, db, rows


SALT_SCRIPT = """\\set o random(1, {rows})
\\set n :n + 1
\set new {rows} + :base + :client_id * 1000000 + :n
UPDATE sales SET qty = qty + 1 WHERE product_id = 7 AND order_id = :o;
INSERT INTO sales (product_id, order_id, qty) VALUES (7, :new, 1);
"""


RUN_IDS = itertools.count()  # each run's new order_ids of their own: base + client * 10^6 + n


def salt_round(cg, buckets, port, db, seconds, tag):
    c0, la0, t0 = shard_cpu(cg), so.loadavg(), time.time()
    pgb, prefix = pgbench("salt.sql", SALT_SCRIPT.format(rows=SALT_ROWS), SALT_CLIENTS, seconds, port, db,
                          f"salt-{tag}", ("-D", "n=0", "-D", f"base={next(RUN_IDS) * 50000000}"))
    out, _ = pgb.communicate(timeout=seconds + 60)
    wall, c1 = time.time() - t0, shard_cpu(cg)
    with open(os.path.join(RESULTS, f"salt-{tag}", "pgbench_output.txt"), "w") as f:
        f.write(out)
    m = so.PGB_TPS.search(out)
    lats = sorted(lat for _, lat in transactions(prefix) if lat is not None)
    failed = sum(1 for _, lat in transactions(prefix) if lat is None)
    cores = {s: (c1[s] - c0[s]) / wall for s in SHARDS} if c1 else {}
    share, hot = hottest_share(cores)
    return {"buckets": buckets, "tag": tag, "tps": float(m.group(1)) if m else None,
            "p99_ms": round(benchlib.percentile(lats, 99) / 1000, 2) if lats else None,
            "errors": failed + len(client_errors(out)), "hot_share": round(share, 3) if share else "",
            "hot_shard": hot, "shard_cores": " ".join(f"{cores[s]:.3f}" for s in SHARDS) if cores else "",
            "loadavg_start": la0, "loadavg_end": so.loadavg()}


def salt_phase(cg, insts):
    setups = {b: salt_setup(insts, b) for b in BUCKETS}
    rows = []
    for b in BUCKETS:  # warm-up: the backends opened, not recorded
        salt_round(cg, b, setups[b][1], setups[b][2], 2, f"warmup-B{b}")
    for rnd in range(HOT_ROUNDS):
        order = BUCKETS if rnd % 2 == 0 else BUCKETS[::-1]
        for b in order:
            r = salt_round(cg, b, setups[b][1], setups[b][2], HOT_DURATION, f"r{rnd + 1}-B{b}")
            r["round"] = rnd + 1
            rows.append(r)
            log(f"salt round {rnd + 1} B={b}: tps {r['tps'] or 0:.0f}, p99 {r['p99_ms']} ms, hottest shard "
                f"{r['hot_shard']} {r['hot_share']}, shard cores {r['shard_cores']}, errors {r['errors']}, "
                f"load {r['loadavg_end']}")
    for proxy, _, _, _ in setups.values():
        proxy.terminate()
        proxy.wait(20)
    keys = ["round", "buckets", "tps", "p99_ms", "errors", "hot_shard", "hot_share", "shard_cores",
            "loadavg_start", "loadavg_end"]
    with open(os.path.join(RESULTS, "salt.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    return rows, {b: s[3] for b, s in setups.items()}


# ---------------------------------------------------------------- report

def plot(runs):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (apt-get install python3-matplotlib): no plot")
        return
    fig, axes = plt.subplots(3, len(runs), figsize=(6.5 * len(runs), 8.5), sharex="col", squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1.4, 1.6]})
    ymax = max(r["tps"] for run in runs for r in run["timeline"]) * 1.1 if runs else 1
    for col, run in enumerate(runs):
        ax1, ax2, ax3 = axes[:, col]
        tl = run["timeline"]
        ts = [r["t"] for r in tl]
        ax1.plot(ts, [r["tps"] for r in tl], color="tab:blue", lw=1.2, label="tps (UPDATE of a Zipf key)")
        ax1.set_ylim(0, ymax)
        for t in [r["t"] for r in tl if r["active_move"]]:
            ax1.axvspan(t, t + 1, color="tab:orange", alpha=0.15, lw=0)
        for t, what in run["events"]:
            color = "tab:green" if what.startswith("partitions") else "tab:purple"
            for ax in (ax1, ax2, ax3):
                ax.axvline(t, color=color, lw=0.8, ls="--")
        errs = [(r["t"], r["tps"]) for r in tl if r["errors"]]
        if errs:
            ax1.scatter(*zip(*errs), color="red", marker="x", label="client errors", zorder=5)
        ax1.plot([], [], color="tab:green", ls="--", label="partitions changed (split)")
        ax1.plot([], [], color="tab:purple", ls="--", label="auto_split turned on")
        ax1.plot([], [], color="tab:orange", alpha=0.3, lw=6, label="a move running")
        b, a = run["before"], run["after"]
        ax1.set_title(f"run {run['label']}: auto_split {'off' if run['label'] == 'A' else 'off, then on'}{so.NOQ}\n"
                      f"tps {b['tps']:.0f} -> {a['tps']:.0f}, hottest shard {b['share'] or 0:.0%} -> "
                      f"{a['share'] or 0:.0%}, {run['errors']} client errors", fontsize=9)
        ax1.set_ylabel("transactions/s")
        ax1.legend(loc="upper left", fontsize=7)
        ax1.grid(alpha=0.3)
        ax2.plot(ts, [r["p99_ms"] if r["p99_ms"] != "" else None for r in tl], color="tab:red", lw=1)
        ax2.set_ylabel("p99 (ms)")
        ax2.grid(alpha=0.3)
        for s in SHARDS:
            ax3.plot(ts, [r[f"{s}_cores"] if r[f"{s}_cores"] != "" else None for r in tl], lw=0.9, label=s)
        ax3.axhline(so.QUOTA, color="grey", lw=0.6, ls=":")
        ax3.set_ylabel("shard CPUs")
        ax3.set_xlabel("seconds")
        ax3.legend(loc="upper left", fontsize=7, ncol=4)
        ax3.grid(alpha=0.3)
    fig.suptitle(f"splitpoint, {ZIPF_CLIENTS} clients updating Zipf(s={ZIPF_S}) keys of {KEYS}, range over 4 shards "
                 f"under {so.QUOTA} CPU each{so.NOQ}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=80)
    log(f"plot written to {PLOT}")


def fmt_window(w):
    return (f"tps {w['tps']:.0f} ({w['tps_min']}-{w['tps_max']}), p99 {w['p99']} ms, hottest shard "
            f"{w['hot']} {w['share'] or 0:.0%} of shard CPU, {w['rows_hot']} {w['rows_share'] or 0:.0%} of rows "
            f"updated; cores " + " ".join(f"{v:.3f}" for v in w["cores"].values()) + "; rows " +
            " ".join(str(v) for v in w["rows"].values()))


def report(meta, runs, salt_rows, salt_load):
    lines = [f"hot_keys{so.NOQ}: {json.dumps(meta)}"]
    if runs:
        lines += ["", f"== zipf: {ZIPF_CLIENTS} clients, UPDATE kv WHERE k = random_zipfian(1, {KEYS}, {ZIPF_S}); "
                  f"range by_k over 4 shards, quota {meta['quota']} CPU each; before = s 3-{BASELINE}, "
                  f"after = the last {TAIL} s{so.NOQ} =="]
        rows = []
        for run in runs:
            b, a = run["before"], run["after"]
            rows.append([run["label"], "off" if run["label"] == "A" else f"on after {BASELINE}s",
                         f"{b['tps']:.0f}", f"{a['tps']:.0f}", f"{a['tps'] / b['tps']:.2f}x" if b["tps"] else "?",
                         f"{b['p99']} / {a['p99']}", f"{b['share'] or 0:.2f} / {a['share'] or 0:.2f}",
                         f"{b['rows_share'] or 0:.2f} / {a['rows_share'] or 0:.2f}",
                         len(run["partitions"]), len(run["moves"]), run["errors"]])
        lines.append(so.text_table(["run", "auto_split", "tps before", "tps after", "after/before", "p99 ms b/a",
                                    "hottest CPU share b/a", "hottest rows share b/a", "partitions", "moves", "errors"], rows))
        for run in runs:
            lines += [f"run {run['label']} before: {fmt_window(run['before'])}",
                      f"run {run['label']} after:  {fmt_window(run['after'])}",
                      f"run {run['label']} moves: " + "; ".join(run["moves"]),
                      f"run {run['label']} partitions at the end: " + " ".join(
                          f"{p}[{lo},{hi})@{sh}" for p, lo, hi, sh in run["partitions"]),
                      f"run {run['label']} loadavg {run['loadavg_start']} -> {run['loadavg_end']}"]
            lines += [f"  event t={t:.1f}s {w}" for t, w in run["events"]]
            lines += [f"  client error: {e}" for e in run["error_lines"]]
            lines += [f"  proxy log: {e}" for e in run["auto_log"]]
    if salt_rows:
        lines += ["", f"== salt: {SALT_CLIENTS} clients, UPDATE + INSERT of product 7 only, hash by_product "
                  f"{SALT_PARTITIONS} partitions over 4 shards, {HOT_DURATION} s x {HOT_ROUNDS} rounds{so.NOQ} =="]
        med = {}
        rows = []
        for b in BUCKETS:
            rs = [r for r in salt_rows if r["buckets"] == b]
            tps = [r["tps"] for r in rs if r["tps"]]
            med[b] = statistics.median(tps) if tps else None
            p99 = [r["p99_ms"] for r in rs if r["p99_ms"]]
            share = [r["hot_share"] for r in rs if r["hot_share"] != ""]
            rows.append([b, len(rs), f"{med[b]:.0f}" if med[b] else "", f"{min(tps):.0f}-{max(tps):.0f}" if tps else "",
                         f"{(max(tps) - min(tps)) / med[b] * 100:.0f}" if med[b] else "",
                         statistics.median(p99) if p99 else "", f"{statistics.median(share):.2f}" if share else "",
                         " ".join(f"{v}" for v in salt_load[b].values()), sum(r["errors"] for r in rs)])
        lines.append(so.text_table(["B", "rounds", "tps median", "tps min-max", "spread %", "p99 ms",
                                    "hottest shard share", "loaded rows per shard", "errors"], rows))
        if med.get(1) and med.get(8):
            lines.append(f"tps B=8 / B=1 = {med[8] / med[1]:.2f}")
    lines.append(f"\nloadavg at start {meta['loadavg_start']}, at end {so.loadavg()}; results in {RESULTS}")
    so.print_summary(lines)
    with open(os.path.join(RESULTS, "events.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["run", "t", "event"])
        wr.writerows([run["label"], t, w] for run in runs for t, w in run["events"])


# ---------------------------------------------------------------- main

def start_instances(cg, stopping):
    insts = [so.Instance(s) for s in SHARDS]
    for inst in insts:
        inst.start()
        stopping.append(inst)
    cat = so.Instance("cat")
    cat.start()
    stopping.append(cat)
    if cg.ok():
        for inst in insts:
            pids = cg.add(inst.name, os.path.join(inst.dir, "data"))
            log(f"cgroup {inst.name}: {len(pids)} processes moved (postmaster {pids[0]}), quota "
                f"{int(so.QUOTA * so.PERIOD_US)}/{so.PERIOD_US} us")
    return insts, cat


def main():
    if not os.access(so.SP_BIN, os.X_OK):
        print(f"hot_keys: SP_BIN={so.SP_BIN} is not executable", file=sys.stderr)
        return 2
    cg = so.quota_cgroups("hot_keys")
    if cg is None:
        return 3

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    os.makedirs(so.WORK, exist_ok=True)
    os.makedirs(os.path.join(RESULTS, "logs"), exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loadavg_start": so.loadavg(), "nproc": os.cpu_count(),
            "sp_bin": so.SP_BIN, "quota": so.QUOTA if cg.ok() else "NO QUOTA",
            "cgroup": f"v{cg.version}" if cg.ok() else cg.why, "keys": KEYS, "zipf_s": ZIPF_S,
            "zipf_clients": ZIPF_CLIENTS, "baseline": BASELINE, "after": AFTER, "window": WINDOW,
            "interval": INTERVAL, "salt_clients": SALT_CLIENTS, "salt_partitions": SALT_PARTITIONS,
            "hot_duration": HOT_DURATION, "hot_rounds": HOT_ROUNDS, "pool_size": so.POOL_SIZE, "phases": PHASES}
    stopping = []
    try:
        log(f"hot_keys: results in {RESULTS}; quota {meta['quota']} CPU per shard ({meta['cgroup']}); "
            f"load {so.loadavg()}")
        insts, cat = start_instances(cg, stopping)
        runs = [zipf_run(cg, insts, cat, label) for label in ("A", "B")] if "zipf" in PHASES else []
        if runs:
            plot(runs)
            with open(os.path.join(RESULTS, "zipf.json"), "w") as f:
                json.dump([{k: v for k, v in r.items() if k != "timeline"} for r in runs], f, indent=1, default=str)
        salt_rows, salt_load = salt_phase(cg, insts) if "salt" in PHASES else ([], {})
        report(meta, runs, salt_rows, salt_load)
        return 0
    finally:
        so.stop_all(stopping, cg)

if __name__ == "__main__":
    sys.exit(main())
