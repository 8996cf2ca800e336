#!/usr/bin/env bash
# Shell helpers for splitpoint's integration tests and demo: throw-away PostgreSQL 15
# instances, the proxy process, free ports and cleanup on exit.
#
# Source it:   source "$SP_ROOT/tests/lib/pg.sh"
# or run one function from another program (e.g. a Python test killing a shard):
#              tests/lib/pg.sh pg_kill "$PG1_DIR"
# (run that way, pg_start/sp_start do not stop what they start when the command exits).
#
# Sourcing does not change the caller's shell options; every function works with and
# without `set -euo pipefail` and returns non-zero on failure.
#
# A PostgreSQL instance lives in one directory DIR:
#   DIR/data   data directory          DIR/log   server log (appended)
#   DIR/port   TCP port it listens on  DIR/.s.PGSQL.<port>   unix socket
# Listens on 127.0.0.1 only. pg_hba: local socket trust for everyone; over TCP
# md5user -> md5, trustuser -> trust, everyone else -> scram-sha-256.
# Roles: postgres/postgres (superuser), app/secret (owns database app),
# md5user/md5pw (md5 verifier), trustuser (no password).
# As root, PostgreSQL runs as the OS user `postgres` (DIR is chowned to it);
# as anyone else it runs as that user.
#
# Functions:
#   free_port                      print a free TCP port on 127.0.0.1
#   wait_port PORT [SECONDS]       wait until 127.0.0.1:PORT accepts connections
#   pg_start DIR PORT              create if needed, start, wait ready, ensure roles
#   pg_stop DIR                    fast shutdown (no-op when not running)
#   pg_restart DIR                 fast restart, wait ready
#   pg_kill DIR                    immediate shutdown (crash-like, recovery on start)
#   pg_replica PRIMARY_DIR DIR PORT  a streaming standby of PRIMARY_DIR's instance
#                                  (pg_basebackup -R), started and ready; EXTRA_CONF
#                                  lines go into its config (e.g. recovery_min_apply_delay)
#   pg_promote DIR                 pg_ctl promote, wait until out of recovery
#   pg_is_running DIR              status 0 when the postmaster runs
#   psql_as DIR PORT USER DB ARGS  psql over DIR's unix socket (trust) as USER; output
#                                  unaligned and tuples-only, ON_ERROR_STOP
#   sp_start CONFIG LOGFILE [PORT] start "$SP_BIN --config CONFIG" in the background,
#                                  set SP_PID, wait until the listen port accepts
#   sp_stop [PID]                  SIGTERM, wait SP_STOP_TIMEOUT (15 s), then SIGKILL;
#                                  sets SP_EXIT_STATUS; returns 1 if it had to SIGKILL
#   sp_reload [PID]                SIGHUP
#   on_exit CMD...                 run CMD (a string, eval'd) when this shell exits,
#                                  also on INT/TERM/HUP; last registered runs first
#   test_dir NAME                  create and print $TEST_TMP/NAME
# Variables: TEST_TMP (default /tmp/splitpoint-test-$$), PG_BIN, SP_BIN, SP_ROOT.

: "${SP_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${PG_BIN:=/usr/lib/postgresql/15/bin}"
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  # Run as a command: one stable directory per user instead of one per call.
  : "${TEST_TMP:=${TMPDIR:-/tmp}/splitpoint-test-$(id -u)}"
else
  : "${TEST_TMP:=/tmp/splitpoint-test-$$}"
fi
: "${SP_BIN:=${BUILD_DIR:-$SP_ROOT/build}/splitpoint}"
: "${SP_STOP_TIMEOUT:=15}"
: "${PG_START_TIMEOUT:=60}"
_SP_AUTOCLEAN=${_SP_AUTOCLEAN:-1}

_sp_log() { echo "pg.sh: $*" >&2; }

# ---------------------------------------------------------------- cleanup registry

_SP_CLEANUP_CMDS=()
_SP_CLEANUP_PIDS=()

on_exit() {
  if (($# == 0)); then
    _sp_log "on_exit: no command"
    return 1
  fi
  _SP_CLEANUP_CMDS+=("$*")
  # Subshells inherit the arrays but must only run what they registered themselves.
  _SP_CLEANUP_PIDS+=("$BASHPID")
  if [[ ${_SP_TRAPS_IN:-} != "$BASHPID" ]]; then
    trap '_sp_run_cleanup' EXIT
    trap '_sp_on_signal 129' HUP
    trap '_sp_on_signal 130' INT
    trap '_sp_on_signal 143' TERM
    _SP_TRAPS_IN=$BASHPID
  fi
}

_sp_on_signal() {
  trap - HUP INT TERM
  exit "$1" # runs the EXIT trap
}

_sp_run_cleanup() {
  local rc=$? i
  set +e
  for ((i = ${#_SP_CLEANUP_CMDS[@]} - 1; i >= 0; i--)); do
    if [[ ${_SP_CLEANUP_PIDS[i]} == "$BASHPID" ]]; then
      eval "${_SP_CLEANUP_CMDS[i]}"
    fi
    unset '_SP_CLEANUP_CMDS[i]' '_SP_CLEANUP_PIDS[i]'
  done
  return "$rc"
}

# ---------------------------------------------------------------- ports and dirs

test_dir() {
  local d="$TEST_TMP/$1"
  mkdir -p "$d" || return 1
  echo "$d"
}

_sp_port_in_use() {
  local port=$1
  if command -v ss >/dev/null; then
    # Any TCP socket bound to the port, listening or not.
    [[ -n $(ss -Htan "( sport = :$port )" 2>/dev/null) ]]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  fi
}

# Ports come from 20000-31999, below Linux's ephemeral range (32768+), so a client
# socket cannot grab one between free_port and the server's bind. Ports handed out are
# remembered in $TEST_TMP/.ports so two calls in one test run never collide.
free_port() {
  local registry="$TEST_TMP/.ports" port tries
  mkdir -p "$TEST_TMP" || return 1
  touch "$registry" || return 1
  # (tests/run's lanes call this at the same time: one at a time through the lock)
  {
    flock 8
    for ((tries = 0; tries < 500; tries++)); do
      port=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
      grep -qx "$port" "$registry" && continue
      _sp_port_in_use "$port" && continue
      echo "$port" >>"$registry"
      echo "$port"
      return 0
    done
  } 8>>"$registry.lock"
  _sp_log "free_port: no free port found"
  return 1
}

wait_port() {
  local port=$1 secs=${2:-10} deadline
  deadline=$((SECONDS + secs))
  while ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      _sp_log "127.0.0.1:$port did not accept connections within ${secs}s"
      return 1
    fi
    sleep 0.05
  done
}

# ---------------------------------------------------------------- PostgreSQL

# The OS user a PostgreSQL in DIR runs as.
_pg_owner() {
  if ((EUID != 0)); then
    id -un
  elif [[ -d $1/data ]]; then
    stat -c %U "$1/data"
  else
    echo postgres
  fi
}

# Runs a command as the owner of the instance in DIR (pg_ctl refuses to run as root).
_pg_as_owner() {
  local dir=$1
  shift
  if ((EUID == 0)); then
    local owner
    owner=$(_pg_owner "$dir")
    (cd / && runuser -u "$owner" -- "$@")
  else
    "$@"
  fi
}

_pg_abs() { (mkdir -p "$1" && cd "$1" && pwd -P); }

# As root: the postgres user must be able to reach DIR through every parent.
_pg_make_traversable() {
  local d=$1 owner=$2
  while [[ $d != / && -n $d ]]; do
    if ! runuser -u "$owner" -- test -x "$d" 2>/dev/null; then
      chmod o+x "$d" || return 1
    fi
    d=$(dirname "$d")
  done
}

pg_is_running() {
  [[ -f $1/data/PG_VERSION ]] || return 1
  _pg_as_owner "$1" "$PG_BIN/pg_ctl" status -D "$1/data" >/dev/null 2>&1
}

_pg_wait_ready() {
  local dir=$1 port=$2 deadline
  deadline=$((SECONDS + PG_START_TIMEOUT))
  until "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2 >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      _sp_log "PostgreSQL in $dir not ready on port $port after ${PG_START_TIMEOUT}s; log tail:"
      tail -n 30 "$dir/log" >&2 2>/dev/null
      return 1
    fi
    sleep 0.1
  done
}

_pg_hba() {
  cat <<'EOF'
# Written by tests/lib/pg.sh. First match wins.
# TYPE  DATABASE     USER       ADDRESS        METHOD
local   all          all                       trust
local   replication  all                       trust
host    all          md5user    127.0.0.1/32   md5
host    all          trustuser  127.0.0.1/32   trust
host    all          all        127.0.0.1/32   scram-sha-256
host    replication  all        127.0.0.1/32   scram-sha-256
EOF
}

_pg_conf() {
  local dir=$1 port=$2
  cat <<EOF
# Written by tests/lib/pg.sh on every pg_start.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 300
max_prepared_transactions = 50
# partition moves (SPEC 9): logical replication between the test's shards
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_logical_replication_workers = 8
max_worker_processes = 16
log_line_prefix = '%m [%p] %q%u@%d '
log_connections = off
EOF
}

_pg_setup_roles() {
  local dir=$1 port=$2
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres <<'SQL'
SET client_min_messages = warning;
SET password_encryption = 'scram-sha-256';
ALTER ROLE postgres PASSWORD 'postgres';
SELECT format('CREATE ROLE %I LOGIN', r) FROM unnest(ARRAY['app','md5user','trustuser']) r
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) \gexec
ALTER ROLE app LOGIN PASSWORD 'secret';
ALTER ROLE trustuser LOGIN PASSWORD NULL;
SET password_encryption = 'md5';
ALTER ROLE md5user LOGIN PASSWORD 'md5pw';
SELECT 'CREATE DATABASE app OWNER app'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'app') \gexec
GRANT CREATE ON SCHEMA public TO app;
\connect app
GRANT CREATE ON SCHEMA public TO app;
SQL
}

pg_start() {
  if (($# != 2)); then
    _sp_log "usage: pg_start DIR PORT"
    return 2
  fi
  local dir port=$2 owner
  dir=$(_pg_abs "$1") || return 1
  if [[ ! -x $PG_BIN/postgres ]]; then
    _sp_log "no PostgreSQL 15 in $PG_BIN (run deploy/install-deps)"
    return 1
  fi
  if ((EUID == 0)); then
    owner=$(_pg_owner "$dir")
    id "$owner" >/dev/null 2>&1 || { _sp_log "OS user $owner does not exist"; return 1; }
    chown "$owner:" "$dir" && chmod 755 "$dir" || return 1
    _pg_make_traversable "$dir" "$owner" || return 1
  fi

  if [[ ! -s $dir/data/PG_VERSION ]]; then
    rm -rf "$dir/data"
    if ! _pg_as_owner "$dir" env LC_ALL=C.UTF-8 LANG=C.UTF-8 "$PG_BIN/initdb" \
      -D "$dir/data" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=scram-sha-256 --no-sync --no-instructions \
      >"$dir/initdb.log" 2>&1; then
      _sp_log "initdb failed in $dir:"
      cat "$dir/initdb.log" >&2
      return 1
    fi
    _pg_hba | _pg_as_owner "$dir" tee "$dir/data/pg_hba.conf" >/dev/null || return 1
    echo "include_if_exists = 'splitpoint-test.conf'" |
      _pg_as_owner "$dir" tee -a "$dir/data/postgresql.conf" >/dev/null || return 1
  fi

  local old_port=""
  [[ -f $dir/port ]] && old_port=$(<"$dir/port")
  _pg_conf "$dir" "$port" | _pg_as_owner "$dir" tee "$dir/data/splitpoint-test.conf" >/dev/null || return 1
  echo "$port" | _pg_as_owner "$dir" tee "$dir/port" >/dev/null || return 1

  if pg_is_running "$dir"; then
    if [[ $old_port != "$port" ]]; then
      _pg_as_owner "$dir" "$PG_BIN/pg_ctl" restart -D "$dir/data" -l "$dir/log" -m fast -w \
        -t "$PG_START_TIMEOUT" -s >/dev/null || return 1
    fi
  else
    _pg_ctl_start "$dir" || return 1
  fi
  _pg_wait_ready "$dir" "$port" || return 1
  _pg_setup_roles "$dir" "$port" || { _sp_log "role setup failed in $dir"; return 1; }
  _pg_stop_at_exit "$dir"
}

_pg_ctl_start() {
  local dir=$1
  if ! _pg_as_owner "$dir" "$PG_BIN/pg_ctl" start -D "$dir/data" -l "$dir/log" -w -t "$PG_START_TIMEOUT" -s \
    >/dev/null; then
    _sp_log "pg_ctl start failed for $dir; log tail:"
    tail -n 30 "$dir/log" >&2
    return 1
  fi
}

_pg_stop_at_exit() {
  if ((_SP_AUTOCLEAN)); then
    local cmd
    printf -v cmd 'pg_stop %q' "$1"
    on_exit "$cmd"
  fi
}

pg_stop() {
  local dir=${1:?usage: pg_stop DIR}
  pg_is_running "$dir" || return 0
  if ! _pg_as_owner "$dir" "$PG_BIN/pg_ctl" stop -D "$dir/data" -m fast -w -t 60 -s; then
    _sp_log "fast shutdown of $dir failed; stopping immediately"
    _pg_as_owner "$dir" "$PG_BIN/pg_ctl" stop -D "$dir/data" -m immediate -w -t 30 -s
  fi
}

pg_replica() {
  if (($# != 3)); then
    _sp_log "usage: pg_replica PRIMARY_DIR DIR PORT"
    return 2
  fi
  local primary dir port=$3 owner pport
  primary=$(_pg_abs "$1") || return 1
  dir=$(_pg_abs "$2") || return 1
  pport=$(<"$primary/port") || return 1
  owner=$(_pg_owner "$primary")
  if ((EUID == 0)); then
    chown "$owner:" "$dir" && chmod 755 "$dir" || return 1
    _pg_make_traversable "$dir" "$owner" || return 1
  fi
  rm -rf "$dir/data"
  if ! _pg_as_owner "$primary" "$PG_BIN/pg_basebackup" -h "$primary" -p "$pport" -U postgres -D "$dir/data" \
    -R -X stream -c fast >"$dir/basebackup.log" 2>&1; then
    _sp_log "pg_basebackup failed for $dir:"
    cat "$dir/basebackup.log" >&2
    return 1
  fi
  { _pg_conf "$dir" "$port"; echo "hot_standby = on"; echo "${EXTRA_CONF:-}"; } |
    _pg_as_owner "$dir" tee "$dir/data/splitpoint-test.conf" >/dev/null || return 1
  echo "$port" | _pg_as_owner "$dir" tee "$dir/port" >/dev/null || return 1
  _pg_ctl_start "$dir" || return 1
  _pg_wait_ready "$dir" "$port" || return 1
  _pg_stop_at_exit "$dir"
}

pg_promote() {
  local dir=${1:?usage: pg_promote DIR}
  _pg_as_owner "$dir" "$PG_BIN/pg_ctl" promote -D "$dir/data" -w -t "$PG_START_TIMEOUT" -s
}

pg_kill() {
  local dir=${1:?usage: pg_kill DIR}
  pg_is_running "$dir" || return 0
  _pg_as_owner "$dir" "$PG_BIN/pg_ctl" stop -D "$dir/data" -m immediate -w -t 30 -s
}

pg_restart() {
  local dir=${1:?usage: pg_restart DIR} port
  port=$(<"$dir/port") || return 1
  _pg_as_owner "$dir" "$PG_BIN/pg_ctl" restart -D "$dir/data" -l "$dir/log" -m fast -w \
    -t "$PG_START_TIMEOUT" -s >/dev/null || return 1
  _pg_wait_ready "$dir" "$port"
}

psql_as() {
  if (($# < 4)); then
    _sp_log "usage: psql_as DIR PORT USER DB [psql args...]"
    return 2
  fi
  local dir=$1 port=$2 user=$3 db=$4
  shift 4
  "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U "$user" -d "$db" "$@"
}

# ---------------------------------------------------------------- the proxy

# The port of the `listen:` line of a splitpoint YAML config (spec default 6432).
_sp_config_port() {
  local addr
  addr=$(sed -nE "s/^listen:[[:space:]]*[\"']?([^\"'#[:space:]]+).*/\1/p" "$1" | head -n 1)
  if [[ -z $addr ]]; then
    echo 6432
  else
    echo "${addr##*:}"
  fi
}

_sp_alive() {
  local pid=$1 state
  kill -0 "$pid" 2>/dev/null || return 1
  # A dead child stays a zombie until waited for; kill -0 still succeeds on it.
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ $state != Z ]]
}

sp_start() {
  if (($# < 2 || $# > 3)); then
    _sp_log "usage: sp_start CONFIG LOGFILE [PORT]"
    return 2
  fi
  local config=$1 logfile=$2 port=${3:-} deadline
  [[ -n $port ]] || port=$(_sp_config_port "$config")
  if [[ ! -x $SP_BIN ]]; then
    _sp_log "SP_BIN=$SP_BIN is not executable"
    return 1
  fi
  mkdir -p "$(dirname "$logfile")"
  "$SP_BIN" --config "$config" >>"$logfile" 2>&1 </dev/null &
  SP_PID=$!
  if ((_SP_AUTOCLEAN)); then
    on_exit "sp_stop $SP_PID >/dev/null 2>&1"
  fi
  deadline=$((SECONDS + 10))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! _sp_alive "$SP_PID"; then
      wait "$SP_PID" 2>/dev/null
      _sp_log "splitpoint exited with status $? before listening on $port; log tail ($logfile):"
      tail -n 30 "$logfile" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      _sp_log "splitpoint (pid $SP_PID) not listening on $port after 10s; log tail ($logfile):"
      tail -n 30 "$logfile" >&2
      return 1
    fi
    sleep 0.05
  done
}

# shellcheck disable=SC2034  # SP_EXIT_STATUS is for the caller
sp_stop() {
  local pid=${1:-${SP_PID:-}} deadline
  SP_EXIT_STATUS=""
  [[ -n $pid ]] || return 0
  if _sp_alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null
    deadline=$((SECONDS + SP_STOP_TIMEOUT))
    while _sp_alive "$pid"; do
      if ((SECONDS >= deadline)); then
        _sp_log "splitpoint (pid $pid) still running ${SP_STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
        SP_EXIT_STATUS=137
        return 1
      fi
      sleep 0.05
    done
  fi
  # Reap it and keep its exit status (only possible when it is our child).
  # (`|| ...`: a non-zero exit status must not end a caller running with set -e.)
  SP_EXIT_STATUS=0
  wait "$pid" 2>/dev/null || SP_EXIT_STATUS=$?
  return 0
}

sp_reload() {
  local pid=${1:-${SP_PID:-}}
  [[ -n $pid ]] || { _sp_log "sp_reload: no pid"; return 1; }
  kill -HUP "$pid"
}

# ---------------------------------------------------------------- direct execution

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  _SP_AUTOCLEAN=0
  if (($# == 0)) || ! declare -F "$1" >/dev/null; then
    sed -n '/^# Functions:/,/^# Variables:/s/^# \{0,1\}//p' "$0" >&2
    exit 2
  fi
  "$@"
fi
