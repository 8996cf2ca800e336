#!/usr/bin/env python3
"""Keys the proxy generates (SPEC 3, issue #13): an INSERT into a sharded table that
leaves its key column out, or writes DEFAULT there, gets keys from the column's own
default (bigserial, identity GENERATED ALWAYS / BY DEFAULT, gen_random_uuid()), drawn on
one shard, so they are unique across shards and proxies; each row lands on the shard
that owns its key; RETURNING and the command tag are PostgreSQL's.

Three shards (s0, s1 on the shared instances, s2 a second database on instance 0), the
tables created through the proxy (so every shard has the same sequence, and only the
combine shard's is drawn from):
- simple protocol (psycopg2): single-row and 30-row INSERTs with RETURNING, DEFAULT in
  the key's place (alone and beside an explicit key), identity ALWAYS (OVERRIDING SYSTEM
  VALUE added by the proxy), identity BY DEFAULT, a uuid default; inside a transaction
  (visible before COMMIT, gone after ROLLBACK); under cross_shard_writes: refuse, a
  generated key on a second shard of a block is SPT01; a column without a default:
  SPR01 saying so;
- extended protocol: psycopg 3 server-side prepared statements and executemany, asyncpg
  (binary parameters) fetchval and executemany;
- two proxies inserting at once: every key unique, every row stored once;
- columns other than the key whose default draws from a sequence (a bigserial id, an
  identity ALWAYS column, DEFAULT nextval(...)) in a table sharded by another column:
  filled from the combine shard's sequences by every way of inserting (VALUES with the
  columns left out or DEFAULT or nextval('s'), with and without a column list, extended protocol,
  executemany, INSERT ... SELECT run on one shard and pulled, COPY text/csv/binary):
  every value once across the shards, RETURNING gives them, the other shards' copies of
  the sequences untouched (before, each shard numbered its own rows: ids repeated);
- sequence functions (`SELECT nextval('s')`, currval, setval) from a session that has
  used every shard: all on the combine shard, whose sequences the keys come from, so
  the values are one sequence's (the other shards' copies stay untouched), in both
  protocols; in a block under cross_shard_writes: refuse they do not count as a write
  on a second shard;
- `SELECT lastval()` / `currval('s')` after an INSERT (or COPY) whose id the proxy drew:
  that id, in both protocols and through PHP's PDO (`lastInsertId()` with and without
  the sequence's name), until the session's own `nextval` takes over;
- DDL in other sessions while tables are made and filled (as `sysbench prepare
  --threads=4` does): every INSERT runs (the proxy forgot its table definitions after
  each DDL and, between learning a table's columns and routing the keyed INSERT, lost
  them again: "table definitions unavailable");
- afterwards, on the shards directly: each table's rows exactly once, each on the shard
  the proxy routes its key to, and the keys of one session increasing.
"""
# test-timeout: 300

import asyncio
import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg", "python3-asyncpg")
import asyncpg  # noqa: E402
import psycopg  # noqa: E402
import psycopg2  # noqa: E402

WORK = sptest.workdir("generated_keys")
DBS = None
EXTRA = None
PROXY = None
PROXY2 = None
TABLES = ("orders", "events", "idents", "docs")


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
        tables: {{ orders: id, events: id, idents: id, plain: id, notes: customer, tickets: tenant }}
      - name: by_uuid
        method: hash
        partitions: 6
        tables: {{ docs: id }}
    """


def shard_dbs():
    p0, p1 = sptest.PG_PORTS
    return [(p0, DBS.name), (p1, DBS.name), (p0, EXTRA.name)]


def on_shard(i, sql, params=None):
    return sptest.query(*shard_dbs()[i], sql, params)


def proxy_conn(p=None):
    return (p or PROXY).connect(DBS.name)


def setup():
    global DBS, EXTRA, PROXY, PROXY2
    DBS = sptest.Databases("genk")
    EXTRA = sptest.Databases("genkx")
    PROXY = sptest.Proxy("genkeys", config(DBS.name, EXTRA.name), WORK).start()
    PROXY2 = sptest.Proxy("genkeys2", config(DBS.name, EXTRA.name), WORK).start()
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount int)")
    cur.execute("CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text)")
    cur.execute("CREATE TABLE idents (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text)")
    cur.execute("CREATE TABLE docs (id uuid DEFAULT gen_random_uuid() PRIMARY KEY, v text)")
    cur.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)")
    c.close()


def teardown():
    for p in (PROXY, PROXY2):
        if p:
            p.stop()
    for d in (DBS, EXTRA):
        if d:
            d.drop()


def all_rows(table, cols="id"):
    """Every row of `table` on every shard, directly: [(shard, row...)]."""
    out = []
    for i in range(3):
        out += [(i,) + r for r in on_shard(i, f"SELECT {cols} FROM {table}")]
    return out


def owner_of(table, key):
    """(database, port) of the shard the proxy routes `key` to."""
    c = proxy_conn()
    cur = c.cursor()
    cur.execute(f"SELECT current_database(), inet_server_port() FROM {table} WHERE id = %s", (key,))
    row = cur.fetchone()
    c.close()
    return row


def simple_protocol():
    c = proxy_conn()
    cur = c.cursor()
    ids = []
    for n in range(20):
        cur.execute("INSERT INTO orders (customer, amount) VALUES (%s, %s) RETURNING id", ("a", n))
        assert cur.statusmessage == "INSERT 0 1", cur.statusmessage
        ids.append(cur.fetchone()[0])
    assert ids == sorted(ids) and len(set(ids)) == 20, ids
    # 30 rows in one statement: split over the shards, every row returned.
    values = ", ".join(f"('b', {n})" for n in range(30))
    cur.execute(f"INSERT INTO orders (customer, amount) VALUES {values} RETURNING id, customer, amount")
    rows = cur.fetchall()
    assert cur.statusmessage == "INSERT 0 30", cur.statusmessage
    # (RETURNING in the VALUES order, as PostgreSQL: ORMs match the keys to their objects so.)
    assert [r[2] for r in rows] == list(range(30)) and all(r[1] == "b" for r in rows), rows
    assert [r[0] for r in rows] == sorted(r[0] for r in rows), rows
    assert len({r[0] for r in rows} | set(ids)) == 50, "a generated key was used twice"
    # DEFAULT in the key's place, alone and beside an explicit key.
    cur.execute("INSERT INTO orders VALUES (DEFAULT, 'c', 5) RETURNING id, customer")
    got = cur.fetchone()
    assert got[1] == "c" and got[0] not in ids, got
    cur.execute("INSERT INTO orders (id, customer, amount) VALUES (DEFAULT, 'd', 1), (1000000, 'd', 2) RETURNING id")
    got = sorted(r[0] for r in cur.fetchall())
    assert len(got) == 2 and got[1] == 1000000 and got[0] < 1000000, got
    # Identity columns: ALWAYS takes the key only with OVERRIDING SYSTEM VALUE, which the
    # proxy adds; BY DEFAULT as a serial.
    cur.execute("INSERT INTO events (v) VALUES ('x'), ('y'), ('z') RETURNING id, v")
    ev = cur.fetchall()
    assert sorted(r[1] for r in ev) == ["x", "y", "z"] and len({r[0] for r in ev}) == 3, ev
    cur.execute("INSERT INTO idents (v) VALUES ('x') RETURNING id")
    first = cur.fetchone()[0]
    cur.execute("INSERT INTO idents (id, v) VALUES (DEFAULT, 'y') RETURNING id")
    assert cur.fetchone()[0] > first
    # A uuid default.
    cur.execute("INSERT INTO docs (v) VALUES " + ", ".join(f"('u{n}')" for n in range(20)) + " RETURNING id")
    docs = [r[0] for r in cur.fetchall()]
    assert len(set(docs)) == 20 and all(uuid.UUID(d) for d in docs), docs
    # No default: refused, saying why.
    try:
        cur.execute("INSERT INTO plain (v) VALUES ('x')")
        raise AssertionError("INSERT without a key into a table whose key has no default was accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "SPR01" and "no default" in str(e), (e.pgcode, str(e))
    c.close()


def in_transaction():
    c = proxy_conn()
    c.autocommit = False
    cur = c.cursor()
    cur.execute("INSERT INTO orders (customer, amount) VALUES ('txn', 1) RETURNING id")
    k = cur.fetchone()[0]
    cur.execute("SELECT customer FROM orders WHERE id = %s", (k,))
    assert cur.fetchone() == ("txn",)
    c.rollback()
    cur.execute("SELECT count(*) FROM orders WHERE id = %s", (k,))
    assert cur.fetchone()[0] == 0
    cur.execute("INSERT INTO orders (customer, amount) VALUES ('txn', 2) RETURNING id")
    k2 = cur.fetchone()[0]
    c.commit()
    assert k2 != k
    cur.execute("SELECT amount FROM orders WHERE id = %s", (k2,))
    assert cur.fetchone() == (2,)
    c.close()


def sequence_columns_besides_the_key():
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("CREATE SEQUENCE notes_extra")
    cur.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, n int GENERATED ALWAYS AS IDENTITY, customer int NOT NULL, "
                "body text, extra bigint DEFAULT nextval('notes_extra'))")
    returned = []
    cur.execute("INSERT INTO notes (customer, body) VALUES (1, 'one') RETURNING id, n, extra")
    returned += cur.fetchall()
    cur.execute("INSERT INTO notes (customer, body) VALUES " + ", ".join(f"({k}, 'many')" for k in range(2, 22)) +
                " RETURNING id, n, extra")
    returned += cur.fetchall()
    cur.execute("INSERT INTO notes (id, customer, body, extra) VALUES (DEFAULT, 30, 'default', DEFAULT), "
                "(DEFAULT, 31, 'default', DEFAULT) RETURNING id, n, extra")
    returned += cur.fetchall()
    cur.execute("INSERT INTO notes VALUES (DEFAULT, DEFAULT, 32, 'no list') RETURNING id, n, extra")  # (extra: appended)
    returned += cur.fetchall()
    cur.execute("INSERT INTO notes (id, customer, body, extra) VALUES (nextval('notes_id_seq'), 33, 'nextval', "
                "nextval('notes_extra'::regclass)), (nextval('notes_id_seq'), 34, 'nextval', 1000000) "
                "RETURNING id, n, extra")
    returned += cur.fetchall()
    assert len(returned) == 26 and all(v is not None for r in returned for v in r), returned
    cur.execute("INSERT INTO notes (customer, body) SELECT customer, 'on one shard' FROM notes WHERE customer = 5")
    cur.execute("INSERT INTO notes (customer, body) SELECT customer + 100, 'pulled' FROM notes WHERE customer < 10")
    cur.copy_expert("COPY notes (customer, body) FROM STDIN", io.StringIO("".join(f"{k}\tcopy\n" for k in range(40, 60))))
    cur.copy_expert("COPY notes (body, customer) FROM STDIN (FORMAT csv)",
                    io.StringIO("".join(f'"csv, {k}",{k}\r\n' for k in range(60, 70))))
    c.close()
    url = f"host=127.0.0.1 port={PROXY.port} dbname={DBS.name} user=app password=secret"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c3:
        for k in range(70, 75):
            assert c3.execute("INSERT INTO notes (customer, body) VALUES (%s, %s) RETURNING id",
                              (k, "extended")).fetchone()[0] is not None
        with c3.cursor() as cur3:
            cur3.executemany("INSERT INTO notes (customer, body) VALUES (%s, %s)", [(k, "many") for k in range(75, 90)])
            with cur3.copy("COPY notes (customer, body) FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["int4", "text"])
                for k in range(90, 100):
                    cp.write_row((k, "binary"))
    rows = all_rows("notes", "id, n, extra, customer, body")
    want = 26 + 1 + 10 + 20 + 10 + 5 + 15 + 10
    assert len(rows) == want, f"{len(rows)} rows, {want} inserted"
    for col in (1, 2, 3):
        values = [r[col] for r in rows]
        assert None not in values and len(set(values)) == want, f"column {col}: {len(set(values))} distinct of {want}"
    assert {r[0] for r in rows} == {0, 1, 2}, "notes on fewer than three shards"
    assert {tuple(r[1:4]) for r in rows} >= set(returned), "RETURNING gave values the rows do not hold"
    for seq in ("notes_id_seq", "notes_n_seq", "notes_extra"):
        copies = [on_shard(i, f"SELECT last_value, is_called FROM {seq}")[0] for i in range(3)]
        assert copies[0][1] and copies[1:] == [(1, False), (1, False)], (seq, copies)
    # nextval('s') as the key: drawn by the proxy too, the row on its key's shard.
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("INSERT INTO orders (id, customer, amount) VALUES (nextval('orders_id_seq'), 'nextval', 1), "
                "(nextval('orders_id_seq'), 'nextval', 2) RETURNING id")
    keys = [r[0] for r in cur.fetchall()]
    c.close()
    stored = {r[1]: r[0] for r in all_rows("orders", "id, customer") if r[2] == "nextval"}
    assert sorted(stored) == sorted(keys) and len(set(keys)) == 2, (keys, stored)
    for key, shard in stored.items():
        port, db = shard_dbs()[shard]
        assert owner_of("orders", key) == (db, port), f"orders key {key} on s{shard}, routed elsewhere"


def sequence_calls_on_one_shard():
    on = {}  # shard -> a key of orders stored there
    for shard, key in all_rows("orders"):
        on.setdefault(shard, key)
    assert len(on) == 3, on
    c = proxy_conn()
    cur = c.cursor()
    cur.execute("CREATE SEQUENCE tickets")
    got = []
    for n in range(12):
        cur.execute("SELECT id FROM orders WHERE id = %s", (on[n % 3],))  # (the session's last shard: each in turn)
        cur.execute("SELECT nextval('tickets')")
        got.append(cur.fetchone()[0])
        cur.execute("SELECT currval('tickets'), lastval()")
        assert cur.fetchone() == (got[-1], got[-1])
    assert got == list(range(1, 13)), got
    url = f"host=127.0.0.1 port={PROXY.port} dbname={DBS.name} user=app password=secret"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c3:
        for n in range(6):
            c3.execute("SELECT id FROM orders WHERE id = %s", (on[n % 3],))
            got.append(c3.execute("SELECT nextval(%s::regclass)", ("tickets",)).fetchone()[0])
    assert got == list(range(1, 19)), got
    cur.execute("SELECT setval('tickets', 100)")
    cur.execute("SELECT id FROM orders WHERE id = %s", (on[1],))
    cur.execute("SELECT nextval('tickets')")
    assert cur.fetchone()[0] == 101
    c.close()
    seqs = [on_shard(i, "SELECT last_value, is_called FROM tickets")[0] for i in range(3)]
    assert seqs == [(101, True), (1, False), (1, False)], seqs
    # Under refuse, a block that writes on one shard (not the combine shard) and takes
    # sequence values commits: the values are no write.
    body = config(DBS.name, EXTRA.name).rstrip() + "\n    transactions: { cross_shard_writes: refuse }\n"
    with sptest.Proxy("genkeys-seq-refuse", body, WORK) as p:
        c = proxy_conn(p)
        c.autocommit = False
        cur = c.cursor()
        cur.execute("UPDATE orders SET amount = amount WHERE id = %s", (on[1],))
        cur.execute("SELECT nextval('tickets')")
        assert cur.fetchone()[0] == 102
        cur.execute("UPDATE orders SET amount = amount WHERE id = %s", (on[1],))
        c.commit()
        c.close()
    on_shard(0, "DROP SEQUENCE tickets")
    on_shard(1, "DROP SEQUENCE tickets")
    on_shard(2, "DROP SEQUENCE tickets")


def refuse_mode_one_write_shard():
    """With cross_shard_writes: refuse, a block writes to one shard: a generated key that
    lands on another is SPT01, as an explicit one would be."""
    body = config(DBS.name, EXTRA.name).rstrip() + "\n    transactions: { cross_shard_writes: refuse }\n"
    with sptest.Proxy("genkeys-refuse", body, WORK) as p:
        c = proxy_conn(p)
        c.autocommit = False
        cur = c.cursor()
        code = None
        for n in range(40):
            try:
                cur.execute("INSERT INTO orders (customer, amount) VALUES ('refuse', %s) RETURNING id", (n,))
            except psycopg2.Error as e:
                code = e.pgcode
                break
        c.rollback()
        c.close()
    assert code == "SPT01", f"40 generated keys in one block under refuse: {code}"
    assert not any(r[2] == "refuse" for r in all_rows("orders", "id, customer")), "a refused block left rows"


def extended_protocol():
    url = f"host=127.0.0.1 port={PROXY.port} dbname={DBS.name} user=app password=secret"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c3:
        ids = [c3.execute("INSERT INTO orders (customer, amount) VALUES (%s, %s) RETURNING id", ("p3", n)).fetchone()[0]
               for n in range(15)]
        assert ids == sorted(ids) and len(set(ids)) == 15, ids
        with c3.cursor() as cur:
            cur.executemany("INSERT INTO orders (customer, amount) VALUES (%s, %s)", [("p3many", n) for n in range(25)])
        row = c3.execute("INSERT INTO events (v) VALUES (%s) RETURNING id, v", ("p3",)).fetchone()
        assert row[1] == "p3", row

    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=PROXY.port, database=DBS.name, user="app",
                                     password="secret")
        try:
            got = [await conn.fetchval("INSERT INTO orders (customer, amount) VALUES ($1, $2) RETURNING id", "apg", n)
                   for n in range(10)]
            assert len(set(got)) == 10 and all(isinstance(g, int) for g in got), got
            await conn.executemany("INSERT INTO orders (customer, amount) VALUES ($1, $2)",
                                   [("apgmany", n) for n in range(25)])
            d = await conn.fetchval("INSERT INTO docs (v) VALUES ($1) RETURNING id", "apg")
            assert isinstance(d, uuid.UUID), d
        finally:
            await conn.close()

    asyncio.run(run())
    c = proxy_conn()
    cur = c.cursor()
    for who, n in (("p3many", 25), ("apgmany", 25), ("p3", 15), ("apg", 10)):
        cur.execute("SELECT count(*), count(DISTINCT id) FROM orders WHERE customer = %s", (who,))
        assert cur.fetchone() == (n, n), who
    c.close()


def extended_inserts_parse_once():
    # A Parse/Bind/Execute INSERT that leaves its key out: the proxy rewrites it with the
    # keys, so the client's own text is prepared on no shard (it was, on some shard, for
    # every execution: a round trip for nothing), and the keyed text is prepared once per
    # backend under a name of its own (it was parsed again for every execution).
    import pgwire
    logs = sptest.shared_logs()
    c = pgwire.connect("127.0.0.1", PROXY.port, "app", DBS.name, password="secret", timeout=60)
    sql = "INSERT INTO orders (customer, amount) VALUES ($1, $2) RETURNING id -- gk_parse"
    c.extended(sql, ["warm", "0"]).raise_error()
    sptest.alter_system("SET log_min_duration_statement = 0")
    try:
        sizes = [os.path.getsize(p) for p in logs]
        n = 12
        ids = [int(c.extended(sql, ["parse_once", str(i)]).raise_error().rows[0][0]) for i in range(n)]
        time.sleep(0.5)
        own = keyed = 0
        for path, start in zip(logs, sizes):
            with open(path, errors="replace") as f:
                f.seek(start)
                for line in f:
                    if " parse " not in line:
                        continue
                    own += "gk_parse" in line  # (the keyed text has lost the comment)
                    keyed += 'orders (customer, amount, "id") values ($1, $2, $3) returning id' in line
    finally:
        sptest.alter_system("RESET log_min_duration_statement")
    c.close()
    print(f"     {n} INSERTs with drawn keys: {own} Parses of the client's text, {keyed} of the keyed one")
    assert len(set(ids)) == n, ids
    assert own == 0, f"the client's INSERT was prepared on a shard {own} times"
    assert 1 <= keyed <= 3, f"the keyed INSERT was parsed {keyed} times for {n} executions (want once per backend)"


def last_insert_id():
    # currval/lastval after an INSERT whose id the proxy drew: the drawn value, as had the
    # session's own nextval drawn it (drivers ask this way: PDO's lastInsertId, Doctrine,
    # DBD::Pg); before, the read went to a shard session that never drew it.
    c = proxy_conn()
    c.autocommit = True
    cur = c.cursor()
    cur.execute("CREATE TABLE tickets (id bigserial PRIMARY KEY, tenant int NOT NULL, body text)")

    def one(sql, params=None):
        cur.execute(sql, params)
        return cur.fetchone()[0]

    for tenant in range(1, 7):  # (every shard)
        got = one("INSERT INTO tickets (tenant, body) VALUES (%s, 'a') RETURNING id", (tenant,))
        assert one("SELECT lastval()") == got
        assert one("SELECT currval('tickets_id_seq')") == got
        assert one("SELECT pg_catalog.currval('public.tickets_id_seq'::regclass) AS last_id;") == got
    cur.execute("INSERT INTO tickets (tenant, body) VALUES (7, 'b'), (8, 'c') RETURNING id")
    ids = [r[0] for r in cur.fetchall()]
    assert one("SELECT LASTVAL()") == ids[-1], ids
    cur.execute("SELECT lastval() AS x")
    assert cur.description[0].name == "x"
    try:
        cur.execute("SELECT currval('no_such_seq')")
        raise AssertionError("currval of an unknown sequence answered")
    except psycopg2.Error as e:
        assert e.pgcode == "42P01", (e.pgcode, e.pgerror)
    # The session's own nextval takes over, as in PostgreSQL; then the next drawn id again.
    mine = one("SELECT nextval('tickets_id_seq')")
    assert one("SELECT lastval()") == mine
    got = one("INSERT INTO tickets (tenant, body) VALUES (9, 'd') RETURNING id")
    assert got != mine and one("SELECT lastval()") == got
    cur.copy_expert("COPY tickets (tenant, body) FROM STDIN", io.StringIO("".join(f"{k}\tcopy\n" for k in range(20))))
    last_copied = one("SELECT max(id) FROM tickets WHERE body = 'copy'")
    assert one("SELECT lastval()") == last_copied == one("SELECT currval('tickets_id_seq')")
    c.close()
    # Extended protocol: psycopg 3 prepares, PDO binds the sequence's name (currval($1)).
    url = f"host=127.0.0.1 port={PROXY.port} dbname={DBS.name} user=app password=secret"
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as c3:
        for tenant in (11, 12, 13):
            got = c3.execute("INSERT INTO tickets (tenant, body) VALUES (%s, 'e') RETURNING id", (tenant,)).fetchone()[0]
            assert c3.execute("SELECT currval(%s)", ("tickets_id_seq",)).fetchone()[0] == got
            assert c3.execute("SELECT lastval()").fetchone()[0] == got
    clients.ensure_apt("php-cli", "php-pgsql")
    php = f"""
    $db = new PDO('pgsql:host=127.0.0.1;port={PROXY.port};dbname={DBS.name}', 'app', 'secret',
                  [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
    $out = [];
    foreach ([21, 22, 23] as $t) {{
      $db->prepare("INSERT INTO tickets (tenant, body) VALUES (?, 'pdo')")->execute([$t]);
      $out[] = [$db->lastInsertId(), $db->lastInsertId('tickets_id_seq')];
    }}
    $ids = $db->query("SELECT id FROM tickets WHERE body = 'pdo' ORDER BY id")->fetchAll(PDO::FETCH_COLUMN);
    echo json_encode(['last' => $out, 'ids' => $ids]);
    """
    r = subprocess.run(["php", "-r", php], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout
    got = json.loads(r.stdout)
    print(f"     PDO lastInsertId(), lastInsertId('tickets_id_seq'): {got['last']}; ids {got['ids']}")
    assert [[int(a), int(b)] for a, b in got["last"]] == [[int(i), int(i)] for i in got["ids"]], got


def two_proxies():
    errors = []

    def writer(p, tag):
        try:
            c = proxy_conn(p)
            cur = c.cursor()
            for n in range(100):
                cur.execute("INSERT INTO orders (customer, amount) VALUES (%s, %s)", (tag, n))
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(f"{tag}: {e}")

    threads = [threading.Thread(target=writer, args=(p, f"w{i}")) for i, p in enumerate((PROXY, PROXY2, PROXY))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    rows = [r for r in all_rows("orders", "id, customer") if r[2] in ("w0", "w1", "w2")]
    assert len(rows) == 300 and len({r[1] for r in rows}) == 300, f"{len(rows)} rows, {len({r[1] for r in rows})} keys"


def ddl_in_other_sessions():
    # Through a proxy in transaction pooling (where it showed: a backend per statement,
    # so the proxy's own round trips wait for one). 4 sessions create and drop tables in
    # a loop; 2 others make their own table again and again and fill it with 70-row
    # INSERTs whose keys the proxy draws (a block of 64 keys: a round trip to the combine
    # shard each time) and INSERTs without a column list. (A race: the previous binary
    # failed 2 of 7 runs.)
    stop = threading.Event()
    errors, inserted = [], [0]
    # (Two shards on one instance: its DDL is quicker, so the cache is cleared more often.)
    p0 = sptest.PG_PORTS[0]
    proxy = sptest.Proxy("genkeys-txn", f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    pool_mode: transaction
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {p0}, database: {DBS.name}, user: app, password: secret, pool_size: 10 }}
      - {{ name: s2, host: 127.0.0.1, port: {p0}, database: {EXTRA.name}, user: app, password: secret, pool_size: 10 }}
    distributions:
      - {{ name: bursts, method: hash, partitions: 8, tables: {{ bursts0: id, bursts1: id }} }}
    """, WORK).start()

    def churn(i):
        cur = proxy_conn(proxy).cursor()
        while not stop.is_set():
            cur.execute(f"CREATE TABLE churn{i} (a int)")
            cur.execute(f"DROP TABLE churn{i}")

    def filler(i):
        c = proxy_conn(proxy)
        cur = c.cursor()
        while not stop.is_set():
            cur.execute(f"DROP TABLE IF EXISTS bursts{i}")
            cur.execute(f"CREATE TABLE bursts{i} (id bigserial PRIMARY KEY, k int)")
            try:
                for j in range(3):
                    cur.execute(f"INSERT INTO bursts{i} (k) VALUES " + ", ".join(["(1)"] * 70))
                    assert cur.rowcount == 70, cur.rowcount
                    cur.execute(f"INSERT INTO bursts{i} VALUES ({10 ** 6 + j}, 2)")
                    inserted[0] += 71
            except psycopg2.Error as e:
                errors.append(f"{e.pgcode}: {str(e).splitlines()[0]}")
        c.close()

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=filler, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    stop.wait(6)
    stop.set()
    for t in threads:
        t.join(60)
    proxy.stop()
    assert not errors, f"{len(errors)} failed INSERTs of {inserted[0] // 71 + len(errors)}: {sorted(set(errors))[:3]}"
    assert inserted[0] > 0


def rows_once_on_their_shard():
    for table in TABLES:
        rows = all_rows(table)
        keys = [r[1] for r in rows]
        assert len(keys) == len(set(keys)), f"{table}: a key stored twice"
        shards = {r[0] for r in rows}
        if table in ("orders", "docs"):
            assert len(shards) >= 2, f"{table}: every row on one shard {shards}"
        for shard, key in rows[:: max(1, len(rows) // 25)]:
            port, db = shard_dbs()[shard]
            assert owner_of(table, key) == (db, port), f"{table} key {key} stored on s{shard}, routed elsewhere"


def drawn_keys_over_shards_are_one_transaction():
    # A multi-row INSERT whose ids the proxy draws, rows landing on every shard, outside
    # a block: one transaction, as the client's one statement. One shard refuses its
    # rows (a CHECK only it has): no shard keeps any, in either protocol, and without
    # the CHECK all 30 rows are there.
    on_shard(1, "ALTER TABLE orders ADD CONSTRAINT gk_only_here CHECK (amount < 1000000)")
    values = ", ".join(["('atomic', %s)"] * 30)
    try:
        c = proxy_conn()
        cur = c.cursor()
        try:
            cur.execute(f"INSERT INTO orders (customer, amount) VALUES {values}", [1000000] * 30)
            raise AssertionError("rows refused by a CHECK on s1 accepted")
        except psycopg2.Error as e:
            assert e.pgcode == "23514" and "applied on no shard" in e.pgerror, (e.pgcode, e.pgerror)
        c.close()

        async def extended():
            a = await asyncpg.connect(host=sptest.HOST, port=PROXY.port, user="app", password="secret",
                                      database=DBS.name)
            try:
                await a.execute("INSERT INTO orders (customer, amount) VALUES " +
                                ", ".join(f"('atomic', ${i + 1})" for i in range(30)), *([1000000] * 30))
                raise AssertionError("rows refused by a CHECK on s1 accepted (extended)")
            except asyncpg.PostgresError as e:
                assert e.sqlstate == "23514" and "applied on no shard" in str(e), (e.sqlstate, str(e))
            finally:
                await a.close()

        asyncio.run(extended())
        left = [r for r in all_rows("orders", "id, customer") if r[2] == "atomic"]
        assert not left, f"rows of failed INSERTs left: {left}"
    finally:
        on_shard(1, "ALTER TABLE orders DROP CONSTRAINT gk_only_here")
    c = proxy_conn()
    c.cursor().execute(f"INSERT INTO orders (customer, amount) VALUES {values}", [5] * 30)
    c.close()
    shards = {r[0] for r in all_rows("orders", "id, customer") if r[2] == "atomic"}
    assert len([r for r in all_rows("orders", "id, customer") if r[2] == "atomic"]) == 30 and len(shards) == 3, shards


TESTS = [simple_protocol, in_transaction, sequence_columns_besides_the_key, sequence_calls_on_one_shard, refuse_mode_one_write_shard, extended_protocol, extended_inserts_parse_once, last_insert_id, two_proxies, ddl_in_other_sessions,
         drawn_keys_over_shards_are_one_transaction, rows_once_on_their_shard]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
