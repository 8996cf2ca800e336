// Encoders and decoders for the structs in messages.hpp.
// https://www.postgresql.org/docs/15/protocol-message-formats.html
//
// Decoding: every body is read through one bounded Reader and accepted only if it
// parses completely (no bytes left over). Values are checked only where PostgreSQL
// itself treats a bad value as a protocol violation or where the value decides how
// the rest is laid out (Describe/Close kind, Bind format count, Authentication
// code); semantic values such as format codes and OIDs are left to the caller,
// as PostgreSQL reports those as ordinary errors rather than breaking the session.
//
// Encoding: a struct that cannot be put on the wire as given (a count above Int16,
// an empty name that would read as a terminator) is a caller bug and throws,
// because a silently wrong frame would desynchronise the peer (`out` may then hold
// a partial frame). Strings written as C strings must not contain NUL; views
// produced by decode never do.
#include "protocol/messages.hpp"

#include <limits>
#include <stdexcept>

#include "protocol/buffer.hpp"

namespace splitpoint::protocol {
namespace {

// Int16 counts are unsigned on the wire, as PostgreSQL reads them (up to 65535
// parameters in a Bind).
std::int16_t count16(std::size_t n) {
  if (n > std::size_t(std::numeric_limits<std::uint16_t>::max()))
    throw std::length_error("protocol: too many items for an Int16 count");
  return static_cast<std::int16_t>(static_cast<std::uint16_t>(n));
}

std::int32_t length32(std::size_t n) {
  if (n > std::size_t(std::numeric_limits<std::int32_t>::max()))
    throw std::length_error("protocol: value too long for an Int32 length");
  return static_cast<std::int32_t>(n);
}

// An unsigned Int16 count, as PostgreSQL reads it (libpq sends up to 65535
// parameters). A count whose smallest encoding cannot fit in what is left fails at
// once, so a tiny body cannot make us reserve room for 65535 entries.
std::size_t read_count(Reader& r, std::size_t min_item_size) {
  auto n = static_cast<std::uint16_t>(r.i16());
  if (r.remaining() < std::size_t(n) * min_item_size) {
    r.fail();
    return 0;
  }
  return std::size_t(n);
}

// Int32 length then that many bytes; -1 means NULL, any other negative is malformed.
std::optional<std::string_view> read_nullable(Reader& r) {
  std::int32_t len = r.i32();
  if (len == -1) return std::nullopt;
  if (len < 0) {
    r.fail();
    return std::nullopt;
  }
  return r.bytes(std::size_t(len));
}

void write_nullable(Writer& w, const std::optional<std::string_view>& v) {
  if (!v) {
    w.i32(-1);
  } else {
    w.i32(length32(v->size())).bytes(*v);
  }
}

void write_name(Writer& w, std::string_view name, const char* what) {
  if (name.empty()) throw std::invalid_argument(what);
  w.cstr(name);
}

template <class T>
std::optional<T> complete(const Reader& r, T msg) {
  if (!r.at_end()) return std::nullopt;
  return msg;
}

void bodiless(std::string& out, char type) { Writer(out, type).finish(); }

// Describe and Close share a layout: kind byte ('S' or 'P') then a name.
template <class T>
std::optional<T> decode_kind_name(std::string_view body) {
  Reader r(body);
  T m;
  m.kind = static_cast<char>(r.u8());
  m.name = r.cstr();
  if (m.kind != 'S' && m.kind != 'P') return std::nullopt;
  return complete(r, m);
}

}  // namespace

// ---- startup phase ----

const std::string* StartupMessage::find(std::string_view name) const {
  // PostgreSQL lets a repeated parameter override an earlier one, so the last wins.
  const std::string* found = nullptr;
  for (const auto& [k, v] : parameters)
    if (k == name) found = &v;
  return found;
}

void StartupMessage::encode(std::string& out) const {
  Writer w(out, 0);
  w.i32(protocol);
  for (const auto& [name, value] : parameters) {
    write_name(w, name, "protocol: empty startup parameter name");
    w.cstr(value);
  }
  w.u8(0);
  w.finish();
}

std::optional<StartupMessage> StartupMessage::decode(std::string_view body) {
  Reader r(body);
  StartupMessage m;
  m.protocol = r.i32();
  if (!r.ok() || m.protocol != kProtocolV3) return std::nullopt;
  for (;;) {
    std::string_view name = r.cstr();
    if (!r.ok()) return std::nullopt;
    if (name.empty()) break;  // the single NUL that ends the list
    std::string_view value = r.cstr();
    m.parameters.emplace_back(name, value);
  }
  return complete(r, std::move(m));
}

void CancelRequest::encode(std::string& out) const {
  Writer(out, 0).i32(kCancelRequestCode).i32(process_id).i32(secret_key).finish();
}

std::optional<CancelRequest> CancelRequest::decode(std::string_view body) {
  Reader r(body);
  if (r.i32() != kCancelRequestCode) return std::nullopt;
  CancelRequest m;
  m.process_id = r.i32();
  m.secret_key = r.i32();
  return complete(r, m);
}

std::optional<std::int32_t> startup_code(std::string_view body) {
  Reader r(body);
  std::int32_t code = r.i32();
  if (!r.ok()) return std::nullopt;
  return code;
}

void encode_ssl_request(std::string& out) { Writer(out, 0).i32(kSSLRequestCode).finish(); }
void encode_gssenc_request(std::string& out) { Writer(out, 0).i32(kGSSENCRequestCode).finish(); }

// ---- frontend ----

void Query::encode(std::string& out) const { Writer(out, 'Q').cstr(sql).finish(); }

std::optional<Query> Query::decode(std::string_view body) {
  Reader r(body);
  Query m;
  m.sql = r.cstr();
  return complete(r, m);
}

void Parse::encode(std::string& out) const {
  Writer w(out, 'P');
  w.cstr(name).cstr(query).i16(count16(param_types.size()));
  for (auto oid : param_types) w.i32(oid);
  w.finish();
}

std::optional<Parse> Parse::decode(std::string_view body) {
  Reader r(body);
  Parse m;
  m.name = r.cstr();
  m.query = r.cstr();
  std::size_t n = read_count(r, 4);
  m.param_types.reserve(n);
  for (std::size_t i = 0; i < n; ++i) m.param_types.push_back(r.i32());
  return complete(r, std::move(m));
}

void Bind::encode(std::string& out) const {
  Writer w(out, 'B');
  w.cstr(portal).cstr(statement);
  w.i16(count16(param_formats.size()));
  for (auto f : param_formats) w.i16(f);
  w.i16(count16(params.size()));
  for (const auto& p : params) write_nullable(w, p);
  w.i16(count16(result_formats.size()));
  for (auto f : result_formats) w.i16(f);
  w.finish();
}

std::optional<Bind> Bind::decode(std::string_view body) {
  Reader r(body);
  Bind m;
  m.portal = r.cstr();
  m.statement = r.cstr();
  std::size_t nf = read_count(r, 2);
  m.param_formats.reserve(nf);
  for (std::size_t i = 0; i < nf; ++i) m.param_formats.push_back(r.i16());
  std::size_t np = read_count(r, 4);
  m.params.reserve(np);
  for (std::size_t i = 0; i < np; ++i) m.params.push_back(read_nullable(r));
  std::size_t nr = read_count(r, 2);
  m.result_formats.reserve(nr);
  for (std::size_t i = 0; i < nr; ++i) m.result_formats.push_back(r.i16());
  // Zero formats (all text), one (applies to all), or one per parameter; PostgreSQL
  // rejects anything else as a protocol violation.
  if (nf > 1 && nf != np) return std::nullopt;
  return complete(r, std::move(m));
}

void Describe::encode(std::string& out) const {
  Writer(out, 'D').u8(static_cast<std::uint8_t>(kind)).cstr(name).finish();
}

std::optional<Describe> Describe::decode(std::string_view body) {
  return decode_kind_name<Describe>(body);
}

void Execute::encode(std::string& out) const {
  Writer(out, 'E').cstr(portal).i32(max_rows).finish();
}

std::optional<Execute> Execute::decode(std::string_view body) {
  Reader r(body);
  Execute m;
  m.portal = r.cstr();
  m.max_rows = r.i32();  // zero or negative means no limit
  return complete(r, m);
}

void Close::encode(std::string& out) const {
  Writer(out, 'C').u8(static_cast<std::uint8_t>(kind)).cstr(name).finish();
}

std::optional<Close> Close::decode(std::string_view body) { return decode_kind_name<Close>(body); }

void encode_sync(std::string& out) { bodiless(out, 'S'); }
void encode_flush(std::string& out) { bodiless(out, 'H'); }
void encode_terminate(std::string& out) { bodiless(out, 'X'); }
void encode_copy_done(std::string& out) { bodiless(out, 'c'); }

void CopyData::encode(std::string& out) const { Writer(out, 'd').bytes(data).finish(); }

std::optional<CopyData> CopyData::decode(std::string_view body) {
  // Any bytes at all, including none: COPY data has no structure at this level.
  return CopyData{body};
}

void CopyFail::encode(std::string& out) const { Writer(out, 'f').cstr(message).finish(); }

std::optional<CopyFail> CopyFail::decode(std::string_view body) {
  Reader r(body);
  CopyFail m;
  m.message = r.cstr();
  return complete(r, m);
}

void PasswordMessage::encode(std::string& out) const {
  Writer(out, 'p').cstr(password).finish();
}

std::optional<PasswordMessage> PasswordMessage::decode(std::string_view body) {
  Reader r(body);
  PasswordMessage m;
  m.password = r.cstr();
  return complete(r, m);
}

void SASLInitialResponse::encode(std::string& out) const {
  Writer w(out, 'p');
  w.cstr(mechanism);
  write_nullable(w, data);
  w.finish();
}

std::optional<SASLInitialResponse> SASLInitialResponse::decode(std::string_view body) {
  Reader r(body);
  SASLInitialResponse m;
  m.mechanism = r.cstr();
  m.data = read_nullable(r);
  return complete(r, m);
}

void SASLResponse::encode(std::string& out) const { Writer(out, 'p').bytes(data).finish(); }

std::optional<SASLResponse> SASLResponse::decode(std::string_view body) {
  return SASLResponse{body};
}

// ---- backend ----

void Authentication::encode(std::string& out) const {
  Writer w(out, 'R');
  w.i32(static_cast<std::int32_t>(code));
  switch (code) {
    case AuthCode::md5_password:
      if (md5_salt.size() != 4) throw std::invalid_argument("protocol: md5 salt must be 4 bytes");
      w.bytes(md5_salt);
      break;
    case AuthCode::sasl:
      for (auto mech : mechanisms) write_name(w, mech, "protocol: empty SASL mechanism name");
      w.u8(0);
      break;
    case AuthCode::sasl_continue:
    case AuthCode::sasl_final:
      w.bytes(data);
      break;
    default:
      break;
  }
  w.finish();
}

std::optional<Authentication> Authentication::decode(std::string_view body) {
  Reader r(body);
  Authentication m;
  std::int32_t code = r.i32();
  switch (code) {
    case std::int32_t(AuthCode::ok):
    case std::int32_t(AuthCode::cleartext_password):
      break;
    case std::int32_t(AuthCode::md5_password):
      m.md5_salt = r.bytes(4);
      break;
    case std::int32_t(AuthCode::sasl):
      for (;;) {  // mechanism names, then an empty one as terminator
        std::string_view mech = r.cstr();
        if (!r.ok() || mech.empty()) break;
        m.mechanisms.push_back(mech);
      }
      break;
    case std::int32_t(AuthCode::sasl_continue):
    case std::int32_t(AuthCode::sasl_final):
      m.data = r.rest();
      break;
    default:
      return std::nullopt;  // methods the proxy does not speak (GSSAPI, SSPI, ...)
  }
  m.code = static_cast<AuthCode>(code);
  return complete(r, std::move(m));
}

void ParameterStatus::encode(std::string& out) const {
  Writer(out, 'S').cstr(name).cstr(value).finish();
}

std::optional<ParameterStatus> ParameterStatus::decode(std::string_view body) {
  Reader r(body);
  ParameterStatus m;
  m.name = r.cstr();
  m.value = r.cstr();
  return complete(r, m);
}

void BackendKeyData::encode(std::string& out) const {
  Writer(out, 'K').i32(process_id).i32(secret_key).finish();
}

std::optional<BackendKeyData> BackendKeyData::decode(std::string_view body) {
  Reader r(body);
  BackendKeyData m;
  m.process_id = r.i32();
  m.secret_key = r.i32();
  return complete(r, m);
}

void ReadyForQuery::encode(std::string& out) const {
  Writer(out, 'Z').u8(static_cast<std::uint8_t>(status)).finish();
}

std::optional<ReadyForQuery> ReadyForQuery::decode(std::string_view body) {
  Reader r(body);
  ReadyForQuery m;
  m.status = static_cast<char>(r.u8());
  // Pooling decisions rest on this byte alone, so an unknown status is not guessed at.
  if (m.status != 'I' && m.status != 'T' && m.status != 'E') return std::nullopt;
  return complete(r, m);
}

void CommandComplete::encode(std::string& out) const { Writer(out, 'C').cstr(tag).finish(); }

std::optional<CommandComplete> CommandComplete::decode(std::string_view body) {
  Reader r(body);
  CommandComplete m;
  m.tag = r.cstr();
  return complete(r, m);
}

std::string_view ErrorFields::get(char code) const {
  for (const auto& [c, v] : fields)
    if (c == code) return v;
  return {};
}

ErrorFields ErrorFields::make(std::string_view severity, std::string_view sqlstate,
                              std::string_view message) {
  // 'S' may be localized; 'V' is the untranslated severity clients match on.
  ErrorFields e;
  e.fields = {{'S', std::string(severity)},
              {'V', std::string(severity)},
              {'C', std::string(sqlstate)},
              {'M', std::string(message)}};
  return e;
}

void ErrorFields::encode(std::string& out, char type) const {
  if (fields.empty()) throw std::invalid_argument("protocol: an error needs at least one field");
  Writer w(out, type);
  for (const auto& [code, value] : fields) {
    if (code == 0) throw std::invalid_argument("protocol: error field code 0 is the terminator");
    w.u8(static_cast<std::uint8_t>(code)).cstr(value);
  }
  w.u8(0);
  w.finish();
}

std::optional<ErrorFields> ErrorFields::decode(std::string_view body) {
  Reader r(body);
  ErrorFields e;
  for (;;) {
    auto code = static_cast<char>(r.u8());
    if (!r.ok() || code == 0) break;
    std::string_view value = r.cstr();
    e.fields.emplace_back(code, std::string(value));
  }
  // The documented body is "one or more identified fields" plus the terminator.
  if (e.fields.empty()) return std::nullopt;
  return complete(r, std::move(e));
}

void RowDescription::encode(std::string& out) const {
  Writer w(out, 'T');
  w.i16(count16(fields.size()));
  for (const auto& f : fields) {
    w.cstr(f.name).i32(f.table_oid).i16(f.column).i32(f.type_oid);
    w.i16(f.type_size).i32(f.type_modifier).i16(f.format);
  }
  w.finish();
}

std::optional<RowDescription> RowDescription::decode(std::string_view body) {
  Reader r(body);
  RowDescription m;
  std::size_t n = read_count(r, 1 + 18);  // NUL of an empty name + fixed fields
  m.fields.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    FieldDescription f;
    f.name = r.cstr();
    f.table_oid = r.i32();
    f.column = r.i16();
    f.type_oid = r.i32();
    f.type_size = r.i16();
    f.type_modifier = r.i32();
    f.format = r.i16();
    m.fields.push_back(f);
  }
  return complete(r, std::move(m));
}

void DataRow::encode(std::string& out) const {
  Writer w(out, 'D');
  w.i16(count16(values.size()));
  for (const auto& v : values) write_nullable(w, v);
  w.finish();
}

std::optional<DataRow> DataRow::decode(std::string_view body) {
  Reader r(body);
  DataRow m;
  std::size_t n = read_count(r, 4);
  m.values.reserve(n);
  for (std::size_t i = 0; i < n; ++i) m.values.push_back(read_nullable(r));
  return complete(r, std::move(m));
}

void ParameterDescription::encode(std::string& out) const {
  Writer w(out, 't');
  w.i16(count16(types.size()));
  for (auto oid : types) w.i32(oid);
  w.finish();
}

std::optional<ParameterDescription> ParameterDescription::decode(std::string_view body) {
  Reader r(body);
  ParameterDescription m;
  std::size_t n = read_count(r, 4);
  m.types.reserve(n);
  for (std::size_t i = 0; i < n; ++i) m.types.push_back(r.i32());
  return complete(r, std::move(m));
}

void NotificationResponse::encode(std::string& out) const {
  Writer(out, 'A').i32(process_id).cstr(channel).cstr(payload).finish();
}

std::optional<NotificationResponse> NotificationResponse::decode(std::string_view body) {
  Reader r(body);
  NotificationResponse m;
  m.process_id = r.i32();
  m.channel = r.cstr();
  m.payload = r.cstr();
  return complete(r, m);
}

void CopyResponse::encode(std::string& out) const {
  Writer w(out, type);
  w.u8(static_cast<std::uint8_t>(format)).i16(count16(column_formats.size()));
  for (auto f : column_formats) w.i16(f);
  w.finish();
}

std::optional<CopyResponse> CopyResponse::decode(char type, std::string_view body) {
  if (type != 'G' && type != 'H' && type != 'W') return std::nullopt;
  Reader r(body);
  CopyResponse m;
  m.type = type;
  m.format = static_cast<std::int8_t>(r.u8());
  std::size_t n = read_count(r, 2);
  m.column_formats.reserve(n);
  for (std::size_t i = 0; i < n; ++i) m.column_formats.push_back(r.i16());
  return complete(r, std::move(m));
}

void encode_parse_complete(std::string& out) { bodiless(out, '1'); }
void encode_bind_complete(std::string& out) { bodiless(out, '2'); }
void encode_close_complete(std::string& out) { bodiless(out, '3'); }
void encode_no_data(std::string& out) { bodiless(out, 'n'); }
void encode_empty_query(std::string& out) { bodiless(out, 'I'); }
void encode_portal_suspended(std::string& out) { bodiless(out, 's'); }

}  // namespace splitpoint::protocol
