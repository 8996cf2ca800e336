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
teardown)`.
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

import psycopg2

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
    c = psycopg2.connect(host=HOST, port=port, user=user, password=password, dbname=db, connect_timeout=10,
                         **kw)
    c.autocommit = autocommit
    return c


def superuser(port, db="postgres"):
    return connect(port, db, "postgres", "postgres")


class Databases:
    """A fresh database owned by app on each shared instance, named <prefix>_<random>."""

    def __init__(self, prefix):
        self.name = f"{prefix}_{secrets.token_hex(4)}"
        for port in PG_PORTS:
            c = superuser(port)
            c.cursor().execute(f"CREATE DATABASE {self.name} OWNER app")
            c.close()

    def shard(self, i):
        """A direct connection to the database on instance i (not through the proxy)."""
        return connect(PG_PORTS[i], self.name)

    def drop(self):
        for port in PG_PORTS:
            try:
                c = superuser(port)
                cur = c.cursor()
                # A failed test may leave prepared transactions; the runner checks for none.
                cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", (self.name,))
                gids = [r[0] for r in cur.fetchall()]
                c.close()
                if gids:
                    d = connect(port, self.name, "postgres", "postgres")
                    for g in gids:
                        d.cursor().execute(f"ROLLBACK PREPARED '{g}'")
                    d.close()
                c = superuser(port)
                c.cursor().execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
                c.close()
            except Exception as e:  # noqa: BLE001
                print(f"warning: could not drop {self.name} on port {port}: {e}")


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


def clean_shutdown():
    """A last test for files that use proxies with `with`: each exited with status 0 on SIGTERM."""
    assert not SHUTDOWN_PROBLEMS, "\n".join(SHUTDOWN_PROBLEMS)


def kill_all():
    """Kills every proxy of this process still running (the last step of a test file)."""
    for p in PROXIES:
        p.kill()


def run_tests(tests, setup=None, teardown=None):
    """Runs setup, each test function (ok/FAIL with its time; after a failure the
    traceback and every proxy's log tail), teardown, then kills the proxies left running.
    Returns the exit status for sys.exit."""
    failed = 0
    try:
        if setup:
            setup()
        for fn in tests:
            t0 = time.monotonic()
            try:
                fn()
                print(f"ok   {fn.__name__} ({time.monotonic() - t0:.2f}s)", flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL {fn.__name__} ({time.monotonic() - t0:.2f}s)", flush=True)
                traceback.print_exc()
                for p in PROXIES:
                    print(f"--- {p.name} log tail:\n{p.log_tail()}\n---", flush=True)
    finally:
        try:
            if teardown:
                teardown()
        finally:
            kill_all()
    print(f"{len(tests) - failed}/{len(tests)} passed")
    return 1 if failed else 0
