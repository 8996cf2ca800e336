// SCRAM-SHA-256: RFC 7677's vector, verifiers made by a real PostgreSQL 15, full
// exchanges between our two sides, malformed messages, and SCRAM-SHA-256-PLUS channel
// binding (tls-server-end-point) on the server side.
#include "protocol/scram.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

using namespace splitpoint::protocol::scram;

namespace {

// Taken from a throwaway PostgreSQL 15.x (initdb, SET password_encryption =
// 'scram-sha-256', CREATE ROLE ... PASSWORD ..., SELECT rolpassword FROM pg_authid).
struct RealRole {
  const char* password;
  const char* verifier;
};
const RealRole kRealRoles[] = {
    {"correct horse battery staple",
     "SCRAM-SHA-256$4096:8TcVjjic3EaSmwYQLBvnIw==$7JSntfinnwWPSZ/Myc7EhKMeqfKNeEKWnlc4rdvUOG0=:"
     "57QLy8Q1u5c+FocqE6no+QnsuACDZiAbf2mP34U7aG4="},
    {"p,w=d\"'x",  // characters that mean something in SCRAM messages
     "SCRAM-SHA-256$4096:3VjBgDBbWVfJx/Ikgzd1kQ==$xRjMYve0+6rzmiXUZpQd+3d9wen6tiUR1sb7BAabveA=:"
     "spIdOWMxdHmMNxcM7OGkIohR3JKU1GWeX9T8cxzD48g="},
    {"p\xc3\xa4ssw\xc3\xb6rd",  // "pässwörd", UTF-8 already in NFKC form
     "SCRAM-SHA-256$4096:rU91Bh1O0ymVWJPW1puNoA==$IQMVl44eCvFgYaSUMlelldtmdfx1v2N5NFsMwLmDwmg=:"
     "zXzqQ8CVtxjtOUVMFXS/L5R75ELOnhxTPtoIV5Si8cg="},
};

std::string b64d(std::string_view s) {
  auto out = base64_decode(s);
  REQUIRE(out);
  return *out;
}

std::string hmac256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

// The client's proof, computed straight from RFC 5802 section 3 in the test so that
// hand-written client-final messages (e.g. with "y,,") can carry a valid proof.
std::string reference_proof(std::string_view password, std::string_view salt, int iterations,
                            std::string_view auth_message) {
  unsigned char salted[32];
  PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                    reinterpret_cast<const unsigned char*>(salt.data()),
                    static_cast<int>(salt.size()), iterations, EVP_sha256(), 32, salted);
  std::string client_key = hmac256(std::string(reinterpret_cast<char*>(salted), 32), "Client Key");
  unsigned char stored[32];
  SHA256(reinterpret_cast<const unsigned char*>(client_key.data()), client_key.size(), stored);
  std::string signature = hmac256(std::string(reinterpret_cast<char*>(stored), 32), auth_message);
  for (std::size_t i = 0; i < client_key.size(); ++i) client_key[i] ^= signature[i];
  return client_key;
}

struct Outcome {
  bool server_accepted = false;
  bool client_verified = false;
};

Outcome run_exchange(ServerExchange& server, ClientExchange& client) {
  auto server_first = server.handle_client_first(client.client_first());
  REQUIRE(server_first);
  auto client_final = client.handle_server_first(*server_first);
  REQUIRE(client_final);
  auto server_final = server.handle_client_final(*client_final);
  Outcome out;
  out.server_accepted = server_final.has_value();
  out.client_verified = server_final && client.verify_server_final(*server_final);
  return out;
}

std::string attribute(std::string_view message, char name) {
  std::string key = std::string(1, name) + "=";
  auto pos = message.find(key);
  REQUIRE(pos != std::string_view::npos);
  auto end = message.find(',', pos);
  return std::string(message.substr(pos + 2, end == std::string_view::npos ? end : end - pos - 2));
}

const std::string kRfcSalt = "W22ZaJ0SNY7soEsUEjb6gQ==";

}  // namespace

TEST_CASE("base64 matches RFC 4648 and is strict", "[scram]") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_encode("n,,") == "biws");
  CHECK(base64_encode("y,,") == "eSws");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (std::size_t n = 0; n <= all.size(); n += 37) {
    std::string raw = all.substr(0, n);
    CHECK(base64_decode(base64_encode(raw)) == raw);
  }
  CHECK(base64_decode("Zm9vYg==") == std::string("foob"));
  CHECK(base64_decode("Zm9vYmE=") == std::string("fooba"));
  for (const char* bad : {"Zg", "Zg=", "Z===", "====", "Zh==", "Zm9=", "Zm9v\n", "Zm 9",
                          "=Zm9", "Zm=v", "Zg==Zg==", "Zm9-", "Zm9_", "Zm9v*A=="}) {
    INFO(bad);
    CHECK_FALSE(base64_decode(bad));
  }
}

TEST_CASE("key derivation matches RFC 7677's example", "[scram]") {
  // RFC 7677 section 3: user "user", password "pencil".
  Verifier v = make_verifier("pencil", b64d(kRfcSalt), 4096);
  // Keys from an independent implementation (Python hashlib/hmac), which reproduces the
  // RFC's proof and server signature below.
  CHECK(base64_encode(v.stored_key) == "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=");
  CHECK(base64_encode(v.server_key) == "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=");

  const std::string auth_message =
      "n=user,r=rOprNGfwEbeRWgbNEkqO,"
      "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
      "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
  // ClientKey = proof XOR HMAC(StoredKey, AuthMessage) must hash to StoredKey.
  std::string client_key = b64d("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
  std::string client_signature = hmac256(v.stored_key, auth_message);
  for (std::size_t i = 0; i < client_key.size(); ++i) client_key[i] ^= client_signature[i];
  unsigned char stored[32];
  SHA256(reinterpret_cast<const unsigned char*>(client_key.data()), client_key.size(), stored);
  CHECK(std::string(reinterpret_cast<char*>(stored), 32) == v.stored_key);
  CHECK(base64_encode(hmac256(v.server_key, auth_message)) ==
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
}

TEST_CASE("the RFC 7677 client-first message is accepted by the server", "[scram]") {
  ServerExchange server(make_verifier("pencil", b64d(kRfcSalt), 4096), "seed", "user");
  auto first = server.handle_client_first("n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
  REQUIRE(first);
  CHECK(first->starts_with("r=rOprNGfwEbeRWgbNEkqO"));
  CHECK(first->ends_with(",s=" + kRfcSalt + ",i=4096"));
  // Server nonce part: 18 random bytes -> 24 base64 characters.
  CHECK(attribute(*first, 'r').size() == std::string("rOprNGfwEbeRWgbNEkqO").size() + 24);
}

TEST_CASE("verifiers from a real PostgreSQL 15", "[scram]") {
  for (const RealRole& role : kRealRoles) {
    INFO(role.verifier);
    auto v = parse_verifier(role.verifier);
    REQUIRE(v);
    CHECK(v->iterations == 4096);
    CHECK(v->salt.size() == 16);
    CHECK(format_verifier(*v) == role.verifier);
    // Our derivation reproduces PostgreSQL's keys from its salt.
    CHECK(format_verifier(make_verifier(role.password, v->salt, v->iterations)) ==
          role.verifier);

    ServerExchange good_server(*v, "seed", "someone");
    ClientExchange good_client(role.password);
    Outcome good = run_exchange(good_server, good_client);
    CHECK(good.server_accepted);
    CHECK(good.client_verified);

    ServerExchange bad_server(*v, "seed", "someone");
    ClientExchange bad_client(std::string(role.password) + "x");
    CHECK_FALSE(run_exchange(bad_server, bad_client).server_accepted);
  }
}

TEST_CASE("parse_verifier rejects malformed text", "[scram]") {
  const std::string key = base64_encode(std::string(32, 'k'));
  const std::string salt = base64_encode("saltsaltsaltsalt");
  CHECK(parse_verifier("SCRAM-SHA-256$4096:" + salt + "$" + key + ":" + key));
  for (const std::string& bad : {
           "SCRAM-SHA-1$4096:" + salt + "$" + key + ":" + key,
           "scram-sha-256$4096:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$0:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$-1:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$40x6:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$99999999999:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$:" + salt + "$" + key + ":" + key,
           "SCRAM-SHA-256$4096:$" + key + ":" + key,                     // empty salt
           "SCRAM-SHA-256$4096:" + salt + "$" + key,                     // one key
           "SCRAM-SHA-256$4096" + salt + "$" + key + ":" + key,          // no ':'
           "SCRAM-SHA-256$4096:" + salt + ":" + key + ":" + key,         // no second '$'
           "SCRAM-SHA-256$4096:" + salt + "$" + key + ":" + key + "$",  // trailing junk
           "SCRAM-SHA-256$4096:" + salt + "$" + base64_encode(std::string(31, 'k')) + ":" + key,
           "SCRAM-SHA-256$4096:" + salt + "$" + key + ":" + key.substr(1),
           "SCRAM-SHA-256$4096:sa!t$" + key + ":" + key,
           std::string("md5704ac3bc41dadc414b9aa9dbf5e63cdd"),
           std::string(""),
       }) {
    INFO(bad);
    CHECK_FALSE(parse_verifier(bad));
  }
}

TEST_CASE("make_verifier round-trips and salts randomly", "[scram]") {
  Verifier a = make_verifier("secret");
  Verifier b = make_verifier("secret");
  CHECK(a.iterations == kDefaultIterations);
  CHECK(a.salt.size() == 16);
  CHECK(a.salt != b.salt);
  CHECK(a.stored_key != b.stored_key);
  auto parsed = parse_verifier(format_verifier(a));
  REQUIRE(parsed);
  CHECK(parsed->iterations == a.iterations);
  CHECK(parsed->salt == a.salt);
  CHECK(parsed->stored_key == a.stored_key);
  CHECK(parsed->server_key == a.server_key);

  Verifier few = make_verifier("secret", "salt", 1);
  CHECK(parse_verifier(format_verifier(few)).has_value());
  CHECK(format_verifier(few).starts_with("SCRAM-SHA-256$1:c2FsdA==$"));
}

TEST_CASE("full exchange: right password, wrong password", "[scram]") {
  Verifier v = make_verifier("right");
  {
    ServerExchange server(v, "seed", "alice");
    ClientExchange client("right");
    Outcome out = run_exchange(server, client);
    CHECK(out.server_accepted);
    CHECK(out.client_verified);
  }
  {
    ServerExchange server(v, "seed", "alice");
    ClientExchange client("wrong");
    CHECK_FALSE(run_exchange(server, client).server_accepted);
  }
  {
    ServerExchange server(v, "seed", "alice");
    ClientExchange client("");
    CHECK_FALSE(run_exchange(server, client).server_accepted);
  }
}

TEST_CASE("passthrough: the client key a server recovered logs in where the same verifier is stored", "[scram]") {
  Verifier v = make_verifier("secret");
  ServerExchange front(v, "seed", "alice");
  ClientExchange client("secret");
  REQUIRE(run_exchange(front, client).server_accepted);
  const std::string key = front.client_key();
  REQUIRE(key.starts_with(std::string("\0SCRAM-SHA-256-CLIENT-KEY$4096:", 31)));
  REQUIRE(is_client_key(key));
  {
    ServerExchange shard(v, "other seed", "alice");  // another server, same verifier
    ClientExchange proxy = ClientExchange::with_client_key(key);
    Outcome out = run_exchange(shard, proxy);
    CHECK(out.server_accepted);
    CHECK(out.client_verified);
  }
  {
    // The same password stored with another salt: the key does not fit; said so.
    ServerExchange shard(make_verifier("secret"), "seed", "alice");
    ClientExchange proxy = ClientExchange::with_client_key(key);
    auto first = shard.handle_client_first(proxy.client_first());
    REQUIRE(first);
    CHECK_FALSE(proxy.handle_server_first(*first));
    CHECK(std::string_view(proxy.error()).find("differs") != std::string_view::npos);
  }
  // A password that looks like a client key is a password (the fuzzer's find).
  {
    const std::string odd = "SCRAM-SHA-256-CLIENT-KEY$" + key.substr(26);
    ServerExchange server(make_verifier(odd), "seed", "alice");
    ClientExchange client(odd);
    CHECK(run_exchange(server, client).server_accepted);
  }
  // A refused exchange recovers nothing.
  ServerExchange refused(v, "seed", "alice");
  ClientExchange wrong("wrong");
  CHECK_FALSE(run_exchange(refused, wrong).server_accepted);
  CHECK(refused.client_key().empty());
}

TEST_CASE("unknown user: looks real until the final step, then fails", "[scram]") {
  auto server_first_for = [](std::optional<Verifier> v, std::string_view user) {
    ServerExchange server(std::move(v), "server secret", user);
    ClientExchange client("whatever");
    auto first = server.handle_client_first(client.client_first());
    REQUIRE(first);
    return *first;
  };
  std::string ghost = server_first_for(std::nullopt, "ghost");
  std::string real = server_first_for(make_verifier("pw"), "alice");
  // Same shape as a real user's challenge: 16-byte salt, 4096 iterations.
  CHECK(b64d(attribute(ghost, 's')).size() == b64d(attribute(real, 's')).size());
  CHECK(attribute(ghost, 'i') == "4096");
  // Stable per user (a real user's salt does not change between attempts) ...
  CHECK(attribute(server_first_for(std::nullopt, "ghost"), 's') == attribute(ghost, 's'));
  // ... but differs between users and between server secrets.
  CHECK(attribute(server_first_for(std::nullopt, "ghost2"), 's') != attribute(ghost, 's'));
  ServerExchange other_seed(std::nullopt, "other secret", "ghost");
  ClientExchange c("x");
  CHECK(attribute(*other_seed.handle_client_first(c.client_first()), 's') !=
        attribute(ghost, 's'));

  // The client gets through client-first and computes a final; only then it fails.
  ServerExchange server(std::nullopt, "server secret", "ghost");
  ClientExchange client("whatever");
  auto first = server.handle_client_first(client.client_first());
  REQUIRE(first);
  auto final_msg = client.handle_server_first(*first);
  REQUIRE(final_msg);
  CHECK_FALSE(server.handle_client_final(*final_msg));

  // A stored verifier that is unusable is treated as an unknown user.
  Verifier broken = make_verifier("pw");
  broken.stored_key.pop_back();
  ServerExchange broken_server(broken, "server secret", "ghost");
  ClientExchange broken_client("pw");
  CHECK_FALSE(run_exchange(broken_server, broken_client).server_accepted);
}

TEST_CASE("gs2 header: n and y accepted, p and authzid refused", "[scram]") {
  const std::string salt = b64d(kRfcSalt);
  for (std::string gs2 : {"n,,", "y,,"}) {
    INFO(gs2);
    ServerExchange server(make_verifier("pencil", salt, 4096), "seed", "user");
    std::string bare = "n=,r=clientnonce";
    auto first = server.handle_client_first(gs2 + bare);
    REQUIRE(first);
    std::string without_proof = "c=" + base64_encode(gs2) + ",r=" + attribute(*first, 'r');
    std::string proof =
        reference_proof("pencil", salt, 4096, bare + "," + *first + "," + without_proof);
    auto final_msg = server.handle_client_final(without_proof + ",p=" + base64_encode(proof));
    CHECK(final_msg);
  }
  for (const char* bad : {"p=tls-server-end-point,,n=,r=abc", "n,a=bob,n=,r=abc", "n,n=,r=abc",
                          "x,,n=,r=abc", ",,n=,r=abc", "n,,", "", "n"}) {
    INFO(bad);
    ServerExchange server(make_verifier("pw"), "seed", "user");
    CHECK_FALSE(server.handle_client_first(bad));
  }
}

TEST_CASE("c= must be the gs2 header the client sent", "[scram]") {
  const std::string salt = b64d(kRfcSalt);
  auto attempt = [&](std::string gs2, std::string cbind) {
    ServerExchange server(make_verifier("pencil", salt, 4096), "seed", "user");
    std::string bare = "n=,r=clientnonce";
    auto first = server.handle_client_first(gs2 + bare);
    REQUIRE(first);
    std::string without_proof = "c=" + cbind + ",r=" + attribute(*first, 'r');
    // A valid proof over what was sent, so only the binding check can refuse it.
    std::string proof =
        reference_proof("pencil", salt, 4096, bare + "," + *first + "," + without_proof);
    return server.handle_client_final(without_proof + ",p=" + base64_encode(proof));
  };
  CHECK(attempt("n,,", "biws"));
  CHECK(attempt("y,,", "eSws"));
  CHECK_FALSE(attempt("n,,", "eSws"));
  CHECK_FALSE(attempt("y,,", "biws"));
  CHECK_FALSE(attempt("n,,", "cD10bHMtc2VydmVyLWVuZC1wb2ludCws"));  // "p=tls-server-end-point,,"
  CHECK_FALSE(attempt("n,,", ""));
}

// ---- SCRAM-SHA-256-PLUS, tls-server-end-point (RFC 5929, SPEC §11) ----

namespace {

const std::string kGs2Plus = "p=tls-server-end-point,,";

// One exchange against a server that was given `cert_hash`: client-first with `gs2`
// for `mechanism`, then a client-final whose c= is base64(cbind_input) and whose proof
// is valid over what was sent, so that only the channel binding can refuse it.
struct BindingAttempt {
  std::optional<std::string> first, final_msg;
  std::string error;
};

BindingAttempt bind_attempt(std::optional<std::string> cert_hash, std::string_view mechanism, std::string gs2,
                            std::string cbind_input) {
  const std::string salt = b64d(kRfcSalt);
  ServerExchange server(make_verifier("pencil", salt, 4096), "seed", "user", std::move(cert_hash));
  BindingAttempt out;
  const std::string bare = "n=,r=clientnonce";
  out.first = server.handle_client_first(gs2 + bare, mechanism);
  out.error = server.error();
  if (!out.first) return out;
  std::string without_proof = "c=" + base64_encode(cbind_input) + ",r=" + attribute(*out.first, 'r');
  std::string auth_message = bare + "," + *out.first + "," + without_proof;
  out.final_msg = server.handle_client_final(
      without_proof + ",p=" + base64_encode(reference_proof("pencil", salt, 4096, auth_message)));
  out.error = server.error();
  return out;
}

}  // namespace

TEST_CASE("channel binding: -PLUS is offered only with a certificate hash", "[scram]") {
  ServerExchange plain(make_verifier("pw"), "seed", "user");
  CHECK(plain.mechanisms() == std::vector<std::string_view>{kMechanism});
  ServerExchange tls(make_verifier("pw"), "seed", "user", std::string(32, 'h'));
  CHECK(tls.mechanisms() == std::vector<std::string_view>{kMechanismPlus, kMechanism});
  // Without a hash, -PLUS is not a mechanism the client may choose.
  CHECK_FALSE(plain.handle_client_first(kGs2Plus + "n=,r=abc", kMechanismPlus));
  CHECK(std::string(plain.error()) == "client selected an invalid SASL authentication mechanism");
}

TEST_CASE("channel binding: the certificate hash after the gs2 header is accepted", "[scram]") {
  for (std::size_t size : {32, 48, 64}) {  // SHA-256, SHA-384, SHA-512 certificates
    INFO(size);
    std::string hash(size, '\0');
    for (std::size_t i = 0; i < size; ++i) hash[i] = static_cast<char>(i * 7 + 1);
    auto a = bind_attempt(hash, kMechanismPlus, kGs2Plus, kGs2Plus + hash);
    REQUIRE(a.first);
    CHECK(a.final_msg);
    CHECK(a.final_msg->starts_with("v="));
  }
}

TEST_CASE("channel binding: other binding data is refused under a valid proof", "[scram]") {
  const std::string hash(32, 'h');
  std::string flipped = hash;
  flipped[31] ^= 1;
  for (const std::string& cbind : {kGs2Plus + flipped, kGs2Plus, kGs2Plus + hash + "x", kGs2Plus + hash.substr(1),
                                   hash, std::string("n,,"), "p=tls-unique,," + hash}) {
    INFO(cbind);
    auto a = bind_attempt(hash, kMechanismPlus, kGs2Plus, cbind);
    REQUIRE(a.first);
    CHECK_FALSE(a.final_msg);
    CHECK(a.error == "SCRAM channel binding check failed");
  }
}

TEST_CASE("channel binding: y is a downgrade when -PLUS was offered, n is fine", "[scram]") {
  const std::string hash(32, 'h');
  auto y = bind_attempt(hash, kMechanism, "y,,", "y,,");
  CHECK_FALSE(y.first);
  CHECK(y.error == "SCRAM channel binding negotiation error");
  auto n = bind_attempt(hash, kMechanism, "n,,", "n,,");
  REQUIRE(n.first);
  CHECK(n.final_msg);
  // Without TLS (no hash) "y" is what a binding-capable client rightly says.
  auto y_plain = bind_attempt(std::nullopt, kMechanism, "y,,", "y,,");
  REQUIRE(y_plain.first);
  CHECK(y_plain.final_msg);
}

TEST_CASE("channel binding: mechanism and gs2 header must agree", "[scram]") {
  const std::string hash(32, 'h');
  struct Case {
    const char* mechanism;
    std::string gs2;
    const char* error;
  };
  for (const Case& c : {Case{kMechanismPlus, "n,,", "malformed SCRAM message"},
                        Case{kMechanismPlus, "y,,", "malformed SCRAM message"},
                        Case{kMechanismPlus, "p=tls-unique,,", "unsupported SCRAM channel-binding type"},
                        Case{kMechanismPlus, "p=tls-server-end-point,a=bob,", "malformed SCRAM message"},
                        Case{kMechanismPlus, "p=tls-server-end-point,", "malformed SCRAM message"},
                        Case{kMechanism, kGs2Plus, "malformed SCRAM message"},
                        Case{"SCRAM-SHA-1", "n,,", "client selected an invalid SASL authentication mechanism"},
                        Case{"", "n,,", "client selected an invalid SASL authentication mechanism"}}) {
    INFO(c.mechanism << " " << c.gs2);
    auto a = bind_attempt(hash, c.mechanism, c.gs2, c.gs2);
    CHECK_FALSE(a.first);
    CHECK(a.error == c.error);
  }
}

TEST_CASE("client-final checks hold even under a valid proof", "[scram]") {
  // The proof covers the whole message, so tampering usually breaks it anyway; these
  // carry a proof computed over the tampered text so that each check is tested alone.
  const std::string salt = b64d(kRfcSalt);
  auto attempt = [&](auto make_without_proof) {
    ServerExchange server(make_verifier("pencil", salt, 4096), "seed", "user");
    const std::string bare = "n=,r=clientnonce";
    auto first = server.handle_client_first("n,," + bare);
    REQUIRE(first);
    std::string without_proof = make_without_proof(attribute(*first, 'r'));
    std::string proof =
        reference_proof("pencil", salt, 4096, bare + "," + *first + "," + without_proof);
    return server.handle_client_final(without_proof + ",p=" + base64_encode(proof));
  };
  const std::string junk_proof = base64_encode(std::string(32, 'x'));
  CHECK(attempt([](std::string nonce) { return "c=biws,r=" + nonce; }));
  CHECK(attempt([](std::string nonce) { return "c=biws,r=" + nonce + ",x=ext"; }));
  CHECK_FALSE(attempt([](std::string) { return std::string("c=biws,r=clientnonce"); }));
  CHECK_FALSE(attempt([](std::string nonce) { return "c=biws,r=" + nonce + "x"; }));
  CHECK_FALSE(attempt([](std::string nonce) { return "c=biws,r=" + nonce.substr(1); }));
  CHECK_FALSE(attempt([&](std::string nonce) { return "c=biws,r=" + nonce + ",p=" + junk_proof; }));
  CHECK_FALSE(attempt([](std::string nonce) { return "r=" + nonce + ",c=biws"; }));
  CHECK_FALSE(attempt([](std::string nonce) { return "c=biws,x=ext,r=" + nonce; }));
}

TEST_CASE("malformed client-first-message-bare", "[scram]") {
  for (const char* bad : {"n,,r=abc", "n,,n=", "n,,n=,r=", "n,,n=,r=ab\x01" "c",
                          "n,,n=,r=ab c", "n,,m=ext,n=,r=abc", "n,,r=abc,n=",
                          "n,,n=,,r=abc", "n,,n=,r=abc,", "n,,n=,=abc", "n,,n=,1=abc"}) {
    INFO(bad);
    ServerExchange server(make_verifier("pw"), "seed", "user");
    CHECK_FALSE(server.handle_client_first(bad));
  }
  // The user name in the message is ignored; extensions after the nonce are allowed.
  ServerExchange named(make_verifier("pw"), "seed", "user");
  CHECK(named.handle_client_first("n,,n=someone=2Celse,r=abc"));
  ServerExchange extended(make_verifier("pw"), "seed", "user");
  CHECK(extended.handle_client_first("n,,n=,r=abc,x=ext"));
}

TEST_CASE("malformed client-final-message", "[scram]") {
  auto fresh = [](ServerExchange& server, ClientExchange& client) {
    auto first = server.handle_client_first(client.client_first());
    REQUIRE(first);
    auto final_msg = client.handle_server_first(*first);
    REQUIRE(final_msg);
    return *final_msg;
  };
  Verifier v = make_verifier("pw");
  auto tampered = [&](auto edit) {
    ServerExchange server(v, "seed", "user");
    ClientExchange client("pw");
    std::string msg = fresh(server, client);
    return server.handle_client_final(edit(msg));
  };
  auto replace = [](std::string s, std::string_view from, std::string_view to) {
    auto pos = s.find(from);
    REQUIRE(pos != std::string::npos);
    return s.replace(pos, from.size(), to);
  };
  // Sanity: untouched, it passes.
  CHECK(tampered([](std::string m) { return m; }));
  // Nonce mismatch: one character changed, truncated, or only the client's part.
  CHECK_FALSE(tampered([&](std::string m) {
    auto pos = m.find(",p=") - 1;
    m[pos] = m[pos] == 'A' ? 'B' : 'A';
    return m;
  }));
  CHECK_FALSE(tampered([&](std::string m) { return replace(m, ",p=", "x,p="); }));
  CHECK_FALSE(tampered([&](std::string m) { return m.erase(m.find(",p=") - 3, 3); }));
  // Missing fields.
  CHECK_FALSE(tampered([&](std::string m) { return m.substr(m.find(",r=") + 1); }));
  CHECK_FALSE(tampered([&](std::string m) { return m.substr(0, m.find(",p=")); }));
  CHECK_FALSE(tampered([&](std::string m) {
    return m.substr(0, m.find(",r=")) + m.substr(m.find(",p="));
  }));
  CHECK_FALSE(tampered([](std::string) { return std::string(); }));
  // Bad proof: not base64, wrong length, flipped bit, empty.
  CHECK_FALSE(tampered([&](std::string m) { return replace(m, ",p=", ",p=!"); }));
  CHECK_FALSE(tampered([&](std::string m) { return m.substr(0, m.size() - 4); }));
  CHECK_FALSE(tampered([&](std::string m) {
    return m.substr(0, m.find(",p=") + 3) + base64_encode(std::string(31, 'x'));
  }));
  CHECK_FALSE(tampered([&](std::string m) {
    std::string proof = b64d(m.substr(m.find(",p=") + 3));
    proof[0] ^= 1;
    return m.substr(0, m.find(",p=") + 3) + base64_encode(proof);
  }));
  CHECK_FALSE(tampered([&](std::string m) { return m.substr(0, m.find(",p=") + 3); }));
  // Garbage after the proof, a second proof, reordered attributes.
  CHECK_FALSE(tampered([](std::string m) { return m + ",x=1"; }));
  CHECK_FALSE(tampered([](std::string m) { return m + ","; }));
  CHECK_FALSE(tampered([&](std::string m) {
    return replace(m, ",p=", ",p=" + base64_encode(std::string(32, 'x')) + ",p=");
  }));
  CHECK_FALSE(tampered([&](std::string m) {
    std::string c = m.substr(0, m.find(",r="));
    std::string rest = m.substr(m.find(",r=") + 1);
    std::string r = rest.substr(0, rest.find(",p="));
    return r + "," + c + rest.substr(rest.find(",p="));
  }));
}

TEST_CASE("server exchange is single use and ordered", "[scram]") {
  const std::string salt = b64d(kRfcSalt);
  Verifier v = make_verifier("pencil", salt, 4096);
  ServerExchange early(v, "seed", "user");
  CHECK_FALSE(early.handle_client_final("c=biws,r=abc,p=" + base64_encode(std::string(32, 'x'))));

  ServerExchange server(v, "seed", "user");
  const std::string bare = "n=,r=clientnonce";
  auto first = server.handle_client_first("n,," + bare);
  REQUIRE(first);
  CHECK_FALSE(server.handle_client_first("n,,n=,r=again"));
  std::string without_proof = "c=biws,r=" + attribute(*first, 'r');
  std::string wrong = without_proof + ",p=" + base64_encode(std::string(32, 'x'));
  CHECK_FALSE(server.handle_client_final(wrong));
  // No second guess on the same exchange, even with the right password's proof.
  std::string proof =
      reference_proof("pencil", salt, 4096, bare + "," + *first + "," + without_proof);
  CHECK_FALSE(server.handle_client_final(without_proof + ",p=" + base64_encode(proof)));
  CHECK_FALSE(server.handle_client_first("n,,n=,r=again"));
}

TEST_CASE("client rejects malformed or unsafe server-first", "[scram]") {
  ClientExchange client("pw");
  std::string first = client.client_first();
  REQUIRE(first.starts_with("n,,n=,r="));
  std::string nonce = first.substr(8);
  CHECK(nonce.size() == 24);  // 18 random bytes
  const std::string salt = ",s=" + base64_encode("saltsaltsaltsalt");
  for (const std::string& bad : {
           "r=" + nonce + salt,                                   // no iterations
           "r=" + nonce + "srv" + ",i=4096",                      // no salt
           salt.substr(1) + ",r=" + nonce + "srv,i=4096",         // wrong order
           "r=" + nonce + salt + ",i=4096",                       // nonce not extended
           "r=someone-elses-nonce" + salt + ",i=4096",            // nonce replaced
           "r=" + nonce.substr(1) + "srv" + salt + ",i=4096",     // prefix differs
           "r=" + nonce + "s v" + salt + ",i=4096",               // not printable
           "r=" + nonce + "srv,s=!!!!,i=4096",                    // bad base64 salt
           "r=" + nonce + "srv,s=,i=4096",                        // empty salt
           "r=" + nonce + "srv" + salt + ",i=0",
           "r=" + nonce + "srv" + salt + ",i=-1",
           "r=" + nonce + "srv" + salt + ",i=4096x",
           "r=" + nonce + "srv" + salt + ",i=",
           "r=" + nonce + "srv" + salt + ",i=4096,x=ext",         // libpq refuses extras
           "m=mandatory,r=" + nonce + "srv" + salt + ",i=4096",
           std::string("e=other-error"),
           std::string(),
       }) {
    INFO(bad);
    CHECK_FALSE(client.handle_server_first(bad));
  }
  // After all that, a proper server-first still works.
  CHECK(client.handle_server_first("r=" + nonce + "srv" + salt + ",i=1"));
}

TEST_CASE("client checks the server signature", "[scram]") {
  Verifier v = make_verifier("pw");
  ServerExchange server(v, "seed", "user");
  ClientExchange client("pw");
  CHECK_FALSE(client.verify_server_final("v=" + base64_encode(std::string(32, 'x'))));
  auto first = server.handle_client_first(client.client_first());
  REQUIRE(first);
  auto final_msg = client.handle_server_first(*first);
  REQUIRE(final_msg);
  auto server_final = server.handle_client_final(*final_msg);
  REQUIRE(server_final);
  CHECK(client.verify_server_final(*server_final));

  std::string signature = b64d(server_final->substr(2));
  signature[31] ^= 0x80;
  CHECK_FALSE(client.verify_server_final("v=" + base64_encode(signature)));
  CHECK_FALSE(client.verify_server_final("v=" + base64_encode(signature.substr(0, 31))));
  CHECK_FALSE(client.verify_server_final("e=invalid-proof"));
  CHECK_FALSE(client.verify_server_final(*server_final + ",x=1"));
  CHECK_FALSE(client.verify_server_final(""));

  // A server that holds a verifier for another password signs with the wrong ServerKey.
  Verifier other = make_verifier("other");
  ServerExchange impostor(other, "seed", "user");
  ClientExchange careful("pw");
  std::string careful_first = careful.client_first();
  auto f = impostor.handle_client_first(careful_first);
  REQUIRE(f);
  auto careful_final = careful.handle_server_first(*f);
  REQUIRE(careful_final);
  std::string auth_message = careful_first.substr(3) + "," + *f + "," +
                             careful_final->substr(0, careful_final->find(",p="));
  CHECK_FALSE(careful.verify_server_final("v=" + base64_encode(hmac256(other.server_key,
                                                                       auth_message))));
  // Sanity of the reconstruction: with the right ServerKey the same message is accepted.
  Verifier right = make_verifier("pw", b64d(attribute(*f, 's')), 4096);
  CHECK(careful.verify_server_final("v=" + base64_encode(hmac256(right.server_key,
                                                                 auth_message))));
}

TEST_CASE("the client side derives its keys once per password, salt and iterations", "[scram]") {
  // As a pool's connects to one shard: the same role (salt) every time.
  Verifier v = make_verifier("pool password", "0123456789abcdef", 4096);
  auto before = key_derivations();
  for (int i = 0; i < 3; ++i) {
    ServerExchange server(v, "seed", "user");
    ClientExchange client("pool password");
    auto out = run_exchange(server, client);
    CHECK(out.server_accepted);
    CHECK(out.client_verified);
  }
  CHECK(key_derivations() == before + 1);

  // Another password, salt or iteration count is derived (and checked) on its own.
  ServerExchange wrong(v, "seed", "user");
  ClientExchange guess("another password");
  CHECK_FALSE(run_exchange(wrong, guess).server_accepted);
  Verifier resalted = make_verifier("pool password", "fedcba9876543210", 4096);
  ServerExchange server2(resalted, "seed", "user");
  ClientExchange client2("pool password");
  CHECK(run_exchange(server2, client2).client_verified);
  Verifier more = make_verifier("pool password", "0123456789abcdef", 5000);
  ServerExchange server3(more, "seed", "user");
  ClientExchange client3("pool password");
  CHECK(run_exchange(server3, client3).client_verified);
  CHECK(key_derivations() == before + 1 + 1 + 2 + 2);  // (make_verifier derives too)
}
