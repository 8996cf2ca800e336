#include "routing/sequence_read.hpp"

#include "routing/text_scan.hpp"

namespace splitpoint::routing {

std::optional<SequenceRead> sequence_read(std::string_view sql) {
  const ScannedText& scan = scan_text_once(sql);
  if (!scan.ok) return std::nullopt;
  KeyTokens t(scan.key);
  if (!t.is(t.next(), "select")) return std::nullopt;
  TextSpan tok = t.next();
  if (t.is(tok, "pg_catalog")) {
    if (!t.is(t.next(), ".")) return std::nullopt;
    tok = t.next();
  }
  SequenceRead out;
  out.lastval = t.is(tok, "lastval");
  if (!out.lastval && !t.is(tok, "currval")) return std::nullopt;
  out.column = t.text(tok);
  if (!t.is(t.next(), "(")) return std::nullopt;
  const std::size_t from = t.position();
  for (int depth = 1; depth > 0;) {
    tok = t.next();
    if (tok.from == tok.to) return std::nullopt;
    if (t.is(tok, "(")) ++depth;
    if (t.is(tok, ")")) --depth;
  }
  // The argument with its literals as written; the text holds no other literal.
  KeyWriter w(sql, scan, out.argument);
  w.skip_to(from);
  w.copy_to(tok.from);
  while (!out.argument.empty() && out.argument.back() == ' ') out.argument.pop_back();
  if (!out.argument.empty() && out.argument.front() == ' ') out.argument.erase(0, 1);
  if (out.lastval != out.argument.empty() || w.literals_passed() != scan.literals.size()) return std::nullopt;
  tok = t.next();
  if (t.is(tok, "as")) {
    tok = t.next();
    if (!t.name(tok)) return std::nullopt;
    out.column = t.text(tok);
    tok = t.next();
  }
  while (t.is(tok, ";")) tok = t.next();
  if (tok.from != tok.to) return std::nullopt;
  return out;
}

}  // namespace splitpoint::routing
