// Dates and times in PostgreSQL's ISO DateStyle output, turned into the numbers the
// binary format carries (days / microseconds since 2000-01-01), so text and binary
// values order alike. https://www.postgresql.org/docs/15/datatype-datetime.html
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "routing/merge/value.hpp"

namespace splitpoint::routing {

namespace {

constexpr std::int64_t kUsecPerSec = 1000000;
constexpr std::int64_t kSecPerDay = 86400;
constexpr std::int64_t kUnixDaysAt2000 = 10957;

// Days since 1970-01-01 of a proleptic Gregorian date with astronomical years (1 BC = 0).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// A cursor over the text that reads fixed-width and variable-width numbers.
struct Reader {
  std::string_view s;
  std::size_t at = 0;

  bool done() const { return at == s.size(); }
  bool eat(char c) {
    if (at < s.size() && s[at] == c) {
      ++at;
      return true;
    }
    return false;
  }
  bool eat(std::string_view word) {
    if (s.substr(at, word.size()) == word) {
      at += word.size();
      return true;
    }
    return false;
  }
  // Exactly `width` digits, or at least `width` when `at_least`.
  bool number(int width, std::int64_t& out, bool at_least = false) {
    std::size_t start = at;
    out = 0;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9' && (at_least || at - start < static_cast<std::size_t>(width))) {
      if (at - start > 12) return false;
      out = out * 10 + (s[at] - '0');
      ++at;
    }
    return at - start >= static_cast<std::size_t>(width);
  }
};

bool read_date(Reader& r, std::int64_t& year, std::int64_t& month, std::int64_t& day) {
  return r.number(4, year, true) && r.eat('-') && r.number(2, month) && r.eat('-') && r.number(2, day) && month >= 1 &&
         month <= 12 && day >= 1 && day <= 31;
}

// HH:MM:SS[.ffffff] as microseconds.
bool read_time(Reader& r, std::int64_t& usec) {
  std::int64_t h = 0, m = 0, s = 0, frac = 0;
  if (!(r.number(2, h) && r.eat(':') && r.number(2, m) && r.eat(':') && r.number(2, s))) return false;
  if (r.eat('.')) {
    std::size_t start = r.at;
    if (!r.number(1, frac, true) || r.at - start > 6) return false;
    for (std::size_t i = r.at - start; i < 6; ++i) frac *= 10;
  }
  if (h > 24 || m > 59 || s > 60) return false;
  usec = ((h * 60 + m) * 60 + s) * kUsecPerSec + frac;
  return true;
}

// +HH[:MM[:SS]] as seconds east of Greenwich.
bool read_zone(Reader& r, std::int64_t& seconds) {
  int sign = r.eat('+') ? 1 : (r.eat('-') ? -1 : 0);
  std::int64_t h = 0, m = 0, s = 0;
  if (sign == 0 || !r.number(2, h)) return false;
  if (r.eat(':') && !r.number(2, m)) return false;
  if (r.eat(':') && !r.number(2, s)) return false;
  seconds = sign * (h * 3600 + m * 60 + s);
  return true;
}

std::int64_t day_number(std::int64_t year, std::int64_t month, std::int64_t day, bool bc) {
  return days_from_civil(bc ? 1 - year : year, static_cast<unsigned>(month), static_cast<unsigned>(day)) - kUnixDaysAt2000;
}

}  // namespace

std::optional<std::int64_t> parse_date_text(std::string_view text) {
  if (text == "infinity") return std::numeric_limits<std::int64_t>::max();
  if (text == "-infinity") return std::numeric_limits<std::int64_t>::min();
  Reader r{text};
  std::int64_t y = 0, m = 0, d = 0;
  if (!read_date(r, y, m, d)) return std::nullopt;
  bool bc = r.eat(" BC");
  if (!r.done()) return std::nullopt;
  return day_number(y, m, d, bc);
}

std::optional<std::int64_t> parse_timestamp_text(std::string_view text, bool with_zone) {
  if (text == "infinity") return std::numeric_limits<std::int64_t>::max();
  if (text == "-infinity") return std::numeric_limits<std::int64_t>::min();
  Reader r{text};
  std::int64_t y = 0, m = 0, d = 0, usec = 0, zone = 0;
  if (!read_date(r, y, m, d) || !r.eat(' ') || !read_time(r, usec)) return std::nullopt;
  if (with_zone && !read_zone(r, zone)) return std::nullopt;
  bool bc = r.eat(" BC");
  if (!r.done()) return std::nullopt;
  // Local time minus the zone's offset is UTC.
  return (day_number(y, m, d, bc) * kSecPerDay - zone) * kUsecPerSec + usec;
}

std::optional<std::int64_t> parse_time_text(std::string_view text) {
  Reader r{text};
  std::int64_t usec = 0;
  if (!read_time(r, usec) || !r.done()) return std::nullopt;
  return usec;
}

}  // namespace splitpoint::routing
