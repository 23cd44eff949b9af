// Helpers of the checkpoint end-to-end tests: short `alloy train` runs on the synthetic data
// with a JSON log, the log's events and fields, and a run in the background to signal.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"

namespace alloy::test {

// A small, fast run: the MLP on the synthetic set (50 steps an epoch at batch 256), one thread
// (results are bit-exact for a fixed thread count), momentum so the optimizer has state.
// On the CPU whatever the machine: these runs check the CPU's bit-exact behaviour, and with the
// default --device auto a machine with one GPU would run them there (and refuse --gpus 2 and
// --nodes 2 --gpus 1 outright: two ranks cannot share its one device over NCCL).
inline std::vector<std::string> quick_train_args(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"train",     "--model",    "mlp", "--dataset",
                                   "synthetic", "--device",   "cpu", "--threads",
                                   "1",         "--momentum", "0.9"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The raw text of `key`'s value in a one-line JSON object (numbers, or strings without their
// quotes); "" when absent. Spaces after the colon are allowed (Python's json.dumps writes
// them); the values of interest hold no commas or braces.
inline std::string json_field(const std::string& line, const std::string& key) {
  const std::string marker = "\"" + key + "\":";
  const std::size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  const std::size_t begin = line.find_first_not_of(' ', at + marker.size());
  if (begin == std::string::npos) return "";
  std::size_t end = line.find_first_of(",}", begin);
  std::string value = line.substr(begin, end - begin);
  if (value.size() >= 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
  return value;
}

// The log's lines of one event kind, in order.
inline std::vector<std::string> events(const std::string& log, const std::string& kind) {
  std::vector<std::string> found;
  for (const std::string& line : lines_of(log)) {
    if (json_field(line, "event") == kind) found.push_back(line);
  }
  return found;
}

// `alloy ARGS` exits 2 (a usage error) with `names` in its message.
inline void check_usage_error(const std::vector<std::string>& args, const std::string& names) {
  const ProcessResult result = run_alloy(args);
  BOOST_TEST(result.exit_code == 2, result.errors);
  BOOST_TEST(result.errors.find(names) != std::string::npos, result.errors);
}

struct TrainRun {
  ProcessResult process;
  std::string log;
  std::string digest() const {
    const auto end = events(log, "end");
    return end.empty() ? "" : json_field(end.back(), "params_digest");
  }
  // train_loss of the epoch event for `epoch` (1-based), "" when absent.
  std::string train_loss(int epoch) const {
    for (const std::string& line : events(log, "epoch")) {
      if (json_field(line, "epoch") == std::to_string(epoch)) return json_field(line, "train_loss");
    }
    return "";
  }
};

// Runs `alloy` with `args` plus a JSON log in `dir` and requires exit status `expected`.
inline TrainRun run_logged(const TempDir& dir, const std::string& name,
                           std::vector<std::string> args, int expected = 0) {
  const std::string log = dir.file(name + ".jsonl");
  args.push_back("--log-json");
  args.push_back(log);
  TrainRun run{run_alloy(args), ""};
  run.log = read_text(log);
  BOOST_TEST_REQUIRE(run.process.exit_code == expected,
                     name << " exited " << run.process.exit_code << ": " << run.process.errors);
  return run;
}

// A quick_train_args run with `extra`, logged as run_logged does.
inline TrainRun run_quick(const TempDir& dir, const std::string& name,
                          const std::vector<std::string>& extra) {
  return run_logged(dir, name, quick_train_args(extra));
}

// `key` of the run's last `event` event, "" when it has none.
inline std::string last_field(const TrainRun& run, const std::string& event,
                              const std::string& key) {
  const auto lines = events(run.log, event);
  return lines.empty() ? "" : json_field(lines.back(), key);
}

// The command failed with status 1 and stderr's one error line holds `path` and `reason`.
inline void check_clean_failure(const ProcessResult& result, const std::string& path,
                                const std::string& reason) {
  BOOST_TEST(result.exit_code == 1, result.errors);
  const std::vector<std::string> reports = alloy_error_lines(result.errors);
  const std::string error_line = reports.empty() ? "" : reports.back();
  BOOST_TEST(reports.size() == 1u, result.errors);
  BOOST_TEST(error_line.find(path) != std::string::npos, error_line);
  BOOST_TEST(error_line.find(reason) != std::string::npos, error_line << " lacks: " << reason);
  BOOST_TEST(result.errors.find("terminate") == std::string::npos, result.errors);
}

// The children of a launcher, in start order (local rank order).
inline std::vector<pid_t> workers_of(pid_t launcher) {
  const std::string pid = std::to_string(launcher);
  std::istringstream children(read_text("/proc/" + pid + "/task/" + pid + "/children"));
  std::vector<pid_t> pids;
  for (pid_t child = 0; children >> child;)
    pids.push_back(child);
  return pids;
}

// `alloy` started in the background with stdout and stderr in files; killed and reaped by the
// destructor if still running.
class BackgroundAlloy {
 public:
  BackgroundAlloy(const std::vector<std::string>& arguments, const std::string& out_path,
                  const std::string& err_path) {
    std::vector<char*> argv;
    const std::string program = alloy_binary();
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const auto& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    BOOST_TEST_REQUIRE(pid_ >= 0, "fork failed");
    if (pid_ == 0) {
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || err < 0) _exit(126);
      ::dup2(out, 1);
      ::dup2(err, 2);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
  }
  ~BackgroundAlloy() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  BackgroundAlloy(const BackgroundAlloy&) = delete;
  BackgroundAlloy& operator=(const BackgroundAlloy&) = delete;

  void signal(int number) const { ::kill(pid_, number); }
  pid_t pid() const { return pid_; }
  // The exit status, or 128 + signal.
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace alloy::test
