// A client's start-up (session.cpp): the startup packet (SSLRequest, TLS,
// CancelRequest), authentication (trust, md5, password, SCRAM-SHA-256 with channel
// binding, auth_query), the user's `allow` list, then the greeting (its startup
// parameters applied, BackendKeyData, ReadyForQuery), all within
// timeouts.client_login. Made by Session::run for the login and gone after it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "protocol/framing.hpp"
#include "protocol/messages.hpp"
#include "server/cluster/runtime.hpp"
#include "server/net/asio.hpp"
#include "server/net/backend.hpp"

namespace splitpoint::server {

class Session;

class Login {
 public:
  explicit Login(Session& s) : s_(s) {}

  // True: the client is in (its Client fields set, the session registered).
  awaitable<bool> run();

 private:
  awaitable<bool> exchange();
  awaitable<std::optional<protocol::StartupMessage>> read_startup();
  awaitable<bool> take_startup(const protocol::StartupMessage& startup);
  awaitable<bool> greet();
  awaitable<std::optional<protocol::Frame>> read_startup_frame();
  awaitable<bool> authenticate();
  awaitable<bool> authenticate_scram(const UserAuth* user);
  awaitable<bool> authentication_failed();
  awaitable<std::optional<std::string>> read_password_message(std::string_view expected);
  void set_startup_param(std::string name, std::string value);
  awaitable<bool> apply_startup_params(ParameterList& reported);

  Session& s_;
  bool timed_out_ = false;  // timeouts.client_login passed: the connection was closed
};

}  // namespace splitpoint::server
