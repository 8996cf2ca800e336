#!/usr/bin/python3
"""Helpers for tests/bench/run (run with /usr/bin/python3: it needs psycopg2).

  benchlib.py latency PREFIX              count, mean, p50, p99, max (ms) from pgbench
                                          --log files PREFIX.* (one line per transaction)
  benchlib.py rss PID                     VmRSS and VmHWM (kB) of PID
  benchlib.py sample-rss PID STOPFILE OUT sample VmRSS every 20 ms until STOPFILE exists
                                          or PID exits; write the largest value (kB) to OUT
  benchlib.py idle --port P --pid PID --connections N --target NAME --csv FILE
                                          open N idle client connections (psycopg2, full
                                          startup + authentication), measure PID's RSS
                                          before and after, append one row to FILE
  benchlib.py scrape PORT INTERVAL STOPFILE OUT
                                          GET http://127.0.0.1:PORT/metrics every INTERVAL
                                          seconds until STOPFILE exists; write "scrapes
                                          mean_ms bytes errors" to OUT
  benchlib.py cpu --round N --target NAME --proxy-pid PID --pg-data DIR [--pg-data DIR]
                  --csv FILE -- PGBENCH-COMMAND...
                                          run the pgbench command and append to FILE the CPU
                                          time per transaction (us, user and system) of the
                                          proxy PID (0: none), of every process of the
                                          PostgreSQL instances in the data directories, and
                                          of pgbench itself
  benchlib.py sysbench FILE               tps, qps, mean, p95, p99, max latency (ms), ignored
                                          errors, reconnects from a `sysbench ... --histogram=on
                                          run` output (p99 from the histogram); "-" when absent
  benchlib.py report DIR                  aggregate DIR/*.csv into results.csv, summary.md
                                          and plot.dat; print the tables

Imported by the by-hand scripts beside it (soak.py, moves.py, replicas.py) for sh(),
start_proxy() and the /proc readers.
"""
import csv
import glob
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time


# ---------------------------------------------------------------- small helpers

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PG_SH = os.path.join(ROOT, "tests", "lib", "pg.sh")


def sh(work, *args):
    """Runs one function of tests/lib/pg.sh (free_port, pg_start, wait_port...) with
    TEST_TMP=work; returns its output, stripped. Raises on a non-zero exit."""
    env = dict(os.environ, TEST_TMP=work)
    return subprocess.run(["bash", PG_SH, *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def start_proxy(work, build, name, port, config):
    """Writes config to WORK/NAME.yaml, starts BUILD/splitpoint on it (its output in
    WORK/NAME.log) and waits until 127.0.0.1:PORT accepts connections; the Popen."""
    path = os.path.join(work, name + ".yaml")
    with open(path, "w") as f:
        f.write(config)
    log = open(os.path.join(work, name + ".log"), "w")
    p = subprocess.Popen([os.path.join(build, "splitpoint"), "--config", path], stdout=log, stderr=subprocess.STDOUT)
    sh(work, "wait_port", str(port), "10")
    return p


def proc_status(pid):
    """VmRSS, VmHWM of a process in kB (None when it is gone)."""
    out = {"VmRSS": None, "VmHWM": None}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out["VmRSS"], out["VmHWM"]


def options(args, repeated=()):
    """`--name value` pairs (a name in `repeated` may come again: its values make a list),
    up to a `--` whose following arguments are returned as they are."""
    opts = {name: [] for name in repeated}
    rest = []
    it = iter(args)
    for a in it:
        if a == "--":
            rest = list(it)
        elif a.startswith("--"):
            name, value = a[2:], next(it)
            if name in repeated:
                opts[name].append(value)
            else:
                opts[name] = value
    return opts, rest


def percentile(sorted_values, q):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def fmt(value, digits=2):
    if value is None or value == "":
        return ""
    return f"{float(value):.{digits}f}"


# ---------------------------------------------------------------- latency from pgbench logs

def cmd_latency(prefix):
    # pgbench --log line: client_id transaction_no time script_no time_epoch time_us [lag]
    # `time` is the transaction's latency in microseconds ("failed"/"skipped" otherwise).
    values = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    values.append(int(fields[2]))
    values.sort()
    if not values:
        print("0 - - - -")
        return
    mean = sum(values) / len(values) / 1000.0
    p50 = percentile(values, 50) / 1000.0
    p99 = percentile(values, 99) / 1000.0
    print(f"{len(values)} {mean:.3f} {p50:.3f} {p99:.3f} {values[-1] / 1000.0:.3f}")


# ---------------------------------------------------------------- RSS

def sysbench_figures(path):
    """tps, qps, mean, p95, p99, max latency (ms), ignored errors and reconnects of one
    `sysbench ... --histogram=on --percentile=95 run` output (None when not found).
    p95 is sysbench's own; p99 is the nearest-rank value of its latency histogram."""
    import re
    with open(path, errors="replace") as f:
        text = f.read()

    def grab(pattern):
        m = re.search(pattern, text, re.M)
        return float(m.group(1)) if m else None

    hist = []
    for m in re.finditer(r"^\s*([0-9.]+)\s+\|\**\s+([0-9]+)\s*$", text, re.M):
        hist.append((float(m.group(1)), int(m.group(2))))
    p99 = None
    total = sum(c for _, c in hist)
    if total:
        need, seen = math.ceil(0.99 * total), 0
        for value, count in hist:
            seen += count
            if seen >= need:
                p99 = value
                break
    return {
        "tps": grab(r"^\s*transactions:\s+\d+\s+\(([0-9.]+) per sec"),
        "qps": grab(r"^\s*queries:\s+\d+\s+\(([0-9.]+) per sec"),
        "avg": grab(r"^\s*avg:\s+([0-9.]+)"),
        "p95": grab(r"^\s*95th percentile:\s+([0-9.]+)"),
        "p99": p99,
        "max": grab(r"^\s*max:\s+([0-9.]+)"),
        "errors": grab(r"^\s*ignored errors:\s+([0-9]+)"),
        "reconnects": grab(r"^\s*reconnects:\s+([0-9]+)"),
    }


def cmd_sysbench(path):
    f = sysbench_figures(path)
    keys = ["tps", "qps", "avg", "p95", "p99", "max", "errors", "reconnects"]
    if f["tps"] is None:
        print(" ".join("-" for _ in keys))
        return
    print(" ".join("-" if f[k] is None else (f"{f[k]:.0f}" if k in ("errors", "reconnects") else f"{f[k]:.2f}")
                   for k in keys))


def cmd_rss(pid):
    rss, hwm = proc_status(pid)
    print(f"{rss or ''} {hwm or ''}")


def cmd_sample_rss(pid, stopfile, out):
    peak = 0
    while not os.path.exists(stopfile):
        rss, _ = proc_status(pid)
        if rss is None:
            break
        peak = max(peak, rss)
        time.sleep(0.02)
    with open(out, "w") as f:
        f.write(f"{peak}\n")


# ---------------------------------------------------------------- idle connections

def cmd_idle(args):
    import psycopg2  # only this command needs it

    opts, _ = options(args)
    port = int(opts["port"])
    pid = int(opts["pid"])
    n = int(opts["connections"])
    target = opts["target"]
    threads = int(opts.get("threads", "16"))
    dsn = (f"host=127.0.0.1 port={port} user={opts.get('user', 'app')} "
           f"password={opts.get('password', 'secret')} dbname={opts.get('dbname', 'app')} "
           f"connect_timeout=30 sslmode=disable")

    # A first connection that runs a query, so the baseline includes what the proxy
    # allocates once (pools, caches) and not per client.
    probe = psycopg2.connect(dsn)
    probe.autocommit = True
    with probe.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchall()
    time.sleep(1.0)
    rss_before, _ = proc_status(pid)

    conns, errors = [], []
    lock = threading.Lock()
    todo = iter(range(n))

    def worker():
        while True:
            with lock:
                if next(todo, None) is None:
                    return
            try:
                c = psycopg2.connect(dsn)
                with lock:
                    conns.append(c)
            except Exception as e:  # noqa: BLE001 - any failure is recorded
                with lock:
                    errors.append(str(e).strip().splitlines()[0] if str(e).strip() else repr(e))

    started = time.monotonic()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    open_secs = time.monotonic() - started
    time.sleep(2.0)
    rss_after, hwm = proc_status(pid)

    # Still serving with all of them open?
    alive = "yes"
    try:
        with probe.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchall()
        extra = psycopg2.connect(dsn)
        extra.close()
    except Exception as e:  # noqa: BLE001
        alive = "no: " + str(e).strip().splitlines()[0]

    for c in conns:
        c.close()
    probe.close()
    time.sleep(2.0)
    rss_closed, _ = proc_status(pid)

    opened = len(conns)
    per_conn = ""
    if opened and rss_before is not None and rss_after is not None:
        per_conn = f"{(rss_after - rss_before) / opened:.2f}"
    row = {
        "target": target, "requested": n, "opened": opened, "failed": len(errors),
        "open_seconds": f"{open_secs:.1f}",
        "rss_before_kb": rss_before or "", "rss_after_kb": rss_after or "",
        "kb_per_connection": per_conn, "rss_after_close_kb": rss_closed or "",
        "hwm_kb": hwm or "", "serving_while_full": alive,
        "first_error": errors[0] if errors else "",
    }
    path = opts["csv"]
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        if new:
            w.writeheader()
        w.writerow(row)
    if opts.get("problems") and (errors or alive != "yes"):
        with open(opts["problems"], "a") as f:
            if errors:
                f.write(f"idle connections to {target}: {len(errors)} of {n} failed, first: {errors[0]}\n")
            if alive != "yes":
                f.write(f"{target} with {opened} idle connections open: not serving ({alive})\n")
    print(f"{target}: {opened}/{n} idle connections in {open_secs:.1f}s, RSS {rss_before or '?'} -> "
          f"{rss_after or '?'} kB ({per_conn or '?'} kB per connection), {rss_closed or '?'} kB after close"
          + (f"; {len(errors)} failed, first: {errors[0]}" if errors else ""))


# ---------------------------------------------------------------- CPU per transaction

TICK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (fields[0] is the state,
    field 3 of stat), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def cpu_seconds(fields, children=False):
    """(user, system) CPU seconds from stat_fields(), plus those of the reaped children."""
    if not fields:
        return 0.0, 0.0
    # utime is field 14 of stat, stime 15, cutime 16, cstime 17.
    u, s, cu, cs = (int(x) for x in fields[11:15])
    if children:
        u, s = u + cu, s + cs
    return u / TICK, s / TICK


def instance_times(datadir):
    """CPU seconds of a PostgreSQL instance: the postmaster with its reaped children
    (backends that exited) and every live child."""
    with open(os.path.join(datadir, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    u, s = cpu_seconds(stat_fields(postmaster), children=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        if fields and len(fields) > 14 and int(fields[1]) == postmaster:  # fields[1]: the parent's pid
            cu, cs = cpu_seconds(fields)
            u, s = u + cu, s + cs
    return u, s


def cmd_cpu(args):
    opts, command = options(args, repeated=("pg-data",))
    pid = int(opts["proxy-pid"])

    def sample():
        pg = [instance_times(d) for d in opts["pg-data"]]
        return (cpu_seconds(stat_fields(pid)) if pid else (0.0, 0.0), (sum(x[0] for x in pg), sum(x[1] for x in pg)),
                resource.getrusage(resource.RUSAGE_CHILDREN))

    # System calls and context switches of the proxy, where perf can count them (root,
    # or kernel.perf_event_paranoid <= -1).
    perf_out = os.path.join(os.path.dirname(os.path.abspath(opts["csv"])), f"perf-{os.getpid()}.txt")
    perf = None
    if pid and shutil.which("perf"):
        perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", perf_out, "-e",
                                 "raw_syscalls:sys_enter,context-switches", "-p", str(pid)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2)
    before = sample()
    run = subprocess.run(command, capture_output=True, text=True)
    if perf:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    time.sleep(0.5)  # backends of closed direct connections: until the postmaster reaps them
    after = sample()
    counts = {}
    if perf and os.path.exists(perf_out):
        with open(perf_out) as f:
            for line in f:
                parts = line.strip().split(",")
                if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                    counts[parts[2]] = float(parts[0])
        os.unlink(perf_out)
    out = run.stdout + run.stderr
    tps = txns = None
    for line in out.splitlines():
        if line.startswith("tps = "):
            tps = float(line.split()[2])
        elif line.startswith("number of transactions actually processed:"):
            txns = int(line.split(":")[1].split("/")[0])
    status = "ok" if run.returncode == 0 and txns else f"exit {run.returncode}"
    per = (1e6 / txns) if txns else 0.0
    row = [opts["round"], opts["target"], fmt(tps, 1) if tps else "", txns or "",
           f"{(after[0][0] - before[0][0]) * per:.2f}", f"{(after[0][1] - before[0][1]) * per:.2f}",
           f"{(after[1][0] - before[1][0]) * per:.2f}", f"{(after[1][1] - before[1][1]) * per:.2f}",
           f"{(after[2].ru_utime - before[2].ru_utime) * per:.2f}",
           f"{(after[2].ru_stime - before[2].ru_stime) * per:.2f}",
           f"{counts['raw_syscalls:sys_enter'] / txns:.2f}" if txns and "raw_syscalls:sys_enter" in counts else "",
           f"{counts['context-switches'] / txns:.2f}" if txns and "context-switches" in counts else "", status]
    with open(opts["csv"], "a", newline="") as f:
        csv.writer(f).writerow(row)
    print("  " + " ".join(str(x) for x in row))
    if status != "ok":
        sys.stderr.write(out[-2000:])
        return 1
    return 0


# ---------------------------------------------------------------- metrics scraper

def cmd_scrape(port, interval, stopfile, out):
    import http.client
    n = errors = size = 0
    total = 0.0
    due = time.monotonic()
    while not os.path.exists(stopfile):
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status == 200:
                n += 1
                size = len(body)
                total += time.monotonic() - t0
            else:
                errors += 1
        except OSError:
            errors += 1
        due += interval
        time.sleep(max(0.0, due - time.monotonic()))
    with open(out, "w") as f:
        f.write(f"{n} {total / n * 1000 if n else 0:.3f} {size} {errors}\n")


# ---------------------------------------------------------------- report

def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def median_of(rows, key):
    vals = [float(r[key]) for r in rows if r.get(key) not in (None, "", "-")]
    return statistics.median(vals) if vals else None


def read_meta(path):
    meta = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep:
                    meta[k] = v
    return meta


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def text_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(out)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return ""
    return f"{a / b:.2f}"


def cmd_report(d):
    meta = read_meta(os.path.join(d, "meta.env"))
    runs = read_csv(os.path.join(d, "runs.csv"))
    # splitpoint_same: the two shards are databases on the direct instance (headline);
    # splitpoint: one PostgreSQL instance per shard.
    targets = ["direct", "pgbouncer", "splitpoint_same", "splitpoint"]
    modes = meta.get("modes", "simple extended prepared").split()
    clients = [int(c) for c in meta.get("clients", "8 64").split()]

    # ---- pgbench -S, aggregated over rounds
    agg = {}
    for r in runs:
        agg.setdefault((r["target"], r["mode"], int(r["clients"])), []).append(r)
    results = []
    for mode in modes:
        for c in clients:
            base = {}
            for t in targets:
                rs = agg.get((t, mode, c), [])
                ok = [r for r in rs if r["status"] == "ok"]
                use = ok if ok else [r for r in rs if r.get("tps")]
                bad = [r for r in rs if r["status"] != "ok"]
                failed = sum(int(r["failed"] or 0) for r in rs if r.get("failed") not in (None, "", "-"))
                status = "ok" if rs and not bad else (
                    "not run" if not rs else f"{len(bad)}/{len(rs)} runs: " + "; ".join(sorted({r['status'] for r in bad})))
                base[t] = {
                    "target": t, "mode": mode, "clients": c,
                    "tps": median_of(use, "tps"), "lat_mean_ms": median_of(use, "lat_mean_ms"),
                    "lat_p99_ms": median_of(use, "lat_p99_ms"), "rounds": len(rs),
                    "failed_transactions": failed, "status": status,
                }
            for t in targets:
                row = base[t]
                row["vs_direct"] = ratio(row["tps"], base["direct"]["tps"])
                # Against a PgBouncer whose runs failed (prepared, < 1.21) there is no ratio.
                row["splitpoint_vs_pgbouncer"] = (ratio(row["tps"], base["pgbouncer"]["tps"])
                                                  if t.startswith("splitpoint") and base["pgbouncer"]["status"] == "ok"
                                                  else "")
                results.append(row)

    fields = ["target", "mode", "clients", "tps", "lat_mean_ms", "lat_p99_ms", "vs_direct",
              "splitpoint_vs_pgbouncer", "rounds", "failed_transactions", "status"]
    with open(os.path.join(d, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in results:
            w.writerow({k: (fmt(r[k], 3) if k.startswith("lat") else fmt(r[k], 1) if k == "tps" else r[k])
                        for k in fields})

    main_header = ["target", "mode", "clients", "tps", "mean ms", "p99 ms", "x direct", "sp/pgbouncer", "status"]
    main_rows = [[r["target"], r["mode"], r["clients"], fmt(r["tps"], 0), fmt(r["lat_mean_ms"], 3),
                  fmt(r["lat_p99_ms"], 3), r["vs_direct"], r["splitpoint_vs_pgbouncer"], r["status"]]
                 for r in results]

    # ---- gnuplot data: one line per mode/clients group, one column per target
    with open(os.path.join(d, "plot.dat"), "w") as f:
        f.write("# group " + " ".join(targets) + "\n")
        for mode in modes:
            for c in clients:
                vals = []
                for t in targets:
                    r = next(x for x in results if (x["target"], x["mode"], x["clients"]) == (t, mode, c))
                    # A run that failed shows as 0: its tps is not comparable.
                    vals.append(fmt(r["tps"], 1) if r["status"] == "ok" and r["tps"] else "0")
                f.write(f'"{mode} c={c}" ' + " ".join(vals) + "\n")

    # ---- scatter statements
    scatter = read_csv(os.path.join(d, "scatter.csv"))
    sc_agg = {}
    for r in scatter:
        sc_agg.setdefault((r["benchmark"], r["target"]), []).append(r)
    sc_rows = []
    sc_base = {}
    for (bench, target), rs in sc_agg.items():
        statuses = sorted({r["status"] for r in rs})
        tps = median_of([r for r in rs if r["status"] == "ok"], "tps")
        lat = median_of([r for r in rs if r["status"] == "ok"], "lat_mean_ms")
        if target == "direct":
            sc_base[bench] = tps
        sc_rows.append([bench, target, fmt(tps, 1), fmt(lat, 2), "", ", ".join(statuses),
                        ", ".join(sorted({r["result"] for r in rs}))])
    for row in sc_rows:
        if row[1] != "direct" and row[2]:
            row[4] = ratio(float(row[2]), sc_base.get(row[0]))
    sc_header = ["statement", "target", "statements/s", "mean ms", "x direct", "status", "result vs direct"]

    # ---- ordered stream
    stream = read_csv(os.path.join(d, "stream.csv"))
    st_agg = {}
    for r in stream:
        st_agg.setdefault((r["benchmark"], r["target"]), []).append(r)
    st_rows = []
    for (bench, target), rs in st_agg.items():
        ok = [r for r in rs if r["status"] == "ok"]
        st_rows.append([bench, target, rs[0]["rows_expected"], fmt(median_of(ok, "rows"), 0),
                        fmt(median_of(ok, "seconds"), 2), fmt(median_of(ok, "rows_per_s"), 0),
                        ", ".join(sorted({r["status"] for r in rs})),
                        ", ".join(sorted({r["result"] for r in rs}))])
    st_header = ["stream", "target", "rows expected", "rows", "seconds", "rows/s", "status", "result vs direct"]

    # ---- combine step: per table size and statement, direct and splitpoint side by side
    combine = read_csv(os.path.join(d, "combine.csv"))
    co_agg = {}
    for r in combine:
        co_agg.setdefault((int(r["table_rows"]), r["benchmark"]), {}).setdefault(r["target"], []).append(r)
    co_rows = []
    for (n, bench), by_target in co_agg.items():
        dr, sr = by_target.get("direct", []), by_target.get("splitpoint", [])
        d_s = median_of([r for r in dr if r["status"] == "ok"], "seconds")
        s_s = median_of([r for r in sr if r["status"] == "ok"], "seconds")
        any_r = (sr or dr)[0]
        co_rows.append([n, bench, fmt(median_of([r for r in dr if r["status"] == "ok"], "rows"), 0),
                        fmt(d_s, 3), fmt(s_s, 3), ratio(s_s, d_s), any_r.get("pulled_rows", ""),
                        any_r.get("combine_rows", ""), len(sr),
                        ", ".join(sorted({r["status"] for r in sr})),
                        ", ".join(sorted({r["result"] for r in sr}))])
    co_header = ["table rows", "statement", "rows out", "direct s", "splitpoint s", "sp / direct",
                 "rows pulled", "combine rows", "rounds", "status", "result vs direct"]
    co_rss = read_csv(os.path.join(d, "combine_rss.csv"))
    cr_header = ["table rows", "RSS before kB", "peak RSS sampled kB", "VmHWM kB"]
    cr_rows = [[r["table_rows"], r["rss_before_kb"], r["rss_peak_sampled_kb"], r["vmhwm_kb"]] for r in co_rss]

    # ---- idle connections
    idle = read_csv(os.path.join(d, "idle.csv"))
    id_header = ["target", "requested", "opened", "failed", "RSS before kB", "RSS after kB",
                 "kB per connection", "RSS after close kB", "serving while full", "first error"]
    id_rows = [[r["target"], r["requested"], r["opened"], r["failed"], r["rss_before_kb"],
                r["rss_after_kb"], r["kb_per_connection"], r["rss_after_close_kb"],
                r["serving_while_full"], r["first_error"]] for r in idle]

    # ---- metrics scrape cost
    mrows = read_csv(os.path.join(d, "metrics.csv"))
    me_rows = []
    me_tps = {}
    for scraped in ("no", "yes"):
        rs = [r for r in mrows if r["scraped"] == scraped]
        if not rs:
            continue
        ok = [r for r in rs if r["status"] == "ok"]
        me_tps[scraped] = median_of(ok, "tps")
        me_rows.append([scraped, rs[0]["mode"], rs[0]["clients"], len(rs), fmt(me_tps[scraped], 0),
                        fmt(median_of(ok, "lat_mean_ms"), 3), fmt(median_of(ok, "scrapes"), 0) if scraped == "yes" else "",
                        fmt(median_of(ok, "scrape_ms_mean"), 2) if scraped == "yes" else "",
                        ", ".join(sorted({r["status"] for r in rs}))])
    me_header = ["scraped", "mode", "clients", "rounds", "tps", "mean ms", "scrapes per run", "scrape ms", "status"]
    me_ratio = ratio(me_tps.get("yes"), me_tps.get("no"))
    # The two runs of a round are back to back: their ratio cancels load that drifts
    # between rounds (other work on the machine).
    pairs = []
    for rnd in sorted({r["round"] for r in mrows}, key=int):
        tps = {r["scraped"]: float(r["tps"]) for r in mrows
               if r["round"] == rnd and r["status"] == "ok" and r.get("tps")}
        if tps.get("no") and "yes" in tps:
            pairs.append(tps["yes"] / tps["no"])
    me_pairs = ", ".join(f"{x:.2f}" for x in pairs)
    me_pair_median = f"{statistics.median(pairs):.2f}" if pairs else ""

    # ---- CPU per transaction
    crows = read_csv(os.path.join(d, "cpu.csv"))
    cpu_cols = ["proxy_user_us", "proxy_sys_us", "postgres_user_us", "postgres_sys_us",
                "pgbench_user_us", "pgbench_sys_us"]
    count_cols = ["proxy_syscalls", "proxy_context_switches"]
    cpu_rows = []
    for t in ["direct", "pgbouncer", "splitpoint", "splitpoint_one_pg", "relay"]:
        ok = [r for r in crows if r["target"] == t and r["status"] == "ok"]
        if not ok:
            continue
        med = {k: median_of(ok, k) for k in cpu_cols}
        total = sum(v for v in med.values() if v is not None)
        cpu_rows.append([t, len(ok), fmt(median_of(ok, "tps"), 0)] + [fmt(med[k], 1) for k in cpu_cols]
                        + [fmt(total, 1)] + [fmt(median_of(ok, k), 2) for k in count_cols])
    cpu_header = ["target", "rounds", "tps", "proxy user", "proxy sys", "postgres user", "postgres sys",
                  "pgbench user", "pgbench sys", "total", "proxy syscalls", "proxy ctx switches"]

    # ---- sysbench: per test, ps mode and target, medians of the rounds (max: the largest)
    sbrows = read_csv(os.path.join(d, "sysbench.csv"))
    sb_agg = {}
    for r in sbrows:
        sb_agg.setdefault((r["test"], r["ps_mode"]), {}).setdefault(r["target"], []).append(r)
    sb_rows = []
    for (test, ps), by_target in sb_agg.items():
        base = {}
        for t, rs in by_target.items():
            ok = [r for r in rs if r["status"] == "ok"]
            base[t] = median_of(ok, "tps")
        for t in ["direct", "pgbouncer", "splitpoint_same", "splitpoint"]:
            rs = by_target.get(t)
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok"]
            maxes = [float(r["lat_max_ms"]) for r in ok if r.get("lat_max_ms")]
            errors = sum(int(float(r["errors"])) for r in ok if r.get("errors"))
            bad = sorted({r["status"] for r in rs if r["status"] != "ok"})
            status = "ok" if not bad else f"{len(rs) - len(ok)}/{len(rs)} runs: " + "; ".join(bad)
            sb_rows.append([test, ps, t, len(rs), fmt(base[t], 0), fmt(median_of(ok, "qps"), 0),
                            fmt(median_of(ok, "lat_avg_ms"), 2), fmt(median_of(ok, "lat_p95_ms"), 2),
                            fmt(median_of(ok, "lat_p99_ms"), 2), fmt(max(maxes), 1) if maxes else "",
                            ratio(base[t], base.get("direct")),
                            ratio(base[t], base.get("pgbouncer")) if t.startswith("splitpoint") else "",
                            errors, status])
    sb_header = ["test", "ps mode", "target", "rounds", "tps", "qps", "mean ms", "p95 ms", "p99 ms",
                 "max ms", "x direct", "x pgbouncer", "ignored errors", "status"]

    problems = []
    ppath = os.path.join(d, "problems.txt")
    if os.path.exists(ppath):
        with open(ppath) as f:
            problems = [line.rstrip("\n") for line in f if line.strip()]

    # ---- stdout
    if runs:
        print("\n== pgbench -S (select only), median of rounds ==")
        print(text_table(main_header, main_rows))
    if sc_rows:
        print("\n== scatter statements (pgbench custom scripts) ==")
        print(text_table(sc_header, sc_rows))
    if me_rows:
        print(f"\n== metrics: splitpoint pgbench -S with /metrics scraped every {meta.get('metrics_interval', '?')} s "
              "vs not scraped (median of rounds) ==")
        print(text_table(me_header, me_rows))
        print(f"tps ratio scraped / not scraped: per round {me_pairs or '?'}; median of those "
              f"{me_pair_median or '?'}; ratio of the medians {me_ratio or '?'}")
    if cpu_rows:
        print(f"\n== CPU per transaction (us), pgbench -S -M {meta.get('cpu_mode', '?')} "
              f"-c {meta.get('cpu_clients', '?')}, median of rounds ==")
        print(text_table(cpu_header, cpu_rows))
    if sb_rows:
        print(f"\n== sysbench, {meta.get('sb_threads', '?')} threads, {meta.get('sb_tables', '?')} tables x "
              f"{meta.get('sb_table_size', '?')} rows, median of rounds ==")
        print(text_table(sb_header, sb_rows))
    if st_rows:
        print("\n== ordered stream through 3 shards ==")
        print(text_table(st_header, st_rows))
        for k in ("stream_sp_rss_before_kb", "stream_sp_rss_peak_sampled_kb", "stream_sp_vmhwm_kb"):
            if meta.get(k):
                print(f"{k} = {meta[k]}")
    if co_rows:
        print("\n== combine step through 3 shards (median seconds per statement) ==")
        print(text_table(co_header, co_rows))
        print(text_table(cr_header, cr_rows))
    if id_rows:
        print("\n== idle client connections ==")
        print(text_table(id_header, id_rows))
    if problems:
        print(f"\n== problems ({len(problems)}) ==")
        print("\n".join(problems))

    # ---- summary.md
    m = meta.get
    lines = [
        f"# splitpoint benchmark — {m('date', '')}", "",
        "Produced by `tests/bench/run`" + (" in quick mode (QUICK=1)" if m("quick") == "1" else "") + ".",
        "", "## Machine", "",
        f"- CPUs (nproc): {m('nproc', '?')}; CPU: {m('cpu', '?')}",
        f"- memory: {m('memory', '?')}; kernel: {m('kernel', '?')}; load average at start "
        f"{m('loadavg_start', '?')}, at end {m('loadavg_end', '?')} (other work on the machine skews the numbers)",
        f"- PostgreSQL: {m('pg_version', '?')}; PgBouncer: {m('pgbouncer_version', '?')}; "
        f"pgbench: {m('pgbench_version', '?')}",
        f"- splitpoint: {m('splitpoint_version', '?')} (work tree at commit {m('git_commit', '?')}"
        + (", uncommitted changes" if m("git_dirty") == "1" else "") + f"), binary: {m('build_type', '?')}",
        "- everything (PostgreSQL instances, proxies, pgbench) on this one machine",
        "", "## Set-up", "",
        f"- data: `pgbench -i -s {m('scale')}`; direct = one PostgreSQL with all rows; splitpoint = two "
        f"shards, pgbench_accounts/pgbench_history hashed by aid over {m('partitions')} partitions, "
        "branches/tellers as reference tables",
        "- splitpoint_same: the two shards are two databases (sp_s0, sp_s1) on the direct instance, the one "
        "PgBouncer is in front of, so PostgreSQL does the same work for every target (the headline); "
        "splitpoint: one PostgreSQL instance per shard",
        f"- PgBouncer {m('pgbouncer_version', '')}: transaction pooling, default_pool_size {m('pool_size')}, "
        "in front of the direct instance",
        f"- splitpoint: transaction pooling, pool_size {m('pool_size')} per shard, workers "
        f"{m('sp_workers', '0')} (0 = one per hardware thread), "
        f"auth {m('auth')} (same for PgBouncer and PostgreSQL)",
        f"- `pgbench -n -S -T {m('duration')} -c C -j min(C,4) -M MODE`, {m('rounds')} round(s), "
        "targets alternating within each round; tps, mean and p99 latency from per-transaction "
        "`--log` files; median of rounds",
        f"- PostgreSQL: shared_buffers {m('shared_buffers')}, fsync off (throw-away test instances)",
        "", "## pgbench -S (select only)", "",
        "`x direct` = tps / direct tps; `sp/pgbouncer` = splitpoint tps / PgBouncer tps. "
        "`splitpoint_same` (shards on the direct instance) is the comparison that measures the proxy; "
        "`splitpoint` (two instances) also pays for a second PostgreSQL on the same cores.", "",
        md_table(main_header, main_rows), "",
        "![tps per mode and client count](plot.png)", "",
    ]
    if sc_rows:
        lines += ["## Scatter statements", "",
                  f"pgbench custom scripts, `-c {m('scatter_clients')}`, `-T {m('duration')}`, simple protocol; "
                  "`result vs direct` compares the statement's output through the proxy with the "
                  "direct instance's.", "",
                  md_table(sc_header, sc_rows), ""]
    if me_rows:
        lines += ["## Metrics scrape cost", "",
                  f"`pgbench -n -S -M {m('metrics_mode')} -c {m('metrics_clients')} -T {m('duration')}` through "
                  f"splitpoint while a client GETs /metrics every {m('metrics_interval')} s, and while nothing "
                  "scrapes it, alternating (the first of the two changes every round); median of rounds.", "",
                  md_table(me_header, me_rows), "",
                  f"tps ratio scraped / not scraped, per round: {me_pairs or '?'}; median of the rounds' "
                  f"ratios **{me_pair_median or '?'}**; ratio of the medians {me_ratio or '?'}.", ""]
    if cpu_rows:
        lines += ["## CPU per transaction", "",
                  f"`pgbench -n -S -M {m('cpu_mode')} -c {m('cpu_clients')} -T {m('duration')}` against each "
                  "target; CPU time (microseconds per transaction, user and system) of the proxy, of all "
                  "processes of the PostgreSQL instances behind it, and of pgbench; median of rounds. "
                  "`splitpoint_one_pg` is splitpoint with both shards on the direct instance: the same "
                  "proxy work against one PostgreSQL instead of two; `relay` (tests/bench/relay.cpp) only moves bytes "
                  "between each client and a connection of its own to the direct instance, the floor of a proxy's "
                  "cost. The last two columns are the proxy's "
                  "system calls and context switches per transaction (`perf stat`; empty without perf).", "",
                  md_table(cpu_header, cpu_rows), ""]
    if sb_rows:
        lines += ["## sysbench", "",
                  f"sysbench {m('sysbench_version', '?')}, `--tables={m('sb_tables')} --table-size={m('sb_table_size')} "
                  f"--threads={m('sb_threads')} --time={m('duration')} --histogram=on --percentile=95`, "
                  f"{m('rounds')} round(s), targets alternating (the first one rotated each round); median of "
                  "rounds, `max ms` the largest of the rounds; p95 is sysbench's, p99 is read from its latency "
                  "histogram. `x pgbouncer` = splitpoint tps / PgBouncer tps. Data through splitpoint_same: "
                  f"{m('sysbench_prepare_splitpoint_same', '?')}; through splitpoint: "
                  f"{m('sysbench_prepare_splitpoint', '?')} (proxy = `sysbench prepare` through the proxy, "
                  "shards = prepared on each shard and trimmed).", "",
                  md_table(sb_header, sb_rows), ""]
    if st_rows:
        lines += ["## Ordered stream", "",
                  f"`stream_t(id bigint, v int)`, {m('stream_rows')} rows, hashed by id over 3 shards "
                  f"({m('partitions')} partitions), index on (v, id); the whole table "
                  "`ORDER BY v, id` fetched with psql into a file; the output is compared byte for byte "
                  "with the direct instance's.", "",
                  md_table(st_header, st_rows), "",
                  f"3-shard splitpoint RSS: {m('stream_sp_rss_before_kb', '?')} kB before, peak sampled "
                  f"{m('stream_sp_rss_peak_sampled_kb', '?')} kB, VmHWM {m('stream_sp_vmhwm_kb', '?')} kB.", ""]
    if co_rows:
        lines += ["## Combine step", "",
                  "`combine_t(id bigint, g int, v int, x numeric)`, g with 10 000 values, hashed by id over 3 "
                  f"shards ({m('partitions')} partitions), combine database s0; each statement fetched with psql "
                  f"into a file, {m('rounds')} round(s), direct then splitpoint; median wall seconds, output "
                  "compared byte for byte with the direct instance's. agg = `SELECT g, count(*)::int, sum(v) "
                  "... GROUP BY g ORDER BY g` (partial aggregates on the shards), distinct = `SELECT g, "
                  "count(DISTINCT v) ... GROUP BY g ORDER BY g` (rows pulled), window = `SELECT id, rank() OVER "
                  "(PARTITION BY g ORDER BY v, id) ... ORDER BY id` (every row pulled and returned). `rows "
                  "pulled` / `combine rows`: from `SHOW splitpoint.last_scatter` after one untimed run.", "",
                  md_table(co_header, co_rows), "",
                  "A fresh 3-shard splitpoint per table size; its RSS (sampled every 20 ms over all of that "
                  "size's statements) and VmHWM:", "",
                  md_table(cr_header, cr_rows), ""]
    lines += [f"Main splitpoint VmHWM after the pgbench runs: {m('sp_vmhwm_after_pgbench_kb', '?')} kB; "
              f"after the scatter runs: {m('sp_vmhwm_after_scatter_kb', '?')} kB.", ""]
    if id_rows:
        lines += ["## Idle client connections", "",
                  "Each connection completes startup and authentication, then stays idle; RSS of the "
                  "proxy process (VmRSS) before and after.", "",
                  md_table(id_header, id_rows), ""]
    lines += ["## Problems seen", ""]
    lines += [f"- {p}" for p in problems] if problems else ["none"]
    lines.append("")
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write("\n".join(lines))


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "latency":
        cmd_latency(args[0])
    elif cmd == "rss":
        cmd_rss(int(args[0]))
    elif cmd == "sample-rss":
        cmd_sample_rss(int(args[0]), args[1], args[2])
    elif cmd == "idle":
        cmd_idle(args)
    elif cmd == "scrape":
        cmd_scrape(int(args[0]), float(args[1]), args[2], args[3])
    elif cmd == "cpu":
        return cmd_cpu(args)
    elif cmd == "sysbench":
        cmd_sysbench(args[0])
    elif cmd == "report":
        cmd_report(args[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
