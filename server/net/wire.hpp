// Small helpers shared by the session's source files.
#pragma once

#include <openssl/crypto.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace splitpoint::server {

// A string literal that reads the same whatever standard_conforming_strings is: with a
// backslash in it, the E'' form.
inline std::string quote_literal(std::string_view v) {
  const bool escape = v.find('\\') != std::string_view::npos;
  std::string out = escape ? "E'" : "'";
  for (char c : v) {
    if (c == '\'' || (escape && c == '\\')) out.push_back(c);
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// The body of an ErrorResponse the proxy makes itself (as a Reply holds shards' errors).
inline std::string error_body(std::string_view code, std::string_view message) {
  std::string out;
  protocol::ErrorFields::make("ERROR", code, message).encode(out, 'E');
  return out.substr(5);
}

// Sets a parameter the way the startup packet sets it: the value as one string, so
// `search_path=a,b` is two schemas (SET search_path TO 'a,b' would be one).
inline std::string set_config_sql(std::string_view name, std::string_view value) {
  return "SELECT pg_catalog.set_config(" + quote_literal(name) + ", " + quote_literal(value) + ", false);";
}

// Calls fn(type, body, whole message) for each message of `messages` (whole backend
// messages one after the other, as a Reply collects them), in order; stops at a length
// that does not fit.
template <class Fn>
void for_each_message(std::string_view messages, Fn&& fn) {
  while (messages.size() >= 5) {
    const auto* p = reinterpret_cast<const unsigned char*>(messages.data()) + 1;
    const std::size_t len = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    if (len < 4 || len + 1 > messages.size()) return;
    fn(messages[0], messages.substr(5, len - 4), messages.substr(0, len + 1));
    messages.remove_prefix(len + 1);
  }
}

// The message of an ErrorResponse body ("the shard did not answer" when there is none).
inline std::string message_of(std::string_view error) {
  auto e = protocol::ErrorFields::decode(error);
  return e ? std::string(e->get('M')) : std::string("the shard did not answer");
}

// The first column of each DataRow; nullopt when one is NULL.
inline std::optional<std::vector<std::string>> first_column(std::string_view messages) {
  std::vector<std::string> out;
  bool null = false;
  for_each_message(messages, [&](char type, std::string_view body, std::string_view) {
    auto row = type == 'D' ? protocol::DataRow::decode(body) : std::nullopt;
    if (!row) return;
    if (row->values.empty() || !row->values[0]) null = true;
    else out.emplace_back(*row->values[0]);
  });
  if (null) return std::nullopt;
  return out;
}

// Appends the NoticeResponse and ParameterStatus messages among `messages` to `out`, in
// order: what a statement the proxy ran for the client (COMMIT, ROLLBACK) told it
// besides its result.
inline void append_notices_and_status(std::string_view messages, std::string& out) {
  for_each_message(messages, [&](char type, std::string_view, std::string_view whole) {
    if (type == 'N' || type == 'S') out.append(whole);
  });
}

// Whether `$n` appears in the statement (a rough textual check, enough for statements
// the proxy itself wrote).
inline bool mentions_param(std::string_view sql, std::size_t n) {
  std::string token = "$" + std::to_string(n);
  for (std::size_t pos = sql.find(token); pos != std::string_view::npos; pos = sql.find(token, pos + 1)) {
    std::size_t end = pos + token.size();
    if (end >= sql.size() || sql[end] < '0' || sql[end] > '9') return true;
  }
  return false;
}

// Parse's parameter types for a statement the proxy wrote from the client's (a split
// INSERT, a combine step's partial query) that keeps the client's parameter numbers but
// uses only some of them: PostgreSQL cannot infer a type for the others, so they are
// declared text (or bytea when sent in binary, which accepts any bytes).
inline std::vector<std::int32_t> parameter_types_for(std::string_view sql, std::vector<std::int32_t> types,
                                                     const std::vector<std::int16_t>& formats, std::size_t params) {
  types.resize(params, 0);
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (types[i] != 0 || mentions_param(sql, i + 1)) continue;
    std::int16_t format = formats.size() == 1 ? formats[0] : i < formats.size() ? formats[i] : 0;
    types[i] = format == 1 ? 17 : 25;
  }
  return types;
}

// A Parse body after the statement name (the query and its parameter types): what a
// server-side name is made from and what a named Parse of it carries.
inline std::string parse_rest_of(std::string_view sql, const std::vector<std::int32_t>& types) {
  std::string parse;
  protocol::Parse{"", sql, types}.encode(parse);
  return parse.substr(6);  // (type, length, the empty name)
}

// Equal query text and parameter types share one server-side statement name.
inline std::string statement_name_for(std::string_view parse_rest) {
  auto h = std::hash<std::string_view>{}(parse_rest);
  char buf[48];
  std::snprintf(buf, sizeof buf, "sp_%016zx_%zu", h, parse_rest.size());
  return buf;
}

// Compares secrets without leaking where they differ through timing.
inline bool equal_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace splitpoint::server
