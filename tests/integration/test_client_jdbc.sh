#!/usr/bin/env bash
# Real clients, unmodified: pgjdbc (Debian libpostgresql-jdbc-java) through splitpoint
# with sharding on. Compiles tests/integration/jdbc/ClientTest.java with javac against
# /usr/share/java/postgresql.jar and runs it against a proxy in front of both shared
# instances (fresh database drv_jdbc_<random> on each, dropped on exit; layout in
# tests/lib/clients.py).
#
# ClientTest exercises, with the ordinary jdbc:postgresql:// URL (scram-sha-256):
# DDL, parameterized single-shard reads and writes, the driver's switch to named
# server-side prepared statements after prepareThreshold (5) executions of one
# PreparedStatement (checked with PGStatement.isUseServerPrepare), a multi-row INSERT
# across shards, scatter ORDER BY/LIMIT/OFFSET, aggregates and GROUP BY compared with
# values computed in the test (avg against PostgreSQL's own), setFetchSize on a scatter
# read, transactions (commit, rollback, SPT01), errors followed by good statements,
# addBatch/executeBatch on one shard, on both shards, and inside a transaction, and
# Statement.cancel() of `SELECT pg_sleep(30) FROM accounts WHERE id = ?` (57014).
# Then both shards are read directly: every row on the shard owning its key.
#
# Installs libpostgresql-jdbc-java, and default-jdk-headless when javac is missing.
# test-timeout: 900
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
# shellcheck source=tests/lib/clients.sh
source "$SP_ROOT/tests/lib/clients.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_client_jdbc)}
mkdir -p "$WORK"

pkgs=(libpostgresql-jdbc-java)
command -v javac >/dev/null && command -v java >/dev/null || pkgs+=(default-jdk-headless)
ensure_apt "${pkgs[@]}"
JAR=/usr/share/java/postgresql.jar
[[ -f $JAR ]] || { echo "FAIL: $JAR missing after installing libpostgresql-jdbc-java" >&2; exit 1; }

echo "pgjdbc: Debian libpostgresql-jdbc-java $(dpkg-query -W -f='${Version}' libpostgresql-jdbc-java)"
echo "java: $(java -version 2>&1 | head -n 1); javac: $(javac -version 2>&1)"

mkdir -p "$WORK/classes"
javac -nowarn -d "$WORK/classes" -cp "$JAR" "$SP_ROOT/tests/integration/jdbc/ClientTest.java"

clients_setup jdbc drivers
"$PYTHON" "$SP_ROOT/tests/lib/clients.py" shard-of "$DRV_DB" $(seq 1 400) >"$WORK/shards.txt"

rc=0
java -cp "$WORK/classes:$JAR" ClientTest "$SP_PORT" "$DRV_DB" "$PG0_PORT" "$WORK/shards.txt" || rc=$?
if ((rc != 0)); then
  echo "FAIL: ClientTest exited with $rc; splitpoint log tail:"
  tail -n 30 "$SP_LOG"
fi
_sp_alive "$SP_PID" || { echo "FAIL: splitpoint died"; rc=1; }
clients_verify drivers || rc=1
((rc == 0)) && echo "test_client_jdbc: all passed" || echo "test_client_jdbc: FAILED"
exit "$rc"
