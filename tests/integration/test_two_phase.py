#!/usr/bin/env python3
"""transactions.cross_shard_writes: two_phase (SPEC 5): a transaction may write to
several shards and COMMIT runs PostgreSQL two-phase commit; prepared transactions left
by a dead coordinator are resolved by recovery.

Two shards (fresh databases tp_<random> on the shared instances), a hash distribution
(items.id, 8 partitions) and a reference table. Checked by reading the shards directly:
- a transaction writing both shards (single-row INSERTs, a keyless UPDATE on every
  shard, a reference-table INSERT) commits everywhere, in the simple and the extended
  protocol, and through psycopg2's own transaction (executemany over both shards);
- ROLLBACK, and COMMIT after a failed statement, leave nothing anywhere;
- a PREPARE TRANSACTION that fails on one shard (a deferred unique constraint checked
  at PREPARE) rolls the other shard back too and the client gets the error;
- the shards prepare at once (both PREPAREs running together), not one by one;
- COPY FROM STDIN split over both shards inside a transaction follows its COMMIT or
  ROLLBACK;
- outside a block, one statement writing both shards (a multi-row INSERT split by key
  in the simple and the extended protocol, a reference-table INSERT, COPY FROM STDIN)
  is committed on both with two-phase commit, or on neither when one shard fails;
- after every commit no prepared transaction is left, and no decision row after the
  proxy's next batch of deletions (within 15 s);
- recovery: prepared transactions named like splitpoint's (with and without a
  'commit' decision row) are committed / rolled back within seconds; a prepared
  transaction of someone else is left alone; a decision row older than the hour is
  kept while its transaction is still prepared; without shard users, recovery runs as
  the clients that logged in;
- the decision records live in schema splitpoint (splitpoint.two_phase_decisions), not
  in the application's: an older proxy's table public.splitpoint_2pc is carried over
  by recovery, so that a transaction it left in doubt with a 'commit' record is
  committed (with a shard user, and without one after a fresh proxy's first login).
"""
# test-timeout: 180

import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402

WORKDIR = sptest.workdir("two-phase")
DBS = None
PROXY = None
OWNER = {}  # key -> shard index


def config(db):
    ports = sptest.PG_PORTS
    return f"""
    auth: scram-sha-256
    users:
      - {{ name: app, password: secret }}
    shards:
      - {{ name: s0, host: 127.0.0.1, port: {ports[0]}, database: {db}, user: app, password: secret, pool_size: 8 }}
      - {{ name: s1, host: 127.0.0.1, port: {ports[1]}, database: {db}, user: app, password: secret, pool_size: 8 }}
    distributions:
      - name: by_item
        method: hash
        partitions: 8
        tables: {{ items: id }}
    reference_tables: [ref]
    transactions:
      cross_shard_writes: two_phase
    """


def on_shard(i, sql, params=None):
    c = DBS.shard(i)
    cur = c.cursor()
    cur.execute(sql, params)
    rows = cur.fetchall() if cur.description else None
    c.close()
    return rows


def ids_on(i):
    return sorted(r[0] for r in on_shard(i, "SELECT id FROM items"))


def keys(shard, n, start=1000):
    """n unused keys >= start owned by `shard` (learned from PostgreSQL's placement)."""
    out = [k for k in sorted(OWNER) if OWNER[k] == shard and k >= start]
    assert len(out) >= n, (shard, n, start)
    return out[:n]


def assert_clean(what):
    for i in range(2):
        left = on_shard(i, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
        assert not left, f"{what}: shard s{i} still has prepared transactions {left}"
    rows = sptest.decision_rows_left(sptest.PG_PORTS[0], DBS.name)
    assert not rows, f"{what}: decision rows left on the recorder: {rows}"


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("tp")
    PROXY = sptest.Proxy("tp", config(DBS.name), WORKDIR).start()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, label text, n int NOT NULL DEFAULT 0)")
    cur.execute("CREATE TABLE ref (code text PRIMARY KEY)")
    # Placement of keys 1000..1199 as PostgreSQL's hash partitioning puts them.
    for k in range(1000, 1200):
        cur.execute("INSERT INTO items (id) VALUES (%s)", (k,))
    c.close()
    for i in range(2):
        for k in ids_on(i):
            OWNER[k] = i
    assert len(OWNER) == 200 and set(OWNER.values()) == {0, 1}
    for i in range(2):
        on_shard(i, "DELETE FROM items")


# The decision table of a proxy before schema splitpoint, as that proxy made it.
OLD_TABLE = ("CREATE TABLE public.splitpoint_2pc (txid text PRIMARY KEY, decision text NOT NULL, "
             "decided_at timestamptz NOT NULL DEFAULT now())")
TESTS = []
RECORDS_AFTER_COMMIT = []  # decision rows on the recorder right after a COMMIT's answer


def test(fn):
    TESTS.append(fn)
    return fn


@test
def first_commits_at_once():
    """The recorder's table and schema do not exist (recovery makes them at start when it
    can log in; dropped here) and eight sessions commit at once: each creates them,
    PostgreSQL lets one CREATE through and fails the others (23505 on pg_namespace or
    pg_type, IF NOT EXISTS or not); every COMMIT still succeeds."""
    import threading
    a, b = keys(0, 8, start=1100), keys(1, 8, start=1100)
    conns = [PROXY.connect(DBS.name) for _ in range(8)]
    for i, c in enumerate(conns):
        cur = c.cursor()
        cur.execute("BEGIN")
        cur.execute("INSERT INTO items (id, label) VALUES (%s, 'race'), (%s, 'race')", (a[i], b[i]))
    on_shard(0, "DROP SCHEMA IF EXISTS splitpoint CASCADE")
    errors = []
    gate = threading.Barrier(8)

    def commit(c):
        gate.wait()
        try:
            c.cursor().execute("COMMIT")
        except psycopg2.Error as e:
            errors.append(f"{e.pgcode}: {e}")

    threads = [threading.Thread(target=commit, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in conns:
        c.close()
    assert not errors, errors
    assert len(on_shard(0, "SELECT id FROM items WHERE label = 'race'")) == 8
    assert len(on_shard(1, "SELECT id FROM items WHERE label = 'race'")) == 8
    on_shard(0, "DELETE FROM items")
    on_shard(1, "DELETE FROM items")
    assert_clean("commits at once")


@test
def commit_simple_protocol():
    a, b = keys(0, 1)[0], keys(1, 1)[0]
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'a')", (a,))
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'b')", (b,))
    cur.execute("UPDATE items SET n = n + 5")           # every shard
    cur.execute("INSERT INTO ref (code) VALUES ('eur')")  # every shard
    cur.execute("COMMIT")
    assert cur.statusmessage == "COMMIT", cur.statusmessage
    RECORDS_AFTER_COMMIT.append(on_shard(0, "SELECT count(*) FROM splitpoint.two_phase_decisions")[0][0])
    c.close()
    assert on_shard(0, "SELECT id, n FROM items") == [(a, 5)], on_shard(0, "SELECT id, n FROM items")
    assert on_shard(1, "SELECT id, n FROM items") == [(b, 5)], on_shard(1, "SELECT id, n FROM items")
    for i in range(2):
        assert on_shard(i, "SELECT code FROM ref") == [("eur",)]
    assert_clean("simple COMMIT")


@test
def commit_extended_protocol():
    a, b = keys(0, 2)[1], keys(1, 2)[1]
    with pgwire.connect(sptest.HOST, PROXY.port, "app", DBS.name, password="secret", timeout=20) as w:
        assert w.extended("BEGIN").status == "T"
        r = w.extended("INSERT INTO items (id, label) VALUES ($1, $2)", [a, "ea"])
        assert r.error is None, r.error
        r = w.extended("INSERT INTO items (id, label) VALUES ($1, $2)", [b, "eb"])
        assert r.error is None, r.error
        r = w.extended("COMMIT")
        assert r.error is None and r.tag == "COMMIT" and r.status == "I", (r.error, r.tag, r.status)
        RECORDS_AFTER_COMMIT.append(on_shard(0, "SELECT count(*) FROM splitpoint.two_phase_decisions")[0][0])
        assert w.extended("SELECT count(*) FROM items WHERE id = ANY($1::bigint[])",
                          ["{%d,%d}" % (a, b)]).rows == [["2"]]
    assert a in ids_on(0) and b in ids_on(1)
    assert_clean("extended COMMIT")


@test
def records_are_deleted_after_the_answer():
    """COMMIT answers before its decision record is deleted (the proxy deletes them in
    batches, at most 5 s later): right after the two COMMITs above the record was still
    there (at least once: a batch may have run in between)."""
    assert any(n > 0 for n in RECORDS_AFTER_COMMIT), \
        f"decision rows right after COMMIT: {RECORDS_AFTER_COMMIT}: deleted before the answer"


@test
def psycopg2_transaction_executemany():
    ks = keys(0, 6, 1100)[3:6] + keys(1, 6, 1100)[3:6]
    c = PROXY.connect(DBS.name, autocommit=False)
    cur = c.cursor()
    cur.executemany("INSERT INTO items (id, label) VALUES (%s, %s)", [(k, f"m{k}") for k in ks])
    c.commit()
    c.close()
    got = sorted(set(ids_on(0) + ids_on(1)) & set(ks))
    assert got == sorted(ks), f"executemany in one transaction over both shards: {got} vs {sorted(ks)}"
    assert_clean("psycopg2 commit")


@test
def pipelined_batch_over_both_shards_is_atomic():
    """One Parse, Bind/Execute per key over both shards, one Sync (JDBC executeBatch,
    psycopg 3 executemany): applied whole; when one statement fails, nothing stays."""
    ks = keys(0, 12, 1100)[6:9] + keys(1, 12, 1100)[6:9]
    ks = [ks[0], ks[3], ks[1], ks[4], ks[2], ks[5]]  # alternate shards

    def batch(rows):
        msgs = [pgwire.parse_msg("INSERT INTO items (id, label) VALUES ($1, $2)", "tp_batch")]
        for k, label in rows:
            msgs += [pgwire.bind_msg([k, label], statement="tp_batch"), pgwire.execute_msg()]
        msgs.append(pgwire.sync_msg())
        with pgwire.connect(sptest.HOST, PROXY.port, "app", DBS.name, password="secret", timeout=20) as w:
            w.send(msgs)
            return w.recv_until("Z")

    got = batch([(k, "batch") for k in ks[:4]] + [(ks[0], "dup")])  # the last one fails on s0
    types = "".join(t for t, _ in got)
    assert types == "1" + "2C" * 4 + "2EZ", types
    assert got[-1][1] == b"I"
    assert not set(ks) & set(ids_on(0) + ids_on(1)), "a failed batch left rows"
    got = batch([(k, "batch") for k in ks])
    types = "".join(t for t, _ in got)
    assert types == "1" + "2C" * len(ks) + "Z", types
    assert sorted(set(ks) & set(ids_on(0) + ids_on(1))) == sorted(ks)
    assert_clean("pipelined batch")


@test
def rollback_and_failed_commit_leave_nothing():
    a, b = keys(0, 3)[2], keys(1, 3)[2]
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'r')", (a,))
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'r')", (b,))
    cur.execute("ROLLBACK")
    assert a not in ids_on(0) and b not in ids_on(1)
    # A statement fails on s1 after s0 was written: COMMIT rolls back everything.
    existing = keys(1, 1)[0]  # inserted by commit_simple_protocol
    cur.execute("BEGIN")
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'r2')", (a,))
    try:
        cur.execute("INSERT INTO items (id, label) VALUES (%s, 'dup')", (existing,))
        raise AssertionError("duplicate key accepted")
    except psycopg2.Error as e:
        assert e.pgcode == "23505", (e.pgcode, e.pgerror)
    cur.execute("COMMIT")
    assert cur.statusmessage == "ROLLBACK", cur.statusmessage
    c.close()
    assert a not in ids_on(0)
    assert_clean("rollback")


@test
def prepare_failure_rolls_back_every_shard():
    # A deferred unique constraint is checked at PREPARE TRANSACTION: s1 fails there.
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE tagged (id bigint PRIMARY KEY, tag text UNIQUE DEFERRABLE INITIALLY DEFERRED)")
    c.close()
    # tagged is an unlisted table (a copy on every shard); the hint writes s1's only.
    a = keys(0, 4)[3]
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("BEGIN")
    cur.execute("INSERT INTO items (id, label) VALUES (%s, 'p')", (a,))
    cur.execute("/* splitpoint: shard=s1 */ INSERT INTO tagged VALUES (1, 'x'), (2, 'x')")
    try:
        cur.execute("COMMIT")
        raise AssertionError("COMMIT succeeded although s1 cannot prepare")
    except psycopg2.Error as e:
        assert e.pgcode == "23505", (e.pgcode, e.pgerror)
    cur.execute("SELECT 1")  # the session goes on
    c.close()
    assert a not in ids_on(0), "s0 committed although s1 failed to prepare"
    assert on_shard(1, "SELECT count(*) FROM tagged") == [(0,)]
    assert_clean("failed PREPARE")


@test
def shards_prepare_at_once():
    """COMMIT sends PREPARE TRANSACTION to every written shard before reading any answer:
    with a deferred trigger that sleeps 1.5 s at PREPARE on each shard, both PREPAREs
    started together (PostgreSQL's own query_start, read while they run), not one
    after the other."""
    import threading
    for i in range(2):
        on_shard(i, """
            CREATE TABLE slow (id int);
            CREATE FUNCTION slow_check() RETURNS trigger LANGUAGE plpgsql AS
              $$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER slow_at_prepare AFTER INSERT ON slow
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_check()""")
    starts = [None, None]
    done = threading.Event()

    def watch():
        while not done.is_set():
            for i in range(2):
                rows = on_shard(i, "SELECT extract(epoch FROM query_start)::float8 FROM pg_stat_activity "
                                   "WHERE datname = current_database() AND state = 'active' "
                                   "AND query LIKE 'PREPARE TRANSACTION%'")
                if rows and starts[i] is None:
                    starts[i] = rows[0][0]
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        c = PROXY.connect(DBS.name)
        cur = c.cursor()
        cur.execute("BEGIN")
        cur.execute("/* splitpoint: shard=s0 */ INSERT INTO slow VALUES (1)")
        cur.execute("/* splitpoint: shard=s1 */ INSERT INTO slow VALUES (2)")
        cur.execute("COMMIT")
        c.close()
    finally:
        done.set()
        watcher.join()
    assert on_shard(0, "SELECT id FROM slow") == [(1,)] and on_shard(1, "SELECT id FROM slow") == [(2,)]
    assert None not in starts, f"a PREPARE was never seen running: {starts}"
    assert abs(starts[0] - starts[1]) < 1.0, f"the PREPAREs ran one after the other: started {starts}"
    for i in range(2):
        on_shard(i, "DROP TABLE slow; DROP FUNCTION slow_check()")
    assert_clean("slow PREPAREs")


@test
def copy_in_transaction_follows_commit_and_rollback():
    ks = keys(0, 12, 1150)[:4] + keys(1, 12, 1150)[:4]
    data = "".join(f"{k}\tcopy{k}\t0\n" for k in ks).encode()
    for verb in ["ROLLBACK", "COMMIT"]:
        with pgwire.connect(sptest.HOST, PROXY.port, "app", DBS.name, password="secret", timeout=20) as w:
            assert w.query("BEGIN").status == "T"
            r = w.query("COPY items (id, label, n) FROM STDIN", copy_in=data)
            assert r.error is None and r.tag == f"COPY {len(ks)}", (r.error, r.tag)
            r = w.query(verb)
            assert r.error is None and r.tag == verb, (r.error, r.tag)
        got = sorted(set(ids_on(0) + ids_on(1)) & set(ks))
        want = sorted(ks) if verb == "COMMIT" else []
        assert got == want, f"COPY in a transaction then {verb}: {got}"
    assert_clean("COPY")


@test
def recovery_resolves_prepared_transactions():
    a, b, x, y = keys(0, 5)[4], keys(1, 5)[4], keys(1, 6)[5], keys(1, 7)[6]
    other = keys(0, 6)[5]

    def prepare(i, key, gid):
        c = DBS.shard(i)
        cur = c.cursor()
        cur.execute("BEGIN")
        cur.execute("INSERT INTO items (id, label) VALUES (%s, 'rec')", (key,))
        cur.execute(f"PREPARE TRANSACTION '{gid}'")
        c.close()

    # A coordinator that died after its decision ('commit' row), and one before it. The
    # first was a proxy before schema splitpoint: its record is in public.splitpoint_2pc.
    prepare(0, a, "splitpoint:deadbeef01:0")
    prepare(1, b, "splitpoint:deadbeef01:1")
    # (One transaction: recovery may carry an empty old table over in between.)
    on_shard(0, OLD_TABLE + "; INSERT INTO public.splitpoint_2pc (txid, decision) VALUES ('deadbeef01', 'commit')")
    prepare(1, x, "splitpoint:deadbeef02:1")
    prepare(0, other, "not-ours")
    # A decision older than the hour whose transaction is still prepared on a shard
    # (one that was away): the record is kept, and the transaction committed, not
    # rolled back for want of it.
    on_shard(0, "INSERT INTO splitpoint.two_phase_decisions (txid, decision, decided_at) "
                "VALUES ('deadbeef03', 'commit', now() - interval '2 hours')")
    prepare(1, y, "splitpoint:deadbeef03:1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [r[0] for i in range(2) for r in
                on_shard(i, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")]
        if left == ["not-ours"]:
            break
        time.sleep(0.5)
    assert left == ["not-ours"], f"prepared transactions after 30 s: {left}"
    assert a in ids_on(0) and b in ids_on(1), "decided transaction not committed on both shards"
    assert x not in ids_on(1), "undecided transaction was committed"
    assert y in ids_on(1), "a prepared transaction lost its hour-old 'commit' decision and was rolled back"
    decision = on_shard(0, "SELECT txid, decision FROM splitpoint.two_phase_decisions "
                           "WHERE txid IN ('deadbeef01', 'deadbeef02') ORDER BY txid")
    assert decision == [("deadbeef01", "commit"), ("deadbeef02", "abort")], decision
    assert on_shard(0, "SELECT to_regclass('public.splitpoint_2pc')") == [(None,)], "the old table is still there"
    on_shard(0, "ROLLBACK PREPARED 'not-ours'")
    on_shard(0, "DELETE FROM splitpoint.two_phase_decisions")


@test
def recovery_without_a_shard_user():
    """Shards without a configured user: recovery connects as the clients that used
    them, as only a prepared transaction's owner (or a superuser) may finish it. Left
    by a dead coordinator: one transaction decided 'commit' (prepared on both shards),
    one undecided. Nothing is resolved before a client logged in (the proxy knows no
    credentials); after a login, the first is committed on both shards and the second
    rolled back within seconds."""
    dbs = sptest.Databases("tpn")

    def on(i, sql):
        c = dbs.shard(i)
        cur = c.cursor()
        cur.execute(sql)
        rows = cur.fetchall() if cur.description else None
        c.close()
        return rows

    def prepared():
        return sorted(r[0] for i in range(2) for r in
                      on(i, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"))

    try:
        for i in range(2):
            on(i, "CREATE TABLE items (id bigint PRIMARY KEY, label text, n int NOT NULL DEFAULT 0)")
        on(0, OLD_TABLE)  # (as a proxy before schema splitpoint left it)
        for i, key, gid in [(0, 1, "splitpoint:feed01:0"), (1, 2, "splitpoint:feed01:1"),
                            (1, 3, "splitpoint:feed02:1")]:
            on(i, f"BEGIN; INSERT INTO items (id) VALUES ({key}); PREPARE TRANSACTION '{gid}'")
        on(0, "INSERT INTO splitpoint_2pc (txid, decision) VALUES ('feed01', 'commit')")
        orphans = ["splitpoint:feed01:0", "splitpoint:feed01:1", "splitpoint:feed02:1"]
        no_user = config(dbs.name).replace(", user: app, password: secret", "")
        with sptest.Proxy("tp-no-user", no_user, WORKDIR) as proxy:
            time.sleep(12)  # past kRecoverAfter and two passes of the recovery loop
            assert prepared() == orphans, f"resolved before any login: {prepared()}"
            with pgwire.connect(sptest.HOST, proxy.port, "app", dbs.name, password="secret", timeout=20) as w:
                w.query("SELECT 1").raise_error()
            deadline = time.monotonic() + 30
            while prepared() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not prepared(), f"prepared transactions 30 s after a client's login: {prepared()}"
        assert [r[0] for r in on(0, "SELECT id FROM items")] == [1], on(0, "SELECT id FROM items")
        assert [r[0] for r in on(1, "SELECT id FROM items")] == [2], on(1, "SELECT id FROM items")
        assert on(0, "SELECT txid, decision FROM splitpoint.two_phase_decisions ORDER BY txid") == [
            ("feed01", "commit"), ("feed02", "abort")]
        assert on(0, "SELECT to_regclass('public.splitpoint_2pc')") == [(None,)]
    finally:
        for i in range(2):
            for (gid,) in on(i, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"):
                on(i, f"ROLLBACK PREPARED '{gid}'")
        dbs.drop()


@test
def write_outside_a_block_is_one_transaction():
    """A statement outside a block that writes both shards is one transaction, as in
    PostgreSQL: committed on both (two-phase) or, when one shard fails, on neither. A
    multi-row INSERT split by key (simple and extended protocol; also as the first
    statement of a new proxy), a reference-table INSERT and a COPY FROM STDIN split by
    key."""
    a, b = keys(0, 6, 1050), keys(1, 6, 1050)
    on_shard(1, f"INSERT INTO items (id, label) VALUES ({b[0]}, 'there')")  # a duplicate on s1 only
    on_shard(1, "INSERT INTO ref VALUES ('taken')")

    def fails(r, what):
        # PostgreSQL's own error (nothing of it stays, as there); the shards in a HINT
        assert r.sqlstate == "23505" and r.error["M"].startswith("duplicate key value violates"), (what, r.error)
        assert "applied on no shard" in r.error.get("H", ""), (what, r.error)
        assert r.status == "I", (what, r.status)

    # The first statement of a new proxy whose pools have not read
    # max_prepared_transactions yet (without a shard user, nothing connects before the
    # client: neither recovery nor, for this table, the client's login).
    cold_config = config(DBS.name).replace(", user: app, password: secret", "")
    with sptest.Proxy("tp-cold", cold_config, WORKDIR) as cold:
        with pgwire.connect(sptest.HOST, cold.port, "app", DBS.name, password="secret", timeout=20) as w:
            fails(w.query(f"INSERT INTO items (id, label) VALUES ({a[0]}, 'x'), ({b[0]}, 'x')"), "first statement")
    with pgwire.connect(sptest.HOST, PROXY.port, "app", DBS.name, password="secret", timeout=20) as w:
        fails(w.query(f"INSERT INTO items (id, label) VALUES ({a[0]}, 'x'), ({b[0]}, 'x')"), "simple INSERT")
        fails(w.extended("INSERT INTO items (id, label) VALUES ($1, 'x'), ($2, 'x')", [a[1], b[0]]), "extended INSERT")
        fails(w.query("INSERT INTO ref VALUES ('taken')"), "reference INSERT")
        data = "".join(f"{k}\tcopy\t0\n" for k in (a[2], b[0])).encode()
        r = w.query("COPY items (id, label, n) FROM STDIN", copy_in=data)
        assert r.sqlstate == "23505" and r.error["M"].startswith("duplicate key value violates"), r.error
        assert "COPY failed on shard(s)" in r.error.get("H", "") and "W" not in r.error, r.error
        assert not set(a) & set(ids_on(0)), f"rows of failed statements left on s0: {set(a) & set(ids_on(0))}"
        assert on_shard(0, "SELECT count(*) FROM ref WHERE code = 'taken'") == [(0,)]
        r = w.query(f"INSERT INTO items (id, label) VALUES ({a[0]}, 'x'), ({b[1]}, 'x')").raise_error()
        assert r.tag == "INSERT 0 2", r.tag
        r = w.extended("INSERT INTO items (id, label) VALUES ($1, 'x'), ($2, 'x')", [a[1], b[2]]).raise_error()
        assert r.results[0].tag == "INSERT 0 2", r.results
        data = "".join(f"{k}\tcopy\t0\n" for k in (a[2], b[3])).encode()
        r = w.query("COPY items (id, label, n) FROM STDIN", copy_in=data).raise_error()
        assert r.tag == "COPY 2", r.tag
    assert set(a[:3]) <= set(ids_on(0)) and set(b[1:4]) <= set(ids_on(1)), (ids_on(0), ids_on(1))
    assert_clean("writes outside a block")


@test
def metrics_count_outcomes():
    """splitpoint_two_phase_total after the tests above: seventeen two-phase commits
    (eight at once, simple, extended, psycopg2, the pipelined batch, the slow PREPAREs,
    COPY, three writes outside a block), one rolled back by a failed PREPARE; recovery
    committed three prepared transactions and rolled back one."""
    text = urllib.request.urlopen(f"http://{sptest.HOST}:{PROXY.metrics_port}/metrics", timeout=10).read().decode()
    got = {}
    for line in text.splitlines():
        if line.startswith("splitpoint_two_phase_total{"):
            outcome = line.split('outcome="')[1].split('"')[0]
            got[outcome] = float(line.rsplit(" ", 1)[1])
    want = {"committed": 17, "rolled_back": 1, "unknown": 0, "recovered_committed": 3, "recovered_rolled_back": 1}
    assert got == want, f"splitpoint_two_phase_total: {got}, expected {want}"


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
