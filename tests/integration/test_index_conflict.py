#!/usr/bin/env python3
"""ON CONFLICT judged by a global unique index, and TRUNCATE of an indexed table (SPEC 12,
issue #47, docs/indexes.md).

Three shards (s0, s1 on the shared instances, s2 a second database on instance 0) and a
plain PostgreSQL database (`plain`, on instance 1): `users (id bigint PRIMARY KEY, email
text UNIQUE, city text)` hashed by id, a unique global index on email, a non-unique one
on city. The same statements through splitpoint and on plain PostgreSQL:
- on_conflict_simple (psycopg2, simple protocol) and on_conflict_extended (psycopg 3,
  server-side parameters): ON CONFLICT (email) / ON CONSTRAINT users_email_key / without
  a target DO NOTHING, with and without RETURNING, over values held on the row's own
  shard and on others, multi-row, inside a block and its rollback; ON CONFLICT (id) DO
  NOTHING / DO UPDATE refusing a duplicate email with 23505; DO UPDATE with the conflict
  on the row's own shard: same rows, tags, RETURNING rows and errors; afterwards every
  shard's entries exactly the rows' values;
- do_update_elsewhere: DO UPDATE whose conflicting row is on another shard is refused with
  0A000 and changes nothing; several rows with RETURNING, some taken back, too;
- racing_do_nothing: 8 clients inserting the same 100 emails with ON CONFLICT (email) DO
  NOTHING RETURNING id: one row per email, each client's RETURNING rows its tag's count;
- truncate: TRUNCATE through the proxy empties the entries in the same transaction (a
  TRUNCATE rolled back keeps rows and entries); a value the table held is free again.
"""
# test-timeout: 120

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import gsi  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg")
import psycopg  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("index_conflict")
SETTING = gsi.Setting("gic", "index_conflict", WORK)


def proxy():
    return SETTING.proxy.connect(SETTING.dbs.name)


def shard_of(id_):
    """Which shard (0..2) holds row `id_`."""
    for i, (port, db) in enumerate(SETTING.shard_dbs()):
        if sptest.query(port, db, "SELECT 1 FROM users WHERE id = %s", (id_,)):
            return i
    return None


def script():
    """(sql, params) steps: ids 10..29 against the emails of ids 1..3, spread over every shard."""
    steps = [("INSERT INTO users VALUES (1, 'a@x', 'paris'), (2, 'b@x', 'rome'), (3, 'c@x', 'oslo')", None)]
    for i in range(10, 30):
        email = "abc"[i % 3] + "@x"
        steps += [
            (f"INSERT INTO users VALUES ({i}, '{email}', 'lima') ON CONFLICT (email) DO NOTHING", None),
            (f"INSERT INTO users VALUES ({i}, %s, 'lima') ON CONFLICT DO NOTHING RETURNING id, email", (email,)),
            (f"INSERT INTO users VALUES ({i}, '{email}', 'lima') ON CONFLICT ON CONSTRAINT users_email_key "
             "DO NOTHING RETURNING *", None),
            (f"INSERT INTO users VALUES ({i}, '{email}', 'lima') ON CONFLICT (id) DO NOTHING", None),
            (f"INSERT INTO users VALUES ({i}, '{email}', 'lima') ON CONFLICT (id) DO UPDATE SET city = 'x'", None),
        ]
    steps += [
        ("INSERT INTO users VALUES (40, 'a@x', 'nice'), (41, 'n41@x', 'nice'), (42, 'b@x', 'nice'), "
         "(43, 'n43@x', 'nice'), (44, 'c@x', 'nice') ON CONFLICT (email) DO NOTHING", None),
        ("INSERT INTO users VALUES (45, 'a@x', 'nice'), (46, 'b@x', 'nice') ON CONFLICT DO NOTHING RETURNING id", None),
        ("INSERT INTO users VALUES (47, 'n47@x', 'nice') ON CONFLICT (email) DO NOTHING RETURNING id", None),
        ("INSERT INTO users VALUES (48, 'n48@x', 'kiev') ON CONFLICT (email) DO UPDATE SET city = excluded.city "
         "RETURNING *", None),
        ("INSERT INTO users VALUES (1, 'a@x', 'rome') ON CONFLICT (email) DO UPDATE SET city = excluded.city "
         "RETURNING *", None),
        ("INSERT INTO users VALUES (41, 'zz@x', 'rome') ON CONFLICT (id) DO UPDATE SET email = 'b@x'", None),
        ("BEGIN", None),
        ("INSERT INTO users VALUES (50, 'txn@x', 'kiev')", None),
        ("INSERT INTO users VALUES (51, 'txn@x', 'kiev') ON CONFLICT (email) DO NOTHING", None),
        ("INSERT INTO users VALUES (52, 'a@x', 'kiev'), (53, 'n53@x', 'kiev') ON CONFLICT DO NOTHING", None),
        ("SELECT id, email FROM users WHERE id >= 50 ORDER BY id", None),
        ("ROLLBACK", None),
        ("INSERT INTO users VALUES (51, 'txn@x', 'kiev') ON CONFLICT (email) DO NOTHING RETURNING id", None),
        ("DELETE FROM users WHERE id = 2", None),
        ("INSERT INTO users VALUES (54, 'b@x', 'kiev') ON CONFLICT (email) DO NOTHING", None),
        ("SELECT id, email, city FROM users ORDER BY id", None),
    ]
    return steps


def psycopg3_outcome(conn, sql, params):
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        return ("ok", cur.statusmessage, cur.fetchall() if cur.description else None)
    except psycopg.Error as e:
        d = e.diag
        return ("error", d.sqlstate, d.message_primary, d.message_detail, d.constraint_name, d.schema_name,
                d.table_name)


def reset():
    for c in (proxy(), SETTING.plain.shard(1)):
        c.cursor().execute("DELETE FROM users")
        c.close()


def compare(run_plain, run_proxy):
    for sql, params in script():
        e, g = run_plain(sql, params), run_proxy(sql, params)
        assert e == g, f"{sql} {params}\n  plain PostgreSQL: {e}\n  splitpoint:       {g}"
    SETTING.entries_match_rows()


def on_conflict_simple():
    reset()
    got_c, exp_c = proxy(), SETTING.plain.shard(1)
    got, exp = got_c.cursor(), exp_c.cursor()
    compare(lambda s, p: gsi.outcome(exp, s, p), lambda s, p: gsi.outcome(got, s, p))
    got_c.close()
    exp_c.close()


def on_conflict_extended():
    reset()

    def connect3(port, db):
        return psycopg.connect(host=sptest.HOST, port=port, dbname=db, user="app", password="secret",
                               autocommit=True, prepare_threshold=None)

    plain = connect3(sptest.PG_PORTS[1], SETTING.plain.name)
    proxy = connect3(SETTING.proxy.port, SETTING.dbs.name)
    with plain, proxy:
        # (psycopg 3 sends every statement as Parse/Bind/Execute.)
        def ext(conn):
            return lambda s, p: psycopg3_outcome(conn, s, p)
        compare(ext(plain), ext(proxy))


def do_update_elsewhere():
    """DO UPDATE whose conflicting row lives on another shard: 0A000, nothing changed."""
    reset()
    c = proxy()
    cur = c.cursor()
    cur.execute("INSERT INTO users VALUES (1, 'a@x', 'paris')")
    home = shard_of(1)
    refused = done = 0
    for i in range(100, 130):
        try:
            cur.execute(f"INSERT INTO users VALUES ({i}, 'a@x', 'lima') ON CONFLICT (email) "
                        "DO UPDATE SET city = excluded.city || %s", (str(i),))
            done += 1
            assert cur.statusmessage == "INSERT 0 1", cur.statusmessage
        except psycopg2.Error as e:
            assert e.pgcode == "0A000" and "users_email_key" in e.diag.message_primary, e
            refused += 1
    assert refused > 0 and done > 0, (refused, done)
    cur.execute("SELECT id, email FROM users ORDER BY id")
    assert cur.fetchall() == [(1, "a@x")]
    assert shard_of(1) == home
    # Several rows with RETURNING, one taken back: refused, nothing inserted.
    other = None
    for i in range(200, 300):
        cur.execute("INSERT INTO users VALUES (%s, 'probe@x', NULL)", (i,))
        if shard_of(i) != home:
            other = i
        cur.execute("DELETE FROM users WHERE id = %s", (i,))
        if other:
            break
    cur.execute("DELETE FROM users WHERE email = 'probe@x'")
    try:
        cur.execute(f"INSERT INTO users VALUES ({other}, 'a@x', NULL), (301, 'z@x', NULL) ON CONFLICT DO NOTHING RETURNING id")
        raise AssertionError("accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "0A000", e
    cur.execute("SELECT id FROM users ORDER BY id")
    assert cur.fetchall() == [(1,)]
    SETTING.entries_match_rows()
    c.close()


def racing_do_nothing():
    """8 clients, the same 100 emails, ON CONFLICT (email) DO NOTHING RETURNING id."""
    reset()
    won, errors = [], []

    def run(n):
        c = proxy()
        c.autocommit = True
        cur = c.cursor()
        for i in sorted(range(100), key=lambda k: (k * (n + 3)) % 101):
            try:
                cur.execute("INSERT INTO users VALUES (%s, %s, 'race') ON CONFLICT (email) DO NOTHING RETURNING id",
                            (1000 + n * 1000 + i, f"race{i}@x"))
                rows = cur.fetchall()
                if cur.statusmessage != f"INSERT 0 {len(rows)}":
                    errors.append((cur.statusmessage, rows))
                won.extend(r[0] % 1000 for r in rows)
            except psycopg2.Error as e:
                errors.append((e.pgcode, str(e)))
        c.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert sorted(won) == list(range(100)), f"{len(won)} winners for 100 emails"
    c = proxy()
    cur = c.cursor()
    cur.execute("SELECT count(*), count(DISTINCT email) FROM users")
    assert cur.fetchone() == (100, 100)
    c.close()
    SETTING.entries_match_rows()


def truncate():
    reset()
    c = proxy()
    cur = c.cursor()
    cur.execute("INSERT INTO users SELECT g, 'u' || g || '@x', 'c' || g % 3 FROM generate_series(1, 30) g")
    c.autocommit = False
    cur.execute("TRUNCATE users")
    c.rollback()
    c.autocommit = True
    cur.execute("SELECT count(*) FROM users")
    assert cur.fetchone() == (30,)
    SETTING.entries_match_rows()
    cur.execute("TRUNCATE users")
    assert SETTING.on_shards("SELECT count(*) FROM splitpoint.users_email_key_entries") == [(0,)] * 3
    SETTING.entries_match_rows()
    cur.execute("INSERT INTO users VALUES (100, 'u7@x', NULL)")
    cur.execute("SELECT id FROM users WHERE email = 'u7@x'")
    assert cur.fetchall() == [(100,)]
    SETTING.entries_match_rows()
    r = sptest.admin(SETTING.proxy.port, "CHECK INDEX users_email_key")[0]
    assert (r[3], r[4]) == ("0", "0"), r
    c.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([on_conflict_simple, on_conflict_extended, do_update_elsewhere, racing_do_nothing,
                               truncate],
                              setup=SETTING.start, teardown=SETTING.stop, watch=lambda: [SETTING.proxy]))
