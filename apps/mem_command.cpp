// alloy mem: the flags of the contract are parsed and checked; the per-opt-level memory
// report waits for the amp training path.
#include "apps/availability.h"
#include "apps/cli.h"
#include "apps/commands.h"
#include "apps/exit_codes.h"

namespace alloy::app {

namespace {
po::options_description mem_options() {
  auto group = make_group("Options");
  group.add_options()
    ("model", po::value<std::string>()->required()->value_name("M"), "lenet, mlp or resnet18")
    ("batch-size", po::value<std::int64_t>()->required()->value_name("B"), "batch size")
    ("device", po::value<std::string>()->default_value("auto")->value_name("D"),
     "auto, cpu, cuda or cuda:N")
    ("opt-levels", po::value<std::string>()->default_value("O0,O1,O2,O3")->value_name("LIST"),
     "opt levels to compare, comma-separated")
    ("steps", po::value<std::int64_t>()->default_value(3)->value_name("N"),
     "training steps measured per level")
    ("json", po::value<std::string>()->value_name("FILE|-"), "one JSON object per opt level")
    ("plot", po::value<std::string>()->value_name("FILE.svg"), "bar chart of the categories")
    ("help,h", "print this help and exit");
  po::options_description options;
  options.add(group);
  return options;
}
}  // namespace

int run_mem(const std::vector<std::string>& args) {
  const auto options = mem_options();
  if (wants_help(args)) {
    print_help("alloy mem --model M --batch-size B [options]",
               "Trains a few steps at each opt level and reports memory per category side by "
               "side. Not available yet.",
               options);
    return kExitSuccess;
  }
  po::variables_map values;
  parse_arguments(args, options, values);
  po::notify(values);
  command_not_available("mem", "mixed-precision training");
}

}  // namespace alloy::app
