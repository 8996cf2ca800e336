// The process: the worker threads (one io_context each), the listener, the metrics
// endpoint, signals, the background loops (two-phase recovery, health checks, the
// deadlock search) and graceful shutdown. What the parts below share is the Proxy
// (server/cluster/proxy.hpp) it is.
#pragma once

#include <memory>
#include <string>

#include "server/cluster/proxy.hpp"
#include "server/net/asio.hpp"

namespace splitpoint::server {

class Server final : public Proxy {
 public:
  Server(std::shared_ptr<const Runtime> runtime, std::string config_path);
  ~Server();

  // Runs until shutdown completes. Returns the process exit code.
  int run();

 private:
  awaitable<void> accept_loop();
  awaitable<void> handle_signals();
  void begin_shutdown();
  void spawn_session(Worker& w, tcp::socket socket);

  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<tcp::acceptor> metrics_acceptor_;
  std::unique_ptr<asio::signal_set> signals_;
  std::size_t next_worker_ = 0;
};

}  // namespace splitpoint::server
