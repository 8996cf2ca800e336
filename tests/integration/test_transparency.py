#!/usr/bin/env python3
"""Differential transparency test: every SQL script in tests/integration/transparency/
is run with `psql -X -a -f SCRIPT` (stdout and stderr together, so errors, notices and
results interleave in the order psql saw them) directly against PostgreSQL (pg0) and
through splitpoint (one shard on pg0, nothing sharded, shard `database:` omitted so it
follows the client's), and the two outputs must be the same:

  - session mode (pool_size 4): identical for every script, no exceptions;
  - transaction mode (pool_size 2): identical, except where transaction pooling
    inherently differs from a dedicated connection; that expected difference is kept in
    transparency/SCRIPT.txn.diff (a unified diff direct -> proxy with the hunk line
    numbers removed) and must match exactly. Any other difference fails.

Each (script, mode) gets a fresh database tr_<script> owned by app, dropped and
created again between the direct run and the proxy run (same name, so nothing in the
output needs normalizing except the port of psql's "You are now connected" line).

Script conventions (see the scripts' headers):
  - `-- env: NAME=value` lines set environment variables for psql (PGOPTIONS,
    PGDATESTYLE, PGTZ: startup parameters);
  - `-- modes: session` (or transaction) restricts a script to those modes;
  - `\\! $TR_HOLD` ... `\\! $TR_RELEASE`: through the proxy, another client of the
    same database takes a backend in an open transaction in between. Pools hand out
    the most recently released backend (preferring one on the client's own I/O
    thread: the proxy runs with `workers: 1` so the choice is deterministic), so in
    transaction mode the statements in between run on another backend than psql's
    earlier ones unless the proxy pinned the session (this is what makes WITH HOLD
    cursors, SQL PREPARE, temp tables visibly stay behind on the old backend); in
    session mode psql keeps its own backend. Directly against PostgreSQL both are
    `true`.

TRANSPARENCY_UPDATE=1 rewrites the .txn.diff files from this run's transaction-mode
differences (and removes those with none) instead of failing on them; review them,
they must only contain differences inherent to transaction pooling.
TRANSPARENCY_SCRIPTS=a,b limits the run to those scripts (names without .sql).
Outputs of each run are kept in $TEST_WORKDIR/<mode>/ (*.direct.out, *.proxy.out).
Run by tests/run (PG0_PORT, SP_BIN, SP_ROOT, TEST_TMP, TEST_WORKDIR).
"""
# test-timeout: 900

import glob
import os
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import psycopg2  # noqa: E402
import sptest  # noqa: E402
from sptest import HOST  # noqa: E402

PG0 = sptest.PG_PORTS[0]
WORK = sptest.workdir("test_transparency")
SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transparency")
UPDATE = os.environ.get("TRANSPARENCY_UPDATE") == "1"
ONLY = [s for s in os.environ.get("TRANSPARENCY_SCRIPTS", "").split(",") if s]
MODES = {"session": 4, "transaction": 2}  # pool_mode -> pool_size
PSQL_TIMEOUT = 60
APPNAME = "tr_transparency"


# ------------------------------------------------------------------ scripts

class Script:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)[:-len(".sql")]
        self.db = "tr_" + self.name
        self.env = {}
        self.modes = list(MODES)
        with open(path, encoding="latin-1") as f:  # copy_in.sql holds a latin1 byte
            for line in f:
                m = re.match(r"--\s*env:\s*([A-Z_][A-Z0-9_]*)=(.*?)\s*$", line)
                if m:
                    self.env[m.group(1)] = m.group(2)
                m = re.match(r"--\s*modes:\s*(.*?)\s*$", line)
                if m:
                    self.modes = [x for x in re.split(r"[ ,]+", m.group(1)) if x]
                    unknown = set(self.modes) - set(MODES)
                    assert not unknown, f"{path}: unknown mode(s) {sorted(unknown)}"

    @property
    def txn_diff_path(self):
        return os.path.join(SCRIPTS_DIR, self.name + ".txn.diff")


SCRIPTS = [Script(p) for p in sorted(glob.glob(os.path.join(SCRIPTS_DIR, "*.sql")))]
if ONLY:
    SCRIPTS = [s for s in SCRIPTS if s.name in ONLY]


# ------------------------------------------------------------------ databases

def drop_db(name):
    c = sptest.superuser(PG0)
    cur = c.cursor()
    cur.execute("SELECT gid FROM pg_prepared_xacts WHERE database = %s", (name,))
    gids = [r[0] for r in cur.fetchall()]
    c.close()
    if gids:
        d = sptest.connect(PG0, name, "postgres", "postgres")
        for g in gids:
            d.cursor().execute("ROLLBACK PREPARED %s", (g,))
        d.close()
    c = sptest.superuser(PG0)
    c.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    c.close()


def fresh_db(name):
    drop_db(name)
    c = sptest.superuser(PG0)
    c.cursor().execute(f"CREATE DATABASE {name} OWNER app")
    c.close()


# ------------------------------------------------------------------ the holder behind $TR_HOLD

class Holder:
    """Serves `\\! $TR_HOLD` / `\\! $TR_RELEASE` from psql through two FIFOs: on hold,
    a client of its own connects through the proxy and keeps a backend in an open
    transaction; on release it commits and disconnects."""

    def __init__(self, tag):
        self.req = os.path.join(WORK, f"hold-{tag}.req")
        self.rep = os.path.join(WORK, f"hold-{tag}.rep")
        for p in (self.req, self.rep):
            if os.path.exists(p):
                os.unlink(p)
            os.mkfifo(p)
        self.cmd = os.path.join(WORK, f"hold-{tag}.sh")
        with open(self.cmd, "w") as f:
            f.write(f'#!/bin/sh\necho "$1" > {self.req} && read -r reply < {self.rep} && '
                    f'[ "$reply" = ok ] || {{ echo "TR_HOLD $1 failed: $reply"; exit 1; }}\n')
        os.chmod(self.cmd, 0o755)
        self.port = None
        self.db = None
        self.conn = None
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def env(self, port, db):
        self.port, self.db = port, db
        return {"TR_HOLD": f"{self.cmd} hold", "TR_RELEASE": f"{self.cmd} release"}

    def serve(self):
        while True:
            with open(self.req) as f:
                what = f.read().strip()
            if what == "quit":
                return
            try:
                if what == "hold":
                    self.release()
                    self.conn = sptest.connect(self.port, self.db, application_name="tr_holder")
                    cur = self.conn.cursor()
                    cur.execute("BEGIN")
                    cur.execute("SELECT 1")
                    cur.fetchall()
                elif what == "release":
                    self.release()
                else:
                    raise ValueError(f"unknown request {what!r}")
                reply = "ok"
            except Exception as e:  # noqa: BLE001
                reply = f"{type(e).__name__}: {e}".replace("\n", " ")
            with open(self.rep, "w") as f:
                f.write(reply + "\n")

    def release(self):
        if self.conn is not None:
            try:
                self.conn.cursor().execute("COMMIT")
                self.conn.close()
            except psycopg2.Error:
                pass
            self.conn = None

    def stop(self):
        self.release()
        with open(self.req, "w") as f:
            f.write("quit\n")
        self.thread.join(5)


# ------------------------------------------------------------------ running psql

def psql(script, port, extra_env):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update({"PGPASSWORD": "secret", "PGCONNECT_TIMEOUT": "10", "PGAPPNAME": APPNAME,
                "PGCLIENTENCODING": "UTF8", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "TZ": "UTC",
                "TR_HOLD": "true", "TR_RELEASE": "true"})
    env.update(script.env)
    env.update(extra_env)
    cmd = ["timeout", "-k", "5", str(PSQL_TIMEOUT), "psql", "-X", "-a", "-h", HOST, "-p", str(port),
           "-U", "app", "-d", script.db, "-f", script.name + ".sql"]
    p = subprocess.run(cmd, cwd=SCRIPTS_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    out = p.stdout.decode("utf-8", errors="replace")
    out = re.sub(r'(at port )"\d+"', r'\1"PORT"', out)
    if p.returncode == 124:
        out += f"\n[psql timed out after {PSQL_TIMEOUT}s]\n"
    if not out.endswith("\n"):
        out += "\n"
    out += f"[psql exit status {p.returncode}]\n"
    return out


def unified(direct_path, proxy_path):
    """GNU diff -U2 direct -> proxy, with the hunk headers' line numbers removed (so an
    expected diff survives edits elsewhere in the script)."""
    p = subprocess.run(["diff", "-U2", "--label", "direct", "--label", "proxy", direct_path, proxy_path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode in (0, 1), p.stdout.decode(errors="replace")
    text = p.stdout.decode("utf-8", errors="replace")
    return re.sub(r"(?m)^@@ .* @@$", "@@", text)


# ------------------------------------------------------------------ modes and tests

class Mode:
    def __init__(self, name, pool_size):
        self.name = name
        self.pool_size = pool_size
        self.proxy = None
        self.holder = None
        self.outdir = os.path.join(WORK, name)
        os.makedirs(self.outdir, exist_ok=True)

    def start(self):
        if self.proxy is None or not self.proxy.alive():
            if self.proxy is not None:
                raise AssertionError(f"proxy ({self.name} mode) is no longer running: {self.proxy.state()}")
            for m in MODE_OBJS.values():
                if m is not self:
                    m.stop()
            self.proxy = sptest.Proxy(f"transparency-{self.name}",
                                      f"pool_mode: {self.name}\nworkers: 1\nauth: scram-sha-256\n"
                                      "users:\n  - { name: app, password: secret }\n"
                                      f"shards:\n  - {{ name: s0, host: {HOST}, port: {PG0}, "
                                      f"pool_size: {self.pool_size} }}\n", WORK).start()
            self.holder = Holder(self.name)
        return self.proxy

    def stop(self):
        if self.holder is not None:
            self.holder.stop()
            self.holder = None
        if self.proxy is not None:
            rc = self.proxy.stop()
            if rc not in (0, None) or self.proxy.killed:
                print(f"warning: proxy ({self.name} mode) exited with {rc} on SIGTERM"
                      f"{' (killed)' if self.proxy.killed else ''}")


MODE_OBJS = {name: Mode(name, size) for name, size in MODES.items()}


def run_case(script, mode):
    proxy = mode.start()
    fresh_db(script.db)
    direct = psql(script, PG0, {})
    fresh_db(script.db)
    proxied = psql(script, proxy.port, mode.holder.env(proxy.port, script.db))
    mode.holder.release()
    drop_db(script.db)
    paths = {}
    for suffix, text in (("direct", direct), ("proxy", proxied)):
        paths[suffix] = os.path.join(mode.outdir, f"{script.name}.{suffix}.out")
        with open(paths[suffix], "w") as f:
            f.write(text)
    diff = unified(paths["direct"], paths["proxy"])
    if not proxy.alive():
        raise AssertionError(f"{script.name}: the proxy died ({proxy.state()}); diff:\n{diff}")
    if mode.name == "transaction":
        path = script.txn_diff_path
        expected = open(path).read() if os.path.exists(path) else ""
        if UPDATE:
            if diff:
                with open(path, "w") as f:
                    f.write(diff)
                print(f"     updated {os.path.relpath(path, sptest.SP_ROOT)}")
            elif os.path.exists(path):
                os.unlink(path)
                print(f"     removed {os.path.relpath(path, sptest.SP_ROOT)}")
            return
        if diff != expected:
            what = (f"differs from the expected {os.path.relpath(path, sptest.SP_ROOT)}" if expected
                    else "differs (no expected .txn.diff)")
            msg = f"{script.name} ({mode.name} mode): output through the proxy {what}; diff:\n{diff}"
            if expected:
                msg += "\nexpected diff:\n" + expected
            raise AssertionError(msg)
    elif diff:
        raise AssertionError(f"{script.name} ({mode.name} mode): output through the proxy differs; diff:\n{diff}")


def make_test(script, mode):
    def fn():
        run_case(script, MODE_OBJS[mode])
    fn.__name__ = f"{mode}:{script.name}"
    return fn


TESTS = [make_test(s, m) for m in MODES for s in SCRIPTS if m in s.modes]


def teardown():
    for m in MODE_OBJS.values():
        m.stop()
    for s in SCRIPTS:
        try:
            drop_db(s.db)
        except Exception as e:  # noqa: BLE001
            print(f"warning: could not drop {s.db}: {e}")


if __name__ == "__main__":
    sys.exit(sptest.run_tests(TESTS, None, teardown))
