// run_alloy, the `alloy` command (apps/cli/main.cpp calls it): dispatches to the subcommands and
// maps every failure to one line on stderr and an exit status (0 success, 2 usage error, 1
// anything else). This is the only place exceptions are caught; errors about settings are shown
// with the flags that set them.
#include "apps/cli/alloy_main.h"

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/train/version.h"
#include "core/error.h"
#include "core/ops/cpu/blas_core.h"

namespace {

using alloy::app::kExitFailure;
using alloy::app::kExitSuccess;
using alloy::app::kExitUsage;

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"train", alloy::app::run_train, "train a model in fp32 or mixed precision (O0-O3)"},
    {"eval", alloy::app::run_eval, "test accuracy of a checkpoint"},
    {"mem", alloy::app::run_mem, "compare memory per opt level, side by side"},
    {"ckpt", alloy::app::run_ckpt, "inspect, verify or export (safetensors) a checkpoint"},
    {"generate", alloy::app::run_generate, "continue a text prompt with a trained GPT"},
};

void print_usage(std::ostream& out) {
  out << "Usage: alloy <command> [options]\n"
         "       alloy --help | --version\n\n"
         "Alloy trains image classifiers in fp32 or mixed precision on the CPU or a GPU.\n\n"
         "Commands:\n";
  for (const Command& command : kCommands) {
    out << "  " << command.name << std::string(8 - std::string(command.name).size(), ' ')
        << command.summary << '\n';
  }
  out << "\n'alloy <command> --help' lists a command's flags.\n"
         "Exit status: 0 success, 1 failure, 2 usage error. A run stopped by SIGTERM or\n"
         "SIGINT saves a checkpoint (with --checkpoint-dir) and exits 1.\n";
}

const Command* find_command(const std::string& name) {
  for (const Command& command : kCommands) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) {
    print_usage(std::cerr);
    return kExitUsage;
  }
  const std::string& first = args.front();
  if (first == "--help" || first == "-h" || first == "help") {
    print_usage(std::cout);
    return kExitSuccess;
  }
  if (first == "--version") {
    std::cout << alloy::app::version_string() << '\n';
    return kExitSuccess;
  }
  if (const Command* command = find_command(first)) {
    return command->run({args.begin() + 1, args.end()});
  }
  alloy::usage_fail("unknown command '", first, "' (expected train, eval, mem or ckpt)");
}

int report(const char* message, int status, const std::vector<std::string>& args) {
  std::cerr << "alloy: error: " << message;
  if (status == kExitUsage && !args.empty() && find_command(args.front())) {
    std::cerr << " (see 'alloy " << args.front() << " --help')";
  }
  std::cerr << std::endl;
  return status;
}

// Runs first, before any thread or file exists: see core/ops/cpu/blas_core.h. A failed exec
// leaves this process as it was, with slower kernels and the same contract.
void use_the_best_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::optional<std::string> core = alloy::cpu::better_blas_core();
  if (!core || setenv("OPENBLAS_CORETYPE", core->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace

namespace alloy::app {

int run_alloy(int argc, char** argv) {
  use_the_best_blas_kernels(argv);
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return dispatch(args);
  } catch (const boost::program_options::error& e) {
    return report(e.what(), kExitUsage, args);
  } catch (const alloy::UsageError& e) {
    return report(alloy::app::command_message(e).c_str(), kExitUsage, args);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitFailure, args);
  } catch (const std::exception& e) {
    return report(alloy::app::command_message(e).c_str(), kExitFailure, args);
  } catch (...) {
    return report("unexpected failure", kExitFailure, args);
  }
}

}  // namespace alloy::app
