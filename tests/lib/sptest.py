"""Shared harness of the Python integration tests: the environment tests/run gives,
free ports, a splitpoint process with its own config, fresh databases on the shared
PostgreSQL instances.

    import sptest
    dbs = sptest.Databases("tp")            # one fresh database per shared instance
    proxy = sptest.Proxy("tp", body, workdir).start()  # body: YAML after listen/metrics_listen
    ...
    proxy.stop(); dbs.drop()

    with sptest.Proxy("x", body, workdir) as p:   # started; stopped at the end, a shutdown
        ...                                        # that is not clean lands in SHUTDOWN_PROBLEMS

Test files that keep their tests in a list run them with `sptest.run_tests(TESTS, setup,
teardown)` (its arguments: hooks around each test, proxies that must stay up, soft
checks); soft checks with a map of known proxy bugs are a `sptest.Checks`.
"""

import os
import secrets
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
import traceback
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = "127.0.0.1"
SP_ROOT = os.environ.get("SP_ROOT") or os.path.abspath(os.path.join(HERE, "..", ".."))
SP_BIN = os.environ.get("SP_BIN") or os.path.join(os.environ.get("BUILD_DIR", os.path.join(SP_ROOT, "build")),
                                                  "splitpoint")
PG_PORTS = [int(os.environ["PG0_PORT"]), int(os.environ["PG1_PORT"])]
os.environ.setdefault("TEST_TMP", tempfile.gettempdir())


def workdir(name):
    d = os.environ.get("TEST_WORKDIR") or tempfile.mkdtemp(prefix=name + "-", dir=os.environ["TEST_TMP"])
    os.makedirs(d, exist_ok=True)
    return d


def free_port():
    out = subprocess.run(["bash", os.path.join(SP_ROOT, "tests", "lib", "pg.sh"), "free_port"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def connect(port, db, user="app", password="secret", autocommit=True, **kw):
    """A psycopg2 connection; `kw` goes to psycopg2.connect (sslmode, application_name, ...)."""
    import psycopg2  # here, not at the top: clients.py installs it when missing before using it
    c = psycopg2.connect(host=HOST, port=port, user=user, password=password, dbname=db, connect_timeout=10,
                         **kw)
    c.autocommit = autocommit
    return c


def superuser(port, db="postgres"):
    return connect(port, db, "postgres", "postgres")


def alter_system(setting):
    """ALTER SYSTEM <setting> on both shared instances, and reloaded."""
    for port in PG_PORTS:
        c = superuser(port)
        c.cursor().execute(f"ALTER SYSTEM {setting}")
        c.cursor().execute("SELECT pg_reload_conf()")
        c.close()
    time.sleep(0.5)  # the postmaster rereads its configuration on SIGHUP


def shared_logs():
    """The server logs of the two shared instances."""
    return [os.path.join(os.environ["PG0_DIR"], "log"), os.path.join(os.environ["PG1_DIR"], "log")]


def create_databases(name):
    """CREATE DATABASE name OWNER app on each shared instance."""
    for port in PG_PORTS:
        c = superuser(port)
        c.cursor().execute(f"CREATE DATABASE {name} OWNER app")
        c.close()


def drop_database(port, name):
    """Drops database `name` on the instance at `port`, after rolling back the prepared
    transactions a failed test may have left in it (the runner checks for none)."""
    try:
        c = superuser(port)
        cur = c.cursor()
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", (name,))
        gids = [r[0] for r in cur.fetchall()]
        c.close()
        if gids:
            d = connect(port, name, "postgres", "postgres")
            for g in gids:
                d.cursor().execute(f"ROLLBACK PREPARED '{g}'")
            d.close()
        c = superuser(port)
        c.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        c.close()
    except Exception as e:  # noqa: BLE001
        print(f"warning: could not drop {name} on port {port}: {e}")


def drop_databases(name):
    """Drops database `name` on each shared instance (drop_database)."""
    for port in PG_PORTS:
        drop_database(port, name)


class Databases:
    """A fresh database owned by app on each shared instance, named <prefix>_<random>."""

    def __init__(self, prefix):
        self.name = f"{prefix}_{secrets.token_hex(4)}"
        create_databases(self.name)

    def shard(self, i):
        """A direct connection to the database on instance i (not through the proxy)."""
        return connect(PG_PORTS[i], self.name)

    def drop(self):
        drop_databases(self.name)


class ThreeShards:
    """Three shard databases over the two shared instances (<prefix>0_<r> and <prefix>1_<r>
    on PG0, <prefix>2_<r> on PG1) and one plain database <prefix>plain_<r> on PG1: a
    sharded side and one PostgreSQL to compare it with. The names are fixed at
    construction; create() makes the databases, drop() drops those it made."""

    def __init__(self, prefix):
        r = secrets.token_hex(4)
        p0, p1 = PG_PORTS
        self.shards = [(p0, f"{prefix}0_{r}"), (p0, f"{prefix}1_{r}"), (p1, f"{prefix}2_{r}")]
        self.plain = (p1, f"{prefix}plain_{r}")
        self.created = []

    def create(self, plain=True):
        for port, db in self.shards + ([self.plain] if plain else []):
            c = superuser(port)
            c.cursor().execute(f"CREATE DATABASE {db} OWNER app")
            c.close()
            self.created.append((port, db))
        return self

    def shards_yaml(self, pool_size=10):
        """The config's `shards:` list (s0, s1, s2; user app, password secret)."""
        return "\n".join(f"  - {{ name: s{i}, host: {HOST}, port: {port}, database: {db}, user: app, "
                         f"password: secret, pool_size: {pool_size} }}" for i, (port, db) in enumerate(self.shards))

    def drop(self):
        for port, db in self.created:
            drop_database(port, db)
        self.created = []


PROXIES = []  # every Proxy started in this process (log tails after a failure, kill_all)
SHUTDOWN_PROBLEMS = []  # proxies used with `with` that did not exit with status 0 after SIGTERM


class Proxy:
    """One splitpoint process with its own config file and log in `workdir`."""

    def __init__(self, name, body, workdir_path):
        self.name = name
        self.port = free_port()
        self.metrics_port = free_port()
        self.config_path = os.path.join(workdir_path, name + ".yaml")
        self.log_path = os.path.join(workdir_path, name + ".log")
        self.proc = None
        self.killed = False  # stop() had to kill it
        for path in (self.log_path, self.config_path):
            if os.path.exists(path):
                os.unlink(path)
        self.write_config(body)

    def write_config(self, body, raw=False):
        """Writes the config file atomically (a reload never reads half a file): the listen
        lines and `body`, or `body` alone as it is when `raw` (say, a deliberately broken file)."""
        text = body if raw else (f"listen: {HOST}:{self.port}\nmetrics_listen: {HOST}:{self.metrics_port}\n" +
                                 textwrap.dedent(body).strip() + "\n")
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def reload(self, body=None, raw=False):
        """SIGHUP, after rewriting the config file when `body` is given (see write_config)."""
        if body is not None:
            self.write_config(body, raw)
        self.proc.send_signal(signal.SIGHUP)

    def start(self, timeout=15):
        """Starts splitpoint and waits up to `timeout` s until it accepts connections."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([SP_BIN, "--config", self.config_path], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        if self not in PROXIES:
            PROXIES.append(self)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: splitpoint exited with {self.proc.returncode} before "
                                     f"listening; log:\n{self.log_tail()}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: not listening on {self.port} after {timeout}s; log:\n"
                                     f"{self.log_tail()}")
            time.sleep(0.05)

    def connect(self, db, autocommit=True, **kw):
        return connect(self.port, db, autocommit=autocommit, **kw)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=20, check=False):
        """SIGTERM, then waits up to `timeout` s; kills it if still running then (and, when
        `check`, raises AssertionError). Returns the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.killed = True
                if check:
                    raise AssertionError(f"{self.name}: still running {timeout}s after SIGTERM; killed") from None
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        rc = self.stop()
        if self.killed:
            SHUTDOWN_PROBLEMS.append(f"splitpoint {self.name} did not stop within 20s of SIGTERM; killed")
        elif rc != 0:
            SHUTDOWN_PROBLEMS.append(f"splitpoint {self.name} exited with status {rc} after SIGTERM: "
                                     f"{self.log_tail(2).strip()}")

    def state(self):
        rc = None if self.proc is None else self.proc.poll()
        if rc is None:
            return "running"
        return f"DIED: killed by signal {-rc}" if rc < 0 else f"DIED: exited with status {rc}"

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    def metric(self, name, labels=None):
        """Sum of the samples of metric `name` whose labels include `labels` ({label: value})."""
        with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return metric_value(text, name, labels or {})


def query(port, db, sql, params=None, user="app", password="secret"):
    """One statement on a connection of its own (autocommit); its rows, or None."""
    c = connect(port, db, user, password)
    try:
        cur = c.cursor()
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None
    finally:
        c.close()


def admin(port, sql, user="admin", password="adminpw"):
    """One admin console command (database splitpoint); its rows, or None."""
    return query(port, "splitpoint", sql, None, user, password)


def admin_refused(proxy, sql, code, words):
    """Asserts that admin command `sql` on `proxy` fails with SQLSTATE `code` and a
    message holding `words`."""
    import psycopg2  # (as in connect)
    try:
        admin(proxy.port, sql)
    except psycopg2.Error as e:
        assert e.pgcode == code and words in str(e), (sql, e.pgcode, str(e))
        return
    raise AssertionError(f"{sql}: accepted")


def rss_kb(pid):
    """VmRSS of a running process in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def metric_value(text, name, labels):
    """Sum of the samples of `name` in Prometheus text `text` whose labels include `labels`."""
    total = 0.0
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{", 1)[0] == name and all(w in head for w in want):
            total += float(value)
    return total


def decision_rows_left(port, db, within=15):
    """The two-phase decision rows still on the recorder (port, db) after waiting up to
    `within` seconds for them to go: the proxy deletes the records of committed
    transactions in batches, every 5 s (server/txn/two_phase.hpp, defer_delete)."""
    deadline = time.monotonic() + within
    while True:
        if not query(port, db, "SELECT to_regclass('splitpoint.two_phase_decisions') IS NOT NULL")[0][0]:
            return []
        left = query(port, db, "SELECT txid, decision FROM splitpoint.two_phase_decisions")
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.25)


def clean_shutdown():
    """A last test for files that use proxies with `with`: each exited with status 0 on SIGTERM."""
    assert not SHUTDOWN_PROBLEMS, "\n".join(SHUTDOWN_PROBLEMS)


def kill_all():
    """Kills every proxy of this process still running (the last step of a test file)."""
    for p in PROXIES:
        p.kill()


class Checks:
    """Soft checks: a failed one is recorded (and fails the test that made it, under
    run_tests(checks=...)) and the test goes on. A check whose key is in `known`
    ({key: diagnosis}, a known proxy bug) prints "KNOWN FAILURE: ..." instead and fails
    nothing; one that passes every time is noted at the end (make it hard again).
    `label` starts the line printed for a failure."""

    def __init__(self, known=None, label="CHECK FAILED"):
        self.known = dict(known or {})
        self.label = label
        self.n = 0
        self.failures = []
        self.known_seen = []
        self.known_passed = []

    def check(self, ok, cid, detail, key=None):
        """One check named `cid`; `detail` is a function building the failure text; `key`
        (default cid) is what is looked up in `known`. Returns ok."""
        self.n += 1
        key = cid if key is None else key
        if ok:
            if key in self.known and key not in self.known_passed:
                self.known_passed.append(key)
            return True
        text = detail()
        if key in self.known:
            self.known_seen.append(key)
            print(f"KNOWN FAILURE: [{cid}] {self.known[key]}\n    {text}", flush=True)
        else:
            self.failures.append(f"[{cid}] {text}")
            print(f"{self.label} [{cid}] {text}", flush=True)
        return False

    def summary(self, seconds, limit=60):
        print(f"\n{self.n} checks, {len(self.failures)} failures, {len(set(self.known_seen))} known failures "
              f"({seconds:.1f}s)")
        for k in self.known_passed:
            if k not in self.known_seen:
                print(f"NOTE: known failure {k} passed every check: make it a hard assertion again")
        if self.failures:
            print("failures:")
            for f in self.failures[:limit]:
                print("  " + f.replace("\n", "\n  "))
            if len(self.failures) > limit:
                print(f"  ... {len(self.failures) - limit} more")


def _terminated(signum, frame):
    raise SystemExit(128 + signum)  # runs the finally: blocks (teardown) on the runner's timeout


def run_tests(tests, setup=None, teardown=None, checks=None, before_each=None, after_each=None,
              after_failure=None, watch=None):
    """Runs setup, each test function (ok/FAIL with its time; after a failure the
    traceback and every proxy's log tail), teardown, then kills the proxies left running.
    Returns the exit status for sys.exit: 1 when setup or any test failed.

    checks: a Checks; a test during which one of its checks failed is FAIL too, and its
    summary is printed at the end. before_each(): run before each test; after_each():
    after each test function returned, as part of the test (an exception fails it).
    after_failure(): after a failed test, to reset what it may have left. watch(): the
    proxies that must stay up; when one is not running after a test, the remaining tests
    are not run (and count as failed). SIGTERM (the runner's timeout) runs teardown."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    t_start = time.monotonic()
    failed, passed, to_run = [], 0, tests

    def tails():
        for p in PROXIES:
            print(f"--- {p.name} ({p.state()}) log tail:\n{p.log_tail()}\n---", flush=True)

    try:
        try:
            if setup:
                setup()
        except Exception:  # noqa: BLE001
            failed.append("setup")
            print("FAIL setup", flush=True)
            traceback.print_exc()
            tails()
            to_run = []
        for i, fn in enumerate(to_run):
            t0 = time.monotonic()
            n0 = len(checks.failures) if checks else 0
            try:
                if before_each:
                    before_each()
                fn()
                if after_each:
                    after_each()
                if checks and len(checks.failures) > n0:
                    raise AssertionError(f"{len(checks.failures) - n0} check(s) failed (above)")
                print(f"ok   {fn.__name__} ({time.monotonic() - t0:.2f}s)", flush=True)
                passed += 1
            except Exception:  # noqa: BLE001
                failed.append(fn.__name__)
                print(f"FAIL {fn.__name__} ({time.monotonic() - t0:.2f}s)", flush=True)
                traceback.print_exc()
                tails()
                if after_failure:
                    try:
                        after_failure()
                    except Exception:  # noqa: BLE001
                        traceback.print_exc()
            dead = [p for p in (watch() if watch else []) if p.state() != "running"]
            if dead:
                rest = tests[i + 1:]
                print(f"splitpoint {', '.join(f'{p.name} {p.state()}' for p in dead)} during {fn.__name__}; "
                      f"{len(rest)} remaining test(s) not run", flush=True)
                for p in dead:
                    print(f"--- {p.name} log tail:\n{p.log_tail()}\n---", flush=True)
                failed += [t.__name__ + " (not run)" for t in rest] or ["(a proxy died)"]
                break
    finally:
        try:
            if teardown:
                teardown()
        finally:
            kill_all()
    if checks:
        checks.summary(time.monotonic() - t_start)
    print(f"{passed}/{len(tests)} passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
