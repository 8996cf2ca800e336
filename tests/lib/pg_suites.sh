#!/usr/bin/env bash
# PostgreSQL's own test suites through the proxy, what the tests that run them share
# (test_pg_regress.sh: the regression schedule and libpq_pipeline; test_pg_isolation.sh:
# the isolation schedule): the source tree, a proxy over one shard (the lane's pg0) as
# the superuser postgres, and a database the suite starts from fresh.
#
# Source it after pg.sh:   source "$SP_ROOT/tests/lib/pg_suites.sh"
#
#   postgres_sources       print a source tree holding src/test/regress,
#                          src/test/modules/libpq_pipeline and src/test/isolation; status 1
#                          (nothing printed) when there is none to be had
#   suite_sources TEST     set SOURCE to that tree, or say "SKIP TEST: ..." and end the
#                          test (it passes: no sources to be had is no failure)
#   suite_skip TEST WHY    say SKIP and why, and end the test
#   suite_proxy_start NAME DB [MODE]  splitpoint over pg0's database DB in pool mode MODE
#                          (session), config $WORK/NAME.yaml, log $WORK/NAME.log; sets
#                          SP_PORT (and SP_PID, as sp_start)
#   suite_psql ARGS        psql as postgres on pg0 (database postgres unless -d), quiet,
#                          ON_ERROR_STOP
#   suite_drop_database DB  roll back DB's prepared transactions, drop it (FORCE), and
#                          drop the roles named regress* a suite left behind
#
# Where the tree comes from: PG_SOURCE (a source tree) when set; else the cache
# ($XDG_CACHE_HOME or ~/.cache, /splitpoint/pg-regress); else `apt-get source
# postgresql-15` (needs deb-src entries), of which only those three folders are kept
# in the cache. Two tests that run at once (tests/run's two lanes) take turns: the
# download and the check run under a lock on the cache.

PG_SOURCES_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/splitpoint/pg-regress

# A tree with the three suites (their schedules, sql or specs, expected outputs).
pg_sources_complete() {
  [[ -f $1/src/test/regress/parallel_schedule &&
    -f $1/src/test/modules/libpq_pipeline/libpq_pipeline.c &&
    -f $1/src/test/isolation/isolation_schedule ]]
}

# The first complete tree in the cache.
_pg_sources_cached() {
  local dir
  for dir in "$PG_SOURCES_CACHE"/postgresql-15*; do
    pg_sources_complete "$dir" && echo "$dir" && return
  done
  return 1
}

# Download the source package into the cache and keep the suites' folders (over a tree
# of an older version of this file, which lacked a suite: a test running from that tree
# keeps its files).
_pg_sources_download() {
  command -v apt-get >/dev/null || return 1
  rm -rf "$PG_SOURCES_CACHE/download"
  mkdir -p "$PG_SOURCES_CACHE/download"
  local v tarball
  # The installed server's version first, then the others apt knows (newest first):
  # a security update's source is not always in the mirror.
  for v in $(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null) \
    $(apt-cache showsrc postgresql-15 2>/dev/null | sed -n 's/^Version: //p' | sort -rV); do
    (cd "$PG_SOURCES_CACHE/download" && timeout 300 apt-get source -qq --download-only "postgresql-15=$v") \
      >/dev/null 2>&1 || continue
    tarball=$(ls "$PG_SOURCES_CACHE"/download/postgresql-15_*.orig.tar.* 2>/dev/null | head -n 1)
    [[ -n $tarball ]] || continue
    tar -C "$PG_SOURCES_CACHE" -xf "$tarball" --wildcards '*/src/test/regress/*' \
      '*/src/test/modules/libpq_pipeline/*' '*/src/test/isolation/*' >&2
    rm -rf "$PG_SOURCES_CACHE/download"
    _pg_sources_cached && return
  done
  rm -rf "$PG_SOURCES_CACHE/download"
  return 1
}

postgres_sources() {
  if [[ -n ${PG_SOURCE:-} ]]; then
    pg_sources_complete "$PG_SOURCE" && echo "$PG_SOURCE"
    return
  fi
  mkdir -p "$PG_SOURCES_CACHE" || return 1
  local fd status=0
  exec {fd}>"$PG_SOURCES_CACHE/.lock"
  flock "$fd"
  _pg_sources_cached || _pg_sources_download || status=1
  exec {fd}>&-
  return "$status"
}

suite_skip() { # TEST WHY
  echo "SKIP $1: $2"
  exit 0
}

suite_sources() { # TEST
  SOURCE=$(postgres_sources) ||
    suite_skip "$1" "no PostgreSQL sources (set PG_SOURCE, or add deb-src entries for apt-get source postgresql-15)"
}

suite_proxy_start() { # NAME DB [MODE]
  local config=$WORK/$1.yaml metrics
  SP_PORT=$(free_port)
  metrics=$(free_port)
  cat >"$config" <<EOF
listen: 127.0.0.1:$SP_PORT
metrics_listen: 127.0.0.1:$metrics
pool_mode: ${3:-session}
auth: scram-sha-256
users:
  - { name: postgres, password: postgres }
shards:
  - { name: s0, host: 127.0.0.1, port: $PG0_PORT, database: $2, user: postgres, password: postgres, pool_size: 40 }
EOF
  sp_start "$config" "$WORK/$1.log"
}

suite_psql() {
  PGPASSWORD=postgres "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG0_PORT" -U postgres -d postgres "$@"
}

suite_drop_database() { # DB
  # (a PREPARE TRANSACTION PostgreSQL would refuse, the regression schedule's temp's,
  # succeeds on a pooled backend)
  suite_psql -d "$1" -At -c "SELECT format('ROLLBACK PREPARED %L', gid) FROM pg_prepared_xacts WHERE database = '$1'" \
    2>/dev/null | while read -r stmt; do suite_psql -d "$1" -c "$stmt" >/dev/null 2>&1 || true; done || true
  suite_psql -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true
  # (the suites drop the roles they make; one left would break the next run)
  suite_psql -At -c "SELECT format('DROP ROLE %I', rolname) FROM pg_roles WHERE rolname LIKE 'regress%'" 2>/dev/null |
    while read -r stmt; do suite_psql -c "$stmt" >/dev/null 2>&1 || true; done || true
}
