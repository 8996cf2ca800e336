#!/usr/bin/env python3
"""Combine-step differential (SPEC §4, §4.1): multi-shard SELECTs the streaming merger
cannot answer exactly are answered by the combine step (partial rows of each sharded
table pulled into temporary tables on a combine database, the client's query run
there), so through splitpoint over three shards they must answer exactly what one plain
PostgreSQL holding every row answers -- with PostgreSQL's own types, typmods, NULL rules,
functions and SQLSTATEs.

Databases (made for this run, dropped at the end): shards cb0 and cb1 on PG0, cb2 on PG1;
the plain database on PG1. Schema and data (seeded random, identical on both sides,
loaded through the proxy with multi-row INSERTs under two-phase commit, and with the same
statements into the plain database):

  orders     hash (12 partitions) on bigint order_id        3000 rows
  customers  hash (8 partitions) on int customer_id, a distribution of its own
             (orders JOIN customers ON customer_id, or ON name, is not co-located)  400 rows
  events     range on bigint id: <0 s0, <1500 s1, rest s2  2000 rows (order_id: a
             non-key reference to orders)
  countries  reference table                                 20 rows

Columns: bigint/int/numeric (with and without typmod)/text (multibyte, empty, NULL)/date/
timestamptz/bool/interval/jsonb/json/int[]/money/inet, with NULLs, ties and negatives.
Intervals are generated so that equal values have one spelling (no '1 mon' vs '30 days'),
so DISTINCT / GROUP BY over them is deterministic. No float8 column is aggregated (a
float sum depends on the order of addition).

Checks: after loading, every table read directly from the shards and united equals the
plain table. Then some 300 statements of the kinds the merger refuses (count(DISTINCT),
string_agg/array_agg/json_agg/jsonb_agg with ORDER BY, FILTER, expressions over
aggregates, stddev/variance over int/numeric, percentile_cont/percentile_disc/mode() and
hypothetical-set aggregates, window functions, UNION/INTERSECT/EXCEPT [ALL] over sharded
and reference tables, GROUPING SETS/ROLLUP/CUBE, DISTINCT ON, sub-selects and CTEs,
SQLAlchemy's count over an anonymous sub-select, joins that are not co-located, ORDER BY/
LIMIT/OFFSET over all of these, $n parameters in WHERE/HAVING/LIMIT, interval/json/jsonb/
array/money/inet in ORDER BY, GROUP BY and aggregates), plus statements plain PostgreSQL
rejects (same SQLSTATE wanted), each run three ways: simple protocol (psycopg2, values
kept as the server's text), extended protocol with text and with binary results (pgwire).
Column names, type OIDs, sizes, typmods and formats, the command tag and the rows must be
identical: in order where ORDER BY fixes it (ORDER BY is total wherever it can be),
sort-key groups where it leaves ties, else as multisets. Then: a named prepared combine
statement (ParameterDescription and RowDescription of Describe(statement), executed
with several parameter sets, and a portal fetched in pieces with Execute(max_rows));
result formats per column and binary parameters; a CancelRequest during the combine
query (57014) and a client disconnecting during it (the combine database stops it);
several combine statements in one simple Query message; session settings (TimeZone,
DateStyle, IntervalStyle, extra_float_digits) applying to combined answers; hints
(deadline, partial) changing nothing; eight sessions running combine statements at once;
an explicit transaction (BEGIN; INSERTs into two sharded tables through the proxy;
combine SELECTs, in each protocol, that must see the new rows; ROLLBACK; the rows gone),
the same with the INSERTs sent through the extended protocol, a REPEATABLE READ
transaction keeping its snapshot while another session commits rows, and a combine
statement failing inside a transaction (25P02 after it, as PostgreSQL); SHOW
splitpoint.last_scatter after a combine statement (every shard ok, and the combine as
one more row); a deadline passing during the combine phase (SPS01, the combine query
cancelled, the session usable); a second proxy combining on s2 (on PG1) with a small
scatter.max_combine_rows: statements within the cap match plain PostgreSQL, ones beyond
it fail with SPS02 and the session goes on working; ALTER TABLE through the proxy (add,
drop, retype columns) followed by the same statement texts (cached plans must follow the
new shapes); last, no temporary table of the combine step is left on the combine
databases.

CB_SELFCHECK=1 runs every comparison against a second plain database loaded in another
row order, queried with other planner settings (CB_SELFCHECK_OPTIONS), instead of the
proxy: finds statements of this file whose answer is not determined (the proxy-only
tests are skipped).

A check that fails because of a known proxy bug is listed in KNOWN (printed as
"KNOWN FAILURE: ..." without failing the run); every other mismatch fails the test.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import datetime as dt
import json
import os
import random
import secrets
import sys
import time
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
import psycopg2  # noqa: E402
import psycopg2.extensions  # noqa: E402

HOST = sptest.HOST
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("cb-diff")
SEED = int(os.environ.get("CB_SEED", "20240607"))  # fixed: every run loads the same data
SELFCHECK = os.environ.get("CB_SELFCHECK") == "1"
rng = random.Random(SEED)
SUFFIX = secrets.token_hex(4)

SHARDS = [(PG0, f"cb0_{SUFFIX}"), (PG0, f"cb1_{SUFFIX}"), (PG1, f"cb2_{SUFFIX}")]
PLAIN = (PG1, f"cbplain_{SUFFIX}")
PLAIN2 = (PG0, f"cbplain2_{SUFFIX}")   # CB_SELFCHECK only
ALL_DBS = SHARDS + [PLAIN] + ([PLAIN2] if SELFCHECK else [])
CREATED_DBS = []

# psycopg2: every value as the server's text (arrays too), so the simple protocol is
# compared byte for byte (no float/Decimal/datetime/list conversion hiding differences).
RAW_OIDS = (16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 650, 700, 701, 790, 869, 1042, 1043, 1082, 1083, 1114, 1184,
            1186, 1266, 1700, 2950, 3802,
            # arrays
            199, 651, 791, 1000, 1001, 1005, 1007, 1009, 1015, 1016, 1021, 1022, 1041, 1115, 1182, 1183, 1185, 1187,
            1231, 1270, 2951, 3807)
psycopg2.extensions.register_type(psycopg2.extensions.new_type(RAW_OIDS, "CB_RAW", lambda v, cur: v))

# ------------------------------------------------------------------ known proxy bugs
# (statement id, mode) -> diagnosis. mode: simple | text | binary | * (any). A listed
# check that fails prints "KNOWN FAILURE: ..." and does not fail the run; one that
# passes prints a note so it can be made a hard assertion again.
KNOWN = {}
if SELFCHECK:
    KNOWN.clear()   # plain PostgreSQL on both sides: no proxy bug applies

# ------------------------------------------------------------------ harness


class Proxy(sptest.Proxy):
    """One splitpoint process (tests/lib/sptest.py) with its config and log in WORKDIR."""

    def __init__(self, name, body):
        super().__init__(name, body, WORKDIR)


def direct(port, db):
    return sptest.connect(port, db)


def proxy_config(scatter_extra=""):
    lines = "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, password: secret }}"
                      for i, (port, db) in enumerate(SHARDS))
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
  - {{ name: admin, password: adminpw, admin: true }}
shards:
{lines}
distributions:
  - name: by_order
    method: hash
    partitions: 12
    tables:
      orders: order_id
  - name: by_customer
    method: hash
    partitions: 8
    tables:
      customers: customer_id
  - name: by_event
    method: range
    ranges:
      - {{ upto: 0, shard: s0 }}
      - {{ upto: 1500, shard: s1 }}
      - {{ shard: s2 }}
    tables:
      events: id
reference_tables: [countries]
unlisted_tables: reject
transactions:
  cross_shard_writes: two_phase
scatter:
  deadline: 60s
  max_deadline: 120s
  partial_results: deny
{scatter_extra}"""


class Target:
    """The plain database or the proxy: a psycopg2 connection (simple protocol) and a
    pgwire connection (extended protocol)."""

    def __init__(self, name, port, db, options=None):
        self.name, self.port, self.db = name, port, db
        kw = {"options": options} if options else {}
        self.psy = sptest.connect(port, db, **kw)
        self.wire = pgwire.connect(HOST, port, "app", db, password="secret", timeout=60, **kw)

    def close(self):
        for f in (self.psy.close, self.wire.close):
            try:
                f()
            except Exception:  # noqa: BLE001
                pass


PROXY = None
PROXY2 = None
PLAIN_T = None
PROXY_T = None

# ------------------------------------------------------------------ results (tests/lib/difftest.py)

from difftest import MODES, col_tuple, first_diff, res_of, run, run_simple, short, wire_param  # noqa: E402
import difftest  # noqa: E402

# ------------------------------------------------------------------ comparing

CHECKS = sptest.Checks(KNOWN, label="MISMATCH")
MISMATCHES = []   # (sid, mode) of every failed comparison, for the summary


def check(ok, sid, mode, what):
    """Records one check. `what` is a function giving the detail text (only built on failure)."""
    key = next((k for k in ((sid, mode), (sid, "*")) if k in KNOWN), None)
    if not ok and (sid, mode) not in MISMATCHES:
        MISMATCHES.append((sid, mode))
    return CHECKS.check(ok, f"{sid} {mode}", what, key=key)


def compare(sid, mode, sql, params, exp, got, order):
    """order: 'set' | 'exact' | ('keys', [idx...], partial) | 'count' | 'error' (same SQLSTATE)"""
    return difftest.compare(check, sid, mode, sql, params, exp, got, order)


# ------------------------------------------------------------------ data

STATUSES = ["new", "paid", "shipped", "cancelled", "Ärger", "日本", "🚀 rocket", "", "Zulu", "zulu", "émoji 😀",
            "a b"]
ALPHABET = list("abcXYZ019 -_'\\,") + ["é", "ß", "Ω", "ж", "日", "本", "😀", "ñ", "Å"]
CITIES = ["Berlin", "berlin", "Zürich", "São Paulo", "東京", "", "Łódź", "Aarhus", "Åre", "Zagreb"]
KINDS = ["click", "view", "buy", "Kauf", "клик", "購入", "", "z"]
NAME_STEMS = ["alice", "Alice", "émile", "Zoë", "東京", "o'brien", "back\\slash", "a b", "Ω", "zz", "ä", "😀"]
UTC = dt.timezone.utc
BASE_TS = dt.datetime(2024, 1, 1, tzinfo=UTC)

COUNTRIES = []
CUSTOMERS = []
ORDERS = []
EVENTS = []

COUNTRY_COLS = ("code", "name", "region")
CUSTOMER_COLS = ("customer_id", "name", "city", "tier", "balance", "joined", "prefs", "email")
ORDER_COLS = ("order_id", "customer_id", "cust_name", "amount", "qty", "weight", "status", "note", "created_at",
              "ship_date", "paid", "wait", "attrs", "tags", "price", "ip", "country")
EVENT_COLS = ("id", "order_id", "kind", "at", "n", "amount", "flag", "code", "local_at")

DDL = [
    "CREATE TABLE countries (code text PRIMARY KEY, name text, region text)",
    "CREATE TABLE customers (customer_id int PRIMARY KEY, name text NOT NULL, city text, tier smallint, "
    "balance numeric(14,4), joined date, prefs json, email varchar(40))",
    "CREATE TABLE orders (order_id bigint PRIMARY KEY, customer_id int, cust_name text, amount numeric(12,2), "
    "qty int, weight numeric, status text, note text, created_at timestamptz NOT NULL, ship_date date, paid bool, "
    "wait interval, attrs jsonb, tags int[], price money, ip inet, country text)",
    "CREATE TABLE events (id bigint PRIMARY KEY, order_id bigint, kind text, at timestamptz NOT NULL, n int, "
    "amount numeric(10,3), flag bool, code char(3), local_at timestamp(3))",
]


def maybe(p, f):
    return None if rng.random() < p else f()


def rand_text(lo, hi):
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(lo, hi)))


def rand_interval():
    """One spelling per value: days < 28, hours < 24, a negative value only in the time part."""
    r = rng.random()
    if r < 0.15:
        return f"-{rng.randrange(0, 24):02d}:{rng.randrange(0, 60):02d}:{rng.randrange(0, 60):02d}"
    m = rng.choice([0, 0, 0, 0, 1, 2, 13])
    d = rng.randrange(0, 28)
    t = f"{rng.randrange(0, 24):02d}:{rng.randrange(0, 60):02d}:{rng.randrange(0, 60):02d}"
    if rng.random() < 0.2:
        t += f".{rng.randrange(0, 10**6):06d}"
    return f"{m} mons {d} days {t}"


def rand_jsonb():
    r = rng.random()
    if r < 0.05:
        return "null"
    if r < 0.1:
        return "{}"
    if r < 0.15:
        return json.dumps([rng.randrange(0, 4), rng.randrange(0, 4)])
    if r < 0.2:
        return json.dumps(rng.choice(STATUSES), ensure_ascii=False)
    if r < 0.25:
        return rng.choice(["3.50", "-0.0", "1e3", "12"])
    d = {"k": rng.randrange(0, 10), "s": rng.choice(STATUSES)}
    if rng.random() < 0.5:
        d["tags"] = [rng.randrange(0, 5) for _ in range(rng.randrange(0, 3))]
    if rng.random() < 0.2:
        d["nested"] = {"z": rng.random() < 0.5, "a": None}
    return json.dumps(d, ensure_ascii=False)


def rand_tags():
    r = rng.random()
    if r < 0.05:
        return "{}"
    if r < 0.1:
        return "{NULL," + str(rng.randrange(0, 9)) + "}"
    return "{" + ",".join(str(rng.randrange(0, 9)) for _ in range(rng.randrange(1, 4))) + "}"


def rand_ip():
    r = rng.random()
    if r < 0.15:
        return f"2001:db8::{rng.randrange(0, 65536):x}"
    if r < 0.3:
        return f"10.{rng.randrange(0, 4)}.{rng.randrange(0, 4)}.0/24"
    return f"10.{rng.randrange(0, 4)}.{rng.randrange(0, 4)}.{rng.randrange(0, 256)}"


def rand_weight():
    s = rng.randrange(0, 5)
    ip = rng.randrange(-99, 1000)
    return str(ip) if s == 0 else f"{ip}.{rng.randrange(0, 10 ** s):0{s}d}"


def make_data():
    for i in range(20):
        code = "C" + chr(65 + i)
        COUNTRIES.append((code, rng.choice(["Deutschland", "日本", "Россия", "España", "Ísland"]) + f" {i}",
                          rng.choice(["EU", "ASIA", "AM", "", None])))
    codes = [c[0] for c in COUNTRIES]
    names = set()
    for cid in range(1, 401):
        while True:
            name = rng.choice(NAME_STEMS) + rng.choice(["", "-", " ", "_"]) + str(rng.randrange(0, 10000))
            if name not in names:
                names.add(name)
                break
        prefs = rng.choice([None, "null", '{"a": 1,  "b": [1,2]}', '{"dup": 1, "dup": 2}',
                            json.dumps({"lang": rng.choice(["de", "日本語", "en"]), "n": rng.randrange(0, 5)},
                                       ensure_ascii=False)])
        CUSTOMERS.append((
            cid, name,
            maybe(0.1, lambda: rng.choice(CITIES)),
            maybe(0.1, lambda: rng.randrange(1, 6)),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-10**7, 10**8)) / 10000:.4f}"),
            maybe(0.05, lambda: (dt.date(2015, 1, 1) + dt.timedelta(days=rng.randrange(0, 3000))).isoformat()),
            prefs,
            maybe(0.05, lambda: rng.choice(["", f"user{cid}@ex{cid % 7}.org", f"Ünïcödé.{cid}@例え.jp"])),
        ))
    cname = {c[0]: c[1] for c in CUSTOMERS}
    ids = set(rng.sample(range(-50000, 50000), 2995)) | {0, 1, -1, 9007199254740993, -9007199254740993}
    while len(ids) < 3000:
        ids.add(rng.randrange(50000, 10**12))
    for oid in sorted(ids, key=lambda _: rng.random()):
        created = BASE_TS + dt.timedelta(minutes=rng.randrange(0, 60 * 24 * 60))
        cid = rng.choice([None] + [999] + list(range(1, 401)) * 3)
        cn = cname.get(cid)
        if rng.random() < 0.05:
            cn = rng.choice(list(cname.values()))   # a name that is not this customer's
        elif rng.random() < 0.03:
            cn = None
        ORDERS.append((
            oid, cid, cn,
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-100000, 1000000)) / 100:.2f}"),
            maybe(0.05, lambda: rng.randrange(-3, 21)),
            maybe(0.05, rand_weight),
            maybe(0.05, lambda: rng.choice(STATUSES)),
            maybe(0.05, lambda: rand_text(0, 8)),
            created.isoformat(sep=" "),
            maybe(0.1, lambda: (dt.date(2023, 1, 1) + dt.timedelta(days=rng.randrange(0, 900))).isoformat()),
            maybe(0.1, lambda: rng.random() < 0.6),
            maybe(0.1, rand_interval),
            maybe(0.1, rand_jsonb),
            maybe(0.1, rand_tags),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-100000, 10000000)) / 100:.2f}"),
            maybe(0.05, rand_ip),
            maybe(0.05, lambda: rng.choice(codes + ["ZZ"])),
        ))
    order_ids = [o[0] for o in ORDERS]
    for eid in rng.sample(range(-1000, 4000), 2000):
        r = rng.random()
        ref = rng.choice(order_ids) if r < 0.7 else (rng.randrange(-50000, 50000) if r < 0.9 else None)
        EVENTS.append((
            eid, ref,
            maybe(0.05, lambda: rng.choice(KINDS)),
            (BASE_TS + dt.timedelta(seconds=rng.randrange(0, 10**7))).isoformat(sep=" "),
            maybe(0.05, lambda: rng.randrange(-10, 10)),
            maybe(0.05, lambda: f"{Decimal(rng.randrange(-10**6, 10**6)) / 1000:.3f}"),
            maybe(0.05, lambda: rng.random() < 0.5),
            maybe(0.05, lambda: rng.choice(["ab", "ab ", "xyz", "é", "", "Q"])),
            maybe(0.05, lambda: (dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randrange(0, 10**13)))
                  .isoformat(sep=" ")),
        ))


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def insert_sql(table, cols, rows):
    return (f"INSERT INTO {table} ({', '.join(cols)}) VALUES " +
            ",".join("(" + ",".join(sql_lit(v) for v in row) + ")" for row in rows))


TABLES = [("countries", COUNTRY_COLS, COUNTRIES, 100), ("customers", CUSTOMER_COLS, CUSTOMERS, 100),
          ("orders", ORDER_COLS, ORDERS, 250), ("events", EVENT_COLS, EVENTS, 250)]


def load(conn, shuffle=None):
    """DDL and multi-row INSERTs (rows in another order and other chunks when `shuffle`,
    a random.Random, is given: the self-check's second plain database)."""
    cur = conn.cursor()
    for s in DDL:
        cur.execute(s)
    for table, cols, rows, chunk in TABLES:
        rows = list(rows)
        if shuffle:
            shuffle.shuffle(rows)
            chunk = chunk // 2 + 7
        for i in range(0, len(rows), chunk):
            cur.execute(insert_sql(table, cols, rows[i:i + chunk]))
    cur.execute("ANALYZE")
    cur.close()


SHARD_KEYS = {}   # table -> list of sets of keys per shard


def verify_load():
    """Every sharded table, read directly from the shards and united, equals the plain
    one; every shard has the whole reference table."""
    pc = direct(*PLAIN)
    for table, _, _, _ in TABLES:
        cur = pc.cursor()
        cur.execute(f"SELECT x::text FROM {table} x")
        want = sorted(r[0] for r in cur.fetchall())
        got, per_shard = [], []
        for port, db in SHARDS:
            c = direct(port, db)
            cc = c.cursor()
            cc.execute(f"SELECT x::text FROM {table} x")
            rows = sorted(r[0] for r in cc.fetchall())
            if table == "countries":
                if rows != want:
                    raise AssertionError(f"reference table countries on {db}: {len(rows)} rows, differs from plain")
            else:
                got += rows
                key = {"orders": "order_id", "customers": "customer_id", "events": "id"}[table]
                cc.execute(f"SELECT {key} FROM {table}")
                per_shard.append({int(r[0]) for r in cc.fetchall()})
            c.close()
        if table != "countries":
            got.sort()
            if got != want:
                raise AssertionError(f"table {table}: shards hold {len(got)} rows, plain {len(want)}; "
                                     f"{first_diff(want, got)}")
            SHARD_KEYS[table] = per_shard
            print(f"     {table}: {len(want)} rows, per shard {[len(s) for s in per_shard]}")
    pc.close()


# ------------------------------------------------------------------ statements
# Each: (id, sql, params, order). order: 'set' | 'exact' | 'count' | 'error' | keys(idx..., partial=)

def keys(*idx, partial=False):
    return ("keys", list(idx), partial)


STMTS = []


def S(sid, sql, params=(), order="set"):
    assert all(s[0] != sid for s in STMTS), sid
    STMTS.append((sid, sql, tuple(params), order))


def E(sid, sql, params=()):
    S(sid, sql, params, "exact")


def ERR(sid, sql, params=()):
    S(sid, sql, params, "error")


def build_statements():
    # --- aggregates the streaming merger cannot combine
    E("agg-01", "SELECT count(*)::int FROM orders")
    E("agg-02", "SELECT round(sum(amount)::numeric, 2), round(avg(qty), 3) AS avg_qty FROM orders")
    E("agg-03", "SELECT max(created_at) - min(created_at) AS span FROM orders")
    E("agg-04", "SELECT coalesce(sum(qty), 0) AS s, coalesce(max(note), '-') AS m FROM orders WHERE qty > 100")
    E("agg-05", "SELECT count(DISTINCT status), count(DISTINCT customer_id), count(DISTINCT note) FROM orders")
    E("agg-06", "SELECT string_agg(status, ',' ORDER BY status) FROM orders WHERE qty = 3")
    E("agg-07", "SELECT string_agg(DISTINCT status, ' | ' ORDER BY status) FROM orders")
    E("agg-08", "SELECT array_agg(order_id ORDER BY order_id) FROM orders WHERE qty = 7")
    E("agg-09", "SELECT array_agg(amount ORDER BY amount NULLS FIRST, order_id) FROM orders WHERE qty = 5")
    E("agg-10", "SELECT json_agg(json_build_object('id', order_id, 's', status) ORDER BY order_id) FROM orders "
                "WHERE qty = 2")
    E("agg-11", "SELECT jsonb_agg(attrs ORDER BY order_id) FROM orders WHERE qty = 1")
    E("agg-12", "SELECT jsonb_object_agg(order_id::text, amount ORDER BY order_id) FROM orders WHERE qty = 0")
    E("agg-13", "SELECT count(*) FILTER (WHERE paid) AS p, count(DISTINCT status) FILTER (WHERE paid) AS dp, "
                "sum(amount) FILTER (WHERE status = 'paid') FROM orders")
    E("agg-14", "SELECT string_agg(note, '' ORDER BY note, order_id) FILTER (WHERE qty = 4) FROM orders")
    E("agg-15", "SELECT stddev(qty), variance(qty), stddev_pop(amount), var_samp(amount) FROM orders")
    E("agg-16", "SELECT status, stddev_samp(amount), var_pop(qty) FROM orders GROUP BY status "
                "ORDER BY status NULLS FIRST")
    E("agg-17", "SELECT sum(amount) / count(amount) AS mean, sum(qty)::numeric / nullif(count(*), 0) AS q "
                "FROM orders")
    E("agg-18", "SELECT bit_and(qty), bit_or(qty), bit_xor(qty) FROM orders")
    E("agg-19", "SELECT every(qty > -5), bool_and(paid) AND bool_or(paid) AS both FROM orders")
    E("agg-20", "SELECT min(wait), max(wait), sum(wait), avg(wait) FROM orders")
    E("agg-21", "SELECT min(price), max(price), sum(price) FROM orders")
    E("agg-22", "SELECT min(ip), max(ip), count(DISTINCT ip) FROM orders")
    E("agg-23", "SELECT count(*), count(DISTINCT (status, paid)) FROM orders")
    E("agg-24", "SELECT count(DISTINCT tags), count(DISTINCT attrs), count(DISTINCT wait) FROM orders")
    E("agg-25", "SELECT max(tags), min(tags) FROM orders")
    E("agg-26", "SELECT sum(qty * amount) / sum(qty) FROM orders WHERE qty > 0")
    E("agg-27", "SELECT count(*) * 2 + 1 AS x, length(string_agg(note, '' ORDER BY order_id)) AS len FROM orders")
    E("agg-28", "SELECT array_agg(DISTINCT country ORDER BY country) FROM orders")
    E("agg-29", "SELECT status, count(DISTINCT customer_id), string_agg(DISTINCT country, ',' ORDER BY country) "
                "FROM orders GROUP BY status ORDER BY status NULLS LAST")
    E("agg-30", "SELECT paid, array_agg(order_id ORDER BY order_id DESC) FILTER (WHERE qty = 9) FROM orders "
                "GROUP BY paid ORDER BY paid NULLS FIRST")
    E("agg-31", "SELECT country, count(DISTINCT status) AS n FROM orders GROUP BY country "
                "HAVING count(DISTINCT status) > 8 ORDER BY country NULLS FIRST")
    E("agg-32", "SELECT date_trunc('month', created_at) AS m, count(DISTINCT customer_id), round(avg(amount), 2) "
                "FROM orders GROUP BY 1 ORDER BY 1")
    E("agg-33", "SELECT qty, max(wait) - min(wait) AS wspan, max(ship_date) - min(ship_date) AS dspan FROM orders "
                "GROUP BY qty ORDER BY qty NULLS FIRST")
    E("agg-34", "SELECT count(DISTINCT kind), string_agg(kind, ';' ORDER BY id) FROM events WHERE n = 1")
    E("agg-35", "SELECT tier, count(*), string_agg(name, ', ' ORDER BY name) FROM customers GROUP BY tier "
                "ORDER BY tier NULLS FIRST")
    E("agg-36", "SELECT json_agg(prefs ORDER BY customer_id) FROM customers WHERE tier = 2")
    E("agg-37", "SELECT count(*) FROM orders HAVING count(DISTINCT status) > 3")
    E("agg-38", "SELECT sum(DISTINCT qty), avg(DISTINCT amount) FROM orders")
    E("agg-39", "SELECT jsonb_agg(DISTINCT attrs -> 'k') FROM orders")
    E("agg-40", "SELECT string_agg(DISTINCT note, ',') FROM orders")
    E("agg-41", "SELECT count(*) FILTER (WHERE note = '') AS empty, count(*) FILTER (WHERE note IS NULL) AS null, "
                "count(DISTINCT length(note)) FROM orders")
    E("agg-42", "SELECT min(weight) * max(weight), sum(weight) - sum(amount) FROM orders")
    E("agg-43", "SELECT round(avg(balance), 6), stddev(balance), max(joined) - min(joined) FROM customers")
    E("agg-44", "SELECT kind, sum(amount), count(DISTINCT order_id), bool_or(flag) FROM events GROUP BY kind "
                "ORDER BY kind NULLS FIRST")
    E("agg-45", "SELECT count(DISTINCT status) + count(DISTINCT country) AS n FROM orders WHERE paid")
    E("agg-46", "SELECT json_object_agg(code, region ORDER BY code) FROM countries")   # reference only
    E("agg-47", "SELECT array_agg(wait ORDER BY wait NULLS FIRST, order_id) FROM orders WHERE qty = 12")
    E("agg-48", "SELECT string_agg(ip::text, ' ' ORDER BY ip, order_id) FROM orders WHERE qty = 14")
    # partial aggregation pushed down and re-aggregated: result types, names, empty shards
    E("agg-49", "SELECT pg_typeof(sum(qty)), pg_typeof(count(*)), pg_typeof(sum(amount)), pg_typeof(avg(qty)), "
                "pg_typeof(sum(order_id)), pg_typeof(max(created_at)) FROM orders")
    E("agg-50", "SELECT sum(tier) + 0, pg_typeof(sum(tier)), min(tier) * 2, pg_typeof(min(tier)), avg(tier) * 1 "
                "FROM customers")
    E("agg-51", "SELECT count(*) + 1, sum(qty) - 1, max(created_at)::date, avg(qty) * 1, avg(amount) + 0 FROM orders")
    E("agg-52", "SELECT status, count(*) FILTER (WHERE paid) * 1 AS n FROM orders GROUP BY status "
                "HAVING sum(qty) FILTER (WHERE qty > 5) > 100 ORDER BY n DESC, status NULLS FIRST")
    E("agg-53", "SELECT round(avg(amount) FILTER (WHERE qty > 3), 4), avg(qty)::numeric(10,3) FROM orders")
    E("agg-54", "SELECT coalesce(sum(qty), -1), count(*) * 0 FROM orders WHERE qty > 100 GROUP BY ()")
    E("agg-55", "SELECT qty % 3 AS m, sum(amount)::numeric(20,1) FROM orders GROUP BY qty % 3 ORDER BY 1 NULLS FIRST")
    E("agg-56", "SELECT count(*)::int, max(order_id) - min(order_id), sum(qty) FROM orders "
                "WHERE order_id IN (1, 0, -1)")
    E("agg-57", "SELECT max(status) || min(status), bool_and(paid)::text, sum(qty) FILTER (WHERE paid IS NULL) "
                "FROM orders")
    E("agg-58", "SELECT sum(price) / count(price), max(price) - min(price) FROM orders")
    E("agg-59", "SELECT min(weight), max(weight)::text, sum(weight) * 1 FROM orders")
    E("agg-60", "SELECT kind, count(*)::int AS n, sum(amount) / nullif(count(amount), 0) FROM events GROUP BY kind "
                "HAVING count(*) > 0 ORDER BY n DESC, kind NULLS FIRST")
    E("agg-61", "SELECT coalesce(max(note), '∅') AS m, coalesce(min(ship_date), '2000-01-01') FROM orders "
                "WHERE status = $1", ["no such status"])
    E("agg-62", "SELECT status FROM orders GROUP BY status ORDER BY sum(qty) DESC NULLS LAST, status NULLS FIRST")
    E("agg-63", "SELECT sum(qty * 2), max(lower(status)), count(note || status), min(amount * -1) FROM orders")
    E("agg-64", "SELECT sum(qty * $1), count(*) FILTER (WHERE qty > $2) FROM orders", [3, 10])
    E("agg-65", "SELECT country, count(*)::int FROM orders GROUP BY country ORDER BY 1 NULLS FIRST")
    S("agg-66", "SELECT DISTINCT count(*)::int FROM orders GROUP BY qty")
    E("agg-67", "SELECT customer_id, sum(amount)::numeric(14,2) FROM orders GROUP BY 1 ORDER BY 2 DESC NULLS LAST, 1 "
                "LIMIT 5")
    S("agg-68", "SELECT CASE WHEN count(*) > 240 THEN 'many' ELSE 'few' END, status FROM orders GROUP BY status")
    # an ICU collation (ordering unlike the database's C.UTF-8): kept by the partial and combine queries
    E("coll-01", "SELECT max(status COLLATE \"und-x-icu\"), min(status COLLATE \"und-x-icu\") || '|', "
                 "max(name COLLATE \"und-x-icu\") FROM orders, (SELECT 'x'::text AS name) n")
    E("coll-02", "SELECT name FROM customers ORDER BY name COLLATE \"und-x-icu\", customer_id LIMIT 30")
    E("coll-03", "SELECT string_agg(DISTINCT status, ',' ORDER BY status) FILTER (WHERE qty < 5), "
                 "string_agg(DISTINCT status COLLATE \"und-x-icu\", ',') FROM orders")
    E("coll-04", "SELECT status COLLATE \"und-x-icu\" AS s, count(*)::int FROM orders GROUP BY 1 "
                 "ORDER BY 1 NULLS FIRST")
    E("coll-05", "SELECT c.name, o.order_id FROM customers c JOIN orders o ON o.customer_id = c.customer_id "
                 "WHERE o.qty = 1 ORDER BY c.name COLLATE \"und-x-icu\" DESC, o.order_id LIMIT 40")
    E("coll-06", "SELECT name, rank() OVER (ORDER BY name COLLATE \"und-x-icu\") FROM customers WHERE tier = 2 "
                 "ORDER BY 2, 1")

    # --- ordered-set and hypothetical-set aggregates
    E("osa-01", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) FROM orders")
    E("osa-02", "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY amount), "
                "percentile_disc(0.1) WITHIN GROUP (ORDER BY created_at) FROM orders")
    E("osa-03", "SELECT percentile_cont(ARRAY[0.25, 0.5, 0.75]) WITHIN GROUP (ORDER BY qty) FROM orders")
    E("osa-04", "SELECT mode() WITHIN GROUP (ORDER BY status) FROM orders")
    E("osa-05", "SELECT status, percentile_disc(0.5) WITHIN GROUP (ORDER BY qty), "
                "mode() WITHIN GROUP (ORDER BY country) FROM orders GROUP BY status ORDER BY status NULLS FIRST")
    E("osa-06", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY wait) FROM orders")
    E("osa-07", "SELECT rank(100) WITHIN GROUP (ORDER BY qty), dense_rank(5000) WITHIN GROUP (ORDER BY amount), "
                "percent_rank(0) WITHIN GROUP (ORDER BY qty), cume_dist(10) WITHIN GROUP (ORDER BY qty) FROM orders")
    E("osa-08", "SELECT kind, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount DESC) FROM events GROUP BY kind "
                "ORDER BY kind NULLS FIRST")
    E("osa-09", "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY tags) FROM orders")
    E("osa-10", "SELECT percentile_disc($1) WITHIN GROUP (ORDER BY amount) FROM orders", [0.33])
    E("osa-11", "SELECT percentile_disc(ARRAY[0, 0.5, 1]) WITHIN GROUP (ORDER BY price) FROM orders")
    E("osa-12", "SELECT tier, mode() WITHIN GROUP (ORDER BY city DESC) FROM customers GROUP BY tier "
                "ORDER BY tier NULLS FIRST")

    # --- window functions
    E("win-01", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders ORDER BY order_id")
    E("win-02", "SELECT order_id, status, rank() OVER (PARTITION BY status ORDER BY amount NULLS LAST) FROM orders "
                "ORDER BY order_id")
    E("win-03", "SELECT order_id, dense_rank() OVER (ORDER BY qty DESC NULLS LAST) FROM orders ORDER BY order_id")
    E("win-04", "SELECT order_id, lag(amount) OVER w, lead(status, 2, 'none') OVER w FROM orders "
                "WINDOW w AS (PARTITION BY country ORDER BY created_at, order_id) ORDER BY order_id")
    E("win-05", "SELECT order_id, sum(amount) OVER (PARTITION BY customer_id ORDER BY order_id) FROM orders "
                "ORDER BY order_id")
    E("win-06", "SELECT order_id, sum(qty) OVER (ORDER BY created_at, order_id ROWS BETWEEN 2 PRECEDING AND "
                "2 FOLLOWING) FROM orders ORDER BY created_at, order_id LIMIT 200")
    E("win-07", "SELECT status, count(*), rank() OVER (ORDER BY count(*) DESC) FROM orders GROUP BY status "
                "ORDER BY status NULLS FIRST")
    E("win-08", "SELECT * FROM (SELECT order_id, customer_id, row_number() OVER (PARTITION BY customer_id "
                "ORDER BY amount DESC NULLS LAST, order_id) AS rn FROM orders) s WHERE rn <= 2 "
                "ORDER BY customer_id NULLS FIRST, rn")
    E("win-09", "SELECT order_id, first_value(order_id) OVER w, last_value(order_id) OVER w, "
                "nth_value(order_id, 2) OVER w FROM orders WINDOW w AS (PARTITION BY qty ORDER BY order_id "
                "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) ORDER BY order_id")
    E("win-10", "SELECT order_id, ntile(4) OVER (ORDER BY order_id), percent_rank() OVER (ORDER BY amount), "
                "cume_dist() OVER (ORDER BY qty) FROM orders ORDER BY order_id")
    E("win-11", "SELECT order_id, avg(amount) OVER (PARTITION BY status) FROM orders ORDER BY order_id")
    E("win-12", "SELECT order_id, count(*) OVER () AS total FROM orders ORDER BY order_id LIMIT 10")
    E("win-13", "SELECT id, kind, row_number() OVER (PARTITION BY kind ORDER BY at, id) FROM events ORDER BY id")
    E("win-14", "SELECT customer_id, name, rank() OVER (PARTITION BY city ORDER BY balance DESC NULLS LAST) "
                "FROM customers ORDER BY customer_id")
    E("win-15", "SELECT order_id, sum(amount) OVER (ORDER BY order_id RANGE BETWEEN 1000 PRECEDING AND "
                "CURRENT ROW) FROM orders ORDER BY order_id")
    E("win-16", "SELECT order_id, max(wait) OVER (PARTITION BY paid) FROM orders ORDER BY order_id")
    S("win-17", "SELECT DISTINCT status, count(*) OVER (PARTITION BY status) FROM orders")
    E("win-18", "SELECT order_id, lag(order_id) OVER (ORDER BY order_id) IS NULL AS first FROM orders "
                "ORDER BY order_id DESC LIMIT 5")
    E("win-19", "SELECT order_id, string_agg(status, ',') OVER (ORDER BY order_id ROWS 2 PRECEDING) FROM orders "
                "ORDER BY order_id LIMIT 100")
    E("win-20", "SELECT order_id, rank() OVER (ORDER BY wait, order_id) FROM orders WHERE wait IS NOT NULL "
                "ORDER BY order_id")
    E("win-21", "SELECT country, sum(count(*)) OVER (ORDER BY country) FROM orders GROUP BY country "
                "ORDER BY country NULLS LAST")
    E("win-22", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders WHERE customer_id = $1 "
                "ORDER BY 1", [12])
    E("win-23", "SELECT id, at - lag(at) OVER (ORDER BY at, id) AS gap FROM events ORDER BY id")
    E("win-24", "SELECT order_id, sum(price) OVER (PARTITION BY country ORDER BY order_id) FROM orders "
                "WHERE qty < 2 ORDER BY order_id")
    E("win-25", "SELECT customer_id, count(*) OVER (PARTITION BY tier), sum(balance) OVER (ORDER BY customer_id "
                "GROUPS BETWEEN 1 PRECEDING AND 1 FOLLOWING) FROM customers ORDER BY customer_id")

    # --- set operations over sharded and reference tables
    S("set-01", "SELECT status FROM orders UNION SELECT kind FROM events")
    S("set-02", "SELECT status FROM orders UNION ALL SELECT name FROM countries")
    S("set-03", "SELECT customer_id FROM orders INTERSECT SELECT customer_id FROM customers")
    E("set-04", "SELECT customer_id FROM customers EXCEPT SELECT customer_id FROM orders WHERE paid ORDER BY 1")
    S("set-05", "SELECT qty FROM orders INTERSECT ALL SELECT n FROM events")
    S("set-06", "SELECT qty FROM orders EXCEPT ALL SELECT n FROM events")
    E("set-07", "SELECT country FROM orders UNION SELECT code FROM countries ORDER BY 1 NULLS FIRST")
    S("set-08", "(SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS LAST, order_id LIMIT 5) UNION ALL "
                "(SELECT id, amount FROM events ORDER BY amount, id LIMIT 5)")
    E("set-09", "SELECT order_id FROM orders WHERE qty = 1 UNION SELECT order_id FROM events WHERE n = 1 "
                "ORDER BY 1 DESC LIMIT 20 OFFSET 3")
    S("set-10", "SELECT status, count(*) FROM orders GROUP BY status UNION ALL SELECT kind, count(*) FROM events "
                "GROUP BY kind")
    S("set-11", "SELECT code FROM countries EXCEPT SELECT country FROM orders WHERE qty = 20 AND paid "
                "AND amount > 5000")
    E("set-12", "SELECT name FROM customers INTERSECT SELECT cust_name FROM orders ORDER BY 1")
    S("set-13", "SELECT wait FROM orders WHERE qty = 2 UNION SELECT wait FROM orders WHERE qty = 3")
    S("set-14", "SELECT attrs FROM orders WHERE qty < 2 UNION SELECT attrs FROM orders WHERE qty > 18")
    S("set-15", "SELECT tags FROM orders EXCEPT SELECT tags FROM orders WHERE qty > 5")
    E("set-16", "SELECT count(*) FROM (SELECT customer_id FROM orders UNION SELECT customer_id FROM customers) u")
    E("set-17", "SELECT 'o' AS src, order_id AS id FROM orders WHERE amount > 9900 UNION ALL "
                "SELECT 'e', id FROM events WHERE amount > 990 ORDER BY 1, 2")
    E("set-18", "SELECT ip FROM orders WHERE qty = 4 UNION SELECT ip FROM orders WHERE qty = 6 ORDER BY 1 NULLS FIRST")
    S("set-19", "SELECT order_id FROM events INTERSECT SELECT order_id FROM orders")
    E("set-20", "SELECT city FROM customers UNION SELECT status FROM orders EXCEPT SELECT kind FROM events "
                "ORDER BY 1 NULLS LAST")
    S("set-21", "SELECT qty, paid FROM orders WHERE amount > 9000 UNION ALL SELECT n, flag FROM events "
                "WHERE amount > 900")

    # --- GROUPING SETS / ROLLUP / CUBE
    E("gs-01", "SELECT status, paid, count(*) FROM orders GROUP BY GROUPING SETS ((status), (paid), ()) "
               "ORDER BY grouping(status, paid), status NULLS FIRST, paid NULLS FIRST")
    E("gs-02", "SELECT country, qty > 10 AS big, sum(amount), grouping(country, qty > 10) AS g FROM orders "
               "GROUP BY ROLLUP (country, qty > 10) ORDER BY 4, 1 NULLS FIRST, 2 NULLS FIRST")
    S("gs-03", "SELECT paid, status, count(*) FROM orders GROUP BY CUBE (paid, status)")
    S("gs-04", "SELECT extract(year FROM ship_date) AS y, paid, count(DISTINCT status) FROM orders "
               "GROUP BY ROLLUP (1, 2)")
    S("gs-05", "SELECT region, code, count(*) FROM orders o JOIN countries c ON c.code = o.country "
               "GROUP BY ROLLUP (region, code)")
    E("gs-06", "SELECT city, tier, sum(balance), grouping(city) AS gc, grouping(tier) AS gt FROM customers "
               "GROUP BY GROUPING SETS ((city, tier), city, tier) ORDER BY 4, 5, 1 NULLS FIRST, 2 NULLS FIRST")
    S("gs-07", "SELECT kind, flag, count(*), sum(n) FROM events GROUP BY CUBE (kind, flag) HAVING count(*) > 10")
    E("gs-08", "SELECT status, count(*) FROM orders GROUP BY ROLLUP (status) ORDER BY grouping(status), status "
               "LIMIT 5")
    S("gs-09", "SELECT qty, paid, count(*), GROUPING(qty, paid) FROM orders WHERE qty BETWEEN $1 AND $2 "
               "GROUP BY CUBE (qty, paid)", [1, 4])
    S("gs-10", "SELECT c.tier, o.paid, count(*), sum(o.amount) FROM orders o JOIN customers c "
               "ON c.customer_id = o.customer_id GROUP BY GROUPING SETS ((c.tier), (o.paid), (c.tier, o.paid))")

    # --- DISTINCT ON
    E("don-01", "SELECT DISTINCT ON (customer_id) customer_id, order_id, amount FROM orders "
                "ORDER BY customer_id, created_at DESC, order_id")
    E("don-02", "SELECT DISTINCT ON (country) country, wait, order_id FROM orders "
                "ORDER BY country, wait DESC NULLS LAST, order_id")
    E("don-03", "SELECT DISTINCT ON (status, paid) status, paid, attrs FROM orders ORDER BY status, paid, order_id")
    E("don-04", "SELECT DISTINCT ON (tags) tags, order_id FROM orders ORDER BY tags, order_id")
    E("don-05", "SELECT DISTINCT ON (kind) kind, id, at FROM events ORDER BY kind, at, id LIMIT 4")
    E("don-06", "SELECT DISTINCT ON (c.city) c.city, o.order_id FROM orders o JOIN customers c "
                "ON c.customer_id = o.customer_id ORDER BY c.city, o.amount DESC NULLS LAST, o.order_id")
    E("don-07", "SELECT DISTINCT ON (attrs -> 'k') attrs -> 'k' AS k, order_id, price FROM orders "
                "ORDER BY attrs -> 'k', price DESC NULLS LAST, order_id")

    # --- sub-selects and CTEs over sharded tables
    E("sub-01", "SELECT order_id, amount FROM orders WHERE amount > (SELECT avg(amount) FROM orders) "
                "ORDER BY order_id")
    E("sub-02", "SELECT order_id FROM orders WHERE customer_id IN (SELECT customer_id FROM customers "
                "WHERE tier = 1) ORDER BY order_id")
    E("sub-03", "SELECT customer_id, name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o "
                "WHERE o.customer_id = c.customer_id AND o.qty > 18) ORDER BY customer_id")
    E("sub-04", "SELECT customer_id FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o "
                "WHERE o.customer_id = c.customer_id AND o.qty > 12) ORDER BY 1")
    E("sub-05", "SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS n "
                "FROM customers c ORDER BY c.customer_id")
    E("sub-06", "SELECT status, n FROM (SELECT status, count(*) AS n FROM orders GROUP BY status) s "
                "WHERE n > 100 ORDER BY status NULLS FIRST")
    E("sub-07", "SELECT max(n) FROM (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id) s")
    E("sub-08", "SELECT avg(cnt) FROM (SELECT count(*) AS cnt FROM orders GROUP BY country) x")
    E("sub-09", "SELECT order_id, (SELECT max(amount) FROM orders) - amount AS gap FROM orders WHERE qty = 11 "
                "ORDER BY order_id")
    E("sub-10", "SELECT order_id FROM orders WHERE amount = (SELECT max(amount) FROM orders) ORDER BY 1")
    E("sub-11", "SELECT order_id, amount FROM orders o WHERE amount > ALL (SELECT amount FROM events "
                "WHERE amount IS NOT NULL AND n = 5) ORDER BY order_id")
    E("sub-12", "SELECT * FROM (SELECT order_id, amount FROM orders ORDER BY amount DESC NULLS LAST, order_id "
                "LIMIT 50) t ORDER BY order_id")
    E("sub-13", "SELECT o.status, (SELECT string_agg(code, ',' ORDER BY code) FROM countries c "
                "WHERE c.region = 'EU') FROM orders o WHERE o.order_id = (SELECT min(order_id) FROM orders)")
    E("sub-14", "SELECT id FROM events WHERE order_id IN (SELECT order_id FROM orders WHERE paid AND qty = 10) "
                "ORDER BY id")
    E("sub-15", "SELECT name FROM customers WHERE customer_id = ANY (SELECT customer_id FROM orders "
                "WHERE status = '日本' AND customer_id IS NOT NULL) ORDER BY name")
    E("sub-16", "SELECT count(*) FROM orders WHERE customer_id NOT IN (SELECT customer_id FROM customers "
                "WHERE tier > 3)")
    E("cte-01", "WITH big AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
                "SELECT c.name, b.total FROM big b JOIN customers c USING (customer_id) "
                "ORDER BY b.total DESC NULLS LAST, c.name LIMIT 20")
    E("cte-02", "WITH o AS (SELECT * FROM orders WHERE paid) SELECT count(*), count(DISTINCT status) FROM o")
    E("cte-03", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) "
                "SELECT r.n, count(o.order_id) FROM r LEFT JOIN orders o ON o.qty = r.n GROUP BY r.n ORDER BY r.n")
    E("cte-04", "WITH x AS MATERIALIZED (SELECT order_id, status FROM orders WHERE qty = 3), "
                "y AS (SELECT status, count(*) AS n FROM x GROUP BY status) "
                "SELECT * FROM y ORDER BY n DESC, status NULLS FIRST")
    E("cte-05", "WITH e AS (SELECT order_id, count(*) AS ne FROM events GROUP BY order_id) "
                "SELECT o.order_id, o.status, e.ne FROM orders o JOIN e USING (order_id) "
                "ORDER BY e.ne DESC, o.order_id LIMIT 30")
    E("cte-06", "WITH t AS (SELECT customer_id, row_number() OVER (ORDER BY customer_id) AS rn FROM customers) "
                "SELECT * FROM t WHERE rn % 50 = 0 ORDER BY rn")
    E("cte-07", "WITH m AS (SELECT max(created_at) AS mx FROM orders) SELECT order_id FROM orders, m "
                "WHERE created_at > mx - interval '3 days' ORDER BY order_id")
    E("cte-08", "WITH a AS (SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id), "
                "b AS (SELECT n, count(*) AS k FROM a GROUP BY n) SELECT n, k FROM b ORDER BY n")
    E("cte-09", "WITH s AS (SELECT status FROM orders UNION SELECT kind FROM events) "
                "SELECT count(*), string_agg(status, '|' ORDER BY status) FROM s")

    # --- SQLAlchemy shapes
    E("sa-01", "SELECT count(*) AS count_1 FROM (SELECT orders.order_id AS orders_order_id, orders.status AS "
               "orders_status FROM orders WHERE orders.qty > $1) AS anon_1", [5])
    E("sa-02", "SELECT count(*) AS count_1 FROM (SELECT orders.order_id AS orders_order_id FROM orders "
               "WHERE orders.status = $1) AS anon_1", ["paid"])
    E("sa-03", "SELECT anon_1.orders_order_id, anon_1.orders_amount FROM (SELECT orders.order_id AS "
               "orders_order_id, orders.amount AS orders_amount FROM orders WHERE orders.paid "
               "ORDER BY orders.order_id LIMIT $1 OFFSET $2) AS anon_1 ORDER BY anon_1.orders_order_id", [10, 20])
    E("sa-04", "SELECT count(*) AS count_1 FROM (SELECT DISTINCT orders.customer_id AS orders_customer_id "
               "FROM orders) AS anon_1")
    E("sa-05", "SELECT customers.customer_id AS customers_customer_id, customers.name AS customers_name, "
               "anon_1.cnt FROM customers JOIN (SELECT orders.customer_id AS customer_id, count(orders.order_id) "
               "AS cnt FROM orders GROUP BY orders.customer_id) AS anon_1 ON customers.customer_id = "
               "anon_1.customer_id ORDER BY anon_1.cnt DESC, customers.customer_id LIMIT $1", [15])
    E("sa-06", "SELECT count(*) AS count_1 FROM (SELECT orders.order_id AS orders_order_id FROM orders "
               "JOIN customers ON customers.customer_id = orders.customer_id WHERE customers.tier = $1) AS anon_1",
      [3])
    E("sa-07", "SELECT count(*) AS count_1 FROM (SELECT orders.order_id AS orders_order_id, orders.created_at AS "
               "orders_created_at FROM orders WHERE orders.created_at >= $1 AND orders.note IS NOT NULL) AS anon_1",
      ["2024-02-01 00:00:00+00"])

    # --- joins that are not co-located
    E("join-01", "SELECT o.order_id, c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
                 "WHERE o.qty = 8 ORDER BY o.order_id")
    E("join-02", "SELECT c.city, count(*), sum(o.amount) FROM orders o JOIN customers c "
                 "ON c.customer_id = o.customer_id GROUP BY c.city ORDER BY c.city NULLS FIRST")
    E("join-03", "SELECT o.order_id, c.customer_id FROM orders o LEFT JOIN customers c ON c.name = o.cust_name "
                 "WHERE o.qty = 9 ORDER BY o.order_id")
    E("join-04", "SELECT c.customer_id, count(o.order_id) FROM customers c LEFT JOIN orders o "
                 "ON o.customer_id = c.customer_id GROUP BY c.customer_id ORDER BY 2 DESC, 1 LIMIT 25")
    E("join-05", "SELECT o.order_id, e.id, e.kind FROM orders o JOIN events e ON e.order_id = o.order_id "
                 "WHERE e.n > 7 ORDER BY e.id")
    E("join-06", "SELECT count(*) FROM orders o FULL JOIN customers c ON c.customer_id = o.customer_id "
                 "WHERE o.order_id IS NULL OR c.customer_id IS NULL")
    E("join-07", "SELECT o.order_id, c.name, co.region FROM orders o JOIN customers c "
                 "ON c.customer_id = o.customer_id JOIN countries co ON co.code = o.country WHERE c.tier = 5 "
                 "ORDER BY o.order_id")
    S("join-08", "SELECT c.name, e.kind, count(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id "
                 "JOIN events e ON e.order_id = o.order_id GROUP BY c.name, e.kind")
    E("join-09", "SELECT o1.order_id, o2.order_id FROM orders o1 JOIN orders o2 ON o1.customer_id = o2.customer_id "
                 "AND o1.order_id < o2.order_id WHERE o1.qty = 20 AND o2.qty = 20 ORDER BY 1, 2")
    E("join-10", "SELECT c.tier, percentile_disc(0.5) WITHIN GROUP (ORDER BY o.amount) FROM orders o "
                 "JOIN customers c ON c.customer_id = o.customer_id GROUP BY c.tier ORDER BY 1 NULLS FIRST")
    E("join-11", "SELECT o.order_id, c.name FROM orders o, customers c WHERE c.customer_id = o.customer_id "
                 "AND c.name LIKE 'Z%' ORDER BY o.order_id")
    E("join-12", "SELECT e.id, o.status FROM events e LEFT JOIN orders o USING (order_id) WHERE e.id < 0 "
                 "ORDER BY e.id")
    E("join-13", "SELECT c.name FROM customers c JOIN orders o ON o.cust_name = c.name "
                 "AND o.customer_id <> c.customer_id ORDER BY 1")
    E("join-14", "SELECT c.customer_id, o.order_id FROM customers c CROSS JOIN LATERAL (SELECT order_id "
                 "FROM orders o WHERE o.customer_id = c.customer_id ORDER BY amount DESC NULLS LAST, order_id "
                 "LIMIT 1) o ORDER BY 1")
    E("join-15", "SELECT e.kind, o.status, count(*) FROM events e JOIN orders o ON o.order_id = e.order_id "
                 "GROUP BY ROLLUP (e.kind, o.status) ORDER BY grouping(e.kind, o.status), 1 NULLS FIRST, "
                 "2 NULLS FIRST")
    E("join-16", "SELECT c.name, o.order_id, o.amount FROM customers c RIGHT JOIN orders o "
                 "ON o.cust_name = c.name WHERE o.qty = 19 ORDER BY o.order_id")
    E("join-17", "SELECT count(*), count(c.customer_id), sum(o.qty) FROM orders o LEFT JOIN customers c "
                 "ON c.customer_id = o.customer_id AND c.city = o.status")

    # --- ORDER BY / LIMIT / OFFSET over combined answers
    E("lim-01", "SELECT status, count(DISTINCT customer_id) AS n FROM orders GROUP BY status "
                "ORDER BY n DESC, status NULLS FIRST LIMIT 3")
    E("lim-02", "SELECT order_id, row_number() OVER (ORDER BY amount DESC NULLS LAST, order_id) FROM orders "
                "ORDER BY 2 LIMIT 10 OFFSET 10")
    E("lim-03", "SELECT order_id, wait FROM orders ORDER BY wait DESC NULLS LAST, order_id LIMIT 15")
    E("lim-04", "SELECT customer_id, string_agg(status, ',' ORDER BY order_id) FROM orders GROUP BY customer_id "
                "ORDER BY customer_id NULLS FIRST OFFSET 390")
    E("lim-05", "SELECT order_id FROM orders ORDER BY attrs, order_id LIMIT 20")
    E("lim-06", "SELECT order_id, tags FROM orders ORDER BY tags DESC NULLS LAST, order_id LIMIT 20 OFFSET 5")
    S("lim-07", "SELECT qty, count(DISTINCT status) FROM orders GROUP BY qty ORDER BY 2 DESC "
                "FETCH FIRST 2 ROWS WITH TIES", order=keys(1))
    E("lim-08", "SELECT order_id FROM orders ORDER BY price DESC, order_id LIMIT 10")
    E("lim-09", "SELECT order_id FROM orders ORDER BY ip, order_id LIMIT 10")
    E("lim-10", "SELECT id, at FROM events ORDER BY at - lag(at) OVER (ORDER BY at, id) DESC NULLS LAST, id "
                "LIMIT 10")
    E("lim-11", "SELECT order_id, dense_rank() OVER (ORDER BY status) FROM orders ORDER BY order_id LIMIT 0")
    E("lim-12", "SELECT c.name, count(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
                "GROUP BY c.name ORDER BY count(*) DESC, c.name OFFSET 5 ROWS FETCH NEXT 5 ROWS ONLY")
    E("lim-13", "SELECT order_id, wait FROM orders ORDER BY wait NULLS FIRST, order_id OFFSET 2990")
    E("lim-14", "SELECT DISTINCT tags FROM orders ORDER BY tags NULLS FIRST LIMIT 10")
    S("lim-15", "SELECT order_id, row_number() OVER () FROM orders LIMIT 7", order="count")

    # --- parameters in WHERE, HAVING and LIMIT
    E("par-01", "SELECT count(DISTINCT status) FROM orders WHERE qty > $1", [10])
    E("par-02", "SELECT customer_id, count(DISTINCT country) FROM orders GROUP BY customer_id "
                "HAVING count(DISTINCT country) >= $1 ORDER BY 1 NULLS FIRST", [6])
    E("par-03", "SELECT order_id, rank() OVER (ORDER BY amount DESC, order_id) FROM orders WHERE amount IS NOT NULL "
                "ORDER BY 2 LIMIT $1", [7])
    E("par-04", "SELECT string_agg(status, $1 ORDER BY order_id) FROM orders WHERE customer_id = $2", [" / ", 17])
    E("par-05", "SELECT order_id FROM orders WHERE created_at >= $1 AND created_at < $2 "
                "ORDER BY wait NULLS FIRST, order_id LIMIT $3 OFFSET $4",
      ["2024-01-05 00:00:00+00", "2024-01-09 00:00:00+00", 10, 2])
    E("par-06", "SELECT status, percentile_disc(0.5) WITHIN GROUP (ORDER BY amount) FROM orders WHERE paid = $1 "
                "GROUP BY status HAVING count(*) > $2 ORDER BY status NULLS FIRST", [True, 50])
    E("par-07", "SELECT count(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
                "WHERE c.city = $1 AND o.status <> $2", ["Berlin", "new"])
    E("par-08", "SELECT order_id FROM orders WHERE tags @> $1 ORDER BY order_id", [[3, 5]])
    E("par-09", "SELECT order_id, attrs ->> 's' FROM orders WHERE attrs @> $1::jsonb ORDER BY order_id",
      ['{"k": 3}'])
    E("par-10", "SELECT customer_id FROM orders WHERE qty = $1 UNION SELECT customer_id FROM customers "
                "WHERE tier = $2 ORDER BY 1 NULLS FIRST LIMIT $3", [4, 2, 30])
    E("par-11", "SELECT count(*) AS count_1 FROM (SELECT order_id FROM orders WHERE amount BETWEEN $1 AND $2) "
                "AS anon_1", ["100.00", "2000.50"])
    E("par-12", "SELECT order_id, lag(order_id, $1) OVER (ORDER BY order_id) FROM orders ORDER BY order_id "
                "LIMIT 30", [3])
    E("par-13", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders ORDER BY 1 LIMIT $1", [None])
    E("par-14", "SELECT count(DISTINCT status), count(*) FROM orders WHERE note = $1", [""])
    E("par-15", "SELECT kind, count(DISTINCT order_id) FROM events WHERE at < $1 GROUP BY kind "
                "HAVING count(*) > $2 ORDER BY kind NULLS FIRST", ["2024-03-01 00:00:00+00", 20])
    E("par-16", "SELECT order_id, wait FROM orders WHERE wait > $1 ORDER BY wait, order_id LIMIT $2",
      ["1 mon", 12])
    E("par-17", "SELECT count(DISTINCT customer_id) FROM orders WHERE order_id = ANY($1)",
      [[1, 0, -1, 9007199254740993]])
    E("par-18", "SELECT ip, count(*) FROM orders WHERE ip << $1::inet GROUP BY ip ORDER BY 2 DESC, ip LIMIT 5",
      ["10.1.0.0/16"])

    # --- types the merger refuses to order, group or aggregate
    E("typ-01", "SELECT order_id, wait FROM orders ORDER BY wait NULLS FIRST, order_id")
    E("typ-02", "SELECT order_id, attrs FROM orders ORDER BY attrs DESC NULLS LAST, order_id")
    E("typ-03", "SELECT order_id, tags FROM orders ORDER BY tags, order_id")
    E("typ-04", "SELECT order_id, price FROM orders ORDER BY price, order_id")
    E("typ-05", "SELECT order_id, ip FROM orders ORDER BY ip DESC, order_id")
    E("typ-06", "SELECT wait, count(*) FROM orders GROUP BY wait ORDER BY wait NULLS FIRST")
    E("typ-07", "SELECT attrs -> 'k' AS k, count(*) FROM orders GROUP BY 1 ORDER BY 1 NULLS FIRST")
    S("typ-08", "SELECT DISTINCT tags FROM orders")
    E("typ-09", "SELECT DISTINCT ip FROM orders ORDER BY ip")
    E("typ-10", "SELECT paid, sum(price), min(price) FROM orders GROUP BY paid ORDER BY paid NULLS FIRST")
    E("typ-11", "SELECT customer_id, prefs FROM customers ORDER BY prefs::text, customer_id LIMIT 50")
    E("typ-12", "SELECT order_id, wait * 2, wait + interval '1 day', created_at + wait FROM orders WHERE qty = 13 "
                "ORDER BY wait, order_id")
    E("typ-13", "SELECT family(ip), masklen(ip), count(*) FROM orders GROUP BY 1, 2 ORDER BY 1 NULLS FIRST, "
                "2 NULLS FIRST")
    E("typ-14", "SELECT array_length(tags, 1) AS len, count(*) FROM orders GROUP BY 1 ORDER BY 1 NULLS FIRST")
    E("typ-15", "SELECT jsonb_typeof(attrs) AS t, count(*) FROM orders GROUP BY 1 ORDER BY 1 NULLS FIRST")
    E("typ-16", "SELECT max(attrs ->> 's'), min((attrs ->> 'k')::int) FROM orders")
    E("typ-17", "SELECT unnest(tags) AS t, count(*) FROM orders GROUP BY 1 ORDER BY 1 NULLS FIRST")
    E("typ-18", "SELECT order_id, price::numeric, ip::text FROM orders WHERE price IS NOT NULL "
                "ORDER BY price::numeric DESC, order_id LIMIT 10")
    E("typ-19", "SELECT attrs, count(*) FROM orders GROUP BY attrs ORDER BY count(*) DESC, attrs NULLS FIRST "
                "LIMIT 10")
    E("typ-20", "SELECT order_id, note FROM orders WHERE note IN ('', 'é') OR note IS NULL "
                "ORDER BY note NULLS FIRST, order_id")
    E("typ-21", "SELECT min(ship_date), max(ship_date), max(ship_date) - min(ship_date) AS days FROM orders")
    E("typ-22", "SELECT tags, wait, attrs, price, ip FROM orders ORDER BY order_id DESC LIMIT 40")
    E("typ-23", "SELECT array_agg(tags ORDER BY order_id) FROM orders WHERE qty = 15 AND tags IS NOT NULL "
                "AND array_length(tags, 1) = 2")
    E("typ-24", "SELECT wait, tags FROM orders WHERE qty = 16 ORDER BY wait DESC NULLS FIRST, tags NULLS FIRST, "
                "order_id")
    E("typ-25", "SELECT justify_interval(sum(wait)), date_trunc('day', avg(wait)) FROM orders GROUP BY paid "
                "ORDER BY paid NULLS FIRST")
    E("typ-26", "SELECT attrs -> 'nested', count(*) FROM orders GROUP BY 1 ORDER BY 1 NULLS LAST")
    E("typ-27", "SELECT prefs ->> 'lang' AS lang, count(*) FROM customers GROUP BY 1 ORDER BY 1 NULLS FIRST")

    E("typ-28", "SELECT DISTINCT ON (tier) tier, prefs, customer_id FROM customers ORDER BY tier, customer_id")
    E("typ-29", "SELECT order_id, attrs #> '{nested}', attrs -> 'tags' -> 0, tags[1], tags[2:3] FROM orders "
                "WHERE qty = 18 ORDER BY attrs -> 'tags' -> 0 NULLS FIRST, order_id")
    E("typ-30", "SELECT jsonb_agg(jsonb_build_object('w', wait, 'p', price, 'i', ip, 't', tags) ORDER BY order_id) "
                "FROM orders WHERE qty = -3")

    # --- typmods and other column types (varchar(n), char(n), smallint, timestamp(3), numeric(p,s))
    E("typm-01", "SELECT DISTINCT ON (code) code, local_at, id FROM events ORDER BY code, local_at DESC NULLS LAST, id")
    E("typm-02", "SELECT email, tier, balance FROM customers UNION SELECT email, tier, balance FROM customers "
                 "WHERE tier = 1 ORDER BY 1, 2, 3")
    E("typm-03", "SELECT code, count(DISTINCT kind), max(local_at), min(amount) FROM events GROUP BY code "
                 "ORDER BY code NULLS FIRST")
    E("typm-04", "SELECT c.email, o.amount, c.balance, e.code, e.local_at FROM orders o JOIN customers c "
                 "ON c.customer_id = o.customer_id JOIN events e ON e.order_id = o.order_id WHERE e.n = 9 "
                 "ORDER BY e.id")
    S("typm-05", "SELECT tier, sum(tier), avg(tier), stddev(tier), count(DISTINCT email) FROM customers "
                 "GROUP BY ROLLUP (tier)")
    E("typm-06", "SELECT code || '|' AS c, length(code), code = 'ab' AS is_ab, count(DISTINCT n) FROM events "
                 "GROUP BY code ORDER BY code NULLS FIRST")
    E("typm-07", "SELECT local_at::date AS d, count(DISTINCT code) FROM events GROUP BY 1 ORDER BY 1 LIMIT 10")
    E("typm-08", "SELECT email FROM customers WHERE email LIKE 'u%' INTERSECT SELECT email FROM customers "
                 "WHERE tier IS NOT NULL ORDER BY 1")
    E("typm-09", "SELECT amount, created_at FROM orders WHERE qty = 1 UNION SELECT amount, created_at FROM orders "
                 "WHERE qty = 2 ORDER BY 2, 1 NULLS FIRST")
    E("typm-10", "SELECT o.order_id, o.amount, c.balance, c.tier FROM orders o JOIN customers c "
                 "ON c.customer_id = o.customer_id WHERE o.qty = 0 ORDER BY 1")
    E("typm-11", "SELECT order_id, amount, weight, lag(amount) OVER (ORDER BY order_id) FROM orders WHERE qty = 10 "
                 "ORDER BY order_id")
    E("typm-12", "SELECT e.code, e.local_at, row_number() OVER (PARTITION BY e.code ORDER BY e.local_at NULLS LAST, "
                 "e.id) FROM events e WHERE e.flag ORDER BY e.id")

    # --- empty inputs: NULL aggregates, no rows
    E("emp-01", "SELECT string_agg(status, ',' ORDER BY status), array_agg(order_id ORDER BY order_id), "
                "count(DISTINCT status), jsonb_agg(attrs ORDER BY order_id) FROM orders WHERE qty > 100")
    E("emp-02", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), mode() WITHIN GROUP (ORDER BY status), "
                "stddev(qty) FROM orders WHERE qty > 100")
    E("emp-03", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders WHERE qty > 100")
    E("emp-04", "SELECT status, count(DISTINCT customer_id) FROM orders WHERE qty > 100 GROUP BY status")
    E("emp-05", "SELECT status FROM orders WHERE qty > 100 UNION SELECT kind FROM events WHERE n > 100")
    E("emp-06", "SELECT count(*), count(DISTINCT status) FROM orders WHERE qty > 100 GROUP BY ROLLUP (status)")
    E("emp-07", "SELECT stddev(qty), variance(amount) FROM orders WHERE order_id = 1")

    # --- a subset of the shards (range keys, key lists), and other shapes
    E("rng-01", "SELECT count(DISTINCT kind), string_agg(DISTINCT code, ',') FROM events "
                "WHERE id BETWEEN 100 AND 2000")
    E("rng-02", "SELECT id, row_number() OVER (ORDER BY at, id) FROM events WHERE id < 1500 ORDER BY id")
    E("rng-03", "SELECT kind, percentile_disc(0.5) WITHIN GROUP (ORDER BY n) FROM events WHERE id >= 0 "
                "GROUP BY kind ORDER BY kind NULLS FIRST")
    E("rng-04", "SELECT order_id, rank() OVER (ORDER BY amount NULLS LAST, order_id) FROM orders "
                "WHERE order_id = ANY($1) ORDER BY 2", [[o[0] for o in ORDERS[100:112]]])
    E("rng-05", "SELECT count(DISTINCT kind), string_agg(kind, ',' ORDER BY id) FROM events WHERE id < 0")
    E("rng-06", "SELECT e.id, c.name FROM events e JOIN orders o ON o.order_id = e.order_id JOIN customers c "
                "ON c.customer_id = o.customer_id WHERE e.id BETWEEN 1400 AND 1600 ORDER BY e.id")
    E("misc-01", 'SELECT "o"."status", count(DISTINCT "o"."customer_id") FROM "orders" AS "o" GROUP BY 1 '
                 'ORDER BY 1 NULLS FIRST')
    E("misc-02", "SELECT count(DISTINCT status) FROM public.orders")
    E("misc-03", "SELECT v.x, count(DISTINCT o.status) FROM (VALUES (1), (2), (300)) v(x) LEFT JOIN orders o "
                 "ON o.qty = v.x GROUP BY v.x ORDER BY 1")
    E("misc-04", "SELECT g, count(o.order_id) FROM generate_series(-3, 3) g LEFT JOIN orders o ON o.qty = g "
                 "GROUP BY g ORDER BY g")
    E("misc-05", "SELECT name, rank() OVER (ORDER BY name COLLATE \"C\") FROM customers ORDER BY name COLLATE \"C\" "
                 "LIMIT 20")
    E("misc-06", "SELECT status FROM orders GROUP BY 1 ORDER BY count(DISTINCT customer_id) DESC, 1 NULLS FIRST")
    E("misc-07", "SELECT sum(CASE WHEN paid THEN amount ELSE 0 END) - sum(amount) FILTER (WHERE paid) AS zero, "
                 "count(DISTINCT CASE WHEN qty > 10 THEN status END) FROM orders")
    E("misc-08", "SELECT order_id, sum(qty) OVER (ORDER BY order_id ROWS BETWEEN $1 PRECEDING AND CURRENT ROW) "
                 "FROM orders ORDER BY order_id LIMIT 50", [3])
    E("misc-09", "SELECT $1::text || string_agg(DISTINCT country, '') AS s FROM orders WHERE qty = $2", ["pre:", 5])
    E("misc-10", "SELECT (SELECT count(DISTINCT status) FROM orders) AS a, (SELECT count(DISTINCT kind) FROM events) "
                 "AS b, (SELECT count(*) FROM countries) AS c")
    E("misc-11", "SELECT o.status, count(*) FROM orders o WHERE o.customer_id IN (SELECT customer_id FROM customers "
                 "WHERE city = 'Berlin') AND o.order_id NOT IN (SELECT order_id FROM events WHERE order_id IS NOT "
                 "NULL) GROUP BY o.status ORDER BY 2 DESC, 1 NULLS FIRST")
    E("misc-12", "SELECT x.status, x.n, y.k FROM (SELECT status, count(*) AS n FROM orders GROUP BY status) x "
                 "FULL JOIN (SELECT kind, count(*) AS k FROM events GROUP BY kind) y ON y.kind = x.status "
                 "ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3 NULLS FIRST")
    E("misc-13", "SELECT a.order_id, b.order_id, count(*) OVER () FROM orders a JOIN orders b "
                 "ON a.customer_id = b.customer_id AND a.order_id <> b.order_id WHERE a.qty = 20 AND b.qty = 20 "
                 "ORDER BY 1, 2")
    E("misc-14", 'SELECT status AS "Weird ""Name""", count(DISTINCT qty) AS "ÄÖ ü", 1 AS "select" FROM orders '
                 'GROUP BY 1 ORDER BY 1 NULLS FIRST')
    E("misc-15", "SELECT json_agg(row_to_json(o) ORDER BY o.order_id) FROM orders o WHERE qty = 2")
    E("misc-16", "SELECT count(DISTINCT o), count(DISTINCT (o.status, o.paid)) FROM orders o")
    E("misc-17", "SELECT *, rank() OVER (ORDER BY amount DESC NULLS LAST, order_id) FROM orders WHERE qty = 7 "
                 "ORDER BY order_id")
    E("misc-18", "SELECT count(DISTINCT substring(note from '[a-z]+')), string_agg(DISTINCT regexp_replace(status, "
                 "'[aeiou]', '_', 'g'), ',') FROM orders")
    E("misc-19", "SELECT t, count(DISTINCT o.order_id) FROM orders o, unnest(o.tags) t GROUP BY t "
                 "ORDER BY t NULLS FIRST")
    E("misc-20", "SELECT count(*), count(DISTINCT kind) FROM orders NATURAL JOIN (SELECT order_id, kind FROM events) "
                 "e")
    E("misc-21", "SELECT c.*, dense_rank() OVER (ORDER BY c.balance NULLS FIRST) FROM customers c WHERE c.tier = 3 "
                 "ORDER BY c.customer_id")
    E("misc-22", "SELECT to_jsonb(c) - 'prefs' AS j FROM customers c WHERE c.customer_id IN (SELECT customer_id "
                 "FROM orders WHERE qty = 20) ORDER BY c.customer_id")
    E("par-19", "SELECT $1 AS p, count(DISTINCT status) FROM orders", ["hello"])
    E("par-20", "SELECT status, count(DISTINCT customer_id) FROM orders WHERE qty > $1 GROUP BY status "
                "HAVING count(DISTINCT customer_id) > $2 ORDER BY 2 DESC, 1 NULLS FIRST LIMIT $3", [2, 100, 5])

    # --- big answers: a 2.4 MB value, 60000 rows
    E("big-01", "SELECT length(s), md5(s) FROM (SELECT string_agg(repeat(coalesce(status, '-'), 100), ',' "
                "ORDER BY order_id) AS s FROM orders) x")
    E("big-02", "SELECT string_agg(repeat(coalesce(status, '-'), 100), ',' ORDER BY order_id) FROM orders")
    E("big-03", "SELECT o.order_id, c.code, row_number() OVER (ORDER BY o.order_id, c.code) FROM orders o "
                "CROSS JOIN countries c ORDER BY 3")

    # --- statements plain PostgreSQL rejects: same SQLSTATE
    ERR("err-01", "SELECT count(DISTINCT status) / 0 FROM orders")
    ERR("err-02", "SELECT percentile_cont(1.5) WITHIN GROUP (ORDER BY amount) FROM orders")
    ERR("err-03", "SELECT (SELECT order_id FROM orders)")
    ERR("err-04", "SELECT string_agg(status, ',' ORDER BY status)::int FROM orders")
    ERR("err-05", "SELECT status FROM orders UNION SELECT qty FROM orders")
    ERR("err-06", "SELECT nope FROM orders UNION SELECT status FROM orders")
    ERR("err-07", "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders LIMIT -1")
    ERR("err-08", "SELECT count(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
                  "WHERE c.name::int > 0")
    ERR("err-09", "SELECT sum(wait)::int FROM orders")
    ERR("err-10", "SELECT array_agg(DISTINCT qty ORDER BY order_id) FROM orders")
    ERR("err-11", "SELECT count(DISTINCT status) FROM orders WHERE qty > $1", ["abc"])
    ERR("err-12", "SELECT mode() WITHIN GROUP (ORDER BY prefs) FROM customers")
    ERR("err-13", "SELECT 1 / (count(*) FILTER (WHERE qty > 100))::int FROM orders")
    ERR("err-14", "WITH x AS (SELECT order_id FROM orders) SELECT order_id FROM x "
                  "WHERE order_id = (SELECT order_id FROM x)")
    ERR("err-15", "SELECT status, count(*) FROM orders GROUP BY ROLLUP (status) HAVING order_id > 0")
    ERR("err-16", "SELECT order_id, rank() OVER (ORDER BY order_id) FROM orders WHERE rank() OVER () > 1")
    ERR("err-17", "SELECT order_id FROM orders ORDER BY order_id OFFSET $1", [-3])
    ERR("err-18", "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY attrs -> 'k') FROM orders GROUP BY paid "
                  "HAVING (array_agg(order_id ORDER BY order_id))[1] / 0 > 0")
    ERR("err-19", "SELECT (attrs ->> 's')::int FROM orders ORDER BY wait, order_id")
    ERR("err-21", "SELECT count(DISTINCT status) FROM orders FOR UPDATE")
    ERR("err-22", "SELECT DISTINCT status FROM orders ORDER BY order_id")
    ERR("err-23", "SELECT order_id FROM orders UNION SELECT id FROM events ORDER BY order_id + 1")
    ERR("err-24", "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY status) FROM orders")
    ERR("err-25", "SELECT count(*) FROM orders o JOIN customers c ON c.customer_id = o.nope")
    ERR("err-26", "SELECT order_id, ntile(qty - qty) OVER (ORDER BY order_id) FROM orders WHERE qty = 5")
    ERR("err-20", "SELECT jsonb_agg(attrs ORDER BY order_id) #>> '{0}' || repeat('x', -1)::int FROM orders")


# ------------------------------------------------------------------ running

def run_statement(sid, sql, params, order, plain=None, proxy=None):
    plain, proxy = plain or PLAIN_T, proxy or PROXY_T
    for mode in MODES:
        exp = run(plain, mode, sql, params)
        got = run(proxy, mode, sql, params)
        compare(sid, mode, sql, params, exp, got, order)


def last_scatter(t):
    r = run_simple(t, "SHOW splitpoint.last_scatter")
    if r.error:
        raise AssertionError(f"SHOW splitpoint.last_scatter: {r.error}")
    return r


def failed_alone(sid):
    """The statement had a mismatch in statements_match_plain_postgresql."""
    return any(m[0] == sid for m in MISMATCHES)


def stmt(sid):
    return next(s for s in STMTS if s[0] == sid)


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def needs_proxy(fn):
    """Skipped under CB_SELFCHECK (no proxy there)."""
    def wrapped():
        if SELFCHECK:
            print(f"SKIP {fn.__name__}: CB_SELFCHECK")
            return
        fn()
    wrapped.__name__ = fn.__name__
    return wrapped


@test
def statements_match_plain_postgresql():
    n0 = len(MISMATCHES)
    t0 = time.monotonic()
    slow = []
    for sid, sql, params, order in STMTS:
        t1 = time.monotonic()
        run_statement(sid, sql, params, order)
        slow.append((time.monotonic() - t1, sid))
    kinds = {}
    for sid, *_ in STMTS:
        kinds[sid.split("-")[0]] = kinds.get(sid.split("-")[0], 0) + 1
    bad = sorted({sid for sid, _ in MISMATCHES[n0:]})
    print(f"     {len(STMTS)} statements x {len(MODES)} protocols compared in {time.monotonic() - t0:.1f}s "
          f"({', '.join(f'{k} {n}' for k, n in kinds.items())}); {len(bad)} statements with mismatches"
          + (f": {' '.join(bad)}" if bad else ""))
    print("     slowest: " + ", ".join(f"{sid} {s:.2f}s" for s, sid in sorted(slow, reverse=True)[:5]))


def prepared_messages(t, sql, param_sets, binary):
    """Parse(named) + Describe(statement), then Bind/Describe(portal)/Execute per parameter
    set, then Close. Returns (parameter OIDs, columns of Describe, [Res per set])."""
    w = t.wire
    w.send([pgwire.parse_msg(sql, "cb_ps"), pgwire.describe_msg("S", "cb_ps"), pgwire.sync_msg()])
    r = w.query_collect()
    if r.error:
        return ("error", r.error.get("C")), None, []
    pdesc = [pgwire.decode_parameter_description(b) for ty, b in r.messages if ty == "t"]
    rdesc = [[col_tuple(c) for c in pgwire.decode_row_description(b)] for ty, b in r.messages if ty == "T"]
    outs = []
    for ps in param_sets:
        w.send([pgwire.bind_msg([wire_param(p) for p in ps], "", "cb_ps", (), [1] if binary else []),
                pgwire.describe_msg("P"), pgwire.execute_msg(), pgwire.sync_msg()])
        outs.append(res_of(w.query_collect()))
    w.send([pgwire.close_msg("S", "cb_ps"), pgwire.sync_msg()])
    w.query_collect()
    return pdesc, rdesc, outs


PREPARED = [
    ("ps-01", "SELECT status, count(DISTINCT customer_id), string_agg(country, ',' ORDER BY order_id) FROM orders "
              "WHERE qty = $1 GROUP BY status ORDER BY status NULLS FIRST", [[3], [7], [-3], [None], [1000]]),
    ("ps-02", "SELECT order_id, rank() OVER (ORDER BY amount DESC NULLS LAST, order_id) FROM orders "
              "WHERE customer_id = $1 ORDER BY 2 LIMIT $2", [[5, 3], [6, 10], [999, 2], [7, None]]),
    ("ps-03", "SELECT count(*) AS count_1 FROM (SELECT order_id FROM orders WHERE created_at < $1) AS anon_1",
     [["2024-01-10 00:00:00+00"], ["2024-02-10 12:00:00+00"], ["1999-01-01"]]),
    ("ps-04", "SELECT c.name, o.order_id FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
              "WHERE c.tier = $1 AND o.qty = $2 ORDER BY o.order_id", [[1, 1], [2, 2], [5, 20]]),
]


@test
def prepared_combine_statements():
    """A named prepared combine statement: Describe(statement) gives the parameter types
    and columns plain PostgreSQL gives; executed with several parameter sets; and a
    portal fetched in pieces (Execute with max_rows, PortalSuspended in between)."""
    for sid, sql, sets in PREPARED:
        for mode in ("text", "binary"):
            binary = mode == "binary"
            ep, er, eo = prepared_messages(PLAIN_T, sql, sets, binary)
            gp, gr, go = prepared_messages(PROXY_T, sql, sets, binary)
            check(ep == gp, sid, mode, lambda: f"{sql}\n    ParameterDescription: expected {ep}, got {gp}")
            check(er == gr, sid, mode, lambda: f"{sql}\n    Describe(statement) columns: expected {er}\n"
                                               f"    got {gr}")
            for i, (ps, a, b) in enumerate(zip(sets, eo, go)):
                compare(f"{sid}.{i}", mode, sql, ps, a, b, "exact")
            check(len(eo) == len(go), sid, mode, lambda: f"{sql}: {len(eo)} executions expected, got {len(go)}")
    # A combine statement and a merged one (an ORDER BY over the shards), fetched in
    # pieces: 7 rows (PortalSuspended), 7 more, the rest (CommandComplete with the
    # rows of that Execute), once more (none); then, named and in a block, over several
    # Syncs (Describe of the portal after its first Execute), the portal gone with the
    # block (34000), and gone at the Sync of its implicit transaction.
    combine = ("SELECT order_id, dense_rank() OVER (ORDER BY status NULLS FIRST), wait FROM orders WHERE qty = 6 "
               "ORDER BY order_id")
    merge = "SELECT order_id, status FROM orders WHERE qty = 7 ORDER BY order_id"
    S = [pgwire.sync_msg()]

    def until_ready(t):
        msgs = []
        while not msgs or msgs[-1][0] != "Z":
            msgs.append(t.wire.recv(60))
        return msgs

    def pieces(t, binary, sql):
        fmt = [1] if binary else []
        t.wire.send([pgwire.parse_msg(sql), pgwire.bind_msg((), "", "", (), fmt),
                     pgwire.describe_msg("P"), pgwire.execute_msg("", 7), pgwire.execute_msg("", 7),
                     pgwire.execute_msg("", 0), pgwire.execute_msg("", 3)] + S)
        msgs = until_ready(t)
        t.wire.send([pgwire.query_msg("BEGIN")])
        msgs += until_ready(t)
        t.wire.send([pgwire.parse_msg(sql, "pc"), pgwire.bind_msg((), "cur", "pc", (), fmt),
                     pgwire.execute_msg("cur", 4)] + S)
        msgs += until_ready(t)
        t.wire.send([pgwire.describe_msg("P", "cur"), pgwire.execute_msg("cur", 5)] + S)
        msgs += until_ready(t)
        t.wire.send([pgwire.query_msg("COMMIT")])
        msgs += until_ready(t)
        t.wire.send([pgwire.execute_msg("cur", 5)] + S)
        msgs += until_ready(t)
        t.wire.send([pgwire.bind_msg((), "cur2", "pc", (), fmt), pgwire.execute_msg("cur2", 2)] + S)
        msgs += until_ready(t)
        t.wire.send([pgwire.execute_msg("cur2", 2)] + S)
        msgs += until_ready(t)
        t.wire.send([pgwire.close_msg("S", "pc")] + S)
        msgs += until_ready(t)
        out = []
        for ty, body in msgs:
            if ty in ("S", "N"):
                continue
            if ty == "T":
                out.append((ty, [col_tuple(c) for c in pgwire.decode_row_description(body)]))
            elif ty == "E":
                out.append((ty, pgwire.decode_fields(body).get("C")))
            else:
                out.append((ty, body))
        return out
    for mode in ("text", "binary"):
        for sid, sql in (("ps-portal", combine), ("ps-portal-merge", merge)):
            exp, got = pieces(PLAIN_T, mode == "binary", sql), pieces(PROXY_T, mode == "binary", sql)
            check(exp == got, sid, mode, lambda: f"{sql} (Execute max_rows 7, 7, 0, 3; then named, in a block)\n"
                                                 f"    {first_diff(exp, got)}")


@test
def mixed_formats_and_binary_parameters():
    """Bind with a result format per column (text, binary, text) and with parameters in
    binary (int8, text, numeric-as-text with its type given in Parse): the combine
    answers in exactly the formats asked, as plain PostgreSQL."""
    import struct
    cases = [
        ("fmt-01", "SELECT status, count(DISTINCT customer_id), string_agg(country, ',' ORDER BY order_id) FROM orders "
                   "WHERE qty = $1 GROUP BY status ORDER BY status NULLS FIRST", [20], [struct.pack("!q", 4)], [1],
         [0, 1, 0]),
        ("fmt-02", "SELECT order_id, rank() OVER (ORDER BY amount DESC NULLS LAST, order_id), wait, tags FROM orders "
                   "WHERE status = $1 AND amount > $2 ORDER BY order_id", [25, 1700], ["日本".encode(), b"5000"],
         [1, 0], [1, 0, 1, 1]),
        ("fmt-03", "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY amount), jsonb_agg(attrs ORDER BY order_id) "
                   "FROM orders WHERE customer_id = $1", [23], [struct.pack("!i", 12)], [1], [1]),
    ]

    def one(t, sql, oids, params, pfmt, rfmt):
        t.wire.send([pgwire.parse_msg(sql, "", oids), pgwire.bind_msg(params, "", "", pfmt, rfmt),
                     pgwire.describe_msg("P"), pgwire.execute_msg(), pgwire.sync_msg()])
        return res_of(t.wire.query_collect())
    for sid, sql, oids, params, pfmt, rfmt in cases:
        exp, got = one(PLAIN_T, sql, oids, params, pfmt, rfmt), one(PROXY_T, sql, oids, params, pfmt, rfmt)
        compare(sid, "mixed", sql, params, exp, got, "exact")


def sleeping_on_combine_db():
    c = direct(*SHARDS[0])
    cur = c.cursor()
    cur.execute("SELECT pid, state, left(query, 80) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(5)%' "
                "AND pid <> pg_backend_pid() AND state = 'active'")
    busy = cur.fetchall()
    c.close()
    return busy


@test
@needs_proxy
def cancel_and_disconnect_during_combine():
    """A CancelRequest while the combine query runs (it sleeps 5s): 57014 as from
    PostgreSQL, soon, the combine database no longer runs it, the session works. A client
    that disconnects while its combine query runs: the combine database stops running it."""
    sql = "SELECT count(DISTINCT status), pg_sleep(5) FROM orders"
    for proto in ("simple", "extended"):
        w = PROXY_T.wire
        t0 = time.monotonic()
        w.send(pgwire.query_msg(sql) if proto == "simple" else
               [pgwire.parse_msg(sql), pgwire.bind_msg(), pgwire.describe_msg("P"), pgwire.execute_msg(),
                pgwire.sync_msg()])
        time.sleep(0.7)
        w.cancel()
        r = w.query_collect(timeout=20)
        took = time.monotonic() - t0
        code = r.error.get("C") if r.error else None
        check(code == "57014" and took < 3, "cancel", proto,
              lambda: f"{sql}\n    CancelRequest after 0.7s: expected 57014 soon, got {code} {r.error} after "
                      f"{took:.2f}s")
        time.sleep(0.3)
        busy = sleeping_on_combine_db()
        check(not busy, "cancel-combine-db", proto, lambda: f"still running on the combine database: {busy}")
        after = "SELECT count(DISTINCT status), count(*) FROM orders WHERE qty = 3"
        compare("cancel-after", proto, after, (), run(PLAIN_T, "text", after), run(PROXY_T, "text", after), "exact")
    gone = pgwire.connect(HOST, PROXY.port, "app", "app", password="secret", timeout=20)
    gone.send(pgwire.query_msg(sql))
    time.sleep(0.7)
    gone.sock.close()
    time.sleep(1.3)
    busy = sleeping_on_combine_db()
    check(not busy, "disconnect-combine-db", "simple",
          lambda: f"a client gone 1.3s ago: its combine query still runs on the combine database: {busy}")
    check(PROXY.alive(), "disconnect", "simple", lambda: "splitpoint died")


@test
def several_statements_in_one_query():
    """One simple Query message with several combine statements (and a plain one):
    every statement's answer as plain PostgreSQL's."""
    sql = ("SELECT count(DISTINCT status) FROM orders; "
           "SELECT string_agg(name, ',' ORDER BY name) FROM customers WHERE tier = 4; "
           "SELECT 1 AS one; "
           "SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders WHERE qty = 17 ORDER BY 1")

    def answers(t):
        r = t.wire.query(sql)
        return ([([col_tuple(c) for c in s.columns], s.rows, s.tag) for s in r.results],
                r.error.get("C") if r.error else None)
    exp, got = answers(PLAIN_T), answers(PROXY_T)
    check(exp == got, "multi-query", "simple",
          lambda: f"{sql}\n    expected {short(exp, 600)}\n    got {short(got, 600)}")


SETTINGS = [("TimeZone", "Asia/Tokyo"), ("DateStyle", "SQL, DMY"), ("IntervalStyle", "iso_8601"),
            ("extra_float_digits", "0")]
SETTING_STMTS = [
    ("agg-03", "exact"), ("agg-20", "exact"), ("osa-02", "exact"), ("win-23", "exact"), ("typ-12", "exact"),
    ("osa-07", "exact"), ("agg-32", "exact"),
    ("tz-01", "SELECT jsonb_agg(created_at ORDER BY order_id), json_agg(ship_date ORDER BY order_id), "
               "string_agg(wait::text, ',' ORDER BY order_id) FROM orders WHERE qty = 4"),
    ("tz-02", "SELECT created_at::text, percent_rank() OVER (ORDER BY created_at, order_id) FROM orders "
               "WHERE qty = 5 ORDER BY order_id"),
]


def set_both(t, name, value):
    """SET on both connections of a target (psycopg2 and pgwire are separate sessions)."""
    sql = f"SET {name} = '{value}'" if value is not None else f"RESET {name}"
    a = run_simple(t, sql)
    b = res_of(t.wire.query(sql))
    return a.error or b.error


@test
def session_settings_reach_the_combine():
    """SET TimeZone / DateStyle / IntervalStyle / extra_float_digits in the client's
    session: combined answers are formatted as plain PostgreSQL formats them with the
    same settings (the combine query runs with the client's settings)."""
    for name, value in SETTINGS:
        for t in (PLAIN_T, PROXY_T):
            err = set_both(t, name, value)
            check(err is None, "settings", t.name, lambda: f"SET {name} = '{value}': {err}")
    try:
        for sid, what in SETTING_STMTS:
            if failed_alone(sid):
                print(f"     {sid} not run with settings: it failed without them already")
                continue
            if what == "exact":
                _, sql, params, order = stmt(sid)
                run_statement(f"setting-{sid}", sql, params, order)
            else:
                run_statement(f"setting-{sid}", what, (), "exact")
    finally:
        for name, _ in SETTINGS:
            for t in (PLAIN_T, PROXY_T):
                set_both(t, name, None)


@test
def hints_with_combine():
    """splitpoint hints (deadline, partial results) on combine statements change nothing
    in the answer (all shards up)."""
    for sid in ("agg-05", "win-08", "join-02", "gs-01"):
        _, sql, params, order = stmt(sid)
        run_statement(f"hint-deadline-{sid}", "/* splitpoint: deadline=30s */ " + sql, params, order)
        run_statement(f"hint-partial-{sid}", sql + " /* splitpoint: partial=allow */", params, order)


@test
def concurrent_combines():
    """Eight sessions at once, each running combine statements (text results): every
    answer is plain PostgreSQL's (no mixing of one statement's temporary tables with
    another's)."""
    import threading
    # statements that failed alone are reported already: not again here
    pick = [s for s in STMTS if s[3] == "exact" and s[0].split("-")[0] in
            ("agg", "win", "set", "join", "osa", "gs", "typ", "cte") and not failed_alone(s[0])]
    r = random.Random(SEED + 5)
    work = [r.sample(pick, 12) for _ in range(8)]
    want = {sid: run(PLAIN_T, "text", sql, params) for w in work for sid, sql, params, _ in w}
    results = [[] for _ in work]
    errors = []

    def worker(i):
        try:
            t = Target(f"conc{i}", PROXY_T.port, PROXY_T.db)
            try:
                for sid, sql, params, _ in work[i]:
                    results[i].append((sid, sql, params, run(t, "text", sql, params)))
            finally:
                t.close()
        except Exception as e:  # noqa: BLE001
            errors.append(f"session {i}: {e!r}")
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    check(not errors, "concurrent", "text", lambda: "; ".join(errors))
    for i, res in enumerate(results):
        for sid, sql, params, got in res:
            compare(f"conc{i}-{sid}", "text", sql, params, want[sid], got, "exact")


NEW_ORDER_IDS = list(range(900001, 900009))


def transaction_steps():
    cols = ("order_id", "customer_id", "cust_name", "amount", "qty", "status", "note", "created_at", "wait", "attrs",
            "tags", "price", "ip", "country")
    rows = [(oid, 5001 if i % 2 else 7, "tx-kunde", f"{99999 - i}.5{i}", 3, "tx-status-" + "äöü"[i % 3], f"t{i}",
             f"2024-03-0{i + 1} 10:00:00+00", f"{i} days 01:00:00", json.dumps({"k": i, "tx": True}),
             "{" + str(i) + ",7}", f"{i}.25", f"192.168.0.{i}", "CA") for i, oid in enumerate(NEW_ORDER_IDS)]
    q_a = ("SELECT count(DISTINCT status), count(*), string_agg(status, ',' ORDER BY order_id) "
           "FILTER (WHERE order_id > 900000) FROM orders")
    q_b = ("SELECT order_id, row_number() OVER (ORDER BY amount DESC NULLS LAST, order_id), wait FROM orders "
           "ORDER BY 2 LIMIT 10")
    q_c = ("SELECT o.order_id, c.name, c.city FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
           "WHERE o.order_id > 900000 ORDER BY 1")
    q_d = "SELECT status FROM orders WHERE qty = 3 EXCEPT SELECT kind FROM events ORDER BY 1 NULLS FIRST"
    q_e = "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY order_id), max(wait) FROM orders WHERE price > '5.00'"
    return [
        ("BEGIN", ()),
        (insert_sql("orders", cols, rows), ()),
        ("INSERT INTO customers (customer_id, name, city, tier) VALUES (5001, 'tx-kunde', 'Köln', 1)", ()),
        (q_a, ()), (q_b, ()), (q_c, ()), (q_d, ()), (q_e, ()),
        ("SELECT count(*) AS count_1 FROM (SELECT order_id FROM orders WHERE order_id >= $1) AS anon_1", [900001]),
        ("ROLLBACK", ()),
        (q_a, ()), (q_c, ()), (q_e, ()),
    ]


def run_write(t, mode, sql):
    """A write in a transaction test: through the simple protocol on the connection of
    `mode` (psycopg2 for simple, the pgwire connection otherwise), so the transaction
    the extended-protocol statements run in is the same one."""
    return run_simple(t, sql) if mode == "simple" else res_of(t.wire.query(sql))


@test
def combine_inside_a_transaction():
    """BEGIN; INSERTs into orders (several shards) and customers through the proxy;
    combine statements (in each protocol) see the uncommitted rows; ROLLBACK; they are
    gone."""
    for mode in MODES:
        for i, (sql, params) in enumerate(transaction_steps()):
            how = run_write if sql.startswith("INSERT") else (lambda t, m, q: run(t, m, q, params))
            exp = how(PLAIN_T, mode, sql)
            got = how(PROXY_T, mode, sql)
            compare(f"tx-{i:02d}", mode, sql, params, exp, got, "exact")
        for t in (PLAIN_T, PROXY_T):   # a failed step must not leave the next mode inside a transaction
            run(t, mode, "ROLLBACK")


@test
def extended_multi_shard_insert_in_a_transaction():
    """The same transaction with the INSERTs sent through the extended protocol too
    (SPEC §5: with cross_shard_writes: two_phase a transaction may write to several
    shards, whatever the protocol)."""
    steps = transaction_steps()
    for mode in ("text", "binary"):
        for i, (sql, params) in enumerate(steps[:3] + [steps[3], ("ROLLBACK", ())]):
            exp = run(PLAIN_T, mode, sql, params)
            got = run(PROXY_T, mode, sql, params)
            compare(f"txw-{i:02d}", mode, sql, params, exp, got, "exact")
        for t in (PLAIN_T, PROXY_T):
            run(t, mode, "ROLLBACK")


@test
def repeatable_read_snapshot():
    """BEGIN ISOLATION LEVEL REPEATABLE READ; a combine statement; another session inserts
    rows on several shards and commits; the combine statement again sees the first
    snapshot; COMMIT; now it sees the rows (as plain PostgreSQL)."""
    q = ("SELECT count(DISTINCT status), count(*), string_agg(order_id::text, ',' ORDER BY order_id) "
         "FILTER (WHERE order_id BETWEEN 910000 AND 910100) FROM orders")
    ins = insert_sql("orders", ("order_id", "status", "created_at"),
                     [(910001 + i, f"rr-{i}", "2024-05-01 00:00:00+00") for i in range(6)])
    others = {PLAIN_T.name: sptest.connect(PLAIN_T.port, PLAIN_T.db),
              PROXY_T.name: sptest.connect(PROXY_T.port, PROXY_T.db)}
    try:
        for mode in MODES:
            steps = [("BEGIN ISOLATION LEVEL REPEATABLE READ", None), (q, None), (None, ins), (q, None),
                     ("COMMIT", None), (q, None), (None, "DELETE FROM orders WHERE order_id BETWEEN 910000 AND 910100"),
                     (q, None)]
            for i, (sql, other) in enumerate(steps):
                if other is not None:
                    for t in (PLAIN_T, PROXY_T):
                        cur = others[t.name].cursor()
                        try:
                            cur.execute(other)
                        except psycopg2.Error as e:
                            check(False, f"rr-{i:02d}", mode, lambda e=e: f"{t.name}: {other[:80]}: {e}")
                        cur.close()
                    continue
                exp, got = run(PLAIN_T, mode, sql), run(PROXY_T, mode, sql)
                compare(f"rr-{i:02d}", mode, sql, (), exp, got, "exact")
            for t in (PLAIN_T, PROXY_T):
                run(t, mode, "ROLLBACK")
    finally:
        for c in others.values():
            c.close()


@test
def combine_error_inside_a_transaction():
    """A combine statement that fails inside a transaction aborts it as in PostgreSQL:
    the next statement gives 25P02, ROLLBACK ends it, then the session works."""
    steps = [("BEGIN", "exact"),
             ("SELECT count(DISTINCT status) FROM orders WHERE qty = 2", "exact"),
             ("SELECT count(DISTINCT status) / 0 FROM orders", "error"),
             ("SELECT count(DISTINCT status) FROM orders", "error"),
             ("ROLLBACK", "exact"),
             ("SELECT count(DISTINCT status), string_agg(DISTINCT country, ',') FROM orders", "exact"),
             ("BEGIN", "exact"),
             ("SELECT nope, count(DISTINCT status) FROM orders", "error"),
             ("SELECT 1", "error"),
             ("ROLLBACK", "exact"),
             ("SELECT 1 AS one", "exact")]
    for mode in MODES:
        for i, (sql, order) in enumerate(steps):
            exp = run(PLAIN_T, mode, sql)
            got = run(PROXY_T, mode, sql)
            compare(f"txerr-{i:02d}", mode, sql, (), exp, got, order)
        for t in (PLAIN_T, PROXY_T):
            run(t, mode, "ROLLBACK")


@test
@needs_proxy
def last_scatter_after_combine():
    """SHOW splitpoint.last_scatter after a combine statement: one row per shard, every
    one ok, and the combine step as one more row (SPEC §4.1)."""
    for sid in ("agg-05", "win-01", "join-02", "set-01"):
        _, sql, params, _ = stmt(sid)
        r = run_simple(PROXY_T, sql, params)
        if r.error:
            check(False, sid, "last_scatter", lambda: f"{sql}: {r.error}")
            continue
        ls = last_scatter(PROXY_T)
        names = [row[0] for row in ls.rows]
        check(len(ls.cols) >= 5 and [c[0] for c in ls.cols[:5]] == ["shard", "status", "rows", "elapsed_ms", "error"],
              sid, "last_scatter", lambda: f"SHOW splitpoint.last_scatter columns: {ls.cols}")
        check(all(s in names for s in ("s0", "s1", "s2")), sid, "last_scatter",
              lambda: f"{sql}\n    last_scatter rows {ls.rows}: expected a row for each of s0, s1, s2")
        check(ls.rows and all(row[1] == "ok" for row in ls.rows), sid, "last_scatter",
              lambda: f"{sql}\n    last_scatter statuses not all ok: {ls.rows}")
        check(len(ls.rows) == 4, sid, "last_scatter-combine-row",
              lambda: f"{sql}\n    last_scatter: expected the 3 shards and one combine row, got {ls.rows}")
        print(f"     {sid}: last_scatter {ls.rows}")


@test
@needs_proxy
def deadline_covers_the_combine_phase():
    """A combine query that runs longer than the statement's deadline (a hint of 500ms;
    the combine query sleeps 3s): the statement fails with SPS01 soon after the
    deadline, the combine database is not left running it, and the session works."""
    sql = "/* splitpoint: deadline=500ms */ SELECT count(DISTINCT status), pg_sleep(3) FROM orders"
    for mode in MODES:
        t0 = time.monotonic()
        got = run(PROXY_T, mode, sql)
        took = time.monotonic() - t0
        check(got.error is not None and got.error[0] == "SPS01" and took < 2.5, "deadline", mode,
              lambda: f"{sql}\n    expected SPS01 within about 0.5s, got {got.error or short(got)} after {took:.2f}s")
        time.sleep(0.5)
        c = direct(*SHARDS[0])
        cur = c.cursor()
        cur.execute("SELECT pid, state, query FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' "
                    "AND pid <> pg_backend_pid() AND state = 'active'")
        busy = cur.fetchall()
        c.close()
        check(not busy, "deadline-cancel", mode,
              lambda: f"{sql}\n    the combine database still runs it 0.5s after the error: {short(busy)}")
        after = "SELECT count(DISTINCT status), count(*) FROM orders WHERE qty = 3"
        compare("deadline-after", mode, after, (), run(PLAIN_T, mode, after), run(PROXY_T, mode, after), "exact")


SMALL_CAP = 500


@test
@needs_proxy
def max_combine_rows_and_another_combine_database():
    """A second proxy combining on s2 (on PG1) with scatter.max_combine_rows: 500: small
    combine statements match plain PostgreSQL; ones that must move more rows fail with
    SPS02, and the session goes on (the next statement works)."""
    global PROXY2
    PROXY2 = Proxy("combine-cap", proxy_config(f"  combine: s2\n  max_combine_rows: {SMALL_CAP}\n")).start()
    proxy2 = Target("proxy2", PROXY2.port, "app")
    try:
        small = [s for s in STMTS if s[0] in ("agg-34", "agg-35", "agg-36", "osa-12", "win-14", "win-25", "cte-06",
                                              "typ-11", "typ-27", "err-12")]
        for sid, sql, params, order in small:
            run_statement(f"cap-{sid}", sql, params, order, proxy=proxy2)
        big = ["SELECT order_id, row_number() OVER (ORDER BY order_id) FROM orders ORDER BY 1",
               "SELECT count(*) FROM orders o JOIN customers c ON c.name = o.cust_name",
               "SELECT string_agg(note, ',' ORDER BY order_id) FROM orders"]
        for i, sql in enumerate(big):
            for mode in MODES:
                got = run(proxy2, mode, sql)
                check(got.error is not None and got.error[0] == "SPS02", f"cap-big-{i}", mode,
                      lambda: f"{sql}\n    expected SQLSTATE SPS02 (more than {SMALL_CAP} rows to combine), "
                              f"got {got.error or short(got)}")
                after = "SELECT count(*), count(DISTINCT status) FROM orders WHERE qty = 3"
                exp, got2 = run(PLAIN_T, mode, after), run(proxy2, mode, after)
                compare(f"cap-after-{i}", mode, after, (), exp, got2, "exact")
        r = run_simple(proxy2, "SELECT count(*) FROM orders")
        check(r.error is None and r.rows == [(str(len(ORDERS)),)], "cap-count", "simple",
              lambda: f"SELECT count(*) FROM orders after SPS02: {r}")
    finally:
        proxy2.close()


@test
@needs_proxy
def a_combine_database_of_its_own():
    """scatter.combine as a libpq connection string (SPEC §4.1: "or a separate
    PostgreSQL"): a third proxy combines in a database that holds none of the tables
    (on PG1, given as a URI with no user: the client's is used). Every statement of the
    main comparison that matched there matches plain PostgreSQL through it too (the
    temporary tables are made from the pulls' column types; the reference table is
    pulled from one shard); the combine step's connections are to that database
    (pg_stat_activity), last_scatter names it; a column of an enum made on the shards is
    refused (0A000); no temporary table is left there. A fourth proxy whose combine
    database does not answer fails combine statements with SPS01 naming it, and answers
    everything else."""
    own = f"cbown_{SUFFIX}"
    c = sptest.superuser(PG1)
    c.cursor().execute(f"CREATE DATABASE {own} OWNER app")
    c.close()
    CREATED_DBS.append((PG1, own))
    proxy = Proxy("combine-own", proxy_config(f"  combine: postgresql://{HOST}:{PG1}/{own}\n")).start()
    t = Target("proxy3", proxy.port, "app")
    try:
        for sid, sql, params, order in STMTS:
            if not failed_alone(sid):
                run_statement(f"own-{sid}", sql, params, order, proxy=t)
        r = run_simple(t, "SELECT count(DISTINCT status) FROM orders")
        ls = last_scatter(t)
        names = [row[0] for row in ls.rows]
        check(r.error is None and "combine" in names and all(row[1] == "ok" for row in ls.rows), "own-last-scatter",
              "simple", lambda: f"last_scatter after a combine statement: {ls.rows} ({r.error})")
        d = sptest.superuser(PG1)
        cur = d.cursor()
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND usename = 'app'", (own,))
        n = int(cur.fetchone()[0])
        d.close()
        check(n > 0, "own-connections", "-", lambda: f"no connection of the proxy to {own} in pg_stat_activity")
        pools = sptest.admin(proxy.port, "SHOW POOLS")
        config = dict(sptest.admin(proxy.port, "SHOW CONFIG"))
        check(any(row[0] == "combine" and row[2] == own for row in pools), "own-show-pools", "-",
              lambda: f"SHOW POOLS has no pool of shard 'combine' for {own}: {pools}")
        check(config.get("scatter.combine") == f"postgresql://{HOST}:{PG1}/{own}", "own-show-config", "-",
              lambda: f"SHOW CONFIG scatter.combine: {config.get('scatter.combine')}")
        time.sleep(0.3)
        e = direct(PG1, own)
        cur = e.cursor()
        cur.execute("SELECT count(*) FROM pg_class WHERE relpersistence = 't' AND relkind = 'r'")
        left = int(cur.fetchone()[0])
        e.close()
        check(left == 0, "own-temp-tables", "-", lambda: f"{left} temporary tables left in {own}")
        for sql in ("CREATE TYPE cb_mood AS ENUM ('sad', 'ok')", "ALTER TABLE customers ADD COLUMN mood cb_mood"):
            r = run_simple(t, sql)  # (through this proxy: its cached table shapes follow)
            check(r.error is None, "own-enum-ddl", "simple", lambda: f"{sql}: {r.error}")
        try:
            for mode in MODES:
                got = run(t, mode, "SELECT count(DISTINCT mood) FROM customers")
                check(got.error is not None and got.error[0] == "0A000" and "made on the shards" in got.error[1],
                      "own-enum", mode, lambda: f"expected 0A000 (a type made on the shards), got "
                                                f"{got.error or short(got)}")
            r = run_simple(t, "SELECT count(DISTINCT status) FROM orders")
            check(r.error is None, "own-enum-after", "simple", lambda: f"the next combine statement: {r.error}")
        finally:
            for sql in ("ALTER TABLE customers DROP COLUMN mood", "DROP TYPE cb_mood"):
                run_simple(t, sql)
    finally:
        t.close()
        proxy.stop()
    closed = sptest.free_port()
    proxy = Proxy("combine-gone", proxy_config(
        f"  combine: 'host={HOST} port={closed} dbname=nowhere user=app password=secret'\n")).start()
    t = Target("proxy4", proxy.port, "app")
    try:
        for mode in MODES:
            got = run(t, mode, "SELECT count(DISTINCT status) FROM orders")
            check(got.error is not None and got.error[0] == "SPS01" and f"{HOST}:{closed}/nowhere" in got.error[1],
                  "own-unreachable", mode, lambda: f"expected SPS01 naming the combine database, got "
                                                   f"{got.error or short(got)}")
            after = "SELECT count(*), sum(qty) FROM orders WHERE qty = 3"
            compare("own-unreachable-after", mode, after, (), run(PLAIN_T, mode, after), run(t, mode, after), "exact")
    finally:
        t.close()
        proxy.stop()


@test
def ddl_changes_the_combined_answer():
    """Combine statements run, then the tables change through the proxy (a column added,
    a column's type changed, both undone): the same statement texts again must follow
    the new shapes (column lists, type OIDs), as in plain PostgreSQL."""
    again = ["misc-21", "typm-05", "misc-15", "agg-35", "win-14"]
    ddl = [["ALTER TABLE customers ADD COLUMN extra numeric(6,1) DEFAULT 7.5",
            "ALTER TABLE customers ALTER COLUMN tier TYPE bigint"],
           ["ALTER TABLE orders ADD COLUMN flag2 text DEFAULT 'ä'", "ALTER TABLE orders DROP COLUMN weight"],
           ["ALTER TABLE customers DROP COLUMN extra", "ALTER TABLE customers ALTER COLUMN tier TYPE smallint",
            "ALTER TABLE orders DROP COLUMN flag2", "ALTER TABLE orders ADD COLUMN weight numeric"]]
    for sid in again:   # plans and shapes cached
        _, sql, params, order = stmt(sid)
        run_statement(f"ddl0-{sid}", sql, params, order)
    for n, group in enumerate(ddl, 1):
        for sql in group:
            for t in (PLAIN_T, PROXY_T):
                r = run_simple(t, sql)
                check(r.error is None, f"ddl{n}", t.name, lambda: f"{sql}: {r.error}")
        for sid in again:
            _, sql, params, order = stmt(sid)
            run_statement(f"ddl{n}-{sid}", sql, params, order)
    # (weight is back, as the last column and empty: no statement using it runs after this test)


@test
def copy_to_stdout_through_the_combine_step():
    """COPY (query) TO STDOUT whose query only the combine step answers: the combine
    database writes the COPY, so text, csv with HEADER and binary are PostgreSQL's bytes."""
    import io
    queries = ["SELECT customer_id, count(DISTINCT status) FROM orders GROUP BY 1 ORDER BY 1",
               "SELECT status, string_agg(order_id::text, ',' ORDER BY order_id) FROM orders "
               "WHERE order_id % 7 = 0 GROUP BY 1 ORDER BY 1",
               "SELECT order_id, rank() OVER (ORDER BY order_id) FROM orders WHERE order_id % 50 = 0 ORDER BY 1"]
    for n, q in enumerate(queries):
        for opts in ("", " WITH (FORMAT csv, HEADER)", " WITH (FORMAT binary)"):
            sql = f"COPY ({q}) TO STDOUT{opts}"
            out = []
            for t in (PLAIN_T, PROXY_T):
                buf = io.BytesIO()
                try:
                    t.psy.cursor().copy_expert(sql, buf)
                    out.append(buf.getvalue())
                except Exception as e:  # noqa: BLE001
                    out.append(f"{type(e).__name__}: {e}")
                    t.psy.rollback()
            check(out[0] == out[1] and isinstance(out[0], bytes), f"copy{n}{opts.split()[-1] if opts else ''}", "simple",
                  lambda: f"{sql}: plain {short(out[0])} proxy {short(out[1])}")


@test
@needs_proxy
def no_temporary_tables_left():
    """After every statement above, the combine databases hold no temporary table of the
    combine step (they do not pile up in pooled server sessions)."""
    time.sleep(0.5)
    for port, db in (SHARDS[0], SHARDS[2]):
        c = direct(port, db)
        cur = c.cursor()
        cur.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relpersistence = 't' AND c.relkind = 'r'")
        left = cur.fetchall()
        c.close()
        check(not left, "temp-tables", db, lambda: f"{len(left)} temporary tables left in {db}: {short(left)}")


# ------------------------------------------------------------------ main

def setup():
    global PROXY, PLAIN_T, PROXY_T
    t0 = time.monotonic()
    make_data()
    for port, db in ALL_DBS:
        c = sptest.superuser(port)
        c.cursor().execute(f"CREATE DATABASE {db} OWNER app")
        c.close()
        CREATED_DBS.append((port, db))
    PLAIN_T = Target("plain", *PLAIN)
    if SELFCHECK:
        # other plans too (the combine database's temporary tables have no index)
        PROXY_T = Target("plain2", *PLAIN2, options=os.environ.get(
            "CB_SELFCHECK_OPTIONS", "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_hashagg=off"))
    else:
        PROXY = Proxy("combine-diff", proxy_config()).start()
        PROXY_T = Target("proxy", PROXY.port, "app")
    t1 = time.monotonic()
    load(PLAIN_T.psy)
    t2 = time.monotonic()
    load(PROXY_T.psy, random.Random(SEED + 1) if SELFCHECK else None)
    t3 = time.monotonic()
    print(f"     data {t1 - t0:.1f}s, load plain {t2 - t1:.1f}s, load {PROXY_T.name} {t3 - t2:.1f}s")
    if not SELFCHECK:
        for port, db in SHARDS:
            c = direct(port, db)
            c.cursor().execute("ANALYZE")
            c.close()
        verify_load()
    build_statements()
    print(f"     setup {time.monotonic() - t0:.1f}s; {len(STMTS)} statements")


def teardown():
    for t in (PLAIN_T, PROXY_T):
        if t is not None:
            t.close()
    for p in (PROXY, PROXY2):
        if p is not None:
            p.stop()
    for port, db in CREATED_DBS:
        try:
            c = sptest.superuser(port)
            cur = c.cursor()
            cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", (db,))
            gids = [r[0] for r in cur.fetchall()]
            c.close()
            if gids:
                d = sptest.connect(port, db, "postgres", "postgres")
                for g in gids:
                    d.cursor().execute(f"ROLLBACK PREPARED '{g}'")
                d.close()
            c = sptest.superuser(port)
            c.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            c.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {db}: {e}")


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, checks=CHECKS,
                              watch=lambda: [p for p in (PROXY, PROXY2) if p is not None]))
