#!/usr/bin/env bash
# INSERTs the proxy rewrites, by hand (figures in docs/performance.md, "Values the proxy
# draws for sequence columns"): one PostgreSQL 15 instance holds `direct` (PostgreSQL
# direct, and behind PgBouncer in transaction pooling) and `sp_s0`/`sp_s1`, splitpoint's
# two shards (hashed by tenant_id over 8 partitions), so PostgreSQL does the same work
# for every target.
#   one_seq   INSERT INTO one_seq (tenant_id, v) VALUES (:t, 'x') — a bigserial id left
#             out: the proxy draws it and writes it into the statement
#   two_seq   the same into a table with a bigserial and an identity column left out
#   given     INSERT INTO one_seq (id, tenant_id, v) VALUES (:i, :t, 'x') ON CONFLICT DO
#             NOTHING — nothing to draw: the reference (negative ids: never the sequence's)
#   split10   ten rows with their ids given, of random tenants: split over both shards
#   fill10    ten rows, ids left out: drawn, then split
# Each statement x mode (-M simple, extended) x target runs ROUNDS rounds of
# SECONDS_PER_RUN s (pgbench -c CLIENTS -j 2), the targets alternated within each round;
# the median tps and its ratios are printed as CSV. OLD_BIN=<another splitpoint> adds it
# as a target (`splitpoint_old`) on the same shards, e.g. the build before a change.
#   tests/bench/insert_rewrite.sh                  # ROUNDS=3 SECONDS_PER_RUN=5 CLIENTS=4
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TEST_TMP=${BENCH_WORK:-/tmp/splitpoint-bench-insert-rewrite}
SP_BIN=${SP_BIN:-${BUILD_DIR:-$ROOT/build}/splitpoint}
OLD_BIN=${OLD_BIN:-}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CLIENTS=${CLIENTS:-4}
STATEMENTS=${STATEMENTS:-one_seq two_seq given split10 fill10}
MODES=${MODES:-simple extended}
# shellcheck source=../lib/pg.sh
source "$ROOT/tests/lib/pg.sh"
# shellcheck source=targets.sh
source "$ROOT/tests/bench/targets.sh"
rm -rf "$TEST_TMP" && mkdir -p "$TEST_TMP"
bench_autogroup

start_same_instance "$TEST_TMP/pg"
pg=$PG_PORT
for db in direct sp_s0 sp_s1; do
  PGPASSWORD=secret psql -X -q -h 127.0.0.1 -p "$pg" -U app -d "$db" -v ON_ERROR_STOP=1 \
    -c "CREATE TABLE one_seq (id bigserial PRIMARY KEY, tenant_id bigint NOT NULL, v text)" \
    -c "CREATE TABLE two_seq (id bigserial PRIMARY KEY, n bigint GENERATED ALWAYS AS IDENTITY, tenant_id bigint NOT NULL, v text)"
done

start_proxy() {  # name binary (not in a subshell: its on_exit would stop the proxy at once)
  local port
  port=$(free_port)
  same_instance_config "$TEST_TMP/$1.yaml" "$port" "$pg" 8 \
    "{ name: tenants, method: hash, partitions: 8, tables: { one_seq: tenant_id, two_seq: tenant_id } }"
  "$2" --config "$TEST_TMP/$1.yaml" >"$TEST_TMP/$1.log" 2>&1 &
  on_exit "kill $! 2>/dev/null"
  wait_port "$port" 30
  port_of[$1]=$port db_of[$1]=sp_s0
}
declare -A port_of db_of
port_of[direct]=$pg db_of[direct]=direct
start_proxy splitpoint "$SP_BIN"
targets=(direct pgbouncer splitpoint)
if [[ -n $OLD_BIN ]]; then
  start_proxy splitpoint_old "$OLD_BIN"
  targets+=(splitpoint_old)
fi

start_pgbouncer "$TEST_TMP/pgbouncer" "$pg" direct 8
port_of[pgbouncer]=$PGB_PORT db_of[pgbouncer]=direct

rows() {  # n given|fill -> the VALUES rows of one INSERT, tenants :t0.., ids :i0..
  local i out=()
  for ((i = 0; i < $1; i++)); do
    if [[ $2 == given ]]; then out+=("(:i$i, :t$i, 'x')"); else out+=("(:t$i, 'x')"); fi
  done
  local IFS=,
  echo "${out[*]}"
}
sets() { local i; for ((i = 0; i < $1; i++)); do printf '\\set t%d random(1, 1000000)\n\\set i%d random(-2000000000, -1)\n' "$i" "$i"; done; }
{ sets 1; echo "INSERT INTO one_seq (tenant_id, v) VALUES $(rows 1 fill);"; } >"$TEST_TMP/one_seq.sql"
{ sets 1; echo "INSERT INTO two_seq (tenant_id, v) VALUES $(rows 1 fill);"; } >"$TEST_TMP/two_seq.sql"
{ sets 1; echo "INSERT INTO one_seq (id, tenant_id, v) VALUES $(rows 1 given) ON CONFLICT DO NOTHING;"; } >"$TEST_TMP/given.sql"
{ sets 10; echo "INSERT INTO one_seq (id, tenant_id, v) VALUES $(rows 10 given) ON CONFLICT DO NOTHING;"; } \
  >"$TEST_TMP/split10.sql"
{ sets 10; echo "INSERT INTO one_seq (tenant_id, v) VALUES $(rows 10 fill);"; } >"$TEST_TMP/fill10.sql"

tps() {  # port db script mode
  PGPASSWORD=secret pgbench -n -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" -M "$4" -f "$TEST_TMP/$3.sql" \
    -h 127.0.0.1 -p "$1" -U app "$2" 2>&1 | awk '/^tps/ {print $3}'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

header="statement,mode"
for t in "${targets[@]}"; do header+=",${t}_tps"; done
echo "$header,splitpoint_x_direct,splitpoint_x_pgbouncer${OLD_BIN:+,splitpoint_x_old}"
for script in $STATEMENTS; do
  for mode in $MODES; do
    declare -A all=()
    for ((r = 0; r < ROUNDS; r++)); do
      for ((k = 0; k < ${#targets[@]}; k++)); do  # the first target rotated every round
        t=${targets[$(((k + r) % ${#targets[@]}))]}
        all[$t]+="$(tps "${port_of[$t]}" "${db_of[$t]}" "$script" "$mode") "
      done
    done
    line="$script,$mode"
    declare -A med=()
    for t in "${targets[@]}"; do
      # shellcheck disable=SC2086
      med[$t]=$(median ${all[$t]})
      line+=",${med[$t]}"
    done
    line+=$(awk -v s="${med[splitpoint]}" -v d="${med[direct]}" -v b="${med[pgbouncer]}" \
      'BEGIN {printf ",%.2f,%.2f", s / d, s / b}')
    [[ -n $OLD_BIN ]] && line+=$(awk -v s="${med[splitpoint]}" -v o="${med[splitpoint_old]}" 'BEGIN {printf ",%.2f", s / o}')
    echo "$line"
    unset all med
  done
done
