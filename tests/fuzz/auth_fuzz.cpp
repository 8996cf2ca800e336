// libFuzzer target for start-up and authentication: SCRAM-SHA-256 (protocol/scram,
// RFC 5802/7677) from both sides, MD5 (protocol/md5), base64 and the verifier text, and
// the start-up/password messages of protocol/messages as the session and the backend
// login read them. The first byte picks a mode; FuzzedDataProvider gives the fields.
// Properties, besides "no crash, no sanitizer report":
//   honest     an exchange between our client and our server (password, salt, 1..16
//              iterations, user, maybe a TLS certificate hash from the input) succeeds
//              on both sides; so does one from an RFC 5802 reference client written
//              here with OpenSSL (input nonce, "n,,", "y,," or SCRAM-SHA-256-PLUS with
//              "p=tls-server-end-point,,", extensions), whose proof with one byte
//              flipped, or made from another password, or whose binding data with
//              another hash, is refused; "y" while -PLUS is offered (a downgrade) and
//              -PLUS without a hash are refused; an unknown user (the fake verifier)
//              is refused and shows the same salt twice
//   server     a mechanism, client-first/client-final from the input ("@r" stands for
//              the combined nonce, "@c" for the right binding data, a final ",p=@p"
//              for the right proof): a client-first accepted only with a gs2 header
//              that fits the mechanism and the offer; a client-final only with a real
//              verifier, the right binding data and the reference proof, answered
//              with the reference signature
//   client     server-first/server-final from the input ("@r": our nonce, "@v": the
//              right signature): a client-final only for a nonce that extends ours,
//              carrying the reference proof; a server-final accepted only if it is
//              exactly "v=" + the reference signature
//   bytes      base64_decode accepts only canonical text (encode(decode(t)) == t) and
//              base64_encode is OpenSSL's; parse_verifier(format_verifier(v)) == v;
//              md5 verifier/response are the reference MD5s, response refuses what
//              is_verifier refuses
//   login      bytes as a client connection (SSLRequest, GSSENCRequest, StartupMessage,
//              then 'p' messages) through the steps of Login::authenticate (an
//              SSLRequest stands for TLS: -PLUS offered): never authenticated without
//              the password
//   backend    bytes as a shard's start-up answers ('R' messages) through the steps of
//              the backend login: a server-final is never accepted without the keys
// Server-first messages whose iteration count exceeds 64 are not given to the client
// side: PBKDF2 with a count up to INT_MAX is what a real server may ask for, and slow.
// Build and run: tests/fuzz/run
#include <fuzzer/FuzzedDataProvider.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/framing.hpp"
#include "protocol/md5.hpp"
#include "protocol/messages.hpp"
#include "protocol/scram.hpp"

namespace {

using namespace splitpoint::protocol;
namespace sc = splitpoint::protocol::scram;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "auth_fuzz: %s\n", what.c_str());
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

std::string next(FuzzedDataProvider& in, std::size_t max = 256) { return in.ConsumeRandomLengthString(max); }

// A password as the wire carries it, a C string: without NUL. (HMAC pads a short key
// with zeros, so "pw" and "pw\0" are the same key; no client can send the second.)
std::string next_password(FuzzedDataProvider& in) {
  std::string pw = next(in, 64);
  std::erase(pw, '\0');
  return pw;
}

// ---- the reference: RFC 5802 section 3 straight from OpenSSL ----

std::string hmac256(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string sha256(const std::string& data) {
  unsigned char out[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return std::string(reinterpret_cast<char*>(out), sizeof out);
}

struct RefKeys {
  std::string client_key, stored_key, server_key;
};

RefKeys ref_keys(const std::string& password, const std::string& salt, int iterations) {
  unsigned char salted[32];
  PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                    reinterpret_cast<const unsigned char*>(salt.data()), static_cast<int>(salt.size()), iterations,
                    EVP_sha256(), 32, salted);
  std::string s(reinterpret_cast<char*>(salted), 32);
  RefKeys k{hmac256(s, "Client Key"), "", hmac256(s, "Server Key")};
  k.stored_key = sha256(k.client_key);
  return k;
}

std::string ref_proof(const RefKeys& k, const std::string& auth_message) {
  std::string proof = k.client_key, signature = hmac256(k.stored_key, auth_message);
  for (std::size_t i = 0; i < proof.size(); ++i) proof[i] ^= signature[i];
  return proof;
}

std::string ref_base64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string ref_md5_hex(std::string_view data) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), d, &n, EVP_md5(), nullptr);
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", d[i]);
    out += two;
  }
  return out;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The value of the attribute `name` in "a=1,b=2,...", or nullopt.
std::optional<std::string> attribute(std::string_view message, char name) {
  std::size_t start = 0;
  for (;;) {
    std::size_t end = message.find(',', start);
    std::string_view part = message.substr(start, end == std::string_view::npos ? end : end - start);
    if (part.size() >= 2 && part[0] == name && part[1] == '=') return std::string(part.substr(2));
    if (end == std::string_view::npos) return std::nullopt;
    start = end + 1;
  }
}

// Visible ASCII but ',' (RFC 5802 "printable"), never empty.
std::string printable(std::string_view raw) {
  std::string out;
  for (char c : raw) out.push_back(static_cast<char>(0x21 + static_cast<unsigned char>(c) % 0x5e));
  replace_all(out, ",", "~");
  return out.empty() ? "x" : out;
}

// False when some "i=<digits>" asks for more than 64 iterations (see the top).
bool cheap_iterations(std::string_view message) {
  for (std::size_t at = message.find("i="); at != std::string_view::npos; at = message.find("i=", at + 1)) {
    std::size_t end = message.find_first_not_of("0123456789", at + 2);
    std::string_view digits = message.substr(at + 2, end == std::string_view::npos ? end : end - at - 2);
    std::size_t nonzero = digits.find_first_not_of('0');
    if (nonzero != std::string_view::npos && (digits.size() - nonzero > 2 || std::stoi(std::string(digits)) > 64))
      return false;
  }
  return true;
}

// ---- honest exchanges ----

struct Role {
  std::string password, salt, user;
  int iterations = 1;
  sc::Verifier verifier;  // made by make_verifier from the three above
};

Role read_role(FuzzedDataProvider& in) {
  Role r{next_password(in), next(in, 32), next(in, 32)};
  if (r.salt.empty()) r.salt = "s";
  r.iterations = in.ConsumeIntegralInRange(1, 16);
  r.verifier = sc::make_verifier(r.password, r.salt, r.iterations);
  return r;
}

// The certificate hash of a TLS client connection (tls-server-end-point), or none.
using CertHash = std::optional<std::string>;

constexpr std::string_view kGs2Plus = "p=tls-server-end-point,,";

void ours_against_ours(const Role& role, const CertHash& hash) {
  sc::ServerExchange server(role.verifier, "seed", role.user, hash);
  check(server.mechanisms().size() == (hash ? 2u : 1u) && server.mechanisms().back() == sc::kMechanism &&
            (!hash || server.mechanisms().front() == sc::kMechanismPlus),
        "honest: wrong mechanisms offered");
  sc::ClientExchange client(role.password);  // "n,,": cannot bind, fine with or without TLS
  auto server_first = server.handle_client_first(client.client_first());
  check(server_first.has_value(), "honest: server refused our client-first");
  auto client_final = client.handle_server_first(*server_first);
  check(client_final.has_value(), "honest: client refused our server-first");
  auto server_final = server.handle_client_final(*client_final);
  check(server_final.has_value(), "honest: server refused our client-final");
  check(client.verify_server_final(*server_final), "honest: client refused our server-final");
  check(!server.handle_client_final(*client_final), "honest: a second client-final was answered");
}

struct RefClient {
  std::string mechanism, gs2, first_bare, without_proof, auth_message;
};

// The reference client's first message for a gs2 header: "n,,", "y,," or kGs2Plus
// (with -PLUS).
RefClient ref_client(std::string gs2, const std::string& user, const std::string& nonce,
                     const std::string& extension) {
  std::string mechanism = gs2 == kGs2Plus ? sc::kMechanismPlus : sc::kMechanism;
  return RefClient{mechanism, std::move(gs2), "n=" + user + ",r=" + nonce + extension};
}

// Runs the reference client against `server` up to (not including) its proof; c= is
// base64(cbind_input).
RefClient ref_start(sc::ServerExchange& server, RefClient c, const std::string& cbind_input) {
  auto server_first = server.handle_client_first(c.gs2 + c.first_bare, c.mechanism);
  check(server_first.has_value(), "reference: client-first refused");
  std::string nonce = *attribute(c.first_bare, 'r');
  auto combined = attribute(*server_first, 'r');
  check(combined && combined->starts_with(nonce) && combined->size() > nonce.size(),
        "reference: the server's nonce does not extend the client's");
  c.without_proof = "c=" + ref_base64(cbind_input) + ",r=" + *combined;
  c.auth_message = c.first_bare + "," + *server_first + "," + c.without_proof;
  return c;
}

std::optional<std::string> ref_finish(sc::ServerExchange& server, const RefClient& c, const RefKeys& keys) {
  return server.handle_client_final(c.without_proof + ",p=" + ref_base64(ref_proof(keys, c.auth_message)));
}

// Refusals before any proof: "y" while -PLUS is offered (a downgrade), -PLUS without
// a certificate hash. True when the exchange may go on.
bool ref_negotiates(const Role& role, const CertHash& hash, const RefClient& c) {
  sc::ServerExchange server(role.verifier, "seed", role.user, hash);
  bool refused = !server.handle_client_first(c.gs2 + c.first_bare, c.mechanism);
  bool must_refuse = (c.gs2 == "y,," && hash) || (c.gs2 == kGs2Plus && !hash);
  check(refused == must_refuse, must_refuse ? "reference: downgrade or -PLUS without TLS accepted"
                                            : "reference: client-first refused");
  return !refused;
}

void reference_against_ours(const Role& role, const CertHash& hash, FuzzedDataProvider& in) {
  constexpr std::string_view kHeaders[] = {"n,,", "y,,", kGs2Plus};
  RefClient start = ref_client(std::string(kHeaders[in.ConsumeIntegralInRange(0, 2)]), printable(next(in, 16)),
                               printable(next(in, 32)), in.ConsumeBool() ? ",x=" + printable(next(in, 16)) : "");
  if (!ref_negotiates(role, hash, start)) return;
  const bool plus = start.gs2 == kGs2Plus;
  const std::string cbind_input = plus ? start.gs2 + *hash : start.gs2;
  RefKeys keys = ref_keys(role.password, role.salt, role.iterations);

  sc::ServerExchange good(role.verifier, "seed", role.user, hash);
  RefClient c = ref_start(good, start, cbind_input);
  auto final_msg = ref_finish(good, c, keys);
  check(final_msg.has_value(), "reference: right proof refused");
  check(*final_msg == "v=" + ref_base64(hmac256(keys.server_key, c.auth_message)), "reference: wrong server signature");

  sc::ServerExchange flipped(role.verifier, "seed", role.user, hash);
  c = ref_start(flipped, start, cbind_input);
  std::string proof = ref_proof(keys, c.auth_message);
  proof[in.ConsumeIntegralInRange<std::size_t>(0, proof.size() - 1)] ^= in.ConsumeIntegralInRange(1, 255);
  check(!flipped.handle_client_final(c.without_proof + ",p=" + ref_base64(proof)), "reference: flipped proof accepted");

  if (plus) {  // other binding data, under a valid proof
    std::string other_hash = *hash;
    if (other_hash.empty() || in.ConsumeBool()) other_hash.push_back(in.ConsumeIntegral<char>());
    else other_hash[in.ConsumeIntegralInRange<std::size_t>(0, other_hash.size() - 1)] ^= in.ConsumeIntegralInRange(1, 255);
    sc::ServerExchange bound(role.verifier, "seed", role.user, hash);
    check(!ref_finish(bound, ref_start(bound, start, start.gs2 + other_hash), keys),
          "reference: another certificate's hash accepted");
  }

  std::string other = next_password(in);
  if (other == role.password) return;
  sc::ServerExchange wrong(role.verifier, "seed", role.user, hash);
  check(!ref_finish(wrong, ref_start(wrong, start, cbind_input), ref_keys(other, role.salt, role.iterations)),
        "reference: another password's proof accepted");
}

void unknown_user(const Role& role, FuzzedDataProvider& in) {
  std::string seed = next(in, 32);
  sc::ServerExchange a(std::nullopt, seed, role.user), b(std::nullopt, seed, role.user);
  auto first_a = a.handle_client_first("n,,n=,r=abc");
  auto first_b = b.handle_client_first("n,,n=,r=abc");
  check(first_a && first_b, "unknown user: client-first refused");
  check(attribute(*first_a, 's') == attribute(*first_b, 's'), "unknown user: the salt changes between attempts");
  check(attribute(*first_a, 'i') == std::to_string(sc::kDefaultIterations), "unknown user: unusual iteration count");
  RefKeys keys = ref_keys(role.password, role.salt, role.iterations);
  std::string without_proof = "c=biws,r=" + *attribute(*first_a, 'r');
  std::string auth_message = "n=,r=abc," + *first_a + "," + without_proof;
  check(!a.handle_client_final(without_proof + ",p=" + ref_base64(ref_proof(keys, auth_message))),
        "unknown user: accepted");
}

CertHash read_cert_hash(FuzzedDataProvider& in) {
  if (!in.ConsumeBool()) return std::nullopt;
  return in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, 64));
}

void honest(FuzzedDataProvider& in) {
  Role role = read_role(in);
  CertHash hash = read_cert_hash(in);
  ours_against_ours(role, hash);
  reference_against_ours(role, hash, in);
  unknown_user(role, in);
}

// ---- the server side with the input's messages ----

// The mechanism a client chose: either SCRAM mechanism or anything.
std::string read_mechanism(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: return sc::kMechanism;
    case 1: return sc::kMechanismPlus;
    default: return next(in, 32);
  }
}

// What a server that took `client_first` for `mechanism` must have seen: a header that
// fits the mechanism and what was offered. Returns the gs2 header.
std::string check_negotiation(std::string_view client_first, std::string_view mechanism, const CertHash& hash) {
  if (mechanism == sc::kMechanismPlus) {
    check(hash && client_first.starts_with(kGs2Plus), "server: -PLUS accepted without TLS or binding");
    return std::string(kGs2Plus);
  }
  check(mechanism == sc::kMechanism, "server: an unknown mechanism accepted");
  check(client_first.starts_with("n,,") || (client_first.starts_with("y,,") && !hash),
        "server: a downgrade or a foreign gs2 header accepted");
  return std::string(client_first.substr(0, 3));
}

void server_side(FuzzedDataProvider& in) {
  Role role = read_role(in);
  bool known = in.ConsumeBool();
  CertHash hash = read_cert_hash(in);
  std::string mechanism = read_mechanism(in), client_first = next(in), client_final = next(in);
  std::optional<sc::Verifier> verifier;
  if (known) verifier = role.verifier;
  sc::ServerExchange server(verifier, role.user, role.user, hash);
  auto server_first = server.handle_client_first(client_first, mechanism);
  if (!server_first) return;
  const std::string gs2 = check_negotiation(client_first, mechanism, hash);
  check(!server.handle_client_first(client_first, mechanism), "server: a second client-first was answered");
  auto client_nonce = attribute(client_first.substr(gs2.size()), 'r'), combined = attribute(*server_first, 'r');
  check(server_first->starts_with("r=") && client_nonce && combined && combined->starts_with(*client_nonce),
        "server: server-first does not extend the client's nonce");
  check(attribute(*server_first, 's') && attribute(*server_first, 'i'), "server: server-first without s= or i=");

  const std::string cbind = ref_base64(mechanism == sc::kMechanismPlus ? gs2 + *hash : gs2);
  replace_all(client_final, "@r", *combined);
  replace_all(client_final, "@c", cbind);
  std::string bare = client_first.substr(gs2.size());
  RefKeys keys = ref_keys(role.password, role.salt, role.iterations);
  if (client_final.ends_with(",p=@p")) {
    std::string without_proof = client_final.substr(0, client_final.size() - 5);
    client_final = without_proof + ",p=" + ref_base64(ref_proof(keys, bare + "," + *server_first + "," + without_proof));
  }
  auto server_final = server.handle_client_final(client_final);
  check(!server.handle_client_final(client_final), "server: a second client-final was answered");
  if (!server_final) return;
  check(known, "server: an unknown user was accepted");
  check(client_final.starts_with("c=" + cbind + ","), "server: accepted other channel binding data");
  std::size_t p = client_final.rfind(",p=");
  std::string auth_message = bare + "," + *server_first + "," + client_final.substr(0, p);
  check(client_final.substr(p + 3) == ref_base64(ref_proof(keys, auth_message)), "server: accepted a wrong proof");
  check(*server_final == "v=" + ref_base64(hmac256(keys.server_key, auth_message)), "server: wrong server signature");
}

// ---- the client side with the input's messages ----

void client_side(FuzzedDataProvider& in) {
  std::string password = next_password(in), server_first = next(in), server_final = next(in);
  sc::ClientExchange client(password);
  std::string first = client.client_first();
  check(first.starts_with("n,,n=,r="), "client: unexpected client-first");
  std::string nonce = first.substr(8);
  replace_all(server_first, "@r", nonce);
  if (!cheap_iterations(server_first)) return;
  auto client_final = client.handle_server_first(server_first);
  if (!client_final) {
    check(!client.verify_server_final(server_final), "client: server-final accepted without an exchange");
    return;
  }
  auto combined = attribute(server_first, 'r');
  check(combined && combined->starts_with(nonce) && *combined != nonce, "client: accepted a nonce that does not extend ours");
  auto salt = sc::base64_decode(*attribute(server_first, 's'));
  RefKeys keys = ref_keys(password, *salt, std::stoi(*attribute(server_first, 'i')));
  std::string without_proof = "c=biws,r=" + *combined;
  std::string auth_message = first.substr(3) + "," + server_first + "," + without_proof;
  check(*client_final == without_proof + ",p=" + ref_base64(ref_proof(keys, auth_message)), "client: wrong proof");
  std::string right = "v=" + ref_base64(hmac256(keys.server_key, auth_message));
  if (server_final == "@v") server_final = right;
  check(client.verify_server_final(server_final) == (server_final == right), "client: server-final misjudged");
}

// ---- base64, verifier text, MD5 ----

void base64_and_verifiers(FuzzedDataProvider& in) {
  std::string text = next(in, 512);
  check(sc::base64_encode(text) == ref_base64(text), "base64: encoding differs from OpenSSL's");
  check(sc::base64_decode(sc::base64_encode(text)) == text, "base64: no round trip");
  if (auto raw = sc::base64_decode(text)) check(sc::base64_encode(*raw) == text, "base64: accepted a non-canonical text");

  if (auto v = sc::parse_verifier(text)) {
    check(v->iterations >= 1 && !v->salt.empty() && v->stored_key.size() == 32 && v->server_key.size() == 32,
          "verifier: accepted an unusable one");
    auto again = sc::parse_verifier(sc::format_verifier(*v));
    check(again && again->iterations == v->iterations && again->salt == v->salt && again->stored_key == v->stored_key &&
              again->server_key == v->server_key,
          "verifier: parse(format(parse(t))) differs");
  }
  sc::Verifier made{in.ConsumeIntegralInRange(1, INT_MAX), next(in, 64), in.ConsumeBytesAsString(32),
                    in.ConsumeBytesAsString(32)};
  auto parsed = sc::parse_verifier(sc::format_verifier(made));
  bool usable = !made.salt.empty() && made.stored_key.size() == 32 && made.server_key.size() == 32;
  check(parsed.has_value() == usable, "verifier: a usable one does not parse, or an unusable one does");
  if (parsed)
    check(parsed->iterations == made.iterations && parsed->salt == made.salt && parsed->stored_key == made.stored_key &&
              parsed->server_key == made.server_key,
          "verifier: parse(format(v)) != v");

  std::string user = next(in, 64), password = next(in, 64), salt = in.ConsumeBytesAsString(4);
  std::string verifier = md5::verifier(user, password);
  check(verifier == "md5" + ref_md5_hex(password + user) && md5::is_verifier(verifier), "md5: wrong verifier");
  check(md5::response(verifier, salt) == "md5" + ref_md5_hex(verifier.substr(3) + salt), "md5: wrong response");
  bool threw = false;
  try {
    md5::response(text, salt);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  check(threw == !md5::is_verifier(text), "md5: response and is_verifier disagree");
}

// ---- conversations, as the session and the backend login read them ----

// A startup-phase packet as Session::read_startup takes it: the user of a 3.x
// StartupMessage (a minor version other than 0 is patched to 3.0, as the session
// does), nullopt for anything that ends the start-up.
std::optional<std::string> startup_user(std::string_view& buf, bool& tls) {
  for (int round = 0; round < 3; ++round) {
    FrameResult r = decode_startup_frame(buf);
    if (r.status != FrameStatus::ok) return std::nullopt;
    buf.remove_prefix(r.frame.size);
    auto code = startup_code(r.frame.body);
    if (!code || *code == kCancelRequestCode) return std::nullopt;
    tls = tls || *code == kSSLRequestCode;
    if (*code == kSSLRequestCode || *code == kGSSENCRequestCode) continue;
    if (static_cast<std::uint32_t>(*code) >> 16 != 3) return std::nullopt;
    std::string body(r.frame.body);
    body.replace(0, 4, std::string("\0\3\0\0", 4));
    auto startup = StartupMessage::decode(body);
    if (!startup) return std::nullopt;
    const std::string* user = startup->find("user");
    return user ? *user : std::string();
  }
  return std::nullopt;
}

std::optional<std::string> password_message(std::string_view& buf) {
  FrameResult r = decode_frame(buf, Direction::frontend, FrameLimits{});
  if (r.status != FrameStatus::ok || r.frame.type != 'p') return std::nullopt;
  buf.remove_prefix(r.frame.size);
  return std::string(r.frame.body);
}

// Login::authenticate's SCRAM and MD5 steps; "alice" exists, any other user not.
void login(std::string_view buf, bool use_md5) {
  bool tls = false;
  auto user = startup_user(buf, tls);
  if (!user) return;
  static const Role alice{"secret", "salt", "alice", 2, sc::make_verifier("secret", "salt", 2)};
  std::optional<sc::Verifier> verifier;
  if (*user == alice.user) verifier = alice.verifier;
  auto body = password_message(buf);
  if (!body) return;
  if (use_md5) {
    char salt[4];  // random, as the session's: the input cannot have learnt the answer
    RAND_bytes(reinterpret_cast<unsigned char*>(salt), 4);
    auto pw = PasswordMessage::decode(*body);
    bool good = pw && verifier &&
                pw->password == md5::response(md5::verifier(alice.user, alice.password), std::string_view(salt, 4));
    check(!good, "login: md5 accepted");
    return;
  }
  auto init = SASLInitialResponse::decode(*body);
  if (!init || !init->data) return;
  sc::ServerExchange exchange(verifier, "seed", *user, tls ? CertHash(std::string(32, 'h')) : std::nullopt);
  if (!exchange.handle_client_first(*init->data, init->mechanism)) return;
  body = password_message(buf);
  if (!body) return;
  auto resp = SASLResponse::decode(*body);
  check(!resp || !exchange.handle_client_final(resp->data), "login: authenticated without the password");
}

// The backend login's steps (server/net/backend.cpp) over a shard's 'R' messages.
void backend(std::string_view buf) {
  std::optional<sc::ClientExchange> scram;
  for (;;) {
    FrameResult r = decode_frame(buf, Direction::backend, FrameLimits{});
    if (r.status != FrameStatus::ok || r.frame.type != 'R') return;
    buf.remove_prefix(r.frame.size);
    auto auth = Authentication::decode(r.frame.body);
    if (!auth) return;
    if (auth->code == AuthCode::md5_password) {
      check(md5::response(md5::verifier("u", "pw"), auth->md5_salt).size() == 35, "backend: md5 response size");
    } else if (auth->code == AuthCode::sasl) {
      scram.emplace("pw");
      scram->client_first();
    } else if (auth->code == AuthCode::sasl_continue) {
      if (!scram || !cheap_iterations(auth->data) || !scram->handle_server_first(auth->data)) return;
    } else if (auth->code == AuthCode::sasl_final) {
      check(!scram || !scram->verify_server_final(auth->data), "backend: a forged server-final accepted");
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 8192) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  FuzzedDataProvider in(data + 1, size - 1);
  switch (data[0] % 7) {
    case 0: honest(in); break;
    case 1: server_side(in); break;
    case 2: client_side(in); break;
    case 3: base64_and_verifiers(in); break;
    case 4: login(rest, false); break;
    case 5: login(rest, true); break;
    case 6: backend(rest); break;
  }
  return 0;
}
