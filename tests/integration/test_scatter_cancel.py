#!/usr/bin/env python3
"""A scatter read whose shards all finished sends no CancelRequest (issue #16): the proxy
reads each shard to its ReadyForQuery before giving its connection back, and cancels
only a shard still running (a LIMIT reached before it finished).

Shards: a fresh database on each shared instance; table t (id bigint, v int) hash-sharded
on id with rows on both. With log_connections on (ALTER SYSTEM on both instances, reset
at the end), PostgreSQL logs "connection received" for every connection, CancelRequests
included, and "connection authorized" only for sessions: the backends (by PID) received
over a run of statements that never logged an authorization are the CancelRequests (and
failed logins, of which there are none here). Checks, after the proxy's pools are warm:

  - 40 finished scatter reads (count(*), sum, ORDER BY over every row, in the simple and
    the extended protocol): zero CancelRequests, and every answer right;
  - 20 scatter reads `ORDER BY id LIMIT 10` (the LIMIT pushed down: every shard finishes
    though the merge needs fewer of its rows): zero CancelRequests;
  - a scatter `ORDER BY v DESC, id LIMIT 1` over 200,000 rows per shard (shards may still
    be sorting when the merge has its row): answered right, and a statement on the same
    proxy right after it is not cancelled by a late cancel;
  - in a transaction block, a `LIMIT` the fast shard fills while the other is still
    working: the slow one is read to its end, not cancelled (a cancel aborted that
    shard's block, and the client's next statement got 25P02 though its statement had
    succeeded), and the block goes on and commits.
  - an extended-protocol scatter read (Parse, Bind, Execute, Sync) costs each shard one
    Parse, the scatter's own: the client's Parse is not first prepared on some shard (a
    round trip before the scatter), counted from the shards' statement logs
    (log_min_duration_statement = 0 for the run);
  - and its answer (ParseComplete to ReadyForQuery) goes to the client in one send, not
    one per message: the proxy's TCP segments to the client counted by `ss -ti`.
The time per finished scatter read is printed (no assertion on speed).
Run by tests/run (PG0_PORT, PG1_PORT, PG0_DIR, PG1_DIR, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

WORK = sptest.workdir("test_scatter_cancel")
LOGS = sptest.shared_logs()
ROWS = 200_000
DBS = None
PROXY = None


def set_log_connections(on):
    sptest.alter_system(f"SET log_connections = {'on' if on else 'off'}")


def log_sizes():
    return [os.path.getsize(p) for p in LOGS]


def cancel_requests_since(sizes):
    """Connections received on both instances since `sizes` whose backend never logged
    "connection authorized" (matched by PID: a session received just before `sizes`
    and authorized after it, or received just before the count and not yet authorized,
    is no CancelRequest)."""
    def scan():
        received, authorized = set(), set()
        for path, start in zip(LOGS, sizes):
            with open(path, errors="replace") as f:
                f.seek(start)
                text = f.read()
            for m in re.finditer(r"\[(\d+)\] [^\n]*?connection (received|authorized):", text):
                (received if m.group(2) == "received" else authorized).add((path, m.group(1)))
        return received, authorized

    time.sleep(0.5)  # a cancel still on its way is logged by then
    received, authorized = scan()
    if received - authorized:
        time.sleep(1.0)  # a login in progress is authorized by then
        authorized = scan()[1]
    return len(received - authorized)


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("scc")
    for i in range(2):
        c = DBS.shard(i)
        c.cursor().execute("CREATE TABLE t (id bigint PRIMARY KEY, v int)")
        c.close()
    shards = "".join(f"  - {{ name: s{i}, host: {HOST}, port: {p}, database: {DBS.name}, pool_size: 4 }}\n"
                     for i, p in enumerate(sptest.PG_PORTS))
    PROXY = sptest.Proxy("scc", "auth: scram-sha-256\nusers:\n  - { name: app, password: secret }\n"
                                f"shards:\n{shards}distributions:\n  - name: d\n    method: hash\n"
                                "    partitions: 8\n    tables:\n      t: id\n", WORK).start()
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    # Rows generated on each shard directly would skip the proxy's placement; through the
    # proxy in batches instead (an INSERT ... SELECT of a range would scatter).
    for i in range(2):
        d = DBS.shard(i)
        d.cursor().execute(f"INSERT INTO t SELECT g, g % 1000 FROM generate_series({i * ROWS + 1}, {(i + 1) * ROWS}) g")
        d.close()
    c.close()
    set_log_connections(True)


def teardown():
    set_log_connections(False)
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


def finished_scatters_send_no_cancel():
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    total = 2 * ROWS
    statements = ["SELECT count(*) FROM t", "SELECT sum(v) FROM t WHERE id <= 100",
                  "SELECT id FROM t WHERE id BETWEEN 10 AND 20 ORDER BY id"]
    for sql in statements:  # warm the pools: every connection the run needs is open
        c.query(sql).raise_error()
    sizes = log_sizes()
    t0 = time.monotonic()
    n = 0
    for _ in range(10):
        assert c.scalar("SELECT count(*) FROM t") == str(total)
        assert c.scalar("SELECT sum(v) FROM t WHERE id <= 100") == str(sum(g % 1000 for g in range(1, 101)))
        assert [r[0] for r in c.query("SELECT id FROM t WHERE id BETWEEN 10 AND 20 ORDER BY id").raise_error().rows] \
            == [str(i) for i in range(10, 21)]
        r = c.extended("SELECT count(*) FROM t WHERE v = $1", ["7"]).raise_error()
        assert r.rows == [[str(total // 1000)]], r.rows
        n += 4
    per = (time.monotonic() - t0) / n * 1000
    cancels = cancel_requests_since(sizes)
    print(f"     {n} finished scatter reads: {per:.2f} ms each, {cancels} CancelRequests")
    assert cancels == 0, f"{cancels} CancelRequests for scatter reads whose shards had all finished"
    c.close()


def limit_cancels_only_what_runs():
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    other = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    # A LIMIT pushed down: each shard sends its 10 rows and finishes; the merge needs
    # fewer rows than it was sent but no shard is still running, so nothing is cancelled.
    c.query("SELECT id FROM t ORDER BY id LIMIT 10").raise_error()
    sizes = log_sizes()
    for _ in range(20):
        assert [r[0] for r in c.query("SELECT id FROM t ORDER BY id LIMIT 10").raise_error().rows] == \
            [str(i) for i in range(1, 11)]
    cancels = cancel_requests_since(sizes)
    print(f"     20 scatter reads with a LIMIT pushed down: {cancels} CancelRequests")
    assert cancels == 0, f"{cancels} CancelRequests for LIMIT scatters whose shards had finished"
    for _ in range(5):
        assert c.scalar("SELECT id FROM t ORDER BY v DESC, id LIMIT 1") == "999"
        # Right after: statements on the connections the pool has are not cancelled.
        for sql in ("SELECT count(*) FROM t WHERE id < 50", "SELECT pg_sleep(0.05), 1 FROM t WHERE id = 3"):
            for conn in (c, other):
                r = conn.query(sql)
                assert r.error is None, f"{sql}: {r.error}"
    c.close()
    other.close()


def limit_in_a_block_keeps_the_block():
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    c.query("SELECT count(*) FROM t").raise_error()
    sizes = log_sizes()
    c.query("BEGIN").raise_error()
    # s1 (ids above ROWS) sends its first 1,000 rows at once, then takes 10 ms a row; the
    # merge has s0's 1,100 rows once s1's first rows show they come first: s1 is still
    # working (PostgreSQL sends rows in 8 kB pieces: a few slow rows would come together).
    r = c.query(f"SELECT id, CASE WHEN id > {ROWS + 1000} THEN pg_sleep(0.01) END FROM t ORDER BY id LIMIT 1100")
    assert r.error is None and [row[0] for row in r.rows] == [str(i) for i in range(1, 1101)], r.error
    r = c.query("SELECT count(*) FROM t")
    assert r.error is None and r.rows == [[str(2 * ROWS)]], (r.error, r.rows)
    c.query("COMMIT").raise_error()
    cancels = cancel_requests_since(sizes)
    assert cancels == 0, f"{cancels} CancelRequests in a block"
    c.close()


def extended_scatter_parses_once_per_shard():
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    sql = "SELECT count(*) FROM t WHERE v = $1 AND id > -17"
    c.extended(sql, ["7"]).raise_error()  # pools warm
    sptest.alter_system("SET log_min_duration_statement = 0")
    try:
        sizes = log_sizes()
        n = 10
        for _ in range(n):
            r = c.extended(sql, ["7"]).raise_error()
            assert r.rows == [[str(2 * ROWS // 1000)]], r.rows
        time.sleep(0.5)
        parses = []
        for path, start in zip(LOGS, sizes):
            with open(path, errors="replace") as f:
                f.seek(start)
                parses.append(sum(1 for line in f if "parse <unnamed>:" in line and "id > -17" in line))
    finally:
        sptest.alter_system("RESET log_min_duration_statement")
    print(f"     {n} extended scatter reads: {parses} Parses on the shards")
    assert parses == [n, n], f"Parses per shard {parses} for {n} extended scatter reads (want one each per read)"
    c.close()


def parses_in_logs(sizes, marker):
    """Parse lines of statements containing `marker` in each shard's log since `sizes`."""
    time.sleep(0.5)
    out = []
    for path, start in zip(LOGS, sizes):
        with open(path, errors="replace") as f:
            f.seek(start)
            out.append(sum(1 for line in f if " parse " in line and marker in line))
    return out


def execute_named(c, statement, params):
    c.send([pgwire.bind_msg(params, "", statement), pgwire.describe_msg("P"), pgwire.execute_msg("", 0),
            pgwire.sync_msg()])
    return c.query_collect()


def on_each_shard(sql):
    """Runs `sql` on both shards directly (not through the proxy)."""
    for i in range(2):
        d = DBS.shard(i)
        d.autocommit = True
        d.cursor().execute(sql)
        d.close()


def named_scatter_parses_once_per_backend():
    # A client's named statement executed again and again (sysbench --db-ps-mode=auto,
    # JDBC after prepareThreshold) is prepared on each shard's backend once and bound by
    # name there, as PostgreSQL runs the client's own named statement; every execution
    # used to send the text again (an unnamed Parse: parsed and planned each time).
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    sql = "SELECT count(*) FROM t WHERE v = $1 AND id > -23"
    c.extended(sql, ["7"], statement="counted").raise_error()  # prepared on a backend of each shard
    sptest.alter_system("SET log_min_duration_statement = 0")
    try:
        sizes = log_sizes()
        n = 12
        for i in range(n):
            v = 7 + i % 3
            r = execute_named(c, "counted", [str(v)]).raise_error()
            assert r.rows == [[str(2 * ROWS // 1000)]], (v, r.rows)
        parses = parses_in_logs(sizes, "id > -23")
    finally:
        sptest.alter_system("RESET log_min_duration_statement")
    print(f"     {n} executions of a named scatter read: {parses} Parses on the shards")
    assert all(p <= 1 for p in parses), f"Parses per shard {parses} for {n} executions (want the first one only)"
    c.close()


def named_scatter_failed_parse_is_forgotten():
    # The shards' Parse of a named statement fails (a column they do not have): the
    # backend holds no statement of that name, so once the column exists the same text
    # is prepared again instead of bound to a name the shard never made (26000).
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    sql = "SELECT count(w) FROM t WHERE v = $1 AND id > -29"
    r = c.extended(sql, ["7"], statement="early")
    assert r.sqlstate == "42703", (r.sqlstate, r.error)
    on_each_shard("ALTER TABLE t ADD COLUMN w int")
    try:
        r = c.extended(sql, ["7"], statement="later").raise_error()
        assert r.rows == [["0"]], r.rows
        r = execute_named(c, "later", ["8"]).raise_error()
        assert r.rows == [["0"]], r.rows
    finally:
        on_each_shard("ALTER TABLE t DROP COLUMN w")
    c.close()


def named_scatter_after_ddl_is_prepared_again():
    # A named statement a client Parses after a DDL changed its table runs as the table is
    # now, as it would on PostgreSQL, though a backend still holds the same text prepared
    # for another client before the DDL (bound to that one, the shard answers 0A000
    # "cached plan must not change result type").
    sql = "SELECT * FROM t WHERE id <= $1 AND v >= 0 ORDER BY id"
    a = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    r = a.extended(sql, ["3"], statement="before").raise_error()
    assert r.rows == [["1", "1"], ["2", "2"], ["3", "3"]], r.rows
    on_each_shard("ALTER TABLE t ADD COLUMN x int DEFAULT 5")
    try:
        b = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
        r = b.extended(sql, ["3"], statement="after")
        assert r.error is None, r.error
        assert r.rows == [["1", "1", "5"], ["2", "2", "5"], ["3", "3", "5"]], r.rows
        r = execute_named(b, "after", ["2"]).raise_error()
        assert r.rows == [["1", "1", "5"], ["2", "2", "5"]], r.rows
        b.close()
    finally:
        on_each_shard("ALTER TABLE t DROP COLUMN x")
    a.close()


def proxy_segments_to(c):
    """TCP segments with data the proxy has sent on connection `c` (`ss -ti`, the
    proxy's end of it: data_segs_out)."""
    port = c.sock.getsockname()[1]
    out = subprocess.run(["ss", "-Htin", "state", "established", f"( sport = :{PROXY.port} and dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"data_segs_out:(\d+)", out)
    assert m, f"no data_segs_out for the proxy's end of port {port}: {out!r}"
    return int(m.group(1))


def extended_scatter_answers_in_one_send():
    # ParseComplete, BindComplete, the rows with their CommandComplete and ReadyForQuery
    # of one Parse/Bind/Describe/Execute/Sync: the proxy answers the first two itself and
    # used to send each on its own (four sends, four wake-ups of the client). Both ends
    # set TCP_NODELAY, so each send(2) of a small answer is one segment.
    c = pgwire.connect(HOST, PROXY.port, "app", DBS.name, password="secret", timeout=60)
    sql = "SELECT count(*) FROM t WHERE v = $1 AND id > -19"
    c.extended(sql, ["7"]).raise_error()  # pools warm
    before = proxy_segments_to(c)
    n = 20
    for _ in range(n):
        r = c.extended(sql, ["7"]).raise_error()
        assert r.rows == [[str(2 * ROWS // 1000)]], r.rows
    sent = proxy_segments_to(c) - before
    print(f"     {n} extended scatter reads: {sent} segments from the proxy")
    assert sent <= n + 2, f"{sent} segments for {n} extended scatter reads (want one each)"
    c.close()


TESTS = [finished_scatters_send_no_cancel, limit_cancels_only_what_runs, limit_in_a_block_keeps_the_block,
         extended_scatter_parses_once_per_shard, named_scatter_parses_once_per_backend,
         named_scatter_failed_parse_is_forgotten, named_scatter_after_ddl_is_prepared_again,
         extended_scatter_answers_in_one_send]

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown))
