#include "protocol/framing.hpp"

#include <algorithm>

#include "protocol/buffer.hpp"

namespace splitpoint::protocol {

std::size_t max_length_for(char type, Direction from, const FrameLimits& limits) {
  // Fixed-size and small messages get tight bounds so a corrupt length is caught at
  // once instead of waiting for a gigabyte that never comes.
  std::size_t bound = limits.max_message_size;
  if (from == Direction::frontend) {
    switch (type) {
      case 'S': case 'H': case 'X': case 'c': bound = 4; break;  // Sync Flush Terminate CopyDone
      case 'E': case 'D': case 'C': bound = 4 + 1 + 10000 + 4; break;  // Execute Describe Close
      case 'p': bound = 10000; break;                             // password / SASL
      default: break;
    }
  } else {
    switch (type) {
      case 'Z': bound = 5; break;                                 // ReadyForQuery
      case 'K': bound = 12; break;                                // BackendKeyData
      case '1': case '2': case '3': case 'n': case 'I': case 's': case 'c': bound = 4; break;
      case 'R': bound = 10000; break;                             // Authentication*
      default: break;
    }
  }
  return std::min(bound, limits.max_message_size);
}

static std::size_t min_length_for(char type, Direction from) {
  if (from == Direction::backend) {
    switch (type) {
      case 'Z': return 5;
      case 'K': return 12;
      case 'R': return 8;
      default: return 4;
    }
  }
  return 4;
}

FrameResult decode_frame(std::string_view buf, Direction from, const FrameLimits& limits) {
  FrameResult r;
  if (buf.size() < 5) return r;
  char type = buf[0];
  auto len = static_cast<std::uint32_t>(read_i32(buf.data() + 1));
  if (len < min_length_for(type, from) || len > max_length_for(type, from, limits)) {
    r.status = FrameStatus::error;
    r.error = "invalid message length";
    return r;
  }
  if (buf.size() - 1 < len) return r;
  r.status = FrameStatus::ok;
  r.frame.type = type;
  r.frame.body = buf.substr(5, len - 4);
  r.frame.size = std::size_t{len} + 1;
  return r;
}

FrameResult decode_startup_frame(std::string_view buf) {
  FrameResult r;
  if (buf.size() < 4) return r;
  auto len = static_cast<std::uint32_t>(read_i32(buf.data()));
  if (len < kStartupMin || len > kStartupMax) {
    r.status = FrameStatus::error;
    r.error = "invalid length of startup packet";
    return r;
  }
  if (buf.size() < len) return r;
  r.status = FrameStatus::ok;
  r.frame.body = buf.substr(4, len - 4);
  r.frame.size = len;
  return r;
}

}  // namespace splitpoint::protocol
