#!/usr/bin/env python3
"""Drivers' cursors over several shards (issue #45, SPEC §14): a read of a sharded table
fetched a piece at a time gives the same rows, in the same order, in the same messages
as one PostgreSQL holding the same data.

Three shards and one plain database (sptest.ThreeShards); items hash-sharded (12
partitions, so its 103 rows lie on every shard), the same rows in the plain database.
Each scenario runs once through splitpoint and once against the plain database; the two
answers must be equal.

- asyncpg (python3-asyncpg) in a transaction: `conn.cursor(query)` then `fetch(5)` and
  `fetchrow()` until the end (Bind and Sync, then Executes with a row limit, each with
  its Sync: the named portal outlives the Sync of its Bind), with a parameter; and
  `async for` over a cursor with prefetch 7 (Bind + Execute in one batch).
- psycopg 3 (python3-psycopg) named cursors: DECLARE ... CURSOR with a parameter,
  fetchmany(5), fetchone, fetchall, and iteration with itersize 7.
- pgjdbc (libpostgresql-jdbc-java) with autocommit off and setFetchSize(7): a small
  Java program written to the work dir prints every row.
- The raw protocol (tests/lib/pgwire.py): a named portal bound in a block, executed in
  pieces of 40 rows across Syncs (RowDescription, DataRows, PortalSuspended, the last
  Execute's CommandComplete `SELECT 23`, an Execute after the end); Close of a portal
  and COMMIT end it (34000 at the next Execute), every message compared.
"""
# test-timeout: 300

import asyncio
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import clients  # noqa: E402
import pgwire  # noqa: E402
import sptest  # noqa: E402

clients.ensure_apt("python3-psycopg", "python3-asyncpg", "libpostgresql-jdbc-java")
if subprocess.run(["sh", "-c", "command -v javac && command -v java"], capture_output=True).returncode != 0:
    clients.ensure_apt("default-jdk-headless")

import asyncpg  # noqa: E402
import psycopg  # noqa: E402

WORK = sptest.workdir("driver_cursors")
JAR = "/usr/share/java/postgresql.jar"
DBS = sptest.ThreeShards("drvc")
PROXY = None
QUERY = "SELECT id, label FROM items ORDER BY id"
ROWS = 103


def config():
    return f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{DBS.shards_yaml()}
distributions:
  - name: by_id
    method: hash
    partitions: 12
    tables: {{ items: id }}
"""


def targets():
    """(what, port, database) of the proxy and of the plain database."""
    return [("splitpoint", PROXY.port, DBS.shards[0][1]), ("postgresql", DBS.plain[0], DBS.plain[1])]


def url(port, db):
    return f"postgresql://app:secret@{sptest.HOST}:{port}/{db}"


def setup():
    global PROXY
    DBS.create()
    PROXY = sptest.Proxy("drvc", config(), WORK).start()
    for _, port, db in targets():
        c = sptest.connect(port, db)
        cur = c.cursor()
        cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, label text)")
        cur.execute(f"INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, {ROWS}) g")
        c.close()
    on_shards = [sptest.query(port, db, "SELECT count(*) FROM items")[0][0] for port, db in DBS.shards]
    assert all(on_shards) and sum(on_shards) == ROWS, f"rows per shard: {on_shards}"


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


def same_everywhere(what, scenario):
    """Runs scenario(port, db) through the proxy and on the plain database; equal answers."""
    got = {name: scenario(port, db) for name, port, db in targets()}
    assert got["splitpoint"] == got["postgresql"], (
        f"{what}: splitpoint answered\n{got['splitpoint']}\nPostgreSQL answered\n{got['postgresql']}")
    return got["postgresql"]


async def asyncpg_cursors(port, db):
    conn = await asyncpg.connect(url(port, db), timeout=10)
    try:
        out = []
        async with conn.transaction():
            cur = await conn.cursor(QUERY)
            while batch := await cur.fetch(5):
                out.append([tuple(r) for r in batch])
            cur = await conn.cursor("SELECT id, label FROM items WHERE id > $1 ORDER BY id DESC", 90)
            out.append(tuple(await cur.fetchrow()))
            out.append([tuple(r) for r in await cur.fetch(4)])
            await cur.forward(2)  # (SQL MOVE FORWARD 2 on the portal)
            while (row := await cur.fetchrow()) is not None:
                out.append(tuple(row))
        async with conn.transaction():
            out.append([r["id"] async for r in conn.cursor(QUERY, prefetch=7)])
        out.append(await conn.fetchval("SELECT count(*) FROM items"))  # (the session goes on)
        return out
    finally:
        await conn.close()


@test
def asyncpg_cursor_over_three_shards():
    out = same_everywhere("asyncpg cursors", lambda port, db: asyncio.run(asyncpg_cursors(port, db)))
    assert out[0] == [(i, f"item {i}") for i in range(1, 6)] and len(out[20]) == 3, out[:2]
    assert out[-2] == list(range(1, ROWS + 1)), out[-2]


def psycopg_named(port, db):
    out = []
    with psycopg.connect(url(port, db)) as conn:
        with conn.transaction():
            with conn.cursor(name="pieces") as cur:
                cur.execute("SELECT id, label FROM items WHERE id > %s ORDER BY id", (3,))
                out.append(cur.fetchmany(5))
                out.append(cur.fetchone())
                out.append(cur.fetchall())
            with conn.cursor(name="iterated") as cur:
                cur.itersize = 7
                cur.execute(QUERY)
                out.append([r[0] for r in cur])
    return out


@test
def psycopg3_named_cursor_over_three_shards():
    out = same_everywhere("psycopg 3 named cursors", psycopg_named)
    assert out[0] == [(i, f"item {i}") for i in range(4, 9)] and out[-1] == list(range(1, ROWS + 1)), out[0]


JAVA = r"""
import java.sql.*;

// FetchSize PORT DB: autocommit off, setFetchSize(7): the rows of a read of items,
// then of one with a parameter, one line each.
public class FetchSize {
  public static void main(String[] a) throws Exception {
    String url = "jdbc:postgresql://127.0.0.1:" + a[0] + "/" + a[1] + "?user=app&password=secret";
    try (Connection c = DriverManager.getConnection(url)) {
      c.setAutoCommit(false);
      try (Statement s = c.createStatement()) {
        s.setFetchSize(7);
        try (ResultSet r = s.executeQuery("SELECT id, label FROM items ORDER BY id")) {
          while (r.next()) System.out.println(r.getLong(1) + " " + r.getString(2));
        }
      }
      try (PreparedStatement ps = c.prepareStatement("SELECT id FROM items WHERE id % ? = 0 ORDER BY id DESC")) {
        ps.setFetchSize(4);
        ps.setInt(1, 5);
        try (ResultSet r = ps.executeQuery()) {
          while (r.next()) System.out.println("p " + r.getLong(1));
        }
      }
      c.commit();
    }
  }
}
"""


@test
def jdbc_fetch_size_over_three_shards():
    src = os.path.join(WORK, "FetchSize.java")
    with open(src, "w") as f:
        f.write(JAVA)
    classes = os.path.join(WORK, "classes")
    os.makedirs(classes, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", JAR, src], check=True)

    def run(port, db):
        r = subprocess.run(["java", "-cp", f"{classes}:{JAR}", "FetchSize", str(port), db], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"java FetchSize: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout.splitlines()

    out = same_everywhere("JDBC setFetchSize", run)
    assert len(out) == ROWS + ROWS // 5 and out[0] == "1 item 1", out[:3]


def exchange(c, *messages):
    """Sends `messages`, then reads up to the ReadyForQuery: (type, what) of each reply."""
    c.send(b"".join(messages))
    out = []
    for t, body in c.recv_until(pgwire.READY_FOR_QUERY):
        if t == pgwire.DATA_ROW:
            out.append((t, pgwire.decode_data_row(body)))
        elif t == pgwire.COMMAND_COMPLETE:
            out.append((t, pgwire.decode_command_complete(body)))
        elif t == pgwire.ERROR_RESPONSE:
            out.append((t, pgwire.decode_fields(body)["C"]))
        elif t == pgwire.ROW_DESCRIPTION:
            out.append((t, [col.name for col in pgwire.decode_row_description(body)]))
        else:
            out.append((t, body))
    return out


def raw_portals(port, db):
    m = pgwire
    out = []
    with m.connect(sptest.HOST, port, "app", db, password="secret") as c:
        run = lambda *msgs: out.append(exchange(c, *msgs))  # noqa: E731
        run(m.query_msg("BEGIN"))
        run(m.parse_msg(QUERY, "s1"), m.bind_msg(portal="p1", statement="s1"), m.describe_msg("P", "p1"),
            m.sync_msg())
        for _ in range(4):  # 40, 40, the last 23 (SELECT 23), then none (SELECT 0)
            run(m.execute_msg("p1", 40), m.sync_msg())
        run(m.describe_msg("P", "p1"), m.close_msg("P", "p1"), m.sync_msg())
        run(m.execute_msg("p1", 5), m.sync_msg())  # closed: 34000, the block fails
        run(m.query_msg("ROLLBACK"))
        run(m.query_msg("BEGIN"))
        run(m.bind_msg(portal="p2", statement="s1"), m.sync_msg())
        run(m.execute_msg("p2", 100), m.flush_msg(), m.execute_msg("p2", 2), m.sync_msg())
        run(m.query_msg("COMMIT"))
        run(m.query_msg("BEGIN"))
        run(m.execute_msg("p2", 1), m.sync_msg())  # ended with its block: 34000
        run(m.query_msg("ROLLBACK"))
        run(m.bind_msg(portal="p3", statement="s1"), m.sync_msg())  # no block: gone at the Sync
        run(m.execute_msg("p3", 1), m.sync_msg())
    return out


@test
def raw_portal_in_pieces_as_postgresql():
    out = same_everywhere("a named portal executed in pieces (raw protocol)", raw_portals)
    tags = [x for step in out for x in step if x[0] in (pgwire.COMMAND_COMPLETE, pgwire.ERROR_RESPONSE)]
    assert (pgwire.COMMAND_COMPLETE, "SELECT 23") in tags and tags.count((pgwire.ERROR_RESPONSE, "34000")) == 3, tags


def teardown():
    if PROXY:
        PROXY.stop()
    DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS + [sptest.clean_shutdown], setup, teardown))
