// MD5 password authentication, byte for byte as PostgreSQL computes it
// (src/common/md5_common.c: pg_md5_encrypt). MD5 is weak; it is here only because
// old roles and old backends still use it.
// https://www.postgresql.org/docs/15/auth-password.html
// https://www.postgresql.org/docs/15/protocol-flow.html (AuthenticationMD5Password)
#include "protocol/md5.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace splitpoint::protocol::md5 {

namespace {

constexpr std::string_view kPrefix = "md5";
constexpr std::size_t kHexLength = 32;

}  // namespace

std::string hex(std::string_view data) {
  // EVP_Digest rather than MD5(): the one-shot MD5() is deprecated in OpenSSL 3.
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &digest_len, EVP_md5(), nullptr) != 1) {
    // Only fails if the provider is missing (e.g. a FIPS-only build): a deployment bug.
    throw std::runtime_error("MD5 is not available from OpenSSL");
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(digest_len * 2);
  for (unsigned int i = 0; i < digest_len; ++i) {
    out.push_back(kDigits[digest[i] >> 4]);
    out.push_back(kDigits[digest[i] & 0x0f]);
  }
  return out;
}

std::string verifier(std::string_view user, std::string_view password) {
  // The user name is the salt, appended after the password.
  std::string input;
  input.reserve(password.size() + user.size());
  input.append(password).append(user);
  return std::string(kPrefix) + hex(input);
}

bool is_verifier(std::string_view text) {
  if (text.size() != kPrefix.size() + kHexLength || !text.starts_with(kPrefix)) return false;
  for (char c : text.substr(kPrefix.size())) {
    // Lowercase only: that is what PostgreSQL writes and compares against.
    bool digit = c >= '0' && c <= '9';
    bool lower = c >= 'a' && c <= 'f';
    if (!digit && !lower) return false;
  }
  return true;
}

std::string response(std::string_view stored_verifier, std::string_view salt4) {
  // Passing a plaintext password or a SCRAM secret here is a caller bug; answering with
  // a wrong hash would turn it into a puzzling "password authentication failed".
  if (!is_verifier(stored_verifier)) {
    throw std::invalid_argument("md5::response needs an \"md5\" + 32 hex verifier");
  }
  std::string input(stored_verifier.substr(kPrefix.size()));
  input.append(salt4);
  return std::string(kPrefix) + hex(input);
}

}  // namespace splitpoint::protocol::md5
