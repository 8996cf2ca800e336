// The proxy's own tables on the first shard of the config (SPEC §14): two-phase
// commit's decision records and the sessions of cross-shard deadlock detection. They
// live in schema `splitpoint`, as the catalog's and the global indexes' tables do, so
// that an application's schemas (psql's `\dt`, `pg_dump -n public`) never show them.
// Named with their schema, so that a session's search_path (such as the empty one
// pg_dump's set_config leaves) does not lose them.
//
// Proxies before this one made them in schema public as `splitpoint_2pc` and
// `splitpoint_spanning_sessions`; two_phase::kMoveOldTable carries the first's records
// over (recovery runs it before it decides anything), deadlocks drop the second
// (nothing in it outlives a minute).
#pragma once

namespace splitpoint::server::own_tables {

inline constexpr const char* kDecisions = "splitpoint.two_phase_decisions";
inline constexpr const char* kSpanningSessions = "splitpoint.spanning_sessions";

// Schema splitpoint, made if it is missing. (Looked up first: CREATE SCHEMA IF NOT
// EXISTS wants CREATE on the database even when the schema exists.) A statement of its
// own, to be followed by the table's CREATE ... IF NOT EXISTS.
inline constexpr const char* kEnsureSchema =
    "DO $splitpoint$BEGIN IF pg_catalog.to_regnamespace('splitpoint') IS NULL THEN "
    "CREATE SCHEMA IF NOT EXISTS splitpoint; END IF; END$splitpoint$;";

}  // namespace splitpoint::server::own_tables
