#!/usr/bin/env python3
"""Deadlocks across shards (timeouts.deadlock, docs/transactions.md).

Two transactions that lock rows on two shards in opposite orders wait for each other,
and neither PostgreSQL sees the cycle (on each, the other half is idle in transaction):
without the proxy's search both wait forever. With it, one of them gets 40P01 within
seconds, as on one PostgreSQL, and the other goes on.

Two shards (fresh databases dl_<random> on the shared instances), a hash distribution
(items.id, 8 partitions), timeouts.deadlock 250ms. Checked:
- the same deadlock on one plain PostgreSQL and through splitpoint over two shards:
  exactly one of the two transactions fails with 40P01 "deadlock detected", the other
  commits, and the rows end the same;
- the transaction cancelled is the younger one (began after the search had seen the
  other's);
- the victim's locks go with its error, before its client's ROLLBACK (its other shard
  is rolled back then), as on one PostgreSQL: the other transaction goes on at once; and
  so after any error in a block (a division by zero on one shard, a syntax error, a
  failed read of both shards, INSERT ... SELECT or COPY frees the block's row lock on
  the other shard);
- a deadlock on one shard is PostgreSQL's: its own 40P01 (its detail, "Process ..."),
  nothing cancelled by the proxy;
- a long lock wait across shards that is no deadlock is not cancelled;
- extended protocol (Parse/Bind/Execute/Sync): the same 40P01;
- a write on several shards (run on each in turn) waiting in the cycle: 40P01 naming the
  shards; a read of both shards waiting in it (for a LOCK TABLE): 40P01;
- four clients repeating the same write on both shards never deadlock (it takes its
  locks shard after shard, in one order);
- timeouts.deadlock: 0 by reload leaves a deadlock; back on by reload, it is broken;
- eight clients updating six rows in random orders for 6 s: nobody hangs, every error is
  40P01, the rows hold exactly what the committed transactions added;
- two proxies in front of the same shards (sidecars): a deadlock between their sessions
  is broken by the younger session's proxy, and what they published on the first shard
  is no longer refreshed once their transactions end;
- a cycle through a direct client's process (no session of the proxy) is found too;
- splitpoint_deadlocks_total counts the deadlocks the proxy broke.
"""
# test-timeout: 180

import io
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import psycopg2  # noqa: E402
import sptest  # noqa: E402

WORKDIR = sptest.workdir("deadlocks")
DBS = None
PROXY = None
OWNER = {}  # key -> shard index
WAIT = 20  # seconds a test waits for a statement that should end


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
    timeouts:
      deadlock: 250ms
    """


def on_shard(i, sql, params=None):
    return sptest.query(sptest.PG_PORTS[i], DBS.name, sql, params)


def keys(shard, n):
    out = [k for k in sorted(OWNER) if OWNER[k] == shard]
    assert len(out) >= n, (shard, n)
    return out[:n]


def values(*ids):
    """{id: n} of items, through the proxy."""
    return dict(sptest.query(PROXY.port, DBS.name, "SELECT id, n FROM items WHERE id = ANY(%s)", (list(ids),)))


def deadlocks_broken():
    return PROXY.metric("splitpoint_deadlocks_total")


def setup():
    global DBS, PROXY
    DBS = sptest.Databases("dl")
    PROXY = sptest.Proxy("dl", config(DBS.name), WORKDIR).start()
    c = PROXY.connect(DBS.name)
    cur = c.cursor()
    cur.execute("CREATE TABLE items (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)")
    for k in range(1, 81):
        cur.execute("INSERT INTO items (id) VALUES (%s)", (k,))
    c.close()
    for i in range(2):
        for (k,) in on_shard(i, "SELECT id FROM items"):
            OWNER[k] = i
    assert set(OWNER.values()) == {0, 1}
    # The same rows on one plain PostgreSQL, for the comparison.
    on_shard(0, "CREATE TABLE plain (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0)")
    on_shard(0, "INSERT INTO plain SELECT g, 0 FROM generate_series(1, 80) g")


class Error:
    """A failed statement: its SQLSTATE, message and detail."""

    def __init__(self, code, message, detail):
        self.pgcode, self.message, self.detail = code, message, detail or ""

    def __repr__(self):
        return f"{self.pgcode} {self.message} ({self.detail})"


class Step(threading.Thread):
    """One statement run in a thread by `fn` (which returns None or an Error)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.error = None
        self.start()

    def run(self):
        self.error = self.fn()

    def outcome(self, within=WAIT):
        self.join(within)
        if self.is_alive():
            unstick(sptest.PG_PORTS)  # (a connection whose statement waits cannot even be closed)
            raise AssertionError(f"still waiting after {within}s")
        return self.error


def psycopg_step(conn, sql, params):
    def run():
        try:
            conn.cursor().execute(sql, params)
        except psycopg2.Error as e:
            return Error(e.pgcode, e.diag.message_primary, e.diag.message_detail)
        return None
    return Step(run)


def unstick(db_ports):
    """After a failed test: end whatever still waits (the shards' backends of `app`)."""
    for port in db_ports:
        sptest.query(port, DBS.name, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'")


def settle(w1, w2, end1, end2):
    """Both statements wait for each other: once one has ended, the failed one's
    transaction is ended (end(False): ROLLBACK, as a client does after an error), then
    the other's (end(True): COMMIT if it succeeded). Returns both outcomes."""
    deadline = time.monotonic() + WAIT
    while w1.is_alive() and w2.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if w1.is_alive() and w2.is_alive():
        unstick(sptest.PG_PORTS)
        raise AssertionError(f"both still waiting after {WAIT}s: a deadlock nobody broke")
    for w, end in ((w1, end1), (w2, end2)):
        if not w.is_alive() and w.error is not None:
            end(False)
    e1, e2 = w1.outcome(), w2.outcome()
    for e, end in ((e1, end1), (e2, end2)):
        if e is None:
            end(True)
    return e1, e2


def opposite_orders(connect, table, a, b, pause=0.0, connect2=None):
    """Transactions 1 and 2 lock a and b in opposite orders: 1 updates a, 2 updates b,
    then 1 wants b and 2 wants a. Returns the outcomes of the two statements that waited
    (None or an Error), both transactions ended. Transaction 2 connects with `connect2`
    if given."""
    c1, c2 = connect(), (connect2 or connect)()
    c1.autocommit = c2.autocommit = False
    try:
        c1.cursor().execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (a,))
        time.sleep(pause)
        c2.cursor().execute(f"UPDATE {table} SET n = n + 10 WHERE id = %s", (b,))
        w1 = psycopg_step(c1, f"UPDATE {table} SET n = n + 1 WHERE id = %s", (b,))
        time.sleep(0.2)
        w2 = psycopg_step(c2, f"UPDATE {table} SET n = n + 10 WHERE id = %s", (a,))
        return settle(w1, w2, lambda ok: c1.commit() if ok else c1.rollback(),
                      lambda ok: c2.commit() if ok else c2.rollback())
    finally:
        c1.close()
        c2.close()


def run_clients(client, n, seconds):
    """client(i) for i < n, each in a thread, for about `seconds`; fails if one still
    runs WAIT s after that (a deadlock nobody broke)."""
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT + seconds)
    if any(t.is_alive() for t in threads):
        unstick(sptest.PG_PORTS)
        raise AssertionError("a client still waits: a deadlock nobody broke")


def failed_one(e1, e2):
    errors = [e for e in (e1, e2) if e is not None]
    assert len(errors) == 1, f"expected exactly one transaction to fail: {e1!r} / {e2!r}"
    return errors[0]


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def same_as_one_postgres():
    """The same deadlock on one plain PostgreSQL and over two shards: one 40P01 each, the
    surviving transaction's updates on both rows."""
    a, b = keys(0, 1)[0], keys(1, 1)[0]
    before = deadlocks_broken()
    direct = opposite_orders(lambda: sptest.connect(sptest.PG_PORTS[0], DBS.name), "plain", a, b)
    proxied = opposite_orders(lambda: PROXY.connect(DBS.name), "items", a, b)
    for where, (e1, e2) in (("direct", direct), ("splitpoint", proxied)):
        e = failed_one(e1, e2)
        assert e.pgcode == "40P01" and e.message == "deadlock detected", (where, e)
    detail = failed_one(*proxied).detail
    assert "waits on shard \"s0\"" in detail and "waits on shard \"s1\"" in detail, detail
    plain = on_shard(0, "SELECT id, n FROM plain WHERE id IN (%s, %s) ORDER BY id", (a, b))
    got = sorted(sptest.query(PROXY.port, DBS.name, "SELECT id, n FROM items WHERE id IN (%s, %s)", (a, b)))
    # Which transaction PostgreSQL cancels is its own choice; each outcome leaves one
    # transaction's two updates.
    assert sorted(n for _, n in plain) in ([1, 1], [10, 10]), plain
    assert sorted(n for _, n in got) in ([1, 1], [10, 10]), got
    assert deadlocks_broken() == before + 1


@test
def the_younger_transaction_is_cancelled():
    """Transaction 2 begins a second after transaction 1 (the search has seen 1 by then):
    2 is cancelled, whichever closes the cycle."""
    a, b = keys(0, 2)[1], keys(1, 2)[1]
    e1, e2 = opposite_orders(lambda: PROXY.connect(DBS.name), "items", a, b, pause=1.0)
    assert e1 is None, f"the older transaction was cancelled: {e1!r}"
    assert e2 is not None and e2.pgcode == "40P01", repr(e2)
    got = dict(sptest.query(PROXY.port, DBS.name, "SELECT id, n FROM items WHERE id IN (%s, %s)", (a, b)))
    assert got == {a: 1, b: 1}, got


def direct_and_proxied():
    """(where, port, connect, table): one plain PostgreSQL (table plain on shard 0's
    instance), then splitpoint over the two shards (items)."""
    return (("direct", sptest.PG_PORTS[0], lambda: sptest.connect(sptest.PG_PORTS[0], DBS.name), "plain"),
            ("splitpoint", PROXY.port, lambda: PROXY.connect(DBS.name), "items"))


def victim_left_unended(connect, table, a, b):
    """Transactions 1 and 2 deadlock (as opposite_orders); the victim's client does not
    end its transaction. Returns the victim's error, the survivor's outcome (None: its
    waiting statement went on), what the victim gets next for a statement on the other
    row, and the survivor's increment; then ends both."""
    c1, c2 = connect(), connect()
    c1.autocommit = c2.autocommit = False
    try:
        c1.cursor().execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (a,))
        time.sleep(1.0)
        c2.cursor().execute(f"UPDATE {table} SET n = n + 10 WHERE id = %s", (b,))
        w1 = psycopg_step(c1, f"UPDATE {table} SET n = n + 1 WHERE id = %s", (b,))
        time.sleep(0.2)
        w2 = psycopg_step(c2, f"UPDATE {table} SET n = n + 10 WHERE id = %s", (a,))
        # The victim is the one that fails (through splitpoint the survivor may even
        # answer first: the victim's other shard is rolled back before its error goes out).
        def failed(w):
            return not w.is_alive() and w.error is not None
        deadline = time.monotonic() + WAIT
        while not failed(w1) and not failed(w2) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not failed(w1) and not failed(w2):
            unstick(sptest.PG_PORTS)
            raise AssertionError(f"no deadlock broken after {WAIT}s")
        victim, survivor = (w1, w2) if failed(w1) else (w2, w1)
        cv, cs = (c1, c2) if victim is w1 else (c2, c1)
        other_row = b if victim is w1 else a
        error = victim.outcome()
        went_on = survivor.outcome(within=10)  # the victim's client has done nothing yet
        after = psycopg_step(cv, f"SELECT n FROM {table} WHERE id = %s", (other_row,)).outcome()
        cv.rollback()
        cs.commit()
        return error, went_on, after, (1 if survivor is w1 else 10)
    finally:
        c1.close()
        c2.close()


@test
def the_victims_locks_go_with_its_error():
    """On one PostgreSQL the victim's locks go at its error, before its client's
    ROLLBACK, so the other transaction goes on at once; through splitpoint too: the
    victim's other shard is rolled back when the error comes (before: its lock there
    held the other transaction until the victim's client rolled back). The victim's
    next statement gets 25P02, as on one PostgreSQL."""
    a, b = keys(0, 3)[2], keys(1, 3)[2]
    for where, port, connect, table in direct_and_proxied():
        read = f"SELECT id, n FROM {table} WHERE id IN (%s, %s)"
        before = dict(sptest.query(port, DBS.name, read, (a, b)))
        error, went_on, after, step = victim_left_unended(connect, table, a, b)
        assert error is not None and error.pgcode == "40P01", (where, error)
        assert went_on is None, (where, went_on)
        assert after is not None and after.pgcode == "25P02", (where, after)
        got = dict(sptest.query(port, DBS.name, read, (a, b)))
        assert got == {a: before[a] + step, b: before[b] + step}, (where, before, got)


def failing_statements(table, a):
    """(what, statement or COPY text, SQLSTATE or {where: SQLSTATE}): statements that
    fail inside a block, each through another path of the proxy; `a` is a row of s0."""
    return (
        ("an error on one shard", f"SELECT n / 0 FROM {table} WHERE id = {a}", "22012"),
        ("a syntax error", f"SELEC n FROM {table}", "42601"),
        ("an INSERT without its key (the proxy's own refusal)", f"INSERT INTO {table} (n) VALUES (1)",
         {"direct": "23502", "splitpoint": "SPR01"}),
        ("a read of both shards failing on one", f"SELECT sum(n / (id - {a})) FROM {table}", "22012"),
        ("an INSERT ... SELECT whose read fails",
         f"INSERT INTO {table} (id, n) SELECT id + 100000, n / (id - {a}) FROM {table}", "22012"),
        ("a COPY failing on one shard", ("COPY " + table + " (id, n) FROM STDIN", f"{a + 100000}\t1\n{a}\tx\n"),
         "22P02"),
    )


@test
def an_error_frees_the_other_shards_locks():
    """Any error, not only a deadlock's: a block updates a row on s1, then a statement
    fails. On one PostgreSQL the row's lock went with the error; through splitpoint as
    well (the block's s1 part is rolled back before the client hears of the error),
    whether the error is one shard's, the proxy's own refusal, a read of both shards',
    an INSERT ... SELECT's or a COPY's: another client updates that row at once
    (lock_timeout 3s would say otherwise), and the failed block's ROLLBACK still
    answers."""
    a, b = keys(0, 4)[3], keys(1, 4)[3]
    for where, port, connect, table in direct_and_proxied():
        for what, statement, code in failing_statements(table, a):
            c1, c2 = connect(), connect()
            try:
                c1.autocommit, c2.autocommit = False, True
                cur = c1.cursor()
                cur.execute(f"UPDATE {table} SET n = n + 1 WHERE id = %s", (b,))
                try:
                    if isinstance(statement, tuple):
                        cur.copy_expert(statement[0], io.StringIO(statement[1]))
                    else:
                        cur.execute(statement)
                    raise AssertionError(f"{where}, {what}: no error")
                except psycopg2.Error as e:
                    expected = code[where] if isinstance(code, dict) else code
                    assert e.pgcode == expected, (where, what, e.pgcode, str(e))
                c2.cursor().execute("SET lock_timeout = '3s'")
                r = psycopg_step(c2, f"UPDATE {table} SET n = n + 100 WHERE id = %s", (b,)).outcome()
                assert r is None, (where, what, r)
                c1.rollback()
            finally:
                c1.close()
                c2.close()


@test
def one_shard_deadlock_is_postgres_own():
    """Both rows on one shard: PostgreSQL finds the deadlock itself (deadlock_timeout);
    the proxy cancels nothing."""
    a, b = keys(0, 4)[2:4]
    before = deadlocks_broken()
    e = failed_one(*opposite_orders(lambda: PROXY.connect(DBS.name), "items", a, b))
    assert e.pgcode == "40P01" and e.detail.startswith("Process "), e
    assert deadlocks_broken() == before


@test
def long_wait_is_no_deadlock():
    """Transaction 1 holds rows on both shards for 2 s while 2 waits for one of them: no
    cycle, nothing cancelled; 2 goes on once 1 commits."""
    a, b = keys(0, 5)[4], keys(1, 5)[4]
    before = deadlocks_broken()
    c1, c2 = PROXY.connect(DBS.name, autocommit=False), PROXY.connect(DBS.name, autocommit=False)
    try:
        c1.cursor().execute("UPDATE items SET n = n + 1 WHERE id IN (%s, %s)", (a, b))
        c2.cursor().execute("UPDATE items SET n = n + 10 WHERE id = %s", (keys(1, 6)[5],))
        w = psycopg_step(c2, "UPDATE items SET n = n + 10 WHERE id = %s", (a,))
        time.sleep(2.0)
        assert w.is_alive(), f"the waiting statement ended while the lock was held: {w.error!r}"
        c1.commit()
        assert w.outcome() is None, repr(w.error)
        c2.commit()
    finally:
        c1.close()
        c2.close()
    assert deadlocks_broken() == before


@test
def extended_protocol():
    """The same deadlock with every statement in the extended protocol (Parse, Bind,
    Execute, Sync): the same 40P01."""
    a, b = keys(0, 7)[6], keys(1, 7)[6]
    before = deadlocks_broken()
    sql = "UPDATE items SET n = n + $1 WHERE id = $2"
    c1, c2 = (pgwire.connect(sptest.HOST, PROXY.port, "app", DBS.name, password="secret", timeout=WAIT + 10)
              for _ in range(2))

    def step(c, n, key):
        def run():
            r = c.extended(sql, [str(n), str(key)])
            return Error(r.error["C"], r.error["M"], r.error.get("D")) if r.error else None
        return Step(run)

    def end(c):
        return lambda ok: c.query("COMMIT" if ok else "ROLLBACK").raise_error()

    try:
        for c in (c1, c2):
            c.query("BEGIN").raise_error()
        c1.extended(sql, ["1", str(a)]).raise_error()
        c2.extended(sql, ["10", str(b)]).raise_error()
        w1 = step(c1, 1, b)
        time.sleep(0.2)
        w2 = step(c2, 10, a)
        e = failed_one(*settle(w1, w2, end(c1), end(c2)))
        assert e.pgcode == "40P01" and e.message == "deadlock detected", e
    finally:
        c1.close()
        c2.close()
    assert deadlocks_broken() == before + 1


@test
def write_on_several_shards_is_cancelled():
    """The younger transaction waits inside a write on both shards (an UPDATE of keys on
    s0 and s1, run on each in turn): that write fails with 40P01, naming where it was
    applied, and the older transaction goes on before the younger's client rolls back
    (the write's shard that did not fail is rolled back with the error)."""
    a, a2 = keys(0, 10)[8:10]
    b = keys(1, 10)[8]
    before = deadlocks_broken()
    old, young = PROXY.connect(DBS.name, autocommit=False), PROXY.connect(DBS.name, autocommit=False)
    try:
        old.cursor().execute("UPDATE items SET n = n + 10 WHERE id = %s", (b,))
        time.sleep(1.0)
        young.cursor().execute("UPDATE items SET n = n + 1 WHERE id = %s", (a,))
        w_old = psycopg_step(old, "UPDATE items SET n = n + 10 WHERE id = %s", (a,))
        time.sleep(0.2)
        w_young = psycopg_step(young, "UPDATE items SET n = n + 1 WHERE id IN (%s, %s)", (a2, b))
        e_young = w_young.outcome()
        assert e_young is not None and e_young.pgcode == "40P01", repr(e_young)
        e_old = w_old.outcome(within=10)  # the younger's client has not rolled back yet
        assert e_old is None, f"the older transaction was cancelled: {e_old!r}"
        young.rollback()
        old.commit()
        assert "deadlock detected" in e_young.message and "s1" in e_young.message, e_young
    finally:
        old.close()
        young.close()
    got = dict(sptest.query(PROXY.port, DBS.name, "SELECT id, n FROM items WHERE id IN (%s, %s, %s)", (a, a2, b)))
    assert got == {a: 10, a2: 0, b: 10}, got
    assert deadlocks_broken() == before + 1


@test
def read_of_several_shards_is_cancelled():
    """The younger transaction waits inside a read of both shards (a count over the
    table, which the older one has locked on s1 with LOCK TABLE): that read fails with
    40P01."""
    a = keys(0, 17)[16]
    before = deadlocks_broken()
    old, young = PROXY.connect(DBS.name, autocommit=False), PROXY.connect(DBS.name, autocommit=False)
    try:
        old.cursor().execute("/* splitpoint: shard=s1 */ LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        time.sleep(1.0)
        young.cursor().execute("UPDATE items SET n = n + 1 WHERE id = %s", (a,))
        w_old = psycopg_step(old, "UPDATE items SET n = n + 10 WHERE id = %s", (a,))
        time.sleep(0.2)
        w_young = psycopg_step(young, "SELECT count(*) FROM items", None)
        e_old, e_young = settle(w_old, w_young, lambda ok: old.commit() if ok else old.rollback(),
                                lambda ok: young.commit() if ok else young.rollback())
        assert e_old is None, f"the older transaction was cancelled: {e_old!r}"
        assert e_young is not None and e_young.pgcode == "40P01" and e_young.message == "deadlock detected", e_young
    finally:
        old.close()
        young.close()
    assert deadlocks_broken() == before + 1


@test
def off_then_on_again_by_reload():
    """timeouts.deadlock: 0 (by SIGHUP): a deadlock across shards stays for 3 s; set back
    to 250ms, it is broken."""
    a, b = keys(0, 16)[15], keys(1, 16)[15]
    before = deadlocks_broken()
    PROXY.reload(config(DBS.name).replace("deadlock: 250ms", "deadlock: 0"))
    time.sleep(1.5)  # (the search reads the setting when it wakes)
    c1, c2 = PROXY.connect(DBS.name, autocommit=False), PROXY.connect(DBS.name, autocommit=False)
    try:
        c1.cursor().execute("UPDATE items SET n = n + 1 WHERE id = %s", (a,))
        c2.cursor().execute("UPDATE items SET n = n + 10 WHERE id = %s", (b,))
        w1 = psycopg_step(c1, "UPDATE items SET n = n + 1 WHERE id = %s", (b,))
        time.sleep(0.2)
        w2 = psycopg_step(c2, "UPDATE items SET n = n + 10 WHERE id = %s", (a,))
        time.sleep(3)
        assert w1.is_alive() and w2.is_alive(), "a deadlock was broken with timeouts.deadlock: 0"
        PROXY.reload(config(DBS.name))
        e = failed_one(*settle(w1, w2, lambda ok: c1.commit() if ok else c1.rollback(),
                               lambda ok: c2.commit() if ok else c2.rollback()))
        assert e.pgcode == "40P01", e
    finally:
        PROXY.reload(config(DBS.name))
        c1.close()
        c2.close()
    assert deadlocks_broken() == before + 1


@test
def random_workload_never_hangs():
    """Eight clients, each in a loop for 6 s, half through a second proxy: a transaction
    updating three of six rows (three per shard) in random order, ROLLBACK after an
    error. Every client finishes; every error is a 40P01 (PostgreSQL's on one shard, the
    proxies' across shards, and some of those); each row's count is what the committed
    transactions added."""
    ks = keys(0, 13)[10:13] + keys(1, 13)[10:13]
    start_sum = sum(values(*ks).values())
    other = sptest.Proxy("dl-b", config(DBS.name), WORKDIR).start()
    proxies = (PROXY, other)
    before = sum(p.metric("splitpoint_deadlocks_total") for p in proxies)
    stats, lock, stop = {"commits": 0, "errors": []}, threading.Lock(), time.monotonic() + 6

    def client(seed):
        rnd = random.Random(seed)
        c = proxies[seed % 2].connect(DBS.name, autocommit=False)
        try:
            while time.monotonic() < stop:
                try:
                    for k in rnd.sample(ks, 3):
                        c.cursor().execute("UPDATE items SET n = n + 1 WHERE id = %s", (k,))
                    c.commit()
                    with lock:
                        stats["commits"] += 1
                except psycopg2.Error as e:
                    c.rollback()
                    with lock:
                        stats["errors"].append((e.pgcode, (e.diag.message_detail or "")[:40]))
        finally:
            c.close()

    try:
        run_clients(client, 8, 6)
        broken = sum(p.metric("splitpoint_deadlocks_total") for p in proxies) - before
    finally:
        other.stop()
    assert all(code == "40P01" for code, _ in stats["errors"]), stats["errors"]
    # (PostgreSQL's own detail begins "Process 1234 waits for ShareLock ...")
    # A cycle the proxy breaks may at the same moment be found by PostgreSQL on one of
    # its shards (under load its deadlock_timeout can come first): then the client sees
    # PostgreSQL's error for it, never two errors and never none.
    proxy_errors = sum(1 for _, detail in stats["errors"] if not detail.startswith("Process "))
    assert 1 <= broken and proxy_errors <= broken <= len(stats["errors"]), (broken, proxy_errors, stats)
    end_sum = sum(values(*ks).values())
    assert end_sum - start_sum == 3 * stats["commits"], (start_sum, end_sum, stats["commits"])
    print(f"     {stats['commits']} commits, {len(stats['errors'])} deadlocks ({int(broken)} across shards)", flush=True)


@test
def same_write_on_several_shards_never_deadlocks():
    """Four clients repeat the same transaction for 3 s: an UPDATE of one row on each
    shard. A write on several shards runs on them in turn, in the config's order, which
    makes that order the order its locks are taken in: two of them never deadlock, as
    on one PostgreSQL. (Sent to both shards at once, they did: each got one shard first.)"""
    a, b = keys(0, 15)[14], keys(1, 15)[14]
    before = deadlocks_broken()
    errors, stop = [], time.monotonic() + 3

    def client(_):
        c = PROXY.connect(DBS.name, autocommit=False)
        try:
            while time.monotonic() < stop:
                try:
                    c.cursor().execute("UPDATE items SET n = n + 1 WHERE id IN (%s, %s)", (a, b))
                    c.commit()
                except psycopg2.Error as e:
                    c.rollback()
                    errors.append((e.pgcode, e.diag.message_primary))
        finally:
            c.close()

    run_clients(client, 4, 3)
    assert not errors, errors[:5]
    assert deadlocks_broken() == before
    got = dict(sptest.query(PROXY.port, DBS.name, "SELECT id, n FROM items WHERE id IN (%s, %s)", (a, b)))
    assert got[a] == got[b] > 0, got


@test
def between_two_proxies():
    """Transaction 1 through one proxy, transaction 2 (a second younger) through another
    in front of the same shards, as sidecars are: neither proxy sees both, both publish
    their sessions on several shards on the first shard, and the younger's proxy cancels
    it (40P01, its detail naming the other proxy's session); the older commits. They
    publish in splitpoint.spanning_sessions; the table a proxy before schema splitpoint
    made in public goes at the new proxy's first publication."""
    a, b = keys(0, 12)[11], keys(1, 12)[11]
    was = values(a, b)
    on_shard(0, "CREATE UNLOGGED TABLE public.splitpoint_spanning_sessions (proxy text)")
    other = sptest.Proxy("dl-b", config(DBS.name), WORKDIR).start()
    try:
        before, before_other = deadlocks_broken(), other.metric("splitpoint_deadlocks_total")
        e1, e2 = opposite_orders(lambda: PROXY.connect(DBS.name), "items", a, b, pause=1.0,
                                 connect2=lambda: other.connect(DBS.name))
        assert e1 is None, f"the older transaction was cancelled: {e1!r}"
        assert e2 is not None and e2.pgcode == "40P01" and e2.message == "deadlock detected", repr(e2)
        assert " of proxy " in e2.detail, e2.detail
        assert (deadlocks_broken(), other.metric("splitpoint_deadlocks_total")) == (before, before_other + 1)
        assert values(a, b) == {a: was[a] + 1, b: was[b] + 1}, (was, values(a, b))
    finally:
        other.stop()
    # Once their transactions have ended, neither proxy refreshes what it published (the
    # one still running withdraws it; the stopped one's rows are read as stale).
    fresh = "SELECT count(*) FROM splitpoint.spanning_sessions WHERE updated > now() - interval '1 second'"
    deadline = time.monotonic() + 10
    left = on_shard(0, fresh)[0][0]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = on_shard(0, fresh)[0][0]
    assert left == 0, on_shard(0, "SELECT proxy, session, updated FROM splitpoint.spanning_sessions")
    assert on_shard(0, "SELECT to_regclass('public.splitpoint_spanning_sessions')") == [(None,)]


@test
def chain_through_a_direct_client():
    """The cycle passes through a process that is no session of the proxy: transaction 1
    (through the proxy) waits on s0 for a direct client, which waits on s0 for transaction
    2, which waits on s1 for transaction 1. No PostgreSQL sees it; the younger of the two
    proxied transactions is cancelled, and the direct client goes on."""
    c_key, d_key = keys(0, 15)[13:15]
    e_key = keys(1, 15)[14]
    was = values(c_key, d_key, e_key)
    t1, t2 = PROXY.connect(DBS.name, autocommit=False), PROXY.connect(DBS.name, autocommit=False)
    d = sptest.connect(sptest.PG_PORTS[0], DBS.name, autocommit=False)
    try:
        t1.cursor().execute("UPDATE items SET n = n + 1 WHERE id = %s", (e_key,))
        time.sleep(1.0)
        t2.cursor().execute("UPDATE items SET n = n + 10 WHERE id = %s", (d_key,))
        d.cursor().execute("UPDATE items SET n = n + 100 WHERE id = %s", (c_key,))
        w1 = psycopg_step(t1, "UPDATE items SET n = n + 1 WHERE id = %s", (c_key,))
        time.sleep(0.2)
        wd = psycopg_step(d, "UPDATE items SET n = n + 100 WHERE id = %s", (d_key,))
        time.sleep(0.2)
        w2 = psycopg_step(t2, "UPDATE items SET n = n + 10 WHERE id = %s", (e_key,))
        e2 = w2.outcome()
        assert e2 is not None and e2.pgcode == "40P01", repr(e2)
        assert "process " in e2.detail, e2.detail
        t2.rollback()  # (its lock on d_key goes: the direct client, then transaction 1, go on)
        assert wd.outcome() is None, repr(wd.error)
        d.commit()
        assert w1.outcome() is None, repr(w1.error)
        t1.commit()
    finally:
        for c in (t1, t2, d):
            c.close()
    assert values(c_key, d_key, e_key) == {c_key: was[c_key] + 101, d_key: was[d_key] + 100,
                                           e_key: was[e_key] + 1}, (was, values(c_key, d_key, e_key))


def after_failure():
    unstick(sptest.PG_PORTS)


def teardown():
    if PROXY:
        PROXY.stop()
    if DBS:
        DBS.drop()


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, after_failure=after_failure))
