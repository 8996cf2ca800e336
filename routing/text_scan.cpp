#include "routing/text_scan.hpp"
#include "routing/chars.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

namespace splitpoint::routing {

namespace {

constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
constexpr char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// What a byte can start, looked up once per token (the scan runs for every statement).
enum class Start : std::uint8_t { other, space, digit, identifier, special /* - / ' " $ . */ };

struct ByteTables {
  std::array<Start, 256> start{};
  std::array<bool, 256> identifier_char{};
  std::array<char, 256> lower{};
};

constexpr ByteTables make_tables() {
  ByteTables t;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    t.start[b] = is_space(c) ? Start::space
                 : is_digit(c) ? Start::digit
                 : is_ident_start(c) ? Start::identifier
                 : (c == '-' || c == '/' || c == '\'' || c == '"' || c == '$' || c == '.') ? Start::special
                                                                                          : Start::other;
    t.identifier_char[b] = is_identifier_char(c);
    t.lower[b] = lower(c);
  }
  return t;
}

constexpr ByteTables kBytes = make_tables();

std::uint8_t byte(char c) { return static_cast<std::uint8_t>(c); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The scanner state: one pass, writing the key as it goes. The key is never longer than
// the text (a literal or a run of spaces or a comment becomes one byte, the rest is
// copied), so it is written into a buffer of the text's size, trimmed at the end.
class Scanner {
 public:
  Scanner(std::string_view sql, ScannedText& out) : s_(sql), out_(out) {
    out_.key.resize(sql.size());
    key_ = w_ = out_.key.data();
  }

  bool run() {
    bool ok = true;
    while (ok && i_ < s_.size()) ok = step();
    if (w_ != key_ && w_[-1] == ' ') --w_;
    out_.key.resize(static_cast<std::size_t>(w_ - key_));
    return ok;
  }

 private:
  bool step() {
    char c = s_[i_];
    switch (kBytes.start[byte(c)]) {
      case Start::space: return space();
      case Start::digit: return number();
      case Start::identifier: return identifier();
      case Start::other:
        emit(c);
        ++i_;
        return true;
      case Start::special: break;
    }
    if (c == '-' && peek(1) == '-') return line_comment();
    if (c == '/' && peek(1) == '*') return block_comment();
    if (c == '\'') return quoted(i_, i_, Literal::Kind::string);
    if (c == '"') return quoted_identifier();
    if (c == '$') return dollar();
    if (is_digit(c) || (c == '.' && is_digit(peek(1)))) return number();
    if (is_ident_start(c)) return identifier();
    emit(c);
    ++i_;
    return true;
  }

  char peek(std::size_t k) const { return i_ + k < s_.size() ? s_[i_ + k] : '\0'; }
  void emit(char c) { *w_++ = c; }
  void emit(std::string_view text) {
    std::memcpy(w_, text.data(), text.size());
    w_ += text.size();
  }

  bool space() {
    while (i_ < s_.size() && kBytes.start[byte(s_[i_])] == Start::space) ++i_;
    separate();
    return true;
  }
  // Keeps tokens apart where whitespace or a comment stood.
  void separate() {
    if (w_ != key_ && w_[-1] != ' ') emit(' ');
  }

  bool line_comment() {
    std::size_t end = s_.find('\n', i_);
    if (end == std::string_view::npos) end = s_.size();
    parse_hint_comment(s_.substr(i_ + 2, end - i_ - 2), out_.hints);
    i_ = end;
    separate();
    return true;
  }

  // Block comments nest in PostgreSQL.
  bool block_comment() {
    std::size_t depth = 0, j = i_;
    while (j + 1 < s_.size()) {
      if (s_[j] == '/' && s_[j + 1] == '*') {
        ++depth;
        j += 2;
      } else if (s_[j] == '*' && s_[j + 1] == '/') {
        j += 2;
        if (--depth == 0) break;
      } else {
        ++j;
      }
    }
    if (depth != 0) return false;
    parse_hint_comment(s_.substr(i_ + 2, j - i_ - 4), out_.hints);
    i_ = j;
    separate();
    return true;
  }

  // A '...' literal whose opening quote is at `quote`; the literal starts at `start`
  // (an E/N/B/X prefix). Doubled quotes stand for one; in E'' a backslash escapes.
  bool quoted(std::size_t start, std::size_t quote, Literal::Kind kind) {
    std::size_t j = quote + 1;
    for (;;) {
      if (j >= s_.size()) return false;
      char c = s_[j];
      if (kind == Literal::Kind::escape_string && c == '\\') {
        j += 2;
        continue;
      }
      if (c == '\'') {
        if (j + 1 < s_.size() && s_[j + 1] == '\'') {
          j += 2;
          continue;
        }
        break;
      }
      ++j;
    }
    literal(start, j + 1, kind);
    return true;
  }

  void literal(std::size_t start, std::size_t end, Literal::Kind kind) {
    out_.literals.push_back({static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(end), kind});
    emit('\0');
    i_ = end;
  }

  bool quoted_identifier() {
    std::size_t j = i_ + 1;
    for (;;) {
      if (j >= s_.size()) return false;
      if (s_[j] == '"') {
        if (j + 1 < s_.size() && s_[j + 1] == '"') {
          j += 2;
          continue;
        }
        break;
      }
      ++j;
    }
    emit(s_.substr(i_, j + 1 - i_));
    i_ = j + 1;
    return true;
  }

  // $n parameter, or a $tag$...$tag$ literal.
  bool dollar() {
    if (is_digit(peek(1))) {
      std::size_t j = i_ + 1;
      while (j < s_.size() && is_digit(s_[j])) ++j;
      emit(s_.substr(i_, j - i_));
      i_ = j;
      return true;
    }
    std::size_t j = i_ + 1;
    if (j < s_.size() && is_ident_start(s_[j]) ) {
      while (j < s_.size() && (is_ident_start(s_[j]) || is_digit(s_[j]))) ++j;
    }
    if (j >= s_.size() || s_[j] != '$') {  // a lone '$' (e.g. inside an operator)
      emit('$');
      ++i_;
      return true;
    }
    std::string_view tag = s_.substr(i_, j + 1 - i_);
    std::size_t close = s_.find(tag, j + 1);
    if (close == std::string_view::npos) return false;
    literal(i_, close + tag.size(), Literal::Kind::dollar);
    return true;
  }

  bool number() {
    std::size_t j = i_;
    while (j < s_.size() && is_digit(s_[j])) ++j;
    if (j < s_.size() && s_[j] == '.' && !(j + 1 < s_.size() && s_[j + 1] == '.')) {
      ++j;
      while (j < s_.size() && is_digit(s_[j])) ++j;
    }
    if (j < s_.size() && (s_[j] == 'e' || s_[j] == 'E')) {
      std::size_t k = j + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && is_digit(s_[k])) {
        j = k;
        while (j < s_.size() && is_digit(s_[j])) ++j;
      }
    }
    literal(i_, j, Literal::Kind::number);
    return true;
  }

  bool identifier() {
    std::size_t j = i_;
    while (j < s_.size() && kBytes.identifier_char[byte(s_[j])]) ++j;
    std::size_t len = j - i_;
    char first = lower(s_[i_]);
    if (len == 1 && j < s_.size() && s_[j] == '\'') {
      if (first == 'e') return quoted(i_, j, Literal::Kind::escape_string);
      if (first == 'n') return quoted(i_, j, Literal::Kind::string);
      if (first == 'b' || first == 'x') return quoted(i_, j, Literal::Kind::other);
    }
    if (len == 1 && first == 'u' && j + 1 < s_.size() && s_[j] == '&' && s_[j + 1] == '\'')
      return quoted(i_, j + 1, Literal::Kind::other);
    for (std::size_t k = i_; k < j; ++k) *w_++ = kBytes.lower[byte(s_[k])];
    i_ = j;
    return true;
  }

  std::string_view s_;
  ScannedText& out_;
  char* key_ = nullptr;  // out_.key's buffer
  char* w_ = nullptr;    // where the next byte of the key goes
  std::size_t i_ = 0;
};

// Contents of '...' (from after the opening quote to before the closing one).
std::optional<std::string> plain_string(std::string_view body) {
  std::string v;
  v.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    v.push_back(body[i]);
    if (body[i] == '\'') ++i;  // '' stands for one quote
  }
  return v;
}

std::optional<std::string> escape_string(std::string_view body) {
  std::string v;
  v.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c == '\'') {
      v.push_back('\'');
      ++i;
      continue;
    }
    if (c != '\\') {
      v.push_back(c);
      continue;
    }
    if (++i >= body.size()) return std::nullopt;
    switch (char e = body[i]) {
      case 'b': v.push_back('\b'); break;
      case 'f': v.push_back('\f'); break;
      case 'n': v.push_back('\n'); break;
      case 'r': v.push_back('\r'); break;
      case 't': v.push_back('\t'); break;
      case 'x': case 'u': case 'U': return std::nullopt;  // rare in keys; let the parser do it
      default:
        if (e >= '0' && e <= '7') return std::nullopt;
        v.push_back(e);  // any other escaped character stands for itself
    }
  }
  return v;
}

}  // namespace

bool scan_text(std::string_view sql, ScannedText& out) {
  out.clear();
  Scanner scanner(sql, out);
  out.ok = scanner.run();
  return out.ok;
}

const ScannedText& scan_text_once(std::string_view sql) {
  thread_local std::string text;
  thread_local ScannedText scan;
  thread_local bool scanned = false;
  if (!scanned || text != sql) {
    text.assign(sql);
    scan_text(sql, scan);
    scanned = true;
  }
  return scan;
}

Hints scan_hints(std::string_view sql) {
  ScannedText t;
  scan_text(sql, t);
  return std::move(t.hints);
}

std::optional<std::string> literal_value(std::string_view sql, const Literal& lit) {
  std::string_view text = sql.substr(lit.start, lit.end - lit.start);
  switch (lit.kind) {
    case Literal::Kind::number:
      return std::string(text);
    case Literal::Kind::string: {
      std::size_t q = text.find('\'');  // skips an N prefix
      return plain_string(text.substr(q + 1, text.size() - q - 2));
    }
    case Literal::Kind::escape_string:
      return escape_string(text.substr(2, text.size() - 3));
    case Literal::Kind::dollar: {
      std::size_t tag = text.find('$', 1) + 1;
      return std::string(text.substr(tag, text.size() - 2 * tag));
    }
    case Literal::Kind::other:
      break;
  }
  return std::nullopt;
}

void parse_hint_comment(std::string_view body, Hints& out) {
  body = trim(body);
  constexpr std::string_view kPrefix = "splitpoint:";
  if (body.size() < kPrefix.size()) return;
  for (std::size_t i = 0; i < kPrefix.size(); ++i)
    if (lower(body[i]) != kPrefix[i]) return;
  body.remove_prefix(kPrefix.size());
  while (!body.empty()) {
    std::size_t comma = body.find(',');
    std::string_view item = trim(body.substr(0, comma));
    body = comma == std::string_view::npos ? std::string_view{} : body.substr(comma + 1);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    std::string key;
    for (char c : trim(item.substr(0, eq))) key.push_back(lower(c));
    std::string_view value = trim(item.substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '\'' || value.front() == '"') && value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    if (!key.empty()) out.emplace_back(std::move(key), std::string(value));
  }
}

TextSpan KeyTokens::next() {
  while (i_ < k_.size() && k_[i_] == ' ') ++i_;
  const std::size_t from = i_;
  if (i_ >= k_.size()) return {from, from};
  if (k_[i_] == '"') {  // "a""b"
    for (++i_; i_ < k_.size(); ++i_) {
      if (k_[i_] != '"') continue;
      if (i_ + 1 < k_.size() && k_[i_ + 1] == '"') {
        ++i_;
        continue;
      }
      ++i_;
      break;
    }
  } else if (is_identifier_char(k_[i_])) {
    while (i_ < k_.size() && is_identifier_char(k_[i_])) ++i_;
  } else {
    ++i_;
  }
  return {from, i_};
}

KeyWriter::KeyWriter(std::string_view sql, const ScannedText& scan, std::string& out)
    : sql_(sql), scan_(scan), out_(out) {
  out_.reserve(out_.size() + sql.size() + 64);
}

void KeyWriter::copy_to(std::size_t to) {
  const std::string_view key = scan_.key;
  while (pos_ < to) {
    const std::size_t end = std::min(key.find('\0', pos_), to);
    out_.append(key.substr(pos_, end - pos_));
    pos_ = end;
    if (pos_ < to) {
      const Literal& lit = scan_.literals[literal_++];
      out_.append(sql_.substr(lit.start, lit.end - lit.start));
      ++pos_;
    }
  }
}

void KeyWriter::skip_to(std::size_t to) {
  const std::string_view key = scan_.key;
  literal_ += static_cast<std::size_t>(std::count(key.begin() + pos_, key.begin() + to, '\0'));
  pos_ = to;
}

std::string quote_ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace splitpoint::routing
