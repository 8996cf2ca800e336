#!/usr/bin/env bash
# Our hash partitioning (routing/hash.cpp) against PostgreSQL's own, row by row.
# Needs PG0_PORT (a PostgreSQL 15 on 127.0.0.1, user postgres, password postgres) and BUILD_DIR.
set -euo pipefail
: "${PG0_PORT:?PG0_PORT is not set}"
: "${BUILD_DIR:?BUILD_DIR is not set}"
exec "$BUILD_DIR/hash_equivalence" "host=127.0.0.1 port=$PG0_PORT user=postgres password=postgres dbname=postgres"
