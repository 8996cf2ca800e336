#include "routing/session_command.hpp"

#include <pg_query.h>

#include "routing/chars.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

// ASCII only, as PostgreSQL's keywords, and inline: the first word of every Query is
// read (the <cctype> calls cost a function call per byte).
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

class Words {
 public:
  explicit Words(std::string_view s) : s_(s) {}

  // Next word (identifier, keyword, or quoted identifier) lower-cased, or "" at a
  // symbol or the end. Skips whitespace and comments.
  std::string next() {
    skip_space();
    std::string w;
    if (pos_ < s_.size() && s_[pos_] == '"') {
      for (++pos_; pos_ < s_.size() && s_[pos_] != '"'; ++pos_) w.push_back(s_[pos_]);
      ++pos_;
      return w;
    }
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (!is_word_char(c)) break;
      w.push_back(ascii_lower(c));
      ++pos_;
    }
    return w;
  }

  // After the next word: whether the rest is `TO DEFAULT` / `= DEFAULT` (SET x TO
  // DEFAULT is RESET x).
  bool rest_is_to_default() {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '=') ++pos_;
    else if (next() != "to") return false;
    if (next() != "default") return false;
    skip_space();
    while (pos_ < s_.size() && s_[pos_] == ';') ++pos_;
    skip_space();
    return pos_ == s_.size();
  }

 private:
  void skip_space() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (is_space(c)) {
        ++pos_;
      } else if (c == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '-') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*') {
        int depth = 0;
        do {
          if (s_.compare(pos_, 2, "/*") == 0) {
            ++depth;
            pos_ += 2;
          } else if (s_.compare(pos_, 2, "*/") == 0) {
            --depth;
            pos_ += 2;
          } else {
            ++pos_;
          }
        } while (depth > 0 && pos_ < s_.size());
      } else {
        break;
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string first_keyword(std::string_view sql) { return Words(sql).next(); }

std::vector<std::string_view> split_statements(std::string_view sql, bool standard_strings) {
  std::string text(sql);
  StringSyntax syntax(standard_strings);
  PgQuerySplitResult r = pg_query_split_with_scanner(text.c_str());
  std::vector<std::string_view> out;
  if (!r.error)
    for (int i = 0; i < r.n_stmts; ++i) {
      auto loc = static_cast<std::size_t>(r.stmts[i]->stmt_location);
      auto len = static_cast<std::size_t>(r.stmts[i]->stmt_len);
      if (loc <= sql.size()) out.push_back(sql.substr(loc, len == 0 ? std::string_view::npos : len));
    }
  pg_query_free_split_result(r);
  return out;
}

bool may_hold_several_statements(std::string_view sql) {
  const std::size_t first = sql.find(';');  // (after it, anything but blanks and ';' will do)
  return first != std::string_view::npos && sql.find_first_not_of(" \t\r\n;", first) != std::string_view::npos;
}

SessionCommandInfo classify_session_command(std::string_view sql) {
  Words words(sql);
  std::string first = words.next();
  if (first.empty() || first.size() > 10) return {};
  if (first == "set") {
    std::string w = words.next();
    if (w == "local") return {SessionCommand::set_local, {}};
    if (w == "session") {
      w = words.next();
      if (w == "characteristics") return {};  // SET SESSION CHARACTERISTICS AS TRANSACTION
      if (w == "authorization") return {SessionCommand::set, "session_authorization"};
    }
    if (w == "transaction" || w == "constraints" || w.empty()) return {};
    if (w == "time") return {SessionCommand::set, "timezone"};  // SET TIME ZONE
    if (words.rest_is_to_default()) return {SessionCommand::reset, w};
    return {SessionCommand::set, w};
  }
  if (first == "reset") {
    std::string w = words.next();
    if (w == "all") return {SessionCommand::reset_all, {}};
    if (w == "time") return {SessionCommand::reset, "timezone"};
    // (RESET SESSION AUTHORIZATION undoes SET SESSION AUTHORIZATION)
    if (w == "session" && words.next() == "authorization") return {SessionCommand::reset, "session_authorization"};
    if (w.empty()) return {};
    return {SessionCommand::reset, w};
  }
  if (first == "discard") {
    if (words.next() == "all") return {SessionCommand::discard_all, {}};
    return {};
  }
  if (first == "deallocate") {
    std::string w = words.next();
    if (w == "prepare") w = words.next();
    if (w == "all") return {SessionCommand::deallocate_all, {}};
    if (!w.empty()) return {SessionCommand::deallocate, w};
    return {};
  }
  if (first == "listen") return {SessionCommand::listen, {}};
  return {};
}

}  // namespace splitpoint::routing
