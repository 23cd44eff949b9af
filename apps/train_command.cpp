// alloy train: parse, check what is available, pick the device, load the data, train, report.
#include <iostream>

#include "apps/availability.h"
#include "apps/commands.h"
#include "apps/device_choice.h"
#include "apps/exit_codes.h"
#include "apps/train_options.h"
#include "apps/train_report.h"
#include "apps/trainer.h"
#include "core/thread_pool.h"

namespace alloy::app {

int run_train(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    print_train_help();
    return kExitSuccess;
  }
  const TrainOptions options = parse_train_options(args);
  check_train_features_available(options);
  set_cpu_threads(options.threads);
  const DeviceChoice device = choose_device(options.device);
  std::cerr << "alloy: " << device.explanation << std::endl;

  TrainReport report(options);
  Trainer trainer(options, device.device,
                  data::load_datasets(options.dataset, options.data_dir,
                                      static_cast<std::uint64_t>(options.seed)));
  report.start(trainer);
  trainer.run(report);
  report.end(trainer);
  return kExitSuccess;
}

}  // namespace alloy::app
