// --config FILE: the train flags, one per line, as "key value" or "key=value" (a leading "--"
// is allowed, '#' starts a comment, a flag without a value is a switch). Each line becomes
// one "--key=value" word for the ordinary parser, so the file accepts exactly the flags the
// command line does.
#pragma once

#include <string>
#include <vector>

namespace alloy::app {

struct ConfigLine {
  int number = 0;    // 1-based, for messages
  std::string key;   // without the dashes
  std::string word;  // "--key=value" or "--key"
};

// Throws Error when the file cannot be read and UsageError ("FILE:LINE: ...") for a line
// without a key or a key given twice.
std::vector<ConfigLine> read_config_file(const std::string& path);

}  // namespace alloy::app
