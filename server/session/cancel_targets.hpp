// The backends a client's CancelRequest (handled on any thread) cancels: the current
// one, or every backend of a running multi-shard statement (session.cpp). Its own
// mutex guards them; everything else of the session stays on the session's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace splitpoint::server {

class Backend;

class CancelTargets {
 public:
  // Where a CancelRequest goes: a backend's host, port and key.
  struct To {
    std::string host;
    std::uint16_t port = 0;
    std::int32_t pid = 0, key = 0;
  };
  // The backend the pump reads from (null: none), at `host`:`port`.
  void set(Backend* b, const std::string& host, std::uint16_t port);
  // `b` leaves the session (still alive): no longer a target.
  void forget(const Backend* b);
  // A multi-shard statement's backends, while it runs (ScatterRead): at `host`:`port`,
  // where `b` is; `shard`: the shard it is on, none for scatter.combine's own database.
  void add_scatter(Backend* b, const std::string& host, std::uint16_t port, std::optional<std::size_t> shard);
  void clear_scatter();
  bool scatter_running();
  // The multi-shard statement's backends on shards (the deadlock search).
  std::vector<std::pair<std::size_t, Backend*>> scatter_on_shards();
  // Every target, each marked never to be handed to another client (the cancel could
  // land there).
  std::vector<To> take();

 private:
  struct Target {
    Backend* backend;
    std::string host;
    std::uint16_t port;
    std::optional<std::size_t> shard;
  };
  std::mutex mu_;
  Backend* backend_ = nullptr;
  std::string host_;
  std::uint16_t port_ = 0;
  std::vector<Target> scatter_;
};

}  // namespace splitpoint::server
