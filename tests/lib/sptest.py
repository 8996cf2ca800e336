"""Shared harness of the Python integration tests: the environment tests/run gives,
free ports, a splitpoint process with its own config, fresh databases on the shared
PostgreSQL instances.

    import sptest
    dbs = sptest.Databases("tp")            # one fresh database per shared instance
    proxy = sptest.Proxy("tp", body).start()  # body: YAML after listen/metrics_listen
    ...
    proxy.stop(); dbs.drop()
"""

import os
import secrets
import signal
import socket
import subprocess
import tempfile
import textwrap
import time

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


def connect(port, db, user="app", password="secret", autocommit=True):
    c = psycopg2.connect(host=HOST, port=port, user=user, password=password, dbname=db, connect_timeout=10)
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


class Proxy:
    """One splitpoint process with its own config file and log in `workdir`."""

    def __init__(self, name, body, workdir_path):
        self.name = name
        self.port = free_port()
        self.metrics_port = free_port()
        self.config_path = os.path.join(workdir_path, name + ".yaml")
        self.log_path = os.path.join(workdir_path, name + ".log")
        self.proc = None
        with open(self.config_path, "w") as f:
            f.write(f"listen: {HOST}:{self.port}\nmetrics_listen: {HOST}:{self.metrics_port}\n" +
                    textwrap.dedent(body).strip() + "\n")

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([SP_BIN, "--config", self.config_path], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name}: splitpoint exited with {self.proc.returncode}; log:\n"
                                     f"{self.log_tail()}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: not listening on {self.port} after 15s")
            time.sleep(0.05)

    def connect(self, db, autocommit=True):
        return connect(self.port, db, autocommit=autocommit)

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def state(self):
        rc = None if self.proc is None else self.proc.poll()
        if rc is None:
            return "running"
        return f"DIED: killed by signal {-rc}" if rc < 0 else f"DIED: exited with status {rc}"

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n".join(f.read().splitlines()[-n:])
        except OSError:
            return ""
