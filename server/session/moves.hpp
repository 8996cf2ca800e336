// What server/session/moves.cpp tells the rest of the session about partition moves.
#pragma once

#include "server/cluster/runtime.hpp"

namespace splitpoint::server {

// Whether the moves `view` shows hold a statement routed as `route` (a partition it
// goes to is in cutover, or the proxy lost its catalog lease): Session::wait_for_moves.
bool held_by_moves(const MoveView& view, const routing::Route& route);

}  // namespace splitpoint::server
