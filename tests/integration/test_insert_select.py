#!/usr/bin/env python3
"""INSERT ... SELECT and INSERT ... DEFAULT VALUES into sharded tables (SPEC 3, issue
#13), differential: the same statements through splitpoint over 3 shards and on one
plain PostgreSQL database give the same tables, tags, RETURNING rows and errors.

- run where the rows are: the key is a co-located table's key, passed through (plain,
  grouped by the key, ON CONFLICT, RETURNING, with a reference-table join);
- pulled through the proxy: a key computed from the source key, no column list, a
  GROUP BY of another distribution (merge), string_agg (combine step), generate_series
  (no table), a reference table, another distribution's table, assignment casts
  (numeric into int), zero rows with RETURNING, generated keys with RETURNING in the
  SELECT's order, the extended protocol with parameters (psycopg 3);
- errors: the SELECT's own (22012), a duplicate key (23505) inside a block, more rows
  than scatter.max_insert_select_rows (SPS02); the tables unchanged after each;
- INSERT ... DEFAULT VALUES with a generated key;
- every row stored once, on the shard that owns its key.
"""
# test-timeout: 300

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg")
import psycopg  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("insert_select")
DBS = None
EXTRA = None
PLAIN = None
PROXY = None
TABLES = {
    "src": "id, g, v, name",
    "dst": "id, g, v, name",
    "other": "k, w",
    "agg": "g, n, total",
    "seqd": "src_id, note",
    "ref_tab": "code, label",
}
SCHEMA = [
    "CREATE TABLE src (id int PRIMARY KEY, g int, v numeric, name text)",
    "CREATE TABLE dst (id int PRIMARY KEY, g int, v numeric, name text)",
    "CREATE TABLE other (k int PRIMARY KEY, w int)",
    "CREATE TABLE agg (g int PRIMARY KEY, n bigint, total numeric)",
    "CREATE TABLE seqd (id bigserial PRIMARY KEY, src_id int, note text)",
    "CREATE TABLE ref_tab (code int PRIMARY KEY, label text)",
    "INSERT INTO src SELECT x, x % 13, x * 0.7, 'n' || x FROM generate_series(1, 300) x",
    "INSERT INTO other SELECT x, x * 3 FROM generate_series(1, 40) x",
    "INSERT INTO ref_tab SELECT x, 'label' || x FROM generate_series(1, 5) x",
]
MAX_ROWS = 2000


def config(db, extra):
    p0, p1 = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {db}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s1, host: 127.0.0.1, port: {p1}, database: {db}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s2, host: 127.0.0.1, port: {p0}, database: {extra}, user: app, password: secret, pool_size: 10 }}
    distributions:
      - name: by_id
        method: hash
        partitions: 12
        tables: {{ src: id, dst: id, seqd: id }}
      - name: by_k
        method: hash
        partitions: 6
        tables: {{ other: k }}
      - name: by_g
        method: range
        ranges:
          - {{ upto: 5, shard: s0 }}
          - {{ upto: 10, shard: s1 }}
          - {{ shard: s2 }}
        tables: {{ agg: g }}
    reference_tables: [ref_tab]
    scatter: {{ max_insert_select_rows: {MAX_ROWS} }}
    """


def shard_dbs():
    p0, p1 = sptest.PG_PORTS
    return [(p0, DBS.name), (p1, DBS.name), (p0, EXTRA.name)]


def setup():
    global DBS, EXTRA, PLAIN, PROXY
    DBS = sptest.Databases("inssel")
    EXTRA = sptest.Databases("insselx")
    PLAIN = sptest.Databases("insselp")
    PROXY = sptest.Proxy("insert_select", config(DBS.name, EXTRA.name), WORK).start()
    for conn in (proxy(), plain()):
        cur = conn.cursor()
        for s in SCHEMA:
            cur.execute(s)
        conn.close()


def teardown():
    if PROXY:
        PROXY.stop()
    for d in (DBS, EXTRA, PLAIN):
        if d:
            d.drop()


def proxy():
    return PROXY.connect(DBS.name)


def plain():
    return sptest.connect(sptest.PG_PORTS[0], PLAIN.name)


def run(conn, sql, params=None):
    """(tag, rows or None, sqlstate or None) of one statement."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        rows = cur.fetchall() if cur.description else None
        return (cur.statusmessage, rows, None)
    except psycopg2.Error as e:
        return (None, None, e.pgcode)


def tables_of(conn):
    cur = conn.cursor()
    out = {}
    for t, cols in TABLES.items():
        cur.execute(f"SELECT {cols} FROM {t} ORDER BY {cols}")
        out[t] = cur.fetchall()
    return out


def same(sql, sort=False, params=None):
    """The statement through the proxy and on plain PostgreSQL: same answer, same tables."""
    a, b = proxy(), plain()
    got, want = run(a, sql, params), run(b, sql, params)
    if sort:
        got = (got[0], sorted(got[1]) if got[1] is not None else None, got[2])
        want = (want[0], sorted(want[1]) if want[1] is not None else None, want[2])
    assert got == want, f"{sql}\n proxy: {got}\n plain: {want}"
    ta, tb = tables_of(a), tables_of(b)
    for t in TABLES:
        assert ta[t] == tb[t], f"after {sql}: table {t} differs ({len(ta[t])} rows vs {len(tb[t])})"
    a.close()
    b.close()
    return got


def run_where_the_rows_are():
    same("INSERT INTO dst (id, g, v, name) SELECT id, g, v, name FROM src WHERE id <= 100")
    same("INSERT INTO dst (id, g, v, name) SELECT s.id, r.code, s.v, r.label FROM src s JOIN ref_tab r ON r.code = s.g "
         "WHERE s.id BETWEEN 101 AND 140")
    same("INSERT INTO dst (id, g, v, name) SELECT id, count(*)::int, sum(v), min(name) FROM src WHERE id > 280 GROUP BY id")
    same("INSERT INTO dst (id, g, v, name) SELECT id, g, v, 'dup' FROM src WHERE id <= 10 "
         "ON CONFLICT (id) DO UPDATE SET name = excluded.name")
    same("INSERT INTO dst (id, g, v, name) SELECT id, g, v, name FROM src WHERE id <= 20 ON CONFLICT DO NOTHING")
    same("INSERT INTO dst (id, g, v, name) SELECT id, g, v, name FROM src WHERE id BETWEEN 141 AND 160 RETURNING id, name",
         sort=True)
    same("INSERT INTO dst (id, g, v, name) SELECT id, g, v, name FROM src WHERE id = 161")


def pulled_through_the_proxy():
    same("INSERT INTO dst (id, g, v, name) SELECT id + 1000, g, v, upper(name) FROM src WHERE id <= 50")
    same("INSERT INTO dst SELECT id + 2000, g, v, name FROM src WHERE id > 250")
    same("INSERT INTO agg (g, n, total) SELECT g, count(*), sum(v) FROM src GROUP BY g")
    same("INSERT INTO dst (id, g, v, name) SELECT g + 5000, count(*)::int, avg(v), string_agg(name, ',' ORDER BY id) "
         "FROM src GROUP BY g")
    same("INSERT INTO dst (id, g, v, name) SELECT x, x % 7, x * 1.5, 'gen' || x FROM generate_series(10000, 10999) x")
    same("INSERT INTO dst (id, g, v, name) SELECT code + 20000, code, 0, label FROM ref_tab")
    same("INSERT INTO dst (id, g, v, name) SELECT o.k + 30000, o.w, 1, 'o' FROM other o")
    # numeric into int: PostgreSQL's assignment cast (rounds), not the int input function.
    same("INSERT INTO dst (id, g, v, name) SELECT id + 60000, v * 1.3, v, name FROM src WHERE id <= 30")
    # Zero rows: the RETURNING description and INSERT 0 0.
    tag = same("INSERT INTO dst (id, g, v, name) SELECT id + 1000, g, v, name FROM src WHERE false RETURNING id")
    assert tag[0] == "INSERT 0 0" and tag[1] == [], tag
    # Keys generated from the default, RETURNING in the SELECT's order (the fresh
    # sequence gives both sides the same ids).
    same("INSERT INTO seqd (src_id, note) SELECT id, name FROM src WHERE id % 10 = 0 ORDER BY id DESC "
         "RETURNING id, src_id, note")
    same("INSERT INTO dst (id, g, v, name) SELECT id + 70000, g, v, name FROM src ORDER BY id LIMIT 25 RETURNING id, g")


def extended_protocol():
    """psycopg 3 with server-side parameters: the SELECT keeps them, the rows are literals."""
    def ext(dsn_port, db):
        return psycopg.connect(host="127.0.0.1", port=dsn_port, dbname=db, user="app", password="secret",
                               autocommit=True, prepare_threshold=0)
    a = ext(PROXY.port, DBS.name)
    b = ext(sptest.PG_PORTS[0], PLAIN.name)
    for sql, params in [
        ("INSERT INTO dst (id, g, v, name) SELECT id + 80000, g, v, name FROM src WHERE id <= %s RETURNING id, name",
         (12,)),
        ("INSERT INTO dst (id, g, v, name) SELECT id + %s, g, v, name FROM src WHERE g = %s", (90000, 3)),
        ("INSERT INTO dst (id, g, v, name) SELECT id + 95000, g, v, name FROM src WHERE id < %s", (0,)),
    ]:
        got = a.execute(sql, params, prepare=True)
        want = b.execute(sql, params, prepare=True)
        got_rows = sorted(got.fetchall()) if got.description else None  # (no ORDER BY: any order)
        want_rows = sorted(want.fetchall()) if want.description else None
        assert (got.statusmessage, got_rows) == (want.statusmessage, want_rows), (sql, got_rows, want_rows)
    a.close()
    b.close()
    pa, pb = proxy(), plain()
    assert tables_of(pa) == tables_of(pb)
    pa.close()
    pb.close()


def errors_change_nothing():
    tag, _, code = same("INSERT INTO dst (id, g, v, name) SELECT id + 100000, 1 / (id - id), v, name FROM src")
    assert code == "22012", code
    # A duplicate key inside a block: the block fails and ROLLBACK leaves nothing.
    for conn in (proxy(), plain()):
        conn.autocommit = False
        got = run(conn, "INSERT INTO dst (id, g, v, name) SELECT id + 1, g, v, name FROM src WHERE id <= 60")
        assert got[2] == "23505", got
        conn.rollback()
        conn.close()
    same("SELECT 1")
    # Beyond scatter.max_insert_select_rows: SPS02, nothing inserted.
    c = proxy()
    got = run(c, f"INSERT INTO dst (id, g, v, name) SELECT x, 0, 0, 'big' FROM generate_series(200001, {200001 + MAX_ROWS}) x")
    assert got[2] == "SPS02", got
    cur = c.cursor()
    cur.execute("SELECT count(*) FROM dst WHERE name = 'big'")
    assert cur.fetchone()[0] == 0
    # Exactly the limit: inserted.
    got = run(c, f"INSERT INTO dst (id, g, v, name) SELECT x, 0, 0, 'big' FROM generate_series(300001, {300000 + MAX_ROWS}) x")
    assert got[0] == f"INSERT 0 {MAX_ROWS}", got
    cur.execute("DELETE FROM dst WHERE name = 'big'")
    c.close()


def default_values():
    for conn in (proxy(), plain()):
        cur = conn.cursor()
        cur.execute("INSERT INTO seqd DEFAULT VALUES RETURNING src_id, note")
        assert cur.fetchall() == [(None, None)] and cur.statusmessage == "INSERT 0 1"
        conn.close()
    same("SELECT 1")


def rows_once_on_their_shard():
    for table in ("dst", "seqd"):
        seen = {}
        for i, (port, db) in enumerate(shard_dbs()):
            for (key,) in sptest.query(port, db, f"SELECT id FROM {table}"):
                assert key not in seen, f"{table} key {key} on s{seen[key]} and s{i}"
                seen[key] = i
        c = proxy()
        cur = c.cursor()
        for key, shard in list(seen.items())[:: max(1, len(seen) // 40)]:
            cur.execute(f"SELECT current_database(), inet_server_port() FROM {table} WHERE id = %s", (key,))
            port, db = shard_dbs()[shard]
            assert cur.fetchone() == (db, port), f"{table} key {key} stored on s{shard}, routed elsewhere"
        c.close()


TESTS = [run_where_the_rows_are, pulled_through_the_proxy, extended_protocol, errors_change_nothing, default_values,
         rows_once_on_their_shard]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
