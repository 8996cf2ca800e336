// Keys the proxy generates (keys.cpp, SPEC §3): an INSERT whose key the proxy fills in
// from the column's own default, drawn in blocks (KeyCache) on scatter.combine's shard;
// and the values it drew for this session, which stand in for its own nextval calls
// (`SELECT currval(...)` / `SELECT lastval()` answered with them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"
#include "routing/router.hpp"
#include "server/cluster/runtime.hpp"
#include "server/net/asio.hpp"

namespace splitpoint::server {

class Session;

class KeyDrawing {
 public:
  explicit KeyDrawing(Session& s) : s_(s) {}

  // An INSERT whose key the proxy generates (route.generate_keys), run with its keys. In
  // the extended protocol the keys are parameters after the client's. False: the
  // session ends; refused statements get their error here. (`keep`: the statement's
  // shapes, used again for the rewritten statement, see Session::fetch_shapes.)
  awaitable<bool> insert_with_generated_keys(routing::Route& route, KeptShapes& keep, std::string_view sql,
                                             const protocol::Bind* bind = nullptr,
                                             const std::vector<std::int32_t>* types = nullptr);
  // An INSERT the proxy rewrote (keys filled in, rows pulled), routed again and run; in
  // the extended protocol with `bind`'s parameters (of `types`).
  awaitable<bool> run_rewritten_insert(routing::Route& route, KeptShapes& keep, std::string text,
                                       const protocol::Bind* bind = nullptr, std::vector<std::int32_t> types = {});
  // Where KeyCache keeps the values of `request`'s column (this session's database).
  std::string key_cache_key(const routing::KeyRequest& request) const;
  // `n` values of `request`'s column; nullopt: none can be made, `error` says why.
  awaitable<std::optional<std::vector<std::string>>> draw_keys(const routing::KeyRequest& request, std::size_t n,
                                                               KeyCache::Source& source, std::string& error);
  // The values the proxy drew for this session (ClientSettings::drawn: DISCARD ALL
  // forgets them) stand in for its own nextval calls (answer_from_drawn: the text that
  // answers a currval/lastval read with them).
  void note_drawn(const std::string& sequence, const std::string& value);
  std::optional<std::string> answer_from_drawn(const routing::Route& route, std::string_view sql);
  void forget_drawn_lastval(const routing::Route& route);

 private:
  awaitable<std::optional<KeyCache::Source>> key_source(const routing::KeyRequest& request, const std::string& cache_key,
                                                        std::string& error);

  Session& s_;
};

}  // namespace splitpoint::server
