// Character classes of PostgreSQL's lexer and input functions, shared by the routing
// layer's hand-written scanners (text_scan, literal_slots, key_values, copy, hash).
#pragma once

namespace splitpoint::routing {

// PostgreSQL's scanner whitespace (scan.l `space`): space, \t, \n, \r, \f, \v.
constexpr bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The value of a hexadecimal digit; -1 for any other character.
constexpr int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace splitpoint::routing
