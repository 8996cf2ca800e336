#!/usr/bin/env python3
"""SHOW SPLIT ADVICE from the first split onwards (#48): the issue's scenario, as a new user
would try it.

A range distribution by_id over items(id) with two ranges, (-inf, 1000) on s0 and
[1000, inf) on s1; ids 0..499 loaded on s0 directly (not through the proxy, whose key
trend sees only the load below). For 6 seconds, two writers insert ever-increasing ids
above 1000 (interleaved: writer w inserts 1001 + 2i + w) and four update random ids in
[0, 500) through one proxy. Then SHOW SPLIT ADVICE must:
- name by_id:1 (s1) "monotonic", advising to hash or salt the key since splitting will not
  help (it returned no row before: "twice an even share" cannot fire with two partitions);
- name by_id:0 (s0) exactly when its share of rows written is dominant (at least 60%,
  compared with SHOW PARTITIONS' own counts), with a SPLIT RANGE at the median of its
  sampled keys, inside [0, 500), and a move of the upper half to s1;
- and nothing before any load.
"""
# test-timeout: 120

import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402

WORKDIR = sptest.workdir("split-advice")
DB = None
P = None
TESTS = []
SECONDS = 6


def config(db):
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: postgres, password: postgres, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: postgres, password: postgres, pool_size: 10 }}
    distributions:
      - name: by_id
        method: range
        ranges:
          - {{ upto: 1000, shard: s0 }}
          - {{ shard: s1 }}
        tables: {{ items: id }}
    """


def test(fn):
    TESTS.append(fn)
    return fn


def setup():
    global DB, P
    DB = sptest.Databases("sa").name
    P = sptest.Proxy("split-advice", config(DB), WORKDIR)
    P.start()
    c = P.connect(DB)
    c.cursor().execute("CREATE TABLE items (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    c.close()
    d = sptest.connect(sptest.PG_PORTS[0], DB, "postgres", "postgres")
    d.cursor().execute("INSERT INTO items SELECT g, 0 FROM generate_series(0, 499) g")
    d.close()


def advice():
    return [r for r in sptest.admin(P.port, "SHOW SPLIT ADVICE") if r[0] == "by_id"]


def run_load():
    stop = threading.Event()
    errors, counts = [], {"insert": 0, "update": 0}
    lock = threading.Lock()

    def writer(w):
        c = P.connect(DB)
        cur = c.cursor()
        i = 0
        while not stop.is_set():
            try:
                cur.execute("INSERT INTO items (id, n) VALUES (%s, 0)", (1001 + 2 * i + w,))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
            i += 1
            with lock:
                counts["insert"] += 1
        c.close()

    def updater(seed):
        rng = random.Random(seed)
        c = P.connect(DB)
        cur = c.cursor()
        while not stop.is_set():
            try:
                cur.execute("UPDATE items SET n = n + 1 WHERE id = %s", (rng.randrange(500),))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
            with lock:
                counts["update"] += 1
        c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    threads += [threading.Thread(target=updater, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    return counts


@test
def no_advice_without_load():
    assert advice() == [], advice()


@test
def issue_scenario():
    counts = run_load()
    parts = {int(r[1]): r for r in sptest.admin(P.port, "SHOW PARTITIONS") if r[0] == "by_id"}
    written = [int(parts[p][4]) for p in (0, 1)]
    share0 = written[0] / sum(written)
    rows = advice()
    print(f"  {counts}, rows written {written} (by_id:0 share {share0:.2f})")
    for r in rows:
        print(f"  advice: {r}")
    by_part = {r[1]: r for r in rows}
    mono = by_part.get("1")
    assert mono is not None, rows
    assert mono[2] == "s1" and mono[3] == "monotonic", mono
    assert "splitting will not help" in mono[6] and "hash the key" in mono[6] and "salt" in mono[6], mono
    assert abs(float(mono[4]) - written[1] / sum(written)) < 0.02, (mono, written)
    # by_id:0: advised exactly when it holds a dominant share (60%) of the rows written.
    hot = by_part.get("0")
    if share0 >= 0.6:
        assert hot is not None and hot[3] == "rows_written" and hot[2] == "s0", rows
        at = hot[6].split("SPLIT RANGE by_id AT ")[1].split(")")[0]
        assert 0 < int(at) < 500, hot
        assert "MOVE PARTITION by_id:1 TO s1" in hot[6], hot
    else:
        assert hot is None, rows
    # The updaters' range takes the larger part (4 clients against 2); whether it reaches
    # 60% depends on the machine (0.61 to 0.67 seen alone, 0.48 on a machine loaded with
    # builds): the check above holds either way. This only says the updaters ran.
    assert share0 > 0.35, f"the load gave by_id:0 only {share0:.2f} of the writes: the scenario did not happen"


def teardown():
    if P:
        P.stop()
    sptest.drop_databases(DB) if DB else None


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
