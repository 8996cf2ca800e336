// COPY statements and the COPY FROM STDIN data formats, as PostgreSQL 15 reads them
// (https://www.postgresql.org/docs/15/sql-copy.html). The splitter follows the server's
// own reader (copyfromparse.c) where the documentation is silent: how line ends are
// chosen by the first line, where "\." ends the data, what a last line without a line
// end means. A proxy that accepted or cut rows differently from the shards would send
// a shard rows it reads otherwise, or lose them.
#include "routing/copy.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <utility>

#include "routing/chars.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing {

namespace {

// ---- parse_copy -------------------------------------------------------------------

std::optional<CopyStatement> refuse(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return std::nullopt;
}

bool equals_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// An option's argument as PostgreSQL's defGetString reads it.
std::optional<std::string> arg_text(const PgQuery__Node* arg) {
  if (is(arg, PG_QUERY__NODE__NODE_STRING)) return std::string(str_of(arg));
  if (is(arg, PG_QUERY__NODE__NODE_INTEGER)) return std::to_string(arg->integer->ival);
  if (is(arg, PG_QUERY__NODE__NODE_FLOAT) && arg->float_->fval != nullptr) return std::string(arg->float_->fval);
  if (is(arg, PG_QUERY__NODE__NODE_BOOLEAN)) return std::string(arg->boolean->boolval ? "true" : "false");
  return std::nullopt;
}

enum class Choice : std::uint8_t { no, yes, match, invalid };

// defGetBoolean, and for HEADER defGetCopyHeaderChoice's "match": no argument is
// true, integers only 0 and 1, words true/false/on/off in any case.
Choice arg_choice(const PgQuery__Node* arg, bool allow_match) {
  if (arg == nullptr) return Choice::yes;
  if (is(arg, PG_QUERY__NODE__NODE_INTEGER)) {
    int v = arg->integer->ival;
    return v == 0 ? Choice::no : v == 1 ? Choice::yes : Choice::invalid;
  }
  auto s = arg_text(arg);
  if (!s) return Choice::invalid;
  if (equals_nocase(*s, "true") || equals_nocase(*s, "on")) return Choice::yes;
  if (equals_nocase(*s, "false") || equals_nocase(*s, "off")) return Choice::no;
  if (allow_match && equals_nocase(*s, "match")) return Choice::match;
  return Choice::invalid;
}

std::optional<std::vector<std::string>> arg_columns(const PgQuery__Node* arg) {
  if (!is(arg, PG_QUERY__NODE__NODE_LIST)) return std::nullopt;
  std::vector<std::string> out;
  for (std::size_t i = 0; i < arg->list->n_items; ++i) out.emplace_back(str_of(arg->list->items[i]));
  return out;
}

// pg_char_to_encoding ignores case and punctuation; "unicode" is an alias of UTF8.
bool is_utf8(std::string_view name) {
  std::string clean;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c))) clean += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return clean == "utf8" || clean == "unicode";
}

struct Given {
  std::optional<std::string> delimiter, null_string, quote, escape;
  bool format = false, header = false, freeze = false, encoding = false;
  bool force_quote = false, force_not_null = false, force_null = false;
};

// One option of the list; returns the reason PostgreSQL would refuse it, or "".
std::string take_option(const PgQuery__DefElem* d, bool is_from, CopyStatement& st, Given& g) {
  std::string_view name = d->defname != nullptr ? d->defname : "";
  const PgQuery__Node* arg = d->arg;
  auto once = [](bool& seen) { return std::exchange(seen, true); };
  const std::string redundant = "conflicting or redundant options";
  const std::string needs_argument = std::string(name) + " requires a parameter";
  if (name == "format") {
    if (once(g.format)) return redundant;
    if (!arg_text(arg)) return needs_argument;
    std::string f = *arg_text(arg);
    if (f == "text") st.format = CopyStatement::Format::text;
    else if (f == "csv") st.format = CopyStatement::Format::csv;
    else if (f == "binary") st.format = CopyStatement::Format::binary;
    else return "COPY format \"" + f + "\" not recognized";
  } else if (name == "header") {
    if (once(g.header)) return redundant;
    Choice c = arg_choice(arg, true);
    if (c == Choice::invalid) return "header requires a Boolean value or \"match\"";
    if (c == Choice::match && !is_from) return "cannot use \"match\" with HEADER in COPY TO";
    // MATCH only makes each shard compare the names; the line is skipped either way.
    st.header = c != Choice::no;
  } else if (name == "freeze") {
    if (once(g.freeze)) return redundant;
    if (arg_choice(arg, false) == Choice::invalid) return "freeze requires a Boolean value";
  } else if (name == "delimiter" || name == "null" || name == "quote" || name == "escape") {
    auto& slot = name == "delimiter" ? g.delimiter : name == "null" ? g.null_string : name == "quote" ? g.quote : g.escape;
    if (slot) return redundant;
    slot = arg_text(arg);
    if (!slot) return needs_argument;
  } else if (name == "encoding") {
    if (once(g.encoding)) return redundant;
    if (!arg_text(arg)) return needs_argument;
    // The splitter reads bytes as ASCII-compatible UTF8; another encoding could hide a
    // delimiter or quote inside a multibyte character.
    if (!is_utf8(arg_text(arg).value_or(""))) return "COPY through splitpoint supports only ENCODING 'UTF8'";
    st.encoding_given = true;
  } else if (name == "force_quote") {
    if (once(g.force_quote)) return redundant;
    if (is(arg, PG_QUERY__NODE__NODE_A_STAR)) {
      st.force_quote_all = true;
    } else {
      auto cols = arg_columns(arg);
      if (!cols) return "argument to option \"force_quote\" must be a list of column names";
      st.force_quote = std::move(*cols);
    }
  } else if (name == "force_not_null" || name == "force_null") {
    bool& seen = name == "force_null" ? g.force_null : g.force_not_null;
    if (once(seen)) return redundant;
    auto cols = arg_columns(arg);
    if (!cols) return "argument to option \"" + std::string(name) + "\" must be a list of column names";
    (name == "force_null" ? st.force_null : st.force_not_null) = std::move(*cols);
  } else if (name != "convert_selectively") {  // accepted by PostgreSQL, changes no row
    return "option \"" + std::string(name) + "\" not recognized";
  }
  return {};
}

// The cross-option checks of PostgreSQL's ProcessCopyOptions that decide how the data
// is cut, applied after the defaults that depend on the format.
std::string settle_options(bool is_from, CopyStatement& st, const Given& g) {
  const bool csv = st.format == CopyStatement::Format::csv;
  if (st.format == CopyStatement::Format::binary) {
    if (g.delimiter) return "cannot specify DELIMITER in BINARY mode";
    if (g.null_string) return "cannot specify NULL in BINARY mode";
    if (g.header) return "cannot specify HEADER in BINARY mode";
  }
  if (!csv && g.quote) return "COPY quote available only in CSV mode";
  if (!csv && g.escape) return "COPY escape available only in CSV mode";
  if (!csv && g.force_quote) return "COPY force quote available only in CSV mode";
  if (!csv && g.force_not_null) return "COPY force not null available only in CSV mode";
  if (!csv && g.force_null) return "COPY force null available only in CSV mode";
  if (g.force_quote && is_from) return "COPY force quote only available using COPY TO";
  if (g.force_not_null && !is_from) return "COPY force not null only available using COPY FROM";
  if (g.force_null && !is_from) return "COPY force null only available using COPY FROM";
  st.delimiter = csv ? ',' : '\t';
  st.null_string = csv ? "" : "\\N";
  if (g.delimiter) {
    if (g.delimiter->size() != 1) return "COPY delimiter must be a single one-byte character";
    st.delimiter = (*g.delimiter)[0];
  }
  if (g.null_string) st.null_string = *g.null_string;
  if (g.quote) {
    if (g.quote->size() != 1) return "COPY quote must be a single one-byte character";
    st.quote = (*g.quote)[0];
  }
  st.escape = st.quote;
  if (g.escape) {
    if (g.escape->size() != 1) return "COPY escape must be a single one-byte character";
    st.escape = (*g.escape)[0];
  }
  if (st.delimiter == '\n' || st.delimiter == '\r') return "COPY delimiter cannot be newline or carriage return";
  if (st.null_string.find_first_of("\r\n") != std::string::npos)
    return "COPY null representation cannot use newline or carriage return";
  if (st.format == CopyStatement::Format::text &&
      std::strchr("\\.abcdefghijklmnopqrstuvwxyz0123456789", st.delimiter) != nullptr)
    return std::string("COPY delimiter cannot be \"") + st.delimiter + "\"";
  if (csv && st.delimiter == st.quote) return "COPY delimiter and quote must be different";
  if (st.format != CopyStatement::Format::binary && st.null_string.find(st.delimiter) != std::string::npos)
    return "COPY delimiter must not appear in the NULL specification";
  if (csv && st.null_string.find(st.quote) != std::string::npos)
    return "CSV quote character must not appear in the NULL specification";
  return {};
}

// ---- the splitter -------------------------------------------------------------------

std::uint32_t be32(const std::string& b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

std::int16_t be16(const std::string& b, std::size_t at) {
  return static_cast<std::int16_t>((static_cast<unsigned char>(b[at]) << 8) | static_cast<unsigned char>(b[at + 1]));
}

bool is_octal(char c) { return c >= '0' && c <= '7'; }

// The 11-byte binary signature, https://www.postgresql.org/docs/15/sql-copy.html#id-1.9.3.55.9.4.5
constexpr std::string_view kSignature{"PGCOPY\n\377\r\n\0", 11};
constexpr std::size_t kBinaryHeader = 11 + 4 + 4;

}  // namespace

std::optional<CopyStatement> parse_copy(std::string_view sql, std::string* error) {
  ParseTree tree = ParseTree::parse(sql);
  if (!tree.ok()) return refuse(error, tree.error().message);
  PgQuery__ParseResult* r = tree.tree();
  if (r->n_stmts != 1 || r->stmts[0] == nullptr || !is(r->stmts[0]->stmt, PG_QUERY__NODE__NODE_COPY_STMT))
    return refuse(error, "not a single COPY statement");
  return copy_statement(r->stmts[0]->stmt->copy_stmt, error);
}

std::optional<CopyStatement> copy_statement(const PgQuery__CopyStmt* c, std::string* error) {
  CopyStatement st;
  if (c->relation != nullptr) {
    st.schema = c->relation->schemaname != nullptr ? c->relation->schemaname : "";
    st.table = c->relation->relname != nullptr ? c->relation->relname : "";
  }
  for (std::size_t i = 0; i < c->n_attlist; ++i) st.columns.emplace_back(str_of(c->attlist[i]));
  st.is_query = c->query != nullptr;
  // protobuf has no NULL string: an absent file name (STDIN/STDOUT) reads as "".
  const bool client_side = !c->is_program && (c->filename == nullptr || c->filename[0] == '\0');
  st.from_stdin = c->is_from && client_side;
  st.to_stdout = !c->is_from && client_side;

  Given given;
  for (std::size_t i = 0; i < c->n_options; ++i) {
    if (!is(c->options[i], PG_QUERY__NODE__NODE_DEF_ELEM)) return refuse(error, "unexpected COPY option");
    if (auto why = take_option(c->options[i]->def_elem, c->is_from, st, given); !why.empty()) return refuse(error, why);
  }
  if (auto why = settle_options(c->is_from, st, given); !why.empty()) return refuse(error, why);
  return st;
}

CopySplitter::CopySplitter(const CopyStatement& statement, std::size_t key_index, std::string_view key_column)
    : stmt_(statement), key_index_(key_index) {
  key_name_ = key_index < stmt_.columns.size() ? stmt_.columns[key_index] : std::string(key_column);
  const bool csv = stmt_.format == CopyStatement::Format::csv;
  if (stmt_.format == CopyStatement::Format::binary) {
    phase_ = Phase::header;
    epilogue_.assign(2, '\xff');  // the trailer: a field count of -1
  } else if (stmt_.header) {
    phase_ = Phase::header;
  } else {
    prologue_ready_ = true;
  }
  // The bytes where the line scan has something to decide; all others are skipped.
  for (char c : {'\n', '\r', '\\'}) special_[static_cast<unsigned char>(c)] = true;
  if (csv) special_[static_cast<unsigned char>(stmt_.quote)] = special_[static_cast<unsigned char>(stmt_.escape)] = true;
  if (csv && (!stmt_.force_not_null.empty() || !stmt_.force_null.empty())) {
    if (key_name_.empty()) {
      error_ = "FORCE_NOT_NULL and FORCE_NULL need the key column's name";
      return;
    }
    auto has = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), key_name_) != v.end(); };
    force_not_null_key_ = has(stmt_.force_not_null);
    force_null_key_ = has(stmt_.force_null);
  }
}

bool CopySplitter::fail(std::string message) {
  if (phase_ == Phase::rows) {
    std::uint64_t line = rows_ + 1 + (stmt_.header ? 1 : 0);
    message += " (COPY line " + std::to_string(line) + ")";
  }
  error_ = std::move(message);
  return false;
}

bool CopySplitter::missing_key() {
  return fail(key_name_.empty() ? "missing data for column number " + std::to_string(key_index_ + 1)
                                : "missing data for column \"" + key_name_ + "\"");
}

bool CopySplitter::feed(std::string_view data) {
  if (!error_.empty()) return false;
  if (phase_ == Phase::ended) {
    // PostgreSQL reads and drops everything after "\."; after a binary trailer it
    // refuses more data.
    if (stmt_.format == CopyStatement::Format::binary && !data.empty()) return fail("received copy data after EOF marker");
    return true;
  }
  // Drop what has been handed out: only rows not yet taken and the incomplete tail stay.
  std::size_t drop = next_ready_ < ready_.size() ? ready_[next_ready_].begin : row_start_;
  ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(next_ready_));
  next_ready_ = 0;
  for (auto& r : ready_) r.begin -= drop;
  buf_.erase(0, drop);
  row_start_ -= drop;
  scan_ -= drop;
  buf_.append(data);
  return scan(false);
}

bool CopySplitter::next_row(CopyRow& row) {
  if (next_ready_ >= ready_.size()) return false;
  Ready& r = ready_[next_ready_++];
  row.bytes = std::string_view(buf_).substr(r.begin, r.size);
  row.key = std::move(r.key);
  return true;
}

bool CopySplitter::finish() {
  if (!error_.empty()) return false;
  if (phase_ == Phase::ended) return true;
  return scan(true);
}

bool CopySplitter::scan(bool at_eof) {
  return stmt_.format == CopyStatement::Format::binary ? scan_binary(at_eof) : scan_lines(at_eof);
}

// What follows a "\" at `at`: whether it starts the end-of-data marker. Text mode
// takes "\." anywhere a backslash is not escaped and refuses a malformed marker; csv
// only at the start of a line, and a malformed one is data (copyfromparse.c).
CopySplitter::Marker CopySplitter::marker(std::size_t at, bool at_eof) {
  const bool csv = stmt_.format == CopyStatement::Format::csv;
  // Past the end: unknown until more data comes, or NUL at the end (the server's pad).
  auto byte = [&](std::size_t i) { return i < buf_.size() ? static_cast<unsigned char>(buf_[i]) : at_eof ? 0 : -1; };
  auto bad = [&](const char* message) {
    fail(message);
    return Marker::error;
  };
  int c = byte(at + 1);
  if (c < 0) return Marker::need_more;
  if (c != '.') return Marker::none;
  std::size_t p = at + 2;
  if (eol_ == Eol::crnl) {
    c = byte(p++);
    if (c < 0) return Marker::need_more;
    if (c == '\n' && !csv) return bad("end-of-copy marker does not match previous newline style");
    if (c != '\r') return csv ? Marker::none : bad("end-of-copy marker corrupt");
  }
  c = byte(p++);
  if (c < 0) return Marker::need_more;
  if (c != '\r' && c != '\n') return csv ? Marker::none : bad("end-of-copy marker corrupt");
  if (((eol_ == Eol::nl || eol_ == Eol::crnl) && c != '\n') || (eol_ == Eol::cr && c != '\r'))
    return bad("end-of-copy marker does not match previous newline style");
  return Marker::end;
}

// Cuts lines as CopyReadLineText does: the first line end fixes the style ("\n",
// "\r\n" or "\r") and a different one later is an error; in text a backslash takes
// the next byte with it, in csv line ends inside quotes are data.
bool CopySplitter::scan_lines(bool at_eof) {
  const bool csv = stmt_.format == CopyStatement::Format::csv;
  const char quote = stmt_.quote;
  const char escape = stmt_.escape;
  // With escape == quote a doubled quote simply toggles twice.
  const bool escape_special = csv && escape != quote;
  while (phase_ != Phase::ended) {
    const std::size_t n = buf_.size();
    std::size_t content_end = 0;
    std::size_t next = 0;
    while (scan_ < n && next == 0) {
      char c = buf_[scan_];
      if (!special_[static_cast<unsigned char>(c)]) {
        last_was_escape_ = false;  // as for any byte that is not the escape
        ++scan_;
        continue;
      }
      if (c == '\\' && (!csv || scan_ == row_start_)) {
        switch (marker(scan_, at_eof)) {
          case Marker::need_more: return true;
          case Marker::error: return false;
          case Marker::end: return end_of_data(scan_);
          case Marker::none: break;
        }
        if (!csv) {  // an escaped byte is never a line end or a delimiter
          scan_ = std::min(scan_ + 2, n);
          continue;
        }
      }
      // A "\r" needs the next byte to tell "\r\n" from "\r"; wait before touching state.
      if (c == '\r' && scan_ + 1 >= n && !at_eof && (eol_ == Eol::unknown || eol_ == Eol::crnl)) return true;
      if (csv) {
        if (escape_special && in_quote_ && c == escape) last_was_escape_ = !last_was_escape_;
        if (c == quote && !last_was_escape_) in_quote_ = !in_quote_;
        if (c != escape) last_was_escape_ = false;
        if (in_quote_ && (c == '\r' || c == '\n')) {
          ++scan_;
          continue;
        }
      }
      if (c == '\r') {
        std::size_t eol_len = 1;
        if (eol_ == Eol::unknown || eol_ == Eol::crnl) {
          if (scan_ + 1 < n && buf_[scan_ + 1] == '\n') {
            eol_ = Eol::crnl;
            eol_len = 2;
          } else if (eol_ == Eol::crnl) {
            return fail(csv ? "unquoted carriage return found in data" : "literal carriage return found in data");
          } else {
            eol_ = Eol::cr;
          }
        } else if (eol_ == Eol::nl) {
          return fail(csv ? "unquoted carriage return found in data" : "literal carriage return found in data");
        }
        content_end = scan_;
        next = scan_ + eol_len;
      } else if (c == '\n') {
        if (eol_ == Eol::cr || eol_ == Eol::crnl)
          return fail(csv ? "unquoted newline found in data" : "literal newline found in data");
        eol_ = Eol::nl;
        content_end = scan_;
        next = scan_ + 1;
      } else {
        ++scan_;
      }
    }
    if (next == 0) {
      if (!at_eof || scan_ == row_start_) return true;
      // The server reads a last line without a line end as a row; it splits a header
      // line into fields only for HEADER MATCH, which each shard does itself.
      if (csv && in_quote_ && phase_ == Phase::rows) return fail("unterminated CSV quoted field");
      content_end = next = n;
    }
    if (!line_done(content_end, next)) return false;
  }
  return true;
}

bool CopySplitter::line_done(std::size_t content_end, std::size_t next) {
  if (phase_ == Phase::header) {
    prologue_.assign(buf_, row_start_, next - row_start_);
    prologue_ready_ = true;
    phase_ = Phase::rows;
  } else {
    std::string_view line(buf_.data() + row_start_, content_end - row_start_);
    std::optional<std::string> key;
    if (!(stmt_.format == CopyStatement::Format::csv ? key_csv(line, key) : key_text(line, key))) return false;
    ready_.push_back({row_start_, next - row_start_, std::move(key)});
    ++rows_;
  }
  row_start_ = scan_ = next;
  in_quote_ = last_was_escape_ = false;
  return true;
}

// "\." at `marker_at`: what precedes it on its line is a last row (text only; the
// server's "EOF after some characters"), everything after it is dropped.
bool CopySplitter::end_of_data(std::size_t marker_at) {
  if (marker_at > row_start_ && !line_done(marker_at, marker_at)) return false;
  prologue_ready_ = true;
  phase_ = Phase::ended;
  return true;
}

// The fields of a text line as CopyReadAttributesText splits them; the key is
// de-escaped, and NULL when its raw bytes equal the null string.
bool CopySplitter::key_text(std::string_view line, std::optional<std::string>& key) {
  const char delim = stmt_.delimiter;
  std::size_t i = 0;
  for (std::size_t field = 0;; ++field) {
    const bool want = field == key_index_;
    const std::size_t start = i;
    std::size_t end = i;
    bool found_delim = false;
    std::string value;
    for (;;) {
      end = i;
      if (i >= line.size()) break;
      char c = line[i++];
      if (c == delim) {
        found_delim = true;
        break;
      }
      if (c == '\\') {
        if (i >= line.size()) break;  // a backslash ending the line is dropped
        c = line[i++];
        if (is_octal(c)) {
          int v = c - '0';
          for (int k = 0; k < 2 && i < line.size() && is_octal(line[i]); ++k) v = v * 8 + (line[i++] - '0');
          c = static_cast<char>(v & 0377);
        } else if (c == 'x' && i < line.size() && hex_value(line[i]) >= 0) {
          int v = hex_value(line[i++]);
          if (i < line.size() && hex_value(line[i]) >= 0) v = v * 16 + hex_value(line[i++]);
          c = static_cast<char>(v);
        } else {
          switch (c) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'v': c = '\v'; break;
            default: break;  // any other byte stands for itself
          }
        }
      }
      if (want) value.push_back(c);
    }
    if (want) {
      if (line.substr(start, end - start) == stmt_.null_string) key.reset();
      else key = std::move(value);
      return true;
    }
    if (!found_delim) return missing_key();
  }
}

// The fields of a csv line as CopyReadAttributesCSV splits them: quotes may open and
// close anywhere in a field, inside them the escape character escapes itself and the
// quote; only an unquoted field equal to the null string is NULL.
bool CopySplitter::key_csv(std::string_view line, std::optional<std::string>& key) {
  const char delim = stmt_.delimiter;
  const char quote = stmt_.quote;
  const char escape = stmt_.escape;
  std::size_t i = 0;
  for (std::size_t field = 0;; ++field) {
    const bool want = field == key_index_;
    const std::size_t start = i;
    std::size_t end = i;
    bool found_delim = false;
    bool saw_quote = false;
    bool quoted = false;
    std::string value;
    for (;;) {
      end = i;
      if (i >= line.size()) {
        if (quoted) return fail("unterminated CSV quoted field");
        break;
      }
      char c = line[i++];
      if (!quoted) {
        if (c == delim) {
          found_delim = true;
          break;
        }
        if (c == quote) {
          saw_quote = quoted = true;
          continue;
        }
      } else if (c == escape && i < line.size() && (line[i] == escape || line[i] == quote)) {
        c = line[i++];
      } else if (c == quote) {
        quoted = false;
        continue;
      }
      if (want) value.push_back(c);
    }
    if (want) {
      if (!saw_quote && line.substr(start, end - start) == stmt_.null_string) key.reset();
      else key = std::move(value);
      // NextCopyFrom's FORCE_NOT_NULL / FORCE_NULL, in its order.
      if (!key && force_not_null_key_) key = stmt_.null_string;
      else if (key && force_null_key_ && *key == stmt_.null_string) key.reset();
      return true;
    }
    if (!found_delim) return missing_key();
  }
}

// Binary: header, then tuples (int16 field count, per field int32 length or -1 for
// NULL, then the bytes), then the trailer -1. As ReceiveCopyBinaryHeader and
// NextCopyFrom read it: flag bit 16 (OIDs) and bits 17-31 are refused; the stream may
// end at a tuple boundary without the trailer (and a lone byte there is ignored).
bool CopySplitter::scan_binary(bool at_eof) {
  const std::size_t n = buf_.size();
  if (phase_ == Phase::header) {
    if (buf_.compare(0, std::min(n, kSignature.size()), kSignature.substr(0, std::min(n, kSignature.size()))) != 0 ||
        (at_eof && n < kSignature.size()))
      return fail("COPY file signature not recognized");
    if (n >= 15) {
      std::uint32_t flags = be32(buf_, 11);
      if ((flags & (1u << 16)) != 0) return fail("invalid COPY file header (WITH OIDS)");
      if ((flags >> 17) != 0) return fail("unrecognized critical flags in COPY file header");
    }
    if (n < kBinaryHeader)
      return at_eof ? fail(n < 15 ? "invalid COPY file header (missing flags)" : "invalid COPY file header (missing length)")
                    : true;
    auto extension = static_cast<std::int32_t>(be32(buf_, 15));
    if (extension < 0) return fail("invalid COPY file header (missing length)");
    if (n - kBinaryHeader < static_cast<std::size_t>(extension))
      return at_eof ? fail("invalid COPY file header (wrong length)") : true;
    prologue_.assign(buf_, 0, kBinaryHeader + static_cast<std::size_t>(extension));
    prologue_ready_ = true;
    phase_ = Phase::rows;
    row_start_ = scan_ = prologue_.size();
  }
  while (phase_ == Phase::rows) {
    if (scan_ == row_start_) {  // the field count is not read yet
      if (n - row_start_ < 2) return true;
      std::int16_t count = be16(buf_, row_start_);
      if (count == -1) {
        phase_ = Phase::ended;
        return n - row_start_ > 2 ? fail("received copy data after EOF marker") : true;
      }
      if (count < 0) return fail("row field count is " + std::to_string(count));
      if (static_cast<std::size_t>(count) <= key_index_) return missing_key();
      field_count_ = static_cast<std::size_t>(count);
      field_ = 0;
      scan_ = row_start_ + 2;
    }
    for (; field_ < field_count_; ++field_) {
      if (n - scan_ < 4) return at_eof ? fail("unexpected EOF in COPY data") : true;
      auto size = static_cast<std::int32_t>(be32(buf_, scan_));
      if (size < -1) return fail("invalid field size");
      std::size_t len = size < 0 ? 0 : static_cast<std::size_t>(size);
      if (n - scan_ - 4 < len) return at_eof ? fail("unexpected EOF in COPY data") : true;
      if (field_ == key_index_) key_ = size < 0 ? std::nullopt : std::optional<std::string>(buf_.substr(scan_ + 4, len));
      scan_ += 4 + len;
    }
    ready_.push_back({row_start_, scan_ - row_start_, std::move(key_)});
    key_.reset();
    ++rows_;
    row_start_ = scan_;
  }
  return true;
}

std::optional<std::string> append_fields(const CopyStatement& statement, std::string_view row,
                                         const std::vector<std::string>& values, const std::vector<int>& widths) {
  if (statement.format != CopyStatement::Format::binary) {
    std::size_t end = row.size();
    if (end > 0 && row[end - 1] == '\n') --end;
    if (end > 0 && row[end - 1] == '\r') --end;
    std::string out(row.substr(0, end));
    for (const auto& v : values) {
      out.push_back(statement.delimiter);
      out += v;
    }
    out += row.substr(end);
    return out;
  }
  if (row.size() < 2 || values.size() != widths.size()) return std::nullopt;
  std::string out(row);
  const unsigned count = (static_cast<unsigned char>(out[0]) << 8 | static_cast<unsigned char>(out[1])) + values.size();
  out[0] = static_cast<char>(count >> 8);
  out[1] = static_cast<char>(count & 0xff);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const int width = widths[i];
    std::int64_t v = 0;
    const char* first = values[i].data();
    const char* last = first + values[i].size();
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || ptr != last || (width != 2 && width != 4 && width != 8)) return std::nullopt;
    if (width < 8 && (v < -(std::int64_t{1} << (8 * width - 1)) || v >= (std::int64_t{1} << (8 * width - 1))))
      return std::nullopt;
    for (int b = 3; b >= 0; --b) out.push_back(static_cast<char>((width >> (8 * b)) & 0xff));
    const auto u = static_cast<std::uint64_t>(v);
    for (int b = width - 1; b >= 0; --b) out.push_back(static_cast<char>((u >> (8 * b)) & 0xff));
  }
  return out;
}

}  // namespace splitpoint::routing
