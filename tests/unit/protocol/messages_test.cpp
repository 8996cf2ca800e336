// Message codecs: every struct survives encode -> frame -> decode with its fields
// intact, malformed bodies are refused, and random bytes never get past a decoder
// unless they encode back to themselves.
// https://www.postgresql.org/docs/15/protocol-message-formats.html
#include "protocol/messages.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol/buffer.hpp"
#include "protocol/framing.hpp"
#include "tests/fuzz/message_check.hpp"

using namespace splitpoint::protocol;
using namespace std::string_literals;
using namespace std::string_view_literals;

namespace {

constexpr auto kFe = Direction::frontend;
constexpr auto kBe = Direction::backend;

// Encodes after existing bytes (encode must append, not overwrite) and returns the
// new frame alone.
template <class Encode>
std::string encode_with(Encode encode) {
  std::string out = "earlier";
  encode(out);
  REQUIRE(out.substr(0, 7) == "earlier");
  return out.substr(7);
}

template <class T>
std::string wire_of(const T& msg) {
  return encode_with([&](std::string& out) { msg.encode(out); });
}

// The body of a regular frame that must occupy all of `wire`.
std::string_view body_of(const std::string& wire, Direction from, char type) {
  auto r = decode_frame(wire, from, FrameLimits{});
  REQUIRE(r.status == FrameStatus::ok);
  REQUIRE(r.frame.type == type);
  REQUIRE(r.frame.size == wire.size());
  return r.frame.body;
}

std::string_view startup_body_of(const std::string& wire) {
  auto r = decode_startup_frame(wire);
  REQUIRE(r.status == FrameStatus::ok);
  REQUIRE(r.frame.size == wire.size());
  return r.frame.body;
}

// The format of these bodies is fully determined: every strict prefix and the body
// with one extra byte must both be refused.
template <class Decode>
void require_exact(std::string_view body, Decode decode) {
  REQUIRE(decode(body));
  for (std::size_t n = 0; n < body.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    REQUIRE_FALSE(decode(body.substr(0, n)));
  }
  std::string longer = std::string(body) + "x";
  REQUIRE_FALSE(decode(longer));
}

// A body built by hand, for malformed cases.
template <class Build>
std::string body(Build build) {
  std::string out;
  Writer w(out, 'x');
  build(w);
  w.finish();
  return out.substr(5);
}

}  // namespace

// ---- startup phase ----

TEST_CASE("StartupMessage round-trips", "[messages][startup]") {
  StartupMessage in;
  in.parameters = {{"user", "alice"}, {"database", "shop"}, {"options", ""}, {"user", "bob"}};
  std::string wire = wire_of(in);
  auto b = startup_body_of(wire);
  auto out = StartupMessage::decode(b);
  REQUIRE(out);
  REQUIRE(out->protocol == kProtocolV3);
  REQUIRE(out->parameters == in.parameters);
  REQUIRE(*out->find("user") == "bob");  // a repeated parameter overrides, as in PostgreSQL
  REQUIRE(*out->find("database") == "shop");
  REQUIRE(out->find("options")->empty());
  REQUIRE(out->find("application_name") == nullptr);
  require_exact(b, StartupMessage::decode);

  StartupMessage none;
  auto empty = StartupMessage::decode(startup_body_of(wire_of(none)));
  REQUIRE(empty);
  REQUIRE(empty->parameters.empty());
}

TEST_CASE("StartupMessage refuses other protocols and broken lists", "[messages][startup]") {
  auto with = [](std::int32_t protocol, std::string rest) {
    return body([&](Writer& w) { w.i32(protocol).bytes(rest); });
  };
  REQUIRE(StartupMessage::decode(with(kProtocolV3, "user\0alice\0\0"s)));
  REQUIRE_FALSE(StartupMessage::decode(with(196609, "user\0alice\0\0"s)));  // 3.1
  REQUIRE_FALSE(StartupMessage::decode(with(131072, "user\0alice\0\0"s)));  // 2.0
  REQUIRE_FALSE(StartupMessage::decode(with(kSSLRequestCode, "")));
  REQUIRE_FALSE(StartupMessage::decode(with(kProtocolV3, "user\0alice\0"s)));   // no terminator
  REQUIRE_FALSE(StartupMessage::decode(with(kProtocolV3, "user\0\0"s)));        // value, no terminator
  REQUIRE_FALSE(StartupMessage::decode(with(kProtocolV3, "user\0alice"s)));     // value without NUL
  REQUIRE_FALSE(StartupMessage::decode(with(kProtocolV3, "user\0alice\0\0x"s)));  // trailing
  REQUIRE_FALSE(StartupMessage::decode(with(kProtocolV3, "")));
  REQUIRE_FALSE(StartupMessage::decode(""));
}

TEST_CASE("CancelRequest round-trips", "[messages][startup]") {
  CancelRequest in{4242, -559038737};
  std::string wire = wire_of(in);
  REQUIRE(wire.size() == 16);
  auto b = startup_body_of(wire);
  REQUIRE(startup_code(b) == kCancelRequestCode);
  auto out = CancelRequest::decode(b);
  REQUIRE(out);
  REQUIRE(out->process_id == 4242);
  REQUIRE(out->secret_key == -559038737);
  require_exact(b, CancelRequest::decode);
  REQUIRE_FALSE(StartupMessage::decode(b));
  auto wrong = body([](Writer& w) { w.i32(kSSLRequestCode).i32(1).i32(2); });
  REQUIRE_FALSE(CancelRequest::decode(wrong));
}

TEST_CASE("SSLRequest and GSSENCRequest are a bare code", "[messages][startup]") {
  for (auto [encode, code] : {std::pair{&encode_ssl_request, kSSLRequestCode},
                              std::pair{&encode_gssenc_request, kGSSENCRequestCode}}) {
    std::string wire = encode_with(encode);
    REQUIRE(wire.size() == 8);
    auto b = startup_body_of(wire);
    REQUIRE(startup_code(b) == code);
    REQUIRE_FALSE(StartupMessage::decode(b));
    REQUIRE_FALSE(CancelRequest::decode(b));
  }
  REQUIRE_FALSE(startup_code("\x04\xd2\x16"s));
  REQUIRE(startup_code("\x00\x03\x00\x00trailing"s) == kProtocolV3);
}

// ---- frontend ----

TEST_CASE("Query round-trips", "[messages][frontend]") {
  for (std::string sql : {"SELECT 1; SELECT 'héllo'"s, ""s}) {
    std::string wire = wire_of(Query{sql});
    auto b = body_of(wire, kFe, 'Q');
    auto out = Query::decode(b);
    REQUIRE(out);
    REQUIRE(out->sql == sql);
    require_exact(b, Query::decode);
  }
}

TEST_CASE("Parse round-trips and refuses bad counts", "[messages][frontend]") {
  Parse in{"stmt_1", "SELECT $1, $2, $3", {23, 0, -1}};
  std::string wire = wire_of(in);
  auto b = body_of(wire, kFe, 'P');
  auto out = Parse::decode(b);
  REQUIRE(out);
  REQUIRE(out->name == "stmt_1");
  REQUIRE(out->query == "SELECT $1, $2, $3");
  REQUIRE(out->param_types == in.param_types);
  require_exact(b, Parse::decode);

  REQUIRE(Parse::decode(body([](Writer& w) { w.cstr("").cstr("SELECT 1").i16(0); })));
  REQUIRE_FALSE(Parse::decode(body([](Writer& w) { w.cstr("").cstr("q").i16(-1); })));
  REQUIRE_FALSE(Parse::decode(body([](Writer& w) { w.cstr("").cstr("q").i16(2).i32(23); })));
}

TEST_CASE("Bind round-trips parameters, NULLs and formats", "[messages][frontend]") {
  std::string binary("\x00\x00\x00\x2a\xff", 5);
  Bind in;
  in.portal = "portal";
  in.statement = "stmt";
  in.param_formats = {0, 0, 1, 0};
  in.params = {"42"sv, std::nullopt, std::string_view(binary), ""sv};
  in.result_formats = {1, 0, 1};
  std::string wire = wire_of(in);
  auto b = body_of(wire, kFe, 'B');
  auto out = Bind::decode(b);
  REQUIRE(out);
  REQUIRE(out->portal == "portal");
  REQUIRE(out->statement == "stmt");
  REQUIRE(out->param_formats == in.param_formats);
  REQUIRE(out->params == in.params);
  REQUIRE_FALSE(out->params[1].has_value());  // NULL stays distinct from ''
  REQUIRE(out->params[3].has_value());
  REQUIRE(out->result_formats == in.result_formats);
  require_exact(b, Bind::decode);

  Bind plain;  // unnamed portal and statement, no parameters
  std::string plain_wire = wire_of(plain);
  auto p = Bind::decode(body_of(plain_wire, kFe, 'B'));
  REQUIRE(p);
  REQUIRE(p->statement.empty());
  REQUIRE(p->params.empty());
  Bind one_format{"", "", {1}, {"a"sv, "b"sv}, {}};  // one format applies to all
  std::string one_wire = wire_of(one_format);
  auto o = Bind::decode(body_of(one_wire, kFe, 'B'));
  REQUIRE(o);
  REQUIRE(o->params == one_format.params);
}

TEST_CASE("Bind refuses counts beyond the body, bad lengths and mismatched formats", "[messages][frontend]") {
  auto bind = [](std::int16_t nf, std::int16_t np, std::int32_t len, std::int16_t nr) {
    return body([&](Writer& w) {
      w.cstr("").cstr("").i16(nf);
      for (int i = 0; i < nf; ++i) w.i16(0);
      w.i16(np);
      for (int i = 0; i < np; ++i) w.i32(len).bytes(len > 0 ? std::string(std::size_t(len), 'v') : "");
      w.i16(nr);
      for (int i = 0; i < nr; ++i) w.i16(0);
    });
  };
  REQUIRE(Bind::decode(bind(2, 2, 3, 1)));
  REQUIRE(Bind::decode(bind(1, 2, -1, 0)));
  REQUIRE_FALSE(Bind::decode(bind(-1, 0, 0, 0)));
  REQUIRE_FALSE(Bind::decode(bind(0, -1, 0, 0)));
  REQUIRE_FALSE(Bind::decode(bind(0, 0, 0, -1)));
  REQUIRE_FALSE(Bind::decode(bind(0, 1, -2, 0)));  // only -1 may be negative
  REQUIRE_FALSE(Bind::decode(bind(2, 3, 1, 0)));   // formats: 0, 1 or one per parameter
  auto past_end = body([](Writer& w) { w.cstr("").cstr("").i16(0).i16(1).i32(10).bytes("short").i16(0); });
  REQUIRE_FALSE(Bind::decode(past_end));
  auto no_nul = body([](Writer& w) { w.bytes("portal"); });
  REQUIRE_FALSE(Bind::decode(no_nul));
}

TEST_CASE("Describe and Close round-trip and check the kind", "[messages][frontend]") {
  for (char kind : {'S', 'P'}) {
    std::string d = wire_of(Describe{kind, "name"});
    auto db = body_of(d, kFe, 'D');
    auto dout = Describe::decode(db);
    REQUIRE(dout);
    REQUIRE(dout->kind == kind);
    REQUIRE(dout->name == "name");
    require_exact(db, Describe::decode);

    std::string c = wire_of(Close{kind, ""});
    auto cb = body_of(c, kFe, 'C');
    auto cout = Close::decode(cb);
    REQUIRE(cout);
    REQUIRE(cout->kind == kind);
    REQUIRE(cout->name.empty());
    require_exact(cb, Close::decode);
  }
  REQUIRE_FALSE(Describe::decode("Xname\0"s));
  REQUIRE_FALSE(Close::decode("s\0"s));
  REQUIRE_FALSE(Describe::decode("Sname"s));
}

TEST_CASE("Execute round-trips", "[messages][frontend]") {
  for (std::int32_t rows : {0, 100, -1}) {
    std::string wire = wire_of(Execute{"portal", rows});
    auto b = body_of(wire, kFe, 'E');
    auto out = Execute::decode(b);
    REQUIRE(out);
    REQUIRE(out->portal == "portal");
    REQUIRE(out->max_rows == rows);
    require_exact(b, Execute::decode);
  }
}

TEST_CASE("bodiless frontend messages are a type and length 4", "[messages][frontend]") {
  for (auto [encode, type] : {std::pair{&encode_sync, 'S'}, std::pair{&encode_flush, 'H'},
                              std::pair{&encode_terminate, 'X'}, std::pair{&encode_copy_done, 'c'}}) {
    std::string wire = encode_with(encode);
    REQUIRE(wire == std::string(1, type) + "\0\0\0\x04"s);
    REQUIRE(body_of(wire, kFe, type).empty());
  }
  REQUIRE(body_of(encode_with(encode_copy_done), kBe, 'c').empty());
}

TEST_CASE("CopyData and CopyFail round-trip", "[messages][frontend]") {
  for (std::string data : {"1\tone\n2\ttwo\n"s, "\0\xff\0"s, ""s}) {
    std::string wire = wire_of(CopyData{data});
    for (auto from : {kFe, kBe}) {
      auto out = CopyData::decode(body_of(wire, from, 'd'));
      REQUIRE(out);
      REQUIRE(out->data == data);
    }
  }
  std::string wire = wire_of(CopyFail{"client gave up"});
  auto b = body_of(wire, kFe, 'f');
  auto out = CopyFail::decode(b);
  REQUIRE(out);
  REQUIRE(out->message == "client gave up");
  require_exact(b, CopyFail::decode);
}

TEST_CASE("password and SASL responses round-trip", "[messages][frontend][auth]") {
  std::string pw = wire_of(PasswordMessage{"md5abcdef0123456789"});
  auto pb = body_of(pw, kFe, 'p');
  auto pout = PasswordMessage::decode(pb);
  REQUIRE(pout);
  REQUIRE(pout->password == "md5abcdef0123456789");
  require_exact(pb, PasswordMessage::decode);

  std::string first = "n,,n=,r=rOprNGfwEbeRWgbNEkqO";
  for (std::optional<std::string_view> data : {std::optional<std::string_view>(first),
                                               std::optional<std::string_view>(""),
                                               std::optional<std::string_view>()}) {
    std::string wire = wire_of(SASLInitialResponse{"SCRAM-SHA-256", data});
    auto b = body_of(wire, kFe, 'p');
    auto out = SASLInitialResponse::decode(b);
    REQUIRE(out);
    REQUIRE(out->mechanism == "SCRAM-SHA-256");
    REQUIRE(out->data == data);
    require_exact(b, SASLInitialResponse::decode);
  }
  REQUIRE_FALSE(SASLInitialResponse::decode(body([](Writer& w) { w.cstr("M").i32(-2); })));
  REQUIRE_FALSE(SASLInitialResponse::decode(body([](Writer& w) { w.cstr("M").i32(5).bytes("abc"); })));
  REQUIRE_FALSE(SASLInitialResponse::decode(body([](Writer& w) { w.cstr("M").i32(-1).bytes("x"); })));

  std::string final_msg = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF,p=dHzb";
  std::string sw = wire_of(SASLResponse{final_msg});
  auto sout = SASLResponse::decode(body_of(sw, kFe, 'p'));
  REQUIRE(sout);
  REQUIRE(sout->data == final_msg);
}

// ---- backend ----

TEST_CASE("Authentication round-trips every supported request", "[messages][backend][auth]") {
  std::string salt("\x01\x00\xfe\x7f", 4);
  std::vector<Authentication> cases(6);
  cases[0].code = AuthCode::ok;
  cases[1].code = AuthCode::cleartext_password;
  cases[2].code = AuthCode::md5_password;
  cases[2].md5_salt = salt;
  cases[3].code = AuthCode::sasl;
  cases[3].mechanisms = {"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"};
  cases[4].code = AuthCode::sasl_continue;
  cases[4].data = "r=abc,s=c2FsdA==,i=4096";
  cases[5].code = AuthCode::sasl_final;
  cases[5].data = "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=";
  for (const auto& in : cases) {
    INFO("code " << static_cast<int>(in.code));
    std::string wire = wire_of(in);
    auto b = body_of(wire, kBe, 'R');
    auto out = Authentication::decode(b);
    REQUIRE(out);
    REQUIRE(out->code == in.code);
    REQUIRE(out->md5_salt == in.md5_salt);
    REQUIRE(out->mechanisms == in.mechanisms);
    REQUIRE(out->data == in.data);
    if (in.code != AuthCode::sasl_continue && in.code != AuthCode::sasl_final)
      require_exact(b, Authentication::decode);
  }
}

TEST_CASE("Authentication refuses unknown codes and broken bodies", "[messages][backend][auth]") {
  auto code = [](std::int32_t c, std::string rest) {
    return body([&](Writer& w) { w.i32(c).bytes(rest); });
  };
  REQUIRE_FALSE(Authentication::decode(code(7, "")));  // GSSAPI: not spoken by the proxy
  REQUIRE_FALSE(Authentication::decode(code(2, "")));
  REQUIRE_FALSE(Authentication::decode(code(-1, "")));
  REQUIRE_FALSE(Authentication::decode(code(5, "abc")));               // short salt
  REQUIRE_FALSE(Authentication::decode(code(10, "SCRAM-SHA-256\0"s)));  // no list terminator
  REQUIRE_FALSE(Authentication::decode(code(0, "x")));
  REQUIRE(Authentication::decode(code(10, "\0"s)));  // an empty list is well-formed
}

TEST_CASE("ParameterStatus, BackendKeyData, CommandComplete round-trip", "[messages][backend]") {
  std::string ps = wire_of(ParameterStatus{"TimeZone", "Europe/Berlin"});
  auto psb = body_of(ps, kBe, 'S');
  auto psout = ParameterStatus::decode(psb);
  REQUIRE(psout);
  REQUIRE(psout->name == "TimeZone");
  REQUIRE(psout->value == "Europe/Berlin");
  require_exact(psb, ParameterStatus::decode);

  std::string kd = wire_of(BackendKeyData{31337, -2});
  auto kdb = body_of(kd, kBe, 'K');
  auto kdout = BackendKeyData::decode(kdb);
  REQUIRE(kdout);
  REQUIRE(kdout->process_id == 31337);
  REQUIRE(kdout->secret_key == -2);
  require_exact(kdb, BackendKeyData::decode);

  std::string cc = wire_of(CommandComplete{"INSERT 0 3"});
  auto ccb = body_of(cc, kBe, 'C');
  auto ccout = CommandComplete::decode(ccb);
  REQUIRE(ccout);
  REQUIRE(ccout->tag == "INSERT 0 3");
  require_exact(ccb, CommandComplete::decode);
}

TEST_CASE("ReadyForQuery round-trips its status and refuses others", "[messages][backend]") {
  for (char status : {'I', 'T', 'E'}) {
    std::string wire = wire_of(ReadyForQuery{status});
    auto b = body_of(wire, kBe, 'Z');
    auto out = ReadyForQuery::decode(b);
    REQUIRE(out);
    REQUIRE(out->status == status);
    require_exact(b, ReadyForQuery::decode);
  }
  REQUIRE_FALSE(ReadyForQuery::decode("X"));
  REQUIRE_FALSE(ReadyForQuery::decode("\0"s));
}

TEST_CASE("ErrorResponse and NoticeResponse round-trip their fields", "[messages][backend]") {
  ErrorFields in = ErrorFields::make("ERROR", "42601", "syntax error at or near \"SELEC\"");
  in.fields.emplace_back('P', "1");
  in.fields.emplace_back('q', "unknown field types are kept");
  REQUIRE(in.get('S') == "ERROR");
  REQUIRE(in.get('V') == "ERROR");
  REQUIRE(in.get('C') == "42601");
  REQUIRE(in.get('D').empty());
  for (char type : {'E', 'N'}) {
    std::string wire = encode_with([&](std::string& out) { in.encode(out, type); });
    auto b = body_of(wire, kBe, type);
    auto out = ErrorFields::decode(b);
    REQUIRE(out);
    REQUIRE(out->fields == in.fields);
    REQUIRE(out->get('M') == "syntax error at or near \"SELEC\"");
    require_exact(b, ErrorFields::decode);
  }
  REQUIRE_FALSE(ErrorFields::decode("\0"s));              // no fields at all
  REQUIRE_FALSE(ErrorFields::decode("SERROR\0"s));        // no terminator
  REQUIRE_FALSE(ErrorFields::decode("SERROR\0Cabc"s));    // value without NUL
  REQUIRE_FALSE(ErrorFields::decode(""));
}

TEST_CASE("RowDescription round-trips its fields", "[messages][backend]") {
  RowDescription in;
  in.fields = {{"id", 16384, 1, 20, 8, -1, 0}, {"", 0, 0, 25, -1, -1, 1}};
  std::string wire = wire_of(in);
  auto b = body_of(wire, kBe, 'T');
  auto out = RowDescription::decode(b);
  REQUIRE(out);
  REQUIRE(out->fields.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& x = out->fields[i];
    const auto& y = in.fields[i];
    REQUIRE(x.name == y.name);
    REQUIRE(x.table_oid == y.table_oid);
    REQUIRE(x.column == y.column);
    REQUIRE(x.type_oid == y.type_oid);
    REQUIRE(x.type_size == y.type_size);
    REQUIRE(x.type_modifier == y.type_modifier);
    REQUIRE(x.format == y.format);
  }
  require_exact(b, RowDescription::decode);
  REQUIRE(RowDescription::decode("\0\0"s));
  REQUIRE_FALSE(RowDescription::decode("\xff\xff"s));
  REQUIRE_FALSE(RowDescription::decode("\x7f\xff"s));  // 32767 fields announced, none there
}

TEST_CASE("DataRow round-trips values and NULLs", "[messages][backend]") {
  std::string blob("\0\x01\x02"s);
  DataRow in{{"1"sv, std::nullopt, ""sv, std::string_view(blob)}};
  std::string wire = wire_of(in);
  auto b = body_of(wire, kBe, 'D');
  auto out = DataRow::decode(b);
  REQUIRE(out);
  REQUIRE(out->values == in.values);
  REQUIRE_FALSE(out->values[1].has_value());
  REQUIRE(out->values[2].has_value());
  require_exact(b, DataRow::decode);

  REQUIRE(DataRow::decode(body([](Writer& w) { w.i16(0); })));
  REQUIRE_FALSE(DataRow::decode(body([](Writer& w) { w.i16(-1); })));
  REQUIRE_FALSE(DataRow::decode(body([](Writer& w) { w.i16(1).i32(-2); })));
  REQUIRE_FALSE(DataRow::decode(body([](Writer& w) { w.i16(1).i32(4).bytes("abc"); })));
  REQUIRE_FALSE(DataRow::decode(body([](Writer& w) { w.i16(2).i32(-1); })));
}

TEST_CASE("ParameterDescription and NotificationResponse round-trip", "[messages][backend]") {
  ParameterDescription pd{{23, 25, 0}};
  auto pdb_wire = wire_of(pd);
  auto pdb = body_of(pdb_wire, kBe, 't');
  auto pdout = ParameterDescription::decode(pdb);
  REQUIRE(pdout);
  REQUIRE(pdout->types == pd.types);
  require_exact(pdb, ParameterDescription::decode);
  REQUIRE_FALSE(ParameterDescription::decode(body([](Writer& w) { w.i16(-3); })));

  std::string wire = wire_of(NotificationResponse{77, "orders", "{\"id\": 5}"});
  auto b = body_of(wire, kBe, 'A');
  auto out = NotificationResponse::decode(b);
  REQUIRE(out);
  REQUIRE(out->process_id == 77);
  REQUIRE(out->channel == "orders");
  REQUIRE(out->payload == "{\"id\": 5}");
  require_exact(b, NotificationResponse::decode);
}

TEST_CASE("CopyIn/Out/BothResponse round-trip", "[messages][backend]") {
  for (char type : {'G', 'H', 'W'}) {
    CopyResponse in{type, 1, {1, 1, 0}};
    std::string wire = wire_of(in);
    auto b = body_of(wire, kBe, type);
    auto out = CopyResponse::decode(type, b);
    REQUIRE(out);
    REQUIRE(out->type == type);
    REQUIRE(out->format == 1);
    REQUIRE(out->column_formats == in.column_formats);
    require_exact(b, [type](std::string_view x) { return CopyResponse::decode(type, x); });
  }
  REQUIRE_FALSE(CopyResponse::decode('X', "\0\0\0"s));
  REQUIRE_FALSE(CopyResponse::decode('G', "\0\xff\xff"s));
}

TEST_CASE("bodiless backend messages are a type and length 4", "[messages][backend]") {
  for (auto [encode, type] :
       {std::pair{&encode_parse_complete, '1'}, std::pair{&encode_bind_complete, '2'},
        std::pair{&encode_close_complete, '3'}, std::pair{&encode_no_data, 'n'},
        std::pair{&encode_empty_query, 'I'}, std::pair{&encode_portal_suspended, 's'}}) {
    std::string wire = encode_with(encode);
    REQUIRE(wire == std::string(1, type) + "\0\0\0\x04"s);
    REQUIRE(body_of(wire, kBe, type).empty());
  }
}

TEST_CASE("encode refuses structs the wire cannot carry", "[messages]") {
  std::string out;
  DataRow wide;
  wide.values.assign(65536, std::nullopt);
  REQUIRE_THROWS_AS(wide.encode(out), std::length_error);
  Authentication md5;
  md5.code = AuthCode::md5_password;
  md5.md5_salt = "abc";
  REQUIRE_THROWS_AS(md5.encode(out), std::invalid_argument);
  REQUIRE_THROWS_AS(ErrorFields{}.encode(out, 'E'), std::invalid_argument);
  StartupMessage unnamed;
  unnamed.parameters = {{"", "x"}};
  REQUIRE_THROWS_AS(unnamed.encode(out), std::invalid_argument);

  DataRow widest;  // the largest count that fits still round-trips
  widest.values.assign(32767, ""sv);
  std::string wire = wire_of(widest);
  auto decoded = DataRow::decode(body_of(wire, kBe, 'D'));
  REQUIRE(decoded);
  REQUIRE(decoded->values.size() == 32767);
}

// ---- random bytes ----

namespace {

using splitpoint::protocol::testing::check_frame;
using splitpoint::protocol::testing::CheckResult;

const std::string kFrontendTypes = "QPBDECSHXcdfp";
const std::string kBackendTypes = "RSKZCENTDtAGHWdc123nIs";

// Bytes skewed towards the values that make structure (NUL, small counts, -1).
std::string random_body(std::mt19937& rng) {
  static const char interesting[] = {'\0', '\x01', '\x02', '\xff', 'S', 'P', 'I', 'a'};
  std::string b(rng() % 40, '\0');
  for (auto& c : b)
    c = rng() % 2 ? interesting[rng() % sizeof(interesting)] : static_cast<char>(rng());
  return b;
}

void run_all_decoders(std::string_view body, CheckResult& total) {
  auto add = [&](CheckResult r) {
    total.accepted += r.accepted;
    total.mismatched += r.mismatched;
  };
  add(check_frame(Frame{0, body, body.size() + 4}, kFe));
  for (char t : kFrontendTypes) add(check_frame(Frame{t, body, body.size() + 5}, kFe));
  for (char t : kBackendTypes) add(check_frame(Frame{t, body, body.size() + 5}, kBe));
}

std::vector<std::string> sample_bodies() {
  std::vector<std::string> out;
  auto keep = [&](std::string wire, std::size_t header) { out.push_back(wire.substr(header)); };
  StartupMessage sm;
  sm.parameters = {{"user", "u"}, {"database", "d"}};
  keep(wire_of(sm), 4);
  keep(wire_of(CancelRequest{1, 2}), 4);
  keep(wire_of(Parse{"s", "SELECT $1", {23}}), 5);
  keep(wire_of(Bind{"", "s", {1}, {"x"sv, std::nullopt}, {0}}), 5);
  keep(wire_of(Describe{'P', "p"}), 5);
  keep(wire_of(Execute{"p", 5}), 5);
  keep(wire_of(SASLInitialResponse{"SCRAM-SHA-256", "n,,n=,r=x"sv}), 5);
  Authentication sasl;
  sasl.code = AuthCode::sasl;
  sasl.mechanisms = {"SCRAM-SHA-256"};
  keep(wire_of(sasl), 5);
  std::string err;
  ErrorFields::make("ERROR", "XX000", "boom").encode(err, 'E');
  keep(err, 5);
  keep(wire_of(RowDescription{{{"a", 1, 1, 23, 4, -1, 0}}}), 5);
  keep(wire_of(DataRow{{"1"sv, std::nullopt}}), 5);
  keep(wire_of(NotificationResponse{1, "c", "p"}), 5);
  keep(wire_of(CopyResponse{'H', 0, {0, 0}}), 5);
  return out;
}

}  // namespace

TEST_CASE("random bodies: no decoder crashes, and what one accepts encodes back exactly",
          "[messages][random]") {
  std::mt19937 rng(7);
  CheckResult total;
  for (int i = 0; i < 5000; ++i) run_all_decoders(random_body(rng), total);
  REQUIRE(total.mismatched == 0);
  REQUIRE(total.accepted > 1000);  // CopyData alone accepts everything; others must too
}

TEST_CASE("mutated valid bodies: no decoder crashes, and what one accepts encodes back",
          "[messages][random]") {
  std::mt19937 rng(11);
  CheckResult total;
  const auto samples = sample_bodies();
  for (int i = 0; i < 20000; ++i) {
    std::string b = samples[rng() % samples.size()];
    switch (rng() % 4) {
      case 0: if (!b.empty()) b[rng() % b.size()] = static_cast<char>(rng()); break;
      case 1: b.resize(rng() % (b.size() + 1)); break;
      case 2: b.insert(rng() % (b.size() + 1), 1, static_cast<char>(rng())); break;
      default: if (!b.empty()) b.erase(rng() % b.size(), 1); break;
    }
    run_all_decoders(b, total);
  }
  REQUIRE(total.mismatched == 0);
  REQUIRE(total.accepted > 20000);
}
