// float4out / float8out. With extra_float_digits > 0 PostgreSQL prints the shortest
// decimal that lies strictly inside the value's rounding interval (its Ryu variant does
// not accept a decimal exactly on the boundary, unlike C++'s to_chars), choosing the
// correctly rounded one of that length. We find it with glibc's exact printf and check
// the interval with exact integer arithmetic.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <charconv>
#include <limits>
#include <string>
#include <vector>

#include "routing/merge/value_numeric.hpp"

namespace splitpoint::routing {

namespace {

// Unsigned big integer, just enough for exact comparisons of m * 2^a * 5^b.
class Big {
 public:
  explicit Big(std::uint64_t v) {
    while (v != 0) {
      w_.push_back(static_cast<std::uint32_t>(v));
      v >>= 32;
    }
  }
  void mul(std::uint32_t k) {
    std::uint64_t carry = 0;
    for (auto& x : w_) {
      std::uint64_t t = std::uint64_t{x} * k + carry;
      x = static_cast<std::uint32_t>(t);
      carry = t >> 32;
    }
    if (carry != 0) w_.push_back(static_cast<std::uint32_t>(carry));
  }
  void mul_pow5(int n) {
    for (; n >= 13; n -= 13) mul(1220703125);  // 5^13
    for (; n > 0; --n) mul(5);
  }
  void shift_left(int n) {
    if (w_.empty() || n <= 0) return;
    w_.insert(w_.begin(), static_cast<std::size_t>(n / 32), 0);
    if (n % 32 != 0) {
      std::uint32_t carry = 0;
      for (auto& x : w_) {
        std::uint32_t next = x >> (32 - n % 32);
        x = (x << (n % 32)) | carry;
        carry = next;
      }
      if (carry != 0) w_.push_back(carry);
    }
  }
  friend int compare(const Big& a, const Big& b) {
    if (a.w_.size() != b.w_.size()) return a.w_.size() < b.w_.size() ? -1 : 1;
    for (std::size_t i = a.w_.size(); i-- > 0;)
      if (a.w_[i] != b.w_[i]) return a.w_[i] < b.w_[i] ? -1 : 1;
    return 0;
  }

 private:
  std::vector<std::uint32_t> w_;  // little-endian 32-bit words
};

// A positive binary value n * 2^e.
struct Binary {
  std::uint64_t n;
  int e;
};

template <typename F>
Binary to_binary(F v) {
  int exp = 0;
  F fr = std::frexp(v, &exp);
  constexpr int bits = std::numeric_limits<F>::digits;
  return {static_cast<std::uint64_t>(std::ldexp(fr, bits)), exp - bits};
}

// (a + b) / 2 exactly.
Binary midpoint(Binary a, Binary b) {
  if (a.n == 0) return {b.n, b.e - 1};  // below the smallest subnormal
  int e = std::min(a.e, b.e);
  std::uint64_t n = (a.n << (a.e - e)) + (b.n << (b.e - e));
  return {n, e - 1};
}

// Compares c * 10^q with x.n * 2^x.e exactly.
int compare_decimal(std::uint64_t c, int q, Binary x) {
  int a2 = q, a5 = q, b2 = x.e, b5 = 0;
  int m2 = std::min(a2, b2);
  a2 -= m2;
  b2 -= m2;
  if (a5 < 0) {
    b5 = -a5;
    a5 = 0;
  }
  Big left(c), right(x.n);
  left.mul_pow5(a5);
  left.shift_left(a2);
  right.mul_pow5(b5);
  right.shift_left(b2);
  return compare(left, right);
}

struct Digits {
  std::string digits;  // no trailing zeros
  int exp10 = 0;       // decimal exponent of the first digit
};

Digits split_scientific(std::string_view s) {
  std::size_t e = s.find('e');
  Digits d;
  for (char ch : s.substr(0, e))
    if (ch != '.') d.digits.push_back(ch);
  d.exp10 = std::stoi(std::string(s.substr(e + 1)));
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  return d;
}

// Exact search, used when the quick answer below might sit on the interval's boundary.
template <typename F>
Digits exact_shortest_digits(F v) {
  const Binary x = to_binary(v);
  const Binary lo = midpoint(to_binary(std::nextafter(v, F{0})), x);
  const F up = std::nextafter(v, std::numeric_limits<F>::infinity());
  const Binary hi = std::isinf(up) ? Binary{2 * x.n + (x.n - to_binary(std::nextafter(v, F{0})).n), x.e - 1}
                                   : midpoint(x, to_binary(up));
  const int max_digits = std::numeric_limits<F>::max_digits10;
  for (int len = 1; len <= max_digits; ++len) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*e", len - 1, static_cast<double>(v));  // correctly rounded, ties to even
    std::string_view s(buf);
    std::size_t e = s.find('e');
    std::string digits;
    for (char ch : s.substr(0, e))
      if (ch != '.') digits.push_back(ch);
    int exp10 = std::stoi(std::string(s.substr(e + 1)));
    std::uint64_t c = std::stoull(digits);
    int q = exp10 - (len - 1);
    // The nearest len-digit decimal, or the next one up when the nearest is on or
    // below the (narrower, at a power of two) lower bound.
    if (compare_decimal(c, q, lo) <= 0) ++c;
    if (compare_decimal(c, q, lo) <= 0 || compare_decimal(c, q, hi) >= 0) continue;
    std::string out = std::to_string(c);
    exp10 = q + static_cast<int>(out.size()) - 1;
    while (out.size() > 1 && out.back() == '0') out.pop_back();
    return {out, exp10};
  }
  // Unreachable: max_digits10 digits always identify the value.
  return {std::to_string(x.n), 0};
}

// to_chars finds the same shortest decimal unless its pick lies exactly on a boundary
// (it accepts those for even mantissas); midpoints of two floats are exact in long
// double, so an inexact reading of the pick proves it is not on one.
template <typename F>
Digits shortest_digits(F v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf - 1, v, std::chars_format::scientific);
  *res.ptr = '\0';
  const long double x = v;
  const long double below = std::nextafter(v, F{0});
  const F up = std::nextafter(v, std::numeric_limits<F>::infinity());
  const long double lo = (x + below) / 2;
  const long double hi = std::isinf(up) ? x + (x - below) / 2 : (x + static_cast<long double>(up)) / 2;
  const long double pick = std::strtold(buf, nullptr);
  if (pick == lo || pick == hi) return exact_shortest_digits(v);
  return split_scientific(buf);
}

// Fixed notation for decimal exponents in [-4, fixed_limit), otherwise d.ddde+XX.
std::string layout(bool negative, const Digits& d, int fixed_limit) {
  std::string out = negative ? "-" : "";
  const std::string& g = d.digits;
  int exp = d.exp10;
  if (exp >= -4 && exp < fixed_limit) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<std::size_t>(-exp - 1), '0');
      out += g;
    } else if (g.size() <= static_cast<std::size_t>(exp) + 1) {
      out += g;
      out.append(static_cast<std::size_t>(exp) + 1 - g.size(), '0');
    } else {
      out.append(g, 0, static_cast<std::size_t>(exp) + 1);
      out += '.';
      out.append(g, static_cast<std::size_t>(exp) + 1, std::string::npos);
    }
    return out;
  }
  out += g[0];
  if (g.size() > 1) {
    out += '.';
    out.append(g, 1, std::string::npos);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

template <typename F>
std::string format_float(F v, int extra_float_digits, int fixed_limit, int type_digits) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (extra_float_digits <= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", std::max(type_digits + extra_float_digits, 1), static_cast<double>(v));
    return buf;
  }
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  return layout(v < 0, shortest_digits(std::fabs(v)), fixed_limit);
}

template <typename F>
std::optional<F> parse_float(std::string_view s) {
  if (s == "NaN") return std::numeric_limits<F>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<F>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<F>::infinity();
  if (s.empty() || !((s.front() >= '0' && s.front() <= '9') || s.front() == '-' || s.front() == '.')) return std::nullopt;
  F v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || std::isnan(v) || std::isinf(v)) return std::nullopt;
  return v;
}

}  // namespace

std::string format_float8(double v, int extra_float_digits) { return format_float(v, extra_float_digits, 15, 15); }
std::string format_float4(float v, int extra_float_digits) { return format_float(v, extra_float_digits, 6, 6); }

std::optional<double> parse_float8(std::string_view text) { return parse_float<double>(text); }
std::optional<float> parse_float4(std::string_view text) { return parse_float<float>(text); }

}  // namespace splitpoint::routing
