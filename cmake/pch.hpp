// The precompiled header of server/'s Asio layers with -DSP_PCH=ON (CMakeLists.txt):
// what nearly every one of their translation units includes, heaviest first.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
