// `splitpoint admin [options] COMMAND...`: one admin console command (SPEC §7, §9) from
// a shell. Connects to a proxy's database `splitpoint` with libpq, runs the command in
// the simple protocol (PQexec: the console speaks only that), prints the result as
// aligned text (or CSV) and exits 1 with the SQLSTATE and message on an error.
#include "server/ops/admin_cli.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <libpq-fe.h>
#include <memory>
#include <string>
#include <vector>

namespace splitpoint::server {

namespace {

void admin_usage(std::ostream& out) {
  out << "usage: splitpoint admin [--host H] [--port P] [--user U] [--password-env VAR] [--csv] COMMAND...\n"
         "  runs one admin console command (database splitpoint) on a proxy and prints its result\n"
         "  --host H            proxy address (default: $PGHOST, else 127.0.0.1)\n"
         "  --port P            proxy port (default: $PGPORT, else 6432)\n"
         "  --user U            admin user (default: $PGUSER, else admin)\n"
         "  --password-env VAR  read the password from environment variable VAR (default: PGPASSWORD, as libpq)\n"
         "  --csv               print CSV (a header line, then one line per row) instead of aligned text\n"
         "exit status: 0 done, 1 the command failed (SQLSTATE and message on stderr), 2 usage or connection error\n"
         "example: splitpoint admin --port 6432 --password-env SP_ADMIN_PASSWORD SHOW MOVES\n";
}

// A libpq connection string value, quoted.
std::string dsn_value(const std::string& v) {
  std::string q = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') q += '\\';
    q += c;
  }
  return q + "'";
}

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Display width of UTF-8 text: code points (enough for the console's answers).
std::size_t width(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string cell(const PGresult* r, int row, std::size_t col) { return PQgetvalue(r, row, static_cast<int>(col)); }

void print_aligned(const PGresult* r, std::ostream& out) {
  const auto cols = static_cast<std::size_t>(PQnfields(r));
  const int rows = PQntuples(r);
  std::vector<std::string> names;
  std::vector<std::size_t> w;
  for (std::size_t c = 0; c < cols; ++c) {
    names.emplace_back(PQfname(r, static_cast<int>(c)));
    w.push_back(width(names.back()));
  }
  for (int row = 0; row < rows; ++row)
    for (std::size_t c = 0; c < cols; ++c) w[c] = std::max(w[c], width(cell(r, row, c)));
  auto line = [&](auto value) {
    std::string s;
    for (std::size_t c = 0; c < cols; ++c) {
      const std::string v = value(c);
      s += (c ? " | " : " ") + v + std::string(w[c] - width(v), ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line([&](std::size_t c) { return names[c]; });
  std::string rule;
  for (std::size_t c = 0; c < cols; ++c) rule += (c ? "-+-" : "-") + std::string(w[c], '-');
  out << rule << "-\n";
  for (int row = 0; row < rows; ++row) line([&](std::size_t c) { return cell(r, row, c); });
  out << "(" << rows << (rows == 1 ? " row)\n" : " rows)\n");
}

void print_csv(const PGresult* r, std::ostream& out) {
  const int cols = PQnfields(r);
  for (int c = 0; c < cols; ++c) out << (c ? "," : "") << csv_field(PQfname(r, c));
  out << "\n";
  for (int row = 0; row < PQntuples(r); ++row) {
    for (int c = 0; c < cols; ++c) out << (c ? "," : "") << csv_field(PQgetvalue(r, row, c));
    out << "\n";
  }
}

// libpq's "ERROR:  message\nDETAIL: ..." without the severity prefix and the last newline.
std::string message_of(const std::string& what) {
  std::string m = what;
  for (const char* prefix : {"ERROR:  ", "FATAL:  "})
    if (m.rfind(prefix, 0) == 0) m.erase(0, std::string(prefix).size());
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

int admin_main(int argc, char** argv) {
  auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v && *v ? v : fallback);
  };
  std::string host = env("PGHOST", "127.0.0.1"), port = env("PGPORT", "6432"), user = env("PGUSER", "admin");
  std::string password_env = "PGPASSWORD";
  bool csv = false;
  std::string command;
  int i = 0;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      admin_usage(std::cout);
      return 0;
    } else if (a == "--csv") {
      csv = true;
    } else if ((a == "--host" && value(host)) || (a == "--port" && value(port)) || (a == "--user" && value(user)) ||
               (a == "--password-env" && value(password_env))) {
    } else if (a == "--") {
      ++i;
      break;
    } else if (a.rfind("--", 0) == 0) {
      std::cerr << "splitpoint admin: unknown option " << a << "\n";
      admin_usage(std::cerr);
      return 2;
    } else {
      break;
    }
  }
  for (; i < argc; ++i) command += (command.empty() ? "" : " ") + std::string(argv[i]);
  if (command.empty()) {
    admin_usage(std::cerr);
    return 2;
  }
  std::string dsn = "host=" + dsn_value(host) + " port=" + dsn_value(port) + " user=" + dsn_value(user) +
                    " dbname=splitpoint connect_timeout=10 application_name=splitpoint-admin";
  if (const char* pw = std::getenv(password_env.c_str())) dsn += " password=" + dsn_value(pw);
  else if (password_env != "PGPASSWORD") {
    std::cerr << "splitpoint admin: environment variable " << password_env << " is not set\n";
    return 2;
  }
  std::unique_ptr<PGconn, decltype(&PQfinish)> c(PQconnectdb(dsn.c_str()), &PQfinish);
  if (!c || PQstatus(c.get()) != CONNECTION_OK) {
    std::cerr << "splitpoint admin: cannot connect to " << host << ":" << port << ": "
              << message_of(c ? PQerrorMessage(c.get()) : "out of memory") << "\n";
    return 2;
  }
  std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(c.get(), command.c_str()), &PQclear);
  const auto status = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_TUPLES_OK) {
    if (csv) print_csv(r.get(), std::cout);
    else print_aligned(r.get(), std::cout);
    return 0;
  }
  if (status == PGRES_COMMAND_OK || status == PGRES_EMPTY_QUERY) {
    std::cout << PQcmdStatus(r.get()) << "\n";
    return 0;
  }
  const char* code = r ? PQresultErrorField(r.get(), PG_DIAG_SQLSTATE) : nullptr;
  const char* message = r ? PQresultErrorField(r.get(), PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  if (!code) {  // (the connection broke: no ErrorResponse)
    std::cerr << "splitpoint admin: " << message_of(PQerrorMessage(c.get())) << "\n";
    return 2;
  }
  std::cerr << "ERROR: " << code << ": " << (message ? message : "") << "\n";
  return 1;
}

}  // namespace splitpoint::server
