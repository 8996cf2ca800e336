// Shared by the fuzz target and the unit tests: runs every decoder from messages.hpp
// that applies to a frame and checks that whatever a decoder accepts encodes back
// to exactly the same bytes. A decoder that accepted bytes it cannot reproduce
// would let the proxy forward something other than what it inspected.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "protocol/framing.hpp"
#include "protocol/messages.hpp"

namespace splitpoint::protocol::testing {

struct CheckResult {
  int accepted = 0;    // decoders that accepted the body
  int mismatched = 0;  // of those, how many encoded back to different bytes
};

namespace detail {

inline void compare(CheckResult& r, const Frame& f, std::string_view wire) {
  ++r.accepted;
  std::size_t header = f.type == 0 ? 4 : 5;
  bool same = wire.size() == header + f.body.size() && (f.type == 0 || wire[0] == f.type) &&
              wire.substr(header) == f.body;
  if (!same) ++r.mismatched;
}

template <class T>
void check(CheckResult& r, const Frame& f, const std::optional<T>& m) {
  if (!m) return;
  std::string wire;
  m->encode(wire);
  compare(r, f, wire);
}

inline void check_bodiless(CheckResult& r, const Frame& f, void (*encode)(std::string&)) {
  if (!f.body.empty()) return;
  std::string wire;
  encode(wire);
  compare(r, f, wire);
}

inline void check_startup(CheckResult& r, const Frame& f) {
  check(r, f, StartupMessage::decode(f.body));
  check(r, f, CancelRequest::decode(f.body));
  auto code = startup_code(f.body);
  if (f.body.size() == 4 && (code == kSSLRequestCode || code == kGSSENCRequestCode)) {
    std::string wire;
    (code == kSSLRequestCode ? encode_ssl_request : encode_gssenc_request)(wire);
    compare(r, f, wire);
  }
}

inline void check_frontend(CheckResult& r, const Frame& f) {
  auto b = f.body;
  switch (f.type) {
    case 'Q': check(r, f, Query::decode(b)); break;
    case 'P': check(r, f, Parse::decode(b)); break;
    case 'B': check(r, f, Bind::decode(b)); break;
    case 'D': check(r, f, Describe::decode(b)); break;
    case 'E': check(r, f, Execute::decode(b)); break;
    case 'C': check(r, f, Close::decode(b)); break;
    case 'S': check_bodiless(r, f, encode_sync); break;
    case 'H': check_bodiless(r, f, encode_flush); break;
    case 'X': check_bodiless(r, f, encode_terminate); break;
    case 'c': check_bodiless(r, f, encode_copy_done); break;
    case 'd': check(r, f, CopyData::decode(b)); break;
    case 'f': check(r, f, CopyFail::decode(b)); break;
    case 'p':  // which one depends on the authentication exchange; try all
      check(r, f, PasswordMessage::decode(b));
      check(r, f, SASLInitialResponse::decode(b));
      check(r, f, SASLResponse::decode(b));
      break;
    default: break;
  }
}

inline void check_backend(CheckResult& r, const Frame& f) {
  auto b = f.body;
  switch (f.type) {
    case 'R': check(r, f, Authentication::decode(b)); break;
    case 'S': check(r, f, ParameterStatus::decode(b)); break;
    case 'K': check(r, f, BackendKeyData::decode(b)); break;
    case 'Z': check(r, f, ReadyForQuery::decode(b)); break;
    case 'C': check(r, f, CommandComplete::decode(b)); break;
    case 'E':
    case 'N':
      if (auto e = ErrorFields::decode(b)) {
        std::string wire;
        e->encode(wire, f.type);
        compare(r, f, wire);
      }
      break;
    case 'T': check(r, f, RowDescription::decode(b)); break;
    case 'D': check(r, f, DataRow::decode(b)); break;
    case 't': check(r, f, ParameterDescription::decode(b)); break;
    case 'A': check(r, f, NotificationResponse::decode(b)); break;
    case 'G':
    case 'H':
    case 'W': check(r, f, CopyResponse::decode(f.type, b)); break;
    case 'd': check(r, f, CopyData::decode(b)); break;
    case 'c': check_bodiless(r, f, encode_copy_done); break;
    case '1': check_bodiless(r, f, encode_parse_complete); break;
    case '2': check_bodiless(r, f, encode_bind_complete); break;
    case '3': check_bodiless(r, f, encode_close_complete); break;
    case 'n': check_bodiless(r, f, encode_no_data); break;
    case 'I': check_bodiless(r, f, encode_empty_query); break;
    case 's': check_bodiless(r, f, encode_portal_suspended); break;
    default: break;
  }
}

}  // namespace detail

// A frame with type 0 is a startup-phase packet; `from` is ignored for it.
inline CheckResult check_frame(const Frame& f, Direction from) {
  CheckResult r;
  if (f.type == 0) {
    detail::check_startup(r, f);
  } else if (from == Direction::frontend) {
    detail::check_frontend(r, f);
  } else {
    detail::check_backend(r, f);
  }
  return r;
}

}  // namespace splitpoint::protocol::testing
