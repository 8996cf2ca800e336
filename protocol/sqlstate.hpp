// SQLSTATE codes splitpoint emits. PostgreSQL's own codes are used where it has one.
// https://www.postgresql.org/docs/15/errcodes-appendix.html
#pragma once

namespace splitpoint::sqlstate {

inline constexpr const char* protocol_violation = "08P01";
inline constexpr const char* connection_failure = "08006";
inline constexpr const char* cannot_connect = "08001";
inline constexpr const char* invalid_password = "28P01";
inline constexpr const char* invalid_authorization = "28000";
inline constexpr const char* too_many_connections = "53300";
inline constexpr const char* admin_shutdown = "57P01";
inline constexpr const char* idle_session_timeout = "57P05";
inline constexpr const char* query_canceled = "57014";
inline constexpr const char* deadlock_detected = "40P01";
inline constexpr const char* feature_not_supported = "0A000";
inline constexpr const char* invalid_parameter_value = "22023";
inline constexpr const char* insufficient_privilege = "42501";
inline constexpr const char* syntax_error = "42601";
inline constexpr const char* undefined_table = "42P01";
inline constexpr const char* invalid_column_reference = "42P10";
inline constexpr const char* internal_error = "XX000";

inline constexpr const char* no_shard_key = "SPR01";
inline constexpr const char* no_partition = "SPR02";
inline constexpr const char* cross_shard_write = "SPT01";
inline constexpr const char* transaction_resolution_unknown = "08007";
inline constexpr const char* scatter_incomplete = "SPS01";
inline constexpr const char* scatter_buffer_limit = "SPS02";
inline constexpr const char* cannot_merge = "SPC01";
inline constexpr const char* partial_result = "01SP1";
// SPEC §10: the shard has no primary to write to (none found within moves.max_hold
// after a failover, or two hosts out of recovery).
inline constexpr const char* no_primary = "SPH01";

}  // namespace splitpoint::sqlstate
