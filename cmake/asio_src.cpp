// Asio's own compiled code, once for the whole program, when the build defines
// BOOST_ASIO_SEPARATE_COMPILATION (SP_PCH, CMakeLists.txt): every other translation unit
// then sees only the declarations of Asio's non-template functions (its scheduler, epoll
// reactor, socket operations, SSL engine) instead of compiling them again.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
