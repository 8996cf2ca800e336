// Parse-tree helpers for merge planning (routing/merge/merge_plan.cpp): recognising
// aggregates and volatile functions, comparing and copying expressions, naming output
// columns as PostgreSQL does, and building the few nodes a shard query needs.
//
// Nodes built here live inside a tree unpacked by libpg_query's protobuf-c code and are
// freed with it, so they are malloc'd piece by piece (never shared between two places).
#pragma once

#include <pg_query/pg_query.pb-c.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::routing::merge_tree {

// Aggregates the merger can combine, and everything else an aggregate call can be.
enum class AggKind : std::uint8_t {
  none,         // not an aggregate (an ordinary function call)
  count,        // count(x) and count(*)
  sum,
  avg,
  min,
  max,
  bool_and,     // bool_and(x), every(x)
  bool_or,
  unsupported,  // an aggregate whose partial results cannot be combined exactly
};

// What kind of aggregate `f` is, from its name and aggregate-only syntax (FILTER,
// WITHIN GROUP, DISTINCT, ORDER BY inside, *). `why` says what is unsupported.
AggKind aggregate_kind(const PgQuery__FuncCall* f, std::string& why);

// Whether `n` contains an aggregate / a window function / a volatile function at this
// query level (sub-selects are their own level and are not entered).
bool contains_aggregate(const PgQuery__Node* n);
bool contains_window_function(const PgQuery__Node* n);
bool contains_volatile_function(const PgQuery__Node* n);

// Structural equality of two expressions, ignoring token locations.
bool same_expr(const PgQuery__Node* a, const PgQuery__Node* b);

// The output column name PostgreSQL gives a select-list item: its alias, else
// FigureColname()'s choice ("?column?" when it has none).
std::string output_name(const PgQuery__ResTarget* t);

// `t.*`, `*` or `(expr).*`: a select-list item that expands to several columns.
bool is_star(const PgQuery__ResTarget* t);

// Deep copy (through the protobuf encoding); free with free_node.
PgQuery__Node* clone(const PgQuery__Node* n);
void free_node(PgQuery__Node* n);

// Constructors; every result is owned by the caller (or the tree it is put in).
PgQuery__Node* make_integer(std::int64_t v);            // A_Const, Float for values beyond int32 as PostgreSQL's lexer does
PgQuery__Node* make_int8_cast(PgQuery__Node* arg);      // arg::int8
PgQuery__Node* make_plus(PgQuery__Node* a, PgQuery__Node* b);  // a + b
PgQuery__Node* make_nullif(PgQuery__Node* a, PgQuery__Node* b);  // NULLIF(a, b)
PgQuery__Node* make_res_target(PgQuery__Node* val, std::string_view alias);
PgQuery__Node* make_column_ref(std::string_view name);  // a column by name; "" = *
PgQuery__Node* make_param_ref(int number);               // $number
PgQuery__Node* make_sort_by(PgQuery__Node* expr, bool descending, bool nulls_first);
char* dup_string(std::string_view s);  // malloc'd, for string fields in the tree
// Replaces a string field of the tree (unset fields point at protobuf-c's shared "").
void set_string(char*& field, std::string_view value);
// Points a table reference at schema.name; it keeps the name its columns are qualified
// with (its alias, else the table's own name).
void retarget(PgQuery__RangeVar* rv, std::string_view schema, std::string_view name);
// Replaces a call's function name with schema.name (just name when schema is "").
void set_function_name(PgQuery__FuncCall* f, std::string_view schema, std::string_view name);

// Appends `item` to a repeated Node field (realloc'd, as protobuf-c frees it).
void append(PgQuery__Node**& items, std::size_t& n, PgQuery__Node* item);
// Frees every item of a repeated Node field and empties it.
void clear(PgQuery__Node**& items, std::size_t& n);

// The numbers of the parameters ($n) used anywhere below `msg`, sorted, unique.
std::vector<int> parameters_of(const ProtobufCMessage* msg);

// The integer value of an A_Const integer (or integer-looking Float) node.
bool integer_value(const PgQuery__Node* n, std::int64_t& out);

}  // namespace splitpoint::routing::merge_tree
