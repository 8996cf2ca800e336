// `auth: passthrough` (SPEC §14): a client's password verifier read from PostgreSQL
// itself with `auth_query`, as PgBouncer's auth_query.
#pragma once

#include <optional>
#include <string>

#include "server/cluster/runtime.hpp"

namespace splitpoint::server {

struct VerifierLookup {
  std::optional<std::string> verifier;  // none: no such user (or it may not log in)
  std::string error;                    // set when the lookup itself failed
};

// Connects to the auth_query shard's primary as auth_query's user, runs its query with
// `$1` the user name as a literal, and hangs up; each step within
// timeouts.server_connect.
awaitable<VerifierLookup> look_up_verifier(const Runtime& rt, const std::string& user);

// The user `look_up_verifier` found, for Login::authenticate: no plaintext, the
// verifier's SCRAM or md5 form. Nullopt for a verifier it cannot use (a plaintext
// password stored by PostgreSQL before 10, or something else).
std::optional<UserAuth> passthrough_user(const std::string& name, const std::string& verifier);

}  // namespace splitpoint::server
