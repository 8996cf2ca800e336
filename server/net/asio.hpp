// Asio names used across server/: C++20 coroutines, outcomes as values.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

namespace splitpoint::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
template <class T = void>
using awaitable = asio::awaitable<T>;

// Expected outcomes (EOF, cancellation, refused connections) come back as error codes.
inline constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

}  // namespace splitpoint::server
