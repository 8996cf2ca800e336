// The admin console's extended query protocol: the same commands as the simple protocol
// (admin_console.cpp), for drivers that prepare what they run often — psycopg 3 after
// five runs, asyncpg and pgjdbc at once — so that a monitoring loop does not break on
// its sixth `SHOW MOVES`. A command has no parameters. A portal's command runs at its
// Describe (whose RowDescription needs it) or at its Execute, once; a statement's
// Describe runs a SHOW to learn its columns and nothing else (no command with effects
// runs twice). After an error the rest of the batch is skipped until Sync, as PostgreSQL
// does. https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-EXT-QUERY
#include <strings.h>

#include <cctype>

#include "protocol/messages.hpp"
#include "protocol/sqlstate.hpp"
#include "server/session/admin_console.hpp"
#include "server/session/session.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

namespace {

// A command's answer split into its RowDescription (empty: none) and the rest.
struct Answer {
  std::string description, rest;
  bool failed = false;  // an ErrorResponse among the rest
};

Answer split_description(const std::string& answer) {
  Answer a;
  std::string_view in(answer);
  proto::FrameLimits limits;
  while (!in.empty()) {
    auto r = proto::decode_frame(in, proto::Direction::backend, limits);
    if (r.status != proto::FrameStatus::ok) break;
    (r.frame.type == 'T' ? a.description : a.rest).append(in.substr(0, r.frame.size));
    a.failed = a.failed || r.frame.type == 'E';
    in.remove_prefix(r.frame.size);
  }
  return a;
}

bool is_show(std::string_view sql) {
  while (!sql.empty() && std::isspace(static_cast<unsigned char>(sql.front()))) sql.remove_prefix(1);
  return sql.size() >= 4 && strncasecmp(sql.data(), "show", 4) == 0;
}

}  // namespace

void AdminConsole::fail_batch(std::string_view code, const std::string& message, std::string& out) {
  proto::ErrorFields::make("ERROR", code, message).encode(out, 'E');
  skip_until_sync_ = true;
}

awaitable<bool> AdminConsole::extended(const proto::Frame& f, std::string& out) {
  if (skip_until_sync_) co_return true;
  switch (f.type) {
    case 'P': {
      auto p = proto::Parse::decode(f.body);
      if (!p) break;
      statements_[std::string(p->name)] = std::string(p->query);
      proto::encode_parse_complete(out);
      co_return true;
    }
    case 'B': {
      auto b = proto::Bind::decode(f.body);
      if (!b) break;
      auto it = statements_.find(std::string(b->statement));
      if (it == statements_.end()) {
        fail_batch("26000", "prepared statement \"" + std::string(b->statement) + "\" does not exist", out);
        co_return true;
      }
      if (!b->params.empty()) {
        fail_batch("08P01", "bind message supplies " + std::to_string(b->params.size()) +
                                " parameters, but prepared statement \"" + std::string(b->statement) +
                                "\" requires 0", out);
        co_return true;
      }
      portals_[std::string(b->portal)] = Portal{it->second, std::nullopt};
      proto::encode_bind_complete(out);
      co_return true;
    }
    case 'D': {
      auto d = proto::Describe::decode(f.body);
      if (!d) break;
      std::string answer;
      if (d->kind == 'S') {
        auto it = statements_.find(std::string(d->name));
        if (it == statements_.end()) {
          fail_batch("26000", "prepared statement \"" + std::string(d->name) + "\" does not exist", out);
          co_return true;
        }
        proto::ParameterDescription{}.encode(out);
        if (is_show(it->second) && !co_await command(it->second, answer)) co_return false;
      } else {
        auto it = portals_.find(std::string(d->name));
        if (it == portals_.end()) {
          fail_batch("34000", "portal \"" + std::string(d->name) + "\" does not exist", out);
          co_return true;
        }
        if (!it->second.answer) {
          it->second.answer.emplace();
          if (!co_await run_logged(it->second.sql, *it->second.answer)) co_return false;
        }
        answer = *it->second.answer;
      }
      auto a = split_description(answer);
      if (a.description.empty()) proto::encode_no_data(out);
      else out += a.description;
      co_return true;
    }
    case 'E': {
      auto e = proto::Execute::decode(f.body);
      if (!e) break;
      auto it = portals_.find(std::string(e->portal));
      if (it == portals_.end()) {
        fail_batch("34000", "portal \"" + std::string(e->portal) + "\" does not exist", out);
        co_return true;
      }
      std::string answer;
      if (it->second.answer) answer = std::move(*it->second.answer);
      else if (!co_await run_logged(it->second.sql, answer)) co_return false;
      portals_.erase(it);
      auto a = split_description(answer);
      out += a.rest;
      skip_until_sync_ = a.failed;
      co_return true;
    }
    case 'C': {
      auto c = proto::Close::decode(f.body);
      if (!c) break;
      if (c->kind == 'S') statements_.erase(std::string(c->name));
      else portals_.erase(std::string(c->name));
      proto::encode_close_complete(out);
      co_return true;
    }
    case 'H':
      co_return true;
    default:
      break;
  }
  co_await s_.send_error("FATAL", sqlstate::protocol_violation, std::string("invalid ") + f.type + " message", false);
  co_return false;
}

}  // namespace splitpoint::server
