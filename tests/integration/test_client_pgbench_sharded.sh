#!/usr/bin/env bash
# Real clients, unmodified: pgbench through splitpoint with its tables sharded.
# Layout (tests/lib/clients.py, "pgbench"): pgbench_accounts and pgbench_history
# hash-sharded by aid (16 partitions over the two shared instances, co-located),
# pgbench_branches and pgbench_tellers reference tables; a fresh database
# drv_pgbench_<random> on each instance, dropped on exit.
#
# 1. `pgbench -i -s 2` THROUGH the proxy: its data-generation transaction (TRUNCATE,
#    INSERTs into the reference tables, COPY of pgbench_accounts split by key) writes to
#    both shards; through a second proxy with cross_shard_writes: refuse it is refused
#    with SPT01; through the main proxy, with the default config (two_phase), it loads
#    (two-phase commit), leaving no prepared transaction behind.
# 2. Row counts through the proxy (200000 accounts, 2 branches, 20 tellers).
# 3. pgbench -S and a custom script (SELECT abalance / UPDATE abalance + 1 by aid) in
#    each of -M simple, extended, prepared with -c 8 -T 5; then a single-shard
#    transaction script (UPDATE accounts + INSERT history for one aid, BEGIN..END) with
#    -M prepared. Every run: zero failed transactions, no error, no aborted client.
# 4. Invariants read DIRECTLY on the shards: sum(abalance) over both shards equals the
#    number of +1 updates pgbench reported, history rows match their updates; every
#    pgbench_accounts / pgbench_history row is on the shard owning its aid (PostgreSQL's
#    own PARTITION BY HASH remainder), branches and tellers identical on both shards.
# test-timeout: 300
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
# shellcheck source=tests/lib/clients.sh
source "$SP_ROOT/tests/lib/clients.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_client_pgbench_sharded)}
mkdir -p "$WORK"
export PGPASSWORD=secret PGCONNECT_TIMEOUT=10
DURATION=${PGBENCH_SECONDS:-5}
CLIENTS=8
SCALE=2

fail() {
  echo "FAIL: $*"
  echo "----- splitpoint log (tail)"
  tail -n 30 "$SP_LOG" 2>/dev/null || true
  exit 1
}

echo "$(pgbench --version) (Debian postgresql-client-15 $(dpkg-query -W -f='${Version}' postgresql-client-15 2>/dev/null || echo '?'))"
clients_setup pgbench pgbench
URL="postgresql://app:secret@127.0.0.1:$SP_PORT/$DRV_DB"
proxy_sql() { psql -X -q -At -v ON_ERROR_STOP=1 "$URL" "$@"; }
shard_sql() { # SHARD(0|1) ARGS...
  local port=$PG0_PORT
  (($1 == 1)) && port=$PG1_PORT
  shift
  psql -X -q -At -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$port user=app dbname=$DRV_DB" "$@"
}
# The statement pgbench reported an error for, and the error (for reports).
pgbench_error() { # LOG
  grep -m 4 -E 'ERROR|error|detail|FATAL|aborted|failed' "$1" | tr '\n' ' ' | sed 's/  */ /g'
}

# ---------------------------------------------------------------- 1. pgbench -i through the proxy
# pgbench -i generates its data in ONE transaction (TRUNCATE of all four tables, INSERTs
# into the reference tables, COPY pgbench_accounts split over both shards): a
# transaction writing to several shards. With transactions.cross_shard_writes: refuse
# that is SPT01 (SPEC 5).
main_pid=$SP_PID
RF_PORT=$(free_port)
{ "$PYTHON" "$SP_ROOT/tests/lib/clients.py" config "$DRV_DB" "$RF_PORT" "$(free_port)" pgbench
  printf 'transactions:\n  cross_shard_writes: refuse\n'; } >"$WORK/splitpoint-refuse.yaml"
sp_start "$WORK/splitpoint-refuse.yaml" "$WORK/splitpoint-refuse.log" || fail "splitpoint (refuse) did not start"
rc=0
timeout -k 5 120 pgbench -i -s "$SCALE" -q "postgresql://app:secret@127.0.0.1:$RF_PORT/$DRV_DB" \
  >"$WORK/init-refuse.log" 2>&1 || rc=$?
if ((rc == 0)) || ! grep -q "a transaction may write to one shard only" "$WORK/init-refuse.log"; then
  cat "$WORK/init-refuse.log"
  fail "pgbench -i through a proxy with cross_shard_writes: refuse: exit $rc, expected the SPT01 refusal"
fi
echo "ok   pgbench -i through a proxy with cross_shard_writes: refuse is refused: $(pgbench_error "$WORK/init-refuse.log")"
sp_stop "$SP_PID" || true
SP_PID=$main_pid
# With the default (two_phase) the same transaction commits on both shards with
# PREPARE TRANSACTION.
rc=0
timeout -k 5 120 pgbench -i -s "$SCALE" -q "$URL" >"$WORK/init.log" 2>&1 || rc=$?
if ((rc != 0)); then
  cat "$WORK/init.log"
  fail "pgbench -i -s $SCALE through the proxy with the default config (cross_shard_writes: two_phase): exit $rc"
fi
echo "ok   pgbench -i -s $SCALE (steps dtgvp) through the proxy with the default config (two_phase)"
for s in 0 1; do
  left=$(shard_sql "$s" -c "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()")
  ((left == 0)) || fail "shard s$s: $left prepared transaction(s) left after pgbench -i"
done

# ---------------------------------------------------------------- 2. what was loaded
counts=""
for t in pgbench_accounts pgbench_branches pgbench_tellers pgbench_history; do
  counts+="${counts:+ }$(proxy_sql -c "SELECT count(*) FROM $t")"
done
[[ $counts == "$((100000 * SCALE)) $SCALE $((10 * SCALE)) 0" ]] ||
  fail "row counts through the proxy (accounts branches tellers history): expected $((100000 * SCALE)) $SCALE $((10 * SCALE)) 0, got $counts"
echo "ok   row counts through the proxy: $counts"
for s in 0 1; do
  n=$(shard_sql "$s" -c "SELECT count(*) FROM pgbench_accounts")
  pk=$(shard_sql "$s" -c "SELECT count(*) FROM pg_constraint WHERE conrelid = 'pgbench_accounts'::regclass AND contype = 'p'")
  ((pk == 1)) || fail "shard s$s: pgbench_accounts has no primary key"
  echo "ok   shard s$s holds $n pgbench_accounts rows, primary key present"
done

# ---------------------------------------------------------------- 3. runs
cat >"$WORK/custom.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
EOF
cat >"$WORK/history.sql" <<'EOF'
\set aid random(1, 100000 * :scale)
\set bid random(1, 1 * :scale)
\set tid random(1, 10 * :scale)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, 1, CURRENT_TIMESTAMP);
END;
EOF

updates=0
# run_bench NAME ARGS...: must finish with 0 failed transactions, no error, no abort.
run_bench() {
  local name=$1 rc=0 out processed
  shift
  out=$WORK/bench-$name.log
  timeout -k 5 $((DURATION + 60)) pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" "$@" "$URL" >"$out" 2>&1 || rc=$?
  if ((rc != 0)); then
    cat "$out"
    fail "pgbench $name ($*): exit status $rc: $(pgbench_error "$out")"
  fi
  grep -qE '^number of failed transactions: 0( |$)' "$out" || { cat "$out"; fail "pgbench $name: failed transactions"; }
  if grep -qiE 'aborted|error|FATAL' "$out"; then
    cat "$out"
    fail "pgbench $name: a client aborted or an error was reported"
  fi
  processed=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$out")
  ((${processed:-0} > 0)) || { cat "$out"; fail "pgbench $name: no transaction processed"; }
  LAST_PROCESSED=$processed
  echo "ok   $name: $processed transactions, $(sed -nE 's/^tps = ([0-9.]+).*/\1/p' "$out") tps, 0 failed"
}

for mode in simple extended prepared; do
  run_bench "select-only-$mode" -M "$mode" -S
  run_bench "custom-$mode" -M "$mode" -f "$WORK/custom.sql"
  updates=$((updates + LAST_PROCESSED))
done
run_bench "history-txn-prepared" -M prepared -f "$WORK/history.sql"
history_txns=$LAST_PROCESSED
updates=$((updates + history_txns))

# ---------------------------------------------------------------- 4. invariants, placement
sum=0
hist=0
for s in 0 1; do
  sum=$((sum + $(shard_sql "$s" -c "SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts")))
  hist=$((hist + $(shard_sql "$s" -c "SELECT count(*) FROM pgbench_history")))
  stuck=$(shard_sql "$s" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                              AND state LIKE 'idle in transaction%'")
  ((stuck == 0)) || fail "shard s$s: $stuck backend(s) left idle in transaction"
done
((sum == updates)) || fail "sum(abalance) over both shards is $sum, pgbench reported $updates +1 updates"
echo "ok   sum(abalance) over both shards = $sum = transactions with a +1 update reported by pgbench"
((hist == history_txns)) || fail "pgbench_history holds $hist rows, pgbench reported $history_txns transactions"
echo "ok   pgbench_history holds $hist rows = history transactions reported by pgbench"
through=$(proxy_sql -c "SELECT sum(abalance) FROM pgbench_accounts")
((through == updates)) || fail "sum(abalance) through the proxy is $through, expected $updates"
echo "ok   sum(abalance) through the proxy (scatter aggregate) = $through"

clients_verify pgbench || fail "placement"
_sp_alive "$SP_PID" || fail "splitpoint died"
known_failures_summary
echo "test_client_pgbench_sharded: all passed"
