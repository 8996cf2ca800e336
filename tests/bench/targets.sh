# shellcheck shell=bash
# The targets the benchmark scripts compare on one PostgreSQL instance (sourced after
# tests/lib/pg.sh), with the user app/secret.

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

# splitpoint's config over two shards that are the databases sp_s0 and sp_s1 of the
# instance at PG_PORT (transaction pooling), with one distribution line (YAML flow).
#   same_instance_config FILE LISTEN_PORT PG_PORT POOL_SIZE DISTRIBUTION
same_instance_config() {
  cat >"$1" <<EOF
listen: 127.0.0.1:$2
metrics_listen: 127.0.0.1:$(free_port)
auth: scram-sha-256
users:
  - { name: app, password: secret }
pool_mode: transaction
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
