#!/usr/bin/env bash
# Proves the harness: both shared PostgreSQL instances answer over TCP for every test
# user with its auth method (app: scram, md5user: md5, trustuser: trust, postgres).
set -euo pipefail
# shellcheck source=tests/lib/pg.sh
source "$SP_ROOT/tests/lib/pg.sh"

q() { # PORT CONNINFO-REST SQL
  "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$1 $2" -c "$3"
}

for port in "$PG0_PORT" "$PG1_PORT"; do
  [[ $(q "$port" "user=app password=secret dbname=app" "SELECT 1") == 1 ]]
  [[ $(q "$port" "user=md5user password=md5pw dbname=app" "SELECT current_user") == md5user ]]
  [[ $(q "$port" "user=trustuser dbname=app" "SELECT current_user") == trustuser ]]
  [[ $(q "$port" "user=postgres password=postgres dbname=postgres" "SELECT 1") == 1 ]]
  # Methods are as documented: a wrong password fails for app and md5user.
  if q "$port" "user=app password=wrong dbname=app" "SELECT 1" 2>/dev/null; then
    echo "app logged in with a wrong password on $port" >&2
    exit 1
  fi
  if q "$port" "user=md5user password=wrong dbname=app" "SELECT 1" 2>/dev/null; then
    echo "md5user logged in with a wrong password on $port" >&2
    exit 1
  fi
  echo "port $port: ok"
done

# app may create tables in both databases; the unix socket helper works.
psql_as "$PG0_DIR" "$PG0_PORT" app app -c "CREATE TABLE smoke_sh (x int); DROP TABLE smoke_sh"
psql_as "$PG1_DIR" "$PG1_PORT" app postgres -c "CREATE TABLE smoke_sh (x int); DROP TABLE smoke_sh"
[[ $(psql_as "$PG0_DIR" "$PG0_PORT" postgres postgres -c "SHOW max_prepared_transactions") == 50 ]]
echo "smoke ok"
