// Runs pieces of a test in forked child processes: the ranks of a job on 127.0.0.1, or a
// launcher to be signalled. A child reports success by returning and failure by throwing; its
// message travels back through a pipe. Every wait is bounded, so a hung child fails the test
// instead of hanging it.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace alloy::test {

// A port on 127.0.0.1 that was free a moment ago (another program could take it first, but
// the kernel hands out ephemeral ports in turn, so it is unlikely).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) < 0) {
    throw std::runtime_error("free_port: cannot bind a socket");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// Fails a child's body: the message reaches the parent's test log.
inline void expect(bool condition, const std::string& message) {
  if (!condition) throw std::runtime_error(message);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct ChildOutcome {
  int exit_code = -1;  // 0: the body returned, 1: it threw, 128 + N: signal N, -1: it hung
  std::string error;   // what the body threw
};

// One forked child running body(); its destructor kills it if nobody waited for it.
class ForkedChild {
 public:
  explicit ForkedChild(const std::function<void()>& body) {
    int fds[2];
    if (pipe(fds) < 0) throw std::runtime_error("pipe failed");
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      int code = 0;
      std::string error;
      try {
        body();
      } catch (const std::exception& thrown) {
        error = thrown.what();
        code = 1;
      } catch (...) {
        error = "unknown exception";
        code = 1;
      }
      error = error.substr(0, 4000);  // fits the pipe: the child never blocks on it
      [[maybe_unused]] const ssize_t written = ::write(fds[1], error.data(), error.size());
      _exit(code);  // skips the test framework's exit handlers, which belong to the parent
    }
    ::close(fds[1]);
    pipe_ = fds[0];
  }

  ~ForkedChild() {
    if (!waited_) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    ::close(pipe_);
  }

  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  pid_t pid() const { return pid_; }

  // Waits until the child ends or `deadline`, when it is killed and reported as hung.
  ChildOutcome wait(std::chrono::steady_clock::time_point deadline) {
    ChildOutcome outcome;
    int status = 0;
    while (true) {
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (done < 0 && errno != EINTR) throw std::runtime_error("waitpid failed");
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        waited_ = true;
        outcome.error = "did not finish in time and was killed";
        return outcome;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    waited_ = true;
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char buffer[4096];
    ssize_t got;
    while ((got = ::read(pipe_, buffer, sizeof buffer)) > 0)
      outcome.error.append(buffer, got);
    return outcome;
  }

 private:
  pid_t pid_ = -1;
  int pipe_ = -1;
  bool waited_ = false;
};

// Runs body(rank) for every rank of `world` in its own child process and waits for all.
inline std::vector<ChildOutcome> run_ranks(int world, const std::function<void(int rank)>& body,
                                           std::chrono::seconds limit = std::chrono::seconds(30)) {
  std::vector<std::unique_ptr<ForkedChild>> children;
  for (int rank = 0; rank < world; ++rank) {
    children.push_back(std::make_unique<ForkedChild>([&body, rank] { body(rank); }));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<ChildOutcome> outcomes;
  for (auto& child : children)
    outcomes.push_back(child->wait(deadline));
  return outcomes;
}

inline void check_all_succeeded(const std::vector<ChildOutcome>& outcomes) {
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    BOOST_TEST(outcomes[rank].exit_code == 0, "rank " << rank << " ended with "
                                                      << outcomes[rank].exit_code << ": "
                                                      << outcomes[rank].error);
  }
}

}  // namespace alloy::test
