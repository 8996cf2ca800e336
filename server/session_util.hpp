// Small helpers shared by the session's source files.
#pragma once

#include <openssl/crypto.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace splitpoint::server {

// Fresh backends run with their own defaults; a session with no SETs needs no reset.
inline constexpr std::uint64_t kStateDefault = 0;
inline constexpr std::uint64_t kStateUnknown = ~std::uint64_t{0};

inline std::string quote_literal(std::string_view v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
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
