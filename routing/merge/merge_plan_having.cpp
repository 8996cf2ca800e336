// The merge planner's side of HAVING; merge_having_eval.cpp evaluates it on merged rows.
// HAVING is removed from the shard query (a shard only sees part of each group) and
// evaluated by the merger on combined rows. What it can evaluate: comparisons (=, <>,
// <, <=, >, >=, BETWEEN, IN lists) between aggregates, GROUP BY expressions, literals
// and parameters; IS [NOT] NULL; boolean aggregates or columns used as conditions;
// AND / OR / NOT. Anything else (arithmetic, functions, sub-selects) is refused.
#include <algorithm>

#include "routing/merge/merge_planner.hpp"
#include "routing/merge/merge_tree.hpp"
#include "routing/pg_tree.hpp"

namespace splitpoint::routing::merge_detail {

namespace {

using Op = HavingExpr::Op;
using Kind = HavingOperand::Kind;

// Literal types a HAVING constant may be cast to; the cast only says how to read it.
bool castable(const std::string& type) {
  static const char* const kTypes[] = {"int2", "int4", "int8", "numeric", "float4", "float8", "text", "varchar",
                                       "bpchar", "bool", "date", "timestamp", "timestamptz", "time", "uuid", "name"};
  return std::find(std::begin(kTypes), std::end(kTypes), type) != std::end(kTypes);
}

bool literal(const PgQuery__Node* n, HavingOperand& out) {
  if (!is(n, PG_QUERY__NODE__NODE_A_CONST)) return false;
  const PgQuery__AConst* c = n->a_const;
  if (c->isnull) {
    out.kind = Kind::null;
    return true;
  }
  switch (c->val_case) {
    case PG_QUERY__A__CONST__VAL_IVAL:
      out.kind = Kind::number;
      out.text = std::to_string(c->ival != nullptr ? c->ival->ival : 0);
      return true;
    case PG_QUERY__A__CONST__VAL_FVAL:
      out.kind = Kind::number;
      out.text = c->fval->fval;
      return true;
    case PG_QUERY__A__CONST__VAL_SVAL:
      out.kind = Kind::string;
      out.text = c->sval->sval;
      return true;
    case PG_QUERY__A__CONST__VAL_BOOLVAL:
      out.kind = Kind::boolean;
      out.text = c->boolval != nullptr && c->boolval->boolval ? "true" : "false";
      return true;
    default: return false;
  }
}

class Translator {
 public:
  explicit Translator(Planner& p) : p_(p) {}

  std::optional<HavingExpr> condition(const PgQuery__Node* n) {
    if (is(n, PG_QUERY__NODE__NODE_BOOL_EXPR)) return boolean(n->bool_expr);
    if (is(n, PG_QUERY__NODE__NODE_A_EXPR)) return comparison(n->a_expr);
    if (is(n, PG_QUERY__NODE__NODE_NULL_TEST)) {
      HavingExpr e;
      e.op = n->null_test->nulltesttype == PG_QUERY__NULL_TEST_TYPE__IS_NULL ? Op::is_null : Op::is_not_null;
      if (!operand(n->null_test->arg, e.left)) return std::nullopt;
      return e;
    }
    HavingExpr e;  // a boolean aggregate or column used as the condition itself
    e.op = Op::truth;
    if (!operand(n, e.left)) return std::nullopt;
    return e;
  }

 private:
  Planner& p_;

  std::optional<HavingExpr> boolean(const PgQuery__BoolExpr* b) {
    HavingExpr e;
    e.op = b->boolop == PG_QUERY__BOOL_EXPR_TYPE__AND_EXPR  ? Op::and_
           : b->boolop == PG_QUERY__BOOL_EXPR_TYPE__OR_EXPR ? Op::or_
                                                             : Op::not_;
    for (std::size_t i = 0; i < b->n_args; ++i) {
      std::optional<HavingExpr> arg = condition(b->args[i]);
      if (!arg) return std::nullopt;
      e.args.push_back(std::move(*arg));
    }
    return e;
  }

  std::optional<HavingExpr> compare(std::string op, const PgQuery__Node* l, const PgQuery__Node* r) {
    HavingExpr e;
    e.op = Op::compare;
    e.comparison = op == "!=" ? "<>" : std::move(op);
    if (!operand(l, e.left) || !operand(r, e.right)) return std::nullopt;
    if (e.left.kind != Kind::column && e.right.kind != Kind::column) {
      p_.refuse("HAVING compares two constants");
      return std::nullopt;
    }
    return e;
  }

  std::optional<HavingExpr> comparison(const PgQuery__AExpr* a) {
    std::string op(last_name(a->name, a->n_name));
    auto list = [&](std::size_t& n) -> PgQuery__Node** {
      if (!is(a->rexpr, PG_QUERY__NODE__NODE_LIST)) return nullptr;
      n = a->rexpr->list->n_items;
      return a->rexpr->list->items;
    };
    std::size_t n = 0;
    switch (a->kind) {
      case PG_QUERY__A__EXPR__KIND__AEXPR_OP:
        if (op == "=" || op == "<>" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=")
          return compare(op, a->lexpr, a->rexpr);
        break;
      case PG_QUERY__A__EXPR__KIND__AEXPR_BETWEEN:
      case PG_QUERY__A__EXPR__KIND__AEXPR_NOT_BETWEEN: {
        PgQuery__Node** bounds = list(n);
        if (bounds == nullptr || n != 2) break;
        HavingExpr both;
        both.op = Op::and_;
        for (auto [cmp, bound] : {std::pair{">=", bounds[0]}, std::pair{"<=", bounds[1]}}) {
          std::optional<HavingExpr> c = compare(cmp, a->lexpr, bound);
          if (!c) return std::nullopt;
          both.args.push_back(std::move(*c));
        }
        if (a->kind == PG_QUERY__A__EXPR__KIND__AEXPR_BETWEEN) return both;
        HavingExpr negated;
        negated.op = Op::not_;
        negated.args.push_back(std::move(both));
        return negated;
      }
      case PG_QUERY__A__EXPR__KIND__AEXPR_IN: {
        PgQuery__Node** items = list(n);
        if (items == nullptr || (op != "=" && op != "<>")) break;
        HavingExpr any;
        any.op = op == "=" ? Op::or_ : Op::and_;  // x IN (...) / x NOT IN (...)
        for (std::size_t i = 0; i < n; ++i) {
          std::optional<HavingExpr> c = compare(op, a->lexpr, items[i]);
          if (!c) return std::nullopt;
          any.args.push_back(std::move(*c));
        }
        return any;
      }
      default: break;
    }
    p_.refuse("this HAVING condition cannot be evaluated after combining the shards' groups");
    return std::nullopt;
  }

  bool operand(const PgQuery__Node* n, HavingOperand& out) {
    if (literal(n, out)) return true;
    if (is(n, PG_QUERY__NODE__NODE_TYPE_CAST) && literal(n->type_cast->arg, out) && out.kind != Kind::null) {
      const PgQuery__TypeName* t = n->type_cast->type_name;
      out.cast = type_name_of(t);
      if (t->n_typmods > 0 || t->n_array_bounds > 0 || !castable(out.cast))
        return p_.refuse("HAVING compares with a constant of type " + out.cast);
      return true;
    }
    if (is(n, PG_QUERY__NODE__NODE_PARAM_REF) && n->param_ref->number >= 1) {
      out.kind = Kind::param;
      out.param = n->param_ref->number - 1;
      return true;
    }
    std::string why;
    if (is(n, PG_QUERY__NODE__NODE_FUNC_CALL) && merge_tree::aggregate_kind(n->func_call, why) != merge_tree::AggKind::none) {
      std::optional<ShardColumn> c = p_.aggregate_column(n);
      if (!c) return false;
      out.kind = Kind::column;
      out.column = *c;
      return true;
    }
    if (std::optional<ShardColumn> c = p_.group_key_column(n)) {
      out.kind = Kind::column;
      out.column = *c;
      return true;
    }
    return p_.refuse("HAVING may only compare aggregates and GROUP BY expressions with constants");
  }
};

}  // namespace

std::optional<HavingExpr> translate_having(Planner& planner, const PgQuery__Node* having) {
  return Translator(planner).condition(having);
}

}  // namespace splitpoint::routing::merge_detail
