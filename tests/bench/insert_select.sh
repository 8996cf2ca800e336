#!/usr/bin/env bash
# INSERT ... SELECT through splitpoint (two shards, two PostgreSQL instances) against
# PostgreSQL direct, by hand (figures in docs/performance.md, "INSERT ... SELECT"):
#   pulled   INSERT INTO t (id, v) SELECT x, ... FROM generate_series(1, ROWS) x — the
#            rows go through the proxy (server/session/execute/insert_select.cpp)
#   on the shards  INSERT INTO t2 (id, v) SELECT id, v FROM t — the key is a co-located
#            table's key: each shard inserts its own rows
# Each statement ROUNDS times (median of wall-clock ms, psql over TCP), and the proxy's
# peak RSS (VmHWM) after each size.
#   tests/bench/insert_select.sh                 # ROWS="10000 100000", ROUNDS=3
#   ROWS=1000 ROUNDS=1 tests/bench/insert_select.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TEST_TMP=${BENCH_WORK:-/tmp/splitpoint-bench-insert-select}
export SP_BIN=${SP_BIN:-${BUILD_DIR:-$ROOT/build}/splitpoint}
ROWS=${ROWS:-10000 100000}
ROUNDS=${ROUNDS:-3}
# shellcheck source=../lib/pg.sh
source "$ROOT/tests/lib/pg.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"

p0=$(free_port) && pg_start "$TEST_TMP/pg0" "$p0"
p1=$(free_port) && pg_start "$TEST_TMP/pg1" "$p1"
for p in "$p0" "$p1"; do
  dir=$TEST_TMP/pg0 && [[ $p == "$p1" ]] && dir=$TEST_TMP/pg1
  psql_as "$dir" "$p" postgres postgres -c "CREATE DATABASE shard OWNER app" >/dev/null
done
psql_as "$TEST_TMP/pg0" "$p0" postgres postgres -c "CREATE DATABASE direct OWNER app" >/dev/null
max=0
for n in $ROWS; do ((n > max)) && max=$n; done
sp_port=$(free_port)
cat >"$TEST_TMP/splitpoint.yaml" <<EOF
listen: 127.0.0.1:$sp_port
metrics_listen: 127.0.0.1:$(free_port)
auth: scram-sha-256
users:
  - { name: app, password: secret }
shards:
  - { name: s0, host: 127.0.0.1, port: $p0, database: shard, user: app, password: secret }
  - { name: s1, host: 127.0.0.1, port: $p1, database: shard, user: app, password: secret }
distributions:
  - name: by_id
    method: hash
    partitions: 8
    tables: { t: id, t2: id }
scatter: { max_insert_select_rows: $max }
EOF
sp_start "$TEST_TMP/splitpoint.yaml" "$TEST_TMP/splitpoint.log" "$sp_port"

sql() { PGPASSWORD=secret psql -X -q -h 127.0.0.1 -p "$1" -U app -d "$2" -v ON_ERROR_STOP=1 -c "$3" >/dev/null; }
# Median wall-clock ms of ROUNDS runs of $3 on port $1, db $2 (after each run: $4).
timed() {
  local times=() t0 t1 i
  for ((i = 0; i < ROUNDS; i++)); do
    t0=$(date +%s%N)
    sql "$1" "$2" "$3"
    t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000000)))
    [[ -n ${4:-} ]] && sql "$1" "$2" "$4"
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p"
}

for target in "direct:$p0:direct" "splitpoint:$sp_port:shard"; do
  IFS=: read -r _ port db <<<"$target"
  sql "$port" "$db" "CREATE TABLE t (id bigint PRIMARY KEY, v text, n int)"
  sql "$port" "$db" "CREATE TABLE t2 (id bigint PRIMARY KEY, v text, n int)"
done

echo "| rows | statement | direct ms | splitpoint ms | ratio | proxy peak RSS kB |"
echo "|---|---|---|---|---|---|"
for n in $ROWS; do
  pull="INSERT INTO t (id, v, n) SELECT x, 'value ' || x, x % 100 FROM generate_series(1, $n) x"
  local_copy="INSERT INTO t2 (id, v, n) SELECT id, v, n FROM t"
  d=$(timed "$p0" direct "$pull" "TRUNCATE t")
  s=$(timed "$sp_port" shard "$pull" "TRUNCATE t")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$SP_PID/status")
  echo "| $n | pulled (generate_series) | $d | $s | $(awk -v a="$s" -v b="$d" 'BEGIN {printf "%.1f", a / b}') | $rss |"
  sql "$p0" direct "$pull" && sql "$sp_port" shard "$pull"
  d=$(timed "$p0" direct "$local_copy" "TRUNCATE t2")
  s=$(timed "$sp_port" shard "$local_copy" "TRUNCATE t2")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$SP_PID/status")
  echo "| $n | on the shards (co-located) | $d | $s | $(awk -v a="$s" -v b="$d" 'BEGIN {printf "%.1f", a / b}') | $rss |"
  sql "$p0" direct "TRUNCATE t" && sql "$sp_port" shard "TRUNCATE t"
done
sp_stop
