// Recognises the statements that change session state a pooled backend must carry
// over (SET, RESET, DISCARD ALL, DEALLOCATE ALL) or that pin a session (LISTEN).
// Only the leading keywords are looked at, of the statements libpg_query found to be
// such (the router's Route::session_commands lists them, once per text).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace splitpoint::routing {

enum class SessionCommand { none, set, set_local, reset, reset_all, discard_all, deallocate, deallocate_all, listen };

struct SessionCommandInfo {
  SessionCommand kind = SessionCommand::none;
  std::string name;  // lower-cased parameter name for set / reset; statement name for deallocate
  std::string text;  // the statement's own text (set by the router, to replay it elsewhere)
  std::size_t statement = 0;  // its place among the text's statements, from 0 (set by the router)
};

SessionCommandInfo classify_session_command(std::string_view sql);

// The statements of a query text, as PostgreSQL's scanner splits it (empty if it
// cannot be scanned).
std::vector<std::string_view> split_statements(std::string_view sql, bool standard_strings = true);
// Whether a ';' is followed by more than blanks: the text may hold several statements
// (a cheap test before split_statements; a ';' in a string or comment counts too).
bool may_hold_several_statements(std::string_view sql);

// The statement's first keyword, lower-cased ("" if it does not start with a word).
std::string first_keyword(std::string_view sql);

}  // namespace splitpoint::routing
