// alloy eval --checkpoint FILE: rebuilds the checkpoint's model at its opt level, loads the
// weights and reports the test accuracy on the dataset it was trained on (a sequence model: the
// validation loss, apps/cli/lm_eval_command.h).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "apps/cli/cli.h"
#include "apps/cli/commands.h"
#include "apps/cli/exit_codes.h"
#include "apps/cli/json_log.h"
#include "apps/cli/lm_eval_command.h"
#include "apps/cli/train_options.h"
#include "apps/train/device_choice.h"
#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "core/ops/attention_kernel.h"
#include "core/thread_pool.h"

namespace alloy::app {

namespace {
po::options_description eval_options() {
  auto group = make_group("Options");
  // clang-format off
  group.add_options()
    ("checkpoint", po::value<std::string>()->required()->value_name("FILE"),
     "checkpoint to evaluate")
    ("data-dir", po::value<std::string>()->value_name("DIR"),
     "dataset directory (default: the one the checkpoint was trained on)")
    ("device", po::value<std::string>()->default_value("auto")->value_name("D"),
     "auto, cpu, cuda or cuda:N")
    ("image-size", po::value<int>()->value_name("S"),
     "as alloy train --image-size (default: the checkpoint's)")
    ("channels", po::value<int>()->value_name("1|3"),
     "as alloy train --channels (default: the checkpoint's)")
    ("num-classes", po::value<int>()->value_name("K"),
     "as alloy train --num-classes (default: the checkpoint's)")
    ("data-file", po::value<std::string>()->value_name("FILE"),
     "a sequence model's data, as alloy train --data-file (default: the checkpoint's): a text "
     "file, split as in training, or a token file")
    ("val-file", po::value<std::string>()->value_name("FILE"),
     "a sequence model's validation token file, as alloy train --val-file (default: the "
     "checkpoint's)")
    ("allow-tf32", po::value<bool>()->implicit_value(true, "true")->value_name("BOOL"),
     "let fp32 matrix products and convolutions on CUDA use TF32 tensor cores (default: as the "
     "checkpoint was trained); a no-op on the CPU")
    ("attention-kernel", po::value<std::string>()->value_name("auto|alloy|cudnn"),
     "the kernel of causal attention on CUDA, as alloy train --attention-kernel (default: "
     "auto); a no-op on the CPU")
    ("log-json", po::value<std::string>()->value_name("FILE|-"), "write the result as JSON")
    ("help,h", "print this help and exit");
  // clang-format on
  po::options_description options;
  options.add(group);
  return options;
}

void warn(const std::string& message) {
  std::cerr << "alloy: warning: " << message << std::endl;
}
}  // namespace

int run_eval(const std::vector<std::string>& args) {
  const auto options = eval_options();
  if (wants_help(args)) {
    print_help("alloy eval --checkpoint FILE [options]",
               "Evaluates a checkpoint on its dataset's test set, at the opt level it was saved "
               "at, and prints the test accuracy; a sequence model's on its validation split, "
               "and prints the loss per token.",
               options);
    return kExitSuccess;
  }
  po::variables_map values;
  parse_arguments(args, options, values);
  po::notify(values);
  const std::string device_flag = values["device"].as<std::string>();
  if (!(device_flag == "auto" || device_flag == "cpu" || device_flag == "cuda" ||
        device_flag.rfind("cuda:", 0) == 0)) {
    usage_fail("--device '", device_flag, "' is not one of auto, cpu, cuda or cuda:N");
  }
  if (values.count("attention-kernel")) {  // a bad name fails before the checkpoint is read
    static_cast<void>(parse_attention_kernel(values["attention-kernel"].as<std::string>()));
  }
  std::unique_ptr<JsonLog> log;
  if (values.count("log-json")) {
    const std::string path = values["log-json"].as<std::string>();
    if (path.empty()) usage_fail("--log-json needs a file name or '-' for standard output");
    log = std::make_unique<JsonLog>(path);
  }
  std::ostream& human = log && log->to_stdout() ? std::cerr : std::cout;

  const std::string path = values["checkpoint"].as<std::string>();
  checkpoint::CheckpointState state = checkpoint::read_any_checkpoint(path);
  // The training run's thread count, so the figure is the one its run reported.
  const unsigned cores = std::thread::hardware_concurrency();
  int threads = cores == 0 ? 1 : static_cast<int>(cores);
  if (const std::optional<std::int64_t> saved = state.run.threads;
      saved && *saved >= 1 && *saved <= 1024) {
    threads = static_cast<int>(*saved);
  }
  set_cpu_threads(threads);
  const DeviceChoice device = choose_device(device_flag);
  std::cerr << "alloy: " << device.explanation << std::endl;
  if (models::is_gpt_model(state.model)) {
    return run_lm_eval({path, std::move(state), std::nullopt}, values, device.device, threads,
                       log.get(), human);
  }
  for (const char* flag : {"data-file", "val-file"}) {
    if (values.count(flag)) {
      usage_fail("--", flag, " applies to sequence models; checkpoint ", path, " holds ",
                 state.model);
    }
  }
  TrainConfig train = options_from_checkpoint(state);
  train.resume = path;
  if (values.count("data-dir")) train.data_dir = values["data-dir"].as<std::string>();
  if (values.count("image-size")) {
    train.image_size = values["image-size"].as<int>();
    if (train.image_size < 1) usage_fail("--image-size must be at least 1, got ", train.image_size);
  }
  if (values.count("channels")) {
    train.channels = values["channels"].as<int>();
    if (train.channels != 1 && train.channels != 3) {
      usage_fail("--channels must be 1 or 3, got ", train.channels);
    }
  }
  if (values.count("num-classes")) {
    train.num_classes = values["num-classes"].as<int>();
    if (train.num_classes < 1) {
      usage_fail("--num-classes must be at least 1, got ", train.num_classes);
    }
  }
  train.device = device_flag;
  train.threads = threads;
  if (values.count("allow-tf32")) train.allow_tf32 = values["allow-tf32"].as<bool>();
  if (values.count("attention-kernel")) {
    train.attention_kernel = values["attention-kernel"].as<std::string>();
  }
  Trainer trainer(train, device.device, load_training_data(train));
  restore_training_state(trainer, state, path, warn);
  // The weights are in the model now: the checkpoint's copies go.
  for (auto* tensors : {&state.parameters, &state.buffers, &state.optimizer_state}) {
    std::vector<checkpoint::NamedTensor>().swap(*tensors);
  }
  const data::Dataset& test = trainer.data().test;
  const double accuracy = trainer.evaluate(test);
  // A checkpoint of a run with --ema-decay holds weight averages: their accuracy too.
  const bool ema = trainer.precision().ema_decay() > 0.0f;
  const double ema_accuracy = ema ? trainer.evaluate_ema(test) : 0.0;
  const std::string digest = trainer.params_digest();
  const char* level = amp::opt_level_name(trainer.precision().properties().level);

  char figure[32];
  std::snprintf(figure, sizeof figure, "%.4f", accuracy);
  human << path << ": " << train.model << " " << level << ", epoch " << trainer.epochs_done()
        << ", step " << trainer.steps() << ": test_acc " << figure;
  if (ema) {
    std::snprintf(figure, sizeof figure, "%.4f", ema_accuracy);
    human << ", test_acc_ema " << figure;
  }
  human << " on " << test.size() << " " << test.name << " examples, params_digest " << digest
        << std::endl;
  if (log) {
    JsonObject event;
    event.add("event", "eval")
        .add("checkpoint", path)
        .add("model", train.model)
        .add("opt_level", level)
        .add("device", trainer.device().str())
        .add("dataset", train.dataset)
        .add("epoch", trainer.epochs_done())
        .add("step", trainer.steps())
        .add("test_examples", test.size())
        .add("test_acc", accuracy)
        .add("params_digest", digest);
    if (ema) event.add("test_acc_ema", ema_accuracy);
    log->write(event);
  }
  return kExitSuccess;
}

}  // namespace alloy::app
