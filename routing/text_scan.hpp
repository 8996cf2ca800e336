// A cheap lexical pass over a statement's text, PostgreSQL's lexical rules only as far
// as they matter here (https://www.postgresql.org/docs/15/sql-syntax-lexical.html):
//  - the normalised text, the cache key for simple-protocol plans: literals become a
//    NUL placeholder (PostgreSQL texts never contain NUL), comments are dropped,
//    whitespace runs become one space, unquoted ASCII letters are lower-cased;
//  - where each literal is, so a cached plan can read key values from a new text;
//  - the comment hints `/* splitpoint: key=value, ... */` (the parse tree has no comments).
// It never decides routing by itself: a plan always comes from PostgreSQL's parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace splitpoint::routing {

using Hints = std::vector<std::pair<std::string, std::string>>;

struct Literal {
  enum class Kind : std::uint8_t { string, escape_string, dollar, number, other };
  std::uint32_t start = 0;  // byte offset of the literal's first byte (the E of E'..')
  std::uint32_t end = 0;    // one past its last byte
  Kind kind = Kind::other;
};

struct ScannedText {
  std::string key;
  std::vector<Literal> literals;
  Hints hints;
  bool ok = false;  // false: an unterminated literal or comment; leave it to the parser

  void clear() {
    key.clear();
    literals.clear();
    hints.clear();
    ok = false;
  }
};

// Scans `sql` into `out` (whose buffers are reused). Returns out.ok.
bool scan_text(std::string_view sql, ScannedText& out);

// The scan of `sql` kept by this thread: a second call with the same text in a row (the
// router's scan and then the scatter planner's, of one statement) scans nothing. Valid
// until the next call on this thread.
const ScannedText& scan_text_once(std::string_view sql);

// Only the hints of `sql` (for prepared statements, whose plans are not cached by text).
Hints scan_hints(std::string_view sql);

// The value PostgreSQL's lexer gives a literal: a string's contents, a number's text.
// nullopt when this scanner cannot be sure (unicode escapes, octal/hex escapes, bit
// strings), in which case the caller must fall back to a full parse.
std::optional<std::string> literal_value(std::string_view sql, const Literal& lit);

// Reads the `key=value` pairs of one comment body if it is a splitpoint hint
// ("splitpoint: shard=s1, deadline=200ms"); keys are lower-cased.
void parse_hint_comment(std::string_view body, Hints& out);

// A character that continues an unquoted identifier (letters, digits, _, $, any
// non-ASCII byte): `a$1` is one identifier, not `a` and the parameter `$1`.
constexpr bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// The tokens of a normalised text (ScannedText::key), for the few statements whose text
// the proxy edits (routing/insert_split.cpp) or answers from (sequence reads).
struct TextSpan {
  std::size_t from = 0, to = 0;
};
class KeyTokens {
 public:
  explicit KeyTokens(std::string_view key) : k_(key) {}
  // The next token: a word (identifier, keyword, $n), a quoted identifier, a literal
  // (NUL) or one other byte. Empty at the end.
  TextSpan next();
  std::string_view text(TextSpan t) const { return k_.substr(t.from, t.to - t.from); }
  bool is(TextSpan t, std::string_view word) const { return text(t) == word; }
  bool name(TextSpan t) const { return t.to > t.from && (k_[t.from] == '"' || is_identifier_char(k_[t.from])); }
  std::size_t position() const { return i_; }
  void rewind(std::size_t to) { i_ = to; }

 private:
  std::string_view k_;
  std::size_t i_ = 0;
};

// Writes `sql` again from its normalised text (`scan`), front to back, each NUL given
// back its literal's source text: the way an edited statement keeps the client's
// literals as written.
class KeyWriter {
 public:
  KeyWriter(std::string_view sql, const ScannedText& scan, std::string& out);
  void copy_to(std::size_t to);  // the normalised text up to `to`
  void skip_to(std::size_t to);  // leaves it out up to `to`
  void append(std::string_view text) { out_.append(text); }
  std::size_t literals_passed() const { return literal_; }

 private:
  std::string_view sql_;
  const ScannedText& scan_;
  std::string& out_;
  std::size_t pos_ = 0, literal_ = 0;
};

// `name` as a quoted identifier ("a""b" for a"b), safe in any SQL text.
std::string quote_ident(std::string_view name);

}  // namespace splitpoint::routing
