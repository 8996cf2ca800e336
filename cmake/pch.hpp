// The precompiled header of server/'s Asio layers with -DSP_PCH=ON (CMakeLists.txt):
// what nearly every one of their translation units includes, heaviest first.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <spdlog/spdlog.h>

// fmt 9.1's format.h defines detail::vformat_to<char> (the formatting of every log line:
// integers, floats, padding, escapes) without declaring the explicit instantiation its
// shared library exports, so each translation unit that logs compiled its 40 KB of code
// again (3-7 s of CPU a batch at -O2, docs/running.md "Build time"). Declared here, the
// units call libfmt's copy.
#if defined(SPDLOG_FMT_EXTERNAL) && !defined(FMT_HEADER_ONLY) && FMT_VERSION >= 90000 && FMT_VERSION < 100000
namespace fmt {
inline namespace v9 {
namespace detail {
extern template void vformat_to<char>(buffer<char>&, basic_string_view<char>,
                                      basic_format_args<FMT_BUFFER_CONTEXT(type_identity_t<char>)>, locale_ref);
}  // namespace detail
}  // namespace v9
}  // namespace fmt
#endif

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
