// A network of its own, trained with Alloy as a library: a small CNN with a residual block that
// is not in Alloy's zoo, at O2 (half model, fp32 master weights, dynamic loss scaling) on
// synthetic data. It trains epoch 1, saves a checkpoint, builds a fresh trainer from the file
// alone and trains epoch 2 (with --straight: both epochs in one go), then prints the memory
// figures and the params_digest of the weights.
//
//   custom_model [--straight] [--checkpoint-dir DIR] [--device D] [--threads N]
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "amp/opt_level.h"
#include "apps/train/checkpointer.h"
#include "apps/train/device_choice.h"
#include "apps/train/memory_report.h"
#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/data/synthetic.h"
#include "core/error.h"
#include "core/models/init.h"
#include "core/models/models.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/input_dtype.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/nn/sequential.h"
#include "core/ops/elementwise.h"
#include "core/thread_pool.h"

namespace {

using alloy::Tensor;
namespace app = alloy::app;
namespace nn = alloy::nn;

// This example's own residual block: x + conv2(relu(bn(conv1(x)))), 3x3 convolutions that keep
// the shape. Unlike ResNet's block it has one batch norm and no relu after the sum. A module's
// backward runs its children's backwards in reverse order and returns the input's gradient.
class SkipBlock : public nn::Module {
 public:
  explicit SkipBlock(int channels)
      : conv1_(register_module("conv1",
                               std::make_unique<nn::Conv2d>(channels, channels, 3, 1, 1, false))),
        bn_(register_module("bn", std::make_unique<nn::BatchNorm2d>(channels))),
        relu_(register_module("relu", std::make_unique<nn::ReLU>())),
        conv2_(
            register_module("conv2", std::make_unique<nn::Conv2d>(channels, channels, 3, 1, 1))) {}

  Tensor forward(const Tensor& x) override {
    const Tensor branch = conv2_.forward(relu_.forward(bn_.forward(conv1_.forward(x))));
    input_dtype_ = x.dtype();
    return alloy::add(branch, nn::in_dtype(x, branch.dtype()));
  }

  Tensor backward(const Tensor& dy) override {
    conv1_.set_needs_input_grad(needs_input_grad());
    const Tensor d_branch = conv1_.backward(bn_.backward(relu_.backward(conv2_.backward(dy))));
    if (!needs_input_grad()) return Tensor();
    return alloy::add(d_branch, nn::in_dtype(dy, input_dtype_));
  }

  std::string type_name() const override { return "SkipBlock"; }
  // A unit of activation recomputation: `--recompute blocks` keeps only its input.
  bool is_block() const override { return true; }

 private:
  nn::Conv2d& conv1_;
  nn::BatchNorm2d& bn_;
  nn::ReLU& relu_;
  nn::Conv2d& conv2_;
  alloy::DType input_dtype_ = alloy::DType::f32;
};

// 28x28x1 -> conv 12 -> bn -> relu -> maxpool (14x14) -> SkipBlock -> avgpool (7x7) -> linear.
// The weights come from `generator` alone, so the seed fixes them.
std::unique_ptr<nn::Module> make_tiny_resnet(alloy::Generator& generator, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  net->add("stem", std::make_unique<nn::Conv2d>(1, 12, 3, 1, 1, false));
  net->add("stem_bn", std::make_unique<nn::BatchNorm2d>(12));
  net->add("stem_relu", std::make_unique<nn::ReLU>());
  net->add("pool1", std::make_unique<nn::MaxPool2d>(2));
  net->add("block", std::make_unique<SkipBlock>(12));
  net->add("pool2", std::make_unique<nn::AvgPool2d>(2));
  net->add("flatten", std::make_unique<nn::Flatten>());
  auto& fc =
      static_cast<nn::Linear&>(net->add("fc", std::make_unique<nn::Linear>(12 * 7 * 7, classes)));
  for (nn::Parameter* parameter : net->parameters()) {
    Tensor& value = parameter->value;
    if (value.ndim() != 4) continue;  // convolutions: Kaiming normal (fan_in, relu)
    const double fan_in = static_cast<double>(value.dim(1) * value.dim(2) * value.dim(3));
    alloy::models::init_normal(value, std::sqrt(2.0 / fan_in), generator);
  }
  alloy::models::init_linear_default(fc, generator);
  return net;
}

// One line per epoch, from the figures the trainer hands its observer.
class EpochPrinter : public app::TrainObserver {
 public:
  void on_epoch_end(const app::EpochStats& s) override {
    std::cout << "epoch " << s.epoch << "  step " << s.step << "  loss " << s.train_loss
              << "  test_acc " << s.test_acc << "  loss_scale " << s.loss_scale << "  skipped "
              << s.skipped_steps << std::endl;
  }
};

void warn(const std::string& message) {
  std::cerr << "custom_model: warning: " << message << std::endl;
}

struct Args {
  bool straight = false;
  std::string checkpoint_dir = "custom_model_checkpoints";
  std::string device = "auto";
  int threads = 0;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--straight") {
      args.straight = true;
    } else if (flag == "--checkpoint-dir" && has_value) {
      args.checkpoint_dir = argv[++i];
    } else if (flag == "--device" && has_value) {
      args.device = argv[++i];
    } else if (flag == "--threads" && has_value) {
      args.threads = std::stoi(argv[++i]);
    } else {
      alloy::usage_fail("unknown or incomplete flag '", flag, "'");
    }
  }
  return args;
}

int train(const Args& args) {
  alloy::set_cpu_threads(args.threads);  // 0: every core this process may use
  const app::DeviceChoice device = app::choose_device(args.device);
  app::make_current(device.device);
  std::cerr << "custom_model: " << device.explanation << std::endl;

  // The run: the model by its registered name, O2 with one override (the loss scale grows after
  // 10 finite steps instead of 2000), the optimizer.
  app::TrainConfig options;
  options.model = "tiny_resnet";
  options.dataset = "synthetic";
  alloy::amp::AmpOverrides overrides;
  overrides.window = 10;
  options.precision = alloy::amp::resolve_properties(alloy::amp::OptLevel::O2, overrides);
  options.optimizer = "sgd";
  options.lr = 0.05;
  options.momentum = 0.9;
  options.batch_size = 128;
  options.seed = 7;

  // The data: any u8 [N, 1, 28, 28] images with i32 [N] labels will do; here a synthetic
  // set, smaller than `--dataset synthetic`'s (app::load_training_data reads the IDX files).
  const alloy::data::DatasetPair data{
      alloy::data::make_synthetic_dataset(2560, options.seed, "synthetic/train"),
      alloy::data::make_synthetic_dataset(512, options.seed, "synthetic/test")};

  EpochPrinter printer;
  std::string digest;
  if (args.straight) {
    options.epochs = 2;
    app::Trainer trainer(options, device.device, data);
    trainer.run(printer);
    digest = trainer.params_digest();
  } else {
    // Epoch 1, saved at its end into the checkpoint directory (the newest 2 files are kept).
    options.epochs = 1;
    app::Trainer first(options, device.device, data);
    app::Checkpointer checkpointer(
        args.checkpoint_dir, 2,
        [](const std::string& path, std::int64_t step, const app::Checkpointer::Timing&) {
          std::cout << "saved " << path << " at step " << step << std::endl;
        });
    first.set_epoch_hook([&] {
      checkpointer.save(first);
      return false;  // do not stop
    });
    first.run(printer);

    // Epoch 2 from the file alone: the newest readable checkpoint of the directory restores
    // the weights, optimizer and loss-scaler state, the RNG and the data position.
    const alloy::checkpoint::LoadedCheckpoint loaded =
        app::load_resume_checkpoint(args.checkpoint_dir, warn);
    if (app::stored_params_digest(loaded.state) != loaded.state.params_digest) {
      alloy::fail("checkpoint ", loaded.path, ": its weights do not match its params_digest");
    }
    options.epochs = 2;
    app::Trainer second(options, device.device, data);
    app::restore_training_state(second, loaded.state, loaded.path, warn);
    std::cout << "resumed from " << loaded.path << " at step " << second.steps() << std::endl;
    second.run(printer);
    digest = second.params_digest();

    // The memory figures `alloy mem` reports, for this model at O0 and O2 (2 steps of batch
    // 128), and at O2 keeping only each SkipBlock's input for the backward pass.
    app::MeasureConfig measure;
    measure.model = options.model;
    measure.batch_size = options.batch_size;
    measure.steps = 2;
    measure.device = device.device;
    for (const std::string recompute : {"none", "blocks"}) {
      measure.recompute = recompute;
      for (const auto level : {alloy::amp::OptLevel::O0, alloy::amp::OptLevel::O2}) {
        if (recompute == "blocks" && level == alloy::amp::OptLevel::O0) continue;
        const app::LevelReport report =
            app::measure_level(measure, app::level_properties(level, std::nullopt));
        std::cout << "memory " << alloy::amp::opt_level_name(level) << " recompute " << recompute
                  << "  peak_bytes " << report.peak_bytes << "  master_parameters_bytes "
                  << report.bytes(alloy::MemoryCategory::master_parameters)
                  << "  activations_bytes " << report.bytes(alloy::MemoryCategory::activations)
                  << std::endl;
      }
    }
  }
  std::cout << "params_digest " << digest << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // From here on, make_model (and so the Trainer, checkpoints and memory measurement) knows
  // "tiny_resnet" as it knows the zoo's models.
  alloy::models::register_model("tiny_resnet", make_tiny_resnet);
  try {
    return train(parse_args(argc, argv));
  } catch (const alloy::UsageError& e) {
    std::cerr << "custom_model: error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "custom_model: error: " << e.what() << std::endl;
    return 1;
  }
}
