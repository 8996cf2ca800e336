// libFuzzer target for framing and message decoding. The input is read three ways,
// each the way a session consumes bytes (frame after frame until need_more or error):
// as a client connection (startup packets, then frontend messages), as frontend
// messages only, and as backend messages. Every frame body goes to the decoders for
// its type, and whatever a decoder accepts must encode back to the same bytes.
// Build and run: tests/fuzz/run
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "protocol/framing.hpp"
#include "protocol/messages.hpp"
#include "tests/fuzz/message_check.hpp"

namespace {

using namespace splitpoint::protocol;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "frame_fuzz: %s\n", what);
  std::abort();
}

void check_decoders(const Frame& frame, Direction from) {
  auto r = testing::check_frame(frame, from);
  if (r.mismatched != 0) fail("a decoded message encodes to different bytes");
}

// Consumes regular frames from `buf`; returns what is left.
std::string_view consume_frames(std::string_view buf, Direction from, const FrameLimits& limits) {
  for (;;) {
    FrameResult r = decode_frame(buf, from, limits);
    if (r.status == FrameStatus::error && r.error == nullptr) fail("error without a reason");
    if (r.status != FrameStatus::ok) return buf;
    const Frame& f = r.frame;
    if (f.size > buf.size() || f.size != f.body.size() + 5 || f.body.data() != buf.data() + 5)
      fail("frame does not match its buffer");
    if (f.size - 1 > max_length_for(f.type, from, limits)) fail("frame longer than its limit");
    check_decoders(f, from);
    buf.remove_prefix(f.size);
  }
}

// A client first sends startup-phase packets: SSLRequest/GSSENCRequest may be
// followed by another packet; anything else ends the startup phase.
std::string_view consume_startup(std::string_view buf) {
  for (;;) {
    FrameResult r = decode_startup_frame(buf);
    if (r.status != FrameStatus::ok) return r.status == FrameStatus::error ? std::string_view{} : buf;
    const Frame& f = r.frame;
    if (f.size > buf.size() || f.size < kStartupMin || f.size > kStartupMax ||
        f.size != f.body.size() + 4 || f.body.data() != buf.data() + 4)
      fail("startup frame does not match its buffer");
    check_decoders(f, Direction::frontend);
    buf.remove_prefix(f.size);
    auto code = startup_code(f.body);
    if (code != kSSLRequestCode && code != kGSSENCRequestCode) return buf;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const FrameLimits defaults{};
  const FrameLimits tight{64};  // so that the general limit is hit, not only per-type ones

  consume_frames(consume_startup(input), Direction::frontend, defaults);
  consume_frames(input, Direction::frontend, defaults);
  consume_frames(input, Direction::backend, defaults);
  consume_frames(input, Direction::backend, tight);
  return 0;
}
