// MD5 password authentication against RFC 1321 and a verifier made by PostgreSQL 15.
#include "protocol/md5.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

using namespace splitpoint::protocol;

namespace {

// From a throwaway PostgreSQL 15.x: SET password_encryption = 'md5';
// CREATE ROLE md5user LOGIN PASSWORD 'md5pw'; SELECT rolpassword FROM pg_authid.
constexpr std::string_view kRealUser = "md5user";
constexpr std::string_view kRealPassword = "md5pw";
constexpr std::string_view kRealVerifier = "md5704ac3bc41dadc414b9aa9dbf5e63cdd";

}  // namespace

TEST_CASE("md5 hex matches RFC 1321", "[md5]") {
  CHECK(md5::hex("") == "d41d8cd98f00b204e9800998ecf8427e");
  CHECK(md5::hex("abc") == "900150983cd24fb0d6963f7d28e17f72");
  CHECK(md5::hex("message digest") == "f96b697d7cb7938d525a2f31aaf161d0");
  CHECK(md5::hex(std::string_view("a\0b", 3)) != md5::hex("a"));  // embedded NUL hashed
}

TEST_CASE("md5 verifier matches PostgreSQL's", "[md5]") {
  CHECK(md5::verifier(kRealUser, kRealPassword) == kRealVerifier);
  // Password first, then user: swapping them must give something else.
  CHECK(md5::verifier(kRealPassword, kRealUser) != kRealVerifier);
  CHECK(md5::is_verifier(md5::verifier("u", "")));
}

TEST_CASE("md5 is_verifier", "[md5]") {
  CHECK(md5::is_verifier(kRealVerifier));
  CHECK_FALSE(md5::is_verifier("MD5704ac3bc41dadc414b9aa9dbf5e63cdd"));
  CHECK_FALSE(md5::is_verifier("md5704AC3BC41DADC414B9AA9DBF5E63CDD"));
  CHECK_FALSE(md5::is_verifier("md5704ac3bc41dadc414b9aa9dbf5e63cd"));
  CHECK_FALSE(md5::is_verifier("md5704ac3bc41dadc414b9aa9dbf5e63cdd0"));
  CHECK_FALSE(md5::is_verifier("md5704ac3bc41dadc414b9aa9dbf5e63cdg"));
  CHECK_FALSE(md5::is_verifier("704ac3bc41dadc414b9aa9dbf5e63cdd"));
  CHECK_FALSE(md5::is_verifier("md5pw"));
  CHECK_FALSE(md5::is_verifier(""));
  CHECK_FALSE(md5::is_verifier("SCRAM-SHA-256$4096:c2FsdA==$a:b"));
}

TEST_CASE("md5 response to AuthenticationMD5Password", "[md5]") {
  // Expected values from Python's hashlib: "md5" + md5(hex_part + salt).
  CHECK(md5::response(kRealVerifier, "abcd") == "md5aebd62a88cd300be6975d2e61e678634");
  // The salt is 4 raw bytes and may hold NUL or high bytes.
  CHECK(md5::response(kRealVerifier, std::string_view("\x01\x02\xfe\x00", 4)) ==
        "md5acce941fe41b1de8d883c4a3d469be3a");
  CHECK(md5::response(kRealVerifier, "abcd") != md5::response(kRealVerifier, "abce"));
  // The client and a checking server compute the same thing from password and verifier.
  CHECK(md5::response(md5::verifier(kRealUser, kRealPassword), "wxyz") ==
        md5::response(kRealVerifier, "wxyz"));
  CHECK(md5::response(md5::verifier(kRealUser, "wrong"), "wxyz") !=
        md5::response(kRealVerifier, "wxyz"));
}

TEST_CASE("md5 response refuses something that is not a verifier", "[md5]") {
  CHECK_THROWS_AS(md5::response("md5pw", "abcd"), std::invalid_argument);
  CHECK_THROWS_AS(md5::response("", "abcd"), std::invalid_argument);
}
