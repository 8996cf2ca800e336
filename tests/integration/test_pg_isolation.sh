#!/usr/bin/env bash
# PostgreSQL's own isolation schedule (src/test/isolation/isolation_schedule, 115 specs:
# concurrent sessions whose steps block on each other's locks) through splitpoint
# (issue #45). splitpoint runs in session pooling over one shard (the shared instance
# pg0) as the superuser postgres; pg_isolation_regress --use-existing runs the schedule
# through it against a fresh database and compares each spec's output with PostgreSQL's
# expected outputs (isolationtester finds which step waits with
# pg_isolation_test_session_is_blocked on the backend pids the proxy gives its
# clients). The specs listed below differ, each with its reason (docs/compatibility.md);
# any other that differs is run again directly, and only fails the test when PostgreSQL
# itself gives the expected output.
#
# Needs PostgreSQL's sources (tests/lib/pg_suites.sh: PG_SOURCE, the cache, or
# `apt-get source postgresql-15` with deb-src entries) and pg_isolation_regress with its
# isolationtester (postgresql-client-15). Without them the test says SKIP and why, and
# passes.
# test-timeout: 400
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"
# shellcheck source=tests/lib/pg_suites.sh
source "$SP_ROOT/tests/lib/pg_suites.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_pg_isolation)}
mkdir -p "$WORK"
DB=isolation_regression

# Specs whose output through the proxy differs from PostgreSQL's expected one (or may),
# and why.
declare -A EXPECTED_DIFFERENCES=(
  [temp-schema-cleanup]="after pg_terminate_backend(pg_backend_pid()) the client reads the server's FATAL and then the proxy's own 'FATAL: server connection lost': the proxy reports the backend it lost"
  [async-notify]="pg_notification_queue_usage() > 0 in permutation 'llisten lbegin usage bignotify usage' may be f where PostgreSQL says t: the proxy holds lbegin's BEGIN until a statement needs a shard, so the listener's backend is not in a transaction and reads the notifications as they come (a race with the second usage)"
)

skip() { suite_skip test_pg_isolation "$*"; }
suite_sources test_pg_isolation
ISOLATION=$SOURCE/src/test/isolation
TOOLS=$("$PG_BIN/pg_config" --pkglibdir)/pgxs/src/test/isolation
[[ -x $TOOLS/pg_isolation_regress && -x $TOOLS/isolationtester ]] ||
  skip "no pg_isolation_regress and isolationtester in $TOOLS (postgresql-client-15)"
echo "PostgreSQL sources: $SOURCE"

export PGPASSWORD=postgres
cleanup() { suite_drop_database "$DB"; }
on_exit cleanup

# pg_isolation_regress on PORT into $WORK/NAME, fresh database; further arguments: the
# specs to run (default: the schedule).
run_isolation() { # NAME PORT [SPEC...]
  local name=$1 port=$2
  shift 2
  cleanup
  suite_psql -c "CREATE DATABASE $DB TEMPLATE template0"
  rm -rf "${WORK:?}/$name" && mkdir -p "$WORK/$name" && chmod 777 "$WORK/$name"
  local what=(--schedule="$ISOLATION/isolation_schedule")
  (($#)) && what=("$@")
  "$TOOLS/pg_isolation_regress" --use-existing --host=127.0.0.1 --port="$port" --user=postgres \
    --dbname="$DB" --inputdir="$ISOLATION" --outputdir="$WORK/$name" --bindir="$PG_BIN" \
    "${what[@]}" >"$WORK/$name.log" 2>&1 || true
}

# The specs of a run's log whose output differs from the expected one, and how many ran.
failed_specs() { sed -n 's/^test \([^ ]*\) .*\.\.\. FAILED.*/\1/p' "$WORK/$1.log"; }
ran_specs() { grep -cE '^test [^ ]+ +\.\.\. (ok|FAILED)' "$WORK/$1.log" || true; }

suite_proxy_start splitpoint "$DB"
t0=$SECONDS
run_isolation proxy "$SP_PORT"
scheduled=$(grep -c '^test: ' "$ISOLATION/isolation_schedule")
ran=$(ran_specs proxy)
if ((ran != scheduled)); then
  tail -n 30 "$WORK/proxy.log" >&2
  echo "FAIL: $ran of the $scheduled specs ran through splitpoint" >&2
  exit 1
fi
echo "through splitpoint: $ran specs in $((SECONDS - t0)) s, $(failed_specs proxy | wc -l) differ from PostgreSQL's expected outputs"

unexpected=() listed_same=()
for spec in "${!EXPECTED_DIFFERENCES[@]}"; do
  failed_specs proxy | grep -qxF "$spec" || listed_same+=("$spec")
done
for spec in $(failed_specs proxy); do
  if [[ -n ${EXPECTED_DIFFERENCES[$spec]:-} ]]; then
    echo "differs as expected: $spec (${EXPECTED_DIFFERENCES[$spec]})"
  else
    unexpected+=("$spec")
  fi
done
((${#listed_same[@]} == 0)) || echo "note: listed but as expected this run: ${listed_same[*]}"

failed=0
if ((${#unexpected[@]})); then
  # The same specs directly: a spec PostgreSQL itself does not pass here (a server
  # newer than the sources, a machine too loaded for a spec's timing) is no difference
  # of the proxy's when the two outputs are the same.
  run_isolation direct "$PG0_PORT" "${unexpected[@]}"
  for spec in "${unexpected[@]}"; do
    if cmp -s "$WORK/proxy/results/$spec.out" "$WORK/direct/results/$spec.out"; then
      echo "differs from the expected output directly too, the same way: $spec"
      continue
    fi
    echo "FAIL: $spec differs through splitpoint:" >&2
    diff -u "$ISOLATION/expected/$spec.out" "$WORK/proxy/results/$spec.out" | head -n 40 | cut -c1-200 >&2 || true
    failed=1
  done
fi
if ((failed)); then
  tail -n 20 "$WORK/splitpoint.log" >&2
  exit 1
fi
echo "PASS test_pg_isolation"
