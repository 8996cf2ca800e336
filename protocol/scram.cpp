// SCRAM-SHA-256 as PostgreSQL 15 speaks it (src/backend/libpq/auth-scram.c on the server,
// src/interfaces/libpq/fe-auth-scram.c on the client), written from RFC 5802/7677 and
// https://www.postgresql.org/docs/15/sasl-authentication.html
//
// Passwords are used as given, without SASLprep: for ASCII passwords SASLprep is the
// identity, and so it is for UTF-8 already in NFKC form. A password that SASLprep would
// change (e.g. decomposed accents, some spaces) gives different keys here than in
// PostgreSQL/libpq; such a role needs its verifier made by PostgreSQL itself.
//
// Channel binding: the server side offers SCRAM-SHA-256-PLUS with tls-server-end-point
// (RFC 5929) to TLS clients, as PostgreSQL does (auth-scram.c: read_client_first_message,
// read_client_final_message); the client side (to shards) never binds.
#include "protocol/scram.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <climits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace splitpoint::protocol::scram {

namespace {

constexpr std::size_t kKeyLength = 32;         // SHA-256 output
constexpr std::size_t kNonceBytes = 18;        // as PostgreSQL (SCRAM_RAW_NONCE_LEN)
constexpr std::size_t kSaltBytes = 16;         // as PostgreSQL (SCRAM_DEFAULT_SALT_LEN)
constexpr std::string_view kGs2NoBinding = "n,,";       // client can't bind
constexpr std::string_view kGs2BindingUnused = "y,,";   // client could, server didn't offer
constexpr std::string_view kGs2Binding = "p=tls-server-end-point,,";
constexpr std::string_view kGs2BindingType = "p=tls-server-end-point,";  // then authzid
constexpr const char* kMalformed = "malformed SCRAM message";
constexpr std::string_view kNoBindingCbind = "biws";    // base64("n,,")

const unsigned char* bytes(std::string_view s) {
  // OpenSSL treats a null key pointer as "no key given", never as an empty key.
  static const unsigned char kEmpty = 0;
  return s.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(s.data());
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    // Without randomness no exchange is safe; nothing sensible to do but stop.
    throw std::runtime_error("RAND_bytes failed");
  }
  return out;
}

std::string hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), bytes(key), static_cast<int>(key.size()), bytes(data), data.size(),
           out, &len) == nullptr) {
    throw std::runtime_error("HMAC-SHA-256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string sha256(std::string_view data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(bytes(data), data.size(), out);
  return std::string(reinterpret_cast<const char*>(out), sizeof out);
}

std::atomic<std::uint64_t> g_derivations{0};

std::string salted_password(std::string_view password, std::string_view salt,
                            int iterations) {
  g_derivations.fetch_add(1, std::memory_order_relaxed);
  std::string out(kKeyLength, '\0');
  if (PKCS5_PBKDF2_HMAC(reinterpret_cast<const char*>(bytes(password)),
                        static_cast<int>(password.size()), bytes(salt),
                        static_cast<int>(salt.size()), iterations, EVP_sha256(),
                        static_cast<int>(out.size()),
                        reinterpret_cast<unsigned char*>(out.data())) != 1) {
    throw std::invalid_argument("PBKDF2 failed (iterations must be >= 1)");
  }
  return out;
}

std::string xor_bytes(std::string_view a, std::string_view b) {
  std::string out(a);
  for (std::size_t i = 0; i < out.size() && i < b.size(); ++i) out[i] ^= b[i];
  return out;
}

bool equal_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// RFC 5802 "printable": %x21-2B / %x2D-7E, i.e. visible ASCII except ','.
bool is_printable_nonce(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < 0x21 || c > 0x7e || c == ',') return false;
  }
  return true;
}

// A positive decimal int, digits only (no sign, no spaces), as an iteration count.
std::optional<int> parse_iterations(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  long long value = 0;
  std::from_chars(s.data(), s.data() + s.size(), value);
  if (value < 1 || value > INT_MAX) return std::nullopt;
  return static_cast<int>(value);
}

// One "x=value" of a SCRAM message, with where it starts in the message.
struct Attribute {
  char name;
  std::string_view value;
  std::size_t offset;
};

// Splits "a=1,b=2". SCRAM values never contain ',' (user names escape it as "=2C"),
// so splitting on ',' is exact. nullopt if any part is not ALPHA "=" value.
std::optional<std::vector<Attribute>> split_attributes(std::string_view text) {
  std::vector<Attribute> out;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(',', start);
    std::string_view part = text.substr(start, end == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : end - start);
    bool alpha = !part.empty() && ((part[0] >= 'a' && part[0] <= 'z') ||
                                   (part[0] >= 'A' && part[0] <= 'Z'));
    if (!alpha || part.size() < 2 || part[1] != '=') return std::nullopt;
    out.push_back({part[0], part.substr(2), start});
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

struct Keys {
  std::string client_key;
  std::string stored_key;
  std::string server_key;
};

Keys derive_keys(std::string_view password, std::string_view salt, int iterations) {
  std::string salted = salted_password(password, salt, iterations);
  Keys keys;
  keys.client_key = hmac(salted, "Client Key");
  keys.stored_key = sha256(keys.client_key);
  keys.server_key = hmac(salted, "Server Key");
  return keys;
}

// The client side's keys, kept: the proxy logs in to a shard with the same password
// and the shard sends the role's same salt and iteration count every time, so every
// new backend connection would run the same PBKDF2 (4096 rounds by default, about
// 1.5 ms of the worker thread's time) again; a burst of connects (start-up, a pool
// refilled after a failover) stalled the sessions of that thread that long per connect.
// Process-wide, at most 64 entries (a bound, not a policy: cleared when full). Only for
// the proxy's own passwords: a client's guess (auth: password) is never kept.
Keys client_keys(std::string_view password, std::string_view salt, int iterations) {
  static std::mutex mu;
  static std::unordered_map<std::string, Keys> kept;
  std::string key = std::to_string(iterations);
  key.push_back('\0');
  key.append(salt);
  key.push_back('\0');
  key.append(password);
  {
    std::lock_guard lock(mu);
    if (auto it = kept.find(key); it != kept.end()) return it->second;
  }
  Keys keys = derive_keys(password, salt, iterations);
  std::lock_guard lock(mu);
  if (kept.size() >= 64) kept.clear();
  kept.emplace(std::move(key), keys);
  return keys;
}

bool is_usable(const Verifier& v) {
  return v.iterations >= 1 && !v.salt.empty() && v.stored_key.size() == kKeyLength &&
         v.server_key.size() == kKeyLength;
}

// Same shape as a real verifier, stable per (seed, user) so that asking twice for the
// same unknown user shows the same salt, as a real user would. The labels keep the
// three derivations apart; '\0' keeps label and user name apart.
Verifier fake_verifier(std::string_view fake_seed, std::string_view user) {
  auto derive = [&](std::string_view label) {
    std::string input(label);
    input.push_back('\0');
    input.append(user);
    return hmac(fake_seed, input);
  };
  Verifier v;
  v.iterations = kDefaultIterations;
  v.salt = derive("splitpoint scram fake salt").substr(0, kSaltBytes);
  v.stored_key = derive("splitpoint scram fake stored key");
  v.server_key = derive("splitpoint scram fake server key");
  return v;
}

}  // namespace

// ---- base64 (RFC 4648, standard alphabet, padded) ----

namespace {
constexpr char kAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view raw) {
  std::string out;
  out.reserve((raw.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < raw.size(); i += 3) {
    std::size_t n = std::min<std::size_t>(3, raw.size() - i);
    unsigned v = static_cast<unsigned char>(raw[i]) << 16;
    if (n > 1) v |= static_cast<unsigned char>(raw[i + 1]) << 8;
    if (n > 2) v |= static_cast<unsigned char>(raw[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(n > 1 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back(n > 2 ? kAlphabet[v & 63] : '=');
  }
  return out;
}

// Strict: no whitespace, padding required and only at the end, unused bits zero. Every
// encoder in the wild (PostgreSQL, libpq, drivers) produces exactly this form.
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    bool last = i + 4 == text.size();
    std::size_t data_chars = last ? 4 - pad : 4;
    unsigned v = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      int d = j < data_chars ? base64_value(text[i + j]) : 0;
      if (d < 0) return std::nullopt;
      v = (v << 6) | static_cast<unsigned>(d);
    }
    out.push_back(static_cast<char>(v >> 16));
    if (data_chars > 2) out.push_back(static_cast<char>(v >> 8));
    if (data_chars > 3) out.push_back(static_cast<char>(v));
    if ((data_chars == 2 && (v & 0xffff) != 0) || (data_chars == 3 && (v & 0xff) != 0)) {
      return std::nullopt;  // non-zero bits under the padding
    }
  }
  return out;
}

// ---- verifier text ----

std::optional<Verifier> parse_verifier(std::string_view text) {
  // SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
  std::string prefix = std::string(kMechanism) + "$";
  if (!text.starts_with(prefix)) return std::nullopt;
  text.remove_prefix(prefix.size());
  std::size_t dollar = text.find('$');
  if (dollar == std::string_view::npos) return std::nullopt;
  std::string_view params = text.substr(0, dollar);
  std::string_view keys = text.substr(dollar + 1);
  std::size_t colon1 = params.find(':');
  std::size_t colon2 = keys.find(':');
  if (colon1 == std::string_view::npos || colon2 == std::string_view::npos) {
    return std::nullopt;
  }
  auto iterations = parse_iterations(params.substr(0, colon1));
  auto salt = base64_decode(params.substr(colon1 + 1));
  auto stored_key = base64_decode(keys.substr(0, colon2));
  auto server_key = base64_decode(keys.substr(colon2 + 1));
  if (!iterations || !salt || !stored_key || !server_key) return std::nullopt;
  Verifier v{*iterations, std::move(*salt), std::move(*stored_key), std::move(*server_key)};
  if (!is_usable(v)) return std::nullopt;
  return v;
}

std::string format_verifier(const Verifier& v) {
  return std::string(kMechanism) + "$" + std::to_string(v.iterations) + ":" +
         base64_encode(v.salt) + "$" + base64_encode(v.stored_key) + ":" +
         base64_encode(v.server_key);
}

namespace {
using namespace std::string_view_literals;
constexpr std::string_view kClientKeyPrefix = "\0SCRAM-SHA-256-CLIENT-KEY$"sv;
}  // namespace

bool is_client_key(std::string_view credential) { return credential.starts_with(kClientKeyPrefix); }

std::string format_client_key(const Verifier& v, std::string_view client_key) {
  return std::string(kClientKeyPrefix) + std::to_string(v.iterations) + ":" + base64_encode(v.salt) + "$" +
         base64_encode(client_key) + ":" + base64_encode(v.server_key);
}

// A client key's keys (format_client_key), when it was checked against a verifier of
// this salt and iteration count.
static std::optional<Keys> keys_of_client_key(std::string_view text, std::string_view salt, int iterations) {
  if (!is_client_key(text)) return std::nullopt;
  // The same layout as a verifier's, ClientKey in the StoredKey's place.
  auto v = parse_verifier(std::string(kMechanism) + "$" + std::string(text.substr(kClientKeyPrefix.size())));
  if (!v || v->iterations != iterations || v->salt != salt) return std::nullopt;
  return Keys{v->stored_key, sha256(v->stored_key), v->server_key};
}

std::uint64_t key_derivations() { return g_derivations.load(std::memory_order_relaxed); }

Verifier make_verifier(std::string_view password, std::string_view salt, int iterations) {
  Keys keys = derive_keys(password, salt, iterations);
  return Verifier{iterations, std::string(salt), std::move(keys.stored_key),
                  std::move(keys.server_key)};
}

Verifier make_verifier(std::string_view password) {
  return make_verifier(password, random_bytes(kSaltBytes));
}

// ---- server side ----

ServerExchange::ServerExchange(std::optional<Verifier> verifier, std::string_view fake_seed,
                               std::string_view user, std::optional<std::string> cert_hash)
    : verifier_(std::move(verifier)), cert_hash_(std::move(cert_hash)) {
  // A broken stored verifier is treated like a missing one: the client gets the same
  // generic failure, rather than a different error that tells it something.
  if (verifier_ && !is_usable(*verifier_)) verifier_.reset();
  effective_ = verifier_ ? *verifier_ : fake_verifier(fake_seed, user);
}

std::vector<std::string_view> ServerExchange::mechanisms() const {
  if (cert_hash_) return {kMechanismPlus, kMechanism};
  return {kMechanism};
}

std::nullopt_t ServerExchange::refuse(const char* why) {
  error_ = why;
  return std::nullopt;
}

// gs2-header: "p=tls-server-end-point,," with -PLUS; "n,," or "y,," without, "y" only
// when binding was not offered. An authzid ("n,a=...,") is refused as PostgreSQL
// refuses it. Sets gs2_header_, or error_ and false.
bool ServerExchange::accept_gs2_header(std::string_view message, std::string_view mechanism) {
  const bool plus = mechanism == kMechanismPlus;
  if (plus ? !cert_hash_ : mechanism != kMechanism) {
    error_ = "client selected an invalid SASL authentication mechanism";
    return false;
  }
  std::string_view header = plus ? kGs2Binding
                            : message.starts_with(kGs2NoBinding) ? kGs2NoBinding
                                                                 : kGs2BindingUnused;
  if (plus && message.starts_with("p=") && !message.starts_with(kGs2BindingType)) {
    error_ = "unsupported SCRAM channel-binding type";
    return false;
  }
  if (!message.starts_with(header)) {
    error_ = kMalformed;
    return false;
  }
  if (header == kGs2BindingUnused && cert_hash_) {
    // The client can bind but believes the server cannot: someone removed -PLUS.
    error_ = "SCRAM channel binding negotiation error";
    return false;
  }
  gs2_header_ = header;
  return true;
}

std::optional<std::string> ServerExchange::handle_client_first(std::string_view message,
                                                               std::string_view mechanism) {
  if (!server_first_.empty()) return refuse(kMalformed);  // one exchange per object
  if (!accept_gs2_header(message, mechanism)) return std::nullopt;
  std::string_view bare = message.substr(gs2_header_.size());
  // client-first-message-bare: "n=<user>,r=<nonce>[,extensions]". The user name is
  // ignored: the one that counts came in the startup packet. A leading "m=" (mandatory
  // extension) fails the "n" check, as RFC 5802 requires.
  auto attrs = split_attributes(bare);
  if (!attrs || attrs->size() < 2 || (*attrs)[0].name != 'n' || (*attrs)[1].name != 'r' ||
      !is_printable_nonce((*attrs)[1].value)) {
    return refuse(kMalformed);
  }
  client_first_bare_ = bare;
  nonce_ = std::string((*attrs)[1].value) + base64_encode(random_bytes(kNonceBytes));
  server_first_ = "r=" + nonce_ + ",s=" + base64_encode(effective_.salt) +
                  ",i=" + std::to_string(effective_.iterations);
  return server_first_;
}

std::optional<std::string> ServerExchange::handle_client_final(std::string_view message) {
  if (nonce_.empty()) return refuse(kMalformed);  // no client-first yet, or already finished
  std::string nonce = std::move(nonce_);
  nonce_.clear();  // a single attempt per exchange, whatever the outcome

  // "c=<base64 gs2 header>,r=<nonce>[,extensions],p=<proof>"
  auto attrs = split_attributes(message);
  if (!attrs || attrs->size() < 3) return refuse(kMalformed);
  const Attribute& cbind = attrs->front();
  const Attribute& r = (*attrs)[1];
  const Attribute& p = attrs->back();
  if (cbind.name != 'c' || r.name != 'r' || p.name != 'p') return refuse(kMalformed);
  for (std::size_t i = 2; i + 1 < attrs->size(); ++i) {
    if ((*attrs)[i].name == 'p') return refuse(kMalformed);  // the proof comes once, last
  }
  // c= echoes the header the client sent, so a "y" cannot be turned into an "n"; with
  // -PLUS the certificate hash follows it (RFC 5802 section 7: cbind-input).
  std::string cbind_input = gs2_header_;
  if (gs2_header_ == kGs2Binding) cbind_input += *cert_hash_;
  if (!equal_secret(cbind.value, base64_encode(cbind_input))) return refuse(kBindingCheckFailed.data());
  if (r.value != nonce) return refuse(kMalformed);
  auto proof = base64_decode(p.value);
  if (!proof || proof->size() != kKeyLength) return refuse(kMalformed);

  std::string_view without_proof = message.substr(0, p.offset - 1);  // drop ",p=..."
  std::string auth_message =
      client_first_bare_ + "," + server_first_ + "," + std::string(without_proof);
  // ClientKey = proof XOR HMAC(StoredKey, AuthMessage); it must hash to StoredKey.
  std::string client_key = xor_bytes(*proof, hmac(effective_.stored_key, auth_message));
  bool proof_ok = equal_secret(sha256(client_key), effective_.stored_key);
  // Same work whether or not the user exists; only then does a fake verifier fail.
  if (!proof_ok || !verifier_) return refuse("password authentication failed");
  client_key_ = format_client_key(effective_, client_key);
  return "v=" + base64_encode(hmac(effective_.server_key, auth_message));
}

// ---- client side ----

ClientExchange::ClientExchange(std::string password) : password_(std::move(password)) {}

ClientExchange ClientExchange::with_client_key(std::string credential) {
  ClientExchange c(std::move(credential));
  c.client_key_ = true;
  return c;
}

std::string ClientExchange::client_first() {
  // Starts (or restarts) the exchange with a fresh nonce.
  client_nonce_ = base64_encode(random_bytes(kNonceBytes));
  client_first_bare_ = "n=,r=" + client_nonce_;
  expected_server_signature_.clear();
  return std::string(kGs2NoBinding) + client_first_bare_;
}

std::optional<std::string> ClientExchange::handle_server_first(std::string_view message) {
  if (client_first_bare_.empty() || !expected_server_signature_.empty()) return std::nullopt;
  // "r=<nonce>,s=<salt>,i=<iterations>"; nothing after, as libpq insists.
  auto attrs = split_attributes(message);
  if (!attrs || attrs->size() != 3 || (*attrs)[0].name != 'r' || (*attrs)[1].name != 's' ||
      (*attrs)[2].name != 'i') {
    return std::nullopt;
  }
  std::string_view nonce = (*attrs)[0].value;
  // The server must extend our nonce, not replace it (else it could replay an old one).
  if (!nonce.starts_with(client_nonce_) || nonce.size() == client_nonce_.size() ||
      !is_printable_nonce(nonce)) {
    return std::nullopt;
  }
  auto salt = base64_decode((*attrs)[1].value);
  auto iterations = parse_iterations((*attrs)[2].value);
  if (!salt || salt->empty() || !iterations) return std::nullopt;

  std::optional<Keys> passed;
  if (client_key_ && !(passed = keys_of_client_key(password_, *salt, *iterations))) {
    error_ = "the server's SCRAM verifier differs from the one the client was authenticated with";
    return std::nullopt;
  }
  Keys keys = passed ? *passed : client_keys(password_, *salt, *iterations);
  std::string without_proof =
      "c=" + std::string(kNoBindingCbind) + ",r=" + std::string(nonce);
  std::string auth_message =
      client_first_bare_ + "," + std::string(message) + "," + without_proof;
  std::string proof = xor_bytes(keys.client_key, hmac(keys.stored_key, auth_message));
  expected_server_signature_ = hmac(keys.server_key, auth_message);
  return without_proof + ",p=" + base64_encode(proof);
}

bool ClientExchange::verify_server_final(std::string_view message) const {
  // "v=<ServerSignature>"; "e=<error>" or anything else is a failure.
  if (expected_server_signature_.empty() || !message.starts_with("v=")) return false;
  auto signature = base64_decode(message.substr(2));
  return signature && equal_secret(*signature, expected_server_signature_);
}

}  // namespace splitpoint::protocol::scram
