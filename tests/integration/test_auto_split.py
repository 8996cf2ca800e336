#!/usr/bin/env python3
"""Automatic splits (#48, SPEC §13: moves.auto_split), on one proxy and a catalog in a
database of its own. A range distribution by_id over items(id), (-inf, 1000) on s0 and
[1000, inf) on s1, holding ids 0..1999 (loaded on the shards directly, so that the
proxy's key sample sees only the load below); window 1 s, interval 3 s.

- advise: four clients update random ids in [100, 200) (all on by_id:0); the log says it
  would SPLIT RANGE by_id AT a key in [100, 200) and move the upper half to s1, with the
  share and the window that caused it; the ranges and the moves stay as they were.
- on (a reload): under the same load the proxy splits by_id:0 at a key in [100, 200)
  and moves the upper half to s1 (SHOW MOVES: its reason holds the figures); no client
  error; every row written is readable through the proxy, and each shard holds exactly
  the ids of its ranges.
- monotonic: two clients insert increasing ids from 2000 (all on the last range); the
  log says why it does not split (keys only increase: hash or salt), and nothing is split
  or moved.
- auto_merge (a reload: auto_split off, auto_merge on): four clients update ids in
  [0, 100) (all on by_id:0); the two ranges on s1 (by_id:1 and by_id:2), cold together,
  merge into one (MERGE RANGE by_id AT 1000, logged with the figures); no client error,
  the rows stay where the ranges say.
"""
# test-timeout: 120

import os
import random
import re
import secrets
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402
import split_load  # noqa: E402
from split_load import admin, wait_move  # noqa: E402

WORKDIR = sptest.workdir("auto-split")
DB = CAT = P = None
TESTS = []
WRITTEN = set(range(2000))


def config(mode, merge="off"):
    dsn = f"'host=127.0.0.1 port={sptest.PG_PORTS[1]} dbname={CAT} user=postgres password=postgres'"
    return split_load.config_head(DB) + f"""
    distributions:
      - name: by_id
        method: range
        ranges:
          - {{ upto: 1000, shard: s0 }}
          - {{ shard: s1 }}
        tables: {{ items: id }}
    catalog: {dsn}
    moves: {{ max_hold: 5s, poll: 100ms, lease: 2s, auto_split: {mode}, auto_merge: {merge},
             auto_split_window: 1s, auto_split_interval: 3s }}
    """


def test(fn):
    TESTS.append(fn)
    return fn


def direct(i, sql):
    return sptest.query(sptest.PG_PORTS[i], DB, sql, None, "postgres", "postgres")


def ranges():
    return [(int(r[1]), r[5], r[6], r[2]) for r in admin(P, "SHOW PARTITIONS") if r[0] == "by_id"]


def wait_for(what, fn, timeout=45):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout}s")


def log_lines(pattern):
    return [line for line in P.log_text().splitlines() if re.search(pattern, line)]


class Load:
    """`n` clients through P for the duration of a `with`: updates of random ids in
    `ids` ([100, 200)), or (monotonic) inserts of increasing ids from 2000."""

    def __init__(self, n, monotonic=False, ids=(100, 200)):
        self.n, self.monotonic, self.ids = n, monotonic, ids
        self.stop, self.errors, self.lock, self.next = threading.Event(), [], threading.Lock(), [2000]

    def client(self, seed):
        rng = random.Random(seed)
        c = P.connect(DB)
        cur = c.cursor()
        while not self.stop.is_set():
            try:
                if self.monotonic:
                    with self.lock:
                        key = self.next[0]
                        self.next[0] += 1
                    cur.execute("INSERT INTO items (id, n) VALUES (%s, 0)", (key,))
                    with self.lock:
                        WRITTEN.add(key)
                else:
                    cur.execute("UPDATE items SET n = n + 1 WHERE id = %s", (rng.randrange(*self.ids),))
                    assert cur.rowcount == 1, cur.rowcount
            except Exception as e:  # noqa: BLE001
                self.errors.append(repr(e))
                return
        c.close()

    def __enter__(self):
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(self.n)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not self.errors, self.errors[:5]


def setup():
    global DB, CAT, P
    CAT = "ascat_" + secrets.token_hex(4)
    sptest.create_databases(CAT)
    DB = sptest.Databases("as").name
    split_load.DB = DB
    P = sptest.Proxy("auto-split", config("advise"), WORKDIR)
    P.start()
    c = P.connect(DB)
    c.cursor().execute("CREATE TABLE items (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
    c.close()
    direct(0, "INSERT INTO items SELECT g, 0 FROM generate_series(0, 999) g")
    direct(1, "INSERT INTO items SELECT g, 0 FROM generate_series(1000, 1999) g")


@test
def advise_only_logs():
    with Load(4):
        line = wait_for("advise line", lambda: log_lines(r"auto split \(advise\): would SPLIT RANGE by_id AT"))[0]
    print(f"  {line}")
    at = int(re.search(r"AT (\d+)", line).group(1))
    assert 100 <= at < 200, line
    assert "then move the upper half" in line and " to s1: by_id:0 on s0 had " in line, line
    share = float(re.search(r"had ([0-9.]+) of the", line).group(1))
    assert share >= 0.6, line
    assert re.search(r"over the last 1\.\d s .* advised for 1\.\d s", line), line
    assert ranges() == [(0, None, "1000", "s0"), (1, "1000", None, "s1")], ranges()
    assert admin(P, "SHOW MOVES ALL") == [], admin(P, "SHOW MOVES ALL")


@test
def on_splits_and_moves_the_hot_half():
    with Load(4):
        P.reload(config("on"))
        moves = wait_for("automatic move", lambda: admin(P, "SHOW MOVES ALL"))
        assert len(moves) == 1, moves
        done = wait_move(P, int(moves[0][0]), timeout=60)
    print(f"  move: {done}")
    reason = done[-1] or ""
    assert reason.startswith("auto split: by_id:0 on s0 had ") and "SPLIT RANGE by_id AT" in reason, done
    assert reason.endswith("to the least-loaded shard, s1"), done
    at = int(re.search(r"AT (\d+)", reason).group(1))
    assert 100 <= at < 200, reason
    assert (done[1], done[2], done[3], done[4]) == ("by_id", "1", "s0", "s1"), done
    assert ranges() == [(0, None, str(at), "s0"), (1, str(at), "1000", "s1"), (2, "1000", None, "s1")], ranges()
    assert log_lines(r"auto split: SPLIT RANGE by_id AT %d, then the upper half .* to s1: by_id:0" % at), \
        P.log_tail()
    check_rows(at)


def check_rows(at):
    c = P.connect(DB)
    cur = c.cursor()
    cur.execute("SELECT id FROM items")
    got = [r[0] for r in cur.fetchall()]
    c.close()
    assert len(got) == len(WRITTEN) and set(got) == WRITTEN, (len(got), len(WRITTEN))
    s0 = {r[0] for r in direct(0, "SELECT id FROM items")}
    s1 = {r[0] for r in direct(1, "SELECT id FROM items")}
    assert s0 == {k for k in WRITTEN if k < at}, sorted(s0 ^ {k for k in WRITTEN if k < at})[:10]
    assert s1 == {k for k in WRITTEN if k >= at}, sorted(s1 ^ {k for k in WRITTEN if k >= at})[:10]


@test
def monotonic_keys_are_not_split():
    before = ranges()
    with Load(2, monotonic=True):
        line = wait_for("monotonic note", lambda: log_lines(r"auto split: not splitting by_id:2 on s1"))[0]
    print(f"  {line}")
    assert "its keys only increase" in line and "hash or salt the key" in line, line
    assert ranges() == before, ranges()
    assert len(admin(P, "SHOW MOVES ALL")) == 1
    assert not log_lines(r"auto split: SPLIT RANGE by_id AT (?!%s)" % before[1][1]), P.log_tail()
    check_rows(int(before[1][1]))


@test
def cold_neighbours_merge():
    before = ranges()
    assert len(before) == 3 and before[1][3] == before[2][3] == "s1", before
    at = int(before[1][1])
    with Load(4, ids=(0, 100)):
        P.reload(config("off", merge="on"))
        wait_for("merge", lambda: len(ranges()) == 2)
    line = log_lines(r"auto merge: MERGE RANGE by_id AT 1000: by_id:1 and its neighbour on s1 had together")
    assert line, P.log_tail()
    print(f"  {line[0]}")
    assert ranges() == [(0, None, str(at), "s0"), (1, str(at), None, "s1")], ranges()
    assert len(admin(P, "SHOW MOVES ALL")) == 1  # a merge moves no row
    check_rows(at)


def teardown():
    if P:
        P.stop()
    if DB:
        sptest.drop_databases(DB)
    if CAT:
        sptest.drop_databases(CAT)


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
