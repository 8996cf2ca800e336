#!/usr/bin/env python3
"""Scatter-gather differential (SPEC §4): multi-shard SELECTs through splitpoint over
three shards must answer exactly what one plain PostgreSQL holding every row answers.

Databases (made for this run, dropped at the end): shards sc0 and sc1 on PG0, sc2 on
PG1; the plain database on PG1. Schema and data (seeded random, identical on both
sides, loaded through the proxy with multi-row INSERTs and COPY text/csv, and with the
same statements into the plain database):

  orders     hash (12 partitions) on bigint order_id     20000 rows
  ledger     hash, same distribution, order_id             600 rows (keyset pagination)
  customers  hash (12 partitions) on text name            8000 rows (COPY text)
  events     range on bigint id: <0 s0, <10000 s1, rest s2 15000 rows (INSERT + COPY csv)
  countries  reference table                                40 rows

Columns cover bigint/int/numeric (with and without typmod, mixed scales)/float8
(NaN, ±Infinity, -0)/text (multibyte, empty, quotes, backslashes)/date (BC,
infinity)/timestamptz/bool/uuid, with NULLs, ties and negative numbers. float8 columns
that are summed hold multiples of 0.25 so every summation order is exact (the column
with arbitrary values, NaN and ±Infinity is summed only over ±Infinity and zeros: a float
sum's last bits and NaN sign depend on the order of addition, the inexactness
docs/scatter-gather.md states).

Checks: after loading, every table read directly from the shards and united equals
the plain table. Then 250 SELECTs (plain concatenation, ORDER BY in every form,
LIMIT/OFFSET literal and $n (also NULL), aggregates with and without GROUP BY, HAVING,
DISTINCT, ORDER BY/LIMIT over aggregates, joins and sub-selects with the reference
table, CTEs, key IN lists and ranges touching a subset of shards, negative LIMIT/OFFSET
giving PostgreSQL's SQLSTATE, texts of one shape with other literals, which the
proxy answers from the shape's template), each run three ways: simple protocol (psycopg2,
values kept as the server's text), extended protocol with text results and with binary
results (pgwire; raw bytes of every value). Column names, type OIDs, sizes, typmods and
formats, the command tag and the rows must be identical: in order where ORDER BY fixes
it; where ORDER BY leaves ties, the sequence of sort-key values must match and each
group of tied rows must match as a multiset (the first and last group excepted when
LIMIT/OFFSET may cut through a group); without ORDER BY as multisets. Keyset
pagination (SPEC's example, ties on created_at) walks every page through both and
returns every row exactly once. Statements the merger cannot combine
(count(DISTINCT x), percentile_cont, window functions, ...) go to the combine step
and must match plain PostgreSQL too; FOR UPDATE with LIMIT over several shards (without
SKIP LOCKED) fails with SPC01.
Every statement must count as multi-shard in /metrics (it was merged, not forwarded),
and for the key IN lists / ranges SHOW splitpoint.last_scatter must show the shards
that own no key as skipped. COPY (query) TO STDOUT and COPY table TO STDOUT (text, csv
with every option that changes the bytes, binary; ordered, aggregated, LIMIT/OFFSET,
unordered; and ones only the combine step answers, count(DISTINCT)) through both
protocols must send the very messages plain PostgreSQL sends (unordered ones: the same
CopyData messages as a multiset). Last, a small table in ICU (en-US) databases: text order,
min/max, GROUP BY and DISTINCT must match plain PostgreSQL (merged with the ICU collator).

A check that fails because of a known proxy bug is listed in KNOWN (printed as
"KNOWN FAILURE: ..." without failing the run); every other mismatch fails the test.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import datetime as dt
import io
import os
import random
import re
import secrets
import sys
import time
import urllib.request
import uuid
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
import psycopg2  # noqa: E402
import psycopg2.extensions  # noqa: E402

HOST = sptest.HOST
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("sc-diff")
SEED = int(os.environ.get("SC_SEED", "424242"))  # fixed: every run loads the same data
rng = random.Random(SEED)
SUFFIX = secrets.token_hex(4)
P = 12

SHARDS = [(PG0, f"sc0_{SUFFIX}"), (PG0, f"sc1_{SUFFIX}"), (PG1, f"sc2_{SUFFIX}")]
PLAIN = (PG1, f"scplain_{SUFFIX}")
ALL_DBS = SHARDS + [PLAIN]

# psycopg2: every value as the server's text, so the simple protocol is compared byte
# for byte too (no float/Decimal/datetime conversion hiding differences).
RAW_OIDS = (16, 17, 18, 19, 20, 21, 23, 25, 26, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266,
            1700, 2950, 3802, 114)
psycopg2.extensions.register_type(psycopg2.extensions.new_type(RAW_OIDS, "SP_RAW", lambda v, cur: v))

# ------------------------------------------------------------------ known proxy bugs
# (statement id, mode) -> diagnosis. mode: simple | text | binary | * (any). A listed
# check that fails prints "KNOWN FAILURE: ..." and does not fail the run; one that
# passes prints a note so it can be made a hard assertion again.
KNOWN = {}

# ------------------------------------------------------------------ harness


free_port = sptest.free_port
class Proxy(sptest.Proxy):
    """One splitpoint process (tests/lib/sptest.py) with its config and log in WORKDIR."""

    def __init__(self, name, body):
        super().__init__(name, body, WORKDIR)
def superuser(port):
    c = psycopg2.connect(host=HOST, port=port, user="postgres", password="postgres", dbname="postgres",
                         connect_timeout=10)
    c.autocommit = True
    return c


def direct(port, db):
    c = psycopg2.connect(host=HOST, port=port, user="app", password="secret", dbname=db, connect_timeout=10)
    c.autocommit = True
    return c


PROXY = None


def proxy_config():
    lines = "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, password: secret }}"
                      for i, (port, db) in enumerate(SHARDS))
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{lines}
distributions:
  - name: by_order
    method: hash
    partitions: {P}
    tables:
      orders: order_id
      ledger: order_id
  - name: by_name
    method: hash
    partitions: {P}
    tables:
      customers: name
  - name: by_event
    method: range
    ranges:
      - {{ upto: 0, shard: s0 }}
      - {{ upto: 10000, shard: s1 }}
      - {{ shard: s2 }}
    tables:
      events: id
reference_tables: [countries]
unlisted_tables: reject
scatter:
  deadline: 60s
  max_deadline: 120s
  partial_results: deny
"""


class Target:
    """The plain database or the proxy: a psycopg2 connection (simple protocol) and a
    pgwire connection (extended protocol)."""

    def __init__(self, name, port, db):
        self.name, self.port, self.db = name, port, db
        self.psy = psycopg2.connect(host=HOST, port=port, user="app", password="secret", dbname=db,
                                    connect_timeout=10)
        self.psy.autocommit = True
        self.wire = pgwire.connect(HOST, port, "app", db, password="secret", timeout=60)

    def close(self):
        for f in (self.psy.close, self.wire.close):
            try:
                f()
            except Exception:  # noqa: BLE001
                pass


PLAIN_T = None
PROXY_T = None

# ------------------------------------------------------------------ results (tests/lib/difftest.py)

from difftest import MODES, first_diff, run, run_simple, short  # noqa: E402
import difftest  # noqa: E402


# ------------------------------------------------------------------ failures

CHECKS = sptest.Checks(KNOWN, label="MISMATCH")


def check(ok, sid, mode, what):
    """Records one check. `what` is a function giving the detail text (only built on failure)."""
    key = next((k for k in ((sid, mode), (sid, "*")) if k in KNOWN), None)
    return CHECKS.check(ok, f"{sid} {mode}", what, key=key)


def compare(sid, mode, sql, params, exp, got, order):
    """order: 'set' | 'exact' | ('keys', [idx...], partial) | 'count' | 'error' (same SQLSTATE)"""
    return difftest.compare(check, sid, mode, sql, params, exp, got, order)


# ------------------------------------------------------------------ data

STATUSES = ["new", "paid", "shipped", "cancelled", "Ärger", "ünïcödé", "日本", "🚀 rocket", "", "Zulu", "zulu",
            "émoji 😀", "a b", "A"]
ALPHABET = list("abcXYZ019 -_'\\") + ["é", "ß", "Ω", "ж", "日", "本", "😀", "ñ", "Å", "é"]
CITIES = ["Berlin", "berlin", "Zürich", "São Paulo", "東京", "서울", "Москва", "Ōsaka", "", "Reykjavík", "Łódź",
          "Aarhus", "Åre", "Zagreb"]
KINDS = ["click", "view", "buy", "Kauf", "клик", "購入", "", "z"]
NAME_STEMS = ["alice", "Alice", "émile", "Zoë", "東京", "o'brien", "back\\slash", "a b", "Ω", "ßtraße", "zz", "ä",
              "Émile", "😀"]
UTC = dt.timezone.utc
BASE_TS = dt.datetime(2024, 1, 1, tzinfo=UTC)

ORDERS = []     # tuples in column order
LEDGER = []
CUSTOMERS = []
EVENTS = []
COUNTRIES = []

ORDER_COLS = ("order_id", "customer_id", "created_at", "shipped_at", "amount", "weight", "qty", "price", "ratio",
              "status", "note", "paid", "ship_date", "token", "country")


def maybe(p, f):
    return None if rng.random() < p else f()


def rand_text(lo, hi):
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(lo, hi)))


def rand_weight():
    s = rng.randrange(0, 7)
    ip = rng.randrange(-999, 1000)
    if s == 0:
        return str(ip)
    return f"{ip}.{rng.randrange(0, 10 ** s):0{s}d}"


def make_data():
    for i in range(40):
        code = chr(65 + i // 26) + chr(65 + i % 26)
        COUNTRIES.append((code, rng.choice(["Deutschland", "日本", "Россия", "España", "Ísland", "Brasil"]) + f" {i}",
                          rng.choice(["EU", "ASIA", "AM", "AF", None])))
    codes = [c[0] for c in COUNTRIES]

    ids = set(rng.sample(range(-60000, 60000), 19990))
    ids |= {0, 1, -1, 9007199254740993, -9007199254740993, 4611686018427387904}
    while len(ids) < 20000:
        ids.add(rng.randrange(60000, 10**12))
    special_ratio = ["NaN", "Infinity", "-Infinity", "-0", "0", "1e-300", "1.7976931348623157e+308"]
    special_dates = ["0044-03-15 BC", "infinity", "-infinity", "1999-12-31"]
    for oid in sorted(ids, key=lambda _: rng.random()):
        created = BASE_TS + dt.timedelta(minutes=rng.randrange(0, 2500))
        if rng.random() < 0.01:
            created = dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        ORDERS.append((
            oid,
            maybe(0.05, lambda: rng.randrange(-50, 400)),
            created.isoformat(sep=" "),
            maybe(0.2, lambda: (created + dt.timedelta(seconds=rng.randrange(0, 10**6),
                                                       microseconds=rng.randrange(0, 10**6))).isoformat(sep=" ")),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-100000, 1000000)) / 100:.2f}"),
            maybe(0.05, rand_weight) if rng.random() > 0.001 else "123456789012345678901234567890.123456789",
            maybe(0.05, lambda: rng.randrange(-3, 21)),
            maybe(0.05, lambda: repr(rng.randrange(-4000, 40000) * 0.25)),
            maybe(0.05, lambda: repr(rng.uniform(-1e6, 1e6)) if rng.random() > 0.002 else rng.choice(special_ratio)),
            maybe(0.05, lambda: rng.choice(STATUSES)),
            maybe(0.03, lambda: rand_text(0, 10)),
            maybe(0.1, lambda: rng.random() < 0.6),
            maybe(0.1, lambda: (dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(0, 11000))).isoformat()
                  if rng.random() > 0.002 else rng.choice(special_dates)),
            maybe(0.05, lambda: str(uuid.UUID(int=rng.getrandbits(128)))),
            maybe(0.05, lambda: rng.choice(codes)),
        ))
    lids = rng.sample(range(-5000, 5000), 600)
    for lid in lids:
        LEDGER.append((lid, (BASE_TS + dt.timedelta(hours=rng.randrange(0, 40))).isoformat(sep=" "),
                       rand_text(1, 6)))
    names = set()
    while len(CUSTOMERS) < 8000:
        name = rng.choice(NAME_STEMS) + rng.choice(["", "-", " ", "_"]) + str(rng.randrange(0, 100000))
        if name in names:
            continue
        names.add(name)
        CUSTOMERS.append((
            name,
            maybe(0.1, lambda: rng.choice(CITIES)),
            maybe(0.03, lambda: rng.randrange(-100, 100)),
            maybe(0.05, lambda: (dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(0, 20000))).isoformat()),
            maybe(0.1, lambda: rng.random() < 0.3),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-10**8, 10**8)) / 10000:.4f}"),
        ))
    for eid in rng.sample(range(-5000, 25000), 15000):
        EVENTS.append((
            eid,
            maybe(0.05, lambda: rng.choice(KINDS)),
            (BASE_TS + dt.timedelta(seconds=rng.randrange(0, 10**7))).isoformat(sep=" "),
            maybe(0.05, lambda: repr(rng.randrange(-1000, 1000) * 0.25)),
            maybe(0.05, lambda: rng.randrange(-10, 10)),
            maybe(0.05, lambda: rng.random() < 0.5),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-10**6, 10**6)) / 1000:.3f}"),
        ))


DDL = [
    "CREATE TABLE orders (order_id bigint PRIMARY KEY, customer_id bigint, created_at timestamptz NOT NULL, "
    "shipped_at timestamptz, amount numeric(12,2), weight numeric, qty int, price float8, ratio float8, "
    "status text, note text, paid bool, ship_date date, token uuid, country text)",
    "CREATE INDEX ON orders (created_at, order_id)",
    "CREATE TABLE ledger (order_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, memo text)",
    "CREATE TABLE customers (name text PRIMARY KEY, city text, score int, born date, vip bool, "
    "balance numeric(14,4))",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text, at timestamptz NOT NULL, val float8, n int, "
    "flag bool, amount numeric(10,3))",
    "CREATE TABLE countries (code text PRIMARY KEY, name text, region text)",
]


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def copy_text(v):
    if v is None:
        return "\\N"
    if isinstance(v, bool):
        return "t" if v else "f"
    return str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def copy_csv(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "t" if v else "f"
    return '"' + str(v).replace('"', '""') + '"'


def load_statements():
    """(kind, payload) in load order: ('sql', text) or ('copy', (sql, data))."""
    out = [("sql", s) for s in DDL]
    out.append(("sql", "INSERT INTO countries VALUES " + ",".join(
        "(" + ",".join(sql_lit(v) for v in row) + ")" for row in COUNTRIES)))
    for i in range(0, len(ORDERS), 500):
        out.append(("sql", "INSERT INTO orders VALUES " + ",".join(
            "(" + ",".join(sql_lit(v) for v in row) + ")" for row in ORDERS[i:i + 500])))
    out.append(("sql", "INSERT INTO ledger VALUES " + ",".join(
        "(" + ",".join(sql_lit(v) for v in row) + ")" for row in LEDGER)))
    out.append(("copy", ("COPY customers FROM STDIN",
                         "".join("\t".join(copy_text(v) for v in row) + "\n" for row in CUSTOMERS))))
    half = len(EVENTS) // 2
    for i in range(0, half, 1000):
        out.append(("sql", "INSERT INTO events (id, kind, at, val, n, flag, amount) VALUES " + ",".join(
            "(" + ",".join(sql_lit(v) for v in row) + ")" for row in EVENTS[i:min(i + 1000, half)])))
    out.append(("copy", ("COPY events (id, kind, at, val, n, flag, amount) FROM STDIN (FORMAT csv)",
                         "".join(",".join(copy_csv(v) for v in row) + "\n" for row in EVENTS[half:]))))
    out.append(("sql", "ANALYZE"))
    return out


def load(conn):
    cur = conn.cursor()
    for kind, payload in load_statements():
        if kind == "sql":
            cur.execute(payload)
        else:
            cur.copy_expert(payload[0], io.StringIO(payload[1]))
    cur.close()


TABLES = ["orders", "ledger", "customers", "events", "countries"]
SHARD_KEYS = {}   # table -> list of sets of keys per shard


def verify_load():
    """Every sharded table, read directly from the shards and united, equals the plain
    one; every shard has the whole reference table."""
    pc = direct(*PLAIN)
    for t in TABLES:
        cur = pc.cursor()
        cur.execute(f"SELECT x::text FROM {t} x")
        want = sorted(r[0] for r in cur.fetchall())
        got = []
        per_shard = []
        for port, db in SHARDS:
            c = direct(port, db)
            cc = c.cursor()
            cc.execute(f"SELECT x::text FROM {t} x")
            rows = sorted(r[0] for r in cc.fetchall())
            if t == "countries":
                if rows != want:
                    raise AssertionError(f"reference table countries on {db}: {len(rows)} rows, differs from plain")
            else:
                got += rows
            key = {"orders": "order_id", "ledger": "order_id", "customers": "name", "events": "id"}.get(t)
            if key:
                cc.execute(f"SELECT {key} FROM {t}")
                per_shard.append({r[0] if key == "name" else int(r[0]) for r in cc.fetchall()})
            c.close()
        if t != "countries":
            got.sort()
            if got != want:
                raise AssertionError(f"table {t}: shards hold {len(got)} rows, plain {len(want)}; "
                                     f"{first_diff(want, got)}")
            SHARD_KEYS[t] = per_shard
            print(f"     {t}: {len(want)} rows, per shard {[len(s) for s in per_shard]}")
    pc.close()


# ------------------------------------------------------------------ statements
# Each: (id, sql, params, order). order: 'set' | 'exact' | 'count' | keys(idx..., partial=)
# params are Python values: int for LIMIT/OFFSET/numbers, str otherwise.

def keys(*idx, partial=False):
    return ("keys", list(idx), partial)


STMTS = []


def S(sid, sql, params=(), order="set"):
    STMTS.append((sid, sql, tuple(params), order))


def build_statements():
    # --- plain concatenation (multisets)
    S("cat-01", "SELECT * FROM orders")
    S("cat-02", "SELECT order_id, status FROM orders WHERE qty > 15")
    S("cat-03", "SELECT name, city, score FROM customers WHERE score < 0")
    S("cat-04", "SELECT * FROM events WHERE flag")
    S("cat-05", "SELECT order_id, amount, price FROM orders WHERE amount IS NULL")
    S("cat-06", "SELECT note, token FROM orders WHERE status = '日本'")
    # --- FOR UPDATE/SHARE: each shard locks what it returns (with LIMIT: SKIP LOCKED)
    S("lck-01", "SELECT order_id, qty FROM orders WHERE qty > 3 FOR UPDATE")
    S("lck-02", "SELECT order_id FROM orders WHERE qty = 5 ORDER BY order_id FOR SHARE NOWAIT", order="exact")
    S("lck-03", "SELECT order_id, status FROM orders ORDER BY order_id DESC LIMIT 7 FOR NO KEY UPDATE SKIP LOCKED",
      order="exact")
    S("cat-07", "SELECT o.order_id, c.name, c.region FROM orders o JOIN countries c ON c.code = o.country "
                "WHERE o.qty = 7")
    S("cat-08", "SELECT * FROM customers WHERE name LIKE 'é%'")
    S("cat-09", "SELECT order_id, created_at FROM orders WHERE customer_id = $1", [42])
    S("cat-10", "SELECT id, kind FROM events WHERE n BETWEEN $1 AND $2", [-2, 1])
    S("cat-11", "SELECT order_id, ship_date FROM orders WHERE ship_date < '2001-01-01'")
    S("cat-12", "SELECT 1 AS one, order_id, price * 2 AS p2 FROM orders WHERE price = 0")
    S("cat-13", "SELECT * FROM orders WHERE qty > 1000")
    S("cat-14", "SELECT lower(status) AS ls, upper(note), length(note) FROM orders WHERE qty = 3")
    S("cat-15", "SELECT * FROM ledger")
    S("cat-16", "SELECT name, balance FROM customers WHERE balance > $1", ["9000.5"])
    S("cat-17", "SELECT id, at, val FROM events WHERE kind IS NULL")
    S("cat-18", "SELECT order_id, ratio FROM orders WHERE ratio::text IN ('NaN', 'Infinity', '-Infinity', '-0', '0')")
    S("cat-19", "SELECT order_id, weight FROM orders WHERE weight > 900")
    S("cat-20", "SELECT token, paid FROM orders WHERE paid IS NULL AND qty < 2")

    # --- ORDER BY (unique tiebreakers: exact order)
    S("ord-01", "SELECT order_id, status FROM orders ORDER BY order_id", order="exact")
    S("ord-02", "SELECT order_id FROM orders ORDER BY order_id DESC", order="exact")
    S("ord-03", "SELECT order_id, created_at FROM orders ORDER BY created_at, order_id LIMIT 300", order="exact")
    S("ord-04", "SELECT order_id, created_at FROM orders ORDER BY created_at DESC, order_id DESC LIMIT 300",
      order="exact")
    S("ord-05", "SELECT status, order_id FROM orders WHERE qty < 2 ORDER BY 1, 2", order="exact")
    S("ord-06", "SELECT order_id, qty, price FROM orders WHERE qty IS NOT NULL ORDER BY qty * price, order_id",
      order="exact")
    S("ord-07", "SELECT order_id, status FROM orders WHERE qty = 5 ORDER BY lower(status), order_id", order="exact")
    S("ord-08", "SELECT order_id, note FROM orders WHERE qty = 6 ORDER BY length(note) DESC, order_id",
      order="exact")
    S("ord-09", "SELECT note FROM orders WHERE qty = 4 ORDER BY amount, order_id", order="exact")
    S("ord-10", "SELECT order_id, amount FROM orders WHERE qty = 8 ORDER BY amount NULLS FIRST, order_id",
      order="exact")
    S("ord-11", "SELECT order_id, amount FROM orders WHERE qty = 8 ORDER BY amount DESC NULLS LAST, order_id DESC",
      order="exact")
    S("ord-12", "SELECT name FROM customers ORDER BY name", order="exact")
    S("ord-13", "SELECT name, city FROM customers ORDER BY city NULLS FIRST, name DESC", order="exact")
    S("ord-14", "SELECT name FROM customers ORDER BY name COLLATE \"C\" DESC", order="exact")
    S("ord-15", "SELECT token, order_id FROM orders WHERE qty = 9 ORDER BY token, order_id", order="exact")
    S("ord-16", "SELECT paid, order_id FROM orders WHERE qty = 10 ORDER BY paid, order_id", order="exact")
    S("ord-17", "SELECT ship_date, order_id FROM orders ORDER BY ship_date DESC, order_id LIMIT 500",
      order="exact")
    S("ord-18", "SELECT ratio, order_id FROM orders ORDER BY ratio, order_id", order="exact")
    S("ord-19", "SELECT order_id, shipped_at FROM orders WHERE qty = 11 ORDER BY shipped_at NULLS FIRST, order_id",
      order="exact")
    S("ord-20", "SELECT qty * 2 AS dbl, order_id FROM orders WHERE qty < 3 ORDER BY dbl DESC, order_id",
      order="exact")
    S("ord-21", "SELECT status, qty, order_id FROM orders ORDER BY status DESC NULLS LAST, qty ASC NULLS FIRST, "
                "order_id LIMIT 2000", order="exact")
    S("ord-22", "SELECT name, score FROM customers ORDER BY score DESC, name", order="exact")
    S("ord-23", "SELECT id, at FROM events ORDER BY at, id", order="exact")
    S("ord-24", "SELECT id, val FROM events ORDER BY val DESC NULLS LAST, id", order="exact")
    S("ord-25", "SELECT o.order_id, c.name FROM orders o JOIN countries c ON c.code = o.country "
                "WHERE o.qty = 12 ORDER BY c.name, o.order_id", order="exact")
    S("ord-26", "SELECT order_id, weight FROM orders WHERE qty = 13 ORDER BY weight DESC, order_id", order="exact")
    S("ord-27", "SELECT customer_id, order_id FROM orders WHERE qty = 14 ORDER BY customer_id NULLS FIRST, 2 DESC",
      order="exact")
    S("ord-28", "SELECT order_id FROM orders WHERE qty = 15 ORDER BY note COLLATE \"C\", order_id", order="exact")
    S("ord-29", "SELECT id, amount FROM events WHERE n = 3 ORDER BY amount, id DESC", order="exact")
    S("ord-30", "SELECT name, born FROM customers WHERE vip ORDER BY born NULLS FIRST, name", order="exact")
    S("ord-31", "SELECT * FROM ledger ORDER BY created_at DESC, order_id DESC", order="exact")
    S("ord-32", "SELECT order_id, status FROM orders WHERE qty = 16 ORDER BY status || note, order_id",
      order="exact")
    S("ord-33", "SELECT order_id, created_at FROM orders WHERE qty = 17 ORDER BY date_trunc('day', created_at) "
                "DESC, order_id", order="exact")
    S("ord-34", "SELECT order_id, amount FROM orders WHERE customer_id = $1 ORDER BY amount DESC NULLS FIRST, "
                "order_id", [7], order="exact")

    # --- ORDER BY with ties (sort-key groups)
    S("tie-01", "SELECT status, qty FROM orders WHERE qty < 3 ORDER BY status", order=keys(0))
    S("tie-02", "SELECT created_at, order_id FROM orders WHERE qty = 1 ORDER BY created_at DESC", order=keys(0))
    S("tie-03", "SELECT city, name FROM customers ORDER BY city NULLS FIRST", order=keys(0))
    S("tie-04", "SELECT kind, id FROM events WHERE n = 0 ORDER BY kind DESC", order=keys(0))
    S("tie-05", "SELECT paid, qty, order_id FROM orders WHERE customer_id < 0 ORDER BY paid DESC, qty",
      order=keys(0, 1))
    S("tie-06", "SELECT qty, status FROM orders ORDER BY qty NULLS FIRST, status NULLS FIRST", order=keys(0, 1))
    S("tie-07", "SELECT status, amount FROM orders ORDER BY status, amount DESC LIMIT 100",
      order=keys(0, 1, partial=True))
    S("tie-08", "SELECT status, order_id FROM orders ORDER BY status FETCH FIRST 3 ROWS WITH TIES", order=keys(0))
    S("tie-09", "SELECT qty, order_id FROM orders ORDER BY qty DESC NULLS LAST OFFSET 19000",
      order=keys(0, partial=True))
    S("tie-10", "SELECT score, name FROM customers ORDER BY score LIMIT $1 OFFSET $2", [50, 100],
      order=keys(0, partial=True))

    # --- LIMIT / OFFSET
    S("lim-01", "SELECT order_id, status FROM orders ORDER BY order_id LIMIT 10", order="exact")
    S("lim-02", "SELECT order_id, status FROM orders ORDER BY order_id LIMIT 10 OFFSET 100", order="exact")
    S("lim-03", "SELECT order_id FROM orders ORDER BY order_id OFFSET 19990", order="exact")
    S("lim-04", "SELECT order_id FROM orders ORDER BY order_id LIMIT 0", order="exact")
    S("lim-05", "SELECT order_id FROM orders ORDER BY order_id DESC LIMIT ALL", order="exact")
    S("lim-06", "SELECT order_id FROM orders ORDER BY order_id OFFSET 50000", order="exact")
    S("lim-07", "SELECT order_id, note FROM orders ORDER BY order_id LIMIT $1 OFFSET $2", [25, 1000], order="exact")
    S("lim-08", "SELECT order_id FROM orders ORDER BY order_id DESC FETCH FIRST 5 ROWS ONLY", order="exact")
    S("lim-09", "SELECT order_id FROM orders LIMIT 7", order="count")
    S("lim-10", "SELECT name FROM customers ORDER BY name DESC LIMIT $1", [33], order="exact")
    S("lim-11", "SELECT id, kind FROM events ORDER BY at DESC, id LIMIT 20 OFFSET $1", [5], order="exact")
    S("lim-12", "SELECT order_id FROM orders ORDER BY created_at, order_id LIMIT $1", [0], order="exact")
    S("lim-13", "SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS LAST, order_id LIMIT 15 OFFSET 15",
      order="exact")
    S("lim-14", "SELECT order_id FROM orders OFFSET 19995", order="count")
    S("lim-15", "SELECT order_id FROM orders ORDER BY order_id OFFSET 3 ROWS FETCH NEXT 4 ROWS ONLY", order="exact")
    S("lim-16", "SELECT order_id FROM orders ORDER BY order_id LIMIT $1 OFFSET $2", [1, 0], order="exact")

    # --- aggregates without GROUP BY
    S("agg-01", "SELECT count(*) FROM orders", order="exact")
    S("agg-02", "SELECT count(amount), count(note), count(*) FROM orders", order="exact")
    S("agg-03", "SELECT sum(amount), sum(qty), sum(price), sum(order_id), sum(customer_id) FROM orders",
      order="exact")
    S("agg-04", "SELECT min(amount), max(amount), min(qty), max(qty), min(price), max(price) FROM orders",
      order="exact")
    S("agg-05", "SELECT avg(amount), avg(qty), avg(price), avg(order_id) FROM orders", order="exact")
    S("agg-06", "SELECT bool_and(paid), bool_or(paid), every(paid) FROM orders", order="exact")
    S("agg-07", "SELECT count(*), sum(qty), min(note), max(note), avg(amount), bool_and(paid) FROM orders "
                "WHERE qty > 1000", order="exact")
    S("agg-08", "SELECT sum(weight), avg(weight), min(weight), max(weight) FROM orders", order="exact")
    S("agg-09", "SELECT min(status), max(status), min(note), max(note) FROM orders", order="exact")
    S("agg-10", "SELECT min(created_at), max(created_at), min(shipped_at), max(shipped_at) FROM orders",
      order="exact")
    S("agg-11", "SELECT min(ship_date), max(ship_date), count(token), count(ship_date) FROM orders", order="exact")
    S("agg-12", "SELECT min(ratio), max(ratio), count(ratio) FROM orders", order="exact")
    S("agg-13", "SELECT count(*) AS n, sum(val) AS total, avg(val) AS mean, min(at), max(amount) FROM events",
      order="exact")
    S("agg-14", "SELECT sum(score), avg(score), min(name), max(name), sum(balance), avg(balance) FROM customers",
      order="exact")
    S("agg-15", "SELECT bool_and(vip), bool_or(vip), count(vip) FROM customers WHERE city = 'Berlin'",
      order="exact")
    S("agg-16", "SELECT count(*) FROM orders WHERE customer_id = $1", [11], order="exact")
    S("agg-17", "SELECT sum(qty) FILTER (WHERE paid), count(*) FILTER (WHERE status = 'new') FROM orders",
      order="exact")
    S("agg-18", "SELECT min(name COLLATE \"C\"), max(name COLLATE \"C\") FROM customers", order="exact")
    S("agg-19", "SELECT count(*), sum(o.qty) FROM orders o JOIN countries c ON c.code = o.country "
                "WHERE c.region = 'EU'", order="exact")
    S("agg-20", "SELECT avg(amount) FROM orders WHERE qty = 2", order="exact")
    S("agg-21", "SELECT sum(amount) AS s, count(*) AS c FROM orders WHERE qty < 0", order="exact")
    S("agg-22", "SELECT count(order_id), max(order_id), min(order_id) FROM orders", order="exact")
    S("agg-23", "SELECT avg(n), sum(n), bool_or(flag) FROM events WHERE id BETWEEN $1 AND $2", [-100, 100],
      order="exact")

    # --- GROUP BY / HAVING
    S("grp-01", "SELECT status, count(*) FROM orders GROUP BY status")
    S("grp-02", "SELECT status, count(*), sum(amount), avg(qty) FROM orders GROUP BY status ORDER BY status",
      order="exact")
    S("grp-03", "SELECT qty, count(*) FROM orders GROUP BY qty ORDER BY count(*) DESC, qty", order="exact")
    S("grp-04", "SELECT qty, min(price), max(price) FROM orders GROUP BY 1 ORDER BY 1 DESC NULLS LAST",
      order="exact")
    S("grp-05", "SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING count(*) > 55 "
                "ORDER BY customer_id", order="exact")
    S("grp-06", "SELECT status, sum(amount) FROM orders GROUP BY status HAVING sum(amount) > 100000")
    S("grp-07", "SELECT qty, min(qty), max(order_id) FROM orders GROUP BY qty "
                "HAVING min(qty) >= 0 AND max(order_id) < 59990 ORDER BY qty", order="exact")
    S("grp-08", "SELECT country, bool_or(paid), bool_and(paid) FROM orders GROUP BY country HAVING bool_or(paid)")
    S("grp-09", "SELECT customer_id, count(*) FROM orders GROUP BY customer_id HAVING count(*) > $1 "
                "ORDER BY customer_id", [60], order="exact")
    S("grp-10", "SELECT status, avg(amount) FROM orders GROUP BY status HAVING avg(amount) > 4500")
    S("grp-11", "SELECT date_trunc('day', created_at) AS d, count(*), sum(qty) FROM orders GROUP BY 1 ORDER BY 1",
      order="exact")
    S("grp-12", "SELECT paid, count(*), avg(price) FROM orders GROUP BY paid ORDER BY paid NULLS FIRST",
      order="exact")
    S("grp-13", "SELECT status, paid, count(*) FROM orders GROUP BY status, paid ORDER BY status, paid NULLS FIRST",
      order="exact")
    S("grp-14", "SELECT customer_id, sum(amount) FROM orders GROUP BY customer_id ORDER BY customer_id "
                "LIMIT 10 OFFSET 5", order="exact")
    S("grp-15", "SELECT customer_id, sum(amount) FROM orders GROUP BY customer_id "
                "ORDER BY sum(amount) DESC NULLS LAST, customer_id LIMIT 10", order="exact")
    S("grp-16", "SELECT customer_id, count(*) FROM orders GROUP BY customer_id ORDER BY customer_id DESC LIMIT $1",
      [12], order="exact")
    S("grp-17", "SELECT city, count(*), min(score), max(born), avg(balance) FROM customers GROUP BY city "
                "ORDER BY city", order="exact")
    S("grp-18", "SELECT kind, count(*), sum(val), avg(amount) FROM events GROUP BY kind ORDER BY kind DESC",
      order="exact")
    S("grp-19", "SELECT c.region, count(*), sum(o.amount) FROM orders o JOIN countries c ON c.code = o.country "
                "GROUP BY c.region ORDER BY c.region", order="exact")
    S("grp-20", "SELECT ship_date, count(*) FROM orders GROUP BY ship_date ORDER BY ship_date LIMIT 50",
      order="exact")
    S("grp-21", "SELECT count(*), qty FROM orders GROUP BY qty HAVING count(*) BETWEEN 900 AND 1000")
    S("grp-22", "SELECT status, count(*) AS n FROM orders GROUP BY status ORDER BY n, status", order="exact")
    S("grp-23", "SELECT vip, count(*), sum(score) FROM customers GROUP BY vip HAVING count(*) > 10 "
                "ORDER BY vip NULLS LAST", order="exact")
    S("grp-24", "SELECT flag, n, count(*) FROM events GROUP BY flag, n HAVING n IS NOT NULL "
                "ORDER BY flag, n DESC", order="exact")
    S("grp-25", "SELECT customer_id, max(created_at) FROM orders GROUP BY customer_id "
                "HAVING max(created_at) > '2024-01-02 12:00:00+00' ORDER BY customer_id", order="exact")
    S("grp-26", "SELECT status, sum(qty) FROM orders WHERE qty IS NOT NULL GROUP BY status "
                "HAVING sum(qty) IN (100, 200, 300) OR sum(qty) > 9000")
    S("grp-27", "SELECT token IS NULL AS nt, count(*) FROM orders GROUP BY 1 ORDER BY 1", order="exact")
    S("grp-28", "SELECT qty, count(*) FROM orders GROUP BY qty ORDER BY count(*) DESC, qty LIMIT 3 OFFSET 1",
      order="exact")
    S("grp-29", "SELECT status, min(note), max(ship_date) FROM orders GROUP BY status ORDER BY min(note) NULLS FIRST, "
                "status", order="exact")
    S("grp-30", "SELECT country, count(*) FROM orders WHERE country IS NOT NULL GROUP BY country "
                "HAVING NOT bool_and(qty > 0) ORDER BY country", order="exact")

    # --- DISTINCT
    S("dis-01", "SELECT DISTINCT status FROM orders")
    S("dis-02", "SELECT DISTINCT status FROM orders ORDER BY status", order="exact")
    S("dis-03", "SELECT DISTINCT qty, paid FROM orders ORDER BY 1, 2", order="exact")
    S("dis-04", "SELECT DISTINCT city FROM customers ORDER BY city DESC NULLS LAST", order="exact")
    S("dis-05", "SELECT DISTINCT ON (status) status, order_id FROM orders ORDER BY status, order_id", order="exact")
    S("dis-06", "SELECT DISTINCT customer_id FROM orders ORDER BY customer_id LIMIT 20 OFFSET 10", order="exact")
    S("dis-07", "SELECT DISTINCT kind FROM events WHERE id < 5000")
    S("dis-08", "SELECT DISTINCT count(*) FROM orders GROUP BY qty")
    S("dis-09", "SELECT DISTINCT * FROM ledger WHERE memo LIKE 'a%'")
    S("dis-10", "SELECT DISTINCT ship_date FROM orders ORDER BY ship_date DESC LIMIT $1", [40], order="exact")
    S("dis-11", "SELECT DISTINCT region FROM countries ORDER BY region", order="exact")
    S("dis-12", "SELECT DISTINCT ON (customer_id) customer_id, amount, order_id FROM orders "
                "ORDER BY customer_id, amount DESC NULLS LAST, order_id", order="exact")
    S("dis-13", "SELECT DISTINCT lower(status) FROM orders ORDER BY 1", order="exact")
    S("dis-14", "SELECT DISTINCT date_trunc('month', created_at) FROM orders")

    # --- more shapes: sub-selects on the reference table, CTEs, NULL/edge parameters
    S("more-01", "SELECT order_id, country FROM orders WHERE country IN (SELECT code FROM countries "
                 "WHERE region = 'EU') ORDER BY order_id", order="exact")
    S("more-02", "WITH x AS (SELECT order_id, qty FROM orders WHERE qty > 18) SELECT qty, count(*) FROM x "
                 "GROUP BY qty ORDER BY qty", order="exact")
    S("more-03", "SELECT * FROM events ORDER BY 3 DESC, 1 LIMIT 100", order="exact")
    S("more-04", "SELECT order_id FROM orders ORDER BY order_id DESC LIMIT $1", [None], order="exact")
    S("more-05", "SELECT order_id FROM orders ORDER BY order_id OFFSET $1", [19980], order="exact")
    S("more-06", "SELECT status, order_id FROM orders ORDER BY status DESC NULLS LAST "
                 "FETCH FIRST $1 ROWS WITH TIES", [2], order=keys(0))
    S("more-07", "SELECT count(*) FROM orders GROUP BY status ORDER BY 1", order="exact")
    S("more-08", "SELECT status FROM orders GROUP BY status HAVING max(qty) > 19 ORDER BY status", order="exact")
    S("more-09", "SELECT status, avg(amount), sum(amount), count(amount) FROM orders WHERE amount IS NULL "
                 "GROUP BY status ORDER BY status", order="exact")
    # ±Infinity only (with zeros): Infinity + -Infinity is the same NaN in any order; sums that include
    # NaN inputs or inexact values depend on the order of addition (NaN sign bit, rounding), which
    # docs/scatter-gather.md states as the one inexactness of float sums, so they are not compared
    S("more-10", "SELECT sum(ratio), avg(ratio), min(ratio), max(ratio), count(*) FROM orders "
                 "WHERE ratio::text IN ('Infinity', '-Infinity', '0', '-0')", order="exact")
    S("more-16", "SELECT sum(ratio), avg(ratio) FROM orders WHERE ratio::text IN ('Infinity', '0', '-0')",
      order="exact")
    S("more-11", "SELECT customer_id, count(*), bool_and(paid) FROM orders WHERE customer_id BETWEEN $1 AND $2 "
                 "GROUP BY customer_id HAVING count(*) >= $3 ORDER BY customer_id DESC LIMIT $4 OFFSET $5",
      [10, 200, 40, 7, 2], order="exact")
    S("more-12", "SELECT DISTINCT paid FROM orders ORDER BY paid DESC NULLS LAST", order="exact")
    S("more-13", "SELECT name, score FROM customers WHERE score IS NOT NULL ORDER BY score DESC, name "
                 "LIMIT $1 OFFSET $2", [10, 7990], order="exact")
    S("more-14", "SELECT count(*), count(shipped_at), min(shipped_at), max(ship_date) FROM orders "
                 "WHERE status = $1", ["🚀 rocket"], order="exact")
    S("more-15", "SELECT o.status, c.region, count(*) FROM orders o JOIN countries c ON c.code = o.country "
                 "GROUP BY o.status, c.region ORDER BY o.status NULLS FIRST, c.region NULLS FIRST", order="exact")
    S("err-01", "SELECT order_id FROM orders ORDER BY order_id LIMIT -1", order="error")
    S("err-02", "SELECT order_id FROM orders ORDER BY order_id LIMIT $1", [-1], order="error")
    S("err-03", "SELECT order_id FROM orders ORDER BY order_id OFFSET $1", [-5], order="error")

    # --- one shape, other literals: the first text of a shape teaches the proxy its
    # template, the next ones are answered from it with their own literals put back
    # (routing/merge/scatter_shape.hpp); LIMIT, OFFSET, ORDER BY positions and HAVING
    # constants get a template per value
    for i, (q, n) in enumerate([(3, 10), (7, 10), (12, 10), (7, 25)]):
        S(f"shp-lim-{i}", f"SELECT order_id, status FROM orders WHERE qty > {q} ORDER BY order_id LIMIT {n}",
          order="exact")
    for i, (a, h) in enumerate([(10, 5), (500, 5), (10, 50)]):
        S(f"shp-hav-{i}", f"SELECT status, count(*), sum(qty) FROM orders WHERE amount > {a} GROUP BY status "
                          f"HAVING count(*) > {h} ORDER BY status NULLS FIRST", order="exact")
    for i, name in enumerate(["m", "it''s", "é", ""]):
        S(f"shp-str-{i}", f"SELECT count(*), min(name) FROM customers WHERE name < '{name}'", order="exact")
    for i, d in enumerate(["2001-01-01", "1999-12-31", "0044-03-15 BC"]):
        S(f"shp-date-{i}", f"SELECT order_id, ship_date FROM orders WHERE ship_date < DATE '{d}' "
                           f"ORDER BY ship_date, order_id LIMIT 50", order="exact")
    for i, (k, m, q, pos) in enumerate([("'x'", 2, 5, 1), ("'y'", 3, 6, 1), ("'z'", 4, 5, 3)]):
        S(f"shp-pos-{i}", f"SELECT order_id, {k} AS k, qty * {m} AS m FROM orders WHERE qty = {q} "
                          f"ORDER BY {pos}, order_id", order="exact")
    for i, (a, b, o) in enumerate([("日本", "a", 0), ("b", "c", 5), ("日本", "x", 5)]):
        S(f"shp-in-{i}", f"SELECT order_id FROM orders WHERE status IN ('{a}', '{b}') "
                         f"ORDER BY order_id DESC LIMIT 20 OFFSET {o}", order="exact")
    for i, (u, q) in enumerate([("day", 1), ("day", 5), ("hour", 5)]):
        S(f"shp-trunc-{i}", f"SELECT date_trunc('{u}', created_at) AS t, count(*), sum(qty) FROM orders "
                            f"WHERE qty > {q} GROUP BY date_trunc('{u}', created_at) ORDER BY t", order="exact")
    for i, x in enumerate(["E'a\\nb'", "E'\\''", "$$it's$$"]):
        S(f"shp-esc-{i}", f"SELECT count(*) FROM orders WHERE note <> {x} AND qty > {i}", order="exact")

    # --- key IN lists / ranges (subset of shards)
    # filled in by subset_statements() once the shard contents are known

    # --- per-column sweeps: ORDER BY every column type both ways, min/max, GROUP BY
    for col in ("customer_id", "created_at", "shipped_at", "amount", "weight", "qty", "price", "ratio", "status",
                "note", "paid", "ship_date", "token", "country"):
        S(f"sw-asc-{col}", f"SELECT {col}, order_id FROM orders ORDER BY {col} NULLS FIRST, order_id "
                           f"LIMIT 25 OFFSET 3", order="exact")
        S(f"sw-desc-{col}", f"SELECT order_id, {col} FROM orders ORDER BY {col} DESC NULLS LAST, order_id DESC "
                            f"LIMIT 40", order="exact")
        if col not in ("paid", "token"):  # no min/max for bool and uuid in PostgreSQL 15
            S(f"sw-mm-{col}", f"SELECT min({col}), max({col}), count({col}) FROM orders", order="exact")
        S(f"sw-grp-{col}", f"SELECT {col}, count(*), sum(qty), min(order_id) FROM orders GROUP BY {col} "
                           f"ORDER BY {col} DESC LIMIT 30", order="exact")


def subset_statements():
    """Key IN lists and ranges that touch some shards only (owners read from the shards)."""
    own = SHARD_KEYS["orders"]
    ks0 = sorted(own[0])
    ks1 = sorted(own[1])
    ks2 = sorted(own[2])
    r = random.Random(SEED + 1)
    a = r.sample(ks0, 4) + r.sample(ks1, 3)             # s0 and s1
    b = r.sample(ks1, 2) + r.sample(ks2, 5)             # s1 and s2
    c = r.sample(ks0, 2) + r.sample(ks2, 2) + [123456789012]  # s0, s2 and a missing key
    out = []

    def sub(sid, sql, params=(), order="set", skipped=()):
        S(sid, sql, params, order)
        out.append((sid, skipped))

    lst = ", ".join(str(k) for k in a)
    sub("sub-01", f"SELECT order_id, status, amount FROM orders WHERE order_id IN ({lst}) ORDER BY order_id",
        order="exact", skipped=("s2",))
    sub("sub-02", "SELECT order_id, qty FROM orders WHERE order_id = ANY($1) ORDER BY qty NULLS FIRST, order_id",
        [b], order="exact", skipped=("s0",))
    sub("sub-03", "SELECT count(*), sum(amount), avg(qty) FROM orders WHERE order_id = ANY($1)", [c],
        order="exact", skipped=("s1",))
    sub("sub-04", "SELECT id, kind FROM events WHERE id BETWEEN 5000 AND 15000 ORDER BY id", order="exact",
        skipped=("s0",))
    sub("sub-05", "SELECT count(*), min(id), max(id), sum(val) FROM events WHERE id BETWEEN $1 AND $2",
        [-100, 100], order="exact", skipped=("s2",))
    sub("sub-06", "SELECT id, at FROM events WHERE id >= 9990 AND id < 10010 ORDER BY at DESC, id", order="exact",
        skipped=("s0",))
    sub("sub-07", "SELECT kind, count(*) FROM events WHERE id < 100 GROUP BY kind ORDER BY kind NULLS FIRST",
        order="exact", skipped=("s2",))
    sub("sub-08", f"SELECT * FROM orders WHERE order_id IN ({lst}) OR order_id = {b[0]}", skipped=("s2",))
    sub("sub-09", "SELECT id FROM events WHERE id > 20000 OR id < -4900 ORDER BY id DESC LIMIT 30", order="exact",
        skipped=("s1",))
    cust = SHARD_KEYS["customers"]
    names = r.sample(sorted(cust[0]), 3) + r.sample(sorted(cust[2]), 3)
    nl = ", ".join(sql_lit(n) for n in names)
    sub("sub-10", f"SELECT name, city, score FROM customers WHERE name IN ({nl}) ORDER BY name", order="exact",
        skipped=("s1",))
    sub("sub-11", "SELECT name, balance FROM customers WHERE name = ANY($1) ORDER BY balance NULLS FIRST, name",
        [names], order="exact",
        skipped=("s1",))
    sub("sub-12", "SELECT DISTINCT kind FROM events WHERE id BETWEEN 9000 AND 11000 ORDER BY kind", order="exact",
        skipped=("s0",))
    return out


# What the streaming merger cannot combine goes to the combine step (SPEC §4.1): the
# same answer as plain PostgreSQL (tests/integration/test_combine_differential.py has
# many more).
COMBINED = [
    ("cmb-01", "SELECT count(DISTINCT status) FROM orders"),
    ("cmb-02", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM orders"),
    ("cmb-03", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders"),
    ("cmb-04", "SELECT status, rank() OVER (PARTITION BY status ORDER BY amount, order_id) FROM orders"),
    ("cmb-05", "SELECT status, count(DISTINCT customer_id) FROM orders GROUP BY status"),
    ("cmb-06", "SELECT mode() WITHIN GROUP (ORDER BY qty) FROM orders"),
    ("cmb-07", "SELECT sum(amount) / count(amount) FROM orders"),
    ("cmb-09", "SELECT string_agg(status, ',' ORDER BY status, order_id) FROM orders"),
    ("cmb-10", "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY val) FROM events"),
    ("cmb-11", "SELECT max(shipped_at) - min(created_at) FROM orders"),
]

# What no single database could answer the same way.
REFUSED = [
    ("ref-01", "SELECT order_id FROM orders WHERE qty > 3 ORDER BY order_id LIMIT 5 FOR UPDATE"),
]

# ------------------------------------------------------------------ running



def scatter_count():
    """splitpoint_queries_total for multi-shard routes (multi + all), from /metrics."""
    with urllib.request.urlopen(f"http://{HOST}:{PROXY.metrics_port}/metrics", timeout=10) as f:
        text = f.read().decode()
    n = 0
    for line in text.splitlines():
        m = re.match(r'splitpoint_queries_total\{route="(multi|all)"[^}]*\} (\d+)', line)
        if m:
            n += int(m.group(2))
    return n


SINGLE_SHARD = {"dis-11"}  # reads only the reference table: any one shard


def run_statement(sid, sql, params, order):
    before = scatter_count()
    for mode in MODES:
        exp = run(PLAIN_T, mode, sql, params)
        got = run(PROXY_T, mode, sql, params)
        compare(sid, mode, sql, params, exp, got, order)
    # the statement really was merged from several shards (not forwarded to one)
    delta = scatter_count() - before
    want = 0 if sid in SINGLE_SHARD else len(MODES)
    check(delta == want, sid, "route", lambda: f"{sql}: {delta} multi-shard executions counted, expected {want}")


def last_scatter():
    r = run_simple(PROXY_T, "SHOW splitpoint.last_scatter")
    if r.error:
        raise AssertionError(f"SHOW splitpoint.last_scatter: {r.error}")
    return {row[0]: row for row in r.rows}


def keyset_walk(target, table, cols, page, mode):
    """Walks every page of SPEC's keyset query; returns the list of pages (rows)."""
    first = f"SELECT {cols} FROM {table} ORDER BY created_at DESC, order_id DESC LIMIT {page}"
    nxt = (f"SELECT {cols} FROM {table} WHERE (created_at, order_id) < ($1, $2) "
           f"ORDER BY created_at DESC, order_id DESC LIMIT {page}")
    pages = []
    r = run(target, mode, first)
    guard = 0
    while True:
        if r.error:
            raise RuntimeError(f"{target.name} {mode} page {len(pages)}: {r.error}")
        pages.append(r.rows)
        if len(r.rows) < page:
            break
        last = r.rows[-1]
        # created_at and order_id are the first two columns; in binary mode fetch the
        # cursor's text through the text of the row (the proxy and plain give the same bytes)
        cursor = keyset_cursor[mode](last)
        r = run(target, mode, nxt, cursor)
        guard += 1
        if guard > 100000:
            raise RuntimeError("keyset walk does not end")
    return pages


def _bin_cursor(row):
    # binary: order_id int8, created_at timestamptz (int8 microseconds since 2000-01-01 UTC)
    oid = int.from_bytes(row[0], "big", signed=True)
    us = int.from_bytes(row[1], "big", signed=True)
    ts = dt.datetime(2000, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=us)
    return [ts.isoformat(sep=" "), oid]


keyset_cursor = {
    "simple": lambda row: [row[1], int(row[0])],
    "text": lambda row: [row[1], int(row[0])],
    "binary": _bin_cursor,
}


# ------------------------------------------------------------------ tests

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def statements_match_plain_postgresql():
    n0 = len(CHECKS.failures)
    for sid, sql, params, order in STMTS:
        run_statement(sid, sql, params, order)
    print(f"     {len(STMTS)} statements x {len(MODES)} protocols compared; "
          f"{len(CHECKS.failures) - n0} mismatches")


@test
def subsets_skip_shards():
    """IN lists and ranges: the shards that own none of the keys are not asked."""
    for sid, skipped in SUBSETS:
        stmt = next(s for s in STMTS if s[0] == sid)
        _, sql, params, _ = stmt
        r = run_simple(PROXY_T, sql, params)
        if r.error:
            check(False, sid, "skip", lambda: f"{sql}: {r.error}")
            continue
        ls = last_scatter()
        for shard in ("s0", "s1", "s2"):
            want = "skipped" if shard in skipped else "ok"
            got = ls.get(shard, (shard, "<absent>"))[1]
            check(got == want, sid, "skip",
                  lambda: f"{sql}\n    last_scatter[{shard}].status: expected {want!r}, got {got!r} ({ls})")


@test
def combined_constructs_match_plain_postgresql():
    for sid, sql in COMBINED:
        for mode in MODES:
            compare(sid, mode, sql, (), run(PLAIN_T, mode, sql), run(PROXY_T, mode, sql), "set")


@test
def refused_constructs_give_spc01():
    for sid, sql in REFUSED:
        for mode in MODES:
            exp = run(PLAIN_T, mode, sql)
            check(exp.error is None, sid, mode, lambda: f"plain PostgreSQL failed (test bug): {sql}: {exp.error}")
            got = run(PROXY_T, mode, sql)
            check(got.error is not None and got.error[0] == "SPC01", sid, mode,
                  lambda: f"{sql}\n    expected SQLSTATE SPC01, got {got.error or short(got.rows)}")
        # the session is usable afterwards
        r = run_simple(PROXY_T, "SELECT count(*) FROM orders")
        check(not r.error and r.rows == [("20000",)], sid, "after", lambda: f"count after refusal: {r}")


@test
def keyset_pagination_every_row_once():
    """SPEC's keyset query, walked to the end: same pages as plain, every row once."""
    runs = [("ledger", "order_id, created_at, memo", 2, "text"),
            ("ledger", "order_id, created_at, memo", 2, "binary"),
            ("ledger", "order_id, created_at, memo", 3, "simple"),
            ("ledger", "order_id, created_at", 7, "text"),
            ("orders", "order_id, created_at, status", 500, "text"),
            ("orders", "order_id, created_at", 997, "binary")]
    for table, cols, page, mode in runs:
        sid = f"keyset-{table}-{page}"
        t0 = time.monotonic()
        want = keyset_walk(PLAIN_T, table, cols, page, mode)
        t1 = time.monotonic()
        try:
            got = keyset_walk(PROXY_T, table, cols, page, mode)
        except RuntimeError as e:
            why = str(e)
            check(False, sid, mode, lambda: f"walk failed: {why}")
            continue
        flat = [r for p in got for r in p]
        ids = [r[0] for r in flat]
        total = len(ORDERS) if table == "orders" else len(LEDGER)
        check(len(ids) == total and len(set(ids)) == total, sid, mode,
              lambda: f"rows over all pages: {len(ids)} ({len(set(ids))} distinct), expected {total} exactly once")
        check(len(got) == len(want), sid, mode, lambda: f"pages: expected {len(want)}, got {len(got)}")
        bad = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        check(bad is None, sid, mode,
              lambda: f"page {bad}: expected {short(want[bad])}, got {short(got[bad])}")
        t2 = time.monotonic()
        print(f"     keyset {table} page={page} {mode}: {len(got)} pages, {len(flat)} rows "
              f"(plain {t1 - t0:.2f}s, proxy {t2 - t1:.2f}s)")


@test
def session_settings_do_not_change_results():
    """A few statements again with hints and session settings that must not matter."""
    stmts = [("set-01", "/* splitpoint: deadline=30s */ SELECT status, count(*) FROM orders GROUP BY status "
                        "ORDER BY status", "exact"),
             ("set-02", "SELECT order_id FROM orders ORDER BY order_id DESC LIMIT 5 /* splitpoint: partial=deny */",
              "exact")]
    for sid, sql, order in stmts:
        run_statement(sid, sql, (), order)
    r = run_simple(PROXY_T, "SET splitpoint.deadline = '45s'")
    check(r.error is None, "set-03", "simple", lambda: f"SET splitpoint.deadline: {r.error}")
    run_statement("set-03", "SELECT qty, sum(price) FROM orders GROUP BY qty ORDER BY qty", (), "exact")
    run_simple(PROXY_T, "RESET splitpoint.deadline")


# ------------------------------------------------------------------ COPY ... TO STDOUT

_ORD_COLS = ("order_id, customer_id, created_at, shipped_at, amount, weight, qty, price, ratio, status, note, paid, "
             "ship_date, token, country")
# (id, statement, how: 'exact' = every message identical, in order; 'rows' = the same
# CopyData messages as a multiset, everything else identical)
COPY_OUT = [
    # (what the merger refuses: the combine database writes the COPY, SPEC §4.1)
    ("copy-combine", "COPY (SELECT count(DISTINCT status) FROM orders) TO STDOUT", "exact"),
    ("copy-combine-csv", "COPY (SELECT status, count(DISTINCT qty) FROM orders GROUP BY status ORDER BY status) "
                         "TO STDOUT (FORMAT csv, HEADER)", "exact"),
    ("copy-01", f"COPY (SELECT {_ORD_COLS} FROM orders ORDER BY order_id) TO STDOUT", "exact"),
    ("copy-02", f"COPY (SELECT {_ORD_COLS} FROM orders ORDER BY created_at DESC, order_id) TO STDOUT "
                "(FORMAT csv, HEADER)", "exact"),
    ("copy-03", "COPY (SELECT name, city, score, born, vip, balance FROM customers ORDER BY score DESC NULLS LAST, "
                "name LIMIT 500) TO STDOUT WITH (FORMAT csv, DELIMITER ';', NULL 'NULL', FORCE_QUOTE (city), "
                "QUOTE '''', ESCAPE '\\')", "exact"),
    ("copy-04", "COPY (SELECT status, count(*), sum(amount), avg(qty), min(note), max(created_at), bool_or(paid) "
                "FROM orders GROUP BY status ORDER BY status) TO STDOUT WITH CSV HEADER", "exact"),
    ("copy-05", "COPY (SELECT order_id, E'a\\tb\\nc\\\\d\\re\\x01f\\x0bg\\x08h\\x0c|' || coalesce(note, '') AS s "
                "FROM orders ORDER BY order_id LIMIT 400) TO STDOUT (DELIMITER '|', HEADER)", "exact"),
    ("copy-06", "COPY (SELECT CASE WHEN order_id % 7 = 0 THEN '\\.' WHEN order_id % 7 = 1 THEN '' "
                "WHEN order_id % 7 = 2 THEN E'x\\ny\"z' ELSE note END AS v FROM orders ORDER BY order_id LIMIT 300) "
                "TO STDOUT (FORMAT csv, HEADER)", "exact"),
    ("copy-07", "COPY (SELECT * FROM events ORDER BY id) TO STDOUT (FORMAT binary)", "exact"),
    ("copy-08", "COPY (SELECT count(*), sum(amount), min(created_at), max(status) FROM orders) TO STDOUT "
                "(FORMAT binary)", "exact"),
    ("copy-09", "COPY (SELECT order_id FROM orders WHERE order_id < 0 AND order_id > 0) TO STDOUT (FORMAT binary)",
     "exact"),
    ("copy-10", "COPY (SELECT DISTINCT country FROM orders ORDER BY 1) TO STDOUT (FORMAT text, HEADER, NULL '-')",
     "exact"),
    ("copy-11", "COPY orders TO STDOUT", "rows"),
    ("copy-12", "COPY events (id, kind, val) TO STDOUT (FORMAT csv, FORCE_QUOTE *)", "rows"),
    ("copy-13", "COPY (SELECT o.order_id, c.name FROM orders o JOIN countries c ON c.code = o.country) TO STDOUT",
     "rows"),
    ("copy-14", "COPY (SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS LAST, order_id "
                "LIMIT 25 OFFSET 10) TO STDOUT (FORMAT csv)", "exact"),
]


def copy_messages(t, mode, sql):
    """The messages of one COPY TO STDOUT, without ParameterStatus and notices."""
    r = t.wire.query(sql) if mode == "simple" else t.wire.extended(sql)
    return [(ty, body) for ty, body in r.messages if ty not in ("S", "N")], r.error


@test
def copy_to_stdout_matches_plain_postgresql():
    """COPY (query) TO STDOUT and COPY table TO STDOUT over three shards: the bytes
    (CopyOutResponse, every CopyData message, CopyDone, tag) must be those plain
    PostgreSQL sends, in text, csv and binary, through both protocols."""
    for sid, sql, how in COPY_OUT:
        for mode in ("simple", "extended"):
            exp, exp_err = copy_messages(PLAIN_T, mode, sql)
            got, got_err = copy_messages(PROXY_T, mode, sql)
            check(exp_err is None, sid, mode, lambda: f"plain PostgreSQL failed (test bug): {sql}: {exp_err}")
            if how == "rows":
                def key(msgs):
                    return [m for m in msgs if m[0] != "d"], sorted(m[1] for m in msgs if m[0] == "d")
                same = key(exp) == key(got)
            else:
                same = exp == got
            n = sum(1 for m in exp if m[0] == "d")
            check(same, sid, mode, lambda: f"{sql}\n    {n} CopyData expected; got error {got_err}" if got_err else
                  f"{sql}\n    {first_diff(exp, got)}")
    r = run_simple(PROXY_T, "SELECT count(*) FROM orders")
    check(not r.error and r.rows == [("20000",)], "copy-after", "simple", lambda: f"count after COPY: {r}")


@test
def copy_to_stdout_refusals():
    """What cannot be merged is refused before any COPY data, with a clear SQLSTATE."""
    for sid, sql, code in [
        ("copy-r2", "COPY (SELECT order_id FROM orders) TO STDOUT (FORMAT csv, FORCE_QUOTE (nope))", "42P10"),
        ("copy-r3", "COPY (SELECT order_id FROM orders) TO STDOUT (ENCODING 'UTF8')", "SPC01"),
    ]:
        got, err = copy_messages(PROXY_T, "simple", sql)
        check(err is not None and err.get("C") == code and not any(m[0] in ("H", "d") for m in got), sid, "simple",
              lambda: f"{sql}\n    expected {code} before any COPY data, got {err} / {got[:3]}")


# ------------------------------------------------------------------ ICU database collation

ICU_SHARDS = [(PG0, f"scicu0_{SUFFIX}"), (PG1, f"scicu1_{SUFFIX}"), (PG0, f"scicu2_{SUFFIX}")]
ICU_PLAIN = (PG1, f"scicuplain_{SUFFIX}")
ICU_DBS = []   # created (dropped by teardown)
ICU_PROXY = None
ICU_WORDS = ["a", "A", "b", "B", "é", "E", "e", "Z", "z", "_x", "-y", "résumé", "resume", "Resume", "ß", "ss",
             "Ärger", "Aerger", "zebra", "Zebra", "東京", "apple", "Apple", "apple pie", "applepie", ""]


@test
def text_under_an_icu_database_collation():
    """Databases whose default collation is ICU (en-US): text order differs from the
    libc/bytes order ('a' < 'B' < 'é' < 'Z'). The proxy merges with the same ICU collator
    and must give plain PostgreSQL's answer -- never rows in another order, another
    min/max or a refusal."""
    global ICU_PROXY
    r = random.Random(SEED + 7)
    rows = [(i, r.choice(ICU_WORDS) + r.choice(["", "", "1", " 2", "x"]), r.randrange(0, 5))
            for i in range(-1500, 1500)]
    for port, db in ICU_SHARDS + [ICU_PLAIN]:
        c = superuser(port)
        try:
            c.cursor().execute(f"CREATE DATABASE {db} OWNER app TEMPLATE template0 LOCALE_PROVIDER icu "
                               f"ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
        except psycopg2.Error as e:
            print(f"SKIP text_under_an_icu_database_collation: this PostgreSQL cannot create an ICU database: "
                  f"{e.pgerror}")
            return
        finally:
            c.close()
        ICU_DBS.append((port, db))
    lines = "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, "
                      f"password: secret }}" for i, (port, db) in enumerate(ICU_SHARDS))
    ICU_PROXY = Proxy("scatter-icu", f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{lines}
distributions:
  - name: by_id
    method: hash
    partitions: {P}
    tables:
      words: id
""").start()
    plain = Target("icu-plain", *ICU_PLAIN)
    proxy = Target("icu-proxy", ICU_PROXY.port, "app")
    try:
        values = ",".join(f"({i}, {sql_lit(w)}, {n})" for i, w, n in rows)
        for t in (plain, proxy):
            cur = t.psy.cursor()
            cur.execute("CREATE TABLE words (id bigint PRIMARY KEY, w text, n int)")
            cur.execute("INSERT INTO words VALUES " + values)
        stmts = [
            ("icu-01", "SELECT w, id FROM words ORDER BY w, id", "exact"),
            ("icu-02", "SELECT w, id FROM words ORDER BY w DESC, id LIMIT 50", "exact"),
            ("icu-03", "SELECT min(w), max(w) FROM words", "exact"),
            ("icu-04", "SELECT w, count(*) FROM words GROUP BY w ORDER BY w", "exact"),
            ("icu-05", "SELECT DISTINCT w FROM words ORDER BY w", "exact"),
            ("icu-06", "SELECT n, min(w), max(w) FROM words GROUP BY n ORDER BY n", "exact"),
            ("icu-07", "SELECT w, id FROM words ORDER BY w COLLATE \"C\", id", "exact"),
            ("icu-08", "SELECT DISTINCT w FROM words", "set"),
            # en-US: 'a' < 'A' < 'b' < 'é' < 'Z'; by bytes: 'A' < 'Z' < 'a' < 'b' < 'é'
            ("icu-09", "SELECT min(w), max(w) FROM words WHERE w IN ('a', 'A', 'b', 'é', 'Z')", "exact"),
            ("icu-10", "SELECT n, min(w), max(w), count(*) FROM words WHERE w IN ('a', 'A', 'b', 'é', 'Z') "
                       "GROUP BY n ORDER BY n", "exact"),
        ]
        for sid, sql, order in stmts:
            for mode in MODES:
                exp = run(plain, mode, sql)
                got = run(proxy, mode, sql)
                compare(sid, mode, sql, (), exp, got, order)
    finally:
        plain.close()
        proxy.close()


# ------------------------------------------------------------------ main

SUBSETS = []


def setup():
    global PROXY, PLAIN_T, PROXY_T
    t0 = time.monotonic()
    make_data()
    for port, db in ALL_DBS:
        c = superuser(port)
        c.cursor().execute(f"CREATE DATABASE {db} OWNER app")
        c.close()
    PROXY = Proxy("scatter-diff", proxy_config()).start()
    PLAIN_T = Target("plain", *PLAIN)
    PROXY_T = Target("proxy", PROXY.port, "app")
    t1 = time.monotonic()
    load(PLAIN_T.psy)
    t2 = time.monotonic()
    load(PROXY_T.psy)
    t3 = time.monotonic()
    print(f"     data {t1 - t0:.1f}s, load plain {t2 - t1:.1f}s, load through the proxy {t3 - t2:.1f}s")
    for port, db in SHARDS:  # ANALYZE through the proxy goes everywhere, but be sure
        c = direct(port, db)
        c.cursor().execute("ANALYZE")
        c.close()
    verify_load()
    build_statements()
    SUBSETS.extend(subset_statements())
    print(f"     setup (data, load, verify) {time.monotonic() - t0:.1f}s; {len(STMTS)} statements, "
          f"{len(REFUSED)} refusals")


def teardown():
    for t in (PLAIN_T, PROXY_T):
        if t is not None:
            t.close()
    for p in (PROXY, ICU_PROXY):
        if p is not None:
            p.stop()
    for port, db in ALL_DBS + ICU_DBS:
        try:
            c = superuser(port)
            c.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            c.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {db}: {e}")


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, checks=CHECKS, watch=lambda: [PROXY] if PROXY else []))
