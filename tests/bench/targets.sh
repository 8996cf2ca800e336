# shellcheck shell=bash
# The targets the benchmark scripts compare on one PostgreSQL instance (sourced after
# tests/lib/pg.sh), with the user app/secret.

# The kernel's task groups by session (kernel.sched_autogroup_enabled): with them on,
# this machine's Linux 6.18 left preempted PostgreSQL backends runnable but not run for
# up to 4.5 s behind the other groups' processes, under splitpoint and PgBouncer alike
# (docs/performance.md, "Multi-second stalls"). A benchmark switches them off for its
# run and puts the setting back after; SCHED_AUTOGROUP=keep leaves the machine's, 1
# switches them on. Sets BENCH_AUTOGROUP to the value in force (empty: no such sysctl).
#   bench_autogroup
bench_autogroup() {
  local f=/proc/sys/kernel/sched_autogroup_enabled want=${SCHED_AUTOGROUP:-0} was
  BENCH_AUTOGROUP=
  [[ -r $f ]] || return 0
  was=$(<"$f")
  BENCH_AUTOGROUP=$was
  [[ $want == keep || $want == "$was" ]] && return 0
  if { echo "$want" >"$f"; } 2>/dev/null; then
    BENCH_AUTOGROUP=$want
    on_exit "echo $was > $f"
  else
    echo "bench: cannot set $f to $want (not root?); it stays $was" >&2
  fi
}

# A PostgreSQL instance in DIR with the databases direct, sp_s0 and sp_s1 (owner app);
# sets PG_PORT.
#   start_same_instance DIR
start_same_instance() {
  PG_PORT=$(free_port) && pg_start "$1" "$PG_PORT" >/dev/null
  on_exit "pg_stop '$1'"
  local db
  for db in direct sp_s0 sp_s1; do
    psql_as "$1" "$PG_PORT" postgres postgres -c "CREATE DATABASE $db OWNER app" >/dev/null
  done
}

# The SQL that deletes from TABLE the rows whose KEY is not in shard I of N's hash
# partitions (of PARTITIONS). The partition of a key is the remainder PostgreSQL's own
# PARTITION BY HASH gives (SPEC §3), so PostgreSQL is asked: a scratch table hashed by
# the same key type with MODULUS = PARTITIONS. Default placement: shard i of N holds
# partitions [floor(i*P/N), floor((i+1)*P/N)). Run it as one psql script (stdin): it
# ends with VACUUM FULL and ANALYZE.
#   trim_sql TABLE KEY KEYTYPE PARTITIONS I N
trim_sql() {
  local table=$1 key=$2 keytype=$3 parts=$4 i=$5 n=$6 r lo hi owned=() s
  lo=$((i * parts / n))
  hi=$(((i + 1) * parts / n))
  s="SET client_min_messages = warning;
DROP TABLE IF EXISTS part_probe;
CREATE TABLE part_probe (k $keytype) PARTITION BY HASH (k);"
  for ((r = 0; r < parts; r++)); do
    s+="
CREATE TABLE part_probe_$r PARTITION OF part_probe FOR VALUES WITH (MODULUS $parts, REMAINDER $r);"
    ((r >= lo && r < hi)) && owned+=("'part_probe_$r'")
  done
  local owned_list=${owned[*]}
  owned_list=${owned_list// /,}
  printf '%s\n' "$s
INSERT INTO part_probe SELECT $key FROM $table;
DELETE FROM $table t USING part_probe p
 WHERE t.$key = p.k AND p.tableoid::regclass::text NOT IN (${owned_list:-''});
DROP TABLE part_probe;
VACUUM FULL $table;
ANALYZE $table;"
}

# splitpoint's config over two shards that are the databases sp_s0 and sp_s1 of the
# instance at PG_PORT (transaction pooling), with one distribution line (YAML flow);
# SP_SCHEDULING (normal, batch) is its `scheduling`.
#   same_instance_config FILE LISTEN_PORT PG_PORT POOL_SIZE DISTRIBUTION
same_instance_config() {
  cat >"$1" <<EOF
listen: 127.0.0.1:$2
metrics_listen: 127.0.0.1:$(free_port)
auth: scram-sha-256
users:
  - { name: app, password: secret }
pool_mode: transaction
scheduling: ${SP_SCHEDULING:-normal}
shards:
  - { name: s0, host: 127.0.0.1, port: $3, database: sp_s0, user: app, password: secret, pool_size: $4 }
  - { name: s1, host: 127.0.0.1, port: $3, database: sp_s1, user: app, password: secret, pool_size: $4 }
distributions:
  - $5
EOF
}

# PgBouncer in front of one database: transaction pooling, SCRAM. Not in a subshell
# (its on_exit would stop PgBouncer at once); sets PGB_PORT.
#   start_pgbouncer DIR PG_PORT DATABASE POOL_SIZE
start_pgbouncer() {
  local dir=$1 pg=$2 db=$3 pool=$4
  PGB_PORT=$(free_port)
  mkdir -p "$dir"
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$db = host=127.0.0.1 port=$pg dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
default_pool_size = $pool
logfile = $dir/pgbouncer.log
EOF
  printf '"app" "secret"\n' >"$dir/userlist.txt"
  local cmd=(pgbouncer "$dir/pgbouncer.ini")
  if ((EUID == 0)); then  # PgBouncer refuses to run as root
    chown -R postgres: "$dir"
    cmd=(setpriv --reuid=postgres --regid=postgres --init-groups -- "${cmd[@]}")
  fi
  "${cmd[@]}" >"$dir/stdout.log" 2>&1 </dev/null &
  on_exit "kill $! 2>/dev/null"
  wait_port "$PGB_PORT" 10
}
