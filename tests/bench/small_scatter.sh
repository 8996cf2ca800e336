#!/usr/bin/env bash
# Latency of small statements, one client, by hand (figures in docs/performance.md, "A
# small scatter read"; issue #16 asks a 2-shard scatter of a small query within 1.5x of
# the same query direct). One PostgreSQL 15 instance holds three databases of pgbench
# scale 1: `direct` (PostgreSQL direct, and behind PgBouncer in transaction pooling)
# and `sp_s0`/`sp_s1`, splitpoint's two shards (pgbench_accounts hashed by aid over 8
# partitions, each shard trimmed to the rows it owns), so PostgreSQL holds the same rows
# for every target.
#   scatter  SELECT sum(abalance) ... WHERE aid BETWEEN :a AND :a + 99 — through
#            splitpoint it reads both shards (a range of a hashed key)
#   point    SELECT abalance ... WHERE aid = :a — one shard
#   one      SELECT 1
# Each statement x target x mode (-M simple, extended) runs ROUNDS rounds of SECONDS s
# (pgbench -c1); the median latency and its ratio to direct are printed as CSV.
#   tests/bench/small_scatter.sh              # ROUNDS=3 SECONDS_PER_RUN=5
#   tests/bench/small_scatter.sh callgrind    # the proxy's instructions per scatter
# With `callgrind`, splitpoint runs under valgrind --tool=callgrind and only the
# scatter runs through it, WARMUP (200) then TXNS (2000) statements per mode; the
# counters are zeroed between the two, so the figure (CSV: mode, instructions per
# statement) leaves the login out.
set -euo pipefail
what=${1:-latency}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TEST_TMP=${BENCH_WORK:-/tmp/splitpoint-bench-small-scatter}
SP_BIN=${SP_BIN:-${BUILD_DIR:-$ROOT/build}/splitpoint}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
# shellcheck source=../lib/pg.sh
source "$ROOT/tests/lib/pg.sh"
# shellcheck source=targets.sh
source "$ROOT/tests/bench/targets.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
bench_autogroup

PARTITIONS=8
start_same_instance "$TEST_TMP/pg"
pg=$PG_PORT
for db in direct sp_s0 sp_s1; do
  PGPASSWORD=secret pgbench -q -i -s 1 -h 127.0.0.1 -p "$pg" -U app "$db" >"$TEST_TMP/init-$db.log" 2>&1
done
# Each shard keeps the rows it owns, as a sharded table would: untrimmed, every shard
# read the whole range, twice direct's work.
for i in 0 1; do
  PGPASSWORD=secret psql -q -h 127.0.0.1 -p "$pg" -U app "sp_s$i" >/dev/null \
    <<<"$(trim_sql pgbench_accounts aid int "$PARTITIONS" "$i" 2)"
done

sp=$(free_port)
same_instance_config "$TEST_TMP/splitpoint.yaml" "$sp" "$pg" 4 \
  "{ name: acc, method: hash, partitions: $PARTITIONS, tables: { pgbench_accounts: aid } }"
printf '\\set a random(1, 99000)\nSELECT sum(abalance) FROM pgbench_accounts WHERE aid BETWEEN :a AND :a + 99;\n' \
  >"$TEST_TMP/scatter.sql"
printf '\\set a random(1, 99000)\nSELECT abalance FROM pgbench_accounts WHERE aid = :a;\n' >"$TEST_TMP/point.sql"
printf 'SELECT 1;\n' >"$TEST_TMP/one.sql"

under=()
[[ $what == callgrind ]] && under=(valgrind --tool=callgrind --callgrind-out-file="$TEST_TMP/callgrind.out"
                                   --dump-instr=no --compress-strings=no)
"${under[@]}" "$SP_BIN" --config "$TEST_TMP/splitpoint.yaml" >"$TEST_TMP/splitpoint.log" 2>&1 &
sp_pid=$!
on_exit "kill $sp_pid 2>/dev/null"
wait_port "$sp" 60

if [[ $what == callgrind ]]; then
  WARMUP=${WARMUP:-200}
  TXNS=${TXNS:-2000}
  run() { PGPASSWORD=secret pgbench -n -c1 -t "$1" -M "$2" -f "$TEST_TMP/scatter.sql" -h 127.0.0.1 -p "$sp" -U app sp_s0 >/dev/null; }
  echo "mode,statements,instructions_per_statement"
  for mode in simple extended; do
    run "$WARMUP" "$mode"
    callgrind_control -z "$sp_pid" >/dev/null
    run "$TXNS" "$mode"
    callgrind_control -d "$sp_pid" >/dev/null
    dump=$(ls -1 "$TEST_TMP"/callgrind.out.* | sort -t. -k3 -n | tail -1)
    ir=$(awk '/^summary:|^totals:/ {print $2; exit}' "$dump")
    echo "$mode,$TXNS,$((ir / TXNS))"
  done
  exit 0
fi

start_pgbouncer "$TEST_TMP/pgbouncer" "$pg" direct 4
pgb=$PGB_PORT

latency() {  # target port db script mode -> median latency in ms over ROUNDS
  local port=$2 db=$3 script=$4 mode=$5 r out all=()
  for ((r = 0; r < ROUNDS; r++)); do
    out=$(PGPASSWORD=secret pgbench -n -c1 -T "$SECONDS_PER_RUN" -M "$mode" -f "$TEST_TMP/$script.sql" \
      -h 127.0.0.1 -p "$port" -U app "$db" 2>&1 | awk '/latency average/ {print $4}')
    all+=("$out")
  done
  printf '%s\n' "${all[@]}" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

echo "statement,mode,direct_ms,pgbouncer_ms,splitpoint_ms,pgbouncer_x_direct,splitpoint_x_direct"
for script in scatter point one; do
  for mode in simple extended; do
    d=$(latency direct "$pg" direct "$script" "$mode")
    b=$(latency pgbouncer "$pgb" direct "$script" "$mode")
    s=$(latency splitpoint "$sp" sp_s0 "$script" "$mode")
    awk -v st="$script" -v m="$mode" -v d="$d" -v b="$b" -v s="$s" \
      'BEGIN {printf "%s,%s,%.3f,%.3f,%.3f,%.2f,%.2f\n", st, m, d, b, s, b / d, s / d}'
  done
done
