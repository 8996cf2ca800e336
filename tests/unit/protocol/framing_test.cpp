// Framing: where one message ends and the next begins, and which lengths are refused
// before a body is waited for.
// https://www.postgresql.org/docs/15/protocol-overview.html#PROTOCOL-MESSAGE-CONCEPTS
#include "protocol/framing.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "protocol/buffer.hpp"

using namespace splitpoint::protocol;

namespace {

// Type byte + big-endian length, with no body: enough for the length checks.
std::string header(char type, std::uint32_t len) {
  std::string h(1, type);
  for (int shift = 24; shift >= 0; shift -= 8) h.push_back(static_cast<char>(len >> shift));
  return h;
}

std::string startup_header(std::uint32_t len) { return header('x', len).substr(1); }

std::string frame(char type, std::string_view body) {
  std::string out;
  Writer(out, type).bytes(body).finish();
  return out;
}

const FrameLimits kDefault{};

}  // namespace

TEST_CASE("decode_frame waits for a message split across reads", "[framing]") {
  std::string wire = frame('Q', std::string("SELECT 1", 9));  // body includes the NUL
  for (auto from : {Direction::frontend, Direction::backend}) {
    for (std::size_t n = 0; n < wire.size(); ++n) {
      INFO("prefix " << n);
      REQUIRE(decode_frame(std::string_view(wire).substr(0, n), from, kDefault).status ==
              FrameStatus::need_more);
    }
    auto r = decode_frame(wire, from, kDefault);
    REQUIRE(r.status == FrameStatus::ok);
    REQUIRE(r.frame.type == 'Q');
    REQUIRE(r.frame.size == wire.size());
    REQUIRE(r.frame.body == std::string_view("SELECT 1", 9));
  }
}

TEST_CASE("decode_startup_frame waits for a packet split across reads", "[framing]") {
  std::string wire;
  Writer w(wire, 0);
  w.i32(196608).cstr("user").cstr("alice").u8(0);
  w.finish();
  for (std::size_t n = 0; n < wire.size(); ++n) {
    INFO("prefix " << n);
    REQUIRE(decode_startup_frame(std::string_view(wire).substr(0, n)).status ==
            FrameStatus::need_more);
  }
  auto r = decode_startup_frame(wire);
  REQUIRE(r.status == FrameStatus::ok);
  REQUIRE(r.frame.type == 0);
  REQUIRE(r.frame.size == wire.size());
  REQUIRE(r.frame.body == std::string_view(wire).substr(4));
}

TEST_CASE("two messages in one buffer come out one at a time", "[framing]") {
  std::string first = frame('P', std::string("s1\0SELECT $1\0\0\0", 16));
  std::string second = frame('S', "");
  std::string buf = first + second;

  auto r1 = decode_frame(buf, Direction::frontend, kDefault);
  REQUIRE(r1.status == FrameStatus::ok);
  REQUIRE(r1.frame.type == 'P');
  REQUIRE(r1.frame.size == first.size());
  REQUIRE(r1.frame.body == std::string_view(first).substr(5));

  std::string_view rest = std::string_view(buf).substr(r1.frame.size);
  auto r2 = decode_frame(rest, Direction::frontend, kDefault);
  REQUIRE(r2.status == FrameStatus::ok);
  REQUIRE(r2.frame.type == 'S');
  REQUIRE(r2.frame.body.empty());
  REQUIRE(r2.frame.size == rest.size());

  REQUIRE(decode_frame(rest.substr(r2.frame.size), Direction::frontend, kDefault).status ==
          FrameStatus::need_more);

  // Startup packet followed by a regular message, as a client sends them.
  std::string startup = startup_header(8) + std::string("\x04\xd2\x16\x2f", 4);  // SSLRequest
  std::string both = startup + first;
  auto s = decode_startup_frame(both);
  REQUIRE(s.status == FrameStatus::ok);
  REQUIRE(s.frame.size == 8);
  REQUIRE(decode_frame(std::string_view(both).substr(8), Direction::frontend, kDefault).frame.size ==
          first.size());
}

TEST_CASE("a length above max_message_size is refused from the 5-byte header", "[framing]") {
  FrameLimits limits;
  limits.max_message_size = 1000;
  for (auto from : {Direction::frontend, Direction::backend}) {
    REQUIRE(decode_frame(header('Q', 1001), from, limits).status == FrameStatus::error);
    REQUIRE(decode_frame(header('d', 1001), from, limits).error != nullptr);
    REQUIRE(decode_frame(header('Q', 1000), from, limits).status == FrameStatus::need_more);
    // Lengths that look negative as int32 and the default 1 GiB bound.
    REQUIRE(decode_frame(header('D', 0xFFFFFFFFu), from, kDefault).status == FrameStatus::error);
    REQUIRE(decode_frame(header('D', 0x80000000u), from, kDefault).status == FrameStatus::error);
    REQUIRE(decode_frame(header('D', (1u << 30) + 1), from, kDefault).status == FrameStatus::error);
    REQUIRE(decode_frame(header('d', 1u << 30), from, kDefault).status == FrameStatus::need_more);
    // Four header bytes are not enough to judge.
    REQUIRE(decode_frame(header('Q', 1001).substr(0, 4), from, limits).status ==
            FrameStatus::need_more);
  }
  // max_message_size also caps the per-type bounds.
  limits.max_message_size = 6;
  REQUIRE(decode_frame(header('R', 8), Direction::backend, limits).status == FrameStatus::error);
}

TEST_CASE("tight per-type lengths are refused from the 5-byte header", "[framing]") {
  const auto fe = Direction::frontend;
  const auto be = Direction::backend;
  auto status = [](char type, std::uint32_t len, Direction from) {
    return decode_frame(header(type, len), from, kDefault).status;
  };
  // Frontend Sync, Flush, Terminate, CopyDone carry no body.
  for (char t : {'S', 'H', 'X', 'c'}) {
    INFO("frontend " << t);
    REQUIRE(status(t, 5, fe) == FrameStatus::error);
    REQUIRE(status(t, 4, fe) == FrameStatus::ok);
  }
  // The same letter from a backend is a different message: 'S' is ParameterStatus.
  REQUIRE(status('S', 40, be) == FrameStatus::need_more);
  // ReadyForQuery is exactly 5, BackendKeyData exactly 12.
  REQUIRE(status('Z', 6, be) == FrameStatus::error);
  REQUIRE(status('Z', 4, be) == FrameStatus::error);
  REQUIRE(status('Z', 5, be) == FrameStatus::need_more);
  REQUIRE(status('K', 13, be) == FrameStatus::error);
  REQUIRE(status('K', 11, be) == FrameStatus::error);
  REQUIRE(status('K', 12, be) == FrameStatus::need_more);
  for (char t : {'1', '2', '3', 'n', 'I', 's', 'c'}) {
    INFO("backend " << t);
    REQUIRE(status(t, 5, be) == FrameStatus::error);
    REQUIRE(status(t, 4, be) == FrameStatus::ok);
  }
  REQUIRE(status('R', 7, be) == FrameStatus::error);
  REQUIRE(status('R', 10001, be) == FrameStatus::error);
  REQUIRE(status('R', 10000, be) == FrameStatus::need_more);
  REQUIRE(status('p', 10001, fe) == FrameStatus::error);
  REQUIRE(status('p', 10000, fe) == FrameStatus::need_more);
  for (char t : {'E', 'D', 'C'}) {
    INFO("frontend " << t);
    REQUIRE(status(t, 10010, fe) == FrameStatus::error);
    REQUIRE(status(t, 10009, fe) == FrameStatus::need_more);
    REQUIRE(status(t, 10010, be) == FrameStatus::need_more);  // backend E/D/C are unbounded
  }
}

TEST_CASE("a length below 4 is an error", "[framing]") {
  for (auto from : {Direction::frontend, Direction::backend}) {
    for (std::uint32_t len = 0; len < 4; ++len) {
      INFO("length " << len);
      auto r = decode_frame(header('Q', len), from, kDefault);
      REQUIRE(r.status == FrameStatus::error);
      REQUIRE(r.error != nullptr);
    }
  }
}

TEST_CASE("startup packets outside 8..10000 bytes are errors", "[framing]") {
  for (std::uint32_t len = 0; len < kStartupMin; ++len) {
    INFO("length " << len);
    REQUIRE(decode_startup_frame(startup_header(len)).status == FrameStatus::error);
  }
  REQUIRE(decode_startup_frame(startup_header(10001)).status == FrameStatus::error);
  REQUIRE(decode_startup_frame(startup_header(0xFFFFFFFFu)).status == FrameStatus::error);
  REQUIRE(decode_startup_frame(startup_header(10001)).error != nullptr);
  REQUIRE(decode_startup_frame(startup_header(10000)).status == FrameStatus::need_more);
  REQUIRE(decode_startup_frame(startup_header(8)).status == FrameStatus::need_more);
  REQUIRE(decode_startup_frame(startup_header(8).substr(0, 3)).status == FrameStatus::need_more);

  std::string big = startup_header(10000) + std::string(9996, 'a');
  auto r = decode_startup_frame(big);
  REQUIRE(r.status == FrameStatus::ok);
  REQUIRE(r.frame.size == 10000);
  REQUIRE(r.frame.body.size() == 9996);
}

namespace {

// Properties every result must have, whatever the bytes.
void check_regular(std::string_view buf, Direction from, const FrameLimits& limits) {
  auto r = decode_frame(buf, from, limits);
  if (buf.size() < 5) {
    REQUIRE(r.status == FrameStatus::need_more);
    return;
  }
  auto len = static_cast<std::uint32_t>(read_i32(buf.data() + 1));
  if (len < 4 || len > max_length_for(buf[0], from, limits)) REQUIRE(r.status == FrameStatus::error);
  if (r.status == FrameStatus::error) {
    REQUIRE(r.error != nullptr);
  } else if (r.status == FrameStatus::need_more) {
    REQUIRE(buf.size() < std::size_t{len} + 1);
  } else {
    REQUIRE(r.frame.size <= buf.size());
    REQUIRE(r.frame.size == std::size_t{len} + 1);
    REQUIRE(r.frame.type == buf[0]);
    REQUIRE(r.frame.body.data() == buf.data() + 5);
    REQUIRE(r.frame.body.size() == r.frame.size - 5);
    // Every shorter read waits; extra bytes after it change nothing.
    for (std::size_t n = 0; n < r.frame.size; ++n)
      REQUIRE(decode_frame(buf.substr(0, n), from, limits).status == FrameStatus::need_more);
    REQUIRE(decode_frame(buf.substr(0, r.frame.size), from, limits).frame.size == r.frame.size);
  }
}

void check_startup(std::string_view buf) {
  auto r = decode_startup_frame(buf);
  if (buf.size() < 4) {
    REQUIRE(r.status == FrameStatus::need_more);
    return;
  }
  auto len = static_cast<std::uint32_t>(read_i32(buf.data()));
  bool valid = len >= kStartupMin && len <= kStartupMax;
  REQUIRE((r.status == FrameStatus::error) == !valid);
  if (r.status == FrameStatus::ok) {
    REQUIRE(r.frame.size == len);
    REQUIRE(r.frame.size <= buf.size());
    REQUIRE(r.frame.body.data() == buf.data() + 4);
    REQUIRE(r.frame.body.size() == len - 4);
    REQUIRE(r.frame.type == 0);
  } else if (r.status == FrameStatus::need_more) {
    REQUIRE(buf.size() < len);
  }
}

}  // namespace

TEST_CASE("random bytes never crash framing and never frame past the buffer", "[framing][random]") {
  std::mt19937 rng(20240515);
  std::uniform_int_distribution<int> byte(0, 255);
  const char types[] = "QPBDECSHXcdfpRKZTtA123nIsGWN";
  const FrameLimits small{32};
  int ok_regular = 0, ok_startup = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string buf(rng() % 48, '\0');
    for (auto& c : buf) c = static_cast<char>(byte(rng));
    // Half the time write a small length, as a startup length at offset 0 or after a
    // type byte, so that whole frames are found and not only errors.
    if (i % 2 == 0 && buf.size() >= 5) {
      std::string len = startup_header(static_cast<std::uint32_t>(rng() % 48));
      if (i % 4 == 0) {
        buf.replace(0, 4, len);
      } else {
        buf[0] = types[rng() % (sizeof(types) - 1)];
        buf.replace(1, 4, len);
      }
    }
    for (auto from : {Direction::frontend, Direction::backend}) {
      for (const auto* limits : {&kDefault, &small}) {
        check_regular(buf, from, *limits);
        ok_regular += decode_frame(buf, from, *limits).status == FrameStatus::ok;
      }
    }
    check_startup(buf);
    ok_startup += decode_startup_frame(buf).status == FrameStatus::ok;
  }
  // Make sure the run was not vacuous: some frames were actually found.
  REQUIRE(ok_regular > 1000);
  REQUIRE(ok_startup > 100);
}
