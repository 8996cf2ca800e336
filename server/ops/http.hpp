// The metrics endpoint on `metrics_listen`: GET /metrics (Prometheus text format),
// /healthz (the process is up), /readyz (config loaded and every shard reachable).
#pragma once

#include "server/net/asio.hpp"

namespace splitpoint::server {

class Proxy;

// Serves until the acceptor is closed.
awaitable<void> serve_http(Proxy& server, tcp::acceptor& acceptor);

}  // namespace splitpoint::server
