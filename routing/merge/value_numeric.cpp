#include "routing/merge/value_numeric.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

namespace splitpoint::routing {

namespace {

constexpr int kNumericMinSigDigits = 16;  // NUMERIC_MIN_SIG_DIGITS
constexpr int kNumericMaxDisplayScale = 1000;  // results of division
constexpr int kNumericMaxInputScale = 16383;   // NUMERIC_DSCALE_MAX: what a stored value may have
constexpr std::uint16_t kSignPos = 0x0000, kSignNeg = 0x4000, kSignNaN = 0xC000, kSignPinf = 0xD000,
                        kSignNinf = 0xF000;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// |a| + |b| for digit strings of the same scale.
std::string add_magnitudes(const std::string& a, const std::string& b) {
  std::string out;
  int carry = 0;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()) || carry != 0; ++i) {
    int d = carry;
    if (i < a.size()) d += a[a.size() - 1 - i] - '0';
    if (i < b.size()) d += b[b.size() - 1 - i] - '0';
    out.push_back(static_cast<char>('0' + d % 10));
    carry = d / 10;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// |a| - |b| for digit strings of the same scale with |a| >= |b|.
std::string subtract_magnitudes(const std::string& a, const std::string& b) {
  std::string out;
  int borrow = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    int d = (a[a.size() - 1 - i] - '0') - borrow;
    if (i < b.size()) d -= b[b.size() - 1 - i] - '0';
    borrow = d < 0 ? 1 : 0;
    out.push_back(static_cast<char>('0' + (d + 10) % 10));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

// Compares magnitudes given as digit strings without leading zeros at the same scale.
int compare_magnitudes(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

void strip_leading_zeros(std::string& s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] == '0') ++i;
  s.erase(0, i);
}

int special_rank(Decimal::Special s) {
  switch (s) {
    case Decimal::Special::neg_inf: return 0;
    case Decimal::Special::none: return 1;
    case Decimal::Special::pos_inf: return 2;
    case Decimal::Special::nan: return 3;
  }
  return 3;
}

}  // namespace

std::optional<Decimal> Decimal::parse(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  Decimal d;
  if (iequals(s, "nan")) {
    d.special_ = Special::nan;
    return d;
  }
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (iequals(s, "infinity") || iequals(s, "inf")) {
    d.special_ = negative ? Special::neg_inf : Special::pos_inf;
    return d;
  }
  std::size_t i = 0;
  int frac_digits = 0;
  bool any_digit = false;
  for (; i < s.size() && is_digit(s[i]); ++i, any_digit = true) d.digits_.push_back(s[i]);
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && is_digit(s[i]); ++i, any_digit = true, ++frac_digits) d.digits_.push_back(s[i]);
  }
  if (!any_digit) return std::nullopt;
  long exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && s[i] == '+') ++i;
    auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), exponent);
    if (ec != std::errc{} || p == s.data() + i || exponent > 10000 || exponent < -10000) return std::nullopt;
    i = static_cast<std::size_t>(p - s.data());
  }
  if (i != s.size()) return std::nullopt;
  long scale = frac_digits - exponent;
  if (scale < 0) {
    d.digits_.append(static_cast<std::size_t>(-scale), '0');
    scale = 0;
  }
  if (scale > kNumericMaxInputScale) return std::nullopt;
  d.scale_ = static_cast<int>(scale);
  d.negative_ = negative;
  d.normalize();
  return d;
}

std::optional<Decimal> Decimal::from_binary(std::string_view b) {
  auto u16 = [&](std::size_t at) {
    return static_cast<std::uint16_t>((static_cast<unsigned char>(b[at]) << 8) | static_cast<unsigned char>(b[at + 1]));
  };
  if (b.size() < 8) return std::nullopt;
  int ndigits = static_cast<std::int16_t>(u16(0));
  int weight = static_cast<std::int16_t>(u16(2));
  std::uint16_t sign = u16(4);
  int dscale = static_cast<std::int16_t>(u16(6));
  if (ndigits < 0 || b.size() != 8 + 2 * static_cast<std::size_t>(ndigits) || dscale < 0) return std::nullopt;
  Decimal d;
  if (sign == kSignNaN) d.special_ = Special::nan;
  if (sign == kSignPinf) d.special_ = Special::pos_inf;
  if (sign == kSignNinf) d.special_ = Special::neg_inf;
  if (d.special_ != Special::none) return d;
  if (sign != kSignPos && sign != kSignNeg) return std::nullopt;
  // value = (groups as one number) * 10^(4 * (weight - ndigits + 1))
  for (int i = 0; i < ndigits; ++i) {
    std::uint16_t g = u16(8 + 2 * static_cast<std::size_t>(i));
    if (g > 9999) return std::nullopt;
    char buf[5];
    std::snprintf(buf, sizeof buf, "%04u", static_cast<unsigned>(g));
    d.digits_ += buf;
  }
  int exp10 = 4 * (weight - ndigits + 1);
  if (exp10 >= 0) {
    d.digits_.append(static_cast<std::size_t>(exp10), '0');
    d.scale_ = 0;
  } else {
    d.scale_ = -exp10;
  }
  // Bring the scale to dscale; digits beyond dscale are zero in what PostgreSQL sends.
  if (d.scale_ < dscale) {
    d.digits_.append(static_cast<std::size_t>(dscale - d.scale_), '0');
  } else if (d.scale_ > dscale) {
    std::size_t drop = static_cast<std::size_t>(d.scale_ - dscale);
    if (drop >= d.digits_.size()) d.digits_.clear();
    else d.digits_.resize(d.digits_.size() - drop);
  }
  d.scale_ = dscale;
  d.negative_ = sign == kSignNeg;
  d.normalize();
  return d;
}

Decimal Decimal::from_int(std::int64_t v) {
  Decimal d;
  std::uint64_t mag = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  d.digits_ = std::to_string(mag);
  d.negative_ = v < 0;
  d.normalize();
  return d;
}

void Decimal::normalize() {
  strip_leading_zeros(digits_);
  if (digits_.empty()) negative_ = false;
}

std::string Decimal::to_text() const {
  switch (special_) {
    case Special::nan: return "NaN";
    case Special::pos_inf: return "Infinity";
    case Special::neg_inf: return "-Infinity";
    case Special::none: break;
  }
  std::string padded = digits_;
  if (padded.size() < static_cast<std::size_t>(scale_) + 1)
    padded.insert(0, static_cast<std::size_t>(scale_) + 1 - padded.size(), '0');
  std::string out = negative_ ? "-" : "";
  out.append(padded, 0, padded.size() - static_cast<std::size_t>(scale_));
  if (scale_ > 0) {
    out += '.';
    out.append(padded, padded.size() - static_cast<std::size_t>(scale_), std::string::npos);
  }
  return out;
}

void Decimal::to_binary(std::string& out) const {
  auto put16 = [&](std::uint16_t v) {
    out.push_back(static_cast<char>(v >> 8));
    out.push_back(static_cast<char>(v & 0xff));
  };
  std::vector<std::uint16_t> groups;
  int weight = 0;
  if (special_ == Special::none && !digits_.empty()) {
    // Split at the decimal point into base-10000 digits aligned on it.
    std::string padded = digits_;
    if (padded.size() < static_cast<std::size_t>(scale_)) padded.insert(0, scale_ - padded.size(), '0');
    std::string int_part = padded.substr(0, padded.size() - static_cast<std::size_t>(scale_));
    std::string frac_part = padded.substr(padded.size() - static_cast<std::size_t>(scale_));
    int_part.insert(0, (4 - int_part.size() % 4) % 4, '0');
    frac_part.append((4 - frac_part.size() % 4) % 4, '0');
    std::string all = int_part + frac_part;
    for (std::size_t i = 0; i < all.size(); i += 4)
      groups.push_back(static_cast<std::uint16_t>(std::stoi(all.substr(i, 4))));
    weight = static_cast<int>(int_part.size() / 4) - 1;
    std::size_t lead = 0;
    while (lead < groups.size() && groups[lead] == 0) ++lead;
    groups.erase(groups.begin(), groups.begin() + static_cast<std::ptrdiff_t>(lead));
    weight -= static_cast<int>(lead);
    while (!groups.empty() && groups.back() == 0) groups.pop_back();
  }
  std::uint16_t sign = negative_ ? kSignNeg : kSignPos;
  if (special_ == Special::nan) sign = kSignNaN;
  if (special_ == Special::pos_inf) sign = kSignPinf;
  if (special_ == Special::neg_inf) sign = kSignNinf;
  put16(static_cast<std::uint16_t>(groups.size()));
  put16(static_cast<std::uint16_t>(groups.empty() ? 0 : weight));
  put16(sign);
  put16(static_cast<std::uint16_t>(special_ == Special::none ? scale_ : 0));
  for (std::uint16_t g : groups) put16(g);
}

Decimal Decimal::plus(const Decimal& o) const {
  Decimal r;
  if (special_ != Special::none || o.special_ != Special::none) {
    // numeric_add: NaN wins; Infinity + -Infinity is NaN; otherwise the infinity.
    if (is_nan() || o.is_nan()) r.special_ = Special::nan;
    else if (special_ != Special::none && o.special_ != Special::none && special_ != o.special_) r.special_ = Special::nan;
    else r.special_ = special_ != Special::none ? special_ : o.special_;
    return r;
  }
  r.scale_ = std::max(scale_, o.scale_);
  std::string a = digits_ + std::string(static_cast<std::size_t>(r.scale_ - scale_), '0');
  std::string b = o.digits_ + std::string(static_cast<std::size_t>(r.scale_ - o.scale_), '0');
  strip_leading_zeros(a);
  strip_leading_zeros(b);
  if (negative_ == o.negative_) {
    r.digits_ = add_magnitudes(a, b);
    r.negative_ = negative_;
  } else if (compare_magnitudes(a, b) >= 0) {
    r.digits_ = subtract_magnitudes(a, b);
    r.negative_ = negative_;
  } else {
    r.digits_ = subtract_magnitudes(b, a);
    r.negative_ = o.negative_;
  }
  r.normalize();
  return r;
}

void Decimal::first_nbase_digit(int& weight, int& digit) const {
  weight = 0;
  digit = 0;
  if (digits_.empty()) return;
  int int_len = static_cast<int>(digits_.size()) - scale_;
  if (int_len > 0) {
    int groups = (int_len + 3) / 4;
    int lead = int_len - 4 * (groups - 1);
    weight = groups - 1;
    digit = std::stoi(digits_.substr(0, static_cast<std::size_t>(lead)));
    return;
  }
  // |value| < 1: fraction digits, left-padded to the scale, in groups of four.
  std::string frac = std::string(static_cast<std::size_t>(-int_len), '0') + digits_;
  frac.append((4 - frac.size() % 4) % 4, '0');
  for (std::size_t g = 0; g * 4 < frac.size(); ++g) {
    int v = std::stoi(frac.substr(g * 4, 4));
    if (v != 0) {
      weight = -static_cast<int>(g) - 1;
      digit = v;
      return;
    }
  }
}

Decimal Decimal::divided_by_count(std::int64_t count) const {
  Decimal r;
  if (special_ != Special::none) {
    r.special_ = special_;
    return r;
  }
  // select_div_scale(): at least 16 significant digits, never fewer than the inputs show.
  int w1 = 0, d1 = 0, w2 = 0, d2 = 0;
  first_nbase_digit(w1, d1);
  from_int(count).first_nbase_digit(w2, d2);
  int qweight = w1 - w2;
  if (d1 <= d2) --qweight;
  int rscale = kNumericMinSigDigits - qweight * 4;
  rscale = std::clamp(std::max(rscale, scale_), 0, kNumericMaxDisplayScale);
  // Long division to one digit past rscale, then round half away from zero (div_var).
  // floor(|sum| * 10^(rscale + 1) / count): scale the digits to rscale + 1 places first
  // (dropping places beyond it is exact for a floor of a positive quotient).
  std::string numerator = digits_;
  int shift = rscale + 1 - scale_;
  if (shift >= 0) numerator.append(static_cast<std::size_t>(shift), '0');
  else numerator.resize(numerator.size() > static_cast<std::size_t>(-shift) ? numerator.size() - static_cast<std::size_t>(-shift) : 0);
  if (numerator.empty()) numerator = "0";
  std::string quotient;
  __int128 rem = 0;
  for (char c : numerator) {
    rem = rem * 10 + (c - '0');
    quotient.push_back(static_cast<char>('0' + static_cast<int>(rem / count)));
    rem %= count;
  }
  bool round_up = quotient.back() >= '5';
  quotient.pop_back();
  strip_leading_zeros(quotient);
  if (round_up) quotient = add_magnitudes(quotient, "1");
  r.digits_ = quotient;
  r.scale_ = rscale;
  r.negative_ = negative_;
  r.normalize();
  return r;
}

int Decimal::compare(const Decimal& a, const Decimal& b) {
  int ra = special_rank(a.special_), rb = special_rank(b.special_);
  if (ra != rb || ra != 1) return ra < rb ? -1 : (ra > rb ? 1 : 0);
  if (a.negative_ != b.negative_) return a.negative_ ? -1 : 1;
  int scale = std::max(a.scale_, b.scale_);
  std::string x = a.digits_ + std::string(static_cast<std::size_t>(scale - a.scale_), '0');
  std::string y = b.digits_ + std::string(static_cast<std::size_t>(scale - b.scale_), '0');
  strip_leading_zeros(x);
  strip_leading_zeros(y);
  int c = compare_magnitudes(x, y);
  return a.negative_ ? -c : c;
}

bool valid_numeric_text(std::string_view s) {
  if (s == "NaN" || s == "Infinity" || s == "-Infinity") return true;
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == 0) return false;
  if (i == s.size()) return true;
  if (s[i] != '.' || i + 1 == s.size()) return false;
  for (++i; i < s.size(); ++i)
    if (!is_digit(s[i])) return false;
  return true;
}

namespace {

// Orders numeric output text without building numbers: rank, sign, integer digits, fraction.
int numeric_text_rank(std::string_view s) {
  if (s == "-Infinity") return 0;
  if (s == "Infinity") return 2;
  if (s == "NaN") return 3;
  return 1;
}

struct TextParts {
  bool negative = false;
  std::string_view int_part;   // no leading zeros
  std::string_view frac_part;  // no trailing zeros
};

TextParts split_numeric_text(std::string_view s) {
  TextParts p;
  if (!s.empty() && s.front() == '-') {
    p.negative = true;
    s.remove_prefix(1);
  }
  std::size_t dot = s.find('.');
  p.int_part = s.substr(0, dot);
  if (dot != std::string_view::npos) p.frac_part = s.substr(dot + 1);
  while (!p.int_part.empty() && p.int_part.front() == '0') p.int_part.remove_prefix(1);
  while (!p.frac_part.empty() && p.frac_part.back() == '0') p.frac_part.remove_suffix(1);
  if (p.int_part.empty() && p.frac_part.empty()) p.negative = false;  // -0 and -0.00 are 0
  return p;
}

}  // namespace

int compare_numeric_text(std::string_view a, std::string_view b) {
  int ra = numeric_text_rank(a), rb = numeric_text_rank(b);
  if (ra != rb || ra != 1) return ra < rb ? -1 : (ra > rb ? 1 : 0);
  TextParts x = split_numeric_text(a), y = split_numeric_text(b);
  if (x.negative != y.negative) return x.negative ? -1 : 1;
  int c = 0;
  if (x.int_part.size() != y.int_part.size()) {
    c = x.int_part.size() < y.int_part.size() ? -1 : 1;
  } else {
    c = x.int_part.compare(y.int_part);
    if (c == 0) c = x.frac_part.compare(y.frac_part);  // no trailing zeros: plain string order works
    c = c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return x.negative ? -c : c;
}

bool valid_numeric_binary(std::string_view s) { return Decimal::from_binary(s).has_value(); }

int compare_numeric_binary(std::string_view a, std::string_view b) {
  // Rare enough (binary numeric sort keys) that converting is fine.
  return Decimal::compare(*Decimal::from_binary(a), *Decimal::from_binary(b));
}

}  // namespace splitpoint::routing
