#!/usr/bin/env python3
"""Routing rules (SPEC §3, §5, §6): for each row of the routing table, what reached
which shard -- observed on the shards themselves, not taken from the proxy.

Two shards (the shared instances PG0 and PG1, each with a fresh database made for this
run and dropped at the end). Every shard gets, directly, a table `hits(shard, tag)` and
a VOLATILE function `hit(tag)` that records the shard's own name. Statements carry
`AND (SELECT hit('<tag>'))` (an InitPlan: PostgreSQL runs it exactly once per
execution, whether or not any row matches), so after a statement the shards that
recorded its tag are exactly the shards it ran on.

Config: hash distribution by_user (16 partitions; users.id, orders.user_id, bigint),
the SPEC range example (events.id: upto 1000 s0, upto 2000 s1, rest s1), a list
distribution WITHOUT default (stores.region: jp, kr -> s0; us, eu -> s1) and a
reference table (countries). Each case runs through the simple protocol (psycopg2,
client-side parameters) and the extended protocol (tests/lib/pgwire.py:
Parse/Bind/Describe/Execute/Sync with bound parameters, text and binary).

Covered: key =, IN, = ANY(array) (literal, text and binary array parameter), OR of
keys, AND with other conditions, casts, reversed operands; range BETWEEN/</<=/>/>=
(single-shard reads; writes spanning both ranges run on exactly the overlapping
shards); co-located joins and subqueries with the key fixed; UPDATE/DELETE with key
(one shard) and without (every shard, combined tag); UPDATE SET key -> SPR01; INSERT
without key -> SPR01; list value without partition -> SPR02; reference read (one
shard) / write (every shard); DDL (every shard); catalog queries and SELECT without
tables (one shard); hints shard=NAME and key=VALUE; SET splitpoint.shard;
transactions with cross_shard_writes: refuse (not the default; two_phase is in
test_two_phase.py) (write to a second shard -> SPT01, aborted, 25P02 until ROLLBACK,
nothing left; reads on two shards + a write on one commit); syntax errors (42601 with
PostgreSQL's own message and position, compared with PostgreSQL itself). Multi-shard
reads: one place (multi_shard_read_refused_until_scatter_gather) accepts the SPC01
refusal that was the rule until scatter-gather landed, or execution on exactly the two
owning shards; merged results are not checked here.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 180

import itertools
import os
import re
import secrets
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST, PG_PORTS, superuser  # noqa: E402

WORKDIR = sptest.workdir("rt-rules")
DB = "rr_" + secrets.token_hex(4)
P = 16
N = 2
SHARDS = ["s0", "s1"]

# ------------------------------------------------------------------ harness


SHARD = []  # direct autocommit connections to each shard's test database
PROXY = None


def shard_query(i, sql, params=None):
    cur = SHARD[i].cursor()
    cur.execute(sql, params)
    return cur.fetchall() if cur.description else None


def proxy_conn():
    return sptest.connect(PROXY.port, "app")


def proxy_wire():
    return pgwire.connect(HOST, PROXY.port, "app", "app", password="secret", timeout=20)


def direct_wire(i):
    return pgwire.connect(HOST, PG_PORTS[i], "app", DB, password="secret", timeout=20)


# ------------------------------------------------------------------ observing the shards

TAGS = itertools.count(1)


def new_tag(name):
    return f"{name}#{next(TAGS)}"


def hits(tag):
    """{shard name: times hit() ran there with this tag}."""
    out = {}
    for i in range(N):
        n = shard_query(i, "SELECT count(*) FROM hits WHERE tag = %s", (tag,))[0][0]
        if n:
            out[SHARDS[i]] = n
    return out


def assert_hits(what, tag, shards):
    got = hits(tag)
    want = {s: 1 for s in shards}
    assert got == want, f"{what}\n  ran on {got or 'no shard'}, expected exactly once on each of {sorted(shards)}"


def assert_one_shard(what, tag):
    got = hits(tag)
    assert len(got) == 1 and list(got.values()) == [1], f"{what}\n  ran on {got or 'no shard'}, expected one shard"
    return next(iter(got))


def to_dollar(sql):
    n = itertools.count(1)
    return re.sub(r"%s", lambda _: f"${next(n)}", sql)


class Failure(AssertionError):
    pass


def run_simple(sql, params):
    """psycopg2 (simple protocol). Returns (rows, statusmessage)."""
    c = proxy_conn()
    try:
        cur = c.cursor()
        cur.execute(sql, params)
        rows = cur.fetchall() if cur.description else None
        return rows, cur.statusmessage
    finally:
        c.close()


def run_ext(sql, params, formats=(), oids=()):
    with proxy_wire() as w:
        return w.extended(sql, params, param_formats=formats, param_oids=oids)


SOFT = []  # failures of the current test's cases; the runner reports them all at its end


def soft(fn):
    """Runs one protocol's check; a failure is recorded and the test goes on, so one
    broken case does not hide the others."""
    try:
        return fn()
    except AssertionError as e:
        SOFT.append(str(e))
        return None


def routes(name, sql, params, shards, ext_params=None, formats=(), oids=(), ext_sql=None, tag_last=True,
           simple=True, extended=True, tag_check=None):
    """Runs `sql` (psycopg2 %s placeholders; the last one is hit()'s tag) through both
    protocols and checks it ran exactly once on each of `shards` ('any' = one shard).
    Returns {'simple': rows, 'ext': rows} for the protocols that succeeded."""
    results = {}

    def simple_case():
        tag = new_tag(name + "/simple")
        full = list(params) + [tag] if tag_last else list(params)
        what = f"[simple] {sql} {full}"
        try:
            rows, status = run_simple(sql, full)
        except psycopg2.Error as e:
            raise Failure(f"{what}: failed with {e.pgcode}: {(e.pgerror or '').strip()}") from None
        if shards == "any":
            assert_one_shard(what, tag)
        else:
            assert_hits(what, tag, shards)
        if tag_check:
            assert status == tag_check, f"{what}: command tag {status!r}, expected {tag_check!r}"
        results["simple"] = rows

    def ext_case():
        tag = new_tag(name + "/ext")
        xs = ext_sql or to_dollar(sql)
        xp = (list(ext_params) if ext_params is not None else list(params)) + ([tag] if tag_last else [])
        xf = list(formats) + ([0] if formats and tag_last else [])
        xo = list(oids) + ([25] if oids and tag_last else [])
        r = run_ext(xs, xp, xf, xo)
        what = f"[extended] {xs} params={xp} formats={xf} oids={xo}"
        if r.error:
            raise Failure(f"{what}: failed with {r.sqlstate}: {r.error.get('M')}")
        if shards == "any":
            assert_one_shard(what, tag)
        else:
            assert_hits(what, tag, shards)
        if tag_check:
            assert r.tag == tag_check, f"{what}: command tag {r.tag!r}, expected {tag_check!r}"
        results["ext"] = r.rows

    if simple:
        soft(simple_case)
    if extended:
        soft(ext_case)
    return results


def rows_are(what, r, simple=None, ext=None, key=None):
    """Checks the rows each protocol returned (for the protocols that succeeded)."""
    for proto, want in (("simple", simple), ("ext", ext)):
        if want is None or proto not in r:
            continue
        got = r[proto] if key is None else key(r[proto])
        if got != want:
            SOFT.append(f"{what} [{proto}]: rows {got!r}, expected {want!r}")


def refused(name, sql, params, sqlstate, ext_params=None, formats=(), oids=()):
    """Both protocols: the statement fails with `sqlstate` and runs on no shard."""
    def simple_case():
        tag = new_tag(name + "/simple")
        try:
            run_simple(sql, list(params) + [tag])
        except psycopg2.Error as e:
            assert e.pgcode == sqlstate, \
                f"[simple] {sql}: got {e.pgcode} ({(e.pgerror or '').strip()}), expected {sqlstate}"
        else:
            raise Failure(f"[simple] {sql} {params}: succeeded, expected {sqlstate}")
        assert hits(tag) == {}, f"[simple] {sql}: refused but ran on {hits(tag)}"

    def ext_case():
        tag = new_tag(name + "/ext")
        xp = (list(ext_params) if ext_params is not None else list(params)) + [tag]
        xf = list(formats) + ([0] if formats else [])
        xo = list(oids) + ([25] if oids else [])
        r = run_ext(to_dollar(sql), xp, xf, xo)
        assert r.sqlstate == sqlstate, \
            f"[extended] {to_dollar(sql)} {xp}: got {r.sqlstate} ({r.error and r.error.get('M')}), expected {sqlstate}"
        assert r.status == "I", r.status
        assert hits(tag) == {}, f"[extended] {to_dollar(sql)}: refused but ran on {hits(tag)}"

    soft(simple_case)
    soft(ext_case)


def int8_array_binary(values):
    out = struct.pack("!iii", 1, 0, 20) + struct.pack("!ii", len(values), 1)
    for v in values:
        out += struct.pack("!iq", 8, v)
    return out


# ------------------------------------------------------------------ setup

KEYS = {0: [], 1: []}  # bigint keys 1..200 by owning shard (hash, 16 partitions, default placement)


def hash_owner(remainder):
    for i in range(N):
        if (i * P) // N <= remainder < ((i + 1) * P) // N:
            return i
    raise AssertionError(remainder)


def compute_owners():
    cur = SHARD[0].cursor()
    cur.execute("CREATE TEMP TABLE hp (k bigint) PARTITION BY HASH (k)")
    for r in range(P):
        cur.execute(f"CREATE TEMP TABLE hp_{r} PARTITION OF hp FOR VALUES WITH (MODULUS {P}, REMAINDER {r})")
    cur.execute("INSERT INTO hp SELECT generate_series(-50, 200)")
    cur.execute("SELECT k, tableoid::regclass::text FROM hp ORDER BY k")
    owners = {k: hash_owner(int(t.rsplit("_", 1)[1])) for k, t in cur.fetchall()}
    cur.execute("DROP TABLE hp")
    return owners


OWNER = {}


def key_on(shard, n=0, positive=True):
    ks = [k for k in sorted(OWNER) if OWNER[k] == shard and (k > 0) == positive and k <= 60]
    return ks[n]


def setup():
    global PROXY, OWNER
    for port in PG_PORTS:
        c = superuser(port)
        c.cursor().execute(f"CREATE DATABASE {DB} OWNER app")
        c.close()
    for i, port in enumerate(PG_PORTS):
        c = psycopg2.connect(host=HOST, port=port, user="app", password="secret", dbname=DB, connect_timeout=10)
        c.autocommit = True
        SHARD.append(c)
        cur = c.cursor()
        cur.execute("CREATE TABLE hits (shard text NOT NULL, tag text NOT NULL, at timestamptz DEFAULT now())")
        cur.execute(f"""CREATE FUNCTION hit(tag text) RETURNS bool LANGUAGE plpgsql VOLATILE AS $$
                        BEGIN INSERT INTO hits (shard, tag) VALUES ('{SHARDS[i]}', tag); RETURN true; END $$""")
    OWNER = compute_owners()
    PROXY = sptest.Proxy("rules", f"""
        auth: scram-sha-256
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG_PORTS[0]}, database: {DB}, user: app, password: secret }}
          - {{ name: s1, host: {HOST}, port: {PG_PORTS[1]}, database: {DB}, user: app, password: secret }}
        distributions:
          - name: by_user
            method: hash
            partitions: {P}
            tables:
              users: id
              orders: user_id
          - name: by_id_range
            method: range
            ranges:
              - {{ upto: 1000, shard: s0 }}
              - {{ upto: 2000, shard: s1 }}
              - {{ shard: s1 }}
            tables:
              events: id
          - name: by_region
            method: list
            lists: {{ s0: [jp, kr], s1: [us, eu] }}
            tables:
              stores: region
        reference_tables: [countries]
        transactions:
          cross_shard_writes: refuse
        """, WORKDIR).start()
    c = proxy_conn()
    cur = c.cursor()
    for stmt in [
        "CREATE TABLE users (id bigint PRIMARY KEY, name text, score int NOT NULL DEFAULT 0)",
        "CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, amount int, country text, "
        "PRIMARY KEY (user_id, id))",
        "CREATE TABLE events (id bigint PRIMARY KEY, v text)",
        "CREATE TABLE stores (region text NOT NULL, id int NOT NULL, v text, PRIMARY KEY (region, id))",
        "CREATE TABLE countries (code text PRIMARY KEY, name text)",
    ]:
        cur.execute(stmt)
    for k in range(1, 61):
        cur.execute("INSERT INTO users (id, name, score) VALUES (%s, %s, %s)", (k, f"user{k}", k))
        cur.execute("INSERT INTO orders VALUES (%s, 1, %s, 'jp'), (%s, 2, %s, 'us')", (k, k * 10, k, k * 20))
    for k in [-5, 10, 500, 999, 1000, 1500, 1999, 2000, 2500]:
        cur.execute("INSERT INTO events VALUES (%s, %s)", (k, f"e{k}"))
    for r in ["jp", "kr", "us", "eu"]:
        cur.execute("INSERT INTO stores VALUES (%s, 1, %s)", (r, f"store-{r}"))
    for code, name in [("jp", "Japan"), ("us", "United States"), ("de", "Germany"), ("fr", "France"),
                       ("kr", "Korea")]:
        cur.execute("INSERT INTO countries VALUES (%s, %s)", (code, name))
    c.close()


def teardown():
    for c in SHARD:
        try:
            c.close()
        except Exception:  # noqa: BLE001
            pass
    if PROXY is not None:
        PROXY.stop()
    for port in PG_PORTS:
        try:
            c = superuser(port)
            c.cursor().execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            c.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {DB} on port {port}: {e}")


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ setup sanity

@test
def seed_data_is_where_it_belongs():
    # The routing cases below rely on these rows; the placement itself is
    # test_routing_placement's subject, this only guards the preconditions.
    for i in range(N):
        ids = {r[0] for r in shard_query(i, "SELECT id FROM users")}
        assert ids == {k for k in range(1, 61) if OWNER[k] == i}, f"users on s{i}: {sorted(ids)}"
        assert shard_query(i, "SELECT count(*) FROM countries")[0][0] == 5, f"countries on s{i}"
    assert len({key_on(s, n) for s in (0, 1) for n in range(3)}) == 6
    assert key_on(0, positive=False) < 0 and key_on(1, positive=False) < 0


# ------------------------------------------------------------------ key equality, IN, ANY, OR, AND, casts

@test
def key_equals_literal_and_parameter():
    for shard in (0, 1):
        k = key_on(shard)
        r = routes("eq", "SELECT id, name FROM users WHERE id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]])
        rows_are("id = key", r, simple=[(k, f"user{k}")], ext=[[str(k), f"user{k}"]])
        # binary int8 parameter, type given and left to the server
        routes("eq-bin8", "SELECT id FROM users WHERE id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]],
               ext_params=[struct.pack("!q", k)], formats=[1], oids=[20], simple=False)
        routes("eq-bin0", "SELECT id FROM users WHERE id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]],
               ext_params=[struct.pack("!q", k)], formats=[1], oids=[0], simple=False)
        routes("eq-bin4", "SELECT id FROM users WHERE id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]],
               ext_params=[struct.pack("!i", k)], formats=[1], oids=[23], simple=False)
        # reversed operands, a key that is not in the table
        routes("eq-rev", "SELECT id FROM users WHERE %s = id AND (SELECT hit(%s))", [k], [SHARDS[shard]])
    for shard in (0, 1):
        k = key_on(shard, positive=False)  # negative literal: unary minus in the parse tree
        routes("eq-neg", f"SELECT id FROM users WHERE id = {k} AND (SELECT hit(%s))", [], [SHARDS[shard]])


@test
def same_shape_many_literals():
    # Texts that differ only in literals share one cached plan; each must still route by
    # its own value.
    for k in range(1, 41):
        routes("shape", f"SELECT name FROM users WHERE id = {k} AND (SELECT hit(%s))", [], [SHARDS[OWNER[k]]],
               extended=False)
    with proxy_wire() as w:
        w.send([pgwire.parse_msg("SELECT name FROM users WHERE id = $1 AND (SELECT hit($2))", "q_shape"),
                pgwire.sync_msg()])
        assert w.query_collect().error is None
        for k in range(1, 41):
            tag = new_tag("shape/named")
            w.send([pgwire.bind_msg([k, tag], "", "q_shape"), pgwire.execute_msg(), pgwire.sync_msg()])
            r = w.query_collect()
            assert r.error is None, (k, r.error)
            assert r.rows == [[f"user{k}"]], (k, r.rows)
            assert_hits(f"named statement q_shape with id={k}", tag, [SHARDS[OWNER[k]]])


@test
def key_in_list():
    for shard in (0, 1):
        ks = [key_on(shard, n) for n in range(3)]
        r = routes("in", "SELECT id FROM users WHERE id IN (%s, %s, %s) AND (SELECT hit(%s))", ks, [SHARDS[shard]])
        rows_are("id IN", r, simple=sorted(ks), ext=sorted(ks), key=lambda rows: sorted(int(x[0]) for x in rows))


@test
def key_any_array():
    for shard in (0, 1):
        ks = [key_on(shard, n) for n in range(3)]
        lit = "{" + ",".join(map(str, ks)) + "}"
        # literal array
        routes("any-lit", f"SELECT id FROM users WHERE id = ANY('{lit}') AND (SELECT hit(%s))", [], [SHARDS[shard]])
        routes("any-arr", f"SELECT id FROM users WHERE id = ANY(ARRAY[{','.join(map(str, ks))}]) "
               "AND (SELECT hit(%s))", [], [SHARDS[shard]])
        # = ANY($1): psycopg2 renders a list as ARRAY[...]; the extended protocol binds
        # the array as text and as binary int8[]
        routes("any-param", "SELECT id FROM users WHERE id = ANY(%s) AND (SELECT hit(%s))", [ks], [SHARDS[shard]],
               ext_params=[lit])
        routes("any-bin", "SELECT id FROM users WHERE id = ANY(%s) AND (SELECT hit(%s))", [ks], [SHARDS[shard]],
               ext_params=[int8_array_binary(ks)], formats=[1], oids=[1016], simple=False)


@test
def key_or():
    for shard in (0, 1):
        a, b = key_on(shard, 0), key_on(shard, 1)
        routes("or", "SELECT id FROM users WHERE (id = %s OR id = %s) AND (SELECT hit(%s))", [a, b], [SHARDS[shard]])
        routes("or-in", "SELECT id FROM users WHERE (id = %s OR id IN (%s)) AND (SELECT hit(%s))", [a, b],
               [SHARDS[shard]])


@test
def key_and_other_conditions():
    for shard in (0, 1):
        k = key_on(shard)
        routes("and", "SELECT id FROM users WHERE name IS NOT NULL AND score > %s AND id = %s AND (SELECT hit(%s))",
               [-1, k], [SHARDS[shard]])
        routes("and-or", "SELECT id FROM users WHERE id = %s AND (name = %s OR score < %s) AND (SELECT hit(%s))",
               [k, "nobody", 0], [SHARDS[shard]])


@test
def key_casts():
    for shard in (0, 1):
        k = key_on(shard)
        routes("cast-str", f"SELECT id FROM users WHERE id = '{k}'::bigint AND (SELECT hit(%s))", [], [SHARDS[shard]])
        routes("cast-fn", f"SELECT id FROM users WHERE id = CAST('{k}' AS bigint) AND (SELECT hit(%s))", [],
               [SHARDS[shard]])
        routes("cast-int", f"SELECT id FROM users WHERE id = {k}::int AND (SELECT hit(%s))", [], [SHARDS[shard]])
        routes("cast-param", "SELECT id FROM users WHERE id = %s::bigint AND (SELECT hit(%s))", [str(k)],
               [SHARDS[shard]])
        routes("unknown-lit", f"SELECT id FROM users WHERE id = '{k}' AND (SELECT hit(%s))", [], [SHARDS[shard]])


# ------------------------------------------------------------------ ranges

@test
def range_reads_touch_only_overlapping_ranges():
    cases = [
        ("id BETWEEN %s AND %s", [10, 500], ["s0"]),
        ("id < %s", [1000], ["s0"]),
        ("id <= %s", [999], ["s0"]),
        ("id >= %s", [1000], ["s1"]),
        ("id > %s", [1000], ["s1"]),
        ("id > %s AND id < %s", [1000, 1500], ["s1"]),
        ("id BETWEEN %s AND %s", [1000, 5000], ["s1"]),  # two ranges, both on s1
        ("id >= %s AND id <= %s", [-100, 0], ["s0"]),
        ("id = %s", [1999], ["s1"]),
        ("id = %s", [999], ["s0"]),
    ]
    for cond, params, shards in cases:
        routes("range-read", f"SELECT id FROM events WHERE {cond} AND (SELECT hit(%s))", params, shards)


@test
def range_writes_touch_exactly_the_overlapping_shards():
    # Reads over both shards are refused until scatter-gather; a write over both runs
    # on both (outside a transaction), so the overlap rule shows on writes.
    cases = [
        ("id BETWEEN %s AND %s", [950, 1050], ["s0", "s1"], 2),
        ("id <= %s", [1000], ["s0", "s1"], 5),
        ("id < %s", [1000], ["s0"], 4),
        ("id >= %s", [1000], ["s1"], 5),
        ("id BETWEEN %s AND %s", [1000, 2500], ["s1"], 5),
        ("id < %s", [0], ["s0"], 1),
    ]
    for cond, params, shards, n in cases:
        routes("range-write", f"UPDATE events SET v = v WHERE {cond} AND (SELECT hit(%s))", params, shards,
               tag_check=f"UPDATE {n}")


# ------------------------------------------------------------------ joins and subqueries

@test
def colocated_joins_with_key_fixed():
    for shard in (0, 1):
        k = key_on(shard)
        r = routes("join", "SELECT u.name, o.id, o.amount FROM users u JOIN orders o ON o.user_id = u.id "
                   "WHERE u.id = %s AND (SELECT hit(%s)) ORDER BY o.id", [k], [SHARDS[shard]])
        rows_are("co-located join", r, simple=[(f"user{k}", 1, k * 10), (f"user{k}", 2, k * 20)],
                 ext=[[f"user{k}", "1", str(k * 10)], [f"user{k}", "2", str(k * 20)]])
        routes("join-other-side", "SELECT count(*) FROM users u JOIN orders o ON u.id = o.user_id "
               "WHERE o.user_id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]])
        routes("join-using", "SELECT count(*) FROM orders JOIN users ON users.id = orders.user_id "
               "WHERE users.id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]])
        routes("exists", "SELECT id FROM users u WHERE u.id = %s AND EXISTS "
               "(SELECT 1 FROM orders o WHERE o.user_id = u.id) AND (SELECT hit(%s))", [k], [SHARDS[shard]])
        routes("in-subquery", "SELECT count(*) FROM orders WHERE user_id IN "
               "(SELECT id FROM users WHERE id = %s) AND (SELECT hit(%s))", [k], [SHARDS[shard]])
        # reference table joined to a sharded table with the key fixed: that shard
        routes("join-ref", "SELECT c.name FROM orders o JOIN countries c ON c.code = o.country "
               "WHERE o.user_id = %s AND (SELECT hit(%s))", [k], [SHARDS[shard]])


# ------------------------------------------------------------------ UPDATE / DELETE

@test
def update_delete_with_key_one_shard():
    for shard in (0, 1):
        k = key_on(shard, 2)
        before = shard_query(shard, "SELECT score FROM users WHERE id = %s", (k,))[0][0]
        routes("upd-key", "UPDATE users SET score = score + 1 WHERE id = %s AND (SELECT hit(%s))", [k],
               [SHARDS[shard]], tag_check="UPDATE 1")
        after = shard_query(shard, "SELECT score FROM users WHERE id = %s", (k,))[0][0]
        assert after == before + 2, (k, before, after)  # once per protocol
        routes("upd-key-in", "UPDATE orders SET amount = amount WHERE user_id IN (%s, %s) AND (SELECT hit(%s))",
               [k, key_on(shard, 1)], [SHARDS[shard]], tag_check="UPDATE 4")
        routes("del-key", "DELETE FROM orders WHERE user_id = %s AND id = %s AND (SELECT hit(%s))", [k, 999],
               [SHARDS[shard]], tag_check="DELETE 0")
        routes("upd-ret", "UPDATE users SET score = score WHERE id = %s AND (SELECT hit(%s)) RETURNING id", [k],
               [SHARDS[shard]], tag_check="UPDATE 1")


@test
def update_delete_keys_on_both_shards():
    a, b = key_on(0, 2), key_on(1, 2)
    routes("upd-2keys", "UPDATE users SET score = score WHERE id IN (%s, %s) AND (SELECT hit(%s))", [a, b],
           ["s0", "s1"], tag_check="UPDATE 2")
    routes("upd-or", "UPDATE users SET score = score WHERE (id = %s OR id = %s) AND (SELECT hit(%s))", [a, b],
           ["s0", "s1"], tag_check="UPDATE 2")


@test
def update_delete_without_key_all_shards():
    routes("upd-nokey", "UPDATE users SET name = name WHERE score >= %s AND (SELECT hit(%s))", [0], ["s0", "s1"],
           tag_check="UPDATE 60")
    routes("del-nokey", "DELETE FROM orders WHERE amount < %s AND (SELECT hit(%s))", [-1000], ["s0", "s1"],
           tag_check="DELETE 0")
    routes("upd-nokey-noparam", "UPDATE users SET name = name WHERE (SELECT hit(%s))", [], ["s0", "s1"],
           tag_check="UPDATE 60")


@test
def update_setting_the_key_is_spr01():
    a, b = key_on(0, 0), key_on(1, 0)
    refused("set-key", "UPDATE users SET id = %s WHERE id = %s AND (SELECT hit(%s))", [b + 1000, a], "SPR01")
    refused("set-key-expr", "UPDATE users SET id = id + 1 WHERE id = %s AND (SELECT hit(%s))", [a], "SPR01")
    refused("set-key-nowhere", "UPDATE orders SET user_id = %s WHERE (SELECT hit(%s))", [b], "SPR01")
    refused("upsert-set-key", "INSERT INTO users (id, name) VALUES (%s, 'x') ON CONFLICT (id) DO UPDATE "
            "SET id = excluded.id + 1 WHERE (SELECT hit(%s))", [a], "SPR01")
    for shard, k in ((0, a), (1, b)):
        assert shard_query(shard, "SELECT count(*) FROM users WHERE id = %s", (k,))[0][0] == 1
    assert shard_query(0, "SELECT count(*) FROM users WHERE id > 1000")[0][0] == 0
    assert shard_query(1, "SELECT count(*) FROM users WHERE id > 1000")[0][0] == 0


@test
def insert_without_key_is_spr01():
    for sql in ["INSERT INTO users (name) VALUES ('nokey') RETURNING (SELECT hit(%s))",
                "INSERT INTO users (id, name) VALUES (DEFAULT, 'nokey') RETURNING (SELECT hit(%s))",
                "INSERT INTO users DEFAULT VALUES RETURNING (SELECT hit(%s))",
                "INSERT INTO orders (id, amount) VALUES (1, 2), (3, 4) RETURNING (SELECT hit(%s))"]:
        refused("ins-nokey", sql, [], "SPR01")
    for i in range(N):
        assert shard_query(i, "SELECT count(*) FROM users WHERE name = 'nokey'")[0][0] == 0


@test
def list_value_without_partition_is_spr02():
    refused("spr02-ins", "INSERT INTO stores (region, id, v) VALUES (%s, 7, 'x') RETURNING (SELECT hit(%s))",
            ["br"], "SPR02")
    refused("spr02-sel", "SELECT * FROM stores WHERE region = %s AND (SELECT hit(%s))", ["br"], "SPR02")
    refused("spr02-upd", "UPDATE stores SET v = 'y' WHERE region = %s AND (SELECT hit(%s))", ["de"], "SPR02")
    refused("spr02-case", "SELECT * FROM stores WHERE region = %s AND (SELECT hit(%s))", ["JP"], "SPR02")
    for i in range(N):
        assert shard_query(i, "SELECT count(*) FROM stores WHERE region IN ('br', 'de')")[0][0] == 0
    # listed values route to their shard
    routes("list-jp", "SELECT v FROM stores WHERE region = %s AND (SELECT hit(%s))", ["jp"], ["s0"])
    routes("list-eu", "SELECT v FROM stores WHERE region = %s AND (SELECT hit(%s))", ["eu"], ["s1"])
    routes("list-in", "SELECT v FROM stores WHERE region IN (%s, %s) AND (SELECT hit(%s))", ["us", "eu"], ["s1"])
    routes("list-ins", "INSERT INTO stores VALUES (%s, %s, 'new') RETURNING (SELECT hit(%s))", ["kr", 50], ["s0"],
           ext_params=["kr", 51], tag_check="INSERT 0 1")
    for i, want in ((0, 2), (1, 0)):
        assert shard_query(i, "SELECT count(*) FROM stores WHERE region = 'kr' AND id >= 50")[0][0] == want


# ------------------------------------------------------------------ reference tables

@test
def reference_read_one_shard_write_every_shard():
    for _ in range(3):
        r = routes("ref-read", "SELECT code, name FROM countries WHERE code <> %s AND (SELECT hit(%s)) ORDER BY code",
                   ["xx"], "any")
        rows_are("reference read", r, simple=["de", "fr", "jp", "kr", "us"], ext=["de", "fr", "jp", "kr", "us"],
                 key=lambda rows: [x[0] for x in rows])
    routes("ref-update", "UPDATE countries SET name = name WHERE code <> %s AND (SELECT hit(%s))", ["xx"],
           ["s0", "s1"], tag_check="UPDATE 5")  # what one PostgreSQL would say, not a sum
    routes("ref-insert", "INSERT INTO countries (code, name) VALUES (%s, %s) RETURNING (SELECT hit(%s))",
           ["zz", "Zland"], ["s0", "s1"], ext_params=["zy", "Zyland"], tag_check="INSERT 0 1")
    routes("ref-delete", "DELETE FROM countries WHERE code = %s AND (SELECT hit(%s))", ["zy"],
           ["s0", "s1"], tag_check="DELETE 1", simple=False)
    for i in range(N):
        rows = shard_query(i, "SELECT code FROM countries ORDER BY code")
        assert [r[0] for r in rows] == ["de", "fr", "jp", "kr", "us", "zz"], f"countries on s{i}: {rows}"
    c = proxy_conn()
    c.cursor().execute("DELETE FROM countries WHERE code = 'zz'")
    c.close()


# ------------------------------------------------------------------ DDL

def regclass_on(i, name):
    return shard_query(i, "SELECT to_regclass(%s) IS NOT NULL", (name,))[0][0]


@test
def ddl_every_shard_simple():
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("CREATE TABLE ddl_t (a int PRIMARY KEY, b text)")
    assert cur.statusmessage == "CREATE TABLE"
    cur.execute("CREATE INDEX ddl_t_b ON ddl_t (b)")
    cur.execute("ALTER TABLE ddl_t ADD COLUMN c int DEFAULT 7")
    cur.execute("COMMENT ON TABLE ddl_t IS 'routed'")
    cur.execute("INSERT INTO ddl_t VALUES (1, 'x'), (2, 'y')")  # unlisted: a reference table
    for i in range(N):
        assert regclass_on(i, "ddl_t") and regclass_on(i, "ddl_t_b"), f"s{i}: ddl_t / index missing"
        assert shard_query(i, "SELECT obj_description('ddl_t'::regclass)")[0][0] == "routed"
        assert shard_query(i, "SELECT count(*), sum(c) FROM ddl_t")[0] == (2, 14), f"s{i}"
    cur.execute("TRUNCATE ddl_t")
    assert cur.statusmessage == "TRUNCATE TABLE"
    for i in range(N):
        assert shard_query(i, "SELECT count(*) FROM ddl_t")[0][0] == 0, f"s{i}: TRUNCATE did not reach it"
    cur.execute("DROP TABLE ddl_t")
    assert cur.statusmessage == "DROP TABLE"
    for i in range(N):
        assert not regclass_on(i, "ddl_t"), f"s{i}: ddl_t still there after DROP"
    # a sharded table: DDL on every shard too
    cur.execute("ALTER TABLE users ADD COLUMN note text")
    cur.execute("CREATE INDEX users_name ON users (name)")
    for i in range(N):
        assert shard_query(i, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass "
                              "AND attname = 'note'")[0][0] == 1, f"s{i}: users.note missing"
        assert regclass_on(i, "users_name"), f"s{i}: users_name missing"
    c.close()


@test
def ddl_every_shard_extended():
    with proxy_wire() as w:
        for sql in ["CREATE TABLE ddl_x (a int)", "CREATE INDEX ddl_x_a ON ddl_x (a)"]:
            r = w.extended(sql)
            assert r.error is None, f"[extended] {sql}: {r.sqlstate} {r.error.get('M')}"
    for i in range(N):
        assert regclass_on(i, "ddl_x") and regclass_on(i, "ddl_x_a"), f"s{i}: ddl_x / ddl_x_a missing"
    with proxy_wire() as w:
        r = w.extended("DROP TABLE ddl_x")
        assert r.error is None, f"[extended] DROP TABLE ddl_x: {r.sqlstate} {r.error.get('M')}"
    for i in range(N):
        assert not regclass_on(i, "ddl_x"), f"s{i}: ddl_x still there"


# ------------------------------------------------------------------ catalog, no tables

@test
def catalog_and_tableless_one_shard():
    for _ in range(2):
        routes("catalog", "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = %s AND (SELECT hit(%s))",
               ["users"], "any")
        routes("catalog-unq", "SELECT relname FROM pg_class WHERE relname = %s AND (SELECT hit(%s))", ["users"],
               "any")
        routes("infoschema", "SELECT table_name FROM information_schema.tables WHERE table_name = %s "
               "AND (SELECT hit(%s))", ["users"], "any")
        r = routes("notable", "SELECT %s::int + 1 AS n, hit(%s)", [41], "any")
        rows_are("SELECT without tables", r, simple=[(42, True)], ext=[["42", "t"]])


# ------------------------------------------------------------------ hints and SET splitpoint.shard

@test
def hint_shard_name():
    for shard in ("s0", "s1"):
        for _ in range(2):
            routes("hint-notable", f"/* splitpoint: shard={shard} */ SELECT hit(%s)", [], [shard])
        # a keyless read over a sharded table: only the named shard
        r = routes("hint-keyless", f"/* splitpoint: shard={shard} */ SELECT count(*) FROM users "
                   "WHERE (SELECT hit(%s))", [], [shard])
        want = sum(1 for k in range(1, 61) if SHARDS[OWNER[k]] == shard)
        rows_are(f"hint shard={shard}, keyless count", r, simple=[(want,)], ext=[[str(want)]])
        # the hint anywhere in the text
        routes("hint-end", "SELECT count(*) FROM users WHERE (SELECT hit(%s)) "
               f"/* splitpoint: shard={shard} */", [], [shard])
        routes("hint-write", f"UPDATE users /* splitpoint: shard={shard} */ SET name = name "
               "WHERE (SELECT hit(%s))", [], [shard], tag_check=f"UPDATE {want}")


@test
def hint_key_value():
    for shard in (0, 1):
        k = key_on(shard)
        routes("hint-key", f"/* splitpoint: key={k} */ SELECT count(*) FROM users WHERE name = %s "
               "AND (SELECT hit(%s))", ["nobody"], [SHARDS[shard]])
        routes("hint-key-write", f"/* splitpoint: key={k} */ UPDATE orders SET amount = amount "
               "WHERE amount < %s AND (SELECT hit(%s))", [0], [SHARDS[shard]])
        # with other hints in the same comment
        routes("hint-key-multi", f"/* splitpoint: deadline=2s, key={k} */ SELECT 1 FROM users "
               "WHERE (SELECT hit(%s))", [], [SHARDS[shard]])


@test
def set_splitpoint_shard():
    c = proxy_conn()
    cur = c.cursor()
    try:
        cur.execute("SET splitpoint.shard = 's1'")
        cur.execute("SHOW splitpoint.shard")
        assert cur.fetchone()[0] == "s1"
        for i in range(3):
            tag = new_tag("set-shard")
            cur.execute("SELECT hit(%s)", (tag,))
            assert_hits("SET splitpoint.shard = 's1'; SELECT hit()", tag, ["s1"])
        tag = new_tag("set-shard-keyless")
        cur.execute("SELECT count(*) FROM users WHERE (SELECT hit(%s))", (tag,))
        assert cur.fetchone()[0] == sum(1 for k in range(1, 61) if OWNER[k] == 1)
        assert_hits("SET splitpoint.shard = 's1'; keyless SELECT on users", tag, ["s1"])
        tag = new_tag("set-shard-keyed")
        cur.execute("SELECT count(*) FROM users WHERE id = %s AND (SELECT hit(%s))", (key_on(0), tag))
        assert cur.fetchone()[0] == 0  # the row lives on s0; s1 was asked as the setting says
        assert_hits("SET splitpoint.shard = 's1'; SELECT with an s0 key", tag, ["s1"])
        cur.execute("SET splitpoint.shard = 's0'")
        tag = new_tag("set-shard-s0")
        cur.execute("UPDATE users SET name = name WHERE (SELECT hit(%s))", (tag,))
        assert_hits("SET splitpoint.shard = 's0'; keyless UPDATE", tag, ["s0"])
        cur.execute("RESET splitpoint.shard")
        tag = new_tag("reset-shard")
        cur.execute("UPDATE users SET name = name WHERE (SELECT hit(%s))", (tag,))
        assert_hits("RESET splitpoint.shard; keyless UPDATE", tag, ["s0", "s1"])
    finally:
        c.close()
    # the setting applies to the extended protocol of the same session too
    with proxy_wire() as w:
        assert w.query("SET splitpoint.shard = 's0'").error is None
        for _ in range(2):
            tag = new_tag("set-shard-ext")
            r = w.extended("SELECT count(*) FROM users WHERE (SELECT hit($1))", [tag])
            assert r.error is None, r.error
            assert_hits("SET splitpoint.shard = 's0' then extended keyless SELECT", tag, ["s0"])


# ------------------------------------------------------------------ multi-shard reads (until scatter-gather lands)

@test
def multi_shard_read_refused_until_scatter_gather():
    # UNTIL SCATTER-GATHER LANDS a read over two shards is refused with SPC01 and runs on
    # no shard. Once it lands, it must run on exactly the owning shards (its merged
    # result is the scatter-gather tests' subject, not checked here).
    a, b = key_on(0), key_on(1)
    sql = "SELECT id FROM users WHERE id IN (%s, %s) AND (SELECT hit(%s))"
    tag = new_tag("multi-read/simple")
    try:
        run_simple(sql, [a, b, tag])
        assert_hits(f"[simple] {sql} [{a}, {b}] (scatter-gather)", tag, ["s0", "s1"])
    except psycopg2.Error as e:
        assert e.pgcode == "SPC01", f"[simple] {sql}: got {e.pgcode} {e.pgerror}, expected SPC01 (until scatter-gather)"
        assert hits(tag) == {}, f"[simple] {sql}: refused but ran on {hits(tag)}"
    tag = new_tag("multi-read/ext")
    r = run_ext(to_dollar(sql), [a, b, tag])
    if r.error:
        assert r.sqlstate == "SPC01", f"[extended] {sql}: got {r.sqlstate} {r.error}, expected SPC01"
        assert hits(tag) == {}, f"[extended] {sql}: refused but ran on {hits(tag)}"
    else:
        assert_hits(f"[extended] {sql} [{a}, {b}] (scatter-gather)", tag, ["s0", "s1"])


# ------------------------------------------------------------------ transactions

def present(shard, k):
    return shard_query(shard, "SELECT count(*) FROM users WHERE id = %s", (k,))[0][0]


@test
def txn_second_write_shard_spt01_simple():
    a, b = fresh_keys()
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO users (id, name) VALUES (%s, 'txn-a')", (a,))
    try:
        cur.execute("INSERT INTO users (id, name) VALUES (%s, 'txn-b')", (b,))
        raise Failure("BEGIN; INSERT on s0; INSERT on s1: the second write succeeded, expected SPT01")
    except psycopg2.Error as e:
        assert e.pgcode == "SPT01", f"second-shard write: got {e.pgcode} {e.pgerror}"
    for stmt in ["SELECT 1", f"SELECT name FROM users WHERE id = {a}", f"INSERT INTO users (id) VALUES ({a})"]:
        try:
            cur.execute(stmt)
            raise Failure(f"after SPT01, {stmt!r} succeeded; expected 25P02")
        except psycopg2.Error as e:
            assert e.pgcode == "25P02", f"after SPT01, {stmt}: got {e.pgcode} {e.pgerror}"
    cur.execute("ROLLBACK")
    assert cur.statusmessage == "ROLLBACK"
    cur.execute("SELECT 1")  # usable again
    c.close()
    for i in range(N):
        assert present(i, a) == 0 and present(i, b) == 0, f"s{i} holds rows of the rolled-back transaction"


def fresh_keys():
    """A key on s0 then one on s1 from 61..200, not used before (users holds 1..60)."""
    global FRESH
    out = []
    for shard in (0, 1):
        k = next(k for k in range(61, 201) if OWNER[k] == shard and k not in FRESH)
        FRESH.add(k)
        out.append(k)
    return out


FRESH = set()


@test
def txn_second_write_shard_spt01_extended():
    a, b = fresh_keys()
    problems, transcript = [], []

    def step(sql, params=()):
        r = w.extended(sql, list(params))
        transcript.append(f"{sql} {list(params)} -> {r.sqlstate or r.tag} (status {r.status})")
        return r

    with proxy_wire() as w:
        r = step("BEGIN")
        assert r.error is None and r.status == "T", r.error
        r = step("INSERT INTO users (id, name) VALUES ($1, $2)", [a, "txn-ext-a"])
        assert r.error is None and r.tag == "INSERT 0 1", r.error
        r = step("INSERT INTO users (id, name) VALUES ($1, $2)", [b, "txn-ext-b"])
        assert r.sqlstate == "SPT01", f"[extended] second-shard write in a transaction: {r.sqlstate} {r.error}"
        if r.status != "E":
            problems.append(f"ReadyForQuery after SPT01 is {r.status!r}, expected 'E'")
        for sql, params in [("SELECT $1::int", [1]), ("SELECT name FROM users WHERE id = $1", [a]),
                            ("UPDATE users SET name = 'after-spt01' WHERE id = $1", [a])]:
            r = step(sql, params)
            if r.sqlstate != "25P02":
                problems.append(f"after SPT01, {sql} {params}: {r.sqlstate or r.tag} (status {r.status}), "
                                "expected 25P02")
        r = step("COMMIT")  # COMMIT of a failed transaction rolls back, as in PostgreSQL
        if not (r.error is None and r.tag == "ROLLBACK" and r.status == "I"):
            problems.append(f"COMMIT after SPT01: {r.sqlstate or r.tag} (status {r.status}); expected ROLLBACK")
        assert w.extended("SELECT 1").rows == [["1"]]
    for i in range(N):
        if present(i, a) or present(i, b):
            problems.append(f"s{i} holds rows of the aborted transaction: "
                            f"{shard_query(i, 'SELECT id, name FROM users WHERE id IN (%s, %s)', (a, b))}")
    assert not problems, "[extended] BEGIN; INSERT on s0; INSERT on s1 (SPT01); ...:\n  " + \
        "\n  ".join(problems) + "\n  transcript:\n    " + "\n    ".join(transcript)


@test
def pipelined_reads_across_shards_one_sync():
    """One Parse, then Bind/Describe/Execute per key with keys alternating between the
    shards, one Sync: every Execute is answered, in order, as PostgreSQL would."""
    keys = [key_on(0, 0), key_on(1, 0), key_on(0, 1), key_on(1, 1), key_on(1, 2), key_on(0, 2)]
    msgs = [pgwire.parse_msg("SELECT id, name FROM users WHERE id = $1", "pipe_rd")]
    for k in keys:
        msgs += [pgwire.bind_msg([k], statement="pipe_rd"), pgwire.describe_msg("P"), pgwire.execute_msg()]
    msgs.append(pgwire.sync_msg())
    with proxy_wire() as w:
        w.send(msgs)
        got = w.recv_until("Z")
        types = "".join(t for t, _ in got)
        want = "1" + "2TDC" * len(keys) + "Z"
        assert types == want, f"pipelined reads over both shards: got {types!r}, expected {want!r}"
        ids = [int(pgwire.decode_data_row(b)[0]) for t, b in got if t == "D"]
        assert ids == keys, f"rows out of order: {ids} vs {keys}"
        assert got[-1][1] == b"I"
        assert w.extended("SELECT 1").rows == [["1"]]


@test
def pipelined_writes_across_shards_are_one_transaction():
    """An extended batch is one transaction in PostgreSQL (until its Sync): writes to a
    second shard in it are SPT01 (cross_shard_writes: refuse) and nothing of the batch
    stays; a batch that fails on the second shard after writing the first leaves
    nothing either."""
    a, b = fresh_keys()
    msgs = [pgwire.parse_msg("INSERT INTO users (id, name) VALUES ($1, 'pipe')", "pipe_wr")]
    for k in [a, b]:
        msgs += [pgwire.bind_msg([k], statement="pipe_wr"), pgwire.describe_msg("P"), pgwire.execute_msg()]
    msgs.append(pgwire.sync_msg())
    with proxy_wire() as w:
        w.send(msgs)
        got = w.recv_until("Z")
        types = "".join(t for t, _ in got)
        assert types == "12nCEZ", f"write batch over both shards: {types!r}"
        err = pgwire.decode_fields(got[-2][1])
        assert err["C"] == "SPT01", err
        assert got[-1][1] == b"I"
        assert present(0, a) == 0 and present(1, b) == 0, "the refused batch left rows"
        # Write on s0, then a read failing on s1 (division by zero): nothing stays.
        w.send([pgwire.parse_msg("INSERT INTO users (id, name) VALUES ($1, 'pipe2')"),
                pgwire.bind_msg([a]), pgwire.execute_msg(),
                pgwire.parse_msg("SELECT 1 / (id - id) FROM users WHERE id = $1"),
                pgwire.bind_msg([key_on(1, 0)]), pgwire.execute_msg(), pgwire.sync_msg()])
        got = w.recv_until("Z")
        types = "".join(t for t, _ in got)
        assert types == "12C12EZ", f"write on s0 then an error on s1 in one batch: {types!r}"
        assert pgwire.decode_fields(got[-2][1])["C"] == "22012"
        assert got[-1][1] == b"I"
        assert present(0, a) == 0, "the failed batch's write on s0 was committed"
        # A syntax error in a batch is reported once (as PostgreSQL does), then Sync.
        w.send([pgwire.parse_msg("SELEC 1"), pgwire.bind_msg([]), pgwire.describe_msg("P"),
                pgwire.execute_msg(), pgwire.sync_msg()])
        types = "".join(t for t, _ in w.recv_until("Z"))
        assert types == "EZ", f"syntax error in an extended batch: {types!r}"
        assert w.extended("SELECT 1").rows == [["1"]]


@test
def txn_keyless_write_in_transaction_spt01():
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("BEGIN")
    tag = new_tag("txn-keyless")
    try:
        cur.execute("UPDATE users SET name = name WHERE (SELECT hit(%s))", (tag,))
        raise Failure("BEGIN; UPDATE on every shard: succeeded, expected SPT01")
    except psycopg2.Error as e:
        assert e.pgcode == "SPT01", (e.pgcode, e.pgerror)
    try:
        cur.execute("SELECT 1")
        raise Failure("after SPT01 SELECT 1 succeeded")
    except psycopg2.Error as e:
        assert e.pgcode == "25P02", (e.pgcode, e.pgerror)
    cur.execute("ROLLBACK")
    c.close()
    assert hits(tag) == {}, f"the refused multi-shard write left effects: {hits(tag)}"


@test
def txn_psycopg2_implicit_transaction():
    a, b = fresh_keys()
    c = psycopg2.connect(host=HOST, port=PROXY.port, user="app", password="secret", dbname="app")
    cur = c.cursor()
    cur.execute("INSERT INTO users (id, name) VALUES (%s, 'pg2-a')", (a,))
    try:
        cur.execute("INSERT INTO users (id, name) VALUES (%s, 'pg2-b')", (b,))
        raise Failure("psycopg2 transaction writing s0 then s1: expected SPT01")
    except psycopg2.Error as e:
        assert e.pgcode == "SPT01", (e.pgcode, e.pgerror)
    c.rollback()
    cur.execute("SELECT 1")
    c.commit()
    c.close()
    for i in range(N):
        assert present(i, a) == 0 and present(i, b) == 0


@test
def txn_reads_two_shards_writes_one_commits():
    a, b = key_on(0, 1), key_on(1, 1)
    t_read_a, t_read_b, t_write = new_tag("txn-read-a"), new_tag("txn-read-b"), new_tag("txn-write")
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("SELECT name FROM users WHERE id = %s AND (SELECT hit(%s))", (a, t_read_a))
    assert cur.fetchall() == [(f"user{a}",)]
    cur.execute("SELECT name FROM users WHERE id = %s AND (SELECT hit(%s))", (b, t_read_b))
    assert cur.fetchall() == [(f"user{b}",)]
    cur.execute("UPDATE users SET name = 'committed' WHERE id = %s AND (SELECT hit(%s))", (b, t_write))
    assert cur.statusmessage == "UPDATE 1"
    # the transaction reads its own write
    cur.execute("SELECT name FROM users WHERE id = %s", (b,))
    assert cur.fetchall() == [("committed",)]
    # a second write on the same shard is fine
    cur.execute("UPDATE users SET score = score WHERE id = %s", (key_on(1, 2),))
    cur.execute("COMMIT")
    assert cur.statusmessage == "COMMIT"
    c.close()
    assert shard_query(1, "SELECT name FROM users WHERE id = %s", (b,)) == [("committed",)]
    # the reads ran inside the transaction on each shard and were committed there
    assert_hits("transaction read on s0", t_read_a, ["s0"])
    assert_hits("transaction read on s1", t_read_b, ["s1"])
    assert_hits("transaction write on s1", t_write, ["s1"])
    # the same in the extended protocol, writing s0 after reading s1
    t_read, t_write = new_tag("txn-ext-read"), new_tag("txn-ext-write")
    with proxy_wire() as w:
        assert w.extended("BEGIN").error is None
        r = w.extended("SELECT name FROM users WHERE id = $1 AND (SELECT hit($2))", [b, t_read])
        assert r.error is None and r.rows == [["committed"]], (r.error, r.rows)
        r = w.extended("UPDATE users SET name = $1 WHERE id = $2 AND (SELECT hit($3))", ["ext-committed", a, t_write])
        assert r.error is None and r.tag == "UPDATE 1", (r.error, r.tag)
        r = w.extended("COMMIT")
        assert r.error is None and r.tag == "COMMIT" and r.status == "I", (r.error, r.tag)
    assert shard_query(0, "SELECT name FROM users WHERE id = %s", (a,)) == [("ext-committed",)]
    assert_hits("extended transaction read on s1", t_read, ["s1"])
    assert_hits("extended transaction write on s0", t_write, ["s0"])


@test
def txn_rollback_leaves_nothing():
    a = key_on(0, 1)
    tag = new_tag("txn-rb")
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("UPDATE users SET name = 'rolled-back' WHERE id = %s AND (SELECT hit(%s))", (a, tag))
    cur.execute("ROLLBACK")
    c.close()
    assert shard_query(0, "SELECT name FROM users WHERE id = %s", (a,)) != [("rolled-back",)]
    assert hits(tag) == {}


# ------------------------------------------------------------------ syntax errors

@test
def syntax_errors_as_postgresql_reports_them():
    bad = ["SELEC * FROM users",
           "SELECT * FROM users WHERE id = = 5",
           "SELECT * FROM users WHERE id = 5 AND",
           "INSERT INTO users (id) VALUES (1",
           "UPDATE users SET WHERE id = 1",
           "SELECT 'unterminated",
           "SELECT * FROM users WHERE name = 'ü' AND AND id = 1"]
    with direct_wire(0) as d, proxy_wire() as w:
        for sql in bad:
            want = d.query(sql).error
            got = w.query(sql).error
            assert want and want["C"] == "42601", (sql, want)
            assert got is not None, f"[simple] {sql!r}: no error through the proxy"
            for f in ("C", "M", "P"):
                assert got.get(f) == want.get(f), \
                    f"[simple] {sql!r}: field {f}: proxy {got.get(f)!r}, PostgreSQL {want.get(f)!r}"
            # extended protocol: the error comes at Parse
            want = d.extended(sql).error
            got = w.extended(sql).error
            assert got is not None, f"[extended] {sql!r}: no error through the proxy"
            for f in ("C", "M", "P"):
                assert got.get(f) == want.get(f), \
                    f"[extended] {sql!r}: field {f}: proxy {got.get(f)!r}, PostgreSQL {want.get(f)!r}"
        # the session is fine afterwards, in and out of a transaction
        assert w.query("SELECT 1").rows == [["1"]]
        assert w.query("BEGIN").status == "T"
        r = w.query("SELEC 1")
        assert r.sqlstate == "42601" and r.status == "E", (r.error, r.status)
        assert w.query("SELECT 1").sqlstate == "25P02"
        assert w.query("ROLLBACK").status == "I"


# ------------------------------------------------------------------ main

def check_soft():
    if SOFT:
        raise AssertionError(f"{len(SOFT)} case(s) failed:\n" + "\n".join(SOFT))


def main():
    print(f"databases {DB}")
    return sptest.run_tests(TESTS, setup, teardown, before_each=SOFT.clear, after_each=check_soft,
                            watch=lambda: [PROXY])


if __name__ == "__main__":
    sys.exit(main())
