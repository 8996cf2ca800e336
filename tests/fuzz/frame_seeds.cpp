// Writes a seed corpus for frame_fuzz: short, valid conversations built with the
// real encoders, so the fuzzer starts from well-formed frames of every type.
// Usage: frame_seeds <dir>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "protocol/messages.hpp"

using namespace splitpoint::protocol;
using namespace std::string_view_literals;

namespace {

std::string client_extended() {
  std::string s;
  encode_ssl_request(s);
  StartupMessage sm;
  sm.parameters = {{"user", "alice"}, {"database", "shop"}, {"application_name", "seed"}};
  sm.encode(s);
  Query{"SELECT 1"}.encode(s);
  Parse{"s1", "SELECT $1::int, $2", {23, 0}}.encode(s);
  Bind{"", "s1", {0, 1}, {"42"sv, std::nullopt}, {1}}.encode(s);
  Describe{'P', ""}.encode(s);
  Execute{"", 10}.encode(s);
  Close{'S', "s1"}.encode(s);
  encode_flush(s);
  encode_sync(s);
  encode_terminate(s);
  return s;
}

std::string client_auth_and_copy() {
  std::string s;
  encode_gssenc_request(s);
  StartupMessage sm;
  sm.parameters = {{"user", "bob"}};
  sm.encode(s);
  SASLInitialResponse{"SCRAM-SHA-256", "n,,n=,r=fyko+d2lbbFgONRv9qkxdawL"sv}.encode(s);
  SASLResponse{"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="}
      .encode(s);
  PasswordMessage{"md53175bce1d3201d16594cebf9d7eb3f9d"}.encode(s);
  Query{"COPY t FROM STDIN"}.encode(s);
  CopyData{"1\tone\n"}.encode(s);
  encode_copy_done(s);
  CopyFail{"aborted"}.encode(s);
  return s;
}

std::string backend_startup() {
  std::string s;
  Authentication a;
  a.code = AuthCode::sasl;
  a.mechanisms = {"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"};
  a.encode(s);
  a = {};
  a.code = AuthCode::sasl_continue;
  a.data = "r=fyko,s=QSXCR+Q6sek8bf92,i=4096";
  a.encode(s);
  a.code = AuthCode::sasl_final;
  a.data = "v=rmF9pqV8S7suAoZWja4dJRkFsKQ=";
  a.encode(s);
  a = {};
  a.code = AuthCode::md5_password;
  a.md5_salt = "\x01\x02\x03\x04";
  a.encode(s);
  a = {};
  a.encode(s);  // AuthenticationOk
  ParameterStatus{"server_version", "15.4"}.encode(s);
  BackendKeyData{1234, 5678}.encode(s);
  ReadyForQuery{'I'}.encode(s);
  return s;
}

std::string backend_results() {
  std::string s;
  encode_parse_complete(s);
  ParameterDescription{{23, 25}}.encode(s);
  RowDescription{{{"id", 16384, 1, 23, 4, -1, 0}, {"name", 16384, 2, 25, -1, -1, 0}}}.encode(s);
  encode_bind_complete(s);
  DataRow{{"1"sv, "one"sv}}.encode(s);
  DataRow{{"2"sv, std::nullopt}}.encode(s);
  encode_portal_suspended(s);
  CommandComplete{"SELECT 2"}.encode(s);
  encode_no_data(s);
  encode_empty_query(s);
  encode_close_complete(s);
  ErrorFields::make("ERROR", "42P01", "relation \"t\" does not exist").encode(s, 'E');
  ErrorFields::make("NOTICE", "00000", "hello").encode(s, 'N');
  NotificationResponse{99, "jobs", "42"}.encode(s);
  CopyResponse{'G', 0, {0, 0}}.encode(s);
  CopyResponse{'H', 1, {1}}.encode(s);
  CopyResponse{'W', 0, {}}.encode(s);
  CopyData{"2\ttwo\n"}.encode(s);
  encode_copy_done(s);
  ReadyForQuery{'T'}.encode(s);
  return s;
}

std::string cancel() {
  std::string s;
  CancelRequest{1234, 5678}.encode(s);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  std::filesystem::path dir(argv[1]);
  std::filesystem::create_directories(dir);
  const std::pair<const char*, std::string> seeds[] = {
      {"client_extended", client_extended()},   {"client_auth_copy", client_auth_and_copy()},
      {"backend_startup", backend_startup()},   {"backend_results", backend_results()},
      {"cancel", cancel()},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "frame_seeds: cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  return 0;
}
