#!/usr/bin/env python3
"""Scatter-gather streams (SPEC §4): a k-way ORDER BY merge over millions of rows keeps
the proxy's memory flat, and the rows arrive complete and in order.

Shards: three fresh databases (two on PG0, one on PG1). Table big (id bigint, v int)
is range-distributed on id so that each shard's rows are generated where they live:
INSERT ... SELECT generate_series over the shard's own id range, 700,000 rows each
(2,100,000 in all); v = id * 7919 % 100003 interleaves the shards' sorted streams
thoroughly. A raw protocol client reads the answer of

    SELECT id, v FROM big ORDER BY v, id          (simple protocol, text)
    SELECT id, v FROM big                          (plain concatenation)
    SELECT id, v FROM big WHERE id > $1 ORDER BY v, id   (extended protocol, binary)
    COPY (SELECT id, v FROM big ORDER BY v, id) TO STDOUT  (the rows as COPY text)

message by message, checking the order and counting while it streams (nothing is kept),
while a thread samples the proxy's VmRSS every 100 ms. Checks: the row count, strictly
increasing (v, id), the sum of ids, the command tag, and that the RSS during the query
never exceeds the RSS before it by 16 MB or more. Rows per second are printed (no
assertion on speed).

Run by tests/run (env: PG0_PORT, PG1_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 300

import os
import secrets
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import pgwire  # noqa: E402
import sptest  # noqa: E402

HOST = sptest.HOST
PG0, PG1 = sptest.PG_PORTS
WORKDIR = sptest.workdir("sc-stream")
SUFFIX = secrets.token_hex(4)

PER_SHARD = 700_000
N = 3 * PER_SHARD
SHARDS = [(PG0, f"scs0_{SUFFIX}"), (PG1, f"scs1_{SUFFIX}"), (PG0, f"scs2_{SUFFIX}")]
RANGES = [(1, PER_SHARD), (PER_SHARD + 1, 2 * PER_SHARD), (2 * PER_SHARD + 1, 3 * PER_SHARD)]
MOD = 100003
RSS_LIMIT_KB = 16 * 1024
EXPECTED_ID_SUM = N * (N + 1) // 2

KNOWN = {
}

# ------------------------------------------------------------------ harness


free_port = sptest.free_port
class Proxy(sptest.Proxy):
    """One splitpoint process (tests/lib/sptest.py) with its config and log in WORKDIR."""

    def __init__(self, name, body):
        super().__init__(name, body, WORKDIR)

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")
PROXY = None

CHECKS = sptest.Checks(KNOWN)
check = CHECKS.check


# ------------------------------------------------------------------ streaming reader

class Sampler(threading.Thread):
    """Samples the proxy's VmRSS every 100 ms until stopped."""

    def __init__(self, proxy):
        super().__init__(daemon=True)
        self.proxy = proxy
        self.samples = []
        self.stop_flag = threading.Event()

    def run(self):
        while not self.stop_flag.is_set():
            try:
                self.samples.append(self.proxy.rss_kb())
            except (OSError, AssertionError):
                return
            self.stop_flag.wait(0.1)

    def stop(self):
        self.stop_flag.set()
        self.join(5)


class Stream:
    """Reads one query's answer from a pgwire connection's socket without keeping rows:
    each DataRow is decoded, checked against the previous one and dropped."""

    def __init__(self, conn, ordered, binary):
        self.conn = conn
        self.ordered = ordered
        self.binary = binary
        self.rows = 0
        self.id_sum = 0
        self.prev = None
        self.order_errors = 0
        self.first_order_error = None
        self.tag = None
        self.error = None
        self.notices = []
        self.columns = None
        self.on_progress = None  # called every 200,000 rows (an RSS sample)

    def row(self, body):
        # Int16 count, then (Int32 len, bytes) per column: id, v
        n1 = struct.unpack_from("!i", body, 2)[0]
        a = body[6:6 + n1]
        n2 = struct.unpack_from("!i", body, 6 + n1)[0]
        b = body[10 + n1:10 + n1 + n2]
        if self.binary:
            self.take(struct.unpack("!q", a)[0], struct.unpack("!i", b)[0])
        else:
            self.take(int(a), int(b))

    def copy_row(self, body):
        # COPY text: one CopyData message per row, "id<TAB>v<LF>"
        a, b = body.rstrip(b"\n").split(b"\t")
        self.take(int(a), int(b))

    def take(self, i, v):
        if self.rows % 200_000 == 0 and self.on_progress is not None:
            self.on_progress()
        self.rows += 1
        self.id_sum += i
        if self.ordered:
            cur = (v, i)
            if self.prev is not None and not self.prev < cur:
                self.order_errors += 1
                if self.first_order_error is None:
                    self.first_order_error = (self.rows, self.prev, cur)
            self.prev = cur

    def read(self, timeout=120):
        sock = self.conn.sock
        sock.settimeout(timeout)
        buf = bytearray(self.conn.buf)
        self.conn.buf.clear()
        pos = 0
        while True:
            # parse every complete message in buf[pos:]
            while len(buf) - pos >= 5:
                t = buf[pos]
                length = struct.unpack_from("!i", buf, pos + 1)[0]
                if len(buf) - pos < 1 + length:
                    break
                body = bytes(buf[pos + 5:pos + 1 + length])
                pos += 1 + length
                if t == 0x44:  # 'D'
                    self.row(body)
                elif t == 0x64:  # 'd' CopyData
                    self.copy_row(body)
                elif t == 0x54:  # 'T'
                    self.columns = pgwire.decode_row_description(body)
                elif t == 0x43:  # 'C'
                    self.tag = pgwire.decode_command_complete(body)
                elif t == 0x45:  # 'E'
                    self.error = pgwire.decode_fields(body)
                elif t == 0x4E:  # 'N'
                    self.notices.append(pgwire.decode_fields(body))
                elif t == 0x5A:  # 'Z'
                    self.conn.buf = bytearray(buf[pos:])
                    return
            del buf[:pos]
            pos = 0
            chunk = sock.recv(1 << 18)
            if not chunk:
                raise pgwire.ConnectionClosed("proxy closed the connection")
            buf += chunk


def run_stream(cid, conn, send, ordered, binary, verb="SELECT"):
    before = PROXY.rss_kb()
    sampler = Sampler(PROXY)
    st = Stream(conn, ordered, binary)
    st.on_progress = lambda: sampler.samples.append(PROXY.rss_kb())
    t0 = time.monotonic()
    sampler.start()
    try:
        send()
        st.read()
    finally:
        sampler.stop()
    took = time.monotonic() - t0
    after = PROXY.rss_kb()
    peak = max(sampler.samples + [after])
    print(f"     {cid}: {st.rows} rows in {took:.1f}s = {st.rows / took:,.0f} rows/s; proxy VmRSS before "
          f"{before} kB, peak {peak} kB (+{peak - before} kB), after {after} kB; {len(sampler.samples)} samples",
          flush=True)
    check(st.error is None, cid, lambda: f"error: {st.error}")
    check(st.rows == N, cid, lambda: f"rows: expected {N}, got {st.rows}")
    check(st.id_sum == EXPECTED_ID_SUM, cid, lambda: f"sum of ids: expected {EXPECTED_ID_SUM}, got {st.id_sum}")
    check(st.tag == f"{verb} {N}", cid, lambda: f"command tag: {st.tag!r}")
    if ordered:
        check(st.order_errors == 0, cid,
              lambda: f"{st.order_errors} rows out of (v, id) order; first at row {st.first_order_error}")
    check(len(sampler.samples) >= 10, cid, lambda: f"only {len(sampler.samples)} RSS samples")
    check(peak - before < RSS_LIMIT_KB, cid,
          lambda: f"proxy RSS grew by {peak - before} kB during the query (limit {RSS_LIMIT_KB} kB)")
    if st.columns is not None:
        check([(c.name, c.type_oid) for c in st.columns] == [("id", 20), ("v", 23)], cid,
              lambda: f"columns: {st.columns}")
    return st


# ------------------------------------------------------------------ setup

def superuser(port, db="postgres"):
    return pgwire.connect(HOST, port, "postgres", db, password="postgres", timeout=120)


def setup():
    global PROXY
    t0 = time.monotonic()
    for (port, db), (lo, hi) in zip(SHARDS, RANGES):
        with superuser(port) as c:
            c.query(f"CREATE DATABASE {db} OWNER app").raise_error()
            c.query(f"ALTER DATABASE {db} SET work_mem = '64MB'").raise_error()
        with pgwire.connect(HOST, port, "app", db, password="secret", timeout=300) as c:
            c.query("CREATE TABLE big (id bigint NOT NULL, v int NOT NULL)").raise_error()
            c.query(f"INSERT INTO big SELECT g, (g::bigint * 7919) % {MOD} FROM generate_series({lo}, {hi}) g").raise_error()
            c.query("VACUUM ANALYZE big").raise_error()
    print(f"     loaded {N} rows on 3 shards in {time.monotonic() - t0:.1f}s", flush=True)
    lines = "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, password: secret }}"
                      for i, (port, db) in enumerate(SHARDS))
    PROXY = Proxy("stream", f"""
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
{lines}
distributions:
  - name: by_id
    method: range
    ranges:
      - {{ upto: {RANGES[1][0]}, shard: s0 }}
      - {{ upto: {RANGES[2][0]}, shard: s1 }}
      - {{ shard: s2 }}
    tables:
      big: id
scatter:
  deadline: 240s
  max_deadline: 240s
""").start()


def teardown():
    if "c" in CONN:
        CONN["c"].sock.close()
    if PROXY is not None:
        PROXY.stop()
    for port, db in SHARDS:
        try:
            with superuser(port) as c:
                c.query(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {db}: {e}")


# ------------------------------------------------------------------ tests

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


CONN = {}


@test
def warm_up_and_sanity():
    c = pgwire.connect(HOST, PROXY.port, "app", "app", password="secret", timeout=120)
    CONN["c"] = c
    r = c.query("SELECT count(*), sum(id), min(v), max(v) FROM big")
    check(r.error is None and r.rows == [[str(N), str(EXPECTED_ID_SUM), "0", str(MOD - 1)]], "sanity",
          lambda: f"aggregate: {r.error or r.rows}")
    # a first merge, partly read, so the proxy's steady-state allocations exist before measuring
    r = c.query("SELECT id, v FROM big ORDER BY v, id LIMIT 200000")
    check(r.error is None and len(r.rows) == 200000, "sanity", lambda: f"LIMIT 200000: {r.error or len(r.rows)}")
    rows = [(int(v), int(i)) for i, v in r.rows]
    check(rows == sorted(rows) and len(set(rows)) == len(rows), "sanity", lambda: "LIMIT 200000 not in order")


@test
def limit_cancels_the_shards():
    """LIMIT over a plain concatenation: after 10 rows the proxy cancels the shards,
    which would otherwise go on streaming 700,000 rows each."""
    c = CONN["c"]
    marker = f"sp_stream_limit_{SUFFIX}"
    t0 = time.monotonic()
    r = c.query(f"SELECT id, v, '{marker}' AS m FROM big LIMIT 10")
    took = time.monotonic() - t0
    check(r.error is None and len(r.rows) == 10, "limit", lambda: f"LIMIT 10: {r.error or len(r.rows)}")
    print(f"     LIMIT 10 over 2,100,000 rows answered in {took:.2f}s")
    deadline = time.monotonic() + 10
    while True:
        busy = []
        for port, db in SHARDS:
            with pgwire.connect(HOST, port, "app", db, password="secret", timeout=30) as d:
                n = d.scalar(f"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                             f"AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()")
                if n != "0":
                    busy.append(db)
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(not busy, "limit", lambda: f"shards still running the limited statement 10s later: {busy}")
    r = c.query("SELECT count(*) FROM big WHERE id > 0")
    check(r.error is None and r.rows == [[str(N)]], "limit", lambda: f"next statement: {r.error or r.rows}")


@test
def ordered_merge_simple_protocol_memory_flat():
    c = CONN["c"]
    run_stream("order-by-simple", c, lambda: c.send(pgwire.query_msg("SELECT id, v FROM big ORDER BY v, id")),
               ordered=True, binary=False)


@test
def ordered_copy_to_stdout_memory_flat():
    c = CONN["c"]
    run_stream("copy-order-by", c,
               lambda: c.send(pgwire.query_msg("COPY (SELECT id, v FROM big ORDER BY v, id) TO STDOUT")),
               ordered=True, binary=False, verb="COPY")


@test
def concatenation_memory_flat():
    c = CONN["c"]
    run_stream("concat-simple", c, lambda: c.send(pgwire.query_msg("SELECT id, v FROM big")),
               ordered=False, binary=False)


@test
def ordered_merge_extended_binary_memory_flat():
    c = CONN["c"]
    sql = "SELECT id, v FROM big WHERE id > $1 ORDER BY v, id"
    run_stream("order-by-extended-binary", c,
               lambda: c.send([pgwire.parse_msg(sql), pgwire.bind_msg(["0"], "", "", (), [1]),
                               pgwire.describe_msg("P"), pgwire.execute_msg("", 0), pgwire.sync_msg()]),
               ordered=True, binary=True)
    r = c.query("SELECT 1")
    check(r.error is None and r.rows == [["1"]], "after", lambda: f"session after the streams: {r.error}")


# ------------------------------------------------------------------ main

if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, setup, teardown, checks=CHECKS, watch=lambda: [PROXY]))
