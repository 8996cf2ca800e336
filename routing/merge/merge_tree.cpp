#include "routing/merge/merge_tree.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "routing/pg_tree.hpp"

namespace splitpoint::routing::merge_tree {

namespace {

bool in(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Aggregates whose partial results do not combine into the exact answer.
bool is_uncombinable_aggregate(std::string_view name) {
  return in(name, {"array_agg",        "string_agg",      "json_agg",          "jsonb_agg",
                   "json_object_agg",  "jsonb_object_agg", "json_agg_strict",  "jsonb_agg_strict",
                   "json_object_agg_strict", "jsonb_object_agg_strict", "json_object_agg_unique",
                   "jsonb_object_agg_unique", "json_object_agg_unique_strict", "jsonb_object_agg_unique_strict",
                   "json_arrayagg",    "json_objectagg",  "xmlagg",            "stddev",
                   "stddev_pop",       "stddev_samp",     "variance",          "var_pop",
                   "var_samp",         "covar_pop",       "covar_samp",        "corr",
                   "regr_avgx",        "regr_avgy",       "regr_count",        "regr_intercept",
                   "regr_r2",          "regr_slope",      "regr_sxx",          "regr_sxy",
                   "regr_syy",         "bit_and",         "bit_or",            "bit_xor",
                   "percentile_cont",  "percentile_disc", "mode",              "rank",
                   "dense_rank",       "percent_rank",    "cume_dist",         "range_agg",
                   "range_intersect_agg", "any_value",    "grouping"});
}

bool has_aggregate_syntax(const PgQuery__FuncCall* f) {
  return f->agg_star || f->agg_distinct || f->agg_within_group || f->n_agg_order > 0 || f->agg_filter != nullptr;
}

// True if `pred` holds for `n` or any node below it at this query level.
template <typename Pred>
bool any_node(const PgQuery__Node* n, Pred pred) {
  if (n == nullptr) return false;
  if (is(n, PG_QUERY__NODE__NODE_SELECT_STMT)) return false;
  if (pred(n)) return true;
  bool found = false;
  walk_nodes(&n->base, [&](const PgQuery__Node* c) {
    if (found || is(c, PG_QUERY__NODE__NODE_SELECT_STMT)) return false;
    if (pred(c)) found = true;
    return !found;
  });
  return found;
}

}  // namespace

AggKind aggregate_kind(const PgQuery__FuncCall* f, std::string& why) {
  if (f == nullptr || f->over != nullptr) return AggKind::none;  // a window call, not an aggregate
  std::string name(last_name(f->funcname, f->n_funcname));
  bool qualified = f->n_funcname > 1;
  if (qualified && str_of(f->funcname[0]) != "pg_catalog") {
    if (!has_aggregate_syntax(f)) return AggKind::none;
    why = "the user-defined aggregate " + name + "() cannot be combined across shards";
    return AggKind::unsupported;
  }
  static constexpr std::array<std::pair<std::string_view, AggKind>, 8> kCombinable{{
      {"count", AggKind::count},
      {"sum", AggKind::sum},
      {"avg", AggKind::avg},
      {"min", AggKind::min},
      {"max", AggKind::max},
      {"bool_and", AggKind::bool_and},
      {"every", AggKind::bool_and},
      {"bool_or", AggKind::bool_or},
  }};
  for (const auto& [n, kind] : kCombinable) {
    if (n != name) continue;
    if (f->agg_distinct) {
      why = name + "(DISTINCT ...) cannot be combined across shards";
      return AggKind::unsupported;
    }
    bool shape_ok = kind == AggKind::count && f->agg_star ? f->n_args == 0 : (!f->agg_star && f->n_args == 1);
    if (f->agg_within_group || !shape_ok) {
      why = "this form of " + name + "() cannot be combined across shards";
      return AggKind::unsupported;
    }
    return kind;
  }
  if (is_uncombinable_aggregate(name)) {
    why = name + "() cannot be combined across shards";
    return AggKind::unsupported;
  }
  if (has_aggregate_syntax(f)) {
    why = "the aggregate " + name + "() cannot be combined across shards";
    return AggKind::unsupported;
  }
  return AggKind::none;
}

bool contains_aggregate(const PgQuery__Node* n) {
  return any_node(n, [](const PgQuery__Node* c) {
    std::string why;
    return is(c, PG_QUERY__NODE__NODE_FUNC_CALL) && aggregate_kind(c->func_call, why) != AggKind::none;
  });
}

bool contains_window_function(const PgQuery__Node* n) {
  return any_node(n, [](const PgQuery__Node* c) {
    return is(c, PG_QUERY__NODE__NODE_FUNC_CALL) && c->func_call->over != nullptr;
  });
}

bool contains_volatile_function(const PgQuery__Node* n) {
  return any_node(n, [](const PgQuery__Node* c) {
    if (!is(c, PG_QUERY__NODE__NODE_FUNC_CALL)) return false;
    std::string_view name = last_name(c->func_call->funcname, c->func_call->n_funcname);
    return in(name, {"random", "random_normal", "setseed", "clock_timestamp", "timeofday", "nextval", "setval",
                     "gen_random_uuid", "uuid_generate_v1", "uuid_generate_v1mc", "uuid_generate_v4"});
  });
}

// ---------------------------------------------------------------------------------
// Structural equality

namespace {

template <typename T>
const T& field_at(const ProtobufCMessage* m, unsigned offset) {
  return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(m) + offset);
}

bool same_message(const ProtobufCMessage* a, const ProtobufCMessage* b);

bool same_value(const ProtobufCFieldDescriptor& f, const void* a, const void* b) {
  switch (f.type) {
    case PROTOBUF_C_TYPE_STRING: {
      const char* x = *static_cast<const char* const*>(a);
      const char* y = *static_cast<const char* const*>(b);
      return std::strcmp(x != nullptr ? x : "", y != nullptr ? y : "") == 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
      return same_message(*static_cast<const ProtobufCMessage* const*>(a), *static_cast<const ProtobufCMessage* const*>(b));
    case PROTOBUF_C_TYPE_BYTES: {
      const auto& x = *static_cast<const ProtobufCBinaryData*>(a);
      const auto& y = *static_cast<const ProtobufCBinaryData*>(b);
      return x.len == y.len && (x.len == 0 || std::memcmp(x.data, y.data, x.len) == 0);
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return std::memcmp(a, b, 8) == 0;
    default: return std::memcmp(a, b, 4) == 0;  // 32-bit scalars, enums, bools
  }
}

std::size_t value_size(const ProtobufCFieldDescriptor& f) {
  switch (f.type) {
    case PROTOBUF_C_TYPE_STRING: return sizeof(char*);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage*);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    default: return 4;
  }
}

bool same_message(const ProtobufCMessage* a, const ProtobufCMessage* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a->descriptor != b->descriptor) return false;
  const ProtobufCMessageDescriptor* d = a->descriptor;
  for (unsigned i = 0; i < d->n_fields; ++i) {
    const ProtobufCFieldDescriptor& f = d->fields[i];
    if (std::strcmp(f.name, "location") == 0) continue;  // where a token was, not what it means
    if (f.label == PROTOBUF_C_LABEL_REPEATED) {
      std::size_t n = field_at<std::size_t>(a, f.quantifier_offset);
      if (n != field_at<std::size_t>(b, f.quantifier_offset)) return false;
      const char* xs = field_at<const char*>(a, f.offset);
      const char* ys = field_at<const char*>(b, f.offset);
      for (std::size_t k = 0; k < n; ++k)
        if (!same_value(f, xs + k * value_size(f), ys + k * value_size(f))) return false;
      continue;
    }
    if ((f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
      std::uint32_t ca = field_at<std::uint32_t>(a, f.quantifier_offset);
      if (ca != field_at<std::uint32_t>(b, f.quantifier_offset)) return false;
      if (ca != f.id) continue;
    }
    const char* pa = reinterpret_cast<const char*>(a) + f.offset;
    const char* pb = reinterpret_cast<const char*>(b) + f.offset;
    if (!same_value(f, pa, pb)) return false;
  }
  return true;
}

}  // namespace

bool same_expr(const PgQuery__Node* a, const PgQuery__Node* b) { return same_message(&a->base, &b->base); }

// ---------------------------------------------------------------------------------
// Output column names (FigureColnameInternal)

namespace {

int figure_name(const PgQuery__Node* n, std::string& name);

int figure_sublink(const PgQuery__SubLink* s, std::string& name) {
  switch (s->sub_link_type) {
    case PG_QUERY__SUB_LINK_TYPE__EXISTS_SUBLINK: name = "exists"; return 2;
    case PG_QUERY__SUB_LINK_TYPE__ARRAY_SUBLINK: name = "array"; return 2;
    case PG_QUERY__SUB_LINK_TYPE__EXPR_SUBLINK:
    case PG_QUERY__SUB_LINK_TYPE__MULTIEXPR_SUBLINK: {
      // The sub-select's first column name (of its leftmost arm for UNION & co).
      if (!is(s->subselect, PG_QUERY__NODE__NODE_SELECT_STMT)) return 0;
      const PgQuery__SelectStmt* q = s->subselect->select_stmt;
      while (q->larg != nullptr) q = q->larg;
      if (q->n_target_list == 0 || !is(q->target_list[0], PG_QUERY__NODE__NODE_RES_TARGET)) return 0;
      const PgQuery__ResTarget* t = q->target_list[0]->res_target;
      if (is_star(t)) return 0;
      name = output_name(t);
      return 2;
    }
    default: return 0;
  }
}

std::string_view sql_value_function_name(PgQuery__SQLValueFunctionOp op) {
  switch (op) {
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_DATE: return "current_date";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIME:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIME_N: return "current_time";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIMESTAMP:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_TIMESTAMP_N: return "current_timestamp";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIME:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIME_N: return "localtime";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIMESTAMP:
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_LOCALTIMESTAMP_N: return "localtimestamp";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_ROLE: return "current_role";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_USER: return "current_user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_USER: return "user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_SESSION_USER: return "session_user";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_CATALOG: return "current_catalog";
    case PG_QUERY__SQLVALUE_FUNCTION_OP__SVFOP_CURRENT_SCHEMA: return "current_schema";
    default: return {};
  }
}

std::string_view xml_name(PgQuery__XmlExprOp op) {
  switch (op) {
    case PG_QUERY__XML_EXPR_OP__IS_XMLCONCAT: return "xmlconcat";
    case PG_QUERY__XML_EXPR_OP__IS_XMLELEMENT: return "xmlelement";
    case PG_QUERY__XML_EXPR_OP__IS_XMLFOREST: return "xmlforest";
    case PG_QUERY__XML_EXPR_OP__IS_XMLPARSE: return "xmlparse";
    case PG_QUERY__XML_EXPR_OP__IS_XMLPI: return "xmlpi";
    case PG_QUERY__XML_EXPR_OP__IS_XMLROOT: return "xmlroot";
    case PG_QUERY__XML_EXPR_OP__IS_XMLSERIALIZE: return "xmlserialize";
    default: return {};
  }
}

// Returns 0 (no name), 1 (a weak guess: a type name or "case") or 2 (a real name).
int figure_name(const PgQuery__Node* n, std::string& name) {
  if (n == nullptr) return 0;
  switch (n->node_case) {
    case PG_QUERY__NODE__NODE_COLUMN_REF: {
      int found = 0;
      for (std::size_t i = 0; i < n->column_ref->n_fields; ++i)
        if (is(n->column_ref->fields[i], PG_QUERY__NODE__NODE_STRING)) {
          name = str_of(n->column_ref->fields[i]);
          found = 2;
        }
      return found;
    }
    case PG_QUERY__NODE__NODE_A_INDIRECTION: {
      int found = 0;
      for (std::size_t i = 0; i < n->a_indirection->n_indirection; ++i)
        if (is(n->a_indirection->indirection[i], PG_QUERY__NODE__NODE_STRING)) {
          name = str_of(n->a_indirection->indirection[i]);
          found = 2;
        }
      return found;
    }
    case PG_QUERY__NODE__NODE_FUNC_CALL:
      name = last_name(n->func_call->funcname, n->func_call->n_funcname);
      return 2;
    case PG_QUERY__NODE__NODE_A_EXPR:
      if (n->a_expr->kind != PG_QUERY__A__EXPR__KIND__AEXPR_NULLIF) return 0;
      name = "nullif";
      return 2;
    case PG_QUERY__NODE__NODE_TYPE_CAST: {
      int strength = figure_name(n->type_cast->arg, name);
      if (strength <= 1 && n->type_cast->type_name != nullptr && n->type_cast->type_name->n_names > 0) {
        const PgQuery__TypeName* t = n->type_cast->type_name;
        name = last_name(t->names, t->n_names);
        return 1;
      }
      return strength;
    }
    case PG_QUERY__NODE__NODE_COLLATE_CLAUSE: return figure_name(n->collate_clause->arg, name);
    case PG_QUERY__NODE__NODE_GROUPING_FUNC: name = "grouping"; return 2;
    case PG_QUERY__NODE__NODE_SUB_LINK: return figure_sublink(n->sub_link, name);
    case PG_QUERY__NODE__NODE_CASE_EXPR: name = "case"; return 1;
    case PG_QUERY__NODE__NODE_A_ARRAY_EXPR: name = "array"; return 2;
    case PG_QUERY__NODE__NODE_ROW_EXPR: name = "row"; return 2;
    case PG_QUERY__NODE__NODE_COALESCE_EXPR: name = "coalesce"; return 2;
    case PG_QUERY__NODE__NODE_MIN_MAX_EXPR:
      name = n->min_max_expr->op == PG_QUERY__MIN_MAX_OP__IS_GREATEST ? "greatest" : "least";
      return 2;
    case PG_QUERY__NODE__NODE_SQLVALUE_FUNCTION:
      name = sql_value_function_name(n->sqlvalue_function->op);
      return name.empty() ? 0 : 2;
    case PG_QUERY__NODE__NODE_XML_EXPR:
      name = xml_name(n->xml_expr->op);
      return name.empty() ? 0 : 2;
    case PG_QUERY__NODE__NODE_XML_SERIALIZE: name = "xmlserialize"; return 2;
    default: return 0;
  }
}

}  // namespace

std::string output_name(const PgQuery__ResTarget* t) {
  if (t->name != nullptr && t->name[0] != '\0') return t->name;
  std::string name;
  if (figure_name(t->val, name) > 0) return name;
  return "?column?";
}

bool is_star(const PgQuery__ResTarget* t) {
  const PgQuery__Node* v = t->val;
  if (is(v, PG_QUERY__NODE__NODE_COLUMN_REF))
    return v->column_ref->n_fields > 0 && is(v->column_ref->fields[v->column_ref->n_fields - 1], PG_QUERY__NODE__NODE_A_STAR);
  if (is(v, PG_QUERY__NODE__NODE_A_INDIRECTION))
    return v->a_indirection->n_indirection > 0 &&
           is(v->a_indirection->indirection[v->a_indirection->n_indirection - 1], PG_QUERY__NODE__NODE_A_STAR);
  return false;
}

// ---------------------------------------------------------------------------------
// Building nodes

PgQuery__Node* clone(const PgQuery__Node* n) {
  std::string bytes(pg_query__node__get_packed_size(n), '\0');
  pg_query__node__pack(n, reinterpret_cast<uint8_t*>(bytes.data()));
  return pg_query__node__unpack(nullptr, bytes.size(), reinterpret_cast<const uint8_t*>(bytes.data()));
}

void free_node(PgQuery__Node* n) {
  if (n != nullptr) pg_query__node__free_unpacked(n, nullptr);
}

char* dup_string(std::string_view s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

void set_string(char*& field, std::string_view value) {
  if (field != nullptr && field != protobuf_c_empty_string) std::free(field);
  field = dup_string(value);
}

void retarget(PgQuery__RangeVar* rv, std::string_view schema, std::string_view name) {
  if (rv->alias == nullptr) {
    rv->alias = static_cast<PgQuery__Alias*>(std::malloc(sizeof(PgQuery__Alias)));
    *rv->alias = PG_QUERY__ALIAS__INIT;
    rv->alias->aliasname = dup_string(sv(rv->relname));
  }
  const std::string keep(name);  // (name may be rv->relname itself)
  set_string(rv->schemaname, schema);
  set_string(rv->relname, keep);
}

namespace {

template <typename T>
T* alloc(const T& init) {
  T* p = static_cast<T*>(std::malloc(sizeof(T)));
  *p = init;
  return p;
}

PgQuery__Node* wrap(PgQuery__Node__NodeCase c, void* msg) {
  auto* n = alloc<PgQuery__Node>(PG_QUERY__NODE__INIT);
  n->node_case = c;
  // Every member of Node's union is a pointer; set through the first one of the right kind.
  std::memcpy(&n->alias, &msg, sizeof msg);
  return n;
}

PgQuery__Node* make_string(std::string_view s) {
  auto* str = alloc<PgQuery__String>(PG_QUERY__STRING__INIT);
  str->sval = dup_string(s);
  return wrap(PG_QUERY__NODE__NODE_STRING, str);
}

}  // namespace

void append(PgQuery__Node**& items, std::size_t& n, PgQuery__Node* item) {
  items = static_cast<PgQuery__Node**>(std::realloc(items, (n + 1) * sizeof(PgQuery__Node*)));
  items[n++] = item;
}

void clear(PgQuery__Node**& items, std::size_t& n) {
  for (std::size_t i = 0; i < n; ++i) free_node(items[i]);
  std::free(items);
  items = nullptr;
  n = 0;
}

void set_function_name(PgQuery__FuncCall* f, std::string_view schema, std::string_view name) {
  clear(f->funcname, f->n_funcname);
  if (!schema.empty()) append(f->funcname, f->n_funcname, make_string(schema));
  append(f->funcname, f->n_funcname, make_string(name));
}

PgQuery__Node* make_integer(std::int64_t v) {
  auto* c = alloc<PgQuery__AConst>(PG_QUERY__A__CONST__INIT);
  if (v >= INT32_MIN && v <= INT32_MAX) {
    auto* i = alloc<PgQuery__Integer>(PG_QUERY__INTEGER__INIT);
    i->ival = static_cast<int32_t>(v);
    c->val_case = PG_QUERY__A__CONST__VAL_IVAL;
    c->ival = i;
  } else {
    auto* f = alloc<PgQuery__Float>(PG_QUERY__FLOAT__INIT);
    f->fval = dup_string(std::to_string(v));
    c->val_case = PG_QUERY__A__CONST__VAL_FVAL;
    c->fval = f;
  }
  c->location = -1;
  return wrap(PG_QUERY__NODE__NODE_A_CONST, c);
}

PgQuery__Node* make_int8_cast(PgQuery__Node* arg) {
  auto* t = alloc<PgQuery__TypeName>(PG_QUERY__TYPE_NAME__INIT);
  append(t->names, t->n_names, make_string("pg_catalog"));
  append(t->names, t->n_names, make_string("int8"));
  t->typemod = -1;
  t->location = -1;
  auto* c = alloc<PgQuery__TypeCast>(PG_QUERY__TYPE_CAST__INIT);
  c->arg = arg;
  c->type_name = t;
  c->location = -1;
  return wrap(PG_QUERY__NODE__NODE_TYPE_CAST, c);
}

PgQuery__Node* make_plus(PgQuery__Node* a, PgQuery__Node* b) {
  auto* e = alloc<PgQuery__AExpr>(PG_QUERY__A__EXPR__INIT);
  e->kind = PG_QUERY__A__EXPR__KIND__AEXPR_OP;
  append(e->name, e->n_name, make_string("+"));
  e->lexpr = a;
  e->rexpr = b;
  e->location = -1;
  return wrap(PG_QUERY__NODE__NODE_A_EXPR, e);
}

PgQuery__Node* make_nullif(PgQuery__Node* a, PgQuery__Node* b) {
  auto* e = alloc<PgQuery__AExpr>(PG_QUERY__A__EXPR__INIT);
  e->kind = PG_QUERY__A__EXPR__KIND__AEXPR_NULLIF;
  append(e->name, e->n_name, make_string("="));
  e->lexpr = a;
  e->rexpr = b;
  e->location = -1;
  return wrap(PG_QUERY__NODE__NODE_A_EXPR, e);
}

std::vector<int> parameters_of(const ProtobufCMessage* msg) {
  std::vector<int> out;
  if (msg->descriptor == &pg_query__node__descriptor) {
    const auto* n = reinterpret_cast<const PgQuery__Node*>(msg);
    if (is(n, PG_QUERY__NODE__NODE_PARAM_REF)) out.push_back(n->param_ref->number);
  }
  walk_nodes(msg, [&](const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_PARAM_REF)) out.push_back(n->param_ref->number);
    return true;
  });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

PgQuery__Node* make_res_target(PgQuery__Node* val, std::string_view alias) {
  auto* t = alloc<PgQuery__ResTarget>(PG_QUERY__RES_TARGET__INIT);
  t->val = val;
  if (!alias.empty()) t->name = dup_string(alias);
  t->location = -1;
  return wrap(PG_QUERY__NODE__NODE_RES_TARGET, t);
}

PgQuery__Node* make_column_ref(std::string_view name) {
  auto* c = alloc<PgQuery__ColumnRef>(PG_QUERY__COLUMN_REF__INIT);
  if (name.empty()) append(c->fields, c->n_fields, wrap(PG_QUERY__NODE__NODE_A_STAR, alloc<PgQuery__AStar>(PG_QUERY__A__STAR__INIT)));
  else append(c->fields, c->n_fields, make_string(name));
  c->location = -1;
  return wrap(PG_QUERY__NODE__NODE_COLUMN_REF, c);
}

PgQuery__Node* make_param_ref(int number) {
  auto* p = alloc<PgQuery__ParamRef>(PG_QUERY__PARAM_REF__INIT);
  p->number = number;
  p->location = -1;
  return wrap(PG_QUERY__NODE__NODE_PARAM_REF, p);
}

PgQuery__Node* make_sort_by(PgQuery__Node* expr, bool descending, bool nulls_first) {
  auto* s = alloc<PgQuery__SortBy>(PG_QUERY__SORT_BY__INIT);
  s->node = expr;
  s->sortby_dir = descending ? PG_QUERY__SORT_BY_DIR__SORTBY_DESC : PG_QUERY__SORT_BY_DIR__SORTBY_ASC;
  s->sortby_nulls = nulls_first ? PG_QUERY__SORT_BY_NULLS__SORTBY_NULLS_FIRST : PG_QUERY__SORT_BY_NULLS__SORTBY_NULLS_LAST;
  s->location = -1;
  return wrap(PG_QUERY__NODE__NODE_SORT_BY, s);
}

bool integer_value(const PgQuery__Node* n, std::int64_t& out) {
  if (!is(n, PG_QUERY__NODE__NODE_A_CONST) || n->a_const->isnull) return false;
  const PgQuery__AConst* c = n->a_const;
  if (c->val_case == PG_QUERY__A__CONST__VAL_IVAL) {
    out = c->ival != nullptr ? c->ival->ival : 0;  // an absent Integer message is 0
    return true;
  }
  if (c->val_case == PG_QUERY__A__CONST__VAL_FVAL && c->fval != nullptr && c->fval->fval != nullptr) {
    std::string_view s = c->fval->fval;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(c->fval->fval, &end, 10);
    if (errno == 0 && end == c->fval->fval + s.size() && !s.empty()) {
      out = v;
      return true;
    }
  }
  return false;
}

}  // namespace splitpoint::routing::merge_tree
