#!/usr/bin/env bash
# Real clients, unmodified: node-postgres (`pg` from the npm registry) through splitpoint
# with sharding on. Runs tests/integration/node/client_test.js against a proxy in front
# of both shared instances (fresh database drv_node_<random> on each, dropped on exit;
# layout in tests/lib/clients.py).
#
# client_test.js exercises, with the ordinary postgresql:// URL (scram-sha-256):
# DDL (simple protocol), parameterized queries (unnamed extended-protocol statements),
# named prepared statements ({name, text, values}: Parse once per connection, then
# Bind/Execute only, on keys of both shards), a multi-row INSERT across shards with
# RETURNING, scatter ORDER BY/LIMIT/OFFSET, aggregates and GROUP BY compared with values
# computed in the test (avg against PostgreSQL's own), transactions (commit, rollback,
# SPT01), errors followed by good statements (also a named statement that fails to
# parse), and a cancel of `SELECT pg_sleep(30) FROM accounts WHERE id = $1` with
# pg.Client.prototype.cancel(target, query) — node-postgres' own CancelRequest sender
# (57014, connection usable afterwards). Then both shards are read directly: every
# row on the shard owning its key.
#
# Installs `pg` (8.x) with npm into $BUILD_DIR/node_modules_cache once; nodejs/npm
# from Debian when node is missing.
# test-timeout: 600
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
# shellcheck source=tests/lib/clients.sh
source "$SP_ROOT/tests/lib/clients.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_client_node)}
mkdir -p "$WORK"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  ensure_apt nodejs npm
fi
CACHE=${BUILD_DIR:-$SP_ROOT/build}/node_modules_cache
if [[ ! -f $CACHE/node_modules/pg/package.json ]]; then
  mkdir -p "$CACHE"
  echo "installing pg@8 from npm into $CACHE"
  (cd "$CACHE" && npm install --no-audit --no-fund --no-save --prefix "$CACHE" pg@8 >&2)
fi
export NODE_PATH=$CACHE/node_modules
echo "node $(node --version), npm $(npm --version), pg $(node -p "require('pg/package.json').version")"

clients_setup node drivers
"$PYTHON" "$SP_ROOT/tests/lib/clients.py" shard-of "$DRV_DB" $(seq 1 100) >"$WORK/shards.txt"

rc=0
timeout -k 5 120 node "$SP_ROOT/tests/integration/node/client_test.js" "$SP_PORT" "$DRV_DB" "$PG0_PORT" \
  "$WORK/shards.txt" || rc=$?
if ((rc != 0)); then
  echo "FAIL: client_test.js exited with $rc; splitpoint log tail:"
  tail -n 30 "$SP_LOG"
fi
_sp_alive "$SP_PID" || { echo "FAIL: splitpoint died"; rc=1; }
clients_verify drivers || rc=1
((rc == 0)) && echo "test_client_node: all passed" || echo "test_client_node: FAILED"
exit "$rc"
