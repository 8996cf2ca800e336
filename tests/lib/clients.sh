#!/usr/bin/env bash
# Shell side of the real-client tests (tests/integration/test_client_*.sh). Source it
# after tests/lib/pg.sh. The layout, the placement check and the package installs are
# in tests/lib/clients.py (one implementation for the shell and the Python tests).
#
#   ensure_apt PKG...            install the Debian packages that are missing (sudo
#                                when not root); no apt command when none is
#   clients_setup NAME [LAYOUT]  fresh database drv_NAME_<random> on both shared
#                                instances (dropped on exit), proxy config for LAYOUT
#                                (drivers | pgbench) and the proxy started; sets
#                                DRV_DB, SP_PORT, SP_METRICS_PORT, SP_LOG, SP_PID
#   clients_verify [LAYOUT]      every row on the shard owning its key (direct reads)
#   known_failure WHAT EXPECTED GOT [DIAGNOSIS]
#                                print "KNOWN FAILURE: ..." (a check that fails because
#                                of the proxy; does not fail the test) and remember it
#   known_failures_summary       print the known failures seen

: "${PYTHON:=/usr/bin/python3}"
_CLIENTS_PY="$SP_ROOT/tests/lib/clients.py"
KNOWN_FAILURES=()

ensure_apt() {
  "$PYTHON" "$_CLIENTS_PY" ensure-apt "$@"
}

clients_setup() {
  local name=$1 layout=${2:-drivers} work=${TEST_WORKDIR:?}
  DRV_DB="drv_${name}_$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')"
  "$PYTHON" "$_CLIENTS_PY" create-dbs "$DRV_DB" || return 1
  on_exit "\"$PYTHON\" \"$_CLIENTS_PY\" drop-dbs $DRV_DB >/dev/null"
  SP_PORT=$(free_port) && SP_METRICS_PORT=$(free_port) || return 1
  "$PYTHON" "$_CLIENTS_PY" config "$DRV_DB" "$SP_PORT" "$SP_METRICS_PORT" "$layout" >"$work/splitpoint.yaml" || return 1
  SP_LOG=$work/splitpoint.log
  sp_start "$work/splitpoint.yaml" "$SP_LOG" || return 1
  echo "proxy on 127.0.0.1:$SP_PORT (pid $SP_PID), database $DRV_DB on both shards, layout $layout"
}

clients_verify() {
  "$PYTHON" "$_CLIENTS_PY" verify "$DRV_DB" "${1:-drivers}"
}

known_failure() {
  local line="KNOWN FAILURE: $1 (expected $2 vs got $3)${4:+ [$4]}"
  echo "$line"
  KNOWN_FAILURES+=("$line")
}

known_failures_summary() {
  echo "${#KNOWN_FAILURES[@]} known failure(s)"
  local k
  for k in "${KNOWN_FAILURES[@]}"; do
    echo "  $k"
  done
}
