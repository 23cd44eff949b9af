#include "apps/cli/config_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"

namespace alloy::app {

namespace {
std::string trim(const std::string& text) {
  const char* space = " \t\r";
  const auto begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(space) - begin + 1);
}
}  // namespace

std::vector<ConfigLine> read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read the config file ", path, ": ", std::strerror(errno));
  std::vector<ConfigLine> lines;
  std::set<std::string> seen;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    text = trim(text.substr(0, text.find('#')));
    if (text.empty()) continue;
    const auto split = text.find_first_of("= \t");
    std::string key = text.substr(0, split);
    std::string value = split == std::string::npos ? "" : trim(text.substr(split));
    if (!value.empty() && value.front() == '=') value = trim(value.substr(1));
    if (key.rfind("--", 0) == 0) key = key.substr(2);
    if (key.empty()) usage_fail(path, ":", number, ": a line must start with a flag name");
    if (!seen.insert(key).second) usage_fail(path, ":", number, ": '", key, "' is set twice");
    lines.push_back({number, key, value.empty() ? "--" + key : "--" + key + "=" + value});
  }
  if (in.bad()) fail("cannot read the config file ", path, ": ", std::strerror(errno));
  return lines;
}

}  // namespace alloy::app
