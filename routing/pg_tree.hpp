// A statement's parse tree from libpg_query (PostgreSQL 15's own parser), unpacked
// from its protobuf form so it can be walked with types rather than as JSON.
// https://github.com/pganalyze/libpg_query (pg_query.proto)
#pragma once

#include <pg_query/pg_query.pb-c.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::routing {

// PostgreSQL's report for a statement that does not parse.
struct SyntaxError {
  std::string sqlstate = "42601";
  std::string message;
  int position = 0;  // 1-based, as in ErrorResponse 'P'; 0 = none
};

// libpg_query's scanner reads string literals as the session's
// standard_conforming_strings says ('a\'b' is a string when it is off): set for this
// thread while the object lives.
extern "C" __thread bool standard_conforming_strings;
class StringSyntax {
 public:
  explicit StringSyntax(bool standard);
  ~StringSyntax();
  StringSyntax(const StringSyntax&) = delete;
  StringSyntax& operator=(const StringSyntax&) = delete;

 private:
  bool saved_;
};

class ParseTree {
 public:
  // How many texts libpg_query has parsed on this thread (tests check that a cached
  // statement is not parsed again).
  static std::uint64_t parses_on_this_thread();

  // Parses `sql` (one or several statements), with standard_conforming_strings as
  // `standard_strings`. Never throws for bad SQL.
  static ParseTree parse(std::string_view sql, bool standard_strings = true);

  bool ok() const { return tree_ != nullptr; }
  const SyntaxError& error() const { return error_; }
  PgQuery__ParseResult* tree() const { return tree_.get(); }
  // The protobuf bytes the tree was unpacked from, for re-unpacking a private copy.
  const std::string& packed() const { return packed_; }

 private:
  struct Free {
    void operator()(PgQuery__ParseResult* p) const;
  };
  std::unique_ptr<PgQuery__ParseResult, Free> tree_;
  std::string packed_;
  SyntaxError error_;
};

// Unpacks protobuf bytes produced by ParseTree::packed() into a tree the caller owns.
std::unique_ptr<PgQuery__ParseResult, void (*)(PgQuery__ParseResult*)> unpack_tree(const std::string& packed);
// SQL text for a (possibly modified) tree, via libpg_query's deparser.
std::optional<std::string> deparse(PgQuery__ParseResult* tree);

// A protobuf string field: protobuf-c gives "" (not nullptr) when unset; both read as "".
inline std::string_view sv(const char* s) { return s != nullptr ? std::string_view(s) : std::string_view{}; }

// Small typed accessors; all accept nullptr.
inline bool is(const PgQuery__Node* n, PgQuery__Node__NodeCase c) { return n != nullptr && n->node_case == c; }
// The text of a String node, "" otherwise.
std::string_view str_of(const PgQuery__Node* n);
// The last String of a name list (operator names, qualified names): "=" for {"pg_catalog", "="}.
std::string_view last_name(PgQuery__Node* const* names, std::size_t n);
// A qualified type name without "pg_catalog.", e.g. "int8", "text".
std::string type_name_of(const PgQuery__TypeName* t);

// Calls `visit` for every message directly below `msg` (through any field), using the
// protobuf descriptors, so that every node kind is covered without listing them.
void for_each_child(const ProtobufCMessage* msg, const std::function<void(const ProtobufCMessage*)>& visit);
// Depth-first walk of every Node below `msg`; `visit` returns false to skip a subtree.
void walk_nodes(const ProtobufCMessage* msg, const std::function<bool(const PgQuery__Node*)>& visit);
// Depth-first over every Node slot below `msg`, for changing the tree: `visit` may
// replace the node in the slot, and returns whether to walk below what the slot then
// holds.
void for_each_node_slot(ProtobufCMessage* msg, const std::function<bool(PgQuery__Node*& slot)>& visit);
// Every RangeVar below `msg`, including those held directly (InsertStmt.relation, ...)
// rather than in a Node.
void for_each_range_var(const ProtobufCMessage* msg, const std::function<void(const PgQuery__RangeVar*)>& visit);

}  // namespace splitpoint::routing
