#!/usr/bin/env python3
"""Shared set-up for the real-client tests (tests/integration/test_client_*).

Every client test points an unmodified driver at splitpoint in front of the two shared
PostgreSQL instances (PG0_PORT, PG1_PORT), each with a fresh database made for the run
and dropped at the end. The sharding layout is the same for every client:

  accounts(id bigint primary key, owner text, balance numeric)   hash, 16 partitions
                                                                  (default placement:
                                                                  s0 0-7, s1 8-15)
  events(id bigint primary key, kind text)                       range: id < 1000 -> s0,
                                                                  id >= 1000 -> s1
  currencies(code text primary key, name text)                   reference table

Used as a module by the Python tests and as a command by the shell tests:

  clients.py ensure-apt PKG...        install the Debian packages that are missing
  clients.py create-dbs DB            CREATE DATABASE DB OWNER app on both shards
  clients.py drop-dbs DB              DROP DATABASE IF EXISTS DB WITH (FORCE) on both
  clients.py config DB PORT MPORT [LAYOUT]
                                      print the proxy config (LAYOUT: drivers | pgbench)
  clients.py verify DB [LAYOUT]       read both shards DIRECTLY: every row of a sharded
                                      table is on the shard that owns its key (hash
                                      partition computed by PostgreSQL itself with a
                                      scratch PARTITION BY HASH table), reference tables
                                      are identical on both; prints a summary, exit 1
                                      on any misplaced or missing row
  clients.py shard-of DB ID...        print "ID SHARD" for accounts keys (0 or 1)

Known failures: a check that fails because the PROXY is wrong is still run, and
reported as "KNOWN FAILURE: what (expected ... vs got ...)" on stdout instead of
failing the test (Checker.known). When such a check passes it prints
"KNOWN FAILURE NOW PASSES: ..." so it can be turned back into a hard assertion.
"""

import os
import subprocess
import sys

import sptest
from sptest import HOST, PG_PORTS

P = 16          # hash partitions of accounts / pgbench_accounts
N = 2           # shards
RANGE_BOUND = 1000  # events: id < 1000 on s0, the rest on s1

# Per layout: sharded tables (table, key, method) and reference tables (table, order by).
LAYOUTS = {
    "drivers": {
        "sharded": [("accounts", "id", "hash"), ("events", "id", "range")],
        "reference": [("currencies", "code")],
    },
    "pgbench": {
        "sharded": [("pgbench_accounts", "aid", "hash"), ("pgbench_history", "aid", "hash")],
        "reference": [("pgbench_branches", "bid"), ("pgbench_tellers", "tid")],
    },
}


# ------------------------------------------------------------------ packages

def ensure_apt(*packages):
    """Installs the Debian packages dpkg does not report as installed (sudo when not
    root). Runs no apt command when nothing is missing."""
    missing = []
    for p in packages:
        r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", p], capture_output=True, text=True)
        if r.returncode != 0 or r.stdout.strip() != "installed":
            missing.append(p)
    if not missing:
        return []
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    opts = ["-q", "-o", "DPkg::Lock::Timeout=300"]
    print(f"installing missing Debian packages: {' '.join(missing)}", flush=True)
    cmd = sudo + ["apt-get"] + opts + ["install", "-y", "--no-install-recommends"] + missing
    r = subprocess.run(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr)
    if r.returncode != 0:
        # Package lists may be missing or stale on a fresh machine.
        subprocess.run(sudo + ["apt-get"] + opts + ["update"], env=env, stdout=sys.stderr, stderr=sys.stderr,
                       check=True)
        subprocess.run(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr, check=True)
    return missing


def deb_version(package):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "not installed"


# ------------------------------------------------------------------ proxy, databases

def layout_config(db, layout="drivers"):
    """The proxy config for `layout` on database `db` of both shards, without the
    listen lines (sptest.Proxy writes those)."""
    p0, p1 = PG_PORTS
    head = f"""\
pool_mode: transaction
auth: scram-sha-256
users:
  - {{ name: app, password: secret }}
shards:
  - {{ name: s0, host: {HOST}, port: {p0}, database: {db}, user: app, password: secret, pool_size: 20 }}
  - {{ name: s1, host: {HOST}, port: {p1}, database: {db}, user: app, password: secret, pool_size: 20 }}
distributions:
"""
    if layout == "drivers":
        return head + f"""\
  - name: by_account
    method: hash
    partitions: {P}
    tables: {{ accounts: id }}
  - name: by_event
    method: range
    ranges:
      - {{ upto: {RANGE_BOUND}, shard: s0 }}
      - {{ shard: s1 }}
    tables: {{ events: id }}
reference_tables: [currencies]
transactions: {{ cross_shard_writes: refuse }}
"""
    if layout == "pgbench":
        return head + f"""\
  - name: by_aid
    method: hash
    partitions: {P}
    tables: {{ pgbench_accounts: aid, pgbench_history: aid }}
reference_tables: [pgbench_branches, pgbench_tellers]
"""
    raise ValueError(layout)


def config_text(db, port, metrics_port, layout="drivers"):
    return f"listen: {HOST}:{port}\nmetrics_listen: {HOST}:{metrics_port}\n" + layout_config(db, layout)


class Proxy(sptest.Proxy):
    """A sptest.Proxy with the client tests' layout on database `db` of both shards."""

    def __init__(self, name, db, work, layout="drivers"):
        super().__init__(name, layout_config(db, layout), work)


def shard_conn(i, db):
    """A direct connection to shard i's test database (not through the proxy)."""
    return sptest.connect(PG_PORTS[i], db)


create_dbs = sptest.create_databases
drop_dbs = sptest.drop_databases


# ------------------------------------------------------------------ expected placement

def hash_owner(remainder):
    for i in range(N):
        if (i * P) // N <= remainder < ((i + 1) * P) // N:
            return i
    raise AssertionError(remainder)


def range_owner(k):
    return 0 if int(k) < RANGE_BOUND else 1


def hash_remainders(db, keys, sqltype="bigint"):
    """{key: remainder} as PostgreSQL's own PARTITION BY HASH (MODULUS P) places them,
    computed with a temporary table on shard 0 (direct connection)."""
    keys = sorted(set(keys))
    c = shard_conn(0, db)
    cur = c.cursor()
    cur.execute(f"CREATE TEMP TABLE sp_hp (k {sqltype}) PARTITION BY HASH (k)")
    for r in range(P):
        cur.execute(f"CREATE TEMP TABLE sp_hp_{r} PARTITION OF sp_hp FOR VALUES WITH (MODULUS {P}, REMAINDER {r})")
    cur.execute(f"INSERT INTO sp_hp SELECT unnest(%s::{sqltype}[])", (keys,))
    cur.execute("SELECT k, tableoid::regclass::text FROM sp_hp")
    out = {k: int(t.rsplit("_", 1)[1]) for k, t in cur.fetchall()}
    cur.execute("DROP TABLE sp_hp")
    c.close()
    return out


def shard_of_accounts(db, keys):
    """{key: shard index} for accounts ids (hash placement)."""
    return {k: hash_owner(r) for k, r in hash_remainders(db, keys).items()}


def verify_placement(db, layout="drivers", quiet=False):
    """Reads both shards directly. Returns a list of problems (empty when every row of
    every sharded table is on the shard owning its key and reference tables are equal)."""
    problems = []
    spec = LAYOUTS[layout]
    conns = [shard_conn(i, db) for i in range(N)]
    try:
        for table, key, method in spec["sharded"]:
            counts = []
            for i, c in enumerate(conns):
                cur = c.cursor()
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
                if not cur.fetchone()[0]:
                    problems.append(f"{table}: missing on shard s{i}")
                    counts.append(0)
                    continue
                if method == "hash":
                    # Remainders computed on the shard itself, next to its rows: the
                    # partition PostgreSQL's PARTITION BY HASH puts each key in.
                    cur.execute("CREATE TEMP TABLE sp_vp (k bigint) PARTITION BY HASH (k)")
                    for r in range(P):
                        cur.execute(f"CREATE TEMP TABLE sp_vp_{r} PARTITION OF sp_vp "
                                    f"FOR VALUES WITH (MODULUS {P}, REMAINDER {r})")
                    cur.execute(f"INSERT INTO sp_vp SELECT {key} FROM {table}")
                    cur.execute("SELECT split_part(tableoid::regclass::text, '_', 3)::int, count(*), "
                                "min(k), max(k) FROM sp_vp GROUP BY 1 ORDER BY 1")
                    rows = cur.fetchall()
                    cur.execute("DROP TABLE sp_vp")
                    n = sum(r[1] for r in rows)
                    bad = [(rem, cnt, lo) for rem, cnt, lo, _ in rows if hash_owner(rem) != i]
                    for rem, cnt, lo in bad:
                        problems.append(f"{table}: {cnt} row(s) of hash partition {rem} (owner s{hash_owner(rem)}) "
                                        f"on shard s{i}, e.g. {key} = {lo}")
                else:
                    cur.execute(f"SELECT count(*), count(*) FILTER (WHERE ({key} < {RANGE_BOUND}) <> %s), "
                                f"min({key}) FILTER (WHERE ({key} < {RANGE_BOUND}) <> %s) FROM {table}",
                                (i == 0, i == 0))
                    n, nbad, example = cur.fetchone()
                    if nbad:
                        problems.append(f"{table}: {nbad} row(s) of the other range on shard s{i}, "
                                        f"e.g. {key} = {example}")
                counts.append(n)
            if not quiet:
                print(f"placement: {table} ({method} on {key}): s0 {counts[0]} rows, s1 {counts[1]} rows")
        for table, order in spec["reference"]:
            contents = []
            for i, c in enumerate(conns):
                cur = c.cursor()
                cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
                if not cur.fetchone()[0]:
                    problems.append(f"{table}: missing on shard s{i}")
                    contents.append(None)
                    continue
                cur.execute(f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY {order}), '')), count(*) "
                            f"FROM {table} t")
                contents.append(cur.fetchone())
            if contents[0] is not None and contents[0] != contents[1]:
                problems.append(f"{table}: reference copies differ: s0 {contents[0]} vs s1 {contents[1]}")
            if not quiet:
                print(f"placement: {table} (reference): "
                      + ", ".join(f"s{i} {c[1] if c else '-'} rows" for i, c in enumerate(contents)))
    finally:
        for c in conns:
            c.close()
    return problems


# ------------------------------------------------------------------ known proxy bugs
# Diagnoses of the checks the tests report as KNOWN FAILURE (docs/compatibility.md)
# would live here; none is left. Fixed, and their checks hard again: B1, B2 (50bcaec);
# B3, B4, B6, B7 (a batch switching shards before its Sync lost the answers of the shard
# left behind; it is now one transaction: SPT01, or two-phase commit with
# cross_shard_writes: two_phase); B5 (COPY (query) TO merged across shards); B8
# (30ceb22); B9 (a syntax error in a batch was answered twice); B10 (two_phase).

# ------------------------------------------------------------------ checks

class Checker:
    """Checks for one client. A check is hard (AssertionError) unless its name is in
    `known` ({check name: diagnosis}): those are checks that fail because of the PROXY.
    They still run; a failure prints "KNOWN FAILURE: ..." and returns False, a pass
    prints "KNOWN FAILURE NOW PASSES: ..." (turn it back into a hard check).

    `got` may be a callable (or, in `aeq`/`ado`, a coroutine function): an exception it
    raises counts as the check's failure, so a statement the proxy answers with an
    error is reported like a wrong value."""

    def __init__(self, client, known=None):
        self.client = client
        self.known_map = dict(known or {})
        # Development aid: CLIENT_TESTS_SURVEY=1 makes every check soft, to list all
        # the checks a proxy build fails in one run. Never set in CI.
        self.survey = os.environ.get("CLIENT_TESTS_SURVEY") == "1"
        self.used = set()
        self.passed = 0
        self.known_failures = []

    def ok(self, what):
        self.passed += 1
        print(f"ok   {self.client}: {what}", flush=True)

    def is_known(self, what):
        return what in self.known_map or self.survey

    def _result(self, what, good, got, expected, detail=""):
        if self.survey and what not in self.known_map and not good:
            line = f"SURVEY FAILURE: {self.client}: {what} (expected {expected!r} vs got {got!r})"
            print(line, flush=True)
            self.known_failures.append(line)
            return False
        if what in self.known_map:
            self.used.add(what)
            if good:
                self.passed += 1
                print(f"KNOWN FAILURE NOW PASSES: {self.client}: {what} -- make it a hard check again", flush=True)
                return True
            got_s, exp_s = repr(got), repr(expected)
            if len(got_s) > 300:
                got_s = got_s[:300] + "..."
            if len(exp_s) > 300:
                exp_s = exp_s[:300] + "..."
            line = f"KNOWN FAILURE: {self.client}: {what} (expected {exp_s} vs got {got_s})"
            line += f" [{self.known_map[what].split(':')[0]}]"
            print(line, flush=True)
            self.known_failures.append(line)
            return False
        if not good:
            raise AssertionError(f"{self.client}: {what}: expected {expected!r}, got {got!r}" +
                                 (f" ({detail})" if detail else ""))
        self.ok(what)
        return True

    @staticmethod
    def describe_error(e):
        code = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"error {code}: {msg}" if code else f"{type(e).__name__}: {msg}"

    def eq(self, what, got, expected):
        if callable(got):
            try:
                got = got()
            except Exception as e:  # noqa: BLE001
                if not self.is_known(what):
                    raise
                return self._result(what, False, self.describe_error(e), expected)
        return self._result(what, got == expected, got, expected)

    def true(self, what, cond, detail=""):
        return self._result(what, bool(cond), detail or cond, True)

    def do(self, what, fn):
        """Runs a statement with no value to compare; an exception fails the check."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            if not self.is_known(what):
                raise
            return self._result(what, False, self.describe_error(e), "no error")
        return self._result(what, True, "no error", "no error")

    async def aeq(self, what, coro_fn, expected):
        try:
            got = await coro_fn()
        except Exception as e:  # noqa: BLE001
            if not self.is_known(what):
                raise
            return self._result(what, False, self.describe_error(e), expected)
        return self._result(what, got == expected, got, expected)

    async def ado(self, what, coro_fn):
        try:
            await coro_fn()
        except Exception as e:  # noqa: BLE001
            if not self.is_known(what):
                raise
            return self._result(what, False, self.describe_error(e), "no error")
        return self._result(what, True, "no error", "no error")

    def summary(self):
        print(f"{self.client}: {self.passed} checks passed, {len(self.known_failures)} known failure(s)")
        for k in self.known_failures:
            print("  " + k)
        for diag in sorted({self.known_map[w] for w in self.used}):
            print("  diagnosis " + diag)
        for what in sorted(set(self.known_map) - self.used):
            print(f"  note: known failure {what!r} was not reached in this run")


# ------------------------------------------------------------------ runner

def run_client_test(name, db, work, scenarios, checkers, shard_keys):
    """Runs a Python client test with sptest.run_tests. Setup: database `db` on both
    shards, the proxy (layout "drivers") started, the shard of each accounts id in
    `shard_keys`. Tests: each scenario(proxy, shard_of), then the placement check (both
    shards read directly) and the proxy's exit status 0 after SIGTERM (a check of
    checkers[-1]). Teardown stops the proxy, drops `db` and prints each Checker's
    summary. Returns the exit status."""
    state = {}

    def setup():
        create_dbs(db)
        state["proxy"] = Proxy(name, db, work).start()
        state["shard_of"] = shard_of_accounts(db, shard_keys)

    def as_test(fn):
        def t():
            fn(state["proxy"], state["shard_of"])
        t.__name__ = fn.__name__
        return t

    def placement():
        problems = verify_placement(db)
        for p in problems:
            print(f"FAIL placement: {p}")
        assert not problems, f"{len(problems)} placement problem(s)"
        print("placement: every row on the shard owning its key; reference tables identical")

    def clean_exit():
        proxy = state["proxy"]
        assert proxy.alive(), f"splitpoint {proxy.state()}"
        checkers[-1].eq("splitpoint exits with status 0 after SIGTERM", proxy.stop(), 0)

    def teardown():
        if "proxy" in state:
            state["proxy"].stop()
        drop_dbs(db)
        for c in checkers:
            c.summary()

    return sptest.run_tests([as_test(f) for f in scenarios] + [placement, clean_exit], setup, teardown)


# ------------------------------------------------------------------ command line

def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "ensure-apt":
        ensure_apt(*args)
        return 0
    if cmd == "create-dbs":
        create_dbs(args[0])
        return 0
    if cmd == "drop-dbs":
        drop_dbs(args[0])
        return 0
    if cmd == "config":
        sys.stdout.write(config_text(args[0], int(args[1]), int(args[2]), args[3] if len(args) > 3 else "drivers"))
        return 0
    if cmd == "verify":
        problems = verify_placement(args[0], args[1] if len(args) > 1 else "drivers")
        for p in problems:
            print(f"FAIL placement: {p}")
        if not problems:
            print("placement: every row on the shard owning its key; reference tables identical")
        return 1 if problems else 0
    if cmd == "shard-of":
        for k, s in sorted(shard_of_accounts(args[0], [int(a) for a in args[1:]]).items()):
            print(k, s)
        return 0
    print(f"clients.py: unknown command {cmd}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
