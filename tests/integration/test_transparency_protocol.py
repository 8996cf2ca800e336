#!/usr/bin/env python3
"""Transparency beyond psql scripts (test_transparency.py runs those): the extended
protocol in both pool modes, and what the transparency fixes must also do when tables
are sharded over two shards.

  - session mode, extended protocol: every transaction after the first really is a
    transaction (BEGIN/INSERT/ROLLBACK leaves nothing; now() is one value), also in the
    simple protocol, and a SAVEPOINT works;
  - a SET sent with Parse/Bind/Execute is the session's (seen on its next backend) and
    never leaks to the client that gets its old backend (transaction mode);
  - a statement that does not parse gets PostgreSQL's own error with every field
    (routine, file, position), in both protocols; in a block the proxy failed itself the
    block stays failed after it;
  - COMMIT/ROLLBACK outside a transaction: PostgreSQL's WARNING (25P01), extended too;
  - RESET of a parameter from the startup packet goes back to the client's value (in
    both protocols; a text that fails undoes its RESET); a bad startup value fails the
    login with PostgreSQL's error (FATAL 22023);
  - over two shards with a hash-sharded table: SQL-level PREPARE/EXECUTE inserts land on
    the shard that owns each key (the same shard a plain INSERT picks), in both pool
    modes, also among other statements of one text (run one by one); EXECUTE with a
    non-constant argument is refused with 0A000; in transaction
    mode another session's statement left on a pooled backend neither runs nor is
    dropped for a session that did not prepare it (26000);
    standard_conforming_strings = off routes an INSERT with a backslash-escaped quote
    by its key; the client's own PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK
    PREPARED on a key of the second shard; PREPARE TRANSACTION of a transaction on both
    shards is refused with 0A000 and rolls it back; a temp table in transaction mode pins
    the session (it stays visible across transactions while other clients rotate); a
    cursor over both shards (DECLARE, FETCH, MOVE, CLOSE, WITH HOLD), both pool modes;
  - an extended-protocol BEGIN, which the proxy holds when it starts its batch: the
    same messages as PostgreSQL's for BEGIN ISOLATION LEVEL (kept), a BEGIN bound but
    never executed, a named one, and a pipeline BEGIN / INSERT / error / Sync;
  - against PostgreSQL, message by message: texts with SQL PREPARE / EXECUTE among
    other statements; a text whose statement waits on a lock answers nothing until it
    ends; a notification that came while the proxy held a block's BEGIN comes before
    COMMIT's ReadyForQuery; a session-level advisory lock ends with its client's session.
Run by tests/run (PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import os
import select
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_transparency_protocol")
DBS = None
PROXIES = {}


def one_shard(mode):
    return (f"pool_mode: {mode}\nworkers: 1\nauth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
            f"shards:\n  - {{ name: s0, host: {HOST}, port: {sptest.PG_PORTS[0]}, database: {DBS.name}, "
            "pool_size: 2 }\n")


def two_shards(mode):
    shards = "".join(f"  - {{ name: s{i}, host: {HOST}, port: {p}, database: {DBS.name}, pool_size: 3 }}\n"
                     for i, p in enumerate(sptest.PG_PORTS))
    return (f"pool_mode: {mode}\nworkers: 1\nauth: scram-sha-256\nusers:\n  - {{ name: app, password: secret }}\n"
            f"transactions:\n  cross_shard_writes: two_phase\nshards:\n{shards}distributions:\n  - name: by_id\n    method: hash\n    partitions: 8\n"
            "    tables:\n      kv: id\n      kv_plain: id\n")


def raw(proxy, **params):
    return pgwire.connect(HOST, proxy.port, "app", DBS.name, password="secret", timeout=15, **params)


def setup():
    global DBS
    DBS = sptest.Databases("tpp")
    for i in range(2):
        c = DBS.shard(i)
        c.cursor().execute("CREATE TABLE kv (id bigint PRIMARY KEY, v text); "
                           "CREATE TABLE kv_plain (id bigint PRIMARY KEY, v text); CREATE TABLE t (a int)")
        c.close()
    for mode in ("session", "transaction"):
        PROXIES["one-" + mode] = sptest.Proxy("one-" + mode, one_shard(mode), WORK).start()
        PROXIES["two-" + mode] = sptest.Proxy("two-" + mode, two_shards(mode), WORK).start()


def teardown():
    for p in PROXIES.values():
        p.stop()
    if DBS:
        DBS.drop()


def ext(c, sql, params=()):
    return c.extended(sql, params)


def session_mode_transactions_are_transactions():
    c = raw(PROXIES["one-session"])
    c.query("DELETE FROM t").raise_error()
    for round_ in range(3):
        for sql in ("BEGIN", "INSERT INTO t VALUES (1)"):
            ext(c, sql).raise_error()
        r = ext(c, "ROLLBACK").raise_error()
        assert r.status == "I", r.status
        # simple protocol too, and now() is one value inside the block
        c.query("BEGIN").raise_error()
        c.query("INSERT INTO t VALUES (2)").raise_error()
        a = c.scalar("SELECT now()::text")
        c.query("SELECT pg_sleep(0.01)").raise_error()
        assert c.scalar("SELECT now()::text") == a, f"round {round_}: now() changed inside a block"
        c.query("SAVEPOINT s").raise_error()
        c.query("ROLLBACK TO s").raise_error()
        c.query("ROLLBACK").raise_error()
    assert c.scalar("SELECT count(*) FROM t") == "0", "a rolled-back row stayed"
    c.close()


def extended_set_is_the_sessions_and_does_not_leak():
    p = PROXIES["one-transaction"]
    c = raw(p)
    c.scalar("SELECT 1")
    ext(c, "SET work_mem = '9MB'").raise_error()
    h = raw(p)  # takes the backend c just left, in an open transaction
    h.query("BEGIN").raise_error()
    assert h.scalar("SHOW work_mem") == "4MB", "another client's extended-protocol SET leaked"
    assert c.scalar("SHOW work_mem") == "9MB", "the extended-protocol SET did not follow the client"
    h.query("ROLLBACK").raise_error()
    # A failed batch's SET is not the session's.
    c.send([pgwire.parse_msg("SET work_mem = '11MB'"), pgwire.bind_msg(), pgwire.execute_msg(),
            pgwire.parse_msg("SELECT 1/0"), pgwire.bind_msg(), pgwire.execute_msg(), pgwire.sync_msg()])
    assert c.query_collect().sqlstate == "22012"
    assert c.scalar("SHOW work_mem") == "9MB"
    c.close()
    h.close()


def syntax_errors_are_postgresqls_own():
    for name in ("one-session", "two-transaction"):
        c = raw(PROXIES[name])
        for r in (c.query("SELECT 1 +"), ext(c, "SELEC 1")):
            assert r.sqlstate == "42601", r.error
            assert r.error.get("R") == "scanner_yyerror" and r.error.get("F") == "scan.l", \
                f"{name}: not PostgreSQL's own error fields: {r.error}"
            assert "P" in r.error, r.error
        assert c.scalar("SELECT 2") == "2"
        c.close()
    # A block the proxy failed itself (a refused key update) stays failed: a shard that
    # reports the syntax error does not know the block is aborted.
    c = raw(PROXIES["two-transaction"])
    c.query("BEGIN").raise_error()
    r = c.query("UPDATE kv SET id = id + 4 WHERE id = 1")
    assert r.error is not None and r.status == "E", (r.error, r.status)
    r = c.query("SELEC 1")
    assert r.sqlstate == "42601" and r.status == "E", (r.error, r.status)
    assert c.query("SELECT 1").sqlstate == "25P02"
    assert c.query("ROLLBACK").status == "I"
    c.close()


def transaction_verbs_outside_a_transaction_warn():
    for name in ("one-session", "one-transaction", "two-session"):
        c = raw(PROXIES[name])
        for r in (c.query("COMMIT"), c.query("ROLLBACK"), ext(c, "COMMIT")):
            assert r.error is None, r.error
            assert [n.get("C") for n in r.notices] == ["25P01"], f"{name}: {r.notices}"
        r = c.query("COMMIT AND CHAIN")
        assert r.sqlstate == "25P01", (name, r.error)
        c.close()


def reset_goes_back_to_the_startup_value():
    # A bad startup value fails the login as PostgreSQL fails it (twice: not cached).
    for _ in range(2):
        try:
            raw(PROXIES["one-transaction"], DateStyle="nonsense").close()
            raise AssertionError("a login with DateStyle=nonsense succeeded")
        except pgwire.PgError as e:
            assert e.sqlstate == "22023" and e.fields.get("S") == "FATAL", e.fields
    for name in ("one-session", "one-transaction"):
        c = raw(PROXIES[name], DateStyle="SQL, DMY", options="-c work_mem=5MB --statement-timeout=7s")
        assert c.scalar("SHOW DateStyle") == "SQL, DMY"
        assert c.scalar("SHOW work_mem") == "5MB"
        assert c.scalar("SHOW statement_timeout") == "7s"
        c.query("SET DateStyle = ISO").raise_error()
        c.query("RESET DateStyle").raise_error()
        assert c.scalar("SHOW DateStyle") == "SQL, DMY", name
        c.query("SET work_mem = '1MB'").raise_error()
        c.query("SET work_mem TO DEFAULT").raise_error()
        assert c.scalar("SHOW work_mem") == "5MB", name
        c.query("RESET ALL").raise_error()
        assert c.scalar("SHOW statement_timeout") == "7s", name
        # The same through the extended protocol (Parse/Bind/Execute/Sync).
        c.query("SET DateStyle = ISO").raise_error()
        c.extended("RESET DateStyle").raise_error()
        assert c.scalar("SHOW DateStyle") == "SQL, DMY", f"{name}: extended RESET"
        c.query("SET work_mem = '1MB'").raise_error()
        c.extended("RESET ALL").raise_error()
        assert c.scalar("SHOW work_mem") == "5MB", f"{name}: extended RESET ALL"
        # A text that fails undoes its RESET, as any SET in it.
        c.query("SET DateStyle = ISO").raise_error()
        assert c.query("RESET DateStyle; SELECT 1/0").sqlstate == "22012"
        assert c.scalar("SHOW DateStyle") == "ISO, DMY", f"{name}: RESET of a failed text kept"
        c.close()
    # In transaction pooling the backend of an extended RESET reaches the next client
    # with the same settings with them again, not with the server's default.
    a, b = (raw(PROXIES["one-transaction"], DateStyle="SQL, DMY") for _ in range(2))
    a.extended("RESET DateStyle").raise_error()
    seen = {b.scalar("SHOW DateStyle") for _ in range(6)}
    assert seen == {"SQL, DMY"}, f"another client's RESET reached this one: {seen}"
    a.close()
    b.close()


def shard_of(key):
    """Where a plain INSERT put `key` (the reference for routing)."""
    found = []
    for i in range(2):
        c = DBS.shard(i)
        cur = c.cursor()
        cur.execute("SELECT count(*) FROM kv_plain WHERE id = %s", (key,))
        if cur.fetchone()[0]:
            found.append(i)
        c.close()
    return found


def rows_on_shards(table):
    out = []
    for i in range(2):
        c = DBS.shard(i)
        cur = c.cursor()
        cur.execute(f"SELECT id, v FROM {table} ORDER BY id")
        out.append(cur.fetchall())
        c.close()
    return out


def sql_prepare_execute_routes_by_key():
    for mode in ("session", "transaction"):
        p = PROXIES["two-" + mode]
        c = raw(p)
        h = raw(p)
        c.query("DELETE FROM kv").raise_error()
        c.query("DELETE FROM kv_plain").raise_error()
        c.query("PREPARE ins (bigint, text) AS INSERT INTO kv VALUES ($1, $2)").raise_error()
        c.query("PREPARE get (bigint) AS SELECT v FROM kv WHERE id = $1").raise_error()
        for k in range(1, 21):
            c.query(f"INSERT INTO kv_plain VALUES ({k}, 'v{k}')").raise_error()
            if k % 5 == 0:  # another client takes a backend: the next EXECUTE may land elsewhere
                h.query("BEGIN").raise_error()
                h.scalar("SELECT 1")
            c.query(f"EXECUTE ins({k}, 'v{k}')").raise_error()
            assert c.scalar(f"EXECUTE get({k})") == f"v{k}", (mode, k)
            if k % 5 == 0:
                h.query("ROLLBACK").raise_error()
        assert rows_on_shards("kv") == rows_on_shards("kv_plain"), f"{mode}: EXECUTE put rows on other shards"
        assert c.query("EXECUTE get(1 + 1)").sqlstate == "0A000"
        # Among other statements of one text: run one by one, each EXECUTE routed by its
        # key as when sent alone, and nothing left behind on a backend for another
        # client (before: refused with 0A000; before that, the EXECUTE went to any shard
        # and found no row, and a later client's PREPARE of that name failed with 42P05).
        for k in (7, 8, 9, 17):
            r = c.query(f"PREPARE mixed (bigint) AS SELECT v FROM kv WHERE id = $1; EXECUTE mixed({k}); "
                        "DEALLOCATE mixed").raise_error()
            assert r.results[1].rows == [[f"v{k}"]], (mode, k, r.results)
            assert c.query(f"SELECT 1; EXECUTE get({k})").raise_error().rows == [[f"v{k}"]], (mode, k)
        other = raw(p)
        other.query("PREPARE mixed (bigint) AS SELECT v FROM kv WHERE id = $1").raise_error()
        assert other.scalar("EXECUTE mixed(7)") == "v7", mode
        other.close()
        c.query("DEALLOCATE get").raise_error()
        assert c.query("EXECUTE get(1)").sqlstate == "26000"
        c.close()
        h.close()
    # Another session's statement left on a pooled backend never runs for this one.
    p = PROXIES["one-transaction"]
    a = raw(p)
    a.query("PREPARE theirs AS SELECT 'not yours'").raise_error()
    a.close()
    for _ in range(3):
        b = raw(p)
        assert b.query("EXECUTE theirs").sqlstate == "26000"
        assert b.query("DEALLOCATE theirs").sqlstate == "26000"
        b.close()


def legacy_strings_route_by_key():
    c = raw(PROXIES["two-transaction"])
    c.query("SET standard_conforming_strings = off").raise_error()
    for k in range(100, 110):
        r = c.query(f"INSERT INTO kv VALUES ({k}, 'it\\'s {k}')")
        assert r.error is None, r.error
        c.query(f"INSERT INTO kv_plain VALUES ({k}, 'plain')").raise_error()
    assert c.scalar("SELECT v FROM kv WHERE id = 101") == "it's 101"
    c.query("RESET standard_conforming_strings").raise_error()
    assert c.query("SELECT 'a\\'b' FROM kv WHERE id = 1").sqlstate == "42601"
    for k in range(100, 110):
        on = [i for i, rows in enumerate(rows_on_shards("kv")) if any(r[0] == k for r in rows)]
        assert on == shard_of(k), (k, on)
    c.close()


def clients_own_two_phase_commit():
    keys = list(range(200, 240))
    p = PROXIES["two-transaction"]
    c = raw(p)
    for k in keys:
        c.query(f"INSERT INTO kv_plain VALUES ({k}, 'plain') ON CONFLICT DO NOTHING").raise_error()
    a, b = next(k for k in keys if shard_of(k) == [0]), next(k for k in keys if shard_of(k) == [1])
    for key, finish, expect in ((b, "COMMIT PREPARED", "1"), (a, "ROLLBACK PREPARED", "0")):
        gid = f"tpp_{key}"
        c.query("BEGIN").raise_error()
        c.query(f"INSERT INTO kv VALUES ({key}, 'xa')").raise_error()
        r = c.query(f"PREPARE TRANSACTION '{gid}'")
        assert r.error is None and r.tag == "PREPARE TRANSACTION" and r.status == "I", (r.error, r.tag, r.status)
        assert c.scalar(f"SELECT count(*) FROM kv WHERE id = {key}") == "0"
        r = c.query(f"{finish} '{gid}'")
        assert r.error is None, r.error
        assert c.scalar(f"SELECT count(*) FROM kv WHERE id = {key}") == expect, finish
    assert c.query("COMMIT PREPARED 'tpp_nosuch'").sqlstate == "42704"
    # A transaction on both shards cannot be prepared: refused, rolled back.
    c.query("BEGIN").raise_error()
    c.query(f"INSERT INTO kv VALUES ({a + 1000}, 'x')").raise_error()
    c.query(f"INSERT INTO kv VALUES ({b + 1000}, 'x')").raise_error()
    r = c.query("PREPARE TRANSACTION 'tpp_both'")
    assert r.sqlstate == "0A000" and r.status == "I", (r.error, r.status)
    assert c.scalar(f"SELECT count(*) FROM kv WHERE id IN ({a + 1000}, {b + 1000})") == "0"
    for i in range(2):
        s = DBS.shard(i)
        cur = s.cursor()
        cur.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'tpp%'")
        assert cur.fetchone()[0] == 0
        s.close()
    c.close()


def temp_table_pins_the_session():
    p = PROXIES["one-transaction"]
    c = raw(p)
    c.query("CREATE TEMP TABLE mine (a int)").raise_error()
    c.query("INSERT INTO mine VALUES (1)").raise_error()
    others = [raw(p) for _ in range(2)]
    for o in others:
        assert o.query("SELECT count(*) FROM mine").sqlstate == "42P01", "a temp table visible to another client"
    assert c.scalar("SELECT count(*) FROM mine") == "1", "the temp table did not follow its session"
    # A transaction block ends on the pinned backend, which stays the session's (before,
    # COMMIT gave it back to the pool: the regression schedule's temp tables vanished).
    for end in ("COMMIT", "ROLLBACK"):
        c.query("BEGIN").raise_error()
        c.query("INSERT INTO mine VALUES (2)").raise_error()
        c.query(end).raise_error()
        others[0].query("BEGIN").raise_error()  # (it takes the pool's other backend)
        others[0].scalar("SELECT 1")
        assert c.scalar("SELECT count(*) FROM mine") == "2", f"the temp table did not outlive {end}"
        others[0].query("ROLLBACK").raise_error()
    for o in others:
        o.close()
    c.close()


def cursor_over_two_shards():
    """DECLARE ... CURSOR FOR a read of both shards: FETCH/MOVE/CLOSE answered as one
    PostgreSQL would over the union of the shards' rows (before: refused), in both pool
    modes; without HOLD it needs a block and ends with it, WITH HOLD it outlives it."""
    rows = sorted(r for shard in rows_on_shards("kv") for r in shard)
    want = [[str(k), v] for k, v in rows]
    assert len(want) >= 10, want
    for mode in ("session", "transaction"):
        c = raw(PROXIES["two-" + mode])
        assert c.query("DECLARE c CURSOR FOR SELECT id, v FROM kv ORDER BY id").sqlstate == "25P01", mode
        c.query("BEGIN").raise_error()
        assert c.query("DECLARE c CURSOR FOR SELECT id, v FROM kv ORDER BY id").raise_error().tag == "DECLARE CURSOR"
        r = c.query("FETCH 3 FROM c").raise_error()
        assert (r.rows, r.tag, r.results[0].column_names) == (want[:3], "FETCH 3", ["id", "v"]), (mode, r.rows, r.tag)
        assert c.query("FETCH FORWARD 0 FROM c").raise_error().rows == want[2:3], mode
        assert c.query("MOVE 2 IN c").raise_error().tag == "MOVE 2", mode
        r = c.query("FETCH ALL FROM c").raise_error()
        assert (r.rows, r.tag) == (want[5:], f"FETCH {len(want) - 5}"), (mode, r.rows, r.tag)
        r = c.query("FETCH NEXT FROM c").raise_error()
        assert (r.rows, r.tag) == ([], "FETCH 0"), (mode, r.rows, r.tag)
        assert c.query("FETCH BACKWARD 1 FROM c").sqlstate == "0A000", mode
        c.query("ROLLBACK").raise_error()
        assert c.query("BEGIN; SELECT 1").status == "T"
        assert c.query("FETCH 1 FROM c").sqlstate == "34000", mode  # gone with its transaction
        c.query("ROLLBACK").raise_error()
        c.query("DECLARE h CURSOR WITH HOLD FOR SELECT id, v FROM kv ORDER BY id DESC").raise_error()
        assert c.query("FETCH 2 FROM h").raise_error().rows == want[::-1][:2], mode
        assert c.query("MOVE -1 IN h").sqlstate == "0A000", mode  # backward: refused, position kept
        others = [raw(PROXIES["two-" + mode]) for _ in range(2)]  # (transaction mode: backends rotate)
        for o in others:
            assert o.query("FETCH 1 FROM h").sqlstate == "34000", mode
        assert c.query("FETCH 2 FROM h").raise_error().rows == want[::-1][2:4], mode
        assert c.query("CLOSE h").raise_error().tag == "CLOSE CURSOR", mode
        assert c.query("FETCH 1 FROM h").sqlstate == "34000", mode
        c.query("DECLARE h2 CURSOR WITH HOLD FOR SELECT id FROM kv").raise_error()
        c.query("DISCARD ALL").raise_error()  # closes every cursor, as in PostgreSQL
        assert c.query("FETCH 1 FROM h2").sqlstate == "34000", mode
        for o in others:
            o.close()
        c.close()


def extended_begin_answered_as_postgresql():
    """An extended-protocol BEGIN that starts its batch is held by the proxy (answered
    here; the block joins a shard at its first statement): the client sees what
    PostgreSQL sends, message by message, with its isolation options kept."""
    P = pgwire
    begin = [P.parse_msg("BEGIN ISOLATION LEVEL REPEATABLE READ"), P.bind_msg(), P.describe_msg("P"),
             P.execute_msg()]
    batches = [
        begin + [P.sync_msg()],
        [P.parse_msg("SHOW transaction_isolation"), P.bind_msg(), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("ROLLBACK"), P.bind_msg(), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("BEGIN"), P.bind_msg(), P.sync_msg()],  # never executed: no block
        [P.parse_msg("BEGIN", "b"), P.sync_msg()],
        [P.bind_msg(statement="b"), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("INSERT INTO kv VALUES (90007, 'x')"), P.bind_msg(), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("ROLLBACK"), P.bind_msg(), P.execute_msg(), P.close_msg("S", "b"), P.sync_msg()],
        # a pipeline: BEGIN, a write, an error, one Sync
        begin + [P.parse_msg("INSERT INTO kv VALUES (90008, 'x')"), P.bind_msg(), P.execute_msg(),
                 P.parse_msg("SELECT 1/0"), P.bind_msg(), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("ROLLBACK"), P.bind_msg(), P.execute_msg(), P.sync_msg()],
        [P.parse_msg("SELECT count(*) FROM kv WHERE id IN (90007, 90008)"), P.bind_msg(), P.execute_msg(),
         P.sync_msg()],
    ]
    seen = {}
    for name, port in (("postgresql", sptest.PG_PORTS[0]), ("proxy", PROXIES["two-transaction"].port)):
        c = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        seen[name] = []
        for batch in batches:
            c.send(batch)
            seen[name].append([(t, b if t in "DCZE" else b"") for t, b in c.recv_until("Z")])
        c.close()
    for i, (want, got) in enumerate(zip(seen["postgresql"], seen["proxy"])):
        assert got == want, f"batch {i}: PostgreSQL sent {want}, the proxy {got}"


def prepare_execute_among_other_statements():
    """A text with SQL PREPARE or EXECUTE among other statements (isolation spec
    nowait-5's `BEGIN; EXECUTE ...; SELECT ...`) gets PostgreSQL's answers, message by
    message, with one ReadyForQuery; the first error ends it (before: 0A000)."""
    texts = [
        "PREPARE pe1 (int) AS SELECT $1 + 1 AS n; EXECUTE pe1(1)",
        "BEGIN; EXECUTE pe1(2); SELECT 3 AS m",
        "COMMIT",
        "SELECT 1 AS a; PREPARE pe1 AS SELECT 1; SELECT 2 AS b",
        "SELECT 1 AS a; EXECUTE nosuch; SELECT 2 AS b",
        "BEGIN; EXECUTE pe1(0); EXECUTE pe1(1/0); SELECT 1 AS c",
        "SELECT 1",
        "ROLLBACK",
        "PREPARE pe2 AS INSERT INTO t VALUES (1); EXECUTE pe2; EXECUTE pe2; SELECT count(*) FROM t",
        "EXECUTE pe2; SELECT 1/0",
        "SELECT count(*) FROM t",
        "EXECUTE pe1(4); DEALLOCATE pe1; EXECUTE pe1(5)",
        "EXECUTE pe1(6)",
        "DEALLOCATE pe2; DELETE FROM t",
    ]
    seen = {}
    for name, port in (("postgresql", sptest.PG_PORTS[0]), ("proxy", PROXIES["one-session"].port)):
        c = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        seen[name] = []
        for text in texts:
            c.send([pgwire.query_msg(text)])
            seen[name].append([(t, b) if t != "E" else (t, tuple(sorted(
                (k, v) for k, v in pgwire.decode_fields(b).items() if k in "CMS")))
                for t, b in c.recv_until("Z") if t in "TDCEZ"])
        c.close()
    for text, want, got in zip(texts, seen["postgresql"], seen["proxy"]):
        assert got == want, f"{text}: PostgreSQL sent {want}, the proxy {got}"


def waiting_text_answers_nothing_until_it_ends():
    """A text whose second statement waits on a lock (isolation spec nowait-5's `BEGIN;
    EXECUTE ...; SELECT ...`): the client hears nothing of it until it ends, as from
    PostgreSQL, whose answers wait in its 8 kB output buffer (isolationtester sees the
    wait only while libpq has no result; before, the first statement's answer went out
    at once and isolationtester waited on the step until its timeout)."""
    for name, port in (("postgresql", sptest.PG_PORTS[0]), ("proxy", PROXIES["one-session"].port)):
        holder = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        waiter = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        pid = int(waiter.scalar("SELECT pg_backend_pid()"))
        holder.query("SELECT pg_advisory_lock(4501)").raise_error()
        waiter.query("PREPARE tpp_wait AS SELECT pg_advisory_lock(4501) IS NOT NULL AS got").raise_error()
        waiter.send([pgwire.query_msg("BEGIN; EXECUTE tpp_wait; SELECT 1 AS after")])
        d = sptest.superuser(sptest.PG_PORTS[0], DBS.name)
        cur = d.cursor()
        deadline = time.monotonic() + 15
        while True:
            cur.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,))
            if cur.fetchone()[0] == "advisory":
                break
            assert time.monotonic() < deadline, f"{name}: the EXECUTE never waited"
            time.sleep(0.01)
        d.close()
        readable, _, _ = select.select([waiter.sock], [], [], 0)
        assert not readable and not waiter.buf, f"{name}: answered part of a text that waits"
        holder.query("SELECT pg_advisory_unlock(4501)").raise_error()
        got = [t for t, _ in waiter.recv_until("Z")]
        assert got == ["C", "T", "D", "C", "T", "D", "C", "Z"], (name, got)
        waiter.query("ROLLBACK; DEALLOCATE tpp_wait").raise_error()
        holder.close()
        waiter.close()


def advisory_lock_ends_with_its_session():
    """A session-level advisory lock ends when its client disconnects, as in PostgreSQL:
    the backend the proxy gives back is reset at once (before, it kept the lock in the
    pool until another client took that backend; the regression schedule's advisory_lock
    then waited for the lock prepared_xacts had left)."""
    for name, port in (("postgresql", sptest.PG_PORTS[0]), ("proxy", PROXIES["one-session"].port)):
        other = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        holder = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        got = holder.scalar("SELECT pg_try_advisory_lock(4502)")
        assert got == "t", (name, "holder", got)
        holder.close()
        d = sptest.superuser(sptest.PG_PORTS[0], DBS.name)
        cur = d.cursor()
        deadline = time.monotonic() + 10
        while True:
            cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4502")
            if cur.fetchone()[0] == 0:
                break
            assert time.monotonic() < deadline, f"{name}: the lock outlived its session"
            time.sleep(0.01)
        d.close()
        got = other.scalar("SELECT pg_try_advisory_lock(4502)")
        assert got == "t", (name, "other", got)
        other.query("SELECT pg_advisory_unlock(4502)").raise_error()  # (a closing backend ends a moment later)
        other.close()


def unread_bytes_from(port):
    """Bytes the kernel holds for the local TCP socket on 127.0.0.1:port, not read yet."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return int(fields[4].split(":")[1], 16)
    return 0


def notification_in_a_held_block_comes_before_commits_ready():
    """LISTEN, BEGIN (which the proxy holds: its backend stays idle and sends the
    notification at once), another session's NOTIFY, COMMIT: the notification comes
    with COMMIT's answer, before its ReadyForQuery, as PostgreSQL sends one that came
    during a transaction (isolation spec async-notify; before, it came with the next
    statement)."""
    seen = {}
    for name, port in (("postgresql", sptest.PG_PORTS[0]), ("proxy", PROXIES["one-session"].port)):
        listener = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        notifier = pgwire.connect(HOST, port, "app", DBS.name, password="secret", timeout=15)
        pid = listener.scalar("SELECT pg_backend_pid()")
        listener.query("LISTEN tpp_held").raise_error()
        listener.query("BEGIN").raise_error()
        notifier.query("NOTIFY tpp_held, 'in the block'").raise_error()
        if name == "proxy":  # (the notification reached the proxy's connection to that backend)
            d = sptest.superuser(sptest.PG_PORTS[0], DBS.name)
            cur = d.cursor()
            cur.execute("SELECT client_port FROM pg_stat_activity WHERE pid = %s", (int(pid),))
            proxy_port = cur.fetchone()[0]
            d.close()
            deadline = time.monotonic() + 15
            while unread_bytes_from(proxy_port) == 0:
                assert time.monotonic() < deadline, "the notification never reached the proxy"
                time.sleep(0.01)
        listener.send([pgwire.query_msg("COMMIT")])
        seen[name] = [(t, pgwire.Reader(b).i32() and b[4:] if t == "A" else b) for t, b in listener.recv_until("Z")]
        listener.query("UNLISTEN *").raise_error()
        listener.close()
        notifier.close()
    assert seen["proxy"] == seen["postgresql"], seen


TESTS = [session_mode_transactions_are_transactions, extended_set_is_the_sessions_and_does_not_leak,
         syntax_errors_are_postgresqls_own, transaction_verbs_outside_a_transaction_warn,
         reset_goes_back_to_the_startup_value, sql_prepare_execute_routes_by_key, legacy_strings_route_by_key,
         clients_own_two_phase_commit, temp_table_pins_the_session, cursor_over_two_shards,
         extended_begin_answered_as_postgresql, prepare_execute_among_other_statements,
         waiting_text_answers_nothing_until_it_ends, notification_in_a_held_block_comes_before_commits_ready,
         advisory_lock_ends_with_its_session]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
