#include "config/cidr.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

namespace splitpoint::config {

namespace {

struct Address {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};
};

// inet_pton for either family; an IPv4-mapped IPv6 address becomes IPv4. A zone
// ("fe80::1%eth0") is ignored.
std::optional<Address> parse_address(std::string_view text, bool unmap) {
  std::string s(text.substr(0, text.find('%')));
  Address a;
  if (inet_pton(AF_INET, s.c_str(), a.bytes.data()) == 1) return a;
  if (inet_pton(AF_INET6, s.c_str(), a.bytes.data()) != 1) return std::nullopt;
  a.v6 = true;
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (unmap && std::equal(kMapped, kMapped + 12, a.bytes.begin())) {
    std::copy(a.bytes.begin() + 12, a.bytes.end(), a.bytes.begin());
    std::fill(a.bytes.begin() + 4, a.bytes.end(), 0);
    a.v6 = false;
  }
  return a;
}

bool prefix_equal(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b, int bits) {
  int i = 0;
  for (; bits >= 8; bits -= 8, ++i)
    if (a[i] != b[i]) return false;
  if (bits == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xff << (8 - bits));
  return (a[i] & mask) == (b[i] & mask);
}

}  // namespace

std::optional<Cidr> Cidr::parse(std::string_view text, std::string* why) {
  auto fail = [&](std::string message) -> std::optional<Cidr> {
    if (why) *why = std::move(message);
    return std::nullopt;
  };
  const auto slash = text.find('/');
  auto addr = parse_address(text.substr(0, slash), false);
  if (!addr) return fail("expected an IPv4 or IPv6 address with an optional /prefix, such as 10.0.0.0/8 or ::1/128");
  Cidr c;
  c.v6 = addr->v6;
  c.bytes = addr->bytes;
  const int max = c.v6 ? 128 : 32;
  c.prefix = max;
  if (slash != std::string_view::npos) {
    std::string_view p = text.substr(slash + 1);
    int n = -1;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
    if (p.empty() || ec != std::errc{} || end != p.data() + p.size() || n < 0 || n > max)
      return fail("the prefix length must be between 0 and " + std::to_string(max));
    c.prefix = n;
  }
  auto network = c.bytes;
  for (int bit = c.prefix; bit < max; ++bit) network[bit / 8] &= static_cast<std::uint8_t>(~(0x80 >> (bit % 8)));
  if (network != c.bytes)
    return fail("the address has bits set beyond the /" + std::to_string(c.prefix) + " prefix (the network is " +
                [&] {
                  char buf[INET6_ADDRSTRLEN];
                  inet_ntop(c.v6 ? AF_INET6 : AF_INET, network.data(), buf, sizeof buf);
                  return std::string(buf);
                }() + "/" + std::to_string(c.prefix) + ")");
  c.text = std::string(text);
  return c;
}

bool Cidr::contains(std::string_view address) const {
  auto a = parse_address(address, true);
  if (!a || a->v6 != v6) return false;
  return prefix_equal(a->bytes, bytes, prefix);
}

bool allowed(const std::vector<Cidr>& allow, std::string_view address) {
  if (allow.empty()) return true;
  for (const Cidr& c : allow)
    if (c.contains(address)) return true;
  return false;
}

bool is_loopback_host(std::string_view host) {
  if (host == "localhost") return true;
  auto a = parse_address(host, true);
  if (!a) return false;
  if (!a->v6) return a->bytes[0] == 127;
  static constexpr std::array<std::uint8_t, 16> kLoopback6{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return a->bytes == kLoopback6;
}

}  // namespace splitpoint::config
