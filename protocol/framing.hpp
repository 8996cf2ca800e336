// The one place where message boundaries are found, with size limits checked
// before anything is allocated for the body.
// https://www.postgresql.org/docs/15/protocol-overview.html#PROTOCOL-MESSAGE-CONCEPTS
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace splitpoint::protocol {

// Who sent the bytes: the same type letter means different messages per direction
// ('S' is Sync from a frontend and ParameterStatus from a backend).
enum class Direction { frontend, backend };

struct FrameLimits {
  std::size_t max_message_size = std::size_t{1} << 30;  // length field incl. itself
};

inline constexpr std::size_t kStartupMin = 8;
inline constexpr std::size_t kStartupMax = 10000;

enum class FrameStatus { need_more, ok, error };

struct Frame {
  char type = 0;            // 0 for startup-phase packets
  std::string_view body;    // after the length field
  std::size_t size = 0;     // bytes the whole frame occupies in the buffer
};

struct FrameResult {
  FrameStatus status = FrameStatus::need_more;
  Frame frame;
  const char* error = nullptr;  // set when status == error; static text
};

// A regular message: type byte + int32 length + body. Returns need_more until the
// whole frame is in `buf`; a length outside the limits for its type is an error as
// soon as the 5-byte header is seen.
FrameResult decode_frame(std::string_view buf, Direction from, const FrameLimits& limits);

// A startup-phase packet (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest):
// int32 length (8..10000) + body. The body starts with the int32 protocol code.
FrameResult decode_startup_frame(std::string_view buf);

// Largest length field allowed for a message type from a direction, or
// limits.max_message_size if the type has no tighter bound.
std::size_t max_length_for(char type, Direction from, const FrameLimits& limits);

}  // namespace splitpoint::protocol
