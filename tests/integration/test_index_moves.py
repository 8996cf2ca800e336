#!/usr/bin/env python3
"""Global indexes move with the cluster (SPEC §12, §9; issue #47): with a catalog, a
partition of the indexed table and a partition of the index's own entries'
distribution (`splitpoint.users_email_key`) are moved to the other shard while 4
clients insert, re-email and delete users; afterwards CHECK INDEX is clean (no entry
missing, none orphaned, each on the shard that owns it) and a read by email still goes
to one shard and finds its row."""
# test-timeout: 240

import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import sptest  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("index_moves")
DBS = PROXY = None


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
        method: hash
        partitions: 8
        placement: {{ s0: 0-3, s1: 4-7 }}
        tables: {{ users: id }}
    indexes:
      - {{ table: users, columns: [email], unique: true }}
    catalog: s0
    moves: {{ max_hold: 5s, poll: 100ms, lease: 2s }}
    """


def admin(sql):
    return sptest.admin(PROXY.port, sql)


def wait(what, fn, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what} after {timeout}s"
        time.sleep(0.05)


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("gsim")
    PROXY = sptest.Proxy("index_moves", config(DBS.name), WORK).start()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE users (id bigint PRIMARY KEY, email text UNIQUE, city text)")
    cur.execute("INSERT INTO users SELECT g, 'u' || g || '@x', 'c' FROM generate_series(1, 400) g")
    c.close()
    wait("index ready", lambda: [r for r in admin("SHOW INDEXES") if r[4] == "ready"])


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


def moves_under_writes():
    stop = threading.Event()
    errors, done = [], [0]

    def writer(n):
        rnd = random.Random(n)
        c = PROXY.connect(DBS.name)
        cur = c.cursor()
        i = 0
        while not stop.is_set():
            i += 1
            key = 10000 + n * 10000 + i
            try:
                cur.execute("INSERT INTO users VALUES (%s, %s, 'w')", (key, f"w{key}@x"))
                victim = rnd.randint(1, 400)
                cur.execute("UPDATE users SET email = %s WHERE id = %s", (f"r{victim}-{key}@x", victim))
                if rnd.random() < 0.3:
                    cur.execute("DELETE FROM users WHERE id = %s", (key,))
                done[0] += 1
            except psycopg2.Error as e:
                if e.pgcode not in ("SPM01", "40001", "40P01"):  # (a fenced or retried write: the client retries)
                    errors.append((e.pgcode, str(e)))
        c.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    try:
        for what in ("by_id:1", "splitpoint.users_email_key:2"):
            move = int(admin(f"MOVE PARTITION {what} TO s1")[0][0])
            wait(f"move {what}", lambda: [r for r in admin("SHOW MOVES ALL")
                                          if int(r[0]) == move and r[5] in ("done", "failed", "cancelled")])
            state = [r for r in admin("SHOW MOVES ALL") if int(r[0]) == move][0]
            assert state[5] == "done", state
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:5]
    assert done[0] > 50, done
    check = admin("CHECK INDEX users_email_key")[0]
    assert (check[3], check[4]) == ("0", "0"), check
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("SELECT id FROM users WHERE email = 'w10001@x' OR id = -1")  # (any shard may hold it)
    cur.execute("SELECT email FROM users WHERE id = 400")
    email = cur.fetchone()[0]
    cur.execute("SELECT id FROM users WHERE email = %s", (email,))
    assert cur.fetchall() == [(400,)]
    c.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([moves_under_writes], setup=setup, teardown=teardown, watch=lambda: [PROXY]))
