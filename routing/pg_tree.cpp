#include "routing/pg_tree.hpp"

#include <pg_query.h>

#include <cstring>

namespace splitpoint::routing {

void ParseTree::Free::operator()(PgQuery__ParseResult* p) const { pg_query__parse_result__free_unpacked(p, nullptr); }

StringSyntax::StringSyntax(bool standard) : saved_(standard_conforming_strings) {
  standard_conforming_strings = standard;
}
StringSyntax::~StringSyntax() { standard_conforming_strings = saved_; }

namespace {
thread_local std::uint64_t parses = 0;

// The last text parsed on this thread and what libpg_query made of it: a statement's
// text is parsed once although several steps read its tree (the router's analysis,
// then the scatter plan, the COPY options or an INSERT's rewrite). Each ParseTree
// unpacks its own tree from the bytes, so a caller may change its tree freely.
struct LastParse {
  bool valid = false;
  std::string text;
  bool standard_strings = true;
  bool ok = false;
  std::string packed;
  SyntaxError error;
};
thread_local LastParse last;
constexpr std::size_t kLastParseMax = 256 * 1024;
}  // namespace

std::uint64_t ParseTree::parses_on_this_thread() { return parses; }

ParseTree ParseTree::parse(std::string_view sql, bool standard_strings) {
  if (!last.valid || last.text != sql || last.standard_strings != standard_strings) {
    ++parses;
    // libpg_query wants a NUL-terminated string; PostgreSQL texts never contain NUL.
    last.valid = true;
    last.text.assign(sql);
    last.standard_strings = standard_strings;
    StringSyntax syntax(standard_strings);
    PgQueryProtobufParseResult r = pg_query_parse_protobuf(last.text.c_str());
    last.ok = r.error == nullptr;
    last.error = SyntaxError{};
    last.packed.clear();
    if (r.error != nullptr) {
      last.error.message = r.error->message != nullptr ? r.error->message : "syntax error";
      last.error.position = r.error->cursorpos;
    } else {
      last.packed.assign(r.parse_tree.data, r.parse_tree.len);
    }
    pg_query_free_protobuf_parse_result(r);
  }
  ParseTree out;
  out.error_ = last.error;
  if (last.ok) {
    out.packed_ = last.packed;
    out.tree_.reset(pg_query__parse_result__unpack(nullptr, out.packed_.size(),
                                                   reinterpret_cast<const uint8_t*>(out.packed_.data())));
    if (!out.tree_) out.error_.message = "could not decode the parse tree";
  }
  if (last.text.size() > kLastParseMax) last = LastParse{};  // its tree can be ten times its size
  return out;
}

std::unique_ptr<PgQuery__ParseResult, void (*)(PgQuery__ParseResult*)> unpack_tree(const std::string& packed) {
  auto* t = pg_query__parse_result__unpack(nullptr, packed.size(), reinterpret_cast<const uint8_t*>(packed.data()));
  return {t, [](PgQuery__ParseResult* p) {
            if (p != nullptr) pg_query__parse_result__free_unpacked(p, nullptr);
          }};
}

std::optional<std::string> deparse(PgQuery__ParseResult* tree) {
  std::string bytes(pg_query__parse_result__get_packed_size(tree), '\0');
  pg_query__parse_result__pack(tree, reinterpret_cast<uint8_t*>(bytes.data()));
  PgQueryProtobuf pb{bytes.size(), bytes.data()};
  PgQueryDeparseResult d = pg_query_deparse_protobuf(pb);
  std::optional<std::string> out;
  if (d.error == nullptr && d.query != nullptr) out = d.query;
  pg_query_free_deparse_result(d);
  return out;
}

std::string_view str_of(const PgQuery__Node* n) {
  if (is(n, PG_QUERY__NODE__NODE_STRING) && n->string->sval != nullptr) return n->string->sval;
  return {};
}

std::string_view last_name(PgQuery__Node* const* names, std::size_t n) {
  return n == 0 ? std::string_view{} : str_of(names[n - 1]);
}

std::string type_name_of(const PgQuery__TypeName* t) {
  if (t == nullptr || t->n_names == 0) return {};
  std::string out;
  for (std::size_t i = 0; i < t->n_names; ++i) {
    std::string_view part = str_of(t->names[i]);
    if (i == 0 && t->n_names > 1 && part == "pg_catalog") continue;
    if (!out.empty()) out += '.';
    out += part;
  }
  return out;
}

namespace {

template <typename T>
const T& at(const ProtobufCMessage* msg, unsigned offset) {
  return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(msg) + offset);
}

// A Node is a oneof of some 250 message fields: only the one its case names is set, and
// protobuf-c finds it by number (a binary search) rather than a scan of every field.
const ProtobufCFieldDescriptor* node_member(const ProtobufCMessage* msg) {
  const auto* node = reinterpret_cast<const PgQuery__Node*>(msg);
  if (node->node_case == PG_QUERY__NODE__NODE__NOT_SET) return nullptr;
  const ProtobufCFieldDescriptor* f = protobuf_c_message_descriptor_get_field(msg->descriptor, node->node_case);
  return f != nullptr && f->type == PROTOBUF_C_TYPE_MESSAGE && f->label != PROTOBUF_C_LABEL_REPEATED ? f : nullptr;
}

}  // namespace

void for_each_child(const ProtobufCMessage* msg, const std::function<void(const ProtobufCMessage*)>& visit) {
  if (msg == nullptr) return;
  const ProtobufCMessageDescriptor* d = msg->descriptor;
  if (d == &pg_query__node__descriptor) {
    const ProtobufCFieldDescriptor* f = node_member(msg);
    const ProtobufCMessage* child = f != nullptr ? at<const ProtobufCMessage*>(msg, f->offset) : nullptr;
    if (child != nullptr) visit(child);
    return;
  }
  for (unsigned i = 0; i < d->n_fields; ++i) {
    const ProtobufCFieldDescriptor& f = d->fields[i];
    if (f.type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (f.label == PROTOBUF_C_LABEL_REPEATED) {
      std::size_t n = at<std::size_t>(msg, f.quantifier_offset);
      const ProtobufCMessage* const* items = at<const ProtobufCMessage* const*>(msg, f.offset);
      for (std::size_t k = 0; k < n; ++k)
        if (items[k] != nullptr) visit(items[k]);
      continue;
    }
    // A oneof member (Node's union) is only valid when the case says so.
    if ((f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 && at<uint32_t>(msg, f.quantifier_offset) != f.id) continue;
    const ProtobufCMessage* child = at<const ProtobufCMessage*>(msg, f.offset);
    if (child != nullptr) visit(child);
  }
}

void for_each_node_slot(ProtobufCMessage* msg, const std::function<bool(PgQuery__Node*& slot)>& visit) {
  if (msg == nullptr) return;
  auto field = [&](const ProtobufCFieldDescriptor& f) {
    if (f.type != PROTOBUF_C_TYPE_MESSAGE) return;
    if ((f.flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 && at<uint32_t>(msg, f.quantifier_offset) != f.id) return;
    const bool node = f.descriptor == &pg_query__node__descriptor;
    char* place = reinterpret_cast<char*>(msg) + f.offset;
    std::size_t n = 1;
    ProtobufCMessage** slots = reinterpret_cast<ProtobufCMessage**>(place);
    if (f.label == PROTOBUF_C_LABEL_REPEATED) {
      n = at<std::size_t>(msg, f.quantifier_offset);
      slots = *reinterpret_cast<ProtobufCMessage***>(place);
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (slots[k] == nullptr) continue;
      if (node && !visit(reinterpret_cast<PgQuery__Node*&>(slots[k]))) continue;
      if (slots[k] != nullptr) for_each_node_slot(slots[k], visit);
    }
  };
  const ProtobufCMessageDescriptor* d = msg->descriptor;
  if (d == &pg_query__node__descriptor) {
    if (const ProtobufCFieldDescriptor* f = node_member(msg)) field(*f);
    return;
  }
  for (unsigned i = 0; i < d->n_fields; ++i) field(d->fields[i]);
}

void walk_nodes(const ProtobufCMessage* msg, const std::function<bool(const PgQuery__Node*)>& visit) {
  for_each_child(msg, [&](const ProtobufCMessage* child) {
    if (child->descriptor == &pg_query__node__descriptor) {
      if (!visit(reinterpret_cast<const PgQuery__Node*>(child))) return;
    }
    walk_nodes(child, visit);
  });
}

void for_each_range_var(const ProtobufCMessage* msg, const std::function<void(const PgQuery__RangeVar*)>& visit) {
  for_each_child(msg, [&](const ProtobufCMessage* child) {
    if (child->descriptor == &pg_query__range_var__descriptor)
      visit(reinterpret_cast<const PgQuery__RangeVar*>(child));
    for_each_range_var(child, visit);
  });
}

}  // namespace splitpoint::routing
