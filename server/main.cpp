// splitpoint --config FILE | --check --config FILE | --version | admin [options] COMMAND...
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "config/config.hpp"
#include "server/ops/admin_cli.hpp"
#include "server/cluster/runtime.hpp"
#include "server/server.hpp"

namespace {

void usage() {
  std::cerr << "usage: splitpoint [--config FILE] [--check] [--version]\n"
               "       splitpoint admin [--host H] [--port P] [--user U] [--password-env VAR] [--csv] COMMAND...\n"
               "  --config FILE  YAML configuration (default: $SPLITPOINT_CONFIG, else built-in default)\n"
               "  --check        validate the configuration, print every error with its line, exit\n"
               "  --version      print the version and exit\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace splitpoint;
  if (argc > 1 && std::string(argv[1]) == "admin") return server::admin_main(argc - 2, argv + 2);
  std::string path;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--version") {
      std::cout << "splitpoint " << SPLITPOINT_VERSION << "\n";
      return 0;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--config" && i + 1 < argc) {
      path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      path = a.substr(9);
    } else {
      usage();
      return 2;
    }
  }
  if (path.empty()) {
    if (const char* env = std::getenv("SPLITPOINT_CONFIG")) path = env;
  }

  config::Config cfg;
  if (path.empty()) {
    cfg = config::default_config();
  } else {
    auto result = config::load_file(path);
    if (!result.config) {
      for (auto& e : result.errors) std::cerr << path << ":" << e.line << ": " << e.message << "\n";
      return 1;
    }
    cfg = std::move(*result.config);
  }
  if (check) {
    std::cout << (path.empty() ? "built-in default" : path) << ": configuration OK\n";
    return 0;
  }

  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  try {
    auto runtime = server::make_runtime(std::move(cfg), nullptr);
    server::Server srv(std::move(runtime), path);
    return srv.run();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
}
