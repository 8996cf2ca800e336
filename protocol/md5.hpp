// MD5 password authentication as PostgreSQL does it.
// https://www.postgresql.org/docs/15/auth-password.html
#pragma once

#include <string>
#include <string_view>

namespace splitpoint::protocol::md5 {

std::string hex(std::string_view data);  // lowercase hex of MD5(data)
// What pg_authid stores: "md5" + hex(password + user).
std::string verifier(std::string_view user, std::string_view password);
bool is_verifier(std::string_view text);  // "md5" + 32 lowercase hex digits
// Reply to AuthenticationMD5Password: "md5" + hex(hex(password + user) + salt),
// computed from the stored verifier ("md5..." from verifier()).
std::string response(std::string_view stored_verifier, std::string_view salt4);

}  // namespace splitpoint::protocol::md5
