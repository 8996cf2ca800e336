#!/usr/bin/env bash
# PostgreSQL's own regression schedule (src/test/regress/parallel_schedule, 200+ files)
# through splitpoint and directly, compared file by file (issue #45). splitpoint runs
# in session pooling over one shard (the shared instance pg0) as the superuser
# postgres; pg_regress --use-existing runs the schedule against database `regression`
# on pg0 once directly and once through the proxy, each time in a fresh database and
# into the same output path, so that paths in the outputs match. What pg_regress says
# against its expected files is not the point (a distribution's server differs from
# the source's expectations in places); the proxy must give the outputs PostgreSQL
# gives, except the files listed below, each with the reason (docs/compatibility.md).
#
# Then libpq's own pipeline tests (src/test/modules/libpq_pipeline, built here against
# libpq): each test once directly and once through the proxy, each in a fresh
# database, with libpq's trace; they must pass both ways and the traces be identical
# for the tests whose traces PostgreSQL's own TAP test compares (not pipelined_insert's
# nor uniqviol's, which vary from run to run, direct too).
#
# Needs PostgreSQL's sources and regress.c built against the server's headers
# (postgresql-server-dev-15, from deploy/install-deps): the sources come from PG_SOURCE
# (a source tree), else from a cache (~/.cache/splitpoint/pg-regress), else `apt-get
# source postgresql-15` (deb-src entries needed; tests/lib/pg_suites.sh). Without them
# the test says SKIP and why, and passes.
# test-timeout: 900
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
# shellcheck source=tests/lib/pg_suites.sh
source "$SP_ROOT/tests/lib/pg_suites.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_pg_regress)}
mkdir -p "$WORK"

# Files whose outputs through the proxy differ from PostgreSQL's (or may: guc depends on
# which pooled backend a client gets), and why. Each is a pooling artefact: in session
# pooling a client's connection is a pooled backend that earlier clients used
# (PgBouncer's session pooling shows the same).
declare -A EXPECTED_DIFFERENCES=(
  [guc]="LOAD 'plpgsql' on a pooled backend that earlier clients' PL/pgSQL had loaded: no WARNING about the placeholder it removes, and the SET after it fails instead"
  [stats]="pg_stat_database.sessions does not grow at \\c: the reconnect reuses a pooled backend"
  [temp]="PREPARE TRANSACTION after \\c and current_schema() under search_path pg_temp: the pooled backend's temporary schema exists already, so the transaction did not create it and PostgreSQL does not refuse it (the test's cleanup rolls that prepared transaction back)"
)

# Files PostgreSQL itself does not answer the same way twice, compared as sorted lines.
declare -A ANY_ROW_ORDER=(
  [largeobject]="SELECT pageno, data FROM pg_largeobject without ORDER BY: its rows come in the table's physical order, which two direct runs already give differently"
)

skip() { suite_skip test_pg_regress "$*"; }
suite_sources test_pg_regress
REGRESS=$SOURCE/src/test/regress
PG_REGRESS=$("$PG_BIN/pg_config" --pkglibdir)/pgxs/src/test/regress/pg_regress
[[ -x $PG_REGRESS ]] || skip "no pg_regress at $PG_REGRESS (postgresql-client-15)"
INCLUDE=$("$PG_BIN/pg_config" --includedir-server)
[[ -f $INCLUDE/postgres.h ]] || skip "no server headers in $INCLUDE (postgresql-server-dev-15) to build regress.so"
echo "PostgreSQL sources: $SOURCE"
# A copy the server can read (COPY ... FROM its data files runs as the server's user).
rm -rf "$WORK/regress" && cp -r "$REGRESS" "$WORK/regress" && chmod -R a+rX "$WORK"
REGRESS=$WORK/regress
mkdir -p "$WORK/lib"
cc -O1 -fPIC -shared -I"$INCLUDE" -o "$WORK/lib/regress.so" "$REGRESS/regress.c"
chmod -R a+rX "$WORK/lib"

suite_proxy_start splitpoint regression
export PGPASSWORD=postgres
cleanup() { suite_drop_database regression; }
on_exit cleanup

# One run of the schedule on PORT into $WORK/out, then moved to $WORK/NAME.
run_schedule() { # NAME PORT
  cleanup
  suite_psql -c "CREATE DATABASE regression TEMPLATE template0"
  rm -rf "$WORK/out" && mkdir -p "$WORK/out" && chmod 777 "$WORK/out"
  local t0=$SECONDS
  "$PG_REGRESS" --use-existing --host=127.0.0.1 --port="$2" --user=postgres --dbname=regression \
    --inputdir="$REGRESS" --outputdir="$WORK/out" --schedule="$REGRESS/parallel_schedule" \
    --bindir="$PG_BIN" --dlpath="$WORK/lib" --max-connections=20 >"$WORK/$1.log" 2>&1 || true
  [[ -d $WORK/out/results ]] || { cat "$WORK/$1.log" >&2; echo "FAIL: pg_regress ran nothing ($1)" >&2; exit 1; }
  echo "$1: $(grep -c ' \.\.\. ok\| \.\.\. FAILED' "$WORK/$1.log") files in $((SECONDS - t0)) s," \
    "$(grep -c 'FAILED' "$WORK/$1.log" || true) of them differ from the source's expected outputs"
  rm -rf "${WORK:?}/$1" && mv "$WORK/out" "$WORK/$1"
}
run_schedule direct "$PG0_PORT"
run_schedule proxy "$SP_PORT"

failed=0 listed_same=()
for f in "$WORK"/direct/results/*.out; do
  name=$(basename "$f" .out)
  other=$WORK/proxy/results/$name.out
  if [[ -f $other ]] && { cmp -s "$f" "$other" ||
    { [[ -n ${ANY_ROW_ORDER[$name]:-} ]] && cmp -s <(LC_ALL=C sort "$f") <(LC_ALL=C sort "$other"); }; }; then
    [[ -n ${EXPECTED_DIFFERENCES[$name]:-} ]] && listed_same+=("$name")
    continue
  fi
  if [[ -n ${EXPECTED_DIFFERENCES[$name]:-} ]]; then
    echo "differs as expected: $name (${EXPECTED_DIFFERENCES[$name]})"
    continue
  fi
  echo "FAIL: $name.out differs through splitpoint:" >&2
  diff -u "$f" "$other" 2>&1 | head -n 40 | cut -c1-200 >&2 || true
  failed=1
done
((${#listed_same[@]} == 0)) || echo "note: listed but identical this run: ${listed_same[*]}"
echo "regression schedule: $(ls "$WORK"/direct/results/*.out | wc -l) files, the same through splitpoint but those listed"

# ---- libpq's pipeline tests
PIPELINE=$SOURCE/src/test/modules/libpq_pipeline
LIBDIR=$("$PG_BIN/pg_config" --pkglibdir)
cc -O1 -I"$INCLUDE" -I"$("$PG_BIN/pg_config" --includedir)" -I"$("$PG_BIN/pg_config" --includedir)/internal" \
  "$PIPELINE/libpq_pipeline.c" -L"$LIBDIR" -lpgcommon -lpgport -lpq -lm -o "$WORK/libpq_pipeline"
mkdir -p "$WORK/traces"
TRACED="simple_pipeline nosync multi_pipelines prepared singlerow pipeline_abort pipeline_idle transaction disallowed_in_pipeline"
for t in $("$WORK/libpq_pipeline" tests); do
  for where in direct proxy; do
    port=$PG0_PORT
    [[ $where == proxy ]] && port=$SP_PORT
    cleanup
    suite_psql -c "CREATE DATABASE regression TEMPLATE template0"
    if ! "$WORK/libpq_pipeline" -r 700 -t "$WORK/traces/$t.$where" "$t" \
      "host=127.0.0.1 port=$port user=postgres password=postgres dbname=regression" >"$WORK/traces/$t.$where.out" 2>&1; then
      echo "FAIL: libpq_pipeline $t ($where):" >&2
      tail -n 20 "$WORK/traces/$t.$where.out" >&2
      failed=1
    fi
  done
  # (traces compared as PostgreSQL's own TAP test compares them: pipelined_insert's
  # depends on when answers arrive while the client still sends, uniqviol's on how many
  # rows go in before the violation)
  [[ " $TRACED " == *" $t "* ]] || continue
  if ! cmp -s "$WORK/traces/$t.direct" "$WORK/traces/$t.proxy"; then
    echo "FAIL: libpq_pipeline $t: libpq's trace differs through splitpoint:" >&2
    diff -u "$WORK/traces/$t.direct" "$WORK/traces/$t.proxy" | head -n 30 | cut -c1-200 >&2 || true
    failed=1
  fi
done
echo "libpq_pipeline: $("$WORK/libpq_pipeline" tests | wc -w) tests, compared with PostgreSQL's answers"
if ((failed)); then
  tail -n 20 "$WORK/splitpoint.log" >&2
  exit 1
fi
echo "PASS test_pg_regress"
