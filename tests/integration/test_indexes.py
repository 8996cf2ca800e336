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
- the extended protocol (extended_differential): psycopg 3 with server-side parameters
  (unnamed and prepared statements, executemany, an explicit block, pipelines) and
  asyncpg (its statement cache, a prepared INSERT ... RETURNING, executemany, a
  transaction) against plain PostgreSQL: same rows, tags and errors; a batch or
  pipeline with a duplicate in the middle rolls back whole on both sides; afterwards
  every shard's entries are exactly the rows' values.
"""
# test-timeout: 300

import io
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import gsi  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg", "python3-asyncpg")
import asyncio  # noqa: E402

import asyncpg  # noqa: E402
import psycopg  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("indexes")
DBS = EXTRA = PLAIN = PROXY = None
SETTING = gsi.Setting("gsi", "indexes", WORK, more_tables=", dups: id",
                      more_indexes="\n      - { table: dups, columns: [v], unique: true }")
outcome = gsi.outcome


def shard_dbs():
    return SETTING.shard_dbs()


def on_shards(sql):
    return SETTING.on_shards(sql)


def wait_ready(names, timeout=30):
    return SETTING.wait_ready(names, timeout)


def setup():
    global DBS, EXTRA, PLAIN, PROXY
    SETTING.start()
    DBS, EXTRA, PLAIN, PROXY = SETTING.dbs, SETTING.extra, SETTING.plain, SETTING.proxy


def teardown():
    SETTING.stop()


def entries_match_rows():
    SETTING.entries_match_rows()


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
    "PREPARE ins (bigint, text, text) AS INSERT INTO users VALUES ($1, $2, $3)",
    "EXECUTE ins (23, 'prep@x', 'lyon')",
    "EXECUTE ins (24, 'prep@x', 'lyon')",
    "DEALLOCATE ins",
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
    # COPY FROM STDIN (simple protocol): a duplicate of a held value and one within the
    # data fail the whole COPY with PostgreSQL's 23505; new values all land.
    for data in ("70\tcopy1@x\tbern\n71\tb@x\tbern\n", "72\tcopy2@x\tbern\n73\tcopy2@x\tbern\n",
                 "74\tcopy3@x\tbern\n75\tcopy4@x\t\\N\n76\t\\N\tbern\n"):
        e, g = copy_outcome(exp, data), copy_outcome(got, data)
        assert e == g, f"COPY {data!r}\n  plain PostgreSQL: {e}\n  splitpoint:       {g}"
    landed = "SELECT * FROM users WHERE id BETWEEN 70 AND 79 ORDER BY id"
    e, g = outcome(exp, landed), outcome(got, landed)
    assert e == g and len(e[2]) == 3, (e, g)
    entries_match_rows()


def copy_outcome(cur, data):
    try:
        cur.copy_expert("COPY users FROM STDIN", io.StringIO(data))
        return ("ok", cur.statusmessage, cur.rowcount)
    except psycopg2.Error as e:
        cur.connection.rollback()
        return ("error", e.pgcode, e.diag.message_primary, e.diag.message_detail, e.diag.constraint_name)


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
        # An extended-protocol write too: one one-shard statement, its entry counted apart.
        writes = PROXY.metric("splitpoint_index_entry_writes_total", {"index": "users_email_key"})
        pc.execute("INSERT INTO users VALUES (%s, %s, NULL)", (44, "five@x"), prepare=True)
        assert counts() == [single + 4, multi], f"an extended indexed INSERT: {counts()} after {[single + 3, multi]}"
        assert PROXY.metric("splitpoint_index_entry_writes_total", {"index": "users_email_key"}) == writes + 1


INSERT = "INSERT INTO users VALUES (%s, %s, %s)"
PIPED = "INSERT INTO users (id, email, city) VALUES (%s, %s, %s)"  # (never prepared: see connect3)


def error_of(e):
    """(sqlstate, message, detail, constraint, schema, table) of a psycopg 3 or asyncpg error."""
    if isinstance(e, psycopg.Error):
        d = e.diag
        return ("error", d.sqlstate, d.message_primary, d.message_detail, d.constraint_name, d.schema_name,
                d.table_name)
    return ("error", e.sqlstate, e.args[0] if e.args else None, e.detail, e.constraint_name, e.schema_name,
            e.table_name)


def psycopg_steps():
    """Each step: a function of a psycopg 3 connection (autocommit) giving its outcome."""
    def run(sql, params, prepare=None):
        def step(c):
            cur = c.cursor()
            cur.execute(sql, params, prepare=prepare)
            return ("ok", cur.statusmessage, cur.fetchall() if cur.description else None)
        return step

    def many(sql, rows):
        def step(c):
            cur = c.cursor()
            cur.executemany(sql, rows)
            return ("ok", cur.rowcount)
        return step

    def pipeline(statements, syncs=()):
        def step(c):
            out = []
            with c.pipeline() as p:
                cur = c.cursor()
                for i, (sql, params) in enumerate(statements):
                    cur.execute(sql, params)
                    if i in syncs:
                        p.sync()
                        out.append(cur.statusmessage)
            return ("ok", out, cur.statusmessage)
        return step

    def block(statements, end):
        def step(c):
            c.autocommit = False
            try:
                out = []
                cur = c.cursor()
                try:
                    for sql, params in statements:
                        cur.execute(sql, params)
                        out.append((cur.statusmessage, cur.fetchall() if cur.description else None))
                except psycopg.Error as e:
                    out.append(error_of(e))
                    c.rollback()
                    return ("failed block", out)
                c.commit() if end == "commit" else c.rollback()
                return ("ok", out)
            finally:
                c.autocommit = True
        return step

    return [
        run(INSERT, (1001, "x1@x", "paris")),
        run(INSERT, (1002, "x1@x", "rome")),                      # the email taken: 23505
        run(INSERT, (1003, "x3@x", "oslo"), prepare=True),
        run(INSERT, (1004, "x3@x", "oslo"), prepare=True),       # 23505 through a named statement
        run(INSERT, (1001, "x9@x", "oslo"), prepare=True),       # the key taken: the shard's own 23505
        run(INSERT + " RETURNING id, email", (1005, "x5@x", None), prepare=True),
        run("INSERT INTO users VALUES (%s, %s, %s), (%s, %s, %s), (%s, %s, %s)",
            (1006, "x6@x", "lima", 1007, "x7@x", "lima", 1008, None, "lima")),
        run("INSERT INTO users VALUES (%s, %s, %s), (%s, %s, %s)", (1009, "x9@x", "lima", 1010, "x1@x", "lima")),
        many(INSERT, [(1011, "x11@x", "kiev"), (1012, "x12@x", "kiev"), (1013, "x13@x", "kiev")]),
        many(INSERT, [(1014, "x14@x", "kiev"), (1015, "x11@x", "kiev"), (1016, "x16@x", "kiev")]),
        run("UPDATE users SET email = %s WHERE id = %s", ("x1-new@x", 1001), prepare=True),
        run("UPDATE users SET email = %s WHERE id = %s", ("x3@x", 1001), prepare=True),  # taken: 23505
        run("UPDATE users SET email = %s WHERE id = %s RETURNING id, email, city", ("x1@x", 1006)),  # freed above
        run("UPDATE users SET city = %s WHERE email = %s", ("berlin", "x3@x")),
        run("UPDATE users SET email = email || %s WHERE city = %s", (".lima", "lima")),
        run("DELETE FROM users WHERE id = %s", (1003,), prepare=True),
        run(INSERT, (1017, "x3@x", "oslo")),                       # freed by the DELETE
        run("DELETE FROM users WHERE city = %s AND id > %s", ("kiev", 1011)),
        run("INSERT INTO users VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING", (1017, "x17@x", "oslo")),
        # An explicit block: a duplicate fails it; then one that commits.
        block([(INSERT, (1020, "b20@x", "nice")), ("SELECT id, email FROM users WHERE email = %s", ("b20@x",)),
               (INSERT, (1021, "b20@x", "nice")), (INSERT, (1022, "b22@x", "nice"))], "commit"),
        block([(INSERT, (1020, "b20@x", "nice")), ("UPDATE users SET email = %s WHERE id = %s", ("b21@x", 1020)),
               (INSERT, (1021, "b20@x", "nice"))], "commit"),
        block([(INSERT, (1023, "b23@x", "nice"))], "rollback"),
        # Pipelines (one implicit transaction to each Sync): whole, or rolled back whole.
        pipeline([(PIPED, (1030, "p30@x", "pipe")), (PIPED, (1031, "p31@x", "pipe")),
                  (PIPED, (1032, "p32@x", "pipe")), ("UPDATE users SET email = %s WHERE id = %s", ("p33@x", 1032))]),
        pipeline([(PIPED, (1034, "p34@x", "pipe")), (PIPED, (1035, "p30@x", "pipe")),
                  (PIPED, (1036, "p36@x", "pipe"))]),
        pipeline([(PIPED, (1037, "p37@x", "pipe")), ("SELECT 1", None), (PIPED, (1038, "p38@x", "pipe")),
                  (PIPED, (1039, "p37@x", "pipe")), (PIPED, (1040, "p40@x", "pipe"))], syncs=(1,)),
        pipeline([("DELETE FROM users WHERE id = %s", (1031,)), (PIPED, (1041, "p31@x", "pipe")),
                  (PIPED, (1042, "p42@x", "pipe"))]),
        run("SELECT id, email, city FROM users WHERE id >= 1000 ORDER BY id", None),
    ]


async def asyncpg_outcomes(dsn):
    c = await asyncpg.connect(dsn, timeout=10)
    out = []

    async def step(coro):
        try:
            r = await coro
            out.append(("ok", [tuple(x) for x in r] if isinstance(r, list) else r))
        except asyncpg.PostgresError as e:
            out.append(error_of(e))

    ins = "INSERT INTO users VALUES ($1, $2, $3)"
    try:
        await step(c.execute(ins, 1101, "a1@x", "cusco"))
        await step(c.execute(ins, 1102, "a1@x", "cusco"))        # 23505
        await step(c.execute(ins, 1103, "x5@x", "cusco"))        # taken by psycopg's row
        stmt = await c.prepare("INSERT INTO users VALUES ($1, $2, $3) RETURNING id, email")
        await step(stmt.fetch(1104, "a4@x", "cusco"))
        await step(stmt.fetch(1105, "a4@x", "cusco"))            # 23505
        await step(c.executemany(ins, [(1106, "a6@x", "lima"), (1107, "a7@x", "lima"), (1108, "a8@x", "lima")]))
        await step(c.executemany(ins, [(1109, "a9@x", "lima"), (1110, "a6@x", "lima"), (1111, "a11@x", "lima")]))
        await step(c.execute("UPDATE users SET email = $1 WHERE id = $2", "a1-new@x", 1101))
        await step(c.execute("UPDATE users SET email = $1 WHERE id = $2", "a7@x", 1106))  # 23505
        await step(c.fetch("UPDATE users SET email = $1 WHERE id = $2 RETURNING id, email", "a1@x", 1107))
        await step(c.execute("DELETE FROM users WHERE id = $1", 1104))
        await step(c.execute(ins, 1112, "a4@x", "cusco"))        # freed
        await step(c.execute("DELETE FROM users WHERE city = $1 AND id > $2", "lima", 1106))

        async def txn(rows):
            async with c.transaction():
                for r in rows:
                    await c.execute(ins, *r)
        await step(txn([(1120, "t20@x", "rio"), (1121, "t21@x", "rio")]))
        await step(txn([(1122, "t22@x", "rio"), (1123, "t20@x", "rio")]))
        await step(c.fetch("SELECT id, email, city FROM users WHERE id > 1100 ORDER BY id"))
    finally:
        await c.close()
    return out


def extended_differential():
    """Writes in the extended protocol (psycopg 3 with server-side parameters, asyncpg)
    through splitpoint and on plain PostgreSQL with UNIQUE (email): same answers and
    rows; the entries exactly the rows' values afterwards."""
    def connect3(port, db):
        # (No statement prepared behind the test's back: psycopg 3.1 takes one its pipeline
        # prepared for made even when an error skipped its Parse, on either side.)
        return psycopg.connect(host=sptest.HOST, port=port, dbname=db, user="app", password="secret",
                               autocommit=True, prepare_threshold=None)

    plain = connect3(sptest.PG_PORTS[1], PLAIN.name)
    proxy = connect3(PROXY.port, DBS.name)
    with plain, proxy:
        for i, step in enumerate(psycopg_steps()):
            got = []
            for c in (plain, proxy):
                try:
                    got.append(step(c))
                except psycopg.Error as e:
                    got.append(error_of(e))
            assert got[0] == got[1], f"psycopg step {i}\n  plain PostgreSQL: {got[0]}\n  splitpoint:       {got[1]}"
    entries_match_rows()
    exp = asyncio.run(asyncpg_outcomes(f"postgresql://app:secret@{sptest.HOST}:{sptest.PG_PORTS[1]}/{PLAIN.name}"))
    got = asyncio.run(asyncpg_outcomes(f"postgresql://app:secret@{sptest.HOST}:{PROXY.port}/{DBS.name}"))
    for i, (e, g) in enumerate(zip(exp, got)):
        assert e == g, f"asyncpg step {i}\n  plain PostgreSQL: {e}\n  splitpoint:       {g}"
    assert len(exp) == len(got)
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
    sys.exit(sptest.run_tests([differential, extended_differential, concurrent_claims, reads_route_through_index,
                               killed_mid_maintenance, check_and_repair, build_from_existing_rows],
                              setup=setup, teardown=teardown, watch=lambda: [PROXY]))
