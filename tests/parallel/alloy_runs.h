// Runs of the `alloy` command as the ranks of a data-parallel job, for the multiproc tests:
// each in a forked child with its own environment and output files, and the JSON log read back.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/parallel/forked.h"
#include "tests/support/process.h"

namespace alloy::test {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// The last line of a JSON log with "event":"<name>".
inline std::string event(const std::string& log, const std::string& name) {
  std::istringstream lines(log);
  std::string line;
  std::string found;
  while (std::getline(lines, line)) {
    if (contains(line, "\"event\":\"" + name + "\"")) found = line;
  }
  return found;
}

// A JSON string or number field of one log line, as text.
inline std::string field(const std::string& line, const std::string& key) {
  const std::regex pattern("\"" + key + "\":(\\[[^\\]]*\\]|\"[^\"]*\"|[^,}\\]]+)");
  std::smatch match;
  return std::regex_search(line, match, pattern) ? match[1].str() : "";
}

// Runs alloy in a child process with `environment` added; its output goes to out/err files.
inline std::unique_ptr<ForkedChild> spawn_alloy(
    const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& environment,
    const std::string& output) {
  return std::make_unique<ForkedChild>([=] {
    for (const auto& [name, value] : environment)
      setenv(name.c_str(), value.c_str(), 1);
    const int out = ::open((output + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((output + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
      throw std::runtime_error("cannot redirect the output to " + output);
    }
    std::vector<char*> argv{const_cast<char*>(alloy_binary())};
    for (const auto& arg : args)
      argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(alloy_binary(), argv.data());
    throw std::runtime_error("cannot run " + std::string(alloy_binary()));
  });
}

// Both digests of the end event are rank 0's own digest: every rank holds the same weights.
inline void check_agreeing_end_event(const std::string& log) {
  const std::string end = event(log, "end");
  BOOST_TEST_MESSAGE("end event: " << end);
  BOOST_TEST(field(event(log, "start"), "world_size") == "2");
  BOOST_TEST(field(end, "world_size") == "2");
  const std::string digest = field(end, "params_digest");
  BOOST_TEST(digest.size() == 18u);  // 16 hex digits in quotes
  BOOST_TEST(field(end, "params_digests") == "[" + digest + "," + digest + "]");
}

inline ChildOutcome wait_for(ForkedChild& child, int seconds) {
  return child.wait(std::chrono::steady_clock::now() + std::chrono::seconds(seconds));
}

inline std::vector<std::string> with(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The LeNet recipe of the e2e tests (batch 256, lr 0.2) on Fashion-MNIST, logging to `log`.
inline std::vector<std::string> lenet_recipe(const std::string& level, const std::string& epochs,
                                             const std::string& log) {
  return {"train",
          "--model",
          "lenet",
          "--data-dir",
          ALLOY_TEST_DATA_DIR,
          "--epochs",
          epochs,
          "--batch-size",
          "256",
          "--lr",
          "0.2",
          "--opt-level",
          level,
          "--threads",
          "2",
          "--log-json",
          log};
}

// Runs alloy to its end (at most 10 minutes; output in log.out and log.err) and returns the
// JSON log it wrote to `log`; fails the test unless it exits 0.
inline std::string train_to_end(
    const std::vector<std::string>& args, const std::string& log,
    const std::vector<std::pair<std::string, std::string>>& environment = {}) {
  auto child = spawn_alloy(args, environment, log);
  const ChildOutcome outcome = wait_for(*child, 600);
  BOOST_REQUIRE_MESSAGE(outcome.exit_code == 0,
                        "alloy exited with " << outcome.exit_code << ": " << slurp(log + ".err"));
  return slurp(log);
}

inline double end_test_acc(const std::string& log) {
  return std::stod(field(event(log, "end"), "test_acc"));
}

}  // namespace alloy::test
