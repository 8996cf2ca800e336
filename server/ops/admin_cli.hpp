// `splitpoint admin ...`: the admin console from the command line (docs/admin.md).
#pragma once

namespace splitpoint::server {

// argv: the arguments after `admin`. Returns the process's exit status.
int admin_main(int argc, char** argv);

}  // namespace splitpoint::server
