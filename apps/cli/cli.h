// Command-line plumbing shared by the subcommands: one parsing style everywhere (no prefix
// guessing, "--flag value" and "--flag=value"), stray positional arguments reported by name,
// and help printing.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace alloy::app {

namespace po = boost::program_options;

// Parses `args` (the words after the subcommand) against `options` into `values` without
// notifying. Positional words are kept under `positional_key` when it is given (and are a
// UsageError naming the first one otherwise).
void parse_arguments(const std::vector<std::string>& args, const po::options_description& options,
                     po::variables_map& values, const char* positional_key = nullptr);

// True when --help or -h is among `args`; the caller prints help and exits 0, whatever else
// is on the line.
bool wants_help(const std::vector<std::string>& args);

// "Usage: <synopsis>\n\n<description>\n\n<options>"; `options` is a set of make_group groups
// (boost prints the blank line above each group).
void print_help(const std::string& synopsis, const std::string& description,
                const po::options_description& options);

// A UsageError naming `flag` unless value is in [0, 1) as the 32-bit float the kernels take
// (1 - 1e-9 is below 1 but rounds to it), e.g. a decay or a smoothing factor.
void check_fraction_flag(const char* flag, double value);

// The setting of a configuration that a flag sets ("batch-size": "batch_size"; "nproc-per-node",
// torchrun's name: "gpus"), and the flag of a setting ("batch_size": "--batch-size").
std::string setting_of_flag(const std::string& flag);
std::string flag_of_setting(const std::string& setting);

// An error's message as the command shows it: the settings a library error names
// (core/setting_error.h) as the flags that set them.
std::string command_message(const std::exception& error);

// "a, b or c", for the choices a message lists.
std::string join(const std::vector<std::string>& words);

// The cores this process may run on (its affinity mask, which containers and taskset narrow),
// not every core of the machine: the default of --threads.
int available_cores();

// Options descriptions formatted for a 100-column terminal.
po::options_description make_group(const std::string& title);

}  // namespace alloy::app
