// Health checks of every shard host that has a standby or a possible second primary
// (SPEC §10): role, replay lag and reachability, every `health.interval`; a failed
// check bans the host with backoff. Runs on the first worker, as two-phase recovery.
#pragma once

#include "server/net/asio.hpp"

namespace splitpoint::server {

class Proxy;

awaitable<void> health_loop(Proxy& server);

}  // namespace splitpoint::server
