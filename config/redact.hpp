// Text for the audit log (SPEC §11): an admin command with its secrets replaced.
// Pure: no logging here.
#pragma once

#include <string>
#include <string_view>

namespace splitpoint::config {

// Every whitespace-separated `password=value` (any case, as in ADD SHARD ...
// password=...) becomes `password=***`, and the password of a URI
// (postgres://user:secret@host) `***`; everything else is kept as written. Control
// characters become spaces, so one command stays one log line.
std::string redact_passwords(std::string_view command);

}  // namespace splitpoint::config
