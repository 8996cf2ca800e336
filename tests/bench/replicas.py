#!/usr/bin/env python3
"""Read scaling with a standby (SPEC 10), by hand: docs/performance.md.

    tests/bench/replicas.py                      # scale 10, 8 clients, 3 rounds of 5 s
    SCALE=20 CLIENTS=16 ROUNDS=5 SECONDS=10 tests/bench/replicas.py

Starts a PostgreSQL 15 primary and a streaming standby of it (tests/lib/pg.sh,
pg_basebackup -R) under $BENCH_WORK, loads pgbench's tables (scale SCALE) on the
primary, and runs `pgbench -S` (select-only, simple protocol) in alternating rounds:

  direct    against the primary itself
  primary   through splitpoint, one shard, reads: primary
  replica   through splitpoint, the same shard with the standby under replicas: and
            reads: replica (every pgbench SELECT is a replica-safe read outside a
            transaction block, so all of them go to the standby while it keeps up)

Reports per mode the median tps over the rounds, the tps ratio replica/primary, and the
CPU time per transaction (µs, user + system) of the proxy, of the primary's and the
standby's PostgreSQL processes and of pgbench, from /proc. On one 2-core machine the
proxy, both PostgreSQL instances and pgbench share the cores, so moving reads to the
standby mostly moves where the work is done: the CPU split says where it went.
"""

import functools
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402

SCALE = int(os.environ.get("SCALE", "10"))
CLIENTS = int(os.environ.get("CLIENTS", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
SECONDS = int(os.environ.get("SECONDS", "5"))
WORK = os.environ.get("BENCH_WORK", "/tmp/splitpoint-bench-replicas")
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
sh = functools.partial(benchlib.sh, WORK)


def proxy(name, port, metrics_port, body):
    return benchlib.start_proxy(WORK, BUILD, name, port,
                                f"listen: 127.0.0.1:{port}\nmetrics_listen: 127.0.0.1:{metrics_port}\nworkers: 2\n"
                                "auth: scram-sha-256\nusers: [ { name: app, password: secret } ]\n" + body)


def pgbench(port, pids, datadirs):
    env = dict(os.environ, PGPASSWORD="secret")
    before = [benchlib.cpu_seconds(benchlib.stat_fields(p)) for p in pids]
    pg_before = [benchlib.instance_times(d) for d in datadirs]
    t0 = time.monotonic()
    r = subprocess.run([f"{PG_BIN}/pgbench", "-n", "-S", "-c", str(CLIENTS), "-j", "2", "-T", str(SECONDS),
                        "-h", "127.0.0.1", "-p", str(port), "-U", "app", "app"],
                       capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"pgbench failed: {r.stderr[-2000:]}")
    tx = next(int(line.split()[-1]) for line in r.stdout.splitlines()
              if line.startswith("number of transactions actually processed"))
    tps = tx / wall
    us = lambda a, b: (sum(b) - sum(a)) * 1e6 / tx  # noqa: E731
    proxy_us = sum(us(a, benchlib.cpu_seconds(benchlib.stat_fields(p))) for a, p in zip(before, pids))
    pg_us = [us(a, benchlib.instance_times(d)) for a, d in zip(pg_before, datadirs)]
    return tps, proxy_us, pg_us


def main():
    subprocess.run(["rm", "-rf", WORK], check=True)
    os.makedirs(WORK)
    ports = [int(sh("free_port")) for _ in range(6)]
    p_dir, r_dir = os.path.join(WORK, "primary"), os.path.join(WORK, "standby")
    sh("pg_start", p_dir, str(ports[0]))
    env = dict(os.environ, PGPASSWORD="secret")
    subprocess.run([f"{PG_BIN}/pgbench", "-i", "-q", "-s", str(SCALE), "-h", "127.0.0.1", "-p", str(ports[0]),
                    "-U", "app", "app"], check=True, capture_output=True, env=env)
    sh("pg_replica", p_dir, r_dir, str(ports[1]))
    shard = (f"shards:\n  - name: s0\n    host: 127.0.0.1\n    port: {ports[0]}\n    database: app\n"
             f"    user: app\n    password: secret\n    pool_size: 16\n")
    a = proxy("primary", ports[2], ports[3], shard + "reads: primary\n")
    b = proxy("replica", ports[4], ports[5],
              shard + f"    replicas: [ {{ host: 127.0.0.1, port: {ports[1]} }} ]\nreads: replica\n"
                      "health: { interval: 200ms }\n")
    time.sleep(1.0)
    datadirs = [os.path.join(p_dir, "data"), os.path.join(r_dir, "data")]
    modes = {"direct": (ports[0], []), "primary": (ports[2], [a.pid]), "replica": (ports[4], [b.pid])}
    results = {m: [] for m in modes}
    try:
        for m, (port, pids) in modes.items():  # warm-up: pools, plans, caches
            pgbench(port, pids, datadirs)
        for _ in range(ROUNDS):
            for m, (port, pids) in modes.items():
                results[m].append(pgbench(port, pids, datadirs))
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(20)
        sh("pg_stop", r_dir)
        sh("pg_stop", p_dir)
    print(f"pgbench -S, scale {SCALE}, {CLIENTS} clients, {ROUNDS} rounds of {SECONDS} s (medians)")
    print("| mode | tps | proxy µs/tx | primary PG µs/tx | standby PG µs/tx |")
    print("|---|---|---|---|---|")
    med = {}
    for m, rows in results.items():
        med[m] = statistics.median(r[0] for r in rows)
        print(f"| {m} | {med[m]:,.0f} | {statistics.median(r[1] for r in rows):.1f} | "
              f"{statistics.median(r[2][0] for r in rows):.1f} | {statistics.median(r[2][1] for r in rows):.1f} |")
    print(f"replica / primary tps: {med['replica'] / med['primary']:.2f}x; "
          f"primary-through-proxy / direct: {med['primary'] / med['direct']:.2f}x")


if __name__ == "__main__":
    main()
