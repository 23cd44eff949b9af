#include "tests/support/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace alloy::test {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::vector<std::string> alloy_error_lines(const std::string& errors) {
  std::vector<std::string> found;
  for (const std::string& line : lines_of(errors)) {
    if (line.rfind("alloy: error: ", 0) == 0) found.push_back(line);
  }
  return found;
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}
}  // namespace

ProcessResult run_process(const std::string& program, const std::vector<std::string>& arguments) {
  TempDir scratch;
  const std::string out_path = scratch.file("stdout");
  const std::string err_path = scratch.file("stderr");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& argument : arguments)
    argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);

  const pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = slurp(out_path);
  result.errors = slurp(err_path);
  return result;
}

const char* alloy_binary() {
  return ALLOY_BINARY;
}

ProcessResult run_alloy(const std::vector<std::string>& arguments) {
  return run_process(alloy_binary(), arguments);
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "alloy-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error(std::string("mkdtemp failed: ") + std::strerror(errno));
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string json_event_field(const std::string& log, const std::string& event,
                             const std::string& key) {
  const std::regex line("\\{\"event\":\"" + event + "\"[^\n]*");
  std::smatch match;
  if (!std::regex_search(log, match, line)) return {};
  const std::regex field("\"" + key + "\":(\"[^\"]*\"|[^,}]*)");
  std::smatch value;
  const std::string text = match.str();
  return std::regex_search(text, value, field) ? value[1].str() : std::string();
}

void skip_without_user_namespaces(const std::string& does) {
  const ProcessResult probe = run_process("/usr/bin/unshare", {"-Urm", "true"});
  if (probe.exit_code != 0) {
    std::cout << "SKIPPED: this test " << does << " and cannot: 'unshare -Urm true' exited "
              << probe.exit_code << ": " << probe.errors << std::endl;
    std::exit(77);
  }
}

}  // namespace alloy::test
