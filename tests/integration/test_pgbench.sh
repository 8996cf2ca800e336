#!/usr/bin/env bash
# pgbench through splitpoint against the shared instance pg0.
# `pgbench -i -s 2` runs directly on PostgreSQL; then, through the proxy in transaction
# mode (pool_size 20), 16 clients for a few seconds with -M simple, extended and
# prepared, each with the TPC-B-like script and with -S (select only); then the same
# in session mode, and transaction mode with fewer backends than clients (queueing).
# Every run must finish with no failed transaction and no aborted client, and the
# TPC-B invariant (sum of account, teller and branch balances equal the history's
# deltas) must hold afterwards: no partial transaction was committed.
# No performance assertion: tps are printed for information only.
# test-timeout: 300
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_pgbench)}
mkdir -p "$WORK"
export PGPASSWORD=secret PGCONNECT_TIMEOUT=10
DURATION=${PGBENCH_SECONDS:-5}
CLIENTS=16

fail() {
  echo "FAIL: $*" >&2
  for log in "$WORK"/splitpoint-*.log; do
    [[ -f $log ]] || continue
    echo "----- $log (tail)" >&2
    tail -n 30 "$log" >&2
  done
  exit 1
}
direct() { psql -X -q -At -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$PG0_PORT user=app dbname=app" "$@"; }

drop_tables() {
  direct -c "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history" \
    >/dev/null 2>&1 || true
}
on_exit drop_tables

# Initialise directly on PostgreSQL.
pgbench -i -s 2 -q -h 127.0.0.1 -p "$PG0_PORT" -U app app >"$WORK/init.log" 2>&1 ||
  { cat "$WORK/init.log" >&2; fail "pgbench -i failed"; }
echo "ok   pgbench -i -s 2 directly on PostgreSQL"

# Starts a proxy: MODE POOL_SIZE NAME. Sets SP_PORT.
start_proxy() {
  local mode=$1 pool=$2 name=$3
  SP_PORT=$(free_port)
  cat >"$WORK/$name.yaml" <<EOF
listen: 127.0.0.1:$SP_PORT
metrics_listen: 127.0.0.1:$(free_port)
pool_mode: $mode
auth: scram-sha-256
users:
  - { name: app, password: secret }
shards:
  - { name: s0, host: 127.0.0.1, port: $PG0_PORT, database: app, pool_size: $pool }
EOF
  sp_start "$WORK/$name.yaml" "$WORK/splitpoint-$name.log" || fail "splitpoint ($name) did not start"
}

# A bad exit status at shutdown is recorded and reported at the end, so the later
# phases still run.
shutdown_problems=()
stop_proxy() {
  sp_stop "$SP_PID" || shutdown_problems+=("$1: splitpoint did not stop within ${SP_STOP_TIMEOUT}s of SIGTERM")
  if [[ $SP_EXIT_STATUS != 0 ]]; then
    shutdown_problems+=("$1: splitpoint exited with status $SP_EXIT_STATUS after SIGTERM (log: $(tail -n 1 "$WORK/splitpoint-$1.log"))")
  fi
}

# The TPC-B-like script keeps these four sums equal; a lost or half-applied
# transaction breaks it.
check_invariant() { # WHAT
  local sums
  sums=$(direct -c "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' ||
                            (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' ||
                            (SELECT sum(bbalance) FROM pgbench_branches) || ' ' ||
                            (SELECT coalesce(sum(delta), 0) FROM pgbench_history)")
  read -r a t b h <<<"$sums"
  [[ $a == "$t" && $t == "$b" && $b == "$h" ]] ||
    fail "$1: balances inconsistent (accounts $a, tellers $t, branches $b, history $h)"
  local stuck
  stuck=$(direct -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND state LIKE 'idle in transaction%'")
  [[ $stuck == 0 ]] || fail "$1: $stuck backend(s) left idle in transaction"
}

# Runs pgbench through the proxy: NAME ARGS...
run_bench() {
  local name=$1 rc=0 out
  shift
  out=$WORK/bench-$name.log
  timeout -k 5 $((DURATION + 90)) pgbench -n -h 127.0.0.1 -p "$SP_PORT" -U app \
    -c "$CLIENTS" -j 2 -T "$DURATION" "$@" app >"$out" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$out" >&2
    fail "pgbench $name ($*): exit status $rc"
  fi
  grep -qE '^number of failed transactions: 0( |$)' "$out" ||
    { cat "$out" >&2; fail "pgbench $name: failed transactions"; }
  if grep -qiE 'aborted|error|FATAL' "$out"; then
    cat "$out" >&2
    fail "pgbench $name: a client aborted or an error was reported"
  fi
  local processed
  processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$out")
  ((${processed:-0} > 0)) || { cat "$out" >&2; fail "pgbench $name: no transaction processed"; }
  echo "ok   $name: $processed transactions, $(sed -nE 's/^tps = ([0-9.]+).*/\1/p' "$out") tps, 0 failed"
}

# ---------------------------------------------------------------- transaction mode, pool 20
start_proxy transaction 20 txn20
for mode in simple extended prepared; do
  run_bench "txn-$mode-tpcb" -M "$mode"
  check_invariant "txn-$mode-tpcb"
  run_bench "txn-$mode-select" -M "$mode" -S
done
# The proxy really pooled: it never opened more than pool_size backends for app.
backends=$(direct -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND datname = 'app' AND pid <> pg_backend_pid()")
((backends <= 20)) || fail "more backends than pool_size: $backends"
echo "ok   $backends backend(s) open for pool_size 20"
stop_proxy txn20

# ---------------------------------------------------------------- session mode
start_proxy session 20 session20
run_bench "session-prepared-tpcb" -M prepared
check_invariant "session-prepared-tpcb"
run_bench "session-simple-select" -M simple -S
stop_proxy session20

# ---------------------------------------------------------------- transaction mode, more clients than backends
# 16 clients share 4 backends; extended protocol (unnamed statements) and simple. Not
# -M prepared with the TPC-B script: pgbench prepares every statement of the script
# synchronously before its first BEGIN, so with fewer backends than clients it waits
# on itself (a pgbench property, not a proxy bug).
start_proxy transaction 4 txn4
run_bench "txn-pool4-extended-tpcb" -M extended
check_invariant "txn-pool4-extended-tpcb"
run_bench "txn-pool4-prepared-select" -M prepared -S
backends=$(direct -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND datname = 'app' AND pid <> pg_backend_pid()")
((backends <= 4)) || fail "more backends than pool_size 4: $backends"
echo "ok   $backends backend(s) open for pool_size 4"
stop_proxy txn4

if ((${#shutdown_problems[@]})); then
  printf 'FAIL: %s\n' "${shutdown_problems[@]}" >&2
  exit 1
fi
echo "test_pgbench: all passed"
