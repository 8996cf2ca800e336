// The frontend bookkeeping (frontend.hpp): no I/O, only what the backend's messages
// mean for what the client was promised.
#include "server/net/frontend.hpp"

#include <algorithm>

#include "server/net/wire.hpp"

namespace splitpoint::server {

using routing::SessionCommand;

std::optional<ServerStatements::Clock::time_point> ServerStatements::made_at(const std::string& name) const {
  auto it = held_.find(name);
  if (it == held_.end()) return std::nullopt;
  return it->second.made;
}

bool ServerStatements::use(const std::string& name) {
  auto it = held_.find(name);
  if (it == held_.end()) return false;
  it->second.last = ++tick_;
  return true;
}

void ServerStatements::made(const std::string& name) {
  held_[name] = Use{++tick_, Clock::now()};
}

std::vector<std::string> ServerStatements::make_room(std::size_t limit) {
  std::vector<std::string> names;
  if (limit == 0 || held_.size() < limit) return names;
  std::vector<std::pair<std::uint64_t, const std::string*>> by_use;
  for (const auto& [name, u] : held_) by_use.emplace_back(u.last, &name);
  const std::size_t n = held_.size() - limit + 1;
  std::partial_sort(by_use.begin(), by_use.begin() + static_cast<std::ptrdiff_t>(n), by_use.end());
  for (std::size_t i = 0; i < n; ++i) names.push_back(*by_use[i].second);
  for (const auto& name : names) held_.erase(name);
  return names;
}

void Frontend::drop_until_sync(bool error, BackendState& b) {
  // A Close skipped leaves its statement held, even where a Parse of the same name
  // after it was skipped too (the proxy re-creates a statement with Close + Parse).
  std::vector<std::string> kept;
  while (!expect.empty() && (expect.front().type != 'Z' || (error && expect.front().query_in_batch))) {
    const Expect& e = expect.front();
    if (e.type == '1' && !e.name.empty()) b.prepared.erase(e.name);
    if (e.type == '3' && !e.name.empty()) kept.push_back(e.name);
    if (e.type == '1' && !e.swallow) {
      // Only if the client has not parsed that name again since.
      auto it = prepared.find(e.text);
      if (it != prepared.end() && it->second.parse_seq == e.parse_seq) prepared.erase(it);
    }
    expect.pop_front();
  }
  for (const auto& name : kept) b.prepared.kept(name);
}

void Frontend::forget_prepared(BackendState& b) {
  prepared.clear();
  sql_prepared.clear();
  b.prepared.clear();
  b.sql_prepared.clear();
  b.unnamed_owner = {0, 0};
}

// The ReadyForQuery of the oldest Sync/Query owed: the client's transaction status and
// the session state its statements changed.
Frontend::Verdict Frontend::on_ready_for_query(std::string_view body, BackendState& b) {
  Verdict v;
  drop_until_sync(false, b);
  portal_rows.clear();
  char status = body.size() == 1 ? body[0] : 'E';
  b.status = status;
  if (expect.empty()) {
    v.unexpected = true;
    return v;
  }
  Expect e = std::move(expect.front());
  expect.pop_front();
  if (e.swallow) {
    v.to_client = false;
    return v;
  }
  v.finished = true;
  v.started = e.started;
  v.route = e.route;
  batch_failed = false;
  // A block the proxy itself failed stays failed, whatever a shard that does not
  // know says, until ROLLBACK.
  client_txn = proxy_failed_txn && status == 'T' ? 'E' : status;
  if (!e.failed && e.sql_prepare) {
    // Not transactional in PostgreSQL: kept even if the transaction rolls back.
    b.sql_prepared[e.sql_prepare->name] = e.sql_prepare->token;
    std::string name = e.sql_prepare->name;
    sql_prepared[name] = std::move(*e.sql_prepare);
  }
  if (!e.failed)
    for (auto& c : e.commands) pending_commands.push_back(std::move(c));
  if (status == 'I') {
    if (last_tag_rollback) pending_commands.clear();
    v.idle = true;
  }
  return v;
}

Frontend::Verdict Frontend::on_backend(char type, std::string_view body, BackendState& b) {
  Verdict v;
  switch (type) {
    case '1':
    case '2':
    case '3':
      if (expect.empty() || expect.front().type != type) {
        v.unexpected = true;
        return v;
      }
      v.to_client = !expect.front().swallow;
      if (type == '2') portal_rows = std::move(expect.front().rows);
      expect.pop_front();
      return v;
    case 'E': {
      const bool injected = in_injected_query();
      if (!injected && std::none_of(expect.begin(), expect.end(), [](const Expect& e) { return e.type == 'Z' && !e.swallow; }))
        open_batch_failed = true;
      drop_until_sync(true, b);
      portal_rows.clear();
      if (!expect.empty()) expect.front().failed = true;
      v.injected_failed = injected;
      v.to_client = v.client_error = !injected;
      if (!injected) batch_failed = true;
      return v;
    }
    case 'Z':
      return on_ready_for_query(body, b);
    case 'C':
      if (in_injected_query()) {
        v.to_client = false;
        return v;
      }
      last_tag_rollback = body.rfind("ROLLBACK", 0) == 0;
      v.count_tag = true;
      return v;
    case 'A':
      return v;
    case 'G':
      if (!expect.empty() && expect.front().is_sync) {
        // COPY IN started by an Execute: the Syncs already sent arrive during COPY
        // and PostgreSQL ignores them; only a Sync after CopyDone/CopyFail counts.
        std::erase_if(expect, [](const Expect& e) { return e.is_sync; });
        copy_in = true;
        sent_after_sync = true;
      }
      return v;
    default:  // ('S' too: the caller notes ParameterStatus whoever it is for)
      v.to_client = !in_injected_query();
      return v;
  }
}

bool ClientSettings::apply(std::vector<SessionCmd>& commands) {
  bool backend_reset = false;
  for (auto& c : commands) {
    // SET and RESET SESSION AUTHORIZATION put the role back to NONE as well.
    if (c.name == "session_authorization" && (c.kind == SessionCommand::set || c.kind == SessionCommand::reset))
      std::erase_if(sets, [](auto& p) { return p.first == "role"; });
    auto it = std::find_if(sets.begin(), sets.end(), [&](auto& p) { return p.first == c.name; });
    switch (c.kind) {
      case SessionCommand::set:
        if (it != sets.end()) it->second = c.text;
        else sets.emplace_back(c.name, c.text);
        break;
      case SessionCommand::reset:
        if (it != sets.end()) sets.erase(it);
        // PostgreSQL puts a startup packet's parameter back to that value; the backend
        // (another client's startup) put it to its own default.
        if (std::any_of(startup.begin(), startup.end(), [&](auto& p) { return p.first == c.name; }))
          backend_reset = true;
        break;
      case SessionCommand::discard_all:
        drawn = {};
        [[fallthrough]];
      case SessionCommand::reset_all:
        sets.clear();
        backend_reset = true;
        break;
      default:
        break;
    }
  }
  commands.clear();
  rebuild_script();
  return backend_reset;
}

void ClientSettings::rebuild_script() {
  script.clear();
  for (auto& [k, v] : startup) script += set_config_sql(k, v);
  for (auto& [k, stmt] : sets) script += stmt + ";";
  if (script.empty()) {
    hash = kStateDefault;
  } else {
    hash = std::hash<std::string>{}(script) | 1;
    if (hash == kStateUnknown) hash ^= 2;
  }
}

}  // namespace splitpoint::server
