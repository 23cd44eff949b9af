#include "apps/cli/cli.h"

#include <sched.h>

#include <iostream>
#include <thread>

#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {
constexpr unsigned kLineLength = 100;
constexpr unsigned kDescriptionColumn = 50;
constexpr const char* kStrayKey = "stray-argument";
}  // namespace

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    out += i == 0 ? "" : i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}

std::string setting_of_flag(const std::string& flag) {
  if (flag == "nproc-per-node") return "gpus";
  std::string setting = flag;
  for (char& c : setting) {
    if (c == '-') c = '_';
  }
  return setting;
}

std::string flag_of_setting(const std::string& setting) {
  std::string flag = "--" + setting;
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

std::string command_message(const std::exception& error) {
  if (const auto* settings = dynamic_cast<const SettingsMessage*>(&error)) {
    return settings->render(flag_of_setting);
  }
  return error.what();
}

po::options_description make_group(const std::string& title) {
  return po::options_description(title, kLineLength, kLineLength - kDescriptionColumn);
}

void parse_arguments(const std::vector<std::string>& args, const po::options_description& options,
                     po::variables_map& values, const char* positional_key) {
  po::options_description all;
  all.add(options);
  const char* key = positional_key ? positional_key : kStrayKey;
  if (!positional_key) {
    all.add_options()(kStrayKey, po::value<std::vector<std::string>>(), "");
  }
  po::positional_options_description positional;
  positional.add(key, -1);
  const int style = po::command_line_style::unix_style ^ po::command_line_style::allow_guessing;
  po::store(po::command_line_parser(args).options(all).positional(positional).style(style).run(),
            values);
  if (!positional_key && values.count(kStrayKey)) {
    usage_fail("unexpected argument '", values[kStrayKey].as<std::vector<std::string>>().front(),
               "'");
  }
}

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& arg : args) {
    if (arg == "--help" || arg == "-h") return true;
    if (arg == "--") break;
  }
  return false;
}

void print_help(const std::string& synopsis, const std::string& description,
                const po::options_description& options) {
  std::cout << "Usage: " << synopsis << "\n\n" << description << "\n" << options;
}

void check_fraction_flag(const char* flag, double value) {
  if (!(value >= 0.0 && value < 1.0 && static_cast<float>(value) < 1.0f)) {
    usage_fail(flag, " must be in [0, 1) as a 32-bit float, got ", value);
  }
}

}  // namespace alloy::app
