// alloy ckpt info FILE [--json] | verify FILE: the words are parsed and checked; reading
// checkpoints waits for the checkpoint format.
#include "apps/availability.h"
#include "apps/cli.h"
#include "apps/commands.h"
#include "apps/exit_codes.h"
#include "core/error.h"

namespace alloy::app {

namespace {
po::options_description ckpt_options() {
  auto group = make_group("Options");
  group.add_options()
    ("json", po::bool_switch(), "info: print one JSON object (with params_digest)")
    ("help,h", "print this help and exit");
  po::options_description options;
  options.add(group);
  return options;
}
}  // namespace

int run_ckpt(const std::vector<std::string>& args) {
  const auto options = ckpt_options();
  if (wants_help(args)) {
    print_help("alloy ckpt info FILE [--json] | alloy ckpt verify FILE",
               "info describes a checkpoint; verify checks its header and CRC. Not available "
               "yet.",
               options);
    return kExitSuccess;
  }
  po::options_description all = options;
  all.add_options()("words", po::value<std::vector<std::string>>(), "");
  po::variables_map values;
  parse_arguments(args, all, values, "words");
  po::notify(values);
  const auto words =
      values.count("words") ? values["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (words.empty() || (words[0] != "info" && words[0] != "verify")) {
    usage_fail("alloy ckpt needs an action: info FILE or verify FILE");
  }
  if (words.size() != 2) usage_fail("alloy ckpt ", words[0], " takes exactly one FILE");
  if (words[0] == "verify" && values["json"].as<bool>()) usage_fail("--json applies to info only");
  command_not_available("ckpt", "the checkpoint format");
}

}  // namespace alloy::app
