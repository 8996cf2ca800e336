#include "config/redact.hpp"

#include <cctype>

namespace splitpoint::config {

std::string redact_passwords(std::string_view command) {
  std::string out;
  out.reserve(command.size());
  std::size_t i = 0;
  while (i < command.size()) {
    const unsigned char c = static_cast<unsigned char>(command[i]);
    if (std::isspace(c) || std::iscntrl(c)) {
      out += ' ';
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < command.size() && !std::isspace(static_cast<unsigned char>(command[end])) &&
           !std::iscntrl(static_cast<unsigned char>(command[end])))
      ++end;
    std::string_view word = command.substr(i, end - i);
    static constexpr std::string_view kKey = "password=";
    bool secret = word.size() >= kKey.size();
    for (std::size_t k = 0; secret && k < kKey.size(); ++k)
      secret = std::tolower(static_cast<unsigned char>(word[k])) == kKey[k];
    const std::size_t scheme = word.find("://");
    const std::size_t at = scheme == std::string_view::npos ? scheme : word.find('@', scheme + 3);
    const std::size_t colon = at == std::string_view::npos ? at : word.substr(0, at).find(':', scheme + 3);
    if (secret) out.append(word.substr(0, kKey.size())).append("***");
    else if (colon != std::string_view::npos) out.append(word.substr(0, colon + 1)).append("***").append(word.substr(at));
    else out.append(word);
    i = end;
  }
  return out;
}

}  // namespace splitpoint::config
