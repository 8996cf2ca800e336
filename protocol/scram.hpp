// SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL uses it, both sides; the server
// side also SCRAM-SHA-256-PLUS with tls-server-end-point channel binding (RFC 5929,
// SPEC §11). https://www.postgresql.org/docs/15/sasl-authentication.html
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::protocol::scram {

inline constexpr const char* kMechanism = "SCRAM-SHA-256";
inline constexpr const char* kMechanismPlus = "SCRAM-SHA-256-PLUS";
inline constexpr const char* kChannelBindingType = "tls-server-end-point";
inline constexpr int kDefaultIterations = 4096;
// ServerExchange::error() when the client's channel binding data differs: PostgreSQL
// reports it as a protocol violation (08P01), not as a wrong password.
inline constexpr std::string_view kBindingCheckFailed = "SCRAM channel binding check failed";

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

// A client's SCRAM key, recovered from its proof by a server exchange that accepted it,
// with the verifier it was checked against: enough to log in as that client to a server
// that stores the same verifier (same salt and iterations), without the password
// (`auth: passthrough`, SPEC §14). Its text form, which ClientExchange::with_client_key
// takes: NUL + SCRAM-SHA-256-CLIENT-KEY$<iterations>:<salt>$<ClientKey>:<ServerKey>.
// The leading NUL keeps it apart from every password (a PasswordMessage and the
// configuration cannot hold one), so it can travel where a password does.
std::string format_client_key(const Verifier& v, std::string_view client_key);
bool is_client_key(std::string_view credential);
Verifier make_verifier(std::string_view password, std::string_view salt,
                       int iterations = kDefaultIterations);
// A verifier with a random 16-byte salt.
Verifier make_verifier(std::string_view password);
// PBKDF2 derivations run so far in this process (for tests: the client side keeps its
// keys per password, salt and iteration count; see ClientExchange).
std::uint64_t key_derivations();

// Server side of one exchange. Without a verifier (unknown user) the exchange runs to
// the end with a fake verifier derived from `fake_seed` (a server secret) + `user`, and
// fails there, so an unknown user looks exactly like a wrong password. `user` is the
// name from the startup packet: PostgreSQL clients send an empty name in SCRAM.
//
// `cert_hash`, for a client on TLS: the tls-server-end-point channel binding data
// (RFC 5929 section 4.1), the hash of the certificate the server presented, as
// PostgreSQL's be_tls_get_certificate_hash computes it. With it the exchange offers
// SCRAM-SHA-256-PLUS, checks the client's binding, and refuses a client that says it
// could bind but thinks the server cannot ("y", RFC 5802 section 6: a downgrade).
class ServerExchange {
 public:
  ServerExchange(std::optional<Verifier> verifier, std::string_view fake_seed,
                 std::string_view user, std::optional<std::string> cert_hash = std::nullopt);
  // What AuthenticationSASL lists, best first (as PostgreSQL): -PLUS only with a
  // certificate hash.
  std::vector<std::string_view> mechanisms() const;
  // client-first-message -> server-first-message, for the mechanism the client chose
  // in SASLInitialResponse; nullopt (and error() says why) if malformed, or if the
  // mechanism or its gs2 header does not fit what was offered.
  std::optional<std::string> handle_client_first(std::string_view message,
                                                 std::string_view mechanism = kMechanism);
  // client-final-message -> server-final-message ("v=..."); nullopt if malformed, the
  // channel binding differs, or the proof is wrong (or the user is unknown).
  std::optional<std::string> handle_client_final(std::string_view message);
  // Why the last handle_* refused, in PostgreSQL's words; static text.
  const char* error() const { return error_; }
  // After handle_client_final succeeded: the client's key, in format_client_key's form.
  const std::string& client_key() const { return client_key_; }

 private:
  bool accept_gs2_header(std::string_view message, std::string_view mechanism);
  std::nullopt_t refuse(const char* why);

  std::optional<Verifier> verifier_;
  Verifier effective_;
  std::optional<std::string> cert_hash_;
  std::string client_first_bare_;
  std::string server_first_;
  std::string nonce_;  // client nonce + server nonce
  std::string gs2_header_;
  const char* error_ = "";
  std::string client_key_;
};

// Client side, for authenticating to a backend. The keys derived from the password
// (PBKDF2, the costly step) are kept per password, salt and iteration count, process
// wide: a pool's next connect to the same shard and role does not derive them again.
class ClientExchange {
 public:
  explicit ClientExchange(std::string password);
  // With a client key (format_client_key) instead of the password.
  static ClientExchange with_client_key(std::string credential);
  std::string client_first();  // "n,,n=,r=<nonce>"
  // server-first-message -> client-final-message; nullopt if malformed/unsafe, or if
  // a client key's salt or iterations differ from the server's (error() says so).
  std::optional<std::string> handle_server_first(std::string_view message);
  bool verify_server_final(std::string_view message) const;
  const char* error() const { return error_; }

 private:
  const char* error_ = "SCRAM exchange failed";
  bool client_key_ = false;  // password_ is a client key
  std::string password_;
  std::string client_nonce_;
  std::string client_first_bare_;
  std::string expected_server_signature_;
};

std::string base64_encode(std::string_view raw);
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace splitpoint::protocol::scram
