#include "parallel/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "parallel/socket.h"

namespace alloy::parallel {
namespace {

std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation != nullptr ? std::string("SIG") + abbreviation
                                 : "signal " + std::to_string(signal);
}

// The write end of the pipe the signal handler reports to; one launcher runs at a time.
int signal_pipe = -1;

void on_signal(int signal) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signal);
  // A full pipe already holds a wake-up; nothing else can be done inside a handler.
  [[maybe_unused]] const ssize_t written = ::write(signal_pipe, &byte, 1);
  errno = saved;
}

// Turns SIGINT, SIGTERM and SIGCHLD into bytes on a pipe that the launcher polls, so that it
// handles them in its own loop (whichever thread the kernel picked to receive them); restores
// the previous handlers when it goes.
class SignalPipe {
 public:
  SignalPipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) fail("launcher: pipe: ", errno_str(errno));
    read_.reset(fds[0]);
    write_.reset(fds[1]);
    signal_pipe = write_.get();
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      if (sigaction(kSignals[i], &action, &previous_[i]) < 0) {
        fail("launcher: sigaction: ", errno_str(errno));
      }
    }
  }

  ~SignalPipe() {
    for (std::size_t i = 0; i < kSignals.size(); ++i)
      sigaction(kSignals[i], &previous_[i], nullptr);
    signal_pipe = -1;
  }

  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Waits until a signal arrives or `timeout_ms` passes (-1: no limit); returns those received.
  std::vector<int> wait(int timeout_ms) {
    pollfd entry{read_.get(), POLLIN, 0};
    if (::poll(&entry, 1, timeout_ms) < 0 && errno != EINTR) {
      fail("launcher: poll: ", errno_str(errno));
    }
    std::vector<int> received;
    unsigned char bytes[64];
    ssize_t got;
    while ((got = ::read(read_.get(), bytes, sizeof bytes)) > 0) {
      received.insert(received.end(), bytes, bytes + got);
    }
    return received;
  }

 private:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};
  UniqueFd read_;
  UniqueFd write_;
  std::array<struct sigaction, 3> previous_{};
};

// The started workers. Any still running when it goes (the launcher is unwinding from an
// error) are killed and reaped, so no process outlives the launcher's failure.
class Workers {
 public:
  Workers() = default;
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  ~Workers() {
    for (std::size_t i = 0; i < exits_.size(); ++i) {
      if (running_[i]) {
        ::kill(exits_[i].pid, SIGKILL);
        while (waitpid(exits_[i].pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
    }
  }

  void start(int rank, const std::string& executable, const std::vector<std::string>& arguments,
             const std::vector<std::string>& environment) {
    std::vector<char*> argv{const_cast<char*>(executable.c_str())};
    for (const auto& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const auto& variable : environment)
      envp.push_back(const_cast<char*>(variable.c_str()));
    envp.push_back(nullptr);

    // The child reports a failed exec through this pipe; a successful exec closes it empty.
    int status_pipe[2];
    if (pipe2(status_pipe, O_CLOEXEC) < 0) fail("launcher: pipe: ", errno_str(errno));
    UniqueFd status_read(status_pipe[0]);
    UniqueFd status_write(status_pipe[1]);
    const pid_t launcher = getpid();
    const pid_t pid = fork();
    if (pid < 0) fail("cannot start the worker of rank ", rank, ": fork: ", errno_str(errno));
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != launcher) _exit(126);
      execve(executable.c_str(), argv.data(), envp.data());
      const int error = errno;
      [[maybe_unused]] const ssize_t written = ::write(status_write.get(), &error, sizeof error);
      _exit(127);
    }
    status_write.reset();
    WorkerExit exit;
    exit.rank = rank;
    exit.pid = pid;
    exits_.push_back(exit);
    running_.push_back(true);
    int error = 0;
    ssize_t got;
    while ((got = ::read(status_read.get(), &error, sizeof error)) < 0 && errno == EINTR) {
    }
    if (got > 0) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      running_.back() = false;
      fail("cannot start the worker of rank ", rank, ": ", executable, ": ", errno_str(error));
    }
  }

  void signal_all(int signal) {
    for (std::size_t i = 0; i < exits_.size(); ++i) {
      if (running_[i]) ::kill(exits_[i].pid, signal);
    }
  }

  bool any_running() const {
    return std::find(running_.begin(), running_.end(), true) != running_.end();
  }

  // Collects the workers that have ended since the last call; returns their indices.
  std::vector<int> reap() {
    std::vector<int> ended;
    for (std::size_t i = 0; i < exits_.size(); ++i) {
      if (!running_[i]) continue;
      int status = 0;
      const pid_t pid = waitpid(exits_[i].pid, &status, WNOHANG);
      if (pid < 0 && errno != EINTR) fail("launcher: waitpid: ", errno_str(errno));
      if (pid != exits_[i].pid) continue;
      running_[i] = false;
      if (WIFSIGNALED(status)) exits_[i].signal = WTERMSIG(status);
      if (WIFEXITED(status)) exits_[i].exit_code = WEXITSTATUS(status);
      ended.push_back(static_cast<int>(i));
    }
    return ended;
  }

  const std::vector<WorkerExit>& exits() const { return exits_; }

 private:
  std::vector<WorkerExit> exits_;
  std::vector<bool> running_;
};

std::vector<std::string> worker_environment(
    const Rendezvous& placement, int local_rank,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  const std::vector<std::pair<std::string, std::string>> ours{
      {kWorkerMarker, "1"},
      {"RANK", std::to_string(placement.rank + local_rank)},
      {"WORLD_SIZE", std::to_string(placement.world_size)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(placement.local_workers)},
      {"MASTER_ADDR", placement.master_addr},
      {"MASTER_PORT", std::to_string(placement.master_port)},
  };
  Environment environment = process_environment();
  for (const auto& [name, value] : ours)
    environment[name] = value;
  for (const auto& [name, value] : extra)
    environment[name] = value;
  std::vector<std::string> variables;
  for (const auto& [name, value] : environment)
    variables.push_back(name + "=" + value);
  return variables;
}

int poll_timeout(const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
}

}  // namespace

std::string WorkerExit::str() const {
  const std::string who = "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
  if (signal != 0) return who + " was killed by " + signal_name(signal);
  return who + " exited with status " + std::to_string(exit_code);
}

std::string LaunchResult::message() const {
  if (ok()) return "all " + std::to_string(workers.size()) + " workers succeeded";
  std::string text;
  if (first_failure >= 0) {
    text =
        workers[static_cast<std::size_t>(first_failure)].str() + "; the other workers were stopped";
  }
  if (stopped && first_failure < 0) text = "the workers were stopped on request";
  if (interrupted_by != 0) {
    text += (text.empty() ? "" : "; ") + std::string("interrupted by ") +
            signal_name(interrupted_by) + ", which was passed on to the workers";
  }
  return text;
}

int LaunchResult::exit_status() const {
  if (ok()) return 0;
  if (first_failure >= 0 && workers[static_cast<std::size_t>(first_failure)].exit_code == 2) {
    return 2;
  }
  return 1;
}

LaunchResult launch_workers(const Rendezvous& placement, const std::vector<std::string>& arguments,
                            const LauncherOptions& options) {
  ALLOY_CHECK(placement.local_workers > 0, "launch_workers: no workers to start");
  SignalPipe signals;  // before the first fork, so that no SIGCHLD is missed
  Workers workers;
  for (int local_rank = 0; local_rank < placement.local_workers; ++local_rank) {
    workers.start(placement.rank + local_rank, options.executable, arguments,
                  worker_environment(placement, local_rank, options.environment));
  }

  LaunchResult result;
  std::optional<Clock::time_point> kill_at;  // set once the workers were asked to stop
  bool killed = false;
  const auto stop_all = [&](int signal) {
    workers.signal_all(signal);
    if (!kill_at) kill_at = Clock::now() + options.grace;
  };
  while (workers.any_running()) {
    int timeout = killed ? -1 : poll_timeout(kill_at);
    if (options.should_stop && !kill_at) {
      const int interval = static_cast<int>(options.poll_interval.count());
      timeout = timeout < 0 ? interval : std::min(timeout, interval);
    }
    for (const int signal : signals.wait(timeout)) {
      if (signal == SIGINT || signal == SIGTERM) {
        if (result.interrupted_by == 0) result.interrupted_by = signal;
        stop_all(signal);
      }
    }
    for (const int index : workers.reap()) {
      // After an interrupt, workers dying of it are expected, not the failure to report.
      if (workers.exits()[index].failed() && result.first_failure < 0 &&
          result.interrupted_by == 0 && !result.stopped) {
        result.first_failure = index;
        stop_all(SIGTERM);
      }
    }
    // Only while nothing else stops them: a failure or an interrupt is the result to report.
    if (options.should_stop && !kill_at && options.should_stop()) {
      result.stopped = true;
      stop_all(SIGTERM);
    }
    if (kill_at && !killed && Clock::now() >= *kill_at) {
      workers.signal_all(SIGKILL);
      killed = true;  // SIGCHLD wakes the loop as they go
    }
  }
  result.workers = workers.exits();
  return result;
}

}  // namespace alloy::parallel
