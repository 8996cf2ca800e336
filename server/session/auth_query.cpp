#include "server/session/auth_query.hpp"

#include "protocol/md5.hpp"
#include "protocol/scram.hpp"
#include "server/net/backend.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace {

// The query with every `$1` (not `$10`...) replaced by the user name as a literal.
std::string with_user(const std::string& query, const std::string& user) {
  std::string out;
  for (std::size_t i = 0; i < query.size(); ++i) {
    const bool param = query.compare(i, 2, "$1") == 0 &&
                       (i + 2 >= query.size() || query[i + 2] < '0' || query[i + 2] > '9');
    if (!param) {
      out.push_back(query[i]);
      continue;
    }
    out += quote_literal(user);
    ++i;
  }
  return out;
}

}  // namespace

awaitable<VerifierLookup> look_up_verifier(const Runtime& rt, const std::string& user) {
  const auto& q = *rt.config.auth_query;
  const ShardPools& shard = *rt.shards.at(q.shard);
  BackendTarget t;
  t.shard = shard.shard().name;
  t.host_index = shard.hosts().primary();
  t.host = shard.hosts().endpoint(t.host_index).host;
  t.port = shard.hosts().endpoint(t.host_index).port;
  t.user = q.user;
  t.password = q.password;
  t.database = q.database;
  t.connect_timeout = rt.config.timeouts.server_connect;
  t.tls = shard.shard().tls;
  auto c = co_await connect_backend(t);
  if (!c.backend) co_return VerifierLookup{std::nullopt, c.message};
  auto r = co_await simple_query(*c.backend, with_user(q.query, user), rt.config.timeouts.server_connect);
  if (!r.ok()) co_return VerifierLookup{std::nullopt, r.lost ? "no answer in time" : r.error_message};
  std::string bye;
  protocol::encode_terminate(bye);
  co_await asio::async_write(c.backend->socket, asio::buffer(bye), use_nothrow);
  if (r.rows.empty() || r.rows[0].empty() || !r.rows[0][0]) co_return VerifierLookup{};
  co_return VerifierLookup{r.rows[0][0], ""};
}

std::optional<UserAuth> passthrough_user(const std::string& name, const std::string& verifier) {
  UserAuth a;
  a.name = name;
  if (auto v = protocol::scram::parse_verifier(verifier)) {
    a.scram = *v;
  } else if (protocol::md5::is_verifier(verifier)) {
    a.md5 = verifier;
  } else {
    return std::nullopt;
  }
  return a;
}

}  // namespace splitpoint::server
