#!/usr/bin/env python3
"""Random SQL (#17): sqlsmith (Debian's `sqlsmith`) against a sharded proxy.

Schema of our own on both shared instances (database sm_<random>): users (id, hash
key), orders (user_id, the same distribution) and countries (a reference table), with
rows written through the proxy. sqlsmith reads the schema through the proxy (catalog
queries), then sends random queries — joins, sub-selects, window functions, lateral
joins, CTEs, TABLESAMPLE, FOR UPDATE, INSERT/UPDATE/DELETE/MERGE with RETURNING — with
fixed seeds, so every run sends the same statements. Checked: sqlsmith finishes every
round (it stops at the first lost connection), the proxy stays up, its memory stays
flat between rounds (RSS after the last round within 32 MB of after the first), it
logs nothing at level error, and a plain query still answers exactly afterwards.
"""
# test-timeout: 300

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402

ROUNDS = [(1, 1500), (2, 1500), (3, 1500)]  # (seed, queries)


def main():
    dbs = sptest.Databases("sm")
    for i in range(2):
        c = dbs.shard(i)
        c.cursor().execute("CREATE TABLE users (id bigint PRIMARY KEY, name text, email text, created date);"
                           "CREATE TABLE orders (id bigint, user_id bigint, total numeric(10,2), status text);"
                           "CREATE TABLE countries (code text PRIMARY KEY, name text)")
        c.close()
    p0, p1 = sptest.PG_PORTS
    body = f"""
    auth: scram-sha-256
    users: [ {{ name: app, password: secret }} ]
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {dbs.name}, user: app, password: secret, pool_size: 4 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {dbs.name}, user: app, password: secret, pool_size: 4 }}
    distributions:
      - {{ name: d, method: hash, partitions: 8, tables: {{ users: id, orders: user_id }} }}
    reference_tables: [countries]
    scatter: {{ deadline: 2s, max_buffered_rows: 100000, max_combine_rows: 100000 }}
    """
    proxy = sptest.Proxy("sqlsmith", body, sptest.workdir("sqlsmith")).start()
    failures = []
    try:
        c = proxy.connect(dbs.name)
        cur = c.cursor()
        cur.execute("INSERT INTO countries VALUES ('jp', 'Japan'), ('us', 'USA'), ('fr', NULL)")
        cur.execute("INSERT INTO users VALUES " + ",".join(
            f"({g}, 'n{g}', 'e{g}', date '2026-01-01' + {g})" for g in range(1, 201)))
        cur.execute("INSERT INTO orders VALUES " + ",".join(f"({g}, {g % 50}, {g * 1.5}, 'ok')" for g in range(1, 401)))
        c.close()
        target = f"host={sptest.HOST} port={proxy.port} dbname={dbs.name} user=app password=secret"
        sizes = []
        for seed, n in ROUNDS:
            r = subprocess.run(["sqlsmith", f"--target={target}", f"--seed={seed}", f"--max-queries={n}",
                                "--exclude-catalog", "--verbose"], capture_output=True, text=True, timeout=200)
            errors = [line for line in r.stderr.splitlines() if line[:1].isdigit() and "\t" in line]
            rate = next((line for line in r.stderr.splitlines() if line.startswith("error rate")), "")
            print(f"     seed {seed}: {n} queries, exit {r.returncode}, {rate}; {len(errors)} distinct errors")
            if r.returncode != 0:
                failures.append(f"sqlsmith seed {seed} exited {r.returncode}: {r.stderr[-1500:]}")
            lost = [e for e in errors if "connection" in e.lower() and "lost" in e.lower()]
            if lost:
                failures.append(f"seed {seed}: connections lost: {lost[:3]}")
            if not proxy.alive():
                failures.append(f"the proxy died during seed {seed}: {proxy.state()}")
                break
            sizes.append(sptest.rss_kb(proxy.proc.pid))
        print(f"     proxy RSS after each round: {', '.join(f'{s // 1024} MB' for s in sizes)}")
        if len(sizes) == len(ROUNDS) and sizes[-1] - sizes[0] > 32 * 1024:
            failures.append(f"RSS grew from {sizes[0]} kB to {sizes[-1]} kB")
        bad = [line for line in proxy.log_text().splitlines() if "] [error]" in line or "] [critical]" in line]
        if bad:
            failures.append(f"proxy logged errors: {bad[:5]}")
        if proxy.alive():
            c = proxy.connect(dbs.name)
            cur = c.cursor()
            cur.execute("SELECT count(*) FROM countries")
            n_proxy = cur.fetchone()[0]
            c.close()
            d = dbs.shard(0)
            dc = d.cursor()
            dc.execute("SELECT count(*) FROM countries")
            if dc.fetchone()[0] != n_proxy:
                failures.append("countries differs between the proxy's answer and shard s0")
            d.close()
    finally:
        proxy.stop()
        dbs.drop()
    for f in failures:
        print("FAIL", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
