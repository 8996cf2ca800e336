// SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL uses it, both sides, without
// channel binding. https://www.postgresql.org/docs/15/sasl-authentication.html
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace splitpoint::protocol::scram {

inline constexpr const char* kMechanism = "SCRAM-SHA-256";
inline constexpr int kDefaultIterations = 4096;

// What PostgreSQL stores in pg_authid.rolpassword:
// SCRAM-SHA-256$<iterations>:<salt base64>$<StoredKey base64>:<ServerKey base64>
struct Verifier {
  int iterations = kDefaultIterations;
  std::string salt;        // raw bytes
  std::string stored_key;  // raw 32 bytes
  std::string server_key;  // raw 32 bytes
};

std::optional<Verifier> parse_verifier(std::string_view text);
std::string format_verifier(const Verifier& v);
Verifier make_verifier(std::string_view password, std::string_view salt,
                       int iterations = kDefaultIterations);
// A verifier with a random 16-byte salt.
Verifier make_verifier(std::string_view password);

// Server side of one exchange. Without a verifier (unknown user) the exchange runs to
// the end with a fake verifier derived from `fake_seed` (a server secret) + `user`, and
// fails there, so an unknown user looks exactly like a wrong password. `user` is the
// name from the startup packet: PostgreSQL clients send an empty name in SCRAM.
class ServerExchange {
 public:
  ServerExchange(std::optional<Verifier> verifier, std::string_view fake_seed,
                 std::string_view user);
  // client-first-message -> server-first-message; nullopt if malformed.
  std::optional<std::string> handle_client_first(std::string_view message);
  // client-final-message -> server-final-message ("v=..."); nullopt if malformed or
  // the proof is wrong (or the user is unknown).
  std::optional<std::string> handle_client_final(std::string_view message);

 private:
  std::optional<Verifier> verifier_;
  Verifier effective_;
  std::string client_first_bare_;
  std::string server_first_;
  std::string nonce_;  // client nonce + server nonce
  std::string gs2_header_;
};

// Client side, for authenticating to a backend.
class ClientExchange {
 public:
  explicit ClientExchange(std::string password);
  std::string client_first();  // "n,,n=,r=<nonce>"
  // server-first-message -> client-final-message; nullopt if malformed/unsafe.
  std::optional<std::string> handle_server_first(std::string_view message);
  bool verify_server_final(std::string_view message) const;

 private:
  std::string password_;
  std::string client_nonce_;
  std::string client_first_bare_;
  std::string expected_server_signature_;
};

std::string base64_encode(std::string_view raw);
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace splitpoint::protocol::scram
