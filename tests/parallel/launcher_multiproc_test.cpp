// The launcher, with /bin/sh scripts standing in for workers: what each worker is told, how
// failures and signals are handled, and that no worker outlives its launcher.
#include "parallel/launcher.h"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "tests/parallel/forked.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::parallel;
using alloy::test::contains;
using alloy::test::expect;
using alloy::test::ForkedChild;
using alloy::test::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

Rendezvous node(int first_rank, int world_size, int workers) {
  Rendezvous placement;
  placement.rank = first_rank;
  placement.world_size = world_size;
  placement.local_workers = workers;
  placement.master_addr = "127.0.0.1";
  placement.master_port = 31234;
  return placement;
}

// Runs `script` in every worker; $0 is `directory`.
LaunchResult launch_script(const Rendezvous& placement, const std::string& script,
                           const std::string& directory,
                           std::chrono::milliseconds grace = std::chrono::seconds(10)) {
  LauncherOptions options;
  options.executable = "/bin/sh";
  options.grace = grace;
  return launch_workers(placement, {"-c", script, directory}, options);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// Waits up to 10 s for every file to exist.
bool await_files(const std::vector<std::string>& paths) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    bool all = true;
    for (const auto& path : paths)
      all = all && std::filesystem::exists(path);
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// True when the process is gone or a zombie (dead, waiting for a reaper).
bool process_is_dead(pid_t pid) {
  const std::string status = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = status.rfind(')');
  return status.empty() || (close_paren != std::string::npos && status[close_paren + 2] == 'Z');
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher)

BOOST_AUTO_TEST_CASE(every_worker_gets_its_rank_and_the_job_in_its_environment) {
  const TempDir directory;
  const LaunchResult result = launch_script(
      node(2, 4, 2),
      R"(printf '%s %s %s %s %s:%s %s' "$RANK" "$LOCAL_RANK" "$WORLD_SIZE" "$LOCAL_WORLD_SIZE" )"
      R"("$MASTER_ADDR" "$MASTER_PORT" "$ALLOY_WORKER" > "$0/rank.$RANK")",
      directory.path());
  BOOST_TEST(result.ok(), result.message());
  BOOST_TEST(result.exit_status() == 0);
  BOOST_TEST(result.workers.size() == 2u);
  BOOST_TEST(slurp(directory.file("rank.2")) == "2 0 4 2 127.0.0.1:31234 1");
  BOOST_TEST(slurp(directory.file("rank.3")) == "3 1 4 2 127.0.0.1:31234 1");
}

BOOST_AUTO_TEST_CASE(a_failing_worker_stops_the_others_and_is_named) {
  const TempDir directory;
  const auto start = Clock::now();
  const LaunchResult result = launch_script(
      node(0, 3, 3), R"(if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 30)", directory.path());
  BOOST_TEST(seconds_since(start) < 10.0);
  BOOST_TEST(!result.ok());
  BOOST_REQUIRE(result.first_failure == 1);
  BOOST_TEST(result.workers[1].exit_code == 3);
  BOOST_TEST(result.workers[0].signal == SIGTERM);
  BOOST_TEST(result.workers[2].signal == SIGTERM);
  BOOST_TEST(contains(result.message(), "rank 1 (pid "), result.message());
  BOOST_TEST(contains(result.message(), ") exited with status 3; the other workers were stopped"),
             result.message());
  BOOST_TEST(result.exit_status() == 1);
}

BOOST_AUTO_TEST_CASE(a_worker_usage_error_becomes_the_launcher_usage_error) {
  const TempDir directory;
  const LaunchResult result = launch_script(node(0, 2, 2), "exit 2", directory.path());
  BOOST_TEST(result.exit_status() == 2);
}

BOOST_AUTO_TEST_CASE(a_worker_killed_by_a_signal_is_named_with_the_signal) {
  const TempDir directory;
  const LaunchResult result =
      launch_script(node(0, 2, 2), R"(if [ "$RANK" = 0 ]; then kill -KILL $$; fi; exec sleep 30)",
                    directory.path());
  BOOST_REQUIRE(result.first_failure == 0);
  BOOST_TEST(result.workers[0].signal == SIGKILL);
  BOOST_TEST(contains(result.message(), "was killed by SIGKILL"), result.message());
}

BOOST_AUTO_TEST_CASE(a_worker_ignoring_sigterm_is_killed_after_the_grace_period) {
  const TempDir directory;
  const auto start = Clock::now();
  // Rank 1 fails only once rank 0 ignores SIGTERM; otherwise, on a loaded machine, the
  // SIGTERM could land before the trap and kill rank 0 without the grace period.
  const LaunchResult result = launch_script(
      node(0, 2, 2),
      R"(if [ "$RANK" = 1 ]; then while [ ! -e "$0/ignoring" ]; do sleep 0.01; done; exit 1; fi; )"
      R"(trap '' TERM; touch "$0/ignoring"; exec sleep 30)",
      directory.path(), std::chrono::milliseconds(300));
  BOOST_TEST(seconds_since(start) < 5.0);
  BOOST_REQUIRE(result.first_failure == 1);
  BOOST_TEST(result.workers[0].signal == SIGKILL);
}

BOOST_AUTO_TEST_CASE(sigterm_to_the_launcher_is_passed_on_to_every_worker) {
  const TempDir directory;
  const std::string dir = directory.path();
  ForkedChild launcher([&] {
    const LaunchResult result = launch_script(
        node(0, 2, 2),
        R"(trap 'echo stopped > "$0/term.$RANK"; exit 0' TERM; touch "$0/started.$RANK"; )"
        R"(while :; do sleep 0.05; done)",
        dir);
    expect(result.interrupted_by == SIGTERM, "not interrupted: " + result.message());
    expect(result.first_failure < 0, "a worker failed: " + result.message());
    expect(contains(result.message(), "interrupted by SIGTERM"), result.message());
    expect(result.exit_status() == 1, "exit status");
  });
  BOOST_REQUIRE(await_files({dir + "/started.0", dir + "/started.1"}));
  ::kill(launcher.pid(), SIGTERM);
  const auto outcome = launcher.wait(Clock::now() + std::chrono::seconds(10));
  BOOST_TEST(outcome.exit_code == 0, outcome.error);
  BOOST_TEST(slurp(dir + "/term.0") == "stopped\n");
  BOOST_TEST(slurp(dir + "/term.1") == "stopped\n");
}

BOOST_AUTO_TEST_CASE(workers_die_with_a_killed_launcher) {
  const TempDir directory;
  const std::string dir = directory.path();
  ForkedChild launcher([&] {
    launch_script(node(0, 2, 2),
                  R"(echo $$ > "$0/tmp.$RANK"; mv "$0/tmp.$RANK" "$0/pid.$RANK"; exec sleep 30)",
                  dir);
  });
  BOOST_REQUIRE(await_files({dir + "/pid.0", dir + "/pid.1"}));
  const pid_t workers[] = {std::stoi(slurp(dir + "/pid.0")), std::stoi(slurp(dir + "/pid.1"))};
  ::kill(launcher.pid(), SIGKILL);
  launcher.wait(Clock::now() + std::chrono::seconds(5));
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline && !(process_is_dead(workers[0]) && process_is_dead(workers[1]))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  BOOST_TEST(process_is_dead(workers[0]));
  BOOST_TEST(process_is_dead(workers[1]));
}

BOOST_AUTO_TEST_CASE(a_worker_that_cannot_start_is_an_error_naming_the_program) {
  LauncherOptions options;
  options.executable = "/nonexistent/alloy";
  BOOST_CHECK_EXCEPTION(launch_workers(node(0, 2, 2), {}, options), Error, [](const Error& error) {
    BOOST_TEST_MESSAGE(error.what());
    return contains(
        error.what(),
        "cannot start the worker of rank 0: /nonexistent/alloy: no such file or directory");
  });
}

BOOST_AUTO_TEST_SUITE_END()
