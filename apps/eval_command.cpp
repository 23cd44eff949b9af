// alloy eval: the flags of the contract are parsed and checked; evaluation itself waits for
// checkpoints.
#include "apps/availability.h"
#include "apps/cli.h"
#include "apps/commands.h"
#include "apps/exit_codes.h"

namespace alloy::app {

namespace {
po::options_description eval_options() {
  auto group = make_group("Options");
  group.add_options()
    ("checkpoint", po::value<std::string>()->required()->value_name("FILE"),
     "checkpoint to evaluate")
    ("data-dir", po::value<std::string>()->value_name("DIR"),
     "dataset directory (default: the one the checkpoint was trained on)")
    ("device", po::value<std::string>()->default_value("auto")->value_name("D"),
     "auto, cpu, cuda or cuda:N")
    ("log-json", po::value<std::string>()->value_name("FILE|-"), "write the result as JSON")
    ("help,h", "print this help and exit");
  po::options_description options;
  options.add(group);
  return options;
}
}  // namespace

int run_eval(const std::vector<std::string>& args) {
  const auto options = eval_options();
  if (wants_help(args)) {
    print_help("alloy eval --checkpoint FILE [options]",
               "Evaluates a checkpoint on its dataset's test set. Not available yet.", options);
    return kExitSuccess;
  }
  po::variables_map values;
  parse_arguments(args, options, values);
  po::notify(values);
  command_not_available("eval", "checkpoint loading");
}

}  // namespace alloy::app
