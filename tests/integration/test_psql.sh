#!/usr/bin/env bash
# psql through splitpoint (transaction pooling, client auth scram-sha-256 as user app)
# against the shared instance pg0: plain queries, a multi-statement simple query, an
# error followed by a good statement in one session, \d and \dt, \copy from/to a file
# (round trip), COPY FROM STDIN fed by psql, RAISE NOTICE, LISTEN/NOTIFY between two
# sessions, and BEGIN/ROLLBACK leaving nothing behind.
# test-timeout: 180
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"

WORK=${TEST_WORKDIR:-$(test_dir test_psql)}
mkdir -p "$WORK"
SP_PORT=$(free_port)
METRICS_PORT=$(free_port)
CONFIG=$WORK/splitpoint.yaml
cat >"$CONFIG" <<EOF
listen: 127.0.0.1:$SP_PORT
metrics_listen: 127.0.0.1:$METRICS_PORT
pool_mode: transaction
auth: scram-sha-256
users:
  - { name: app, password: secret }
shards:
  - { name: s0, host: 127.0.0.1, port: $PG0_PORT, database: app, pool_size: 4 }
EOF
sp_start "$CONFIG" "$WORK/splitpoint.log"
echo "splitpoint on $SP_PORT (pid $SP_PID), shard pg0 on $PG0_PORT"

export PGPASSWORD=secret PGCONNECT_TIMEOUT=10
PROXY="host=127.0.0.1 port=$SP_PORT user=app dbname=app"
DIRECT="host=127.0.0.1 port=$PG0_PORT user=app dbname=app"

fail() {
  echo "FAIL: $*" >&2
  echo "----- splitpoint log tail" >&2
  tail -n 40 "$WORK/splitpoint.log" >&2 || true
  exit 1
}
# Checks that FILE contains the fixed string NEEDLE.
must_contain() { # WHAT FILE NEEDLE
  grep -qF -- "$3" "$2" || { echo "----- $2:" >&2; cat "$2" >&2; fail "$1: expected '$3'"; }
}
must_not_contain() { # WHAT FILE NEEDLE
  if grep -qF -- "$3" "$2"; then echo "----- $2:" >&2; cat "$2" >&2; fail "$1: unexpected '$3'"; fi
}
# psql through the proxy; extra args follow. Unaligned, tuples only, no psqlrc.
pq() { psql -X -q -At -v ON_ERROR_STOP=1 "$PROXY" "$@"; }
# Same, but psql also prints command tags (COPY 5, INSERT 0 1, ...).
pqt() { psql -X -At -v ON_ERROR_STOP=1 "$PROXY" "$@"; }
# Same, straight to PostgreSQL (to check what the proxy really did).
direct() { psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT" "$@"; }
eq() { # WHAT GOT WANT
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
  echo "ok   $1"
}

cleanup_tables() {
  direct -q -c "DROP TABLE IF EXISTS psql_items, psql_copy, psql_copy2, psql_stdin, psql_tx" >/dev/null 2>&1 || true
}
cleanup_tables
on_exit cleanup_tables

# ---------------------------------------------------------------- plain queries
eq "select" "$(pq -c "SELECT 1 + 1")" "2"
eq "current_user" "$(pq -c "SELECT current_user || '@' || current_database()")" "app@app"
eq "server_version param" "$(pq -c "SHOW server_version" | cut -d. -f1)" "15"
eq "generate_series" "$(pq -c "SELECT sum(g) FROM generate_series(1, 1000) g")" "500500"
eq "unicode and NULL" "$(pq -c "SELECT 'héllo ✓', NULL::text IS NULL")" "héllo ✓|t"

# ---------------------------------------------------------------- multi-statement simple query
# psql -c sends the whole string as one Query message; psql 15 prints every result.
out=$(pq -c "SELECT 'first'; SELECT 'second'; SELECT 'third'")
eq "multi-statement simple query" "$out" $'first\nsecond\nthird'
out=$(pq -c "CREATE TABLE psql_items (id int PRIMARY KEY, name text); INSERT INTO psql_items VALUES (1, 'a'), (2, 'b'); SELECT count(*) FROM psql_items")
eq "multi-statement DDL+DML+SELECT" "$out" "2"

# ---------------------------------------------------------------- error, then a good statement
cat >"$WORK/errors.sql" <<'EOF'
SELECT 1/0;
SELECT 'after division error';
SELEC oops;
SELECT 'after syntax error';
BEGIN;
SELECT 1/0;
SELECT 'inside failed transaction';
ROLLBACK;
SELECT 'after rollback';
EOF
rc=0
psql -X -q -At -v ON_ERROR_STOP=0 "$PROXY" -f "$WORK/errors.sql" >"$WORK/errors.out" 2>"$WORK/errors.err" || rc=$?
# psql exits 0 with ON_ERROR_STOP=0 unless the connection broke.
eq "psql exit status with errors" "$rc" "0"
must_contain "division error reported" "$WORK/errors.err" "ERROR:  division by zero"
must_contain "syntax error reported" "$WORK/errors.err" 'ERROR:  syntax error at or near "SELEC"'
must_contain "aborted transaction reported" "$WORK/errors.err" "current transaction is aborted"
eq "good statements after errors" "$(cat "$WORK/errors.out")" \
  $'after division error\nafter syntax error\nafter rollback'
must_not_contain "no lost connection" "$WORK/errors.err" "connection to server"

# ---------------------------------------------------------------- meta-commands
pq -c "CREATE INDEX psql_items_name ON psql_items (name)" >/dev/null
psql -X -A -v ON_ERROR_STOP=1 "$PROXY" -c '\d psql_items' >"$WORK/d.out" 2>&1 || fail "\\d psql_items failed: $(cat "$WORK/d.out")"
must_contain "\\d shows a column" "$WORK/d.out" "name|text"
must_contain "\\d shows the primary key" "$WORK/d.out" "psql_items_pkey"
must_contain "\\d shows the index" "$WORK/d.out" "psql_items_name"
echo "ok   \\d psql_items"
pq -c '\dt psql_*' >"$WORK/dt.out" 2>&1 || fail "\\dt failed: $(cat "$WORK/dt.out")"
must_contain "\\dt lists the table" "$WORK/dt.out" "public|psql_items|table|app"
echo "ok   \\dt"
# \d+ and \l run more catalog queries; they must simply work.
pq -c '\d+ psql_items' >/dev/null || fail "\\d+ failed"
pq -c '\l' >"$WORK/l.out" || fail "\\l failed"
must_contain "\\l lists database app" "$WORK/l.out" "app|app|UTF8"
echo "ok   \\d+ and \\l"

# ---------------------------------------------------------------- \copy round trip
pq -c "CREATE TABLE psql_copy (id int, t text, n numeric, d date, b bytea, j jsonb)" >/dev/null
python3 - "$WORK/copy_in.csv" <<'EOF'
import sys
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i in range(1, 2001):
        t = "" if i % 97 == 0 else f'row {i}, "quoted" ✓ tab\there'
        n = "" if i % 13 == 0 else f"{i * 1.25}"
        f.write(f'{i},"{t.replace(chr(34), chr(34) * 2)}",{n},2024-01-{1 + i % 28:02d},\\x{i:08x},"{{""k"": {i}}}"\n')
EOF
out=$(pqt -c "\\copy psql_copy FROM '$WORK/copy_in.csv' WITH (FORMAT csv)")
eq "\\copy from: tag" "$out" "COPY 2000"
eq "\\copy from: rows on PostgreSQL" "$(direct -c "SELECT count(*), sum(id), count(n) FROM psql_copy")" "2000|2001000|1847"
pq -c "\\copy (SELECT * FROM psql_copy ORDER BY id) TO '$WORK/copy_out.csv' WITH (FORMAT csv)" >/dev/null
# A CSV round trip does not keep the file byte for byte (quoting, numeric scale), so
# compare a canonical form: load the exported file into a twin table and diff the text.
pq -c "CREATE TABLE psql_copy2 (LIKE psql_copy)" >/dev/null
pq -c "\\copy psql_copy2 FROM '$WORK/copy_out.csv' WITH (FORMAT csv)" >/dev/null
diff_rows=$(direct -c "SELECT count(*) FROM ((TABLE psql_copy EXCEPT ALL TABLE psql_copy2) UNION ALL (TABLE psql_copy2 EXCEPT ALL TABLE psql_copy)) x")
eq "\\copy to + from round trip equal" "$diff_rows" "0"
# And the text-format export through the proxy equals the one taken directly.
pq -c "\\copy (SELECT * FROM psql_copy ORDER BY id) TO '$WORK/via_proxy.txt'" >/dev/null
direct -c "\\copy (SELECT * FROM psql_copy ORDER BY id) TO '$WORK/direct.txt'" >/dev/null
cmp -s "$WORK/via_proxy.txt" "$WORK/direct.txt" || fail "\\copy to: proxy output differs from direct output"
eq "\\copy to: bytes equal to direct" "$(wc -l <"$WORK/via_proxy.txt")" "2000"

# ---------------------------------------------------------------- COPY FROM STDIN inside a psql script
{
  echo "CREATE TABLE psql_stdin (id int, v text);"
  echo "COPY psql_stdin FROM STDIN;"
  for i in $(seq 1 500); do printf '%d\tvalue %d\n' "$i" "$i"; done
  printf '\\.\n'
  echo "SELECT count(*), sum(id) FROM psql_stdin;"
  echo "COPY psql_stdin (id, v) FROM STDIN WITH (FORMAT csv);"
  echo '501,"csv, with comma"'
  echo '502,'
  printf '\\.\n'
  echo "SELECT count(*), count(v) FROM psql_stdin;"
} >"$WORK/stdin.sql"
out=$(psql -X -At -v ON_ERROR_STOP=1 "$PROXY" <"$WORK/stdin.sql" 2>&1) || fail "COPY FROM STDIN script failed: $out"
eq "COPY FROM STDIN via psql" "$out" $'CREATE TABLE\nCOPY 500\n500|125250\nCOPY 2\n502|501'
eq "COPY FROM STDIN: csv value" "$(direct -c "SELECT v FROM psql_stdin WHERE id = 501")" "csv, with comma"
# A COPY with bad data fails cleanly and the session goes on.
out=$(printf 'COPY psql_stdin FROM STDIN;\n1\tok\nnot-a-number\tbad\n\\.\nSELECT count(*) FROM psql_stdin;\n' |
  psql -X -At -v ON_ERROR_STOP=0 "$PROXY" 2>&1) || fail "bad COPY script: $out"
grep -qF 'invalid input syntax for type integer: "not-a-number"' <<<"$out" || fail "bad COPY: error not shown: $out"
eq "bad COPY rolled back, session goes on" "$(tail -n 1 <<<"$out")" "502"

# ---------------------------------------------------------------- RAISE NOTICE
out=$(pq -c "DO \$\$BEGIN RAISE NOTICE 'hello from plpgsql %', 42; END\$\$" 2>&1)
grep -qF "NOTICE:  hello from plpgsql 42" <<<"$out" || fail "RAISE NOTICE not shown: $out"
echo "ok   RAISE NOTICE shown"
out=$(pq -c "SET client_min_messages = warning; DO \$\$BEGIN RAISE NOTICE 'hidden'; RAISE WARNING 'shown'; END\$\$" 2>&1)
grep -qF "WARNING:  shown" <<<"$out" || fail "RAISE WARNING not shown: $out"
grep -qF "hidden" <<<"$out" && fail "notice shown despite client_min_messages=warning: $out"
echo "ok   client_min_messages respected"

# ---------------------------------------------------------------- LISTEN / NOTIFY between sessions
# Session A listens and then waits (fed through a FIFO) until B has notified; its next
# statement lets psql print the notification.
fifo=$WORK/listen.fifo
mkfifo "$fifo"
psql -X -At -v ON_ERROR_STOP=1 "$PROXY" <"$fifo" >"$WORK/listen.out" 2>&1 &
listener=$!
exec 7>"$fifo"
echo "LISTEN psql_chan; SELECT 'listening';" >&7
deadline=$((SECONDS + 30))
until grep -qx "listening" "$WORK/listen.out"; do
  ((SECONDS < deadline)) || fail "listener did not start: $(cat "$WORK/listen.out")"
  sleep 0.1
done
# The notifier goes through the proxy too, on another backend (or the same one).
pq -c "NOTIFY psql_chan, 'payload one'; SELECT pg_notify('psql_chan', 'payload two')" >/dev/null ||
  fail "NOTIFY through the proxy failed"
echo "SELECT 'after notify';" >&7
deadline=$((SECONDS + 30))
until grep -q "after notify" "$WORK/listen.out" && grep -qF 'payload two' "$WORK/listen.out"; do
  if ((SECONDS >= deadline)); then
    exec 7>&-
    fail "notification not delivered: $(cat "$WORK/listen.out")"
  fi
  # psql only reports notifications after it runs something: nudge it.
  echo "SELECT 'poll';" >&7
  sleep 0.3
done
exec 7>&-
wait "$listener" || fail "listener psql failed: $(cat "$WORK/listen.out")"
must_contain "notification 1" "$WORK/listen.out" 'Asynchronous notification "psql_chan" with payload "payload one" received from server process with PID'
must_contain "notification 2" "$WORK/listen.out" 'Asynchronous notification "psql_chan" with payload "payload two" received from server process with PID'
echo "ok   LISTEN/NOTIFY delivered"

# ---------------------------------------------------------------- BEGIN / ROLLBACK
pq -c "CREATE TABLE psql_tx (id int)" >/dev/null
out=$(pq <<'EOF'
BEGIN;
INSERT INTO psql_tx SELECT g FROM generate_series(1, 100) g;
SELECT count(*) FROM psql_tx;
ROLLBACK;
SELECT count(*) FROM psql_tx;
EOF
)
eq "rows visible inside the transaction, gone after ROLLBACK" "$out" $'100\n0'
eq "nothing committed on PostgreSQL" "$(direct -c "SELECT count(*) FROM psql_tx")" "0"
out=$(pq <<'EOF'
BEGIN;
INSERT INTO psql_tx VALUES (1);
SAVEPOINT s;
INSERT INTO psql_tx VALUES (2);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT array_agg(id) FROM psql_tx;
EOF
)
eq "savepoint rollback, commit" "$out" "{1}"
eq "no idle-in-transaction backend left" \
  "$(direct -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND state LIKE 'idle in transaction%'")" "0"

# ---------------------------------------------------------------- wrong password is refused
if PGPASSWORD=wrong psql -X -At "$PROXY" -c "SELECT 1" >"$WORK/wrongpw.out" 2>&1; then
  fail "login with a wrong password succeeded"
fi
must_contain "wrong password" "$WORK/wrongpw.out" 'password authentication failed for user "app"'
echo "ok   wrong password refused"

sp_stop "$SP_PID" || fail "splitpoint did not stop on SIGTERM"
eq "splitpoint exit status" "$SP_EXIT_STATUS" "0"
echo "test_psql: all passed"
