#!/usr/bin/env python3
"""Global indexes move with the cluster (SPEC §12, §9; issue #47): with a catalog, a
partition of the indexed table and a partition of the index's own entries'
distribution (`splitpoint.users_email_key`) are moved to the other shard while 4
clients insert, re-email and delete users; afterwards CHECK INDEX is clean (no entry
missing, none orphaned, each on the shard that owns it) and a read by email still goes
to one shard and finds its row. Then, still under writes, a SPLIT PARTITION of the
entries' distribution and one of the table's, each new half moved to the other shard:
CHECK INDEX clean, every row found by its email, and an email whose entry or row is in
either half of a split refused as a duplicate with 23505 (users_email_key)."""
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


def move(what, to):
    """MOVE PARTITION `what` TO `to`, until it is done."""
    mid = int(admin(f"MOVE PARTITION {what} TO {to}")[0][0])
    wait(f"move {what}", lambda: [r for r in admin("SHOW MOVES ALL")
                                  if int(r[0]) == mid and r[5] in ("done", "failed", "cancelled")])
    state = [r for r in admin("SHOW MOVES ALL") if int(r[0]) == mid][0]
    assert state[5] == "done", state


def under_writes(base, changes):
    """Runs `changes()` while 4 clients insert (ids from `base`), re-email and delete users;
    asserts no client saw an error other than a fenced or retried write and some wrote."""
    stop = threading.Event()
    errors, done = [], [0]

    def writer(n):
        rnd = random.Random(base + n)
        c = PROXY.connect(DBS.name)
        cur = c.cursor()
        i = 0
        while not stop.is_set():
            i += 1
            key = base + n * 10000 + i
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
        changes()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:5]
    assert done[0] > 50, done


def check_clean():
    check = admin("CHECK INDEX users_email_key")[0]
    assert (check[3], check[4]) == ("0", "0"), check


def moves_under_writes():
    def changes():
        move("by_id:1", "s1")
        move("splitpoint.users_email_key:2", "s1")

    under_writes(10000, changes)
    check_clean()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("SELECT id FROM users WHERE email = 'w10001@x' OR id = -1")  # (any shard may hold it)
    cur.execute("SELECT email FROM users WHERE id = 400")
    email = cur.fetchone()[0]
    cur.execute("SELECT id FROM users WHERE email = %s", (email,))
    assert cur.fetchall() == [(400,)]
    c.close()


def split_and_move(part):
    """SPLIT PARTITION `part`, then the new half moved to the other shard; the new half's number."""
    halves = admin(f"SPLIT PARTITION {part}")
    assert len(halves) == 2 and halves[0][4] == halves[1][4], halves
    new = halves[1]
    move(f"{new[0]}:{new[1]}", "s1" if new[4] == "s0" else "s0")
    return int(new[1])


def splits_under_writes():
    """A split of the entries' own distribution and one of the table's, each half moved away,
    while clients write: no entry missing or orphaned, every row found by its email, and
    a value held in either half still refused with 23505."""
    new = []

    def changes():
        new.append(split_and_move("splitpoint.users_email_key:1"))
        new.append(split_and_move("by_id:2"))

    under_writes(100000, changes)
    check_clean()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("SELECT id, email FROM users")
    rows = cur.fetchall()
    assert len(rows) > 400, len(rows)
    for key, email in rows:
        cur.execute("SELECT id FROM users WHERE email = %s", (email,))
        assert cur.fetchall() == [(key,)], (key, email)
    halves = {f"splitpoint.users_email_key:{p}": [] for p in (1, new[0])}
    halves.update({f"by_id:{p}": [] for p in (2, new[1])})
    console_conn = sptest.connect(PROXY.port, "splitpoint", "admin", "adminpw")
    console = console_conn.cursor()
    for key, email in rows:
        for sql in (f"SELECT * FROM splitpoint.users_email_key_entries WHERE email = '{email}'",
                    f"SELECT * FROM users WHERE id = {key}"):
            console.execute(f"SHOW ROUTE {sql}")
            held = halves.get(console.fetchone()[2])
            if held is not None and len(held) < 10:
                held.append(email)
    console_conn.close()
    assert all(len(v) == 10 for v in halves.values()), halves
    for n, email in enumerate(e for v in halves.values() for e in v):
        try:
            cur.execute("INSERT INTO users VALUES (%s, %s, 'd')", (-1 - n, email))
            raise AssertionError(f"duplicate {email} accepted")
        except psycopg2.Error as e:
            assert (e.pgcode, e.diag.constraint_name) == ("23505", "users_email_key"), (email, str(e))
    c.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([moves_under_writes, splits_under_writes], setup=setup, teardown=teardown, watch=lambda: [PROXY]))
