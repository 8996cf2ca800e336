#!/usr/bin/env bash
# Runs the libpqxx application tests/integration/pqxx_client.cpp through splitpoint
# (transaction pooling, pool_size 2, shard pg0) three times, once per client auth
# method: scram-sha-256, md5 and cleartext password (user app; the proxy logs in to
# PostgreSQL with SCRAM). pqxx_client checks every result itself and also looks at
# PostgreSQL directly (second connection string).
# test-timeout: 240
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_pqxx)}
mkdir -p "$WORK"
CLIENT=$BUILD_DIR/pqxx_client
[[ -x $CLIENT ]] || { echo "FAIL: $CLIENT is not built" >&2; exit 1; }
DIRECT="host=127.0.0.1 port=$PG0_PORT user=app password=secret dbname=app"

drop_tables() {
  psql -X -q "$DIRECT" -c "DROP TABLE IF EXISTS pqxx_items, pqxx_blobs, pqxx_stream" >/dev/null 2>&1 || true
}
on_exit drop_tables

failed=()
for auth in scram-sha-256 md5 password; do
  port=$(free_port)
  cat >"$WORK/$auth.yaml" <<EOF
listen: 127.0.0.1:$port
metrics_listen: 127.0.0.1:$(free_port)
pool_mode: transaction
auth: $auth
users:
  - { name: app, password: secret }
shards:
  - { name: s0, host: 127.0.0.1, port: $PG0_PORT, database: app, pool_size: 2 }
EOF
  sp_start "$WORK/$auth.yaml" "$WORK/splitpoint-$auth.log"
  echo "=== client auth $auth (splitpoint on $port)"
  rc=0
  # sslmode=disable: the proxy has no TLS; a wrong password must fail (checked below).
  timeout -k 5 120 "$CLIENT" "host=127.0.0.1 port=$port user=app password=secret dbname=app sslmode=disable" \
    "$DIRECT" || rc=$?
  if ((rc != 0)); then
    failed+=("pqxx_client with client auth $auth: exit status $rc")
    echo "----- splitpoint log ($auth), tail" >&2
    tail -n 30 "$WORK/splitpoint-$auth.log" >&2
    drop_tables
  fi
  # The method is really enforced: a wrong password is refused.
  if psql -X -At "host=127.0.0.1 port=$port user=app password=wrong dbname=app sslmode=disable" \
    -c "SELECT 1" >"$WORK/wrong-$auth.out" 2>&1; then
    failed+=("client auth $auth: a wrong password was accepted")
  elif ! grep -qF 'password authentication failed for user "app"' "$WORK/wrong-$auth.out"; then
    failed+=("client auth $auth: unexpected wrong-password error: $(cat "$WORK/wrong-$auth.out")")
  fi
  sp_stop "$SP_PID" || failed+=("client auth $auth: splitpoint did not stop on SIGTERM")
  if [[ $SP_EXIT_STATUS != 0 ]]; then
    failed+=("client auth $auth: splitpoint exited with status $SP_EXIT_STATUS after SIGTERM ($(tail -n 1 "$WORK/splitpoint-$auth.log"))")
  fi
done

if ((${#failed[@]})); then
  printf 'FAIL: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test_pqxx: all passed"
