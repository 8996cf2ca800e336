#!/usr/bin/env python3
"""Placement: rows loaded through splitpoint land on exactly the shard that owns them.

Two shards (the shared instances PG0 and PG1, each with a fresh database rt_<random>
made for this run and dropped at the end). Distributions: hash over 16 partitions with
a bigint key (hb), a text key (ht) and a uuid key (hu); the SPEC §2 range example
(upto 1000 -> s0, upto 2000 -> s1, rest -> s1; table rg); the SPEC §2 list example
(jp, kr -> s0; us, eu -> s1; default s0; table ls); a reference table (ref).

Tables and an index are created through the proxy (DDL broadcast, checked on both
shards). Rows are loaded through the proxy by single-row INSERT, multi-row INSERT with
rows for both shards and RETURNING (every returned row and the command tag checked),
prepared INSERTs over the extended protocol with text and binary parameters (int8,
int4 into a bigint key, unspecified type, text, uuid), and COPY FROM STDIN in text,
csv (with header, quoted commas and newlines) and binary format. Then each shard is
read DIRECTLY and must hold exactly the rows whose partition maps to it, with the
right values, and nothing else. The expected hash partition of every key comes from
PostgreSQL itself: a temporary `PARTITION BY HASH (k)` table with MODULUS 16 on a
shard, each key's tableoid giving its remainder; partition r belongs to shard i when
floor(i*P/N) <= r < floor((i+1)*P/N) (the default placement). Reference rows must be
on both shards.

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 180

import io
import os
import random
import secrets
import struct
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST, PG_PORTS, superuser  # noqa: E402

WORKDIR = sptest.workdir("rt-place")
DB = "rt_" + secrets.token_hex(4)
P = 16  # hash partitions
N = 2   # shards
SEED = int(os.environ.get("RT_SEED", "20241130"))  # fixed: every run loads the same data
rng = random.Random(SEED)

# ------------------------------------------------------------------ harness


def shard_conn(i):
    """A direct connection to shard i's test database (not through the proxy)."""
    return sptest.connect(PG_PORTS[i], DB)


PROXY = None


def proxy_conn():
    return sptest.connect(PROXY.port, "app")


def proxy_wire():
    return pgwire.connect(HOST, PROXY.port, "app", "app", password="secret", timeout=20)


def sql_of(query, params):
    """The statement text psycopg2 sends, for failure messages."""
    return query if params is None else query % tuple(repr(p) for p in params)


# ------------------------------------------------------------------ expected placement

def hash_owner(remainder):
    for i in range(N):
        if (i * P) // N <= remainder < ((i + 1) * P) // N:
            return i
    raise AssertionError(remainder)


def pg_hash_remainders(sqltype, keys):
    """{key text: remainder} as PostgreSQL's own PARTITION BY HASH (MODULUS P) puts them."""
    keys = list(keys)
    c = shard_conn(0)
    cur = c.cursor()
    cur.execute(f"CREATE TEMP TABLE hp (k {sqltype}) PARTITION BY HASH (k)")
    for r in range(P):
        cur.execute(f"CREATE TEMP TABLE hp_{r} PARTITION OF hp FOR VALUES WITH (MODULUS {P}, REMAINDER {r})")
    cur.execute(f"INSERT INTO hp SELECT unnest(%s::{sqltype}[])", (keys,))
    cur.execute("SELECT k::text, tableoid::regclass::text FROM hp")
    out = {k: int(t.rsplit("_", 1)[1]) for k, t in cur.fetchall()}
    cur.execute("DROP TABLE hp")
    c.close()
    assert len(out) == len(set(keys)), (len(out), len(keys))
    return out


def range_owner(k):
    k = int(k)
    if k < 1000:
        return 0
    return 1  # [1000, 2000) -> s1, [2000, inf) -> s1


def list_owner(key):
    region = key.rsplit("#", 1)[0]
    return {"jp": 0, "kr": 0, "us": 1, "eu": 1}.get(region, 0)  # default: s0


LS_IDS = iter(range(1, 1 << 30))


def ls_rows(regions, tag):
    """{'region#id': v} with fresh ids."""
    out = {}
    for r in regions:
        i = next(LS_IDS)
        out[f"{r}#{i}"] = f"ls-{tag}-{r}-{i}"
    return out


def ls_split(key):
    r, i = key.rsplit("#", 1)
    return r, int(i)


# ------------------------------------------------------------------ tables and expectations

# table -> (key column, key SQL type, {key text: v}, set of uncertain key texts)
TABLES = {
    "hb": ["id", "bigint"],
    "ht": ["name", "text"],
    "hu": ["u", "uuid"],
    "rg": ["id", "bigint"],
    "ls": ["region || '#' || id", "text"],  # key: region; rows told apart by id
}
EXPECTED = {t: {} for t in list(TABLES) + ["ref"]}
UNCERTAIN = {t: set() for t in EXPECTED}


def loading(table, rows):
    """Context: rows (key text -> v) become expected when the block succeeds, uncertain
    (may or may not be there, but if there then on the right shard) when it fails."""
    class Ctx:
        def __enter__(self):
            for k in rows:
                assert k not in EXPECTED[table] and k not in UNCERTAIN[table], f"test bug: {table} key {k!r} reused"
            return self

        def __exit__(self, et, ev, tb):
            if et is None:
                EXPECTED[table].update(rows)
            else:
                UNCERTAIN[table].update(rows)
            return False
    return Ctx()


def fresh(table, keys):
    """The keys not loaded into `table` yet."""
    return [k for k in keys if str(k) not in EXPECTED[table] and str(k) not in UNCERTAIN[table]]


def new_uuid():
    return str(uuid.UUID(int=rng.getrandbits(128)))


TESTS = []
REF_COUNT_PROBLEMS = []


def ref_count(stmt, got, want):
    """A write to a reference table runs on every shard, but the client must see the
    count one PostgreSQL would report, not the sum over the shards. Checked at the end
    (verify_reference_write_counts) so the data checks still run."""
    if got != want:
        REF_COUNT_PROBLEMS.append(f"{stmt}: command tag {got!r}, expected {want!r}")


def test(fn):
    TESTS.append(fn)
    return fn


# ------------------------------------------------------------------ setup / DDL

def setup():
    for port in PG_PORTS:
        c = superuser(port)
        c.cursor().execute(f"CREATE DATABASE {DB} OWNER app")
        c.close()
    global PROXY
    PROXY = sptest.Proxy("placement", f"""
        auth: scram-sha-256
        users:
          - {{ name: app, password: secret }}
        shards:
          - {{ name: s0, host: {HOST}, port: {PG_PORTS[0]}, database: {DB}, user: app, password: secret }}
          - {{ name: s1, host: {HOST}, port: {PG_PORTS[1]}, database: {DB}, user: app, password: secret }}
        distributions:
          - name: by_id
            method: hash
            partitions: {P}
            tables: {{ hb: id }}
          - name: by_name
            method: hash
            partitions: {P}
            tables: {{ ht: name }}
          - name: by_uuid
            method: hash
            partitions: {P}
            tables: {{ hu: u }}
          - name: by_id_range
            method: range
            ranges:
              - {{ upto: 1000, shard: s0 }}
              - {{ upto: 2000, shard: s1 }}
              - {{ shard: s1 }}
            tables: {{ rg: id }}
          - name: by_region
            method: list
            lists: {{ s0: [jp, kr], s1: [us, eu] }}
            default: s0
            tables: {{ ls: region }}
        reference_tables: [ref]
        """, WORKDIR).start()


def teardown():
    if PROXY is not None:
        PROXY.stop()
    for port in PG_PORTS:
        try:
            c = superuser(port)
            c.cursor().execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            c.close()
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {DB} on port {port}: {e}")


DDL = [
    "CREATE TABLE hb (id bigint PRIMARY KEY, v text)",
    "CREATE TABLE ht (name text PRIMARY KEY, v text)",
    "CREATE TABLE hu (u uuid PRIMARY KEY, v text)",
    "CREATE TABLE rg (id bigint PRIMARY KEY, v text)",
    "CREATE TABLE ls (region text, id int, v text, PRIMARY KEY (region, id))",
    "CREATE TABLE ref (code text PRIMARY KEY, v text)",
    "CREATE INDEX hb_v_idx ON hb (v)",
]


@test
def ddl_through_proxy_reaches_both_shards():
    c = proxy_conn()
    cur = c.cursor()
    for stmt in DDL:
        cur.execute(stmt)
        expected_tag = "CREATE INDEX" if "INDEX" in stmt else "CREATE TABLE"
        assert cur.statusmessage == expected_tag, (stmt, cur.statusmessage)
    c.close()
    for i in range(N):
        s = shard_conn(i)
        cur = s.cursor()
        for name in ["hb", "ht", "hu", "rg", "ls", "ref", "hb_v_idx"]:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
            assert cur.fetchone()[0], f"shard s{i}: {name} missing after DDL through the proxy"
        cur.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = 'hu'::regclass AND attname = 'u'")
        assert cur.fetchone()[0] == "uuid"
        s.close()


# ------------------------------------------------------------------ loading: simple protocol

def int_keys_single():
    ks = list(range(1, 41)) + list(range(-10, 0)) + [0, 2**62, -(2**62), 2**63 - 1, -(2**63)]
    return ks


@test
def single_row_inserts_simple_protocol():
    c = proxy_conn()
    cur = c.cursor()
    # hb: bigint keys incl. negatives and the int8 extremes (a negative literal is a
    # unary minus in the parse tree; -9223372036854775808 only fits after folding).
    rows = {str(k): f"hb-single-{k}" for k in int_keys_single()}
    with loading("hb", rows):
        for k, v in rows.items():
            q = f"INSERT INTO hb (id, v) VALUES ({k}, %s)"
            cur.execute(q, (v,))
            assert cur.statusmessage == "INSERT 0 1", (sql_of(q, (v,)), cur.statusmessage)
    # ht: text keys, multibyte, quotes, the empty string.
    names = ["alice", "bob", "o'brien", "", " ", "東京", "ключ", "😀 emoji", "Straße", "a\\b", "tab\there",
             "UPPER", "upper"] + [f"name-{i}" for i in range(20)]
    rows = {n: f"ht-single-{i}" for i, n in enumerate(names)}
    with loading("ht", rows):
        for n, v in rows.items():
            cur.execute("INSERT INTO ht (name, v) VALUES (%s, %s)", (n, v))
            assert cur.statusmessage == "INSERT 0 1"
    # hu: uuid keys, as a plain literal, with an explicit cast and in upper case.
    rows = {}
    with loading("hu", rows):
        for i in range(20):
            u = new_uuid()
            rows[u] = f"hu-single-{i}"
        for i, (u, v) in enumerate(rows.items()):
            literal = u.upper() if i % 3 == 1 else u
            cast = "::uuid" if i % 3 == 2 else ""
            q = f"INSERT INTO hu (u, v) VALUES ('{literal}'{cast}, %s)"
            cur.execute(q, (v,))
            assert cur.statusmessage == "INSERT 0 1", sql_of(q, (v,))
    # rg: around every bound.
    rows = {str(k): f"rg-single-{k}" for k in [-10**12, -5, 0, 1, 998, 999, 1000, 1001, 1500, 1998, 1999, 2000,
                                               2001, 5000, 10**12]}
    with loading("rg", rows):
        for k, v in rows.items():
            # key not the first column
            cur.execute(f"INSERT INTO rg (v, id) VALUES (%s, {k})", (v,))
    # ls: listed, unlisted (default s0), letter case matters.
    rows = ls_rows(["jp", "kr", "us", "eu", "br", "JP", "de", "Us", "us", "eu", "jp", ""], "single")
    with loading("ls", rows):
        for k, v in rows.items():
            r, i = ls_split(k)
            cur.execute("INSERT INTO ls (region, id, v) VALUES (%s, %s, %s)", (r, i, v))
            assert cur.statusmessage == "INSERT 0 1"
    # ref: reference table, written on every shard.
    rows = {f"ref-{i}": f"ref-single-{i}" for i in range(10)}
    with loading("ref", rows):
        for k, v in rows.items():
            cur.execute("INSERT INTO ref (code, v) VALUES (%s, %s)", (k, v))
            ref_count("INSERT INTO ref (code, v) VALUES (...)", cur.statusmessage, "INSERT 0 1")
    c.close()


def check_returning(table, cols_sql, values_sql, params, expect_rows, key_of=None):
    """Multi-row INSERT ... RETURNING through psycopg2 and through a raw simple query:
    every row comes back once, one RowDescription, tag INSERT 0 n."""
    q = f"INSERT INTO {table} {cols_sql} VALUES {values_sql} RETURNING *"
    c = proxy_conn()
    cur = c.cursor()
    cur.execute(q, params)
    got = cur.fetchall()
    assert cur.statusmessage == f"INSERT 0 {len(expect_rows)}", (sql_of(q, params), cur.statusmessage)
    assert cur.rowcount == len(expect_rows), (cur.rowcount, len(expect_rows))
    got = sorted((key_of(r) if key_of else str(r[0]), r[-1]) for r in got)
    assert got == sorted(expect_rows), f"{sql_of(q, params)}\nreturned {got}\nexpected {sorted(expect_rows)}"
    c.close()


@test
def multi_row_insert_both_shards_returning():
    # hb: 12 rows that cover both shards (checked below with PostgreSQL's remainders).
    keys = list(range(100, 112))
    rem = pg_hash_remainders("bigint", keys)
    assert {hash_owner(rem[str(k)]) for k in keys} == {0, 1}, "test bug: keys all on one shard"
    rows = {str(k): f"hb-multi-{k}" for k in keys}
    with loading("hb", rows):
        values = ",".join(["(%s, %s)"] * len(keys))
        params = [x for k in keys for x in (k, rows[str(k)])]
        check_returning("hb", "(id, v)", values, params, [(str(k), rows[str(k)]) for k in keys])
    # the same through a raw simple query: exactly one T, n D, one C
    keys = list(range(120, 130))
    rows = {str(k): f"hb-multi-raw-{k}" for k in keys}
    with loading("hb", rows):
        with proxy_wire() as w:
            q = "INSERT INTO hb VALUES " + ",".join(f"({k}, '{v}')" for k, v in rows.items()) + " RETURNING id, v"
            r = w.query(q)
            assert r.error is None, (q, r.error)
            kinds = [t for t, _ in r.messages]
            assert kinds.count("T") == 1 and kinds.count("D") == len(keys) and kinds.count("C") == 1, (q, kinds)
            assert r.tag == f"INSERT 0 {len(keys)}", (q, r.tag)
            assert sorted(map(tuple, r.rows)) == sorted(rows.items()), (q, r.rows)
            assert r.status == "I"
    # ht, hu, rg (across the 1000 bound), ls, ref
    names = [f"multi-{i}-ü" for i in range(12)]
    rows = {n: f"ht-multi-{i}" for i, n in enumerate(names)}
    with loading("ht", rows):
        check_returning("ht", "(name, v)", ",".join(["(%s, %s)"] * len(rows)),
                        [x for kv in rows.items() for x in kv], list(rows.items()))
    rows = {new_uuid(): f"hu-multi-{i}" for i in range(12)}
    with loading("hu", rows):
        check_returning("hu", "(u, v)", ",".join(["(%s, %s)"] * len(rows)),
                        [x for kv in rows.items() for x in kv], list(rows.items()))
    rows = {str(k): f"rg-multi-{k}" for k in [-3, 10, 990, 1010, 1990, 2010, 3000]}
    with loading("rg", rows):
        check_returning("rg", "(id, v)", ",".join(["(%s, %s)"] * len(rows)),
                        [x for k, v in rows.items() for x in (int(k), v)], list(rows.items()))
    rows = ls_rows(["fr", "us", "jp", "eu", "kr", "us"], "multi")  # s0 and s1
    with loading("ls", rows):
        check_returning("ls", "(region, id, v)", ",".join(["(%s, %s, %s)"] * len(rows)),
                        [x for k, v in rows.items() for x in (*ls_split(k), v)],
                        [(k, v) for k, v in rows.items()], key_of=lambda r: f"{r[0]}#{r[1]}")
    rows = {f"ref-m{i}": f"ref-multi-{i}" for i in range(5)}
    with loading("ref", rows):
        c = proxy_conn()
        cur = c.cursor()
        cur.execute("INSERT INTO ref VALUES " + ",".join(["(%s, %s)"] * 5) + " RETURNING code, v",
                    [x for kv in rows.items() for x in kv])
        got = cur.fetchall()
        # A reference write runs on every shard, but the client sees it once.
        assert sorted(got) == sorted(rows.items()), \
            f"INSERT INTO ref (5 rows) RETURNING code, v: the client got {len(got)} rows, expected each of the 5 " \
            f"once (a reference write runs on every shard, its RETURNING rows must come back once): {sorted(got)}"
        ref_count("INSERT INTO ref VALUES (5 rows) RETURNING code, v", cur.statusmessage, "INSERT 0 5")
        c.close()


# ------------------------------------------------------------------ loading: extended protocol

def ext_prepare(w, name, sql, oids=()):
    w.send([pgwire.parse_msg(sql, name, oids), pgwire.sync_msg()])
    r = w.query_collect()
    assert r.error is None, (sql, r.error)


def ext_exec(w, name, params, formats=()):
    w.send([pgwire.bind_msg(params, "", name, formats), pgwire.describe_msg("P"), pgwire.execute_msg(),
            pgwire.sync_msg()])
    return w.query_collect()


def ext_insert_rows(table, sql, rows_params, oids=(), formats=(), expect_tag="INSERT 0 1"):
    with proxy_wire() as w:
        ext_prepare(w, "ins", sql, oids)
        for params in rows_params:
            r = ext_exec(w, "ins", params, formats)
            assert r.error is None, (sql, params, formats, r.error)
            assert r.tag == expect_tag, (sql, params, r.tag)
            assert r.status == "I", r.status


@test
def extended_text_parameters():
    rows = {str(k): f"hb-ext-text-{k}" for k in list(range(200, 220)) + [-200, -201]}
    with loading("hb", rows):
        ext_insert_rows("hb", "INSERT INTO hb (id, v) VALUES ($1, $2)", [[k, v] for k, v in rows.items()])
    names = [f"ext-text-{i}-é" for i in range(15)] + ["北京"]
    rows = {n: f"ht-ext-text-{i}" for i, n in enumerate(names)}
    with loading("ht", rows):
        ext_insert_rows("ht", "INSERT INTO ht (name, v) VALUES ($1, $2)", [[k, v] for k, v in rows.items()])
    rows = {new_uuid(): f"hu-ext-text-{i}" for i in range(15)}
    with loading("hu", rows):
        ext_insert_rows("hu", "INSERT INTO hu (u, v) VALUES ($1, $2)", [[k, v] for k, v in rows.items()])
    rows = {str(k): f"rg-ext-text-{k}" for k in [-7, 500, 999 - 2, 1002, 1997, 2002, 99999]}
    with loading("rg", rows):
        ext_insert_rows("rg", "INSERT INTO rg (id, v) VALUES ($1::bigint, $2)", [[k, v] for k, v in rows.items()])
    rows = ls_rows(["pt", "us", "kr", "eu"], "ext-text")
    with loading("ls", rows):
        ext_insert_rows("ls", "INSERT INTO ls (region, id, v) VALUES ($1, $2, $3)",
                        [[*ls_split(k), v] for k, v in rows.items()])


@test
def extended_binary_parameters():
    # int8 binary with the type declared in Parse
    rows = {str(k): f"hb-ext-bin8-{k}" for k in list(range(300, 320)) + [-300, 2**40]}
    with loading("hb", rows):
        ext_insert_rows("hb", "INSERT INTO hb (id, v) VALUES ($1, $2)",
                        [[struct.pack("!q", int(k)), v] for k, v in rows.items()], oids=[20, 25], formats=[1, 0])
    # int4 binary into a bigint key (PostgreSQL casts int4 -> int8)
    rows = {str(k): f"hb-ext-bin4-{k}" for k in list(range(400, 410)) + [-400]}
    with loading("hb", rows):
        ext_insert_rows("hb", "INSERT INTO hb (id, v) VALUES ($1, $2)",
                        [[struct.pack("!i", int(k)), v] for k, v in rows.items()], oids=[23, 25], formats=[1, 0])
    # binary with the type left to the server (oid 0): bigint from the column
    rows = {str(k): f"hb-ext-bin0-{k}" for k in range(500, 510)}
    with loading("hb", rows):
        ext_insert_rows("hb", "INSERT INTO hb (id, v) VALUES ($1, $2)",
                        [[struct.pack("!q", int(k)), v.encode()] for k, v in rows.items()], oids=[0, 0],
                        formats=[1])
    # text key in binary format (UTF-8 bytes), both params binary
    names = [f"ext-bin-{i}-ñ" for i in range(15)] + ["ソウル"]
    rows = {n: f"ht-ext-bin-{i}" for i, n in enumerate(names)}
    with loading("ht", rows):
        ext_insert_rows("ht", "INSERT INTO ht (name, v) VALUES ($1, $2)",
                        [[k.encode(), v.encode()] for k, v in rows.items()], oids=[25, 25], formats=[1, 1])
    # uuid binary (16 bytes)
    rows = {new_uuid(): f"hu-ext-bin-{i}" for i in range(15)}
    with loading("hu", rows):
        ext_insert_rows("hu", "INSERT INTO hu (u, v) VALUES ($1, $2)",
                        [[uuid.UUID(k).bytes, v] for k, v in rows.items()], oids=[2950, 25], formats=[1, 0])
    # range key binary int8
    rows = {str(k): f"rg-ext-bin-{k}" for k in [-9, 333, 996, 1003, 1996, 2003, 77777]}
    with loading("rg", rows):
        ext_insert_rows("rg", "INSERT INTO rg (id, v) VALUES ($1, $2)",
                        [[struct.pack("!q", int(k)), v] for k, v in rows.items()], oids=[20, 25], formats=[1, 0])
    # list key binary text
    rows = ls_rows(["ch", "us", "jp", "eu"], "ext-bin")
    with loading("ls", rows):
        ext_insert_rows("ls", "INSERT INTO ls (region, id, v) VALUES ($1, $2, $3)",
                        [[ls_split(k)[0].encode(), struct.pack("!i", ls_split(k)[1]), v] for k, v in rows.items()],
                        oids=[25, 23, 25], formats=[1, 1, 0])


@test
def extended_multi_row_insert_both_shards():
    # SPEC §3: INSERT ... VALUES rows are grouped by shard whatever the protocol.
    keys = list(range(600, 610))
    rem = pg_hash_remainders("bigint", keys)
    assert {hash_owner(rem[str(k)]) for k in keys} == {0, 1}
    rows = {str(k): f"hb-ext-multi-{k}" for k in keys}
    with loading("hb", rows):
        sql = "INSERT INTO hb (id, v) VALUES " + ",".join(f"(${2 * i + 1}, ${2 * i + 2})" for i in range(len(keys))) \
            + " RETURNING id, v"
        params = [x for kv in rows.items() for x in kv]
        with proxy_wire() as w:
            r = w.extended(sql, params)
            assert r.error is None, f"extended multi-row INSERT over both shards: {r.error}"
            assert r.tag == f"INSERT 0 {len(keys)}", r.tag
            assert sorted(map(tuple, r.rows)) == sorted(rows.items()), r.rows


@test
def extended_insert_reference_table():
    # A reference write goes to every shard, in the extended protocol too.
    rows = {f"ref-e{i}": f"ref-ext-{i}" for i in range(4)}
    with loading("ref", rows):
        ext_insert_rows("ref", "INSERT INTO ref (code, v) VALUES ($1, $2)", [[k, v] for k, v in rows.items()])


# ------------------------------------------------------------------ loading: COPY

def copy_text_escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


@test
def copy_text_key_not_first():
    rows = {str(k): f"hb-copy-{k}\tTAB\\back" for k in list(range(1000, 1200)) + list(range(-1200, -1000))}
    rows["1200"] = "hb-copy-newline\nsecond line"
    with loading("hb", rows):
        data = "".join(f"{copy_text_escape(v)}\t{k}\n" for k, v in rows.items())
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY hb (v, id) FROM STDIN", io.StringIO(data))
        assert cur.rowcount == len(rows), (cur.rowcount, len(rows))
        c.close()
    rows = {f"ref-c{i}": f"ref-copy-{i}" for i in range(30)}
    with loading("ref", rows):
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY ref FROM STDIN", io.StringIO("".join(f"{k}\t{v}\n" for k, v in rows.items())))
        ref_count("COPY ref FROM STDIN (30 rows)", f"COPY {cur.rowcount}", "COPY 30")
        c.close()
    rows = {str(k): f"rg-copy-{k}" for k in fresh("rg", list(range(900, 1100)) + list(range(1950, 2050)))}
    with loading("rg", rows):
        c = proxy_conn()
        cur = c.cursor()
        data = "".join(f"{k}\t{v}\n" for k, v in rows.items())
        cur.copy_expert("COPY rg FROM STDIN (FORMAT text)", io.StringIO(data))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()


def csv_quote(s):
    return '"' + s.replace('"', '""') + '"'


@test
def copy_csv_with_header():
    names = [f"csv-{i}" for i in range(150)] + ["with,comma", 'with "quotes"', "multi\nline key", "日本語", "ε"]
    rows = {n: f"ht-csv-{i},x\n\"y\"" if i % 10 == 0 else f"ht-csv-{i}" for i, n in enumerate(names)}
    with loading("ht", rows):
        data = "name,v\n" + "".join(f"{csv_quote(k)},{csv_quote(v)}\n" for k, v in rows.items())
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY ht (name, v) FROM STDIN WITH (FORMAT csv, HEADER true)", io.StringIO(data))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()
    regions = ["ar", "bo", "us", "eu", "jp", "kr", "kr-x", "US", "us ", "eu"] * 5
    rows = ls_rows(regions, "csv")
    with loading("ls", rows):
        data = "region,id,v\n" + "".join(f"{csv_quote(ls_split(k)[0])},{ls_split(k)[1]},{v}\n" for k, v in rows.items())
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY ls FROM STDIN (FORMAT csv, HEADER)", io.StringIO(data))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()


def binary_copy(rows, encoders):
    out = bytearray(b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0))
    for row in rows:
        out += struct.pack("!h", len(row))
        for value, enc in zip(row, encoders):
            if value is None:
                out += struct.pack("!i", -1)
            else:
                b = enc(value)
                out += struct.pack("!i", len(b)) + b
    out += struct.pack("!h", -1)
    return bytes(out)


@test
def copy_binary():
    rows = {new_uuid(): f"hu-bin-{i}" for i in range(200)}
    with loading("hu", rows):
        payload = binary_copy(rows.items(), [lambda u: uuid.UUID(u).bytes, lambda s: s.encode()])
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY hu (u, v) FROM STDIN (FORMAT binary)", io.BytesIO(payload))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()
    rows = {str(k): f"rg-bin-{k}"
            for k in fresh("rg", list(range(-50, 0)) + list(range(1100, 1150)) + list(range(2100, 2150)))}
    with loading("rg", rows):
        payload = binary_copy(rows.items(), [lambda k: struct.pack("!q", int(k)), lambda s: s.encode()])
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY rg (id, v) FROM STDIN WITH (FORMAT binary)", io.BytesIO(payload))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()
    rows = {str(k): f"hb-bin-{k}" for k in range(2000, 2100)}
    with loading("hb", rows):
        # key second, and a NULL value column
        payload = binary_copy([(None if int(k) % 7 == 0 else v, k) for k, v in rows.items()],
                              [lambda s: s.encode(), lambda k: struct.pack("!q", int(k))])
        for k in list(rows):
            if int(k) % 7 == 0:
                rows[k] = None
        c = proxy_conn()
        cur = c.cursor()
        cur.copy_expert("COPY hb (v, id) FROM STDIN (FORMAT binary)", io.BytesIO(payload))
        assert cur.rowcount == len(rows), f"COPY reported {cur.rowcount} rows, sent {len(rows)}"
        c.close()


# ------------------------------------------------------------------ verification on the shards

def shard_rows(i, table, keycol):
    s = shard_conn(i)
    cur = s.cursor()
    cur.execute(f"SELECT {keycol}::text, v FROM {table}")
    out = cur.fetchall()
    s.close()
    return out


def verify(table, owner_of):
    keycol = TABLES[table][0]
    expected, uncertain = EXPECTED[table], UNCERTAIN[table]
    problems, seen = [], {}
    for i in range(N):
        for k, v in shard_rows(i, table, keycol):
            if k in seen:
                problems.append(f"key {k!r} on s{seen[k]} AND on s{i}")
            seen[k] = i
            if k not in expected and k not in uncertain:
                problems.append(f"s{i} holds unexpected row {k!r}")
                continue
            want = owner_of(k)
            if want != i:
                problems.append(f"key {k!r} is on s{i}, its partition belongs to s{want}")
            if k in expected and expected[k] != v:
                problems.append(f"key {k!r} on s{i}: v = {v!r}, expected {expected[k]!r}")
    for k in expected:
        if k not in seen:
            problems.append(f"key {k!r} (should be on s{owner_of(k)}) is on no shard")
    if problems:
        raise AssertionError(f"{table}: {len(problems)} placement problem(s):\n  " + "\n  ".join(problems[:40]))
    print(f"     {table}: {len(seen)} rows checked, "
          f"{sum(1 for x in seen.values() if x == 0)} on s0, {sum(1 for x in seen.values() if x == 1)} on s1")


def hash_owner_fn(sqltype, table):
    keys = set(EXPECTED[table]) | set(UNCERTAIN[table])
    for i in range(N):
        keys |= {k for k, _ in shard_rows(i, table, TABLES[table][0])}
    rem = pg_hash_remainders(sqltype, keys)
    return lambda k: hash_owner(rem[k])


@test
def verify_hash_bigint_placement():
    verify("hb", hash_owner_fn("bigint", "hb"))


@test
def verify_hash_text_placement():
    verify("ht", hash_owner_fn("text", "ht"))


@test
def verify_hash_uuid_placement():
    verify("hu", hash_owner_fn("uuid", "hu"))


@test
def verify_range_placement():
    verify("rg", range_owner)


@test
def verify_list_placement():
    verify("ls", list_owner)


@test
def verify_both_shards_used():
    # Sanity: every sharded table has rows on both shards (else the checks above prove little).
    for table in ["hb", "ht", "hu", "rg"]:
        for i in range(N):
            assert shard_rows(i, table, TABLES[table][0]), f"{table}: no rows on s{i}"
    for i in range(N):
        assert shard_rows(i, "ls", TABLES["ls"][0]), f"ls: no rows on s{i}"


@test
def verify_reference_on_every_shard():
    expected = EXPECTED["ref"]
    copies = []
    for i in range(N):
        got = dict(shard_rows(i, "ref", "code"))
        copies.append(got)
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected) - UNCERTAIN["ref"])
        wrong = sorted(k for k in expected if k in got and got[k] != expected[k])
        assert not missing and not extra and not wrong, \
            f"ref on s{i}: missing {missing[:10]}, unexpected {extra[:10]}, wrong values {wrong[:10]}"
    assert copies[0] == copies[1], "the reference table differs between s0 and s1: " \
        f"{sorted(set(copies[0].items()) ^ set(copies[1].items()))[:10]}"


@test
def verify_reference_write_counts():
    distinct = sorted(set(REF_COUNT_PROBLEMS))
    assert not distinct, "reference-table writes report the sum over shards:\n  " + "\n  ".join(distinct)


# ------------------------------------------------------------------ main

def main():
    print(f"seed {SEED} (set RT_SEED for other data), databases {DB}")
    return sptest.run_tests(TESTS, setup, teardown, watch=lambda: [PROXY])


if __name__ == "__main__":
    sys.exit(main())
