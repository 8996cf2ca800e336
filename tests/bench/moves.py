#!/usr/bin/env python3
"""Online partition moves under write load (SPEC 9), by hand: docs/performance.md.

    tests/bench/moves.py                 # 20 moves, 2M rows (250k per partition), 8 writers
    MOVES=30 ROWS=8000000 WRITERS=16 tests/bench/moves.py
    VERIFY=false tests/bench/moves.py    # moves.verify: false (no checksums in the hold)

Starts two PostgreSQL 15 instances (tests/lib/pg.sh, free ports under $BENCH_WORK) and
one splitpoint with a catalog over three shards: s0 and s1 on the first and second
instance, s2 a second database on the second instance. One hash distribution, 8
partitions, table t (id bigint primary key, n bigint), loaded directly on the shards
(each gets the rows PostgreSQL's hash partitioning gives its partitions). Writers
(UPDATE t SET n = n + 1 WHERE id = random) run through the proxy the whole time; after
a baseline period, MOVES moves shuttle partitions between s0/s1 and s2, one after
another. Reports, from SHOW MOVES and the writers' own clocks: the hold per cutover
(p50/p99/max), the p99 latency of writes to partitions that were not moving, in the
baseline and during the moves, the writes that waited on a cutover, the copy
throughput (rows of the partition / time in `copying`), and every client error.
"""

import functools
import os
import random
import statistics
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402
import psycopg2  # noqa: E402

MOVES = int(os.environ.get("MOVES", "20"))
ROWS = int(os.environ.get("ROWS", "2000000"))
WRITERS = int(os.environ.get("WRITERS", "8"))
BASELINE = float(os.environ.get("BASELINE", "10"))
WORK = os.environ.get("BENCH_WORK", "/tmp/splitpoint-bench-moves")
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
P = 8
sh = functools.partial(benchlib.sh, WORK)


def connect(port, db, user="postgres", password="postgres"):
    c = psycopg2.connect(host="127.0.0.1", port=port, dbname=db, user=user, password=password)
    c.autocommit = True
    return c


def q(port, db, sql, *args):
    c = connect(port, db)
    cur = c.cursor()
    cur.execute(sql, args or None)
    rows = cur.fetchall() if cur.description else None
    c.close()
    return rows


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main():
    os.makedirs(WORK, exist_ok=True)
    ports = [int(sh("free_port")), 0]
    sh("pg_start", f"{WORK}/pg0", str(ports[0]))
    ports[1] = int(sh("free_port"))
    sh("pg_start", f"{WORK}/pg1", str(ports[1]))
    shards = [(ports[0], "bm"), (ports[1], "bm"), (ports[1], "bm2")]
    for port, db in shards:
        q(port, "postgres", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        q(port, "postgres", f"CREATE DATABASE {db}")
        q(port, db, "CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        q(port, db, "CREATE TABLE chk (k bigint) PARTITION BY HASH (k)")
    owned = {0: range(0, 4), 1: range(4, 8)}
    for i, parts in owned.items():
        port, db = shards[i]
        cond = " OR ".join(f"satisfies_hash_partition('chk'::regclass, {P}, {r}, g)" for r in parts)
        q(port, db, f"INSERT INTO t SELECT g, 0 FROM generate_series(1::bigint, {ROWS}) g WHERE {cond}")
        q(port, db, "VACUUM ANALYZE t")
    sp_port, metrics_port = int(sh("free_port")), int(sh("free_port"))
    config = f"""listen: 127.0.0.1:{sp_port}
metrics_listen: 127.0.0.1:{metrics_port}
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
  - {{ name: admin, password: adminpw, admin: true }}
shards:
  - {{ name: s0, host: 127.0.0.1, port: {ports[0]}, database: bm, user: postgres, password: postgres }}
  - {{ name: s1, host: 127.0.0.1, port: {ports[1]}, database: bm, user: postgres, password: postgres }}
  - {{ name: s2, host: 127.0.0.1, port: {ports[1]}, database: bm2, user: postgres, password: postgres }}
distributions:
  - name: d
    method: hash
    partitions: {P}
    placement: {{ s0: 0-3, s1: 4-7 }}
    tables: {{ t: id }}
catalog: s0
moves: {{ max_hold: 5s, poll: 200ms, lease: 3s, verify: {os.environ.get("VERIFY", "true")} }}
"""
    proxy = benchlib.start_proxy(WORK, BUILD, "sp", sp_port, config)
    time.sleep(1.5)
    part_of = {}
    stop = threading.Event()
    samples = []  # (start, seconds, partition, error)
    messages = {}  # SQLSTATE -> the first message seen
    lock = threading.Lock()

    def writer(seed):
        rnd = random.Random(seed)
        c = connect(sp_port, "bm", "app", "secret")
        cur = c.cursor()
        while not stop.is_set():
            k = rnd.randint(1, ROWS)
            t0 = time.monotonic()
            err = None
            try:
                cur.execute("UPDATE t SET n = n + 1 WHERE id = %s", (k,))
            except psycopg2.Error as e:
                err = e.pgcode or str(e)
                with lock:
                    messages.setdefault(err, str(e).strip())
                if c.closed:
                    c = connect(sp_port, "bm", "app", "secret")
                    cur = c.cursor()
            with lock:
                samples.append((t0, time.monotonic() - t0, k, err))
        c.close()

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(WRITERS)]
    for t in threads:
        t.start()
    time.sleep(BASELINE)
    moves_started = time.monotonic()
    admin = connect(sp_port, "splitpoint", "admin", "adminpw")
    acur = admin.cursor()
    intervals = []  # (partition, move start, end) from the writers' clock, approximate
    phases = []  # (state, start, end): the state of the move running then (polled every 20 ms)
    rng = random.Random(7)
    placement = {r: ("s0" if r < 4 else "s1") for r in range(P)}
    done = []
    for i in range(MOVES):
        part = rng.randrange(P)
        target = "s2" if placement[part] != "s2" else ("s0" if part < 4 else "s1")
        acur.execute(f"MOVE PARTITION d:{part} TO {target}")
        move = int(acur.fetchone()[0])
        t_start = time.monotonic()
        copying_from = copied_at = None
        max_lag = 0
        progress = set()  # rows_copied values seen while copying
        last_state, since = None, t_start
        while True:
            acur.execute("SHOW MOVES ALL")
            row = [r for r in acur.fetchall() if int(r[0]) == move][0]
            state = row[5]
            now = time.monotonic()
            if state != last_state:
                if last_state:
                    phases.append((last_state, since, now))
                last_state, since = state, now
            if state == "copying" and 0 < int(row[6]):
                progress.add(int(row[6]))
            if state == "catching_up" and row[9]:
                max_lag = max(max_lag, int(row[9]))
            if state == "copying" and copying_from is None:
                copying_from = time.monotonic()
            if state not in ("planned", "copying") and copied_at is None:
                copied_at = time.monotonic()
            if state in ("done", "failed", "cancelled"):
                break
            time.sleep(0.02)
        placement[part] = target
        done.append({"move": move, "partition": part, "state": state, "rows": int(row[6]), "max_lag": max_lag, "progress": len(progress),
                     "hold_ms": int(row[10]) if row[10] else None, "seconds": time.monotonic() - t_start,
                     "copy_seconds": (copied_at - copying_from) if copying_from and copied_at else None})
        intervals.append((part, t_start, time.monotonic()))
    moves_ended = time.monotonic()
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join(10)
    # The partition of each key, asked of PostgreSQL.
    keys = sorted({s[2] for s in samples})
    port, db = shards[0]
    c = connect(port, db)
    cur = c.cursor()
    for chunk in range(0, len(keys), 10000):
        part = keys[chunk:chunk + 10000]
        cur.execute("SELECT k, (SELECT r FROM generate_series(0, %s) r WHERE satisfies_hash_partition("
                    "'chk'::regclass, %s, r, k)) FROM unnest(%s::bigint[]) k", (P - 1, P, part))
        for k, r in cur.fetchall():
            part_of[k] = r
    c.close()

    def moving(part, t):
        return any(p == part and a <= t <= b for p, a, b in intervals)

    base = [s[1] for s in samples if s[0] < moves_started and not s[3]]
    during_other = [s[1] for s in samples if moves_started <= s[0] <= moves_ended and not s[3]
                    and not moving(part_of[s[2]], s[0])]
    during_moving = [s[1] for s in samples if moves_started <= s[0] <= moves_ended and not s[3]
                     and moving(part_of[s[2]], s[0])]
    def phase(t):
        for name, a, b in phases:
            if a <= t < b:
                return name
        return None

    by_phase = {}
    for s in samples:
        if moves_started <= s[0] <= moves_ended and not s[3] and not moving(part_of[s[2]], s[0]):
            by_phase.setdefault(phase(s[0]), []).append(s[1])
    errors = {}
    for s in samples:
        if s[3]:
            errors[s[3]] = errors.get(s[3], 0) + 1
    holds = [d["hold_ms"] for d in done if d["hold_ms"] is not None]
    ok = [d for d in done if d["state"] == "done"]
    print(f"moves: {len(ok)}/{len(done)} done; partition rows {ROWS // P} (about); writers {WRITERS}")
    print(f"hold per cutover (ms): p50 {percentile(holds, 0.5)} p99 {percentile(holds, 0.99)} max {max(holds or [0])}")
    print(f"move wall time (s): median {statistics.median([d['seconds'] for d in done]):.2f}")
    rates = [d["rows"] / d["copy_seconds"] for d in ok if d["copy_seconds"]]
    print(f"copy throughput (rows/s, partition rows / time in copying, polled every 20 ms): median "
          f"{statistics.median(rates) if rates else 0:.0f}")
    print(f"writes: baseline {len(base)} in {BASELINE:.0f}s, p99 {percentile(base, 0.99) * 1000:.2f} ms; during moves, "
          f"other partitions: {len(during_other)}, p99 {percentile(during_other, 0.99) * 1000:.2f} ms; "
          f"the moving partition: {len(during_moving)}, p99 {percentile(during_moving, 0.99) * 1000:.2f} ms, "
          f"max {max(during_moving or [0]) * 1000:.0f} ms")
    print("other partitions by the moving one's state (share of the moves' time, writes, p99 ms):")
    for name in ("planned", "copying", "catching_up", "cutover", "cleanup", None):
        seconds = sum(b - a for n, a, b in phases if n == name)
        lat = by_phase.get(name, [])
        if lat:
            print(f"  {name or 'between moves'}: {seconds / (moves_ended - moves_started) * 100:.0f}% of the time, "
                  f"{len(lat)} writes, p99 {percentile(lat, 0.99) * 1000:.2f} ms")
    seen = [d["progress"] for d in ok]
    print(f"progress: distinct rows_copied values seen while copying, median {statistics.median(seen) if seen else 0}")
    lags = [d["max_lag"] for d in ok]
    print(f"catch-up lag (bytes, highest SHOW MOVES lag_bytes per move while catching_up): median "
          f"{statistics.median(lags) if lags else 0:.0f}, max {max(lags or [0])}")
    print(f"throughput: baseline {len(base) / BASELINE:.0f}/s, during moves "
          f"{(len(during_other) + len(during_moving)) / (moves_ended - moves_started):.0f}/s")
    print(f"client errors: {errors or 'none'}")
    for code, text in messages.items():
        print(f"  {code}: {text}")
    proxy.terminate()
    proxy.wait(20)
    for d in (f"{WORK}/pg0", f"{WORK}/pg1"):
        sh("pg_stop", d)


if __name__ == "__main__":
    main()
