// Client address ranges for `allow:` (SPEC §11), written as in pg_hba.conf: an IPv4 or
// IPv6 address with an optional /prefix ("10.0.0.0/8", "::1/128", "192.168.1.7").
// Pure: no sockets, no YAML.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::config {

struct Cidr {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};  // the network; IPv4 uses the first 4
  int prefix = 0;                        // bits that must match
  std::string text;                      // as written, for messages

  // "addr" or "addr/prefix"; nullopt with `why` set when malformed, or when bits are
  // set past the prefix ("10.0.0.1/8": as PostgreSQL, a likely typo).
  static std::optional<Cidr> parse(std::string_view text, std::string* why = nullptr);
  // Whether a client address in text form (inet_ntop's, as Asio prints it) is inside.
  // An IPv4-mapped IPv6 address (::ffff:a.b.c.d, from a dual-stack listener) is matched
  // as the IPv4 address it carries.
  bool contains(std::string_view address) const;
};

// True when `allow` is empty (no restriction) or some entry contains `address`.
bool allowed(const std::vector<Cidr>& allow, std::string_view address);

// Whether a listen host is loopback only: 127.0.0.0/8, ::1 or "localhost".
bool is_loopback_host(std::string_view host);

}  // namespace splitpoint::config
