#include "routing/insert_split.hpp"

#include <algorithm>
#include <deque>

#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"
#include "routing/router.hpp"
#include "routing/text_scan.hpp"

namespace splitpoint::routing {

namespace {

// The VALUES list of the statement's INSERT (also under EXPLAIN).
PgQuery__SelectStmt* values_of(PgQuery__ParseResult* tree) {
  if (tree == nullptr || tree->n_stmts != 1 || tree->stmts[0]->stmt == nullptr) return nullptr;
  PgQuery__Node* stmt = tree->stmts[0]->stmt;
  if (is(stmt, PG_QUERY__NODE__NODE_EXPLAIN_STMT)) stmt = stmt->explain_stmt->query;
  if (!is(stmt, PG_QUERY__NODE__NODE_INSERT_STMT)) return nullptr;
  PgQuery__Node* sel = stmt->insert_stmt->select_stmt;
  return is(sel, PG_QUERY__NODE__NODE_SELECT_STMT) ? sel->select_stmt : nullptr;
}

}  // namespace

std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert(
    const std::string& packed, const std::vector<std::size_t>& row_shards) {
  auto tree = unpack_tree(packed);
  PgQuery__SelectStmt* values = values_of(tree.get());
  if (values == nullptr || values->n_values_lists != row_shards.size()) return std::nullopt;
  std::vector<std::size_t> shards = row_shards;
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  // The rows are swapped in and out of the tree; the original array is put back
  // before the tree is freed, so each row is freed once.
  PgQuery__Node** all = values->values_lists;
  const std::size_t n = values->n_values_lists;
  std::vector<std::pair<std::size_t, std::string>> out;
  std::vector<PgQuery__Node*> subset;
  bool ok = true;
  for (std::size_t shard : shards) {
    subset.clear();
    for (std::size_t i = 0; i < n; ++i)
      if (row_shards[i] == shard) subset.push_back(all[i]);
    values->values_lists = subset.data();
    values->n_values_lists = subset.size();
    std::optional<std::string> sql = deparse(tree.get());
    if (!sql) {
      ok = false;
      break;
    }
    out.emplace_back(shard, std::move(*sql));
  }
  values->values_lists = all;
  values->n_values_lists = n;
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace splitpoint::routing

namespace splitpoint::routing {

namespace {

// An INSERT ... VALUES or DEFAULT VALUES read from its normalised text (text_scan.hpp:
// no comments, literals as NUL bytes, single spaces, unquoted words lower-cased), the
// places insert_with_keys edits. Offsets are into the normalised text. Only the shape
// `INSERT INTO name [AS alias] [(columns)] [OVERRIDING ... VALUE] {VALUES rows | DEFAULT
// VALUES} ...` is read; anything else (WITH, EXPLAIN, a SELECT) is left to the tree.
struct InsertText {
  using Span = TextSpan;
  struct Row {
    std::size_t open = 0, close = 0;  // its '(' and ')'
    std::vector<Span> items;  // without the spaces around them
  };
  std::size_t name_end = 0;  // after the table name or its alias
  std::optional<std::size_t> columns_close;
  std::optional<Span> overriding;
  Span values;  // VALUES, or DEFAULT VALUES
  bool default_values = false;
  std::vector<Row> rows;
};

// The items of the row whose '(' was just read, up to its ')'.
bool read_row(KeyTokens& t, InsertText::Row& row) {
  constexpr std::size_t kNone = std::string_view::npos;
  int depth = 0;
  std::size_t item_from = kNone, item_to = 0;
  for (;;) {
    TextSpan tok = t.next();
    if (tok.from == tok.to) return false;
    const std::string_view s = t.text(tok);
    if (depth == 0 && (s == "," || s == ")")) {
      if (item_from == kNone) return false;  // an empty item
      row.items.push_back({item_from, item_to});
      item_from = kNone;
      if (s == ")") {
        row.close = tok.from;
        return true;
      }
      continue;
    }
    if (s == "(" || s == "[") ++depth;
    if (s == ")" || s == "]") --depth;
    if (depth < 0) return false;
    if (item_from == kNone) item_from = tok.from;
    item_to = tok.to;
  }
}

// The rest of the text holds no second statement (`...; SELECT 1`).
bool ends_alone(KeyTokens& t) {
  int depth = 0;
  for (TextSpan tok = t.next(); tok.from != tok.to; tok = t.next()) {
    if (t.is(tok, "(") || t.is(tok, "[")) ++depth;
    if (t.is(tok, ")") || t.is(tok, "]")) --depth;
    if (depth != 0 || !t.is(tok, ";")) continue;
    for (tok = t.next(); tok.from != tok.to; tok = t.next())
      if (!t.is(tok, ";")) return false;
  }
  return true;
}

std::optional<InsertText> read_insert_text(std::string_view key) {
  KeyTokens t(key);
  InsertText out;
  if (!t.is(t.next(), "insert") || !t.is(t.next(), "into")) return std::nullopt;
  TextSpan tok = t.next();
  if (!t.name(tok)) return std::nullopt;
  for (;;) {  // schema.table
    out.name_end = tok.to;
    tok = t.next();
    if (!t.is(tok, ".")) break;
    tok = t.next();
    if (!t.name(tok)) return std::nullopt;
  }
  if (t.is(tok, "as")) {
    tok = t.next();
    if (!t.name(tok)) return std::nullopt;
    out.name_end = tok.to;
    tok = t.next();
  }
  if (t.is(tok, "(")) {
    int depth = 1;
    while (depth > 0) {
      tok = t.next();
      if (tok.from == tok.to) return std::nullopt;
      if (t.is(tok, "(")) ++depth;
      if (t.is(tok, ")")) --depth;
    }
    out.columns_close = tok.from;
    tok = t.next();
  }
  if (t.is(tok, "overriding")) {
    const std::size_t from = tok.from;
    tok = t.next();
    if (!t.is(tok, "system") && !t.is(tok, "user")) return std::nullopt;
    tok = t.next();
    if (!t.is(tok, "value")) return std::nullopt;
    out.overriding = TextSpan{from, tok.to};
    tok = t.next();
  }
  if (t.is(tok, "default")) {
    TextSpan values = t.next();
    if (!t.is(values, "values")) return std::nullopt;
    out.values = {tok.from, values.to};
    out.default_values = true;
    return ends_alone(t) ? std::optional(std::move(out)) : std::nullopt;
  }
  if (!t.is(tok, "values")) return std::nullopt;
  out.values = tok;
  for (;;) {
    const TextSpan open = t.next();
    if (!t.is(open, "(")) return std::nullopt;
    out.rows.emplace_back().open = open.from;
    if (!read_row(t, out.rows.back())) return std::nullopt;
    const std::size_t after = t.position();
    if (!t.is(t.next(), ",")) {
      t.rewind(after);
      return ends_alone(t) ? std::optional(std::move(out)) : std::nullopt;
    }
  }
}

struct Edit {
  std::size_t from = 0, to = 0;  // the normalised text's bytes replaced (none: an insertion)
  std::string text;
};

// `sql` with `edits` (in order, not overlapping) made to its normalised text.
std::string rebuild(std::string_view sql, const ScannedText& scan, const std::vector<Edit>& edits) {
  std::string out;
  KeyWriter w(sql, scan, out);
  for (const Edit& e : edits) {
    w.copy_to(e.from);
    w.skip_to(e.to);
    w.append(e.text);
  }
  w.copy_to(scan.key.size());
  return out;
}

// insert_with_keys in the statement's own text: nullopt when it is not an INSERT this
// reads (the tree does it then).
std::optional<std::string> splice_keys(std::string_view sql, const KeyRequest& request,
                                       const std::vector<std::string>& keys, bool overriding_system_value,
                                       int first_param) {
  const ScannedText& scan = scan_text_once(sql);
  if (!scan.ok) return std::nullopt;
  const std::string_view key = scan.key;
  auto text = read_insert_text(key);
  if (!text || (text->default_values && request.rows != std::vector<std::size_t>{0})) return std::nullopt;
  std::vector<Edit> edits;
  auto value = [&](std::size_t i) {
    if (first_param > 0) return "$" + std::to_string(first_param + static_cast<int>(i));
    std::string quoted = "'";
    for (char c : keys[i]) {
      if (c == '\'') quoted.push_back('\'');
      quoted.push_back(c);
    }
    return quoted + "'";
  };
  const std::string column = quote_ident(request.column);
  if (request.column_omitted) {
    if (text->columns_close) edits.push_back({*text->columns_close, *text->columns_close, ", " + column});
    else if (text->default_values) edits.push_back({text->name_end, text->name_end, " (" + column + ")"});
    else return std::nullopt;
  }
  if (overriding_system_value) {
    if (text->overriding) edits.push_back({text->overriding->from, text->overriding->to, "overriding system value"});
    else edits.push_back({text->values.from, text->values.from, "overriding system value "});
  }
  if (text->default_values) edits.push_back({text->values.from, text->values.to, "values (" + value(0) + ")"});
  for (std::size_t i = 0; i < request.rows.size() && !text->default_values; ++i) {
    if (request.rows[i] >= text->rows.size()) return std::nullopt;
    const InsertText::Row& row = text->rows[request.rows[i]];
    const bool append = request.column_omitted || (request.position == row.items.size() && !text->columns_close);
    if (append) {
      edits.push_back({row.close, row.close, ", " + value(i)});
      continue;
    }
    if (request.position >= row.items.size()) return std::nullopt;
    const TextSpan item = row.items[request.position];
    const std::string_view was = key.substr(item.from, item.to - item.from);
    const bool call = was.back() == ')' && (was[0] == '"' || is_identifier_char(was[0]));  // nextval(...)
    const bool replaced = request.sequence.empty() ? was == "default" : call;
    if (!replaced) return std::nullopt;
    edits.push_back({item.from, item.to, value(i)});
  }
  // (In the text's order; at one place an insertion goes before a replacement.)
  std::stable_sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) { return a.from < b.from; });
  return rebuild(sql, scan, edits);
}

// Nodes made for the deparser: swapped into the tree and out again before it is freed,
// so the tree frees only what it owns.
struct KeyValue {
  PgQuery__String str;
  PgQuery__AConst aconst;
  PgQuery__ParamRef param;
  PgQuery__Node node;
  // A string literal, or with number > 0 the parameter $number.
  KeyValue(const std::string& value, int number) {
    pg_query__node__init(&node);
    if (number > 0) {
      pg_query__param_ref__init(&param);
      param.number = number;
      param.location = -1;
      node.node_case = PG_QUERY__NODE__NODE_PARAM_REF;
      node.param_ref = &param;
      return;
    }
    pg_query__string__init(&str);
    str.sval = const_cast<char*>(value.c_str());
    pg_query__a__const__init(&aconst);
    aconst.val_case = PG_QUERY__A__CONST__VAL_SVAL;
    aconst.sval = &str;
    aconst.location = -1;
    node.node_case = PG_QUERY__NODE__NODE_A_CONST;
    node.a_const = &aconst;
  }
};

struct KeyColumn {
  PgQuery__ResTarget target;
  PgQuery__Node node;
  explicit KeyColumn(const std::string& name) {
    pg_query__res_target__init(&target);
    target.name = const_cast<char*>(name.c_str());
    target.location = -1;
    pg_query__node__init(&node);
    node.node_case = PG_QUERY__NODE__NODE_RES_TARGET;
    node.res_target = &target;
  }
};

// A VALUES list of one row with `item` (none when null) in it, for DEFAULT VALUES
// and for kRowsMarker; swapped into the tree and out again before it is freed.
struct OneRowValues {
  PgQuery__List list;
  PgQuery__Node row;
  PgQuery__Node* rows[1] = {&row};
  PgQuery__Node* items[1] = {nullptr};
  PgQuery__SelectStmt select;
  PgQuery__Node node;
  explicit OneRowValues(PgQuery__Node* item) {
    pg_query__list__init(&list);
    if (item != nullptr) {
      items[0] = item;
      list.items = items;
      list.n_items = 1;
    }
    pg_query__node__init(&row);
    row.node_case = PG_QUERY__NODE__NODE_LIST;
    row.list = &list;
    pg_query__select_stmt__init(&select);
    select.values_lists = rows;
    select.n_values_lists = 1;
    select.limit_option = PG_QUERY__LIMIT_OPTION__LIMIT_OPTION_DEFAULT;
    select.op = PG_QUERY__SET_OPERATION__SETOP_NONE;
    pg_query__node__init(&node);
    node.node_case = PG_QUERY__NODE__NODE_SELECT_STMT;
    node.select_stmt = &select;
  }
};

// Puts `with` into a node slot of the tree and the original back when it goes out of scope.
struct NodeSwap {
  PgQuery__Node** slot;
  PgQuery__Node* saved;
  NodeSwap(PgQuery__Node** s, PgQuery__Node* with) : slot(s), saved(*s) { *slot = with; }
  ~NodeSwap() { *slot = saved; }
};

// Swaps a protobuf array for another and back when it goes out of scope.
struct ArraySwap {
  PgQuery__Node*** slot;
  std::size_t* count;
  PgQuery__Node** saved;
  std::size_t saved_n;
  ArraySwap(PgQuery__Node*** s, std::size_t* n, std::vector<PgQuery__Node*>& with)
      : slot(s), count(n), saved(*s), saved_n(*n) {
    *slot = with.data();
    *count = with.size();
  }
  ~ArraySwap() {
    *slot = saved;
    *count = saved_n;
  }
};

PgQuery__InsertStmt* insert_of(PgQuery__ParseResult* tree) {
  if (tree == nullptr || tree->n_stmts != 1 || tree->stmts[0]->stmt == nullptr) return nullptr;
  PgQuery__Node* stmt = tree->stmts[0]->stmt;
  if (is(stmt, PG_QUERY__NODE__NODE_EXPLAIN_STMT)) stmt = stmt->explain_stmt->query;
  return is(stmt, PG_QUERY__NODE__NODE_INSERT_STMT) ? stmt->insert_stmt : nullptr;
}

}  // namespace

std::optional<std::vector<std::pair<std::size_t, std::string>>> split_insert_text(
    std::string_view sql, const std::vector<std::size_t>& row_shards) {
  const ScannedText& scan = scan_text_once(sql);
  if (!scan.ok) return std::nullopt;
  auto text = read_insert_text(scan.key);
  if (!text || text->rows.size() != row_shards.size()) return std::nullopt;
  std::vector<std::size_t> shards = row_shards;
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  std::vector<std::pair<std::size_t, std::string>> out;
  for (std::size_t shard : shards) {
    std::string sql_of_shard;
    KeyWriter w(sql, scan, sql_of_shard);
    w.copy_to(text->rows.front().open);
    bool first = true;
    for (std::size_t i = 0; i < text->rows.size(); ++i) {
      if (row_shards[i] != shard) continue;
      if (!first) w.append(", ");
      first = false;
      w.skip_to(text->rows[i].open);
      w.copy_to(text->rows[i].close + 1);
    }
    w.skip_to(text->rows.back().close + 1);
    w.copy_to(scan.key.size());
    out.emplace_back(shard, std::move(sql_of_shard));
  }
  return out;
}

std::optional<std::string> insert_with_keys(std::string_view sql, bool standard_strings, const KeyRequest& request,
                                            const std::vector<std::string>& keys, bool overriding_system_value,
                                            int first_param) {
  if (keys.size() != request.rows.size()) return std::nullopt;
  // The text edited in place (a parse and a deparse were 80% of the proxy's work for such
  // an INSERT); through the tree when the text is not of the plain shape it reads.
  if (standard_strings)
    if (auto spliced = splice_keys(sql, request, keys, overriding_system_value, first_param)) return spliced;
  ParseTree parsed = ParseTree::parse(sql, standard_strings);
  PgQuery__InsertStmt* insert = insert_of(parsed.tree());
  if (insert == nullptr || keys.size() != request.rows.size()) return std::nullopt;
  // DEFAULT VALUES: one row that holds only the key.
  OneRowValues default_values(nullptr);
  std::optional<NodeSwap> no_select;
  if (insert->select_stmt == nullptr) no_select.emplace(&insert->select_stmt, &default_values.node);
  PgQuery__SelectStmt* values = values_of(parsed.tree());
  if (values == nullptr) return std::nullopt;
  std::deque<KeyValue> literals;
  for (std::size_t i = 0; i < keys.size(); ++i)
    literals.emplace_back(keys[i], first_param > 0 ? first_param + static_cast<int>(i) : 0);
  KeyColumn column(request.column);
  // New arrays for the column list and for the rows that change; the originals go back
  // into the tree before it is freed.
  std::vector<PgQuery__Node*> cols(insert->cols, insert->cols + insert->n_cols);
  std::deque<std::vector<PgQuery__Node*>> items;
  std::deque<ArraySwap> swaps;
  if (request.column_omitted) {
    cols.push_back(&column.node);
    swaps.emplace_back(&insert->cols, &insert->n_cols, cols);
  }
  for (std::size_t i = 0; i < request.rows.size(); ++i) {
    const std::size_t r = request.rows[i];
    if (r >= values->n_values_lists || !is(values->values_lists[r], PG_QUERY__NODE__NODE_LIST)) return std::nullopt;
    PgQuery__List* row = values->values_lists[r]->list;
    auto& v = items.emplace_back(row->items, row->items + row->n_items);
    if (request.column_omitted) {
      v.push_back(&literals[i].node);
    } else if (request.position < v.size() &&
               (is(v[request.position], PG_QUERY__NODE__NODE_SET_TO_DEFAULT) ||
                (!request.sequence.empty() && is(v[request.position], PG_QUERY__NODE__NODE_FUNC_CALL)))) {
      v[request.position] = &literals[i].node;
    } else if (request.position == v.size() && insert->n_cols == 0) {  // (no column list: the row's next item)
      v.push_back(&literals[i].node);
    } else {
      return std::nullopt;
    }
    swaps.emplace_back(&row->items, &row->n_items, v);
  }
  const auto saved_override = insert->override;
  if (overriding_system_value) insert->override = PG_QUERY__OVERRIDING_KIND__OVERRIDING_SYSTEM_VALUE;
  std::optional<std::string> out = deparse(parsed.tree());
  insert->override = saved_override;
  swaps.clear();
  return out;
}

std::optional<std::string> copy_with_columns(std::string_view sql, bool standard_strings,
                                             const std::vector<std::string>& columns) {
  ParseTree parsed = ParseTree::parse(sql, standard_strings);
  PgQuery__ParseResult* tree = parsed.tree();
  if (tree == nullptr || tree->n_stmts != 1 || !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_COPY_STMT))
    return std::nullopt;
  PgQuery__CopyStmt* copy = tree->stmts[0]->stmt->copy_stmt;
  if (copy->n_attlist == 0) return std::nullopt;
  std::deque<PgQuery__String> names(columns.size());
  std::deque<PgQuery__Node> nodes(columns.size());
  std::vector<PgQuery__Node*> list(copy->attlist, copy->attlist + copy->n_attlist);
  for (std::size_t i = 0; i < columns.size(); ++i) {
    pg_query__string__init(&names[i]);
    names[i].sval = const_cast<char*>(columns[i].c_str());
    pg_query__node__init(&nodes[i]);
    nodes[i].node_case = PG_QUERY__NODE__NODE_STRING;
    nodes[i].string = &names[i];
    list.push_back(&nodes[i]);
  }
  ArraySwap swap(&copy->attlist, &copy->n_attlist, list);
  return deparse(tree);
}

std::optional<InsertSelectParts> insert_select_parts(std::string_view sql, bool standard_strings) {
  ParseTree parsed = ParseTree::parse(sql, standard_strings);
  PgQuery__ParseResult* tree = parsed.tree();
  PgQuery__InsertStmt* insert = insert_of(tree);
  if (insert == nullptr || insert->with_clause != nullptr || !is(insert->select_stmt, PG_QUERY__NODE__NODE_SELECT_STMT) ||
      insert->select_stmt->select_stmt->n_values_lists > 0 || !is(tree->stmts[0]->stmt, PG_QUERY__NODE__NODE_INSERT_STMT))
    return std::nullopt;
  InsertSelectParts parts;
  {
    PgQuery__RawStmt raw;
    pg_query__raw_stmt__init(&raw);
    raw.stmt = insert->select_stmt;
    PgQuery__RawStmt* stmts[1] = {&raw};
    PgQuery__ParseResult alone;
    pg_query__parse_result__init(&alone);
    alone.version = tree->version;
    alone.stmts = stmts;
    alone.n_stmts = 1;
    auto select = deparse(&alone);
    if (!select) return std::nullopt;
    parts.select = std::move(*select);
  }
  KeyValue marker("", 2147483647);
  OneRowValues rows(&marker.node);
  {
    NodeSwap swap(&insert->select_stmt, &rows.node);
    // (Sorted: the marker's number is the largest.)
    const auto params = merge_tree::parameters_of(&insert->base);
    parts.params_outside_select = params.size() > 1;
    auto text = deparse(tree);
    if (!text || text->find(kRowsMarker) == std::string::npos) return std::nullopt;
    parts.insert = std::move(*text);
  }
  return parts;
}

}  // namespace splitpoint::routing
