// Runs the alloy command (or any program) from a test and captures what it printed.
#pragma once

#include <string>
#include <vector>

namespace alloy::test {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal when it was killed
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Runs `program` with `arguments`, waits for it, and returns its exit code and output.
ProcessResult run_process(const std::string& program, const std::vector<std::string>& arguments);

// The path of the alloy binary of this build.
const char* alloy_binary();

// Runs the alloy binary of this build.
ProcessResult run_alloy(const std::vector<std::string>& arguments);

// Where `unshare -Urm` (a user and mount namespace, no root needed) cannot run, says so with
// what the test `does` there and exits 77: ctest counts the test as skipped.
void skip_without_user_namespaces(const std::string& does);

// The lines of `text`, without their line ends.
std::vector<std::string> lines_of(const std::string& text);

// The lines of stderr `errors` that are the command line's error reports ("alloy: error: ...").
std::vector<std::string> alloy_error_lines(const std::string& errors);

// The value of `key` (a string keeps its quotes) in the first `event` line of a --log-json
// output; empty when there is none.
std::string json_event_field(const std::string& log, const std::string& event,
                             const std::string& key);

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace alloy::test
