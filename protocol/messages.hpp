// One struct per protocol message, named as in the PostgreSQL documentation, each
// with symmetric encode (append the whole frame to a buffer) and decode (from the
// body that framing.hpp delimited). decode returns std::nullopt on a malformed body.
// https://www.postgresql.org/docs/15/protocol-message-formats.html
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splitpoint::protocol {

inline constexpr std::int32_t kProtocolV3 = 196608;          // 3.0
inline constexpr std::int32_t kSSLRequestCode = 80877103;
inline constexpr std::int32_t kGSSENCRequestCode = 80877104;
inline constexpr std::int32_t kCancelRequestCode = 80877102;

// ---- startup phase (no type byte) ----

struct StartupMessage {
  std::int32_t protocol = kProtocolV3;
  std::vector<std::pair<std::string, std::string>> parameters;  // user, database, ...
  const std::string* find(std::string_view name) const;
  void encode(std::string& out) const;
  // Body = everything after the length field. Only decodes v3 bodies.
  static std::optional<StartupMessage> decode(std::string_view body);
};

struct CancelRequest {
  std::int32_t process_id = 0;
  std::int32_t secret_key = 0;
  void encode(std::string& out) const;
  static std::optional<CancelRequest> decode(std::string_view body);
};

// The int32 code at the start of any startup-phase body (protocol or request code).
std::optional<std::int32_t> startup_code(std::string_view body);
void encode_ssl_request(std::string& out);
void encode_gssenc_request(std::string& out);

// ---- frontend ----

struct Query {  // 'Q'
  std::string_view sql;
  void encode(std::string& out) const;
  static std::optional<Query> decode(std::string_view body);
};

struct Parse {  // 'P'
  std::string_view name;
  std::string_view query;
  std::vector<std::int32_t> param_types;
  void encode(std::string& out) const;
  static std::optional<Parse> decode(std::string_view body);
};

struct Bind {  // 'B'
  std::string_view portal;
  std::string_view statement;
  std::vector<std::int16_t> param_formats;
  std::vector<std::optional<std::string_view>> params;  // nullopt = SQL NULL
  std::vector<std::int16_t> result_formats;
  void encode(std::string& out) const;
  static std::optional<Bind> decode(std::string_view body);
};

struct Describe {  // 'D'
  char kind = 'S';  // 'S' statement, 'P' portal
  std::string_view name;
  void encode(std::string& out) const;
  static std::optional<Describe> decode(std::string_view body);
};

struct Execute {  // 'E'
  std::string_view portal;
  std::int32_t max_rows = 0;
  void encode(std::string& out) const;
  static std::optional<Execute> decode(std::string_view body);
};

struct Close {  // 'C' from a frontend
  char kind = 'S';
  std::string_view name;
  void encode(std::string& out) const;
  static std::optional<Close> decode(std::string_view body);
};

void encode_sync(std::string& out);       // 'S'
void encode_flush(std::string& out);      // 'H'
void encode_terminate(std::string& out);  // 'X'
void encode_copy_done(std::string& out);  // 'c' (both directions)

struct CopyData {  // 'd' (both directions)
  std::string_view data;
  void encode(std::string& out) const;
  static std::optional<CopyData> decode(std::string_view body);
};

struct CopyFail {  // 'f'
  std::string_view message;
  void encode(std::string& out) const;
  static std::optional<CopyFail> decode(std::string_view body);
};

struct PasswordMessage {  // 'p' in reply to cleartext/md5 requests
  std::string_view password;
  void encode(std::string& out) const;
  static std::optional<PasswordMessage> decode(std::string_view body);
};

struct SASLInitialResponse {  // 'p' in reply to AuthenticationSASL
  std::string_view mechanism;
  std::optional<std::string_view> data;  // length -1 = no data
  void encode(std::string& out) const;
  static std::optional<SASLInitialResponse> decode(std::string_view body);
};

struct SASLResponse {  // 'p' in reply to AuthenticationSASLContinue
  std::string_view data;
  void encode(std::string& out) const;
  static std::optional<SASLResponse> decode(std::string_view body);
};

// ---- backend ----

enum class AuthCode : std::int32_t {
  ok = 0,
  cleartext_password = 3,
  md5_password = 5,
  sasl = 10,
  sasl_continue = 11,
  sasl_final = 12,
};

struct Authentication {  // 'R'
  AuthCode code = AuthCode::ok;
  std::string_view md5_salt;                // 4 bytes, md5_password only
  std::vector<std::string_view> mechanisms; // sasl only
  std::string_view data;                    // sasl_continue / sasl_final
  void encode(std::string& out) const;
  static std::optional<Authentication> decode(std::string_view body);
};

struct ParameterStatus {  // 'S' from a backend
  std::string_view name;
  std::string_view value;
  void encode(std::string& out) const;
  static std::optional<ParameterStatus> decode(std::string_view body);
};

struct BackendKeyData {  // 'K'
  std::int32_t process_id = 0;
  std::int32_t secret_key = 0;
  void encode(std::string& out) const;
  static std::optional<BackendKeyData> decode(std::string_view body);
};

struct ReadyForQuery {  // 'Z'
  char status = 'I';  // 'I' idle, 'T' in transaction, 'E' failed transaction
  void encode(std::string& out) const;
  static std::optional<ReadyForQuery> decode(std::string_view body);
};

struct CommandComplete {  // 'C' from a backend
  std::string_view tag;
  void encode(std::string& out) const;
  static std::optional<CommandComplete> decode(std::string_view body);
};

// ErrorResponse ('E') and NoticeResponse ('N') share a body of typed fields.
// https://www.postgresql.org/docs/15/protocol-error-fields.html
struct ErrorFields {
  std::vector<std::pair<char, std::string>> fields;  // ('S', "ERROR"), ('C', "42601"), ...
  std::string_view get(char code) const;
  static ErrorFields make(std::string_view severity, std::string_view sqlstate,
                          std::string_view message);
  void encode(std::string& out, char type) const;  // type 'E' or 'N'
  static std::optional<ErrorFields> decode(std::string_view body);
};

struct FieldDescription {
  std::string_view name;
  std::int32_t table_oid = 0;
  std::int16_t column = 0;
  std::int32_t type_oid = 0;
  std::int16_t type_size = 0;
  std::int32_t type_modifier = 0;
  std::int16_t format = 0;
};

struct RowDescription {  // 'T'
  std::vector<FieldDescription> fields;
  void encode(std::string& out) const;
  static std::optional<RowDescription> decode(std::string_view body);
};

struct DataRow {  // 'D' from a backend
  std::vector<std::optional<std::string_view>> values;  // nullopt = NULL
  void encode(std::string& out) const;
  static std::optional<DataRow> decode(std::string_view body);
};

struct ParameterDescription {  // 't'
  std::vector<std::int32_t> types;
  void encode(std::string& out) const;
  static std::optional<ParameterDescription> decode(std::string_view body);
};

struct NotificationResponse {  // 'A'
  std::int32_t process_id = 0;
  std::string_view channel;
  std::string_view payload;
  void encode(std::string& out) const;
  static std::optional<NotificationResponse> decode(std::string_view body);
};

struct CopyResponse {  // 'G' CopyInResponse, 'H' CopyOutResponse, 'W' CopyBothResponse
  char type = 'G';
  std::int8_t format = 0;
  std::vector<std::int16_t> column_formats;
  void encode(std::string& out) const;
  static std::optional<CopyResponse> decode(char type, std::string_view body);
};

// Bodiless backend messages.
void encode_parse_complete(std::string& out);   // '1'
void encode_bind_complete(std::string& out);    // '2'
void encode_close_complete(std::string& out);   // '3'
void encode_no_data(std::string& out);          // 'n'
void encode_empty_query(std::string& out);      // 'I'
void encode_portal_suspended(std::string& out); // 's'

}  // namespace splitpoint::protocol
