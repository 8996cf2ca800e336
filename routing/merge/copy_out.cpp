#include "routing/merge/copy_out.hpp"

#include <algorithm>

#include "routing/pg_tree.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

namespace {

std::uint32_t be32(std::string_view b, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

constexpr std::string_view kBinaryHeader{"PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19};  // signature, flags, extension

}  // namespace

std::optional<std::string> copy_source_query(std::string_view copy_sql, std::string* error) {
  ParseTree tree = ParseTree::parse(copy_sql);
  auto fail = [&](std::string why) -> std::optional<std::string> {
    if (error != nullptr) *error = std::move(why);
    return std::nullopt;
  };
  if (!tree.ok()) return fail(tree.error().message);
  PgQuery__ParseResult* r = tree.tree();
  if (r->n_stmts != 1 || r->stmts[0] == nullptr || !is(r->stmts[0]->stmt, PG_QUERY__NODE__NODE_COPY_STMT))
    return fail("not a single COPY statement");
  PgQuery__Node* copy = r->stmts[0]->stmt;
  const PgQuery__CopyStmt* c = copy->copy_stmt;
  if (c->query != nullptr) {
    // Deparse the query alone: the statement slot points at it for the moment.
    r->stmts[0]->stmt = c->query;
    std::optional<std::string> sql = deparse(r);
    r->stmts[0]->stmt = copy;
    if (!sql) return fail("could not print the query of the COPY statement");
    return sql;
  }
  if (c->relation == nullptr) return fail("COPY without a table or query");
  std::string sql = "SELECT ";
  for (std::size_t i = 0; i < c->n_attlist; ++i) sql += (i ? ", " : "") + quote_ident(str_of(c->attlist[i]));
  if (c->n_attlist == 0) sql += "*";
  sql += " FROM ONLY ";
  if (!sv(c->relation->schemaname).empty()) sql += quote_ident(c->relation->schemaname) + ".";
  sql += quote_ident(sv(c->relation->relname));
  return sql;
}

std::optional<std::string> copy_with_query(std::string_view copy_sql, std::string_view query) {
  ParseTree copy = ParseTree::parse(copy_sql), select = ParseTree::parse(query);
  if (!copy.ok() || !select.ok() || copy.tree()->n_stmts != 1 || select.tree()->n_stmts != 1 ||
      !is(copy.tree()->stmts[0]->stmt, PG_QUERY__NODE__NODE_COPY_STMT))
    return std::nullopt;
  // The select's node and the table's fields lent to the COPY while it is printed.
  PgQuery__CopyStmt* c = copy.tree()->stmts[0]->stmt->copy_stmt;
  PgQuery__Node* saved_query = c->query;
  PgQuery__RangeVar* saved_relation = c->relation;
  const std::size_t saved_n = c->n_attlist;
  c->query = select.tree()->stmts[0]->stmt;
  c->relation = nullptr;
  c->n_attlist = 0;
  std::optional<std::string> out = deparse(copy.tree());
  c->query = saved_query;
  c->relation = saved_relation;
  c->n_attlist = saved_n;
  return out;
}

CopyOutFormatter::CopyOutFormatter(const CopyStatement& statement, const std::vector<std::string>& columns)
    : stmt_(statement), force_quote_(columns.size(), statement.force_quote_all), ncols_(columns.size()), names_(columns) {
  for (const auto& name : stmt_.force_quote) {
    auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) {
      error_ = "FORCE_QUOTE column \"" + name + "\" not referenced by COPY";
      return;
    }
    force_quote_[static_cast<std::size_t>(it - columns.begin())] = true;
  }
}

// CopyAttributeOutText: backslash escapes for the delimiter, backslash and the control
// characters that have a letter; other bytes as they are (UTF-8 embeds no ASCII bytes).
void CopyOutFormatter::text_value(std::string_view v, std::string& out) const {
  const char delim = stmt_.delimiter;
  std::size_t start = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    char c = v[i];
    char esc = 0;
    if (static_cast<unsigned char>(c) < 0x20) {
      switch (c) {
        case '\b': esc = 'b'; break;
        case '\f': esc = 'f'; break;
        case '\n': esc = 'n'; break;
        case '\r': esc = 'r'; break;
        case '\t': esc = 't'; break;
        case '\v': esc = 'v'; break;
        default:
          if (c == delim) esc = c;
          break;
      }
    } else if (c == '\\' || c == delim) {
      esc = c;
    }
    if (esc == 0) continue;
    out.append(v.data() + start, i - start);
    out.push_back('\\');
    out.push_back(esc);
    start = i + 1;
  }
  out.append(v.data() + start, v.size() - start);
}

// CopyAttributeOutCSV: quoted when forced, equal to the NULL string, the lone value
// "\." of a one-column row, or containing the delimiter, the quote, CR or LF; inside
// quotes the quote and escape characters are preceded by the escape character.
void CopyOutFormatter::csv_value(std::string_view v, bool force, bool single, std::string& out) const {
  const char delim = stmt_.delimiter, quote = stmt_.quote, escape = stmt_.escape;
  bool use_quote = force || v == stmt_.null_string;
  if (!use_quote) {
    if (single && v == "\\.") {
      use_quote = true;
    } else {
      use_quote = std::any_of(v.begin(), v.end(),
                              [&](char c) { return c == delim || c == quote || c == '\n' || c == '\r'; });
    }
  }
  if (!use_quote) {
    out.append(v);
    return;
  }
  out.push_back(quote);
  std::size_t start = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != quote && v[i] != escape) continue;
    out.append(v.data() + start, i - start);
    out.push_back(escape);
    start = i;  // the character itself follows
  }
  out.append(v.data() + start, v.size() - start);
  out.push_back(quote);
}

std::string CopyOutFormatter::header() const {
  std::string out;
  if (!stmt_.header || binary()) return out;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (i > 0) out.push_back(stmt_.delimiter);
    if (stmt_.format == CopyStatement::Format::csv) {
      csv_value(names_[i], false, names_.size() == 1, out);
    } else {
      text_value(names_[i], out);
    }
  }
  out.push_back('\n');
  return out;
}

bool CopyOutFormatter::row(std::string_view d, std::string& out) {
  if (d.size() < 2) return false;
  const std::size_t n = (static_cast<unsigned char>(d[0]) << 8) | static_cast<unsigned char>(d[1]);
  if (n != ncols_) return false;
  std::size_t at = 2;
  if (binary()) {
    // A binary row is the DataRow body itself: field count, then length + bytes each.
    if (!wrote_signature_) out.append(kBinaryHeader);
    wrote_signature_ = true;
    for (std::size_t i = 0; i < n; ++i) {
      if (d.size() - at < 4) return false;
      auto len = static_cast<std::int32_t>(be32(d, at));
      at += 4;
      if (len > 0 && d.size() - at < static_cast<std::size_t>(len)) return false;
      if (len > 0) at += static_cast<std::size_t>(len);
    }
    if (at != d.size()) return false;
    out.append(d);
    return true;
  }
  const bool csv = stmt_.format == CopyStatement::Format::csv;
  for (std::size_t i = 0; i < n; ++i) {
    if (d.size() - at < 4) return false;
    auto len = static_cast<std::int32_t>(be32(d, at));
    at += 4;
    if (i > 0) out.push_back(stmt_.delimiter);
    if (len < 0) {
      out.append(stmt_.null_string);
      continue;
    }
    if (d.size() - at < static_cast<std::size_t>(len)) return false;
    std::string_view v = d.substr(at, static_cast<std::size_t>(len));
    at += static_cast<std::size_t>(len);
    if (csv) {
      csv_value(v, force_quote_[i], n == 1, out);
    } else {
      text_value(v, out);
    }
  }
  if (at != d.size()) return false;
  out.push_back('\n');
  return true;
}

std::string CopyOutFormatter::trailer() const {
  std::string out;
  if (!binary()) return out;
  if (!wrote_signature_) out.append(kBinaryHeader);
  out.append("\xff\xff", 2);
  return out;
}

}  // namespace splitpoint::routing
