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
  shard and on others, multi-row, inside a block and its rollback; DO UPDATE (SET from
  EXCLUDED and the row, an alias, a WHERE true or false, RETURNING, a value proposed
  twice: 21000, an update onto a taken value: 23505); ON CONFLICT (id) DO
  NOTHING / DO UPDATE refusing a duplicate email with 23505; DO UPDATE with the conflict
  on the row's own shard: same rows, tags, RETURNING rows and errors; afterwards every
  shard's entries exactly the rows' values;
- do_update_elsewhere: DO UPDATE whose conflicting row is on another shard updates it;
  with a parameter in its SET (extended protocol) it is refused with 0A000 and changes
  nothing; several rows with RETURNING, some taken back, too;
- racing_do_nothing: 8 clients inserting the same 100 emails with ON CONFLICT (email) DO
  NOTHING RETURNING id: one row per email, each client's RETURNING rows its tag's count;
- racing_do_update: 8 clients, the same 50 emails, DO UPDATE adding one to a count: one
  row per email, each count 8;
- truncate: TRUNCATE through the proxy empties the entries in the same transaction (a
  TRUNCATE rolled back keeps rows and entries); a value the table held is free again;
  TRUNCATE ... CASCADE of a table users references empties users' entries too;
- execute_of_prepared: EXECUTE of a SQL-PREPAREd INSERT ... ON CONFLICT DO NOTHING / DO
  UPDATE, differential.
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
            (f"INSERT INTO users VALUES ({i}, '{email}', 'l{i}') ON CONFLICT (email) DO UPDATE SET city = "
             "excluded.city || '-' || users.id RETURNING *", None),
            (f"INSERT INTO users AS u VALUES ({i}, '{email}', 'm{i}') ON CONFLICT ON CONSTRAINT users_email_key "
             "DO UPDATE SET city = u.city || excluded.city WHERE u.city LIKE 'l%' RETURNING u.id, u.city", None),
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
        ("INSERT INTO users VALUES (60, 'a@x', 'x'), (61, 'b@x', 'y'), (62, 'c@x', 'z') ON CONFLICT (email) "
         "DO UPDATE SET city = excluded.city", None),
        ("INSERT INTO users VALUES (63, 'q@x', 'x'), (64, 'q@x', 'y') ON CONFLICT (email) DO UPDATE SET city = 'z'", None),
        ("INSERT INTO users VALUES (65, 'a@x', 'x') ON CONFLICT (email) DO UPDATE SET city = 'never' "
         "WHERE users.city = 'nomatch' RETURNING id", None),
        ("INSERT INTO users VALUES (66, 'a@x', 'x') ON CONFLICT (email) DO UPDATE SET email = 'c@x'", None),
        ("INSERT INTO users VALUES (67, 'a@x', 'x') ON CONFLICT (email) DO UPDATE SET email = 'a2@x' RETURNING *", None),
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
    """DO UPDATE whose conflicting row lives on another shard updates that row; with a
    parameter in its SET (extended protocol) it is refused with 0A000 and changes nothing;
    several rows with RETURNING, some taken back, are refused too."""
    reset()
    c = proxy()
    cur = c.cursor()
    cur.execute("INSERT INTO users VALUES (1, 'a@x', 'paris')")
    home = shard_of(1)
    other = None
    for i in range(200, 300):
        cur.execute("INSERT INTO users VALUES (%s, 'probe@x', NULL)", (i,))
        if shard_of(i) != home:
            other = i
        cur.execute("DELETE FROM users WHERE id = %s", (i,))
        if other:
            break
    cur.execute(f"INSERT INTO users VALUES ({other}, 'a@x', 'lima') ON CONFLICT (email) "
                "DO UPDATE SET city = excluded.city || users.id RETURNING id, city")
    assert (cur.statusmessage, cur.fetchall()) == ("INSERT 0 1", [(1, "lima1")])
    with psycopg.connect(host=sptest.HOST, port=SETTING.proxy.port, dbname=SETTING.dbs.name, user="app",
                         password="secret", autocommit=True) as c3:
        try:
            c3.execute(f"INSERT INTO users VALUES ({other}, 'a@x', 'x') ON CONFLICT (email) DO UPDATE SET city = %s",
                       ("param",))
            raise AssertionError("accepted")
        except psycopg.Error as e:
            assert e.diag.sqlstate == "0A000" and "users_email_key" in e.diag.message_primary, e
    try:
        cur.execute(f"INSERT INTO users VALUES ({other}, 'a@x', NULL), (301, 'z@x', NULL) ON CONFLICT DO NOTHING RETURNING id")
        raise AssertionError("accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "0A000", e
    cur.execute("SELECT id, city FROM users ORDER BY id")
    assert cur.fetchall() == [(1, "lima1")]
    SETTING.entries_match_rows()
    c.close()


def race(sql, emails=100, clients=8):
    """`clients` clients running `sql` (id, email) over the same `emails` emails, each in
    its own order; every (tag, RETURNING rows) answer, or the errors."""
    answers, errors = [], []

    def run(n):
        c = proxy()
        cur = c.cursor()
        for i in sorted(range(emails), key=lambda k: (k * (n + 3)) % 101):
            try:
                cur.execute(sql, (1000 + n * 1000 + i, f"race{i}@x"))
                answers.append((cur.statusmessage, cur.fetchall()))
            except psycopg2.Error as e:
                errors.append((e.pgcode, str(e)))
        c.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    c = proxy()
    cur = c.cursor()
    cur.execute("SELECT count(*), count(DISTINCT email) FROM users")
    assert cur.fetchone() == (emails, emails)
    cur.execute("SELECT city, count(*) FROM users GROUP BY 1")
    cities = cur.fetchall()
    c.close()
    SETTING.entries_match_rows()
    return answers, cities


def racing_do_nothing():
    """8 clients, the same 100 emails, ON CONFLICT (email) DO NOTHING RETURNING id: one row
    per email, each answer's RETURNING rows its tag's count."""
    reset()
    answers, _ = race("INSERT INTO users VALUES (%s, %s, '1') ON CONFLICT (email) DO NOTHING RETURNING id")
    assert all(tag == f"INSERT 0 {len(rows)}" for tag, rows in answers), answers[:5]
    won = sorted(r[0] % 1000 for _, rows in answers for r in rows)
    assert won == list(range(100)), f"{len(won)} winners for 100 emails"


def racing_do_update():
    """8 clients, the same 50 emails, ON CONFLICT (email) DO UPDATE counting in city: one
    row per email, every client's conflict applied once (each city ends at 8)."""
    reset()
    answers, cities = race("INSERT INTO users VALUES (%s, %s, '1') ON CONFLICT (email) DO UPDATE "
                           "SET city = (users.city::int + 1)::text RETURNING city", emails=50)
    assert all(tag == "INSERT 0 1" and len(rows) == 1 for tag, rows in answers), answers[:5]
    assert cities == [("8", 50)], cities


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
    cur.execute("TRUNCATE TABLE public.users")
    assert SETTING.on_shards("SELECT count(*) FROM splitpoint.users_email_key_entries") == [(0,)] * 3
    SETTING.entries_match_rows()
    cur.execute("INSERT INTO users VALUES (100, 'u7@x', NULL)")
    cur.execute("SELECT id FROM users WHERE email = 'u7@x'")
    assert cur.fetchall() == [(100,)]
    SETTING.entries_match_rows()
    r = sptest.admin(SETTING.proxy.port, "CHECK INDEX users_email_key")[0]
    assert (r[3], r[4]) == ("0", "0"), r
    # TRUNCATE of a table users references, CASCADE: users is emptied too, and so are
    # its entries (the value is free again). PostgreSQL's NOTICE as on one server.
    cur.execute("CREATE TABLE owners (id bigint PRIMARY KEY)")
    cur.execute("ALTER TABLE users ADD COLUMN owner bigint REFERENCES owners (id)")
    cur.execute("INSERT INTO owners VALUES (1)")
    cur.execute("INSERT INTO users SELECT g, 'o' || g || '@x', 'c', 1 FROM generate_series(200, 220) g")
    cur.execute("TRUNCATE owners CASCADE")
    assert SETTING.on_shards("SELECT count(*) FROM users") == [(0,)] * 3
    assert SETTING.on_shards("SELECT count(*) FROM splitpoint.users_email_key_entries") == [(0,)] * 3
    SETTING.entries_match_rows()
    cur.execute("INSERT INTO users VALUES (201, 'o205@x', NULL)")
    cur.execute("ALTER TABLE users DROP COLUMN owner")
    cur.execute("DROP TABLE owners")
    c.close()


def execute_of_prepared():
    """SQL PREPARE of an INSERT ... ON CONFLICT, then EXECUTE: the EXECUTE is judged by the
    PREPARE's ON CONFLICT, as PostgreSQL does (DO NOTHING: no row, tag INSERT 0 0)."""
    reset()
    got_c, exp_c = proxy(), SETTING.plain.shard(1)
    got_c.autocommit = exp_c.autocommit = True
    got, exp = got_c.cursor(), exp_c.cursor()
    steps = [("INSERT INTO users VALUES (1, 'a@x', 'paris'), (2, 'b@x', 'rome')", None),
             ("PREPARE ins (bigint, text) AS INSERT INTO users VALUES ($1, $2, 'x') ON CONFLICT (email) DO NOTHING "
              "RETURNING id", None)]
    steps += [(f"EXECUTE ins ({i}, '{'ab'[i % 2]}@x')", None) for i in range(10, 16)]
    steps += [("EXECUTE ins (20, 'new@x')", None), ("EXECUTE ins (21, 'new@x')", None),
              ("PREPARE upd (bigint, text) AS INSERT INTO users VALUES ($1, $2, 'y') ON CONFLICT (email) "
               "DO UPDATE SET city = excluded.city || users.id RETURNING id, city", None),
              ("EXECUTE upd (30, 'a@x')", None), ("EXECUTE upd (31, 'b@x')", None),
              ("DEALLOCATE ins", None), ("DEALLOCATE upd", None),
              ("SELECT id, email, city FROM users ORDER BY id", None)]
    for sql, params in steps:
        e, g = gsi.outcome(exp, sql, params), gsi.outcome(got, sql, params)
        assert e == g, f"{sql}\n  plain PostgreSQL: {e}\n  splitpoint:       {g}"
    SETTING.entries_match_rows()
    got_c.close()
    exp_c.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([on_conflict_simple, on_conflict_extended, do_update_elsewhere, racing_do_nothing,
                               racing_do_update, truncate, execute_of_prepared],
                              setup=SETTING.start, teardown=SETTING.stop, watch=lambda: [SETTING.proxy]))
