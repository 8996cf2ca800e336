#!/usr/bin/env python3
"""Differential: the same statements against one plain PostgreSQL database and through
splitpoint over 2 shards and over 3 shards must give the same answers and leave the
same data.

Databases (all made for this run, dropped at the end): `plain` on PG0 (unsharded);
2 shards: PG0 and PG1; 3 shards: PG0, PG1 and a second database on PG0 (three shards
over two servers). Schema: accounts/items (hash over 16 partitions on a bigint key,
co-located), docs (hash on a text key), events (range: upto 1000 s0, upto 2000 s1,
rest on the last shard), countries (reference). A few thousand rows (seeded random):
negative keys, NULLs, multibyte text, arrays, numerics, loaded with COPY and INSERT.

Then, in lockstep on the three targets and compared exactly (column names, rows --
in order where the statement orders them --, command tags, transaction status, error
SQLSTATE and message): key lookups (=, IN over keys of one partition, joins and
aggregates with the key fixed, text keys, single-range reads), single-shard UPDATE /
DELETE with RETURNING, INSERT ... ON CONFLICT (DO UPDATE / DO NOTHING, RETURNING),
duplicate-key errors, transactions that commit and that roll back, multi-row INSERTs
and keyless UPDATE/DELETE over several shards (simple protocol; their returned rows
compared as sets, since row order across shards is not defined; texts of several such
statements: one result per statement), each through the
simple and the extended protocol (text and binary results). After each group every
sharded table, read directly from the shards and united, must equal the plain
database's table (no row lost, none duplicated), and every shard's copy of the
reference table must equal it. Multi-shard writes over the extended protocol come
last, so a failure there does not hide the rest.

Multi-shard reads are not merged yet, so none is issued here.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 240

import io
import os
import random
import secrets
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST, superuser  # noqa: E402

PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("rt-diff")
SEED = int(os.environ.get("RT_SEED", "20241130"))  # fixed: every run loads the same data
rng = random.Random(SEED)
SUFFIX = secrets.token_hex(4)
P = 16

PLAIN = (PG0, f"rd_plain_{SUFFIX}")
TWO = [(PG0, f"rd2_a_{SUFFIX}"), (PG1, f"rd2_b_{SUFFIX}")]
THREE = [(PG0, f"rd3_a_{SUFFIX}"), (PG1, f"rd3_b_{SUFFIX}"), (PG0, f"rd3_c_{SUFFIX}")]
ALL_DBS = [PLAIN] + TWO + THREE

# ------------------------------------------------------------------ harness


def direct(port, db):
    return sptest.connect(port, db)


def proxy_config(shards, last_range_shard):
    lines = "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, password: secret }}"
                      for i, (port, db) in enumerate(shards))
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{lines}
distributions:
  - name: by_acct
    method: hash
    partitions: {P}
    tables:
      accounts: id
      items: acct_id
  - name: by_slug
    method: hash
    partitions: {P}
    tables:
      docs: slug
  - name: by_event
    method: range
    ranges:
      - {{ upto: 1000, shard: s0 }}
      - {{ upto: 2000, shard: s1 }}
      - {{ shard: {last_range_shard} }}
    tables:
      events: id
reference_tables: [countries]
"""


class Target:
    """One way to reach the data: the plain database or a proxy."""

    def __init__(self, name, port, db, shards):
        self.name, self.port, self.db, self.shards = name, port, db, shards
        self.w = None
        self.reconnect()

    def reconnect(self):
        if self.w is not None:
            self.w.close()
        self.w = pgwire.connect(HOST, self.port, "app", self.db, password="secret", timeout=30)

    def psycopg(self):
        return direct(self.port, self.db) if not self.shards else \
            psycopg2.connect(host=HOST, port=self.port, user="app", password="secret", dbname=self.db)

    def table_rows(self, table):
        """Every row of `table` as text; for a proxy: the shards' rows united, read directly."""
        rows = []
        for port, db in (self.shards or [(self.port, self.db)]):
            c = direct(port, db)
            cur = c.cursor()
            cur.execute(f"SELECT t::text FROM {table} t")
            rows += [r[0] for r in cur.fetchall()]
            c.close()
        return sorted(rows)


TARGETS = []
PROXIES = []
MISMATCHES = []


def outcome(r, unordered=False, message=True):
    if r.error:
        return ("ERROR", r.error.get("C"), r.error.get("M") if message else None, r.status)
    out = []
    for s in r.results:
        rows = [tuple(x) for x in s.rows]
        if unordered:
            rows = sorted(rows, key=repr)
        out.append((tuple(s.column_names), rows, s.tag))
    return (out, r.status)


def lockstep(kind, sql, params=(), unordered=False, message=True, result_formats=()):
    """Runs one statement on every target; records a mismatch against the plain target."""
    results = []
    for t in TARGETS:
        if kind == "simple":
            r = t.w.query(sql)
        else:
            r = t.w.extended(sql, list(params), result_formats=result_formats)
        results.append(outcome(r, unordered, message))
    for t, res in zip(TARGETS[1:], results[1:]):
        if res != results[0]:
            MISMATCHES.append(f"[{kind}] {sql} params={list(params)}\n    plain:     {short(results[0])}\n"
                              f"    {t.name}: {short(res)}")
    return results[0]


def short(x, n=600):
    s = repr(x)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


# ------------------------------------------------------------------ data

WORDS = ["alpha", "β-beta", "γάμμα", "дельта", "東京", "서울", "😀", "o'quote", "tab\tin", "back\\slash", "",
         "naïve", "ÆØÅ", "line\nbreak"]


def word():
    return rng.choice(WORDS) + str(rng.randrange(1000))


ACCOUNTS = {}   # id -> (name, balance, tags, note)
ITEMS = {}      # (acct_id, item_no) -> (label, qty)
DOCS = {}       # slug -> (body, n)
EVENTS = {}     # id -> (kind, payload)


def make_data():
    ids = set()
    while len(ids) < 2000:
        ids.add(rng.randrange(-1_000_000, 1_000_000))
    ids |= {0, -1, 1, 2**62, -(2**62)}
    for i in sorted(ids):
        ACCOUNTS[i] = (None if rng.random() < 0.1 else word(),
                       None if rng.random() < 0.1 else f"{rng.randrange(-100000, 100000) / 100:.2f}",
                       None if rng.random() < 0.2 else [word() for _ in range(rng.randrange(0, 3))],
                       None if rng.random() < 0.5 else word())
    for a in rng.sample(sorted(ACCOUNTS), 1000):
        for n in range(rng.randrange(1, 5)):
            ITEMS[(a, n)] = (None if rng.random() < 0.1 else word(), rng.randrange(0, 20))
    while len(DOCS) < 800:
        DOCS[word() + "-" + str(len(DOCS))] = (None if rng.random() < 0.1 else word() * rng.randrange(1, 4),
                                               rng.randrange(-50, 50))
    for i in rng.sample(range(-500, 5000), 700):
        EVENTS[i] = (rng.choice(["click", "view", "buy", None]), word())


def copy_text(v):
    if v is None:
        return "\\N"
    if isinstance(v, list):
        v = "{" + ",".join('"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"' for x in v) + "}"
    return str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_payload(rows):
    return "".join("\t".join(copy_text(v) for v in row) + "\n" for row in rows)


DDL = [
    "CREATE TABLE accounts (id bigint PRIMARY KEY, name text, balance numeric(12,2), tags text[], note text)",
    "CREATE TABLE items (acct_id bigint NOT NULL, item_no int NOT NULL, label text, qty int NOT NULL, "
    "PRIMARY KEY (acct_id, item_no))",
    "CREATE TABLE docs (slug text PRIMARY KEY, body text, n int)",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text, payload text)",
    "CREATE TABLE countries (code text PRIMARY KEY, name text)",
]


def load(t):
    c = t.psycopg()
    c.autocommit = True
    cur = c.cursor()
    for stmt in DDL:
        cur.execute(stmt)
    acc = [(k, *v) for k, v in ACCOUNTS.items()]
    cur.copy_expert("COPY accounts FROM STDIN", io.StringIO(copy_payload(acc)))
    cur.copy_expert("COPY items (acct_id, item_no, label, qty) FROM STDIN",
                    io.StringIO(copy_payload([(a, n, *v) for (a, n), v in ITEMS.items()])))
    docs = list(DOCS.items())
    half = len(docs) // 2
    cur.copy_expert("COPY docs FROM STDIN (FORMAT csv)",
                    io.StringIO("".join(",".join('"' + str(x).replace('"', '""') + '"' if x is not None else ""
                                                 for x in (s, b, n)) + "\n" for s, (b, n) in docs[:half])))
    for i in range(half, len(docs), 50):
        chunk = docs[i:i + 50]
        cur.execute("INSERT INTO docs (slug, body, n) VALUES " + ",".join(["(%s, %s, %s)"] * len(chunk)),
                    [x for s, (b, n) in chunk for x in (s, b, n)])
    ev = list(EVENTS.items())
    for i in range(0, len(ev), 100):
        chunk = ev[i:i + 100]
        cur.execute("INSERT INTO events VALUES " + ",".join(["(%s, %s, %s)"] * len(chunk)),
                    [x for k, (kind, p) in chunk for x in (k, kind, p)])
    cur.execute("INSERT INTO countries VALUES ('jp', 'Japan'), ('de', 'Deutschland'), ('ru', 'Россия')")
    c.close()


# ------------------------------------------------------------------ keys that share a partition

REMAINDER = {}  # account id -> hash remainder (PostgreSQL's own)


def compute_remainders():
    c = direct(*PLAIN)
    cur = c.cursor()
    cur.execute("CREATE TEMP TABLE hp (k bigint) PARTITION BY HASH (k)")
    for r in range(P):
        cur.execute(f"CREATE TEMP TABLE hp_{r} PARTITION OF hp FOR VALUES WITH (MODULUS {P}, REMAINDER {r})")
    cur.execute("INSERT INTO hp SELECT unnest(%s::bigint[])", (sorted(ACCOUNTS),))
    cur.execute("SELECT k, tableoid::regclass::text FROM hp")
    for k, t in cur.fetchall():
        REMAINDER[k] = int(t.rsplit("_", 1)[1])
    c.close()


def same_partition_keys(n):
    """n existing account ids with one hash remainder (so one shard under any placement)."""
    r = rng.randrange(P)
    ks = [k for k in ACCOUNTS if REMAINDER[k] == r]
    return rng.sample(ks, min(n, len(ks)))


def some_key(existing=True):
    if existing:
        return rng.choice(sorted(ACCOUNTS))
    while True:
        k = rng.randrange(-2_000_000, 2_000_000)
        if k not in ACCOUNTS:
            return k


# ------------------------------------------------------------------ setup

def setup():
    make_data()
    for port, db in ALL_DBS:
        c = superuser(port)
        c.cursor().execute(f"CREATE DATABASE {db} OWNER app")
        c.close()
    p2 = sptest.Proxy("diff2", proxy_config(TWO, "s1"), WORKDIR).start()
    PROXIES.append(p2)
    p3 = sptest.Proxy("diff3", proxy_config(THREE, "s2"), WORKDIR).start()
    PROXIES.append(p3)
    TARGETS.append(Target("plain", PLAIN[0], PLAIN[1], None))
    TARGETS.append(Target("2 shards", p2.port, "app", TWO))
    TARGETS.append(Target("3 shards", p3.port, "app", THREE))
    compute_remainders()


def teardown():
    for t in TARGETS:
        try:
            t.w.close()
        except Exception:  # noqa: BLE001
            pass
    for p in PROXIES:
        p.stop()
    for port, db in ALL_DBS:
        try:
            c = superuser(port)
            c.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            c.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {db}: {e}")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def compare_tables(what):
    problems = table_problems()
    if problems:
        raise AssertionError(f"{what}:\n  " + "\n  ".join(problems))


def finish(what):
    """Ends a group: the statements' outcomes and then the data must match plain."""
    msgs = list(MISMATCHES)
    MISMATCHES.clear()
    problems = table_problems()
    if msgs or problems:
        out = f"{what}:"
        if msgs:
            out += f"\n{len(msgs)} statement(s) differ from plain PostgreSQL:\n" + "\n".join(msgs[:15])
        if problems:
            out += "\ndata differs from plain PostgreSQL afterwards (read directly from the shards):\n  " + \
                "\n  ".join(problems)
        raise AssertionError(out)


def table_problems():
    problems = []
    for table in ["accounts", "items", "docs", "events", "countries"]:
        want = TARGETS[0].table_rows(table)
        for t in TARGETS[1:] if table != "countries" else []:  # a reference table: each copy, below
            got = t.table_rows(table)
            if got != want:
                missing = sorted(set(want) - set(got))
                extra = sorted(set(got) - set(want))
                dup = len(got) - len(set(got))
                problems.append(f"{table} via {t.name}: {len(got)} rows vs {len(want)}; missing {missing[:5]}, "
                                f"extra {extra[:5]}, duplicated {dup}")
        if table == "countries":
            for t in TARGETS[1:]:
                for port, db in t.shards:
                    c = direct(port, db)
                    cur = c.cursor()
                    cur.execute("SELECT t::text FROM countries t")
                    got = sorted(r[0] for r in cur.fetchall())
                    c.close()
                    if got != want:
                        problems.append(f"reference table countries on {db}: {got} vs {want}")
    return problems


# ------------------------------------------------------------------ tests

@test
def load_data_everywhere():
    for t in TARGETS:
        load(t)
    compare_tables("after loading")
    # every shard of both setups holds some accounts
    for t in TARGETS[1:]:
        for port, db in t.shards:
            c = direct(port, db)
            cur = c.cursor()
            cur.execute("SELECT count(*) FROM accounts")
            n = cur.fetchone()[0]
            c.close()
            assert n > 0, f"{t.name}: no accounts on {db}"


@test
def key_lookups():
    for _ in range(60):
        k = some_key(existing=rng.random() < 0.8)
        lockstep("simple", f"SELECT * FROM accounts WHERE id = {k}")
        lockstep("extended", "SELECT * FROM accounts WHERE id = $1", [k])
    for _ in range(25):
        k = some_key()
        lockstep("simple", f"SELECT a.name, i.item_no, i.label, i.qty FROM accounts a JOIN items i "
                           f"ON i.acct_id = a.id WHERE a.id = {k} ORDER BY i.item_no")
        lockstep("extended", "SELECT count(*), sum(qty), max(label), min(item_no) FROM items WHERE acct_id = $1", [k])
        lockstep("extended", "SELECT id, tags, balance FROM accounts WHERE id = $1", [k], result_formats=[1])
    for _ in range(25):
        ks = same_partition_keys(rng.randrange(2, 6))
        lockstep("simple", f"SELECT id, name, note FROM accounts WHERE id IN ({','.join(map(str, ks))}) ORDER BY id")
        lockstep("extended", "SELECT id, balance FROM accounts WHERE id = ANY($1) ORDER BY id DESC",
                 ["{" + ",".join(map(str, ks)) + "}"])
        lockstep("simple", f"SELECT acct_id, count(*) FROM items WHERE acct_id = {ks[0]} OR acct_id = {ks[-1]} "
                           "GROUP BY acct_id ORDER BY acct_id")
    for _ in range(25):
        slug = rng.choice(sorted(DOCS)) if rng.random() < 0.8 else word() + "-none"
        lockstep("simple", f"SELECT slug, body, n FROM docs WHERE slug = {sql_lit(slug)}")
        lockstep("extended", "SELECT slug, length(body), n FROM docs WHERE slug = $1", [slug])
    for lo, hi in [(-600, 0), (100, 999), (1000, 1999), (1200, 1300), (2000, 9999), (2500, 2600)]:
        lockstep("simple", f"SELECT * FROM events WHERE id BETWEEN {lo} AND {hi} ORDER BY id")
        lockstep("extended", "SELECT id, kind FROM events WHERE id >= $1 AND id <= $2 ORDER BY id DESC", [lo, hi])
    lockstep("simple", "SELECT code, name FROM countries ORDER BY code")
    lockstep("extended", "SELECT name FROM countries WHERE code = $1", ["ru"])
    finish("key lookups")


@test
def single_shard_updates_and_deletes():
    for _ in range(40):
        k = some_key(existing=rng.random() < 0.85)
        lockstep("simple", f"UPDATE accounts SET balance = balance + 1.25, note = NULL WHERE id = {k} "
                           "RETURNING id, balance, note")
        lockstep("extended", "UPDATE accounts SET name = $2, tags = tags || $3::text[] WHERE id = $1 RETURNING *",
                 [k, word(), "{x,ÿ}"])
        lockstep("extended", "UPDATE items SET qty = qty * 2 WHERE acct_id = $1 AND qty < $2", [k, 10])
        # the key set to the value the WHERE requires (multi-tenant ORMs' UPDATE): nothing moves
        lockstep("simple", f"UPDATE accounts SET id = {k}, note = 'same key' WHERE id = {k} RETURNING id, note")
        lockstep("extended", "UPDATE items SET acct_id = $1, qty = qty + 1 WHERE acct_id = $1 AND qty > $2", [k, 3])
    for _ in range(25):
        a, n = rng.choice(sorted(ITEMS))
        lockstep("simple", f"DELETE FROM items WHERE acct_id = {a} AND item_no = {n} RETURNING *")
        lockstep("extended", "DELETE FROM items WHERE acct_id = $1 AND item_no = $2 RETURNING label", [a, n])
        k = some_key()
        lockstep("extended", "DELETE FROM accounts WHERE id = $1 AND note IS NULL RETURNING id, name", [k])
    for _ in range(20):
        slug = rng.choice(sorted(DOCS))
        lockstep("extended", "UPDATE docs SET n = n + 1, body = body || $2 WHERE slug = $1 RETURNING n", [slug, "✓"])
        lockstep("simple", f"DELETE FROM docs WHERE slug = {sql_lit(slug)} AND n < 0")
    for k in [-3, 999, 1000, 1999, 2000, 4999]:
        lockstep("simple", f"UPDATE events SET payload = payload || '!' WHERE id = {k} RETURNING *")
    for k in [-3, 500, 1000, 1500, 2000, 4990]:  # [k, k+3] within one range
        # several rows without ORDER BY: their order is heap order, which differs by history
        lockstep("extended", "DELETE FROM events WHERE id BETWEEN $1 AND $2 RETURNING id", [k, k + 3],
                 unordered=True)
    finish("single-shard UPDATE/DELETE")


@test
def key_set_by_an_orm_save():
    # What ORMs send to save a loaded object: the key set to the row's own value, the row
    # found by something else. The value's shard runs it; every other shard checks that it
    # holds no row the statement matches (the guarded UPDATE, routing.md).
    for _ in range(25):
        k = some_key(existing=rng.random() < 0.8)
        lockstep("simple", f"UPDATE accounts SET id = {k}, note = 'saved' WHERE id + 0 = {k} RETURNING id, note")
        lockstep("extended", "UPDATE accounts SET id = $1, name = $2 WHERE id + 0 = $1 RETURNING id, name",
                 [k, word()])
    lockstep("simple", "BEGIN")
    for k in rng.sample(sorted(ACCOUNTS), 4):
        lockstep("extended", "UPDATE accounts SET id = $1, balance = 7.5 WHERE id + 0 = $1", [k])
    lockstep("simple", "COMMIT")
    # A value that belongs on another shard than the row: refused with SPR01 and nothing
    # changed (the tables are compared with plain PostgreSQL, which did not run it).
    for t in TARGETS[1:]:
        shard_of = {}
        for i, (port, db) in enumerate(t.shards):
            c = direct(port, db)
            cur = c.cursor()
            cur.execute("SELECT id FROM accounts")
            shard_of.update((row[0], i) for row in cur.fetchall())
            c.close()
        k = rng.choice(sorted(shard_of))
        v = next(x for x in sorted(shard_of) if shard_of[x] != shard_of[k])
        for kind in ("simple", "extended", "block"):
            if kind == "simple":
                r = t.w.query(f"UPDATE accounts SET id = {v}, note = 'moved' WHERE id + 0 = {k}")
            elif kind == "extended":
                r = t.w.extended("UPDATE accounts SET id = $1, note = 'moved' WHERE id + 0 = $2", [v, k])
            else:
                t.w.query("BEGIN")
                r = t.w.query(f"UPDATE accounts SET id = {v} WHERE name IS NOT NULL OR id = {k}")
                t.w.query("ROLLBACK")
            if not r.error or r.error.get("C") != "SPR01":
                MISMATCHES.append(f"{t.name}: moving row {k} to key {v} ({kind}) was not refused with SPR01: "
                                  f"{short(outcome(r))}")
    finish("the key set by an ORM's save()")


@test
def insert_on_conflict_and_errors():
    for _ in range(40):
        k = some_key(existing=rng.random() < 0.5)
        lockstep("simple", f"INSERT INTO accounts (id, name, balance) VALUES ({k}, {sql_lit(word())}, 10.5) "
                           "ON CONFLICT (id) DO UPDATE SET balance = coalesce(accounts.balance, 0) + excluded.balance, "
                           "name = excluded.name RETURNING id, name, balance, (xmax = 0) AS inserted")
        lockstep("extended", "INSERT INTO accounts (id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id",
                 [some_key(existing=False), word()])
        lockstep("extended", "INSERT INTO items (acct_id, item_no, label, qty) VALUES ($1, $2, $3, $4) "
                             "ON CONFLICT (acct_id, item_no) DO UPDATE SET qty = items.qty + excluded.qty "
                             "RETURNING acct_id, item_no, qty", [k, rng.randrange(0, 6), word(), 3])
    for _ in range(15):
        k = rng.choice(sorted(ACCOUNTS))
        # duplicate key: the same error (SQLSTATE and message) as PostgreSQL's
        lockstep("simple", f"INSERT INTO accounts (id, name) VALUES ({k}, 'dup')")
        lockstep("extended", "INSERT INTO accounts (id, name) VALUES ($1, $2)", [k, "dup"])
        lockstep("extended", "INSERT INTO items (acct_id, item_no, qty) VALUES ($1, $2, $3)", [k, 0, None])
    for _ in range(15):
        slug = rng.choice(sorted(DOCS)) if rng.random() < 0.5 else word() + "-new"
        lockstep("extended", "INSERT INTO docs VALUES ($1, $2, $3) ON CONFLICT (slug) DO UPDATE SET n = 0 "
                             "RETURNING slug, n", [slug, "b", 7])
    finish("INSERT ... ON CONFLICT")


@test
def refused_statements_postgresql_rejects_anyway():
    # A statement the proxy would refuse (SPR01/SPC01) that PostgreSQL rejects too gets
    # PostgreSQL's own error, code, message and position: the one a user meets first.
    for kind in ("simple", "extended"):
        lockstep(kind, "UPDATE accounts SET id = id + 1 WHERE nope = 1")
        lockstep(kind, "SELECT count(DISTINCT name) FROM accounts FOR UPDATE")
        lockstep(kind, "SELECT id, nope FROM accounts FOR SHARE")
        lockstep(kind, "SELECT a.id FROM accounts a JOIN items i ON i.label = a.name WHERE i.nope > 0 FOR UPDATE")
    lockstep("simple", "BEGIN")
    lockstep("simple", "SELECT name + 1 FROM accounts FOR UPDATE")
    lockstep("simple", "SELECT 1")
    lockstep("simple", "ROLLBACK")
    finish("refused statements PostgreSQL rejects anyway")


@test
def explain_over_several_shards():
    # EXPLAIN of a statement on several shards shows each shard's plan, under a line
    # naming the shard (text format), or one row per shard (other formats); it was 0A000
    # for reads. The plans themselves differ from plain PostgreSQL's (other data).
    import json
    for t in TARGETS[1:]:
        names = [f"s{i}" for i in range(len(t.shards))]
        for kind in ("simple", "extended", "block"):
            sql = "EXPLAIN (COSTS OFF) SELECT id, name FROM accounts WHERE name = 'x' ORDER BY id"
            if kind == "block":
                t.w.query("BEGIN").raise_error()
            r = t.w.query(sql) if kind != "extended" else t.w.extended(sql, [])
            lines = [row[0] for row in r.results[0].rows] if not r.error else [f"error {r.error}"]
            heads = [x for x in lines if x.startswith("splitpoint: shard ")]
            if heads != [f"splitpoint: shard {n}" for n in names] or not any("Filter" in x for x in lines):
                MISMATCHES.append(f"{t.name} {kind}: EXPLAIN over every shard: {lines}")
            if kind == "block":
                t.w.query("COMMIT").raise_error()
        r = t.w.query("EXPLAIN (ANALYZE, FORMAT JSON, COSTS OFF) SELECT count(*) FROM items")
        plans = [] if r.error else [json.loads(row[0]) for row in r.results[0].rows]
        if len(plans) != len(names) or any(p[0]["Plan"]["Node Type"] != "Aggregate" for p in plans):
            MISMATCHES.append(f"{t.name}: EXPLAIN (FORMAT JSON) over every shard: {r.error or plans}")
    finish("EXPLAIN over several shards")


@test
def for_update_over_several_shards():
    # FOR UPDATE/SHARE on several shards: each shard locks the rows it returns (SPC01
    # before). Same answers as plain PostgreSQL, and the rows are locked where they are.
    for kind in ("simple", "extended"):
        lockstep("simple", "BEGIN")
        lockstep(kind, "SELECT id, name FROM accounts WHERE balance > 50 ORDER BY id FOR UPDATE")
        lockstep(kind, "SELECT a.id FROM accounts a WHERE a.note IS NULL ORDER BY a.id DESC FOR SHARE NOWAIT")
        lockstep(kind, "SELECT a.id, a.name FROM accounts a WHERE a.balance < 10 FOR NO KEY UPDATE OF a", unordered=True)
        lockstep("simple", "COMMIT")
    for t in TARGETS[1:]:
        shard_of, conn = {}, {}
        for i, (port, db) in enumerate(t.shards):
            conn[i] = direct(port, db)
            cur = conn[i].cursor()
            cur.execute("SELECT id FROM accounts")
            shard_of.update((row[0], i) for row in cur.fetchall())
        k1 = min(shard_of)
        k2 = next(k for k in sorted(shard_of) if shard_of[k] != shard_of[k1])
        t.w.query("BEGIN").raise_error()
        r = t.w.query(f"SELECT id FROM accounts WHERE id + 0 IN ({k1}, {k2}) ORDER BY id FOR UPDATE")
        if r.error or sorted(int(x[0]) for x in r.results[0].rows) != sorted([k1, k2]):
            MISMATCHES.append(f"{t.name}: FOR UPDATE over two shards: {short(outcome(r))}")
        for k in (k1, k2):  # each row is locked on its own shard
            cur = conn[shard_of[k]].cursor()
            try:
                cur.execute("SET lock_timeout = '200ms'")
                cur.execute(f"UPDATE accounts SET note = note WHERE id = {k}")
                MISMATCHES.append(f"{t.name}: row {k} was not locked on its shard")
            except Exception as e:  # noqa: BLE001
                if getattr(e, "pgcode", None) != "55P03":
                    MISMATCHES.append(f"{t.name}: row {k}: {e}")
        t.w.query("ROLLBACK").raise_error()
        # a queue's workers: SKIP LOCKED with LIMIT, each gets a row of its own
        other = pgwire.connect(HOST, t.port, "app", t.db, password="secret", timeout=30)
        got = []
        for w in (t.w, other):
            w.query("BEGIN").raise_error()
            r = w.query("SELECT id FROM accounts ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
            got.append(None if r.error else r.results[0].rows[0][0])
        for w in (t.w, other):
            w.query("ROLLBACK")
        other.close()
        if None in got or got[0] == got[1]:
            MISMATCHES.append(f"{t.name}: two workers' SKIP LOCKED took {got}")
        for c in conn.values():
            c.close()
    finish("FOR UPDATE over several shards")


@test
def transactions_commit_and_rollback():
    for i in range(20):
        k = some_key()
        ks = same_partition_keys(2)
        commit = i % 2 == 0
        kind = "simple" if i % 3 else "extended"
        run = (lambda sql, params=(): lockstep(kind, sql, params)) if kind == "extended" else \
            (lambda sql, params=(): lockstep("simple", sql))
        if kind == "extended":
            run("BEGIN")
            run("SELECT id, balance FROM accounts WHERE id = $1", [ks[0]])
            run("UPDATE accounts SET balance = $2 WHERE id = $1 RETURNING balance", [k, f"{i}.5"])
            run("INSERT INTO items (acct_id, item_no, label, qty) VALUES ($1, $2, $3, 1) "
                "ON CONFLICT (acct_id, item_no) DO NOTHING", [k, 50 + i, "txn"])
            run("SELECT acct_id, item_no, label FROM items WHERE acct_id = $1 ORDER BY item_no", [k])
            run("COMMIT" if commit else "ROLLBACK")
        else:
            run("BEGIN")
            run(f"SELECT id, balance FROM accounts WHERE id = {ks[0]}")
            run(f"UPDATE accounts SET balance = {i}.75 WHERE id = {k} RETURNING balance")
            run(f"DELETE FROM items WHERE acct_id = {k} AND item_no = 0 RETURNING *")
            run(f"INSERT INTO items (acct_id, item_no, label, qty) VALUES ({k}, {80 + i}, 'txn', 2)")
            run(f"SELECT acct_id, item_no, label FROM items WHERE acct_id = {k} ORDER BY item_no")
            run("COMMIT" if commit else "ROLLBACK")
        lockstep("simple", f"SELECT * FROM accounts WHERE id = {k}")
    # an error inside a transaction aborts it on every target
    k = rng.choice(sorted(ACCOUNTS))
    lockstep("simple", "BEGIN")
    lockstep("simple", f"UPDATE accounts SET note = 'aborted' WHERE id = {k}")
    lockstep("simple", f"INSERT INTO accounts (id) VALUES ({k})")
    lockstep("simple", f"SELECT * FROM accounts WHERE id = {k}")
    lockstep("simple", "COMMIT")
    lockstep("simple", f"SELECT note FROM accounts WHERE id = {k}")
    finish("transactions")


@test
def multi_shard_writes_simple_protocol():
    for _ in range(6):
        ks = [some_key(existing=False) for _ in range(rng.randrange(3, 12))]
        ks = sorted(set(ks))
        values = ",".join(f"({k}, {sql_lit(word())}, {rng.randrange(100)}.00)" for k in ks)
        lockstep("simple", f"INSERT INTO accounts (id, name, balance) VALUES {values} RETURNING id, name, balance",
                 unordered=True)
    for _ in range(4):
        ks = sorted({some_key() for _ in range(8)})
        values = ",".join(f"({k}, {sql_lit(word())}, 1.00)" for k in ks)
        lockstep("simple", f"INSERT INTO accounts (id, name, balance) VALUES {values} ON CONFLICT (id) DO UPDATE "
                           "SET balance = accounts.balance + 1 RETURNING id, balance", unordered=True)
        lockstep("simple", f"INSERT INTO accounts (id, name) VALUES {','.join(f'({k}, NULL)' for k in ks)} "
                           "ON CONFLICT DO NOTHING", unordered=True)
    lockstep("simple", "UPDATE accounts SET note = 'neg' WHERE balance < 0")
    lockstep("simple", "UPDATE items SET qty = qty + 1 WHERE label IS NULL RETURNING acct_id, item_no, qty",
             unordered=True)
    lockstep("simple", "DELETE FROM items WHERE qty = 0")
    lockstep("simple", "DELETE FROM docs WHERE n > 45 RETURNING slug", unordered=True)
    lockstep("simple", "UPDATE events SET kind = 'range' WHERE id BETWEEN 900 AND 2100")
    lockstep("simple", "INSERT INTO countries VALUES ('kr', '대한민국')")
    lockstep("simple", "UPDATE countries SET name = upper(name) WHERE code <> 'jp'")
    # a text of several statements run on every shard: one result (rows, tag with the
    # shards' counts summed) per statement, as on one PostgreSQL
    lockstep("simple", "UPDATE accounts SET note = 'low' WHERE balance < 10; "
                       "UPDATE accounts SET note = 'high' WHERE balance >= 90")
    lockstep("simple", "DELETE FROM items WHERE qty = 1 RETURNING acct_id, item_no; "
                       "UPDATE items SET qty = qty + 1 WHERE qty = 2; CREATE INDEX ON items (qty)", unordered=True)
    lockstep("simple", "BEGIN; UPDATE accounts SET note = NULL WHERE note = 'low'; "
                       "DELETE FROM items WHERE qty = 3; COMMIT")
    # a failing multi-row INSERT whose rows are all on one shard changes nothing
    k = some_key(existing=False)
    lockstep("simple", f"INSERT INTO accounts (id) VALUES ({k}), ({k})")
    finish("multi-shard writes (simple protocol)")


@test
def several_statements_in_one_text():
    # A text of several statements that no one shard runs whole: each statement is
    # answered, in order, the first error ends the text, and what it wrote outside a
    # block is applied whole or not at all (one implicit transaction), as on one
    # PostgreSQL; one ReadyForQuery (its status compared too).
    k1, k2 = rng.sample(sorted(ACCOUNTS), 2)
    new1, new2 = some_key(existing=False), some_key(existing=False)
    lockstep("simple", "SELECT count(*) FROM accounts; SELECT id, name FROM accounts WHERE id = "
                       f"{k1}; SELECT max(balance), min(id), count(DISTINCT name) FROM accounts")
    lockstep("simple", "SELECT count(*) FROM items; SELECT 1/0; SELECT 2")
    lockstep("simple", f"SELECT balance FROM accounts WHERE id = {k1}; UPDATE accounts SET balance = balance - 5 "
                       f"WHERE id IN ({k1}, {k2}) RETURNING id, balance; SELECT sum(balance) FROM accounts",
             unordered=True)
    # written, then an error: nothing of the text stays
    lockstep("simple", f"UPDATE accounts SET balance = balance + 7 WHERE id = {k1}; "
                       f"UPDATE accounts SET balance = balance + 7 WHERE id = {k2}; SELECT 1/0")
    lockstep("simple", f"INSERT INTO accounts (id, name) VALUES ({new1}, 'text'); "
                       f"INSERT INTO accounts (id, name) VALUES ({new2}, 'text'); "
                       f"INSERT INTO accounts (id, name) VALUES ({k1}, 'dup')")
    lockstep("simple", f"SELECT id, balance FROM accounts WHERE id IN ({k1}, {k2}, {new1}, {new2}) ORDER BY id")
    six = sorted({some_key(existing=False) for _ in range(6)})  # (certainly on more than one shard)
    lockstep("simple", "; ".join(f"INSERT INTO accounts (id, name) VALUES ({k}, 'six') RETURNING id" for k in six))
    # the text's own block, and a block opened before it
    lockstep("simple", "BEGIN; SELECT count(*) FROM items; UPDATE items SET qty = qty + 1 WHERE qty = 5; "
                       "SELECT sum(qty), count(DISTINCT label) FROM items; COMMIT")
    lockstep("simple", "BEGIN")
    lockstep("simple", "SELECT count(*) FROM accounts; DELETE FROM items WHERE qty = 7; SELECT count(*) FROM items")
    lockstep("simple", "ROLLBACK")
    lockstep("simple", "SELECT count(*) FROM items WHERE qty = 7; SELECT count(*) FROM accounts")
    finish("several statements in one text")


@test
def multi_shard_writes_extended_protocol():
    # SPEC §3: INSERT ... VALUES rows are grouped by shard and keyless UPDATE/DELETE go to
    # all shards, whatever the protocol.
    ks = sorted({some_key(existing=False) for _ in range(6)})
    sql = "INSERT INTO accounts (id, name) VALUES " + ",".join(f"(${i + 1}, 'ext')" for i in range(len(ks))) + \
        " RETURNING id, name"
    lockstep("extended", sql, ks, unordered=True)
    lockstep("extended", "UPDATE accounts SET note = $1 WHERE name = $2", ["ext-note", "ext"])
    lockstep("extended", "DELETE FROM items WHERE qty > $1", [30])
    finish("multi-shard writes (extended protocol)")


# ------------------------------------------------------------------ main

def reset_after_failure():
    MISMATCHES.clear()
    for t in TARGETS:  # leave any transaction a failure left open
        try:
            t.reconnect()
        except Exception:  # noqa: BLE001
            pass


def main():
    print(f"seed {SEED} (set RT_SEED for other data), suffix {SUFFIX}")
    return sptest.run_tests(TESTS, setup, teardown, after_failure=reset_after_failure, watch=lambda: PROXIES)


if __name__ == "__main__":
    sys.exit(main())
