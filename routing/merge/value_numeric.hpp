// Numbers as PostgreSQL prints them, for combining aggregates across shards exactly:
//  - `Decimal`, an arbitrary-precision numeric with PostgreSQL's display scale (dscale)
//    and special values (NaN, Infinity, -Infinity), parsed from and printed to numeric's
//    text and binary forms, with numeric's addition and the division `avg` uses
//    (numeric_div with select_div_scale's result scale, rounded half away from zero);
//  - float4/float8 output exactly as float4out/float8out print them.
// https://www.postgresql.org/docs/15/datatype-numeric.html
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace splitpoint::routing {

class Decimal {
 public:
  enum class Special : std::uint8_t { none, nan, pos_inf, neg_inf };

  Decimal() = default;  // 0 with scale 0

  // numeric's text form (and numeric_in's: optional sign, exponent, surrounding
  // spaces; NaN/Infinity in any case). nullopt if it is not a number.
  static std::optional<Decimal> parse(std::string_view text);
  // numeric's binary form (numeric_send). nullopt if malformed.
  static std::optional<Decimal> from_binary(std::string_view bytes);
  static Decimal from_int(std::int64_t v);

  // numeric_out: digits with exactly `scale` fraction digits; "NaN", "Infinity", ...
  std::string to_text() const;
  // numeric_send: appends the binary form.
  void to_binary(std::string& out) const;

  bool is_nan() const { return special_ == Special::nan; }
  Special special() const { return special_; }
  int scale() const { return scale_; }

  // numeric_add: the result's display scale is the larger of the two.
  Decimal plus(const Decimal& other) const;
  // numeric_div(this, count) for count > 0 with PostgreSQL's result scale: what avg()
  // returns for integer and numeric inputs from the sum and the count.
  Decimal divided_by_count(std::int64_t count) const;

  // numeric_cmp: -Infinity < numbers < Infinity < NaN, NaN = NaN; scale ignored (1.0 = 1.00).
  static int compare(const Decimal& a, const Decimal& b);

 private:
  Special special_ = Special::none;
  bool negative_ = false;  // never set for zero
  std::string digits_;     // decimal digits of |value| * 10^scale_, no leading zeros ("" = 0)
  int scale_ = 0;          // digits after the decimal point (PostgreSQL's dscale)

  void normalize();
  // Weight and value of the first non-zero base-10000 digit, as PostgreSQL stores numerics.
  void first_nbase_digit(int& weight, int& digit) const;
};

// Compares two numeric values in text form exactly (numeric_cmp order). Both must
// be valid numeric output (see valid_numeric_text).
int compare_numeric_text(std::string_view a, std::string_view b);
bool valid_numeric_text(std::string_view s);
// Compares two numeric values in binary form (numeric_send). Both must be valid.
int compare_numeric_binary(std::string_view a, std::string_view b);
bool valid_numeric_binary(std::string_view s);

// float8out / float4out. extra_float_digits > 0 (the default, 1) prints the shortest
// text that reads back as the same value; otherwise %.{15|6 + extra_float_digits}g.
std::string format_float8(double v, int extra_float_digits);
std::string format_float4(float v, int extra_float_digits);
// float8in / float4in for PostgreSQL's output ("NaN", "Infinity", "-Infinity", numbers).
std::optional<double> parse_float8(std::string_view text);
std::optional<float> parse_float4(std::string_view text);

}  // namespace splitpoint::routing
