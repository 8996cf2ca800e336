#include "routing/merge/merge_having_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "routing/merge/merger.hpp"
#include "routing/merge/value_numeric.hpp"

namespace splitpoint::routing::merge_detail {

namespace {

enum class Domain : std::uint8_t { numeric, floating, text, bytes, boolean, date, timestamp, timestamptz, time };
enum class Tri : std::uint8_t { no, yes, unknown };

std::optional<Domain> domain_of(ValueKind k) {
  switch (k) {
    case ValueKind::integer:
    case ValueKind::oid:
    case ValueKind::numeric: return Domain::numeric;
    case ValueKind::float4:
    case ValueKind::float8: return Domain::floating;
    case ValueKind::text:
    case ValueKind::bpchar: return Domain::text;
    case ValueKind::bytes: return Domain::bytes;
    case ValueKind::boolean: return Domain::boolean;
    case ValueKind::date: return Domain::date;
    case ValueKind::timestamp: return Domain::timestamp;
    case ValueKind::timestamptz: return Domain::timestamptz;
    case ValueKind::time: return Domain::time;
    default: return std::nullopt;
  }
}

// The domain a literal's explicit cast puts it in.
std::optional<Domain> cast_domain(const std::string& cast) {
  if (cast == "int2" || cast == "int4" || cast == "int8" || cast == "numeric") return Domain::numeric;
  if (cast == "float4" || cast == "float8") return Domain::floating;
  if (cast == "text" || cast == "varchar" || cast == "bpchar") return Domain::text;
  if (cast == "name" || cast == "uuid") return Domain::bytes;
  if (cast == "bool") return Domain::boolean;
  if (cast == "date") return Domain::date;
  if (cast == "timestamp") return Domain::timestamp;
  if (cast == "timestamptz") return Domain::timestamptz;
  if (cast == "time") return Domain::time;
  return std::nullopt;
}

struct Scalar {
  bool null = false;
  Decimal d;
  double f = 0;
  std::string s;
  std::int64_t i = 0;
};

struct Operand {
  bool is_column = false;
  std::size_t column = 0;
  Scalar constant;
};

int compare_floats(double a, double b) {
  bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) return an && bn ? 0 : (an ? 1 : -1);
  return a < b ? -1 : (a > b ? 1 : 0);
}

std::string_view trim_spaces(std::string_view s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// A column value in the comparison's domain.
bool column_scalar(const Row& row, std::size_t c, const ResultColumn& rc, Domain d, Scalar& out) {
  std::optional<std::string_view> v = row.field(c);
  if (!v) {
    out.null = true;
    return true;
  }
  out.null = false;
  Key k;
  switch (d) {
    case Domain::numeric:
      if (rc.codec.kind == ValueKind::numeric) {
        std::optional<Decimal> x = rc.codec.format == 1 ? Decimal::from_binary(*v) : Decimal::parse(*v);
        if (x) out.d = *x;
        return x.has_value();
      }
      if (!decode_key(rc.codec, row.data.data(), row.fields[c], k)) return false;
      out.d = Decimal::from_int(k.i);
      return true;
    case Domain::floating:
      if (rc.codec.kind == ValueKind::float4 && rc.codec.format == 0) {
        std::optional<float> x = parse_float4(*v);  // the real's exact value, not 1.1 as a double
        if (x) out.f = *x;
        return x.has_value();
      }
      if (!decode_key(rc.codec, row.data.data(), row.fields[c], k)) return false;
      out.f = k.f;
      return true;
    case Domain::text:
      out.s = rc.codec.kind == ValueKind::bpchar ? trim_spaces(*v) : *v;
      return true;
    case Domain::bytes: out.s = *v; return true;
    default:
      if (!decode_key(rc.codec, row.data.data(), row.fields[c], k)) return false;
      out.i = k.i;
      return true;
  }
}

int compare_scalars(Domain d, const Scalar& a, const Scalar& b, const Collation* collation) {
  switch (d) {
    case Domain::numeric: return Decimal::compare(a.d, b.d);
    case Domain::floating: return compare_floats(a.f, b.f);
    case Domain::text:
      if (collation != nullptr) return collation->compare(a.s, b.s);
      [[fallthrough]];
    case Domain::bytes: {
      int c = a.s.compare(b.s);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    default: return a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  }
}

std::optional<bool> parse_bool(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "t" || s == "true" || s == "y" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "f" || s == "false" || s == "n" || s == "no" || s == "off" || s == "0") return false;
  return std::nullopt;
}

// uuid_in's accepted forms, printed as uuid_out prints (or the 16 bytes for binary).
std::optional<std::string> canonical_uuid(std::string_view s, bool binary) {
  if (s.size() >= 2 && s.front() == '{' && s.back() == '}') s = s.substr(1, s.size() - 2);
  std::string hex;
  for (char c : s) {
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    hex.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (hex.size() != 32) return std::nullopt;
  if (binary) {
    std::string out;
    for (std::size_t i = 0; i < 32; i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
  }
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" + hex.substr(16, 4) + "-" + hex.substr(20);
}

enum class Reading : std::uint8_t { ok, invalid, not_iso, bytea };

// Reads literal text `t` as a value of column `rc`'s type, as PostgreSQL reads an
// unknown-typed literal. `typed` = the literal was a number or had a cast (then an
// integer column compares as numeric with it); `as_real` = cast to real.
Reading read_literal(Domain d, const ResultColumn& rc, const std::string& t, bool typed, bool as_real, Scalar& out) {
  switch (d) {
    case Domain::numeric: {
      std::optional<Decimal> x = Decimal::parse(t);
      if (!x) return Reading::invalid;
      bool integral = x->special() == Decimal::Special::none && x->scale() == 0 && t.find_first_of("eE") == std::string::npos;
      if (!typed && rc.codec.kind != ValueKind::numeric && !integral) return Reading::invalid;  // '2.5' is no integer
      out.d = *x;
      return Reading::ok;
    }
    case Domain::floating: {
      std::optional<double> x;
      if (!(as_real || (!typed && rc.codec.kind == ValueKind::float4))) x = parse_float8(t);
      else if (std::optional<float> real = parse_float4(t)) x = *real;  // a real literal's exact value
      if (!x) return Reading::invalid;
      out.f = *x;
      return Reading::ok;
    }
    case Domain::text: out.s = rc.codec.kind == ValueKind::bpchar ? std::string(trim_spaces(t)) : t; return Reading::ok;
    case Domain::bytes: {
      if (rc.type == pgtype::name) {
        out.s = t;
        return Reading::ok;
      }
      if (rc.type != pgtype::uuid) return Reading::bytea;
      std::optional<std::string> u = canonical_uuid(t, rc.codec.format == 1);
      if (!u) return Reading::invalid;
      out.s = *u;
      return Reading::ok;
    }
    case Domain::boolean: {
      std::optional<bool> b = parse_bool(t);
      if (!b) return Reading::invalid;
      out.i = *b ? 1 : 0;
      return Reading::ok;
    }
    default: {
      std::optional<std::int64_t> x = d == Domain::date        ? parse_date_text(t)
                                      : d == Domain::time      ? parse_time_text(t)
                                      : d == Domain::timestamp ? parse_timestamp_text(t, false)
                                                               : parse_timestamp_text(t, true);
      if (!x && d == Domain::timestamp) x = parse_timestamp_text(t + " 00:00:00", false);
      if (!x) return Reading::not_iso;
      out.i = *x;
      return Reading::ok;
    }
  }
}

}  // namespace

struct HavingEvaluator::Node {
  HavingExpr::Op op = HavingExpr::Op::truth;
  std::string comparison;
  Domain domain = Domain::numeric;
  const Collation* collation = nullptr;
  Operand left, right;
  std::vector<Node> args;
};

namespace {

using Node = HavingEvaluator::Node;

struct Builder {
  const std::vector<ResultColumn>& columns;
  std::size_t hidden;
  const MergeParams& params;
  std::optional<MergeError> error;

  bool fail(std::string sqlstate, std::string message) {
    if (!error) error = MergeError{std::move(sqlstate), std::move(message)};
    return false;
  }

  // The text a literal or parameter stands for (nullopt: NULL); sets *number for numbers.
  std::optional<std::optional<std::string>> source_text(const HavingOperand& o, bool& number) {
    number = o.kind == HavingOperand::Kind::number;
    if (o.kind == HavingOperand::Kind::null) return std::optional<std::string>{};
    if (o.kind != HavingOperand::Kind::param) return std::optional<std::string>(o.text);
    if (static_cast<std::size_t>(o.param) >= params.values.size()) {
      fail("08P01", "HAVING refers to parameter $" + std::to_string(o.param + 1) + " that is not bound");
      return std::nullopt;
    }
    const std::optional<std::string_view>& v = params.values[static_cast<std::size_t>(o.param)];
    if (!v) return std::optional<std::string>{};
    std::int16_t format = params.formats.empty()        ? 0
                          : params.formats.size() == 1 ? params.formats[0]
                                                       : params.formats[static_cast<std::size_t>(o.param)];
    if (format == 0) return std::optional<std::string>(std::string(*v));
    std::int32_t type = static_cast<std::size_t>(o.param) < params.types.size() ? params.types[static_cast<std::size_t>(o.param)] : 0;
    Row one;
    start_row(one.data, 1);
    append_field(one.data, *v);
    split_data_row(one.data, one.fields);
    ResultColumn rc{static_cast<std::uint32_t>(type), ColumnCodec{value_kind(static_cast<std::uint32_t>(type)), 1, nullptr}};
    std::optional<Domain> d = domain_of(rc.codec.kind);
    Scalar x;
    if (!d || (*d != Domain::numeric && *d != Domain::floating && *d != Domain::boolean && *d != Domain::text) ||
        !column_scalar(one, 0, rc, *d, x)) {
      fail("0A000", "binary parameter $" + std::to_string(o.param + 1) + " in HAVING needs a known numeric, text or boolean type");
      return std::nullopt;
    }
    number = *d == Domain::numeric || *d == Domain::floating;
    if (*d == Domain::numeric) return std::optional<std::string>(x.d.to_text());
    if (*d == Domain::floating) return std::optional<std::string>(format_float8(x.f, 3));
    if (*d == Domain::boolean) return std::optional<std::string>(x.i != 0 ? "true" : "false");
    return std::optional<std::string>(x.s);
  }

  // Reads a literal or parameter as a value of column `rc`'s type.
  bool constant(const HavingOperand& o, const ResultColumn& rc, Domain d, Scalar& out) {
    if (!o.cast.empty() && cast_domain(o.cast) != d)
      return fail("0A000", "HAVING compares a " + type_label(rc.type) + " with a constant of type " + o.cast);
    bool number = false;
    std::optional<std::optional<std::string>> text = source_text(o, number);
    if (!text) return false;
    if (!*text) {
      out.null = true;
      return true;
    }
    const std::string& t = **text;
    auto invalid = [&] { return fail("22P02", "invalid input syntax for type " + type_label(rc.type) + ": \"" + t + "\""); };
    if (o.kind == HavingOperand::Kind::boolean && d != Domain::boolean)
      return fail("42883", "operator does not exist: " + type_label(rc.type) + " compared with boolean");
    if (number && d != Domain::numeric && d != Domain::floating)
      return fail("42883", "operator does not exist: " + type_label(rc.type) + " compared with a number");
    switch (read_literal(d, rc, t, number || !o.cast.empty(), o.cast == "float4", out)) {
      case Reading::ok: return true;
      case Reading::invalid: return invalid();
      case Reading::bytea: return fail("0A000", "HAVING on bytea is not evaluated by the proxy");
      case Reading::not_iso:
        return fail("0A000", "HAVING compares " + type_label(rc.type) + " with \"" + t +
                                 "\"; the proxy reads only ISO forms (YYYY-MM-DD HH:MM:SS, with +HH:MM for timestamptz)");
    }
    return invalid();
  }

  bool operand(const HavingOperand& o, Operand& out, const ResultColumn*& rc, std::optional<Domain>& domain) {
    if (o.kind == HavingOperand::Kind::column) {
      std::optional<std::size_t> c = o.column.resolve(columns.size(), hidden);
      if (!c) return fail("XX000", "HAVING refers to a column the shards did not return");
      out.is_column = true;
      out.column = *c;
      rc = &columns[*c];
      domain = domain_of(rc->codec.kind);
      if (!domain) return fail("0A000", "HAVING on type " + type_label(rc->type) + " is not evaluated by the proxy");
      return true;
    }
    return true;
  }

  bool build(const HavingExpr& e, Node& n) {
    n.op = e.op;
    n.comparison = e.comparison;
    for (const HavingExpr& a : e.args) {
      n.args.emplace_back();
      if (!build(a, n.args.back())) return false;
    }
    if (e.op == HavingExpr::Op::and_ || e.op == HavingExpr::Op::or_ || e.op == HavingExpr::Op::not_) return true;
    const ResultColumn* lc = nullptr;
    const ResultColumn* rc = nullptr;
    std::optional<Domain> ld, rd;
    if (!operand(e.left, n.left, lc, ld)) return false;
    if (e.op == HavingExpr::Op::compare && !operand(e.right, n.right, rc, rd)) return false;
    if (e.op != HavingExpr::Op::compare) {
      if (!n.left.is_column) return constant_truth(e.left, n);
      if (e.op == HavingExpr::Op::truth && ld != Domain::boolean)
        return fail("42804", "argument of HAVING must be type boolean, not type " + type_label(lc->type));
      n.domain = *ld;
      return true;
    }
    if (ld && rd && *ld != *rd) return fail("0A000", "HAVING compares " + type_label(lc->type) + " with " + type_label(rc->type));
    const ResultColumn* typed = lc != nullptr ? lc : rc;
    n.domain = ld ? *ld : *rd;
    n.collation = typed->codec.collation;
    if (!n.left.is_column && !constant(e.left, *typed, n.domain, n.left.constant)) return false;
    if (!n.right.is_column && !constant(e.right, *typed, n.domain, n.right.constant)) return false;
    return true;
  }

  // HAVING true / HAVING NULL IS NULL and the like: a constant truth value.
  bool constant_truth(const HavingOperand& o, Node& n) {
    n.domain = Domain::boolean;
    ResultColumn boolean{pgtype::boolean, ColumnCodec{ValueKind::boolean, 0, nullptr}};
    if (o.kind == HavingOperand::Kind::number) return fail("42804", "argument of HAVING must be type boolean");
    return constant(o, boolean, Domain::boolean, n.left.constant);
  }
};

Tri evaluate(const Node& n, const Row& row, const std::vector<ResultColumn>& columns, bool& ok) {
  using Op = HavingExpr::Op;
  auto value = [&](const Operand& o, Scalar& tmp) -> const Scalar& {
    if (!o.is_column) return o.constant;
    if (!column_scalar(row, o.column, columns[o.column], n.domain, tmp)) ok = false;
    return tmp;
  };
  switch (n.op) {
    case Op::and_:
    case Op::or_: {
      Tri result = n.op == Op::and_ ? Tri::yes : Tri::no;
      for (const Node& a : n.args) {
        Tri t = evaluate(a, row, columns, ok);
        if (t == (n.op == Op::and_ ? Tri::no : Tri::yes)) return t;
        if (t == Tri::unknown) result = Tri::unknown;
      }
      return result;
    }
    case Op::not_: {
      Tri t = evaluate(n.args.front(), row, columns, ok);
      return t == Tri::unknown ? t : (t == Tri::yes ? Tri::no : Tri::yes);
    }
    case Op::is_null:
    case Op::is_not_null: {
      Scalar tmp;
      bool null = value(n.left, tmp).null;
      return null == (n.op == Op::is_null) ? Tri::yes : Tri::no;
    }
    case Op::truth: {
      Scalar tmp;
      const Scalar& v = value(n.left, tmp);
      return v.null ? Tri::unknown : (v.i != 0 ? Tri::yes : Tri::no);
    }
    case Op::compare: {
      Scalar lt, rt;
      const Scalar& l = value(n.left, lt);
      const Scalar& r = value(n.right, rt);
      if (l.null || r.null) return Tri::unknown;
      int c = compare_scalars(n.domain, l, r, n.collation);
      const std::string& op = n.comparison;
      bool holds = op == "=" ? c == 0 : op == "<>" ? c != 0 : op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      return holds ? Tri::yes : Tri::no;
    }
  }
  return Tri::unknown;
}

}  // namespace

HavingEvaluator::HavingEvaluator() = default;
HavingEvaluator::~HavingEvaluator() = default;
HavingEvaluator::HavingEvaluator(HavingEvaluator&&) noexcept = default;
HavingEvaluator& HavingEvaluator::operator=(HavingEvaluator&&) noexcept = default;

std::variant<HavingEvaluator, MergeError> HavingEvaluator::create(const HavingExpr& expr,
                                                                  const std::vector<ResultColumn>& columns,
                                                                  std::size_t hidden, const MergeParams& params) {
  Builder b{columns, hidden, params, std::nullopt};
  auto root = std::make_unique<Node>();
  if (!b.build(expr, *root)) return *b.error;
  HavingEvaluator e;
  e.root_ = std::move(root);
  e.columns_ = columns;
  return e;
}

std::optional<bool> HavingEvaluator::keep(const Row& row) const {
  bool ok = true;
  Tri t = evaluate(*root_, row, columns_, ok);
  if (!ok) return std::nullopt;
  return t == Tri::yes;
}

}  // namespace splitpoint::routing::merge_detail
