// A statement for several shards with its parameters, as the client sent it (simple or
// extended protocol): what the multi-shard executors (ScatterRead, MultiShardWrite, a
// global index's write) are given to run.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/messages.hpp"

namespace splitpoint::server {

struct ScatterRequest {
  std::string sql;  // the client's statement
  bool extended = false;
  bool describe = true;   // send the RowDescription (simple: always; extended: Describe P came)
  bool emit_rows = true;  // extended Describe without Execute: no rows
  std::vector<std::optional<std::string>> params;
  std::vector<std::int16_t> param_formats, result_formats;
  std::vector<std::int32_t> param_types;
  // The client's statement is a named one (prepared once, executed many times), parsed
  // then: so is the shards' statement, on each backend once (ScatterRead::send_statement).
  std::optional<std::chrono::steady_clock::time_point> named_since;
  // A Bind of these parameters (views into this request) with `result_formats`.
  protocol::Bind bind(std::vector<std::int16_t> result_formats) const {
    protocol::Bind b;
    b.param_formats = param_formats;
    for (auto& p : params) b.params.push_back(p ? std::optional<std::string_view>(*p) : std::nullopt);
    b.result_formats = std::move(result_formats);
    return b;
  }
};

}  // namespace splitpoint::server
