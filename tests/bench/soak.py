#!/usr/bin/python3
"""Soak (issue #17), by hand: docs/reliability.md.

    tests/bench/soak.py                       # 30 minutes
    MINUTES=5 CLIENTS=6 tests/bench/soak.py

Starts one PostgreSQL 15 (tests/lib/pg.sh) with two databases as shards s0 and s1 and
splitpoint in front of them (a hash distribution `kv` over 16 partitions, the default
`cross_shard_writes: two_phase`), then runs a mixed load for MINUTES from CLIENTS
threads, each picking at random, per round:

  single   a keyed SELECT, UPDATE or INSERT ... ON CONFLICT (one shard)
  scatter  an aggregate, an ORDER BY ... LIMIT and a GROUP BY over both shards, and a
           combine-step query (count(DISTINCT)) every tenth time
  copy     COPY kv FROM STDIN of 200 rows with keys on both shards
  2pc      a transaction that updates a key on each shard (two-phase commit)
  keys     INSERTs that leave the key to the proxy (SPEC §3)
  churn    a new connection for one statement, then closed

Every 10 s the proxy's RSS (VmRSS) and open file descriptors are sampled; at the end
the samples go to $BENCH_WORK/soak.csv, an ASCII plot of both is printed, with the
statement counts per kind, the errors (any error fails the soak) and the first and last
thirds' median RSS and FDs. The load's connections stay open the whole time (their
FDs are part of the baseline); `churn` checks that closed ones are given back.
"""

import functools
import io
import os
import random
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "bench"))
import benchlib  # noqa: E402
import psycopg2  # noqa: E402

MINUTES = float(os.environ.get("MINUTES", "30"))
CLIENTS = int(os.environ.get("CLIENTS", "6"))
WORK = os.environ.get("BENCH_WORK", "/tmp/splitpoint-soak")
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
KEYS = 5000
sh = functools.partial(benchlib.sh, WORK)


def start(pg_port, port, metrics_port):
    shards = "".join(f"  - {{ name: s{i}, host: 127.0.0.1, port: {pg_port}, database: soak{i}, user: app, "
                     f"password: secret, pool_size: 12 }}\n" for i in range(2))
    return benchlib.start_proxy(
        WORK, BUILD, "soak", port,
        f"listen: 127.0.0.1:{port}\nmetrics_listen: 127.0.0.1:{metrics_port}\n"
        "auth: scram-sha-256\nusers: [ { name: app, password: secret } ]\n"
        f"shards:\n{shards}"
        "distributions:\n  - { name: d, method: hash, partitions: 16, tables: { kv: id, auto: id } }\n")


def connect(port):
    return psycopg2.connect(host="127.0.0.1", port=port, dbname="soak0", user="app", password="secret")


class Load:
    def __init__(self, port, until):
        self.port, self.until = port, until
        self.counts, self.errors = {}, []
        self.lock = threading.Lock()

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def round(self, c, rng, n):
        cur = c.cursor()
        kind = rng.choice(["single", "single", "single", "scatter", "copy", "2pc", "keys", "churn"])
        k = rng.randrange(1, KEYS)
        if kind == "single":
            c.autocommit = True
            cur.execute(rng.choice(["SELECT v, n FROM kv WHERE id = %s", "UPDATE kv SET n = n + 1 WHERE id = %s",
                                    "INSERT INTO kv VALUES (%s, 'x', 0) ON CONFLICT (id) DO UPDATE SET n = kv.n + 1"]),
                        (k,))
        elif kind == "scatter":
            c.autocommit = True
            cur.execute("SELECT count(*), sum(n) FROM kv")
            cur.execute("SELECT id FROM kv ORDER BY n DESC, id LIMIT 10")
            cur.execute("SELECT n % 7, count(*) FROM kv GROUP BY 1 ORDER BY 1")
            if n % 10 == 0:
                cur.execute("SELECT count(DISTINCT v) FROM kv")
        elif kind == "copy":
            c.autocommit = True
            base = KEYS + rng.randrange(0, 10_000_000) * 200
            data = "".join(f"{base + i}\tc\t0\n" for i in range(200))
            cur.copy_expert("COPY kv FROM STDIN", io.StringIO(data))
            cur.execute("DELETE FROM kv WHERE id >= %s AND id < %s", (base, base + 200))
        elif kind == "2pc":
            c.autocommit = False
            cur.execute("UPDATE kv SET n = n + 1 WHERE id = %s", (k,))
            cur.execute("UPDATE kv SET n = n + 1 WHERE id = %s", ((k + 1) % KEYS + 1,))
            c.commit()
        elif kind == "keys":
            c.autocommit = True
            cur.execute("INSERT INTO auto (v) VALUES ('a'), ('b'), ('c') RETURNING id")
            ids = [r[0] for r in cur.fetchall()]
            cur.execute("DELETE FROM auto WHERE id = ANY(%s)", (ids,))
        else:
            d = connect(self.port)
            d.autocommit = True
            d.cursor().execute("SELECT 1 FROM kv WHERE id = %s", (k,))
            d.close()
        self.count(kind)

    def client(self, seed):
        rng = random.Random(seed)
        c = connect(self.port)
        n = 0
        while time.monotonic() < self.until:
            n += 1
            try:
                self.round(c, rng, n)
            except Exception as e:  # noqa: BLE001
                with self.lock:
                    self.errors.append(f"{type(e).__name__}: {str(e).strip()[:200]}")
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass
                c = connect(self.port)
        c.close()


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def plot(samples, index, label, width=60, height=8):
    values = [s[index] for s in samples]
    lo, hi = min(values), max(values)
    span = max(hi - lo, 1)
    n = min(width, len(values))
    cols = [values[int(i * (len(values) - 1) / max(n - 1, 1))] for i in range(n)]
    print(f"{label}: min {lo:,} max {hi:,}")
    for row in range(height, -1, -1):
        line = "".join("*" if round((v - lo) / span * height) == row else " " for v in cols)
        print(f"{lo + span * row / height:>12,.0f} |{line}")
    print(" " * 13 + "+" + "-" * len(cols) + f"> {samples[-1][0] / 60:.0f} min")


def main():
    subprocess.run(["rm", "-rf", WORK], check=True)
    os.makedirs(WORK)
    pg_port, port, metrics_port = (int(sh("free_port")) for _ in range(3))
    pg_dir = os.path.join(WORK, "pg")
    sh("pg_start", pg_dir, str(pg_port))
    for i in range(2):
        c = psycopg2.connect(host="127.0.0.1", port=pg_port, dbname="postgres", user="postgres", password="postgres")
        c.autocommit = True
        c.cursor().execute(f"CREATE DATABASE soak{i} OWNER app")
        c.close()
    proxy = start(pg_port, port, metrics_port)
    try:
        c = connect(port)
        c.autocommit = True
        cur = c.cursor()
        cur.execute("CREATE TABLE kv (id bigint PRIMARY KEY, v text, n int NOT NULL DEFAULT 0)")
        cur.execute("CREATE TABLE auto (id bigserial PRIMARY KEY, v text)")
        for start_key in range(1, KEYS, 500):
            rows = ", ".join(f"({k}, 'v{k % 50}', 0)" for k in range(start_key, min(start_key + 500, KEYS)))
            cur.execute(f"INSERT INTO kv VALUES {rows}")
        c.close()
        t0 = time.monotonic()
        load = Load(port, t0 + MINUTES * 60)
        threads = [threading.Thread(target=load.client, args=(i,), daemon=True) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        samples = []
        while time.monotonic() < load.until:
            samples.append((round(time.monotonic() - t0), benchlib.proc_status(proxy.pid)[0], fds(proxy.pid)))
            time.sleep(10)
        for t in threads:
            t.join(60)
        samples.append((round(time.monotonic() - t0), benchlib.proc_status(proxy.pid)[0], fds(proxy.pid)))
    finally:
        proxy.terminate()
        proxy.wait(30)
        sh("pg_stop", pg_dir)
    with open(os.path.join(WORK, "soak.csv"), "w") as f:
        f.write("seconds,rss_kb,fds\n")
        for s in samples:
            f.write(f"{s[0]},{s[1]},{s[2]}\n")
    third = max(len(samples) // 3, 1)
    first, last = samples[:third], samples[-third:]
    print(f"soak: {MINUTES:g} min, {CLIENTS} clients, {sum(load.counts.values()):,} rounds: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(load.counts.items())))
    print(f"RSS median first third {statistics.median(s[1] for s in first):,.0f} kB, last third "
          f"{statistics.median(s[1] for s in last):,.0f} kB; FDs {statistics.median(s[2] for s in first):.0f} -> "
          f"{statistics.median(s[2] for s in last):.0f}")
    plot(samples, 1, "RSS (kB)")
    plot(samples, 2, "open file descriptors")
    print(f"errors: {len(load.errors)}")
    for e in load.errors[:20]:
        print("  " + e)
    return 1 if load.errors else 0


if __name__ == "__main__":
    sys.exit(main())
