#!/usr/bin/env bash
# The scatter-gather merge (routing/merge/merge_plan + routing/merge/merger) against
# PostgreSQL itself: rows split over three tables and merged must equal the same query
# over one table holding them all (see tests/integration/merge_differential.cpp).
# Needs PG0_PORT (a PostgreSQL 15 on 127.0.0.1, user postgres) and BUILD_DIR.
set -euo pipefail
: "${PG0_PORT:?PG0_PORT is not set}"
: "${BUILD_DIR:?BUILD_DIR is not set}"
exec "$BUILD_DIR/merge_differential" "host=127.0.0.1 port=$PG0_PORT user=postgres password=postgres dbname=postgres"
