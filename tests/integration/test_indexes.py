#!/usr/bin/env python3
"""Global secondary indexes and unique constraints (SPEC 12, issue #47, docs/indexes.md).

Three shards (s0, s1 on the shared instances, s2 a second database on instance 0) and a
plain PostgreSQL database (`plain`, on instance 1) for the differential: `users (id
bigint PRIMARY KEY, email text UNIQUE, city text)` hashed by id, with a unique global
index on email and a non-unique one on city. The same statements (psycopg2, simple
protocol) through splitpoint and on plain PostgreSQL:
- differential: inserts (single and multi-row, NULL emails), duplicates (23505 with
  PostgreSQL's message, DETAIL, constraint, schema and table), updates of the email
  (freeing the old value, refused onto a taken one), deletes (by key and scattered),
  inside a block and its rollback, INSERT ... SELECT, ON CONFLICT (id) DO NOTHING: same
  rows, same tags, same errors; afterwards every shard's entries are exactly the rows'
  values (no orphan, none missing);
- 16 clients inserting the same 200 emails at once, each with its own ids: exactly one
  winner per email, on both sides;
- reads by an indexed column (=, IN, = ANY; simple and prepared) go to the entries'
  shard and then the rows' shards only, never to every shard;
- SIGKILL of the proxy under index maintenance: after restart and two-phase recovery,
  the entries are exactly the rows' values;
- CHECK INDEX finds an entry deleted, one made up and a row written on a shard directly,
  and REPAIR puts them right;
- the build: a unique index over rows written on the shards directly that hold a value
  twice fails, naming it, and leaves the table writable; the table made again through
  the proxy is built from every shard's rows, and a duplicate of a built value is
  refused with PostgreSQL's error;
- the extended protocol's writes to an indexed table are refused (0A000), not left
  unmaintained.
"""
# test-timeout: 300

import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg")
import psycopg  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("indexes")
DBS = EXTRA = PLAIN = PROXY = None
DDL = "CREATE TABLE users (id bigint PRIMARY KEY, email text UNIQUE, city text)"


def config(db, extra):
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
      - {{ name: admin, password: adminpw, admin: true }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: app, password: secret, pool_size: 20 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: app, password: secret, pool_size: 20 }}
      - {{ name: s2, host: 127.0.0.1, port: {p0}, database: {extra}, user: app, password: secret, pool_size: 20 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 12
        tables: {{ users: id, dups: id }}
    indexes:
      - {{ table: users, columns: [email], unique: true }}
      - {{ table: users, columns: [city] }}
      - {{ table: dups, columns: [v], unique: true }}
    """


def shard_dbs():
    p0, p1 = sptest.PG_PORTS
    return [(p0, DBS.name), (p1, DBS.name), (p0, EXTRA.name)]


def on_shards(sql):
    out = []
    for port, db in shard_dbs():
        out += sptest.query(port, db, sql)
    return out


def wait_ready(names, timeout=30):
    """Until SHOW INDEXES says each of `names` is ready (or failed); their rows."""
    deadline = time.monotonic() + timeout
    while True:
        rows = {r[0]: r for r in sptest.admin(PROXY.port, "SHOW INDEXES")}
        if all(rows.get(n) and rows[n][4] in ("ready", "failed") for n in names):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"indexes not ready after {timeout}s: {rows}")
        time.sleep(0.05)


def setup():
    global DBS, EXTRA, PLAIN, PROXY
    DBS = sptest.Databases("gsi")
    EXTRA = sptest.Databases("gsix")
    PLAIN = sptest.Databases("gsip")
    PROXY = sptest.Proxy("indexes", config(DBS.name, EXTRA.name), WORK).start()
    for c in (PROXY.connect(DBS.name), PLAIN.shard(1)):
        c.cursor().execute(DDL)
        c.close()
    wait_ready(["users_email_key", "users_city_idx"])


def teardown():
    if PROXY:
        PROXY.stop()
    for d in (DBS, EXTRA, PLAIN):
        if d:
            d.drop()


def outcome(cur, sql):
    """(tag, rows) or the error's (sqlstate, message, detail, constraint, schema, table)."""
    try:
        cur.execute(sql)
        rows = cur.fetchall() if cur.description else None
        return ("ok", cur.statusmessage, rows)
    except psycopg2.Error as e:
        d = e.diag
        return ("error", e.pgcode, d.message_primary, d.message_detail, d.constraint_name, d.schema_name,
                d.table_name)


def entries_match_rows():
    """Every shard's entries of both indexes against the table's rows: none orphaned, none missing."""
    for column, index in (("email", "users_email_key"), ("city", "users_city_idx")):
        rows = on_shards(f"SELECT {column}, id FROM users WHERE {column} IS NOT NULL")
        entries = on_shards(f"SELECT {column}, id FROM splitpoint.{index}_entries")
        assert sorted(rows) == sorted(entries), \
            f"{index}: missing {sorted(set(rows) - set(entries))[:10]}, orphans {sorted(set(entries) - set(rows))[:10]}"


SCRIPT = [
    "INSERT INTO users VALUES (1, 'a@x', 'paris')",
    "INSERT INTO users VALUES (2, 'b@x', 'rome')",
    "INSERT INTO users VALUES (3, 'a@x', 'oslo')",
    "INSERT INTO users VALUES (4, 'c@x', 'paris'), (5, 'd@x', 'rome'), (6, 'e@x', NULL) RETURNING id, email",
    "INSERT INTO users VALUES (7, 'f@x', 'lima'), (8, 'b@x', 'lima')",
    "INSERT INTO users VALUES (9, NULL, 'paris'), (10, NULL, 'paris')",
    "UPDATE users SET email = 'g@x' WHERE id = 1",
    "INSERT INTO users VALUES (11, 'a@x', 'oslo')",
    "UPDATE users SET email = 'b@x' WHERE id = 1",
    "UPDATE users SET city = 'berlin' WHERE email = 'c@x'",
    "DELETE FROM users WHERE id = 2",
    "INSERT INTO users VALUES (12, 'b@x', 'rome') RETURNING *",
    "DELETE FROM users WHERE city = 'paris'",
    "INSERT INTO users VALUES (13, 'a@x', 'nice') ON CONFLICT (id) DO NOTHING",
    "INSERT INTO users VALUES (11, 'h@x', 'nice') ON CONFLICT (id) DO NOTHING",
    "INSERT INTO users SELECT id + 100, 'copy-' || email, city FROM users WHERE email IS NOT NULL",
    "INSERT INTO users SELECT id + 200, email, city FROM users WHERE id = 11",
    "UPDATE users SET email = upper(email) WHERE id > 100",
    "DELETE FROM users WHERE email LIKE 'COPY-%' AND id % 2 = 0",
    "BEGIN",
    "INSERT INTO users VALUES (20, 'txn@x', 'kiev')",
    "SELECT id, email FROM users WHERE id = 20",
    "INSERT INTO users VALUES (21, 'txn@x', 'kiev')",
    "ROLLBACK",
    "INSERT INTO users VALUES (21, 'txn@x', 'kiev')",
    "BEGIN",
    "UPDATE users SET email = 'moved@x' WHERE id = 21",
    "INSERT INTO users VALUES (22, 'txn@x', 'kiev')",
    "COMMIT",
    "SELECT id, email, city FROM users ORDER BY id",
    "SELECT id, email, city FROM users WHERE email = 'b@x'",
    "SELECT id, city FROM users WHERE email IN ('a@x', 'c@x', 'nobody@x') ORDER BY id",
    "SELECT id FROM users WHERE email = ANY('{d@x,e@x}') AND id > 4 ORDER BY id",
    "SELECT * FROM users WHERE email = 'nobody@x'",
    "SELECT count(*) FROM users WHERE city = 'rome'",
    "SELECT id FROM users u WHERE u.city IN ('kiev', 'lima') ORDER BY 1",
    "BEGIN",
    "INSERT INTO users VALUES (30, 'new@x', 'kiev')",
    "SELECT id, email FROM users WHERE email = 'new@x'",
    "UPDATE users SET email = 'newer@x' WHERE id = 30",
    "SELECT id, email FROM users WHERE email IN ('new@x', 'newer@x')",
    "ROLLBACK",
    "SELECT id, email FROM users WHERE email IN ('new@x', 'newer@x')",
]


def differential():
    got_c = PROXY.connect(DBS.name)
    exp_c = PLAIN.shard(1)
    got, exp = got_c.cursor(), exp_c.cursor()
    for sql in SCRIPT:
        e, g = outcome(exp, sql), outcome(got, sql)
        assert e == g, f"{sql}\n  plain PostgreSQL: {e}\n  splitpoint:       {g}"
    entries_match_rows()


def concurrent_claims():
    """16 clients, the same 200 emails, each its own ids: one winner per email on both sides."""
    emails = [f"race{i}@x" for i in range(200)]

    def run(connect, won, errors, n):
        c = connect()
        cur = c.cursor()
        order = list(range(200))
        random.Random(n).shuffle(order)
        for i in order:
            try:
                cur.execute("INSERT INTO users VALUES (%s, %s, 'race')", (100000 + n * 1000 + i, emails[i]))
                won.append(i)
            except psycopg2.Error as e:
                if e.pgcode != "23505":
                    errors.append((e.pgcode, str(e)))
        c.close()

    for name, connect in (("plain", lambda: PLAIN.shard(1)), ("splitpoint", lambda: PROXY.connect(DBS.name))):
        won, errors = [], []
        threads = [threading.Thread(target=run, args=(connect, won, errors, n)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, f"{name}: {errors[:3]}"
        assert sorted(won) == list(range(200)), f"{name}: {len(won)} winners for 200 emails"
    entries_match_rows()
    c = PROXY.connect(DBS.name)
    c.cursor().execute("DELETE FROM users WHERE city = 'race'")
    c.close()
    entries_match_rows()


def reads_route_through_index():
    """A read by email or city asks the entries' shard, then only the rows' shards: a
    read by a unique email is a one-shard statement, never a scatter; in both
    protocols, the plan cached by shape looking up each execution's own value."""
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("INSERT INTO users VALUES (40, 'one@x', 'quito'), (41, 'two@x', 'quito'), (42, 'three@x', 'quito')")

    def counts():
        return [PROXY.metric("splitpoint_queries_total", {"route": r, "target": "primary"}) or 0
                for r in ("single", "multi")]

    def lookups(result):
        return PROXY.metric("splitpoint_index_lookups_total", {"index": "users_email_key", "result": result}) or 0

    single, multi = counts()
    found, empty = lookups("found"), lookups("empty")
    for email, want in (("one@x", [(40,)]), ("two@x", [(41,)]), ("nobody@x", []), ("three@x", [(42,)])):
        cur.execute("SELECT id FROM users WHERE email = %s", (email,))
        assert cur.fetchall() == want, (email, want)
    assert counts() == [single + 4, multi], f"reads by email: {counts()} after {[single, multi]}"
    assert (lookups("found"), lookups("empty")) == (found + 3, empty + 1)
    # A write is one statement of the client's, its entries counted apart.
    writes = PROXY.metric("splitpoint_index_entry_writes_total", {"index": "users_email_key"})
    cur.execute("INSERT INTO users VALUES (43, 'four@x', NULL)")
    assert counts() == [single + 5, multi], "an indexed INSERT counted more than once"
    assert PROXY.metric("splitpoint_index_entry_writes_total", {"index": "users_email_key"}) == writes + 1
    cur.execute("SELECT id FROM users WHERE city = 'quito' ORDER BY id")
    assert cur.fetchall() == [(40,), (41,), (42,)]
    c.close()
    single, multi = counts()
    with psycopg.connect(host=sptest.HOST, port=PROXY.port, dbname=DBS.name, user="app", password="secret",
                         autocommit=True) as pc:
        for email, want in (("three@x", [(42,)]), ("one@x", [(40,)]), ("two@x", [(41,)])):
            assert pc.execute("SELECT id FROM users WHERE email = %s", (email,), prepare=True).fetchall() == want
    assert counts() == [single + 3, multi], f"prepared reads by email: {counts()} after {[single, multi]}"


def extended_protocol_refused():
    with psycopg.connect(host=sptest.HOST, port=PROXY.port, dbname=DBS.name, user="app", password="secret",
                         autocommit=True) as c:
        try:
            c.execute("INSERT INTO users VALUES (%s, %s, %s)", (500, "ext@x", "x"), prepare=True)
            raise AssertionError("an extended-protocol write to an indexed table ran")
        except psycopg.errors.FeatureNotSupported:
            pass
        # Reads and writes of other tables still take it.
        assert c.execute("SELECT count(*) FROM users WHERE id = %s", (1,)).fetchone() is not None
    entries_match_rows()


def killed_mid_maintenance():
    """SIGKILL of the proxy while 6 clients insert, re-email and delete users (rows and
    entries on different shards: two-phase commits in flight); after a restart and
    two-phase recovery, the entries are exactly the rows' values."""
    global PROXY
    stop = threading.Event()
    done = []

    def writer(n):
        rnd = random.Random(n)
        try:
            c = PROXY.connect(DBS.name)
            cur = c.cursor()
            i = 0
            while not stop.is_set():
                i += 1
                key = 200000 + n * 100000 + i
                cur.execute("INSERT INTO users VALUES (%s, %s, 'crash')", (key, f"crash{key}@x"))
                if rnd.random() < 0.4:
                    cur.execute("UPDATE users SET email = %s WHERE id = %s", (f"again{key}@x", key))
                if rnd.random() < 0.3:
                    cur.execute("DELETE FROM users WHERE id = %s", (key,))
                done.append(1)
        except psycopg2.Error:
            pass  # (the proxy went away)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(done) < 300 and time.monotonic() < deadline:
        time.sleep(0.02)
    PROXY.kill()
    stop.set()
    for t in threads:
        t.join()
    assert len(done) >= 300, f"only {len(done)} writes before the kill"
    PROXY.start()
    rows = wait_ready(["users_email_key", "users_city_idx"])
    assert rows["users_email_key"][5] == "built earlier", rows  # (not built again at every start)
    # Two-phase recovery: no transaction of the proxy left prepared on any shard.
    deadline = time.monotonic() + 60
    while on_shards("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'splitpoint:%' AND database = current_database()"):
        assert time.monotonic() < deadline, "prepared transactions left after 60 s"
        time.sleep(0.2)
    entries_match_rows()
    assert check_index("users_city_idx")["missing"] == "0"


def check_index(name, repair=False):
    """CHECK INDEX on the admin console: {rows, entries, missing, orphans, repaired, examples}."""
    r = sptest.admin(PROXY.port, f"CHECK INDEX {name}{' REPAIR' if repair else ''}")[0]
    return dict(zip(("index", "rows", "entries", "missing", "orphans", "repaired", "examples"), r))


def check_and_repair():
    """CHECK INDEX finds what writes behind the proxy's back did to the entries (an entry
    deleted, one made up, a row inserted on a shard directly) and REPAIR puts it right."""
    clean = check_index("users_email_key")
    assert (clean["missing"], clean["orphans"]) == ("0", "0") and clean["rows"] == clean["entries"], clean
    port, db = shard_dbs()[0]
    victim = sptest.query(port, db, "SELECT email, id FROM splitpoint.users_email_key_entries LIMIT 1")[0]
    sptest.query(port, db, "DELETE FROM splitpoint.users_email_key_entries WHERE email = %s", (victim[0],))
    sptest.query(port, db, "INSERT INTO splitpoint.users_email_key_entries VALUES ('ghost@x', 999999)")
    sptest.query(port, db, "INSERT INTO users VALUES (900001, 'bypass@x', NULL)")
    found = check_index("users_email_key")
    assert (found["missing"], found["orphans"]) == ("2", "1"), found
    assert "orphan (ghost@x, 999999)" in found["examples"] and "missing (bypass@x, 900001)" in found["examples"], found
    assert check_index("users_email_key", repair=True)["repaired"] == "3"
    again = check_index("users_email_key")
    assert (again["missing"], again["orphans"]) == ("0", "0"), again
    sptest.query(port, db, "DELETE FROM users WHERE id = 900001")
    assert check_index("users_email_key", repair=True)["repaired"] == "1"
    entries_match_rows()
    sptest.admin_refused(PROXY, "CHECK INDEX nope", "42704", "index \"nope\" does not exist")


def build_from_existing_rows():
    """dups: rows written on the shards directly, then the table made known through the
    proxy: a unique build over a duplicated value fails and names it; once the
    duplicate is gone, DDL through the proxy builds it again from every shard's rows."""
    for i, (port, db) in enumerate(shard_dbs()):
        sptest.query(port, db, "CREATE TABLE dups (id bigint PRIMARY KEY, v text)")
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    for i in range(30):
        cur.execute("INSERT INTO dups VALUES (%s, %s)", (i, f"v{i % 29}"))  # v0 twice
    cur.execute("COMMENT ON TABLE dups IS 'made known'")  # (DDL: the builder looks again)
    rows = wait_ready(["dups_v_key"])
    assert rows["dups_v_key"][4] == "failed" and "v0" in rows["dups_v_key"][5], rows["dups_v_key"]
    cur.execute("INSERT INTO dups VALUES (100, 'v1')")  # (not maintained: no error)
    cur.execute("DELETE FROM dups WHERE id IN (29, 100)")
    cur.execute("DROP TABLE dups")
    cur.execute("CREATE TABLE dups (id bigint PRIMARY KEY, v text)")
    cur.execute("INSERT INTO dups SELECT g, 'w' || g FROM generate_series(1, 50) g")
    rows = wait_ready(["dups_v_key"])
    assert rows["dups_v_key"][4] == "ready", rows["dups_v_key"]
    entries = on_shards("SELECT v, id FROM splitpoint.dups_v_key_entries")
    assert sorted(entries) == sorted((f"w{g}", g) for g in range(1, 51)), entries
    try:
        cur.execute("INSERT INTO dups VALUES (51, 'w7')")
        raise AssertionError("a duplicate of a built value was accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "23505" and e.diag.message_detail == "Key (v)=(w7) already exists.", e
    c.close()


if __name__ == "__main__":
    sys.exit(sptest.run_tests([differential, concurrent_claims, reads_route_through_index, extended_protocol_refused,
                               killed_mid_maintenance, check_and_repair, build_from_existing_rows],
                              setup=setup, teardown=teardown, watch=lambda: [PROXY]))
