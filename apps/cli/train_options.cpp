#include "apps/cli/train_options.h"

#include <cmath>
#include <iostream>

#include "apps/cli/cli.h"
#include "apps/cli/config_file.h"
#include "apps/cli/sequence_flags.h"
#include "apps/train/layout_choice.h"
#include "apps/train/normalization.h"
#include "apps/train/recompute.h"
#include "apps/train/step_graph.h"
#include "apps/train/zero.h"
#include "core/data/channels.h"
#include "core/data/image_folder.h"
#include "core/error.h"
#include "core/models/models.h"

namespace alloy::app {

namespace {

const std::vector<std::string> kDatasets = {"fashion-mnist", "mnist", "cifar10", "folder",
                                            "synthetic",     "text",  "tokens"};
const std::vector<std::string> kAugments = {"default", "none"};
constexpr int kMaxLoaderThreads = 256;
const std::vector<std::string> kOptimizers = {"sgd", "adamw"};
const std::vector<std::string> kLrSchedules = {"constant", "linear", "cosine"};
const std::vector<std::string> kDistBackends = {"nccl", "gloo"};
const std::vector<std::string> kConvAlgorithms = {"heuristic", "measured"};
const std::vector<std::string> kAttentionKernels = {"auto", "alloy", "cudnn"};
constexpr int kMaxThreads = 1024;

void check_choice(const char* flag, const std::string& value,
                  const std::vector<std::string>& choices) {
  for (const auto& choice : choices) {
    if (value == choice) return;
  }
  usage_fail(flag, " '", value, "' is not one of ", join(choices));
}

bool parse_bool(const char* flag, const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  usage_fail(flag, " must be true or false, got '", text, "'");
}

DType parse_half_dtype(const std::string& text) {
  if (text == "fp16") return DType::f16;
  if (text == "bf16") return DType::bf16;
  usage_fail("--half-dtype '", text, "' is not one of fp16 or bf16");
}

template <class T>
std::optional<T> optional_value(const po::variables_map& values, const char* key) {
  if (!values.count(key)) return std::nullopt;
  return values[key].as<T>();
}

amp::AmpOverrides precision_overrides(const po::variables_map& values) {
  amp::AmpOverrides overrides;
  if (const auto text = optional_value<std::string>(values, "half-dtype")) {
    overrides.half_dtype = parse_half_dtype(*text);
  }
  if (const auto text = optional_value<std::string>(values, "keep-batchnorm-fp32")) {
    overrides.keep_batchnorm_fp32 = parse_bool("--keep-batchnorm-fp32", *text);
  }
  if (const auto text = optional_value<std::string>(values, "master-weights")) {
    overrides.master_weights = parse_bool("--master-weights", *text);
  }
  overrides.loss_scale = optional_value<std::string>(values, "loss-scale");
  overrides.init_scale = optional_value<float>(values, "init-loss-scale");
  overrides.window = optional_value<std::int64_t>(values, "scale-window");
  overrides.min_scale = optional_value<float>(values, "min-loss-scale");
  overrides.max_scale = optional_value<float>(values, "max-loss-scale");
  return overrides;
}

template <class T>
void check_at_least(const char* flag, T value, T minimum) {
  if (value < minimum) usage_fail(flag, " must be at least ", minimum, ", got ", value);
}

void check_finite(const char* flag, double value) {
  if (!std::isfinite(value)) usage_fail(flag, " must be a finite number, got ", value);
}

void validate(TrainOptions& o, const po::variables_map& values) {
  std::vector<std::string> model_choices = models::model_names();
  model_choices.insert(model_choices.end(), {"gpt", "gpt2", "gpt-shakespeare"});
  check_choice("--model", o.model, model_choices);
  check_choice("--dataset", o.dataset, kDatasets);
  if (o.was_given("image-size")) check_at_least("--image-size", o.image_size, 1);
  if (o.was_given("channels") && o.channels != 1 && o.channels != 3) {
    usage_fail("--channels must be 1 or 3, got ", o.channels);
  }
  if (o.was_given("num-classes")) check_at_least("--num-classes", o.num_classes, 1);
  if (o.was_given("synthetic-size")) {
    if (o.dataset != "synthetic") {
      usage_fail("--synthetic-size sets the size of --dataset synthetic, not ", o.dataset);
    }
    check_at_least<std::int64_t>("--synthetic-size", o.synthetic_size, 1);
  }
  check_normalize_flag(o.normalize);
  check_choice("--augment", o.augment, kAugments);
  if (o.loader_threads < 1 || o.loader_threads > kMaxLoaderThreads) {
    usage_fail("--loader-threads must be between 1 and ", kMaxLoaderThreads, ", got ",
               o.loader_threads);
  }
  if (!(o.device == "auto" || o.device == "cpu" || o.device == "cuda" ||
        o.device.rfind("cuda:", 0) == 0)) {
    usage_fail("--device '", o.device, "' is not one of auto, cpu, cuda or cuda:N");
  }
  if (values.count("threads")) {
    if (o.threads < 1 || o.threads > kMaxThreads) {
      usage_fail("--threads must be between 1 and ", kMaxThreads, ", got ", o.threads);
    }
  } else {
    o.threads = available_cores();
  }
  check_at_least<std::int64_t>("--seed", o.seed, 0);

  check_choice("--optimizer", o.optimizer, kOptimizers);
  check_finite("--lr", o.lr);
  if (!(o.lr > 0)) usage_fail("--lr must be positive, got ", o.lr);
  check_finite("--momentum", o.momentum);
  if (o.momentum < 0 || o.momentum >= 1)
    usage_fail("--momentum must be in [0, 1), got ", o.momentum);
  if (o.optimizer != "sgd" && o.was_given("momentum")) {
    usage_fail("--momentum applies to --optimizer sgd only, not ", o.optimizer);
  }
  check_finite("--weight-decay", o.weight_decay);
  check_at_least("--weight-decay", o.weight_decay, 0.0);
  check_choice("--lr-schedule", o.lr_schedule, kLrSchedules);
  check_recompute_choice(o.recompute);
  check_layout_choice(o.layout);
  check_choice("--conv-algorithms", o.conv_algorithms, kConvAlgorithms);
  check_choice("--attention-kernel", o.attention_kernel, kAttentionKernels);
  check_at_least<std::int64_t>("--warmup-steps", o.warmup_steps, 0);
  check_finite("--min-lr", o.min_lr);
  check_at_least("--min-lr", o.min_lr, 0.0);
  // A resumed run may take --lr and --lr-schedule from its checkpoint: checked once they are
  // known (Optimizer::set_schedule).
  if (o.resume.empty()) {
    if (o.min_lr > o.lr) usage_fail("--min-lr ", o.min_lr, " is above --lr ", o.lr);
    if (o.was_given("min-lr") && o.lr_schedule == "constant") {
      usage_fail("--min-lr needs a decaying --lr-schedule (linear or cosine), not constant");
    }
  }
  check_fraction_flag("--ema-decay", o.ema_decay);
  check_fraction_flag("--label-smoothing", o.label_smoothing);
  if (o.ema_warmup && o.ema_decay == 0.0) {
    usage_fail("--ema-warmup warms up the weight averages of --ema-decay, which is off");
  }
  check_finite("--clip-grad-norm", o.clip_grad_norm);
  check_at_least("--clip-grad-norm", o.clip_grad_norm, 0.0);
  // The limit is applied in f32: one so large it rounds to inf would not clip, but no longer be
  // the finite number it claims to be.
  if (!std::isfinite(static_cast<float>(o.clip_grad_norm))) {
    usage_fail("--clip-grad-norm must fit a 32-bit float, got ", o.clip_grad_norm);
  }
  check_at_least<std::int64_t>("--epochs", o.epochs, 1);
  check_at_least<std::int64_t>("--steps", o.steps, 0);
  check_at_least<std::int64_t>("--batch-size", o.batch_size, 1);
  // Whether the batch splits evenly depends on the world size, known later
  // (apps/train/micro_batches.h, checked before any work).
  check_at_least<std::int64_t>("--accumulation-steps", o.accumulation_steps, 1);

  check_at_least<std::int64_t>("--checkpoint-every", o.checkpoint_every, 0);
  check_at_least("--keep-checkpoints", o.keep_checkpoints, 1);
  check_at_least("--max-restarts", o.max_restarts, 0);
  if (o.was_given("max-consecutive-skips")) {
    check_at_least<std::int64_t>("--max-consecutive-skips", o.max_consecutive_skips, 0);
  }

  if (values.count("nproc-per-node")) {
    const int alias = values["nproc-per-node"].as<int>();
    if (!values["gpus"].defaulted() && alias != o.gpus) {
      usage_fail("--gpus ", o.gpus, " and --nproc-per-node ", alias,
                 " disagree (they are the same flag)");
    }
    o.gpus = alias;
  }
  check_at_least("--nodes", o.nodes, 1);
  check_at_least("--gpus", o.gpus, 1);
  if (o.nr < 0 || o.nr >= o.nodes) {
    usage_fail("--nr must be in [0, --nodes) = [0, ", o.nodes, "), got ", o.nr);
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    usage_fail("--master-port must be in [1, 65535], got ", o.master_port);
  }
  check_finite("--bucket-cap-mb", o.bucket_cap_mb);
  if (o.bucket_cap_mb <= 0 || o.bucket_cap_mb > 1024 * 1024) {
    usage_fail("--bucket-cap-mb must be in (0, 1048576] MiB, got ", o.bucket_cap_mb);
  }
  if (o.was_given("dist-backend")) {
    check_choice("--dist-backend", o.dist_backend, kDistBackends);
    if (o.dist_backend == "nccl" && o.device == "cpu") {
      usage_fail("--dist-backend nccl reduces GPU tensors and cannot run with --device cpu; use ",
                 "--dist-backend gloo on the CPU");
    }
  }
  check_zero_options(o);
  if (o.was_given("log-json") && o.log_json.empty()) {
    usage_fail("--log-json needs a file name or '-' for standard output");
  }

  // A resumed run's model and sequence settings are settled once its checkpoint is read.
  if (o.resume.empty()) resolve_sequence_options(o);
  o.precision = amp::resolve_properties(amp::parse_opt_level(values["opt-level"].as<std::string>()),
                                        precision_overrides(values));

  // What the flags tell already (--device auto and the launcher's environment are settled
  // later, by the trainer): --cuda-graph on that cannot capture fails before any data loads.
  // --dist-backend joins a process group even at world size 1.
  plan_cuda_graph(parse_cuda_graph_mode(o.cuda_graph),
                  {o.device != "cpu", o.nodes * o.gpus, o.was_given("dist-backend"),
                   o.was_given("dist-backend") && o.dist_backend == "gloo"});
}

}  // namespace

po::options_description train_options_description(TrainOptions& o) {
  using po::value;
  auto model = make_group("Model and data");
  model.add_options()(
      "model", value(&o.model)->default_value(o.model)->value_name("NAME"),
      "lenet, mlp, ffn, resnet18, resnet34 or resnet50. The resnets take images of any size: "
      "from --image-size 64 up, torchvision's ImageNet stem (7x7/2 convolution, "
      "3x3/2 max pool); below it a 3x3 stride-1 stem without max pool. "
      "gpt, gpt2, gpt-shakespeare: language models")(
      "dataset", value(&o.dataset)->default_value(o.dataset)->value_name("NAME"),
      "fashion-mnist, mnist (IDX files in --data-dir), cifar10 (CIFAR-10's binary batches in "
      "--data-dir: 32x32 RGB), folder (--data-dir/train/CLASS/* and --data-dir/val/CLASS/*, JPEG "
      "or PNG, resized to --image-size, default 224) or synthetic (generated, no files)")(
      "data-dir", value(&o.data_dir)->default_value(o.data_dir)->value_name("DIR"),
      "directory holding train-images-idx3-ubyte[.gz] and the other three IDX files, or "
      "CIFAR-10's data_batch_1.bin .. data_batch_5.bin and test_batch.bin")(
      "image-size", value(&o.image_size)->value_name("S"),
      "images are S x S pixels (synthetic: generated so, default 28; other data: must be so)")(
      "channels", value(&o.channels)->value_name("1|3"),
      "convert the images to 1 (luma, as PIL's convert(\"L\")) or 3 channels (gray "
      "replicated); default: the data's own (synthetic: 3 from --image-size 64 up, else 1)")(
      "num-classes", value(&o.num_classes)->value_name("K"),
      "classes of the synthetic data (default 10); other data: its own, which K must match")(
      "synthetic-size", value(&o.synthetic_size)->value_name("N"),
      "training examples of --dataset synthetic (default 12800; the test set is a fifth of it)")(
      "normalize", value(&o.normalize)->default_value(o.normalize)->value_name("MODE"),
      "input normalisation on the device: none (pixels / 255), imagenet ((pixels / 255 - "
      "mean) / std, torchvision's ImageNet statistics), M1,M2,M3/S1,S2,S3 (per channel), or "
      "auto: imagenet for 3 channels, none for 1")(
      "augment", value(&o.augment)->default_value(o.augment)->value_name("default|none"),
      "--dataset folder's training images: default: RandomResizedCrop (scale 0.08-1, ratio "
      "3/4-4/3) and a random horizontal flip, drawn from (--seed, epoch, example); none: the "
      "validation images' resize to size/0.875 and centre crop")(
      "loader-threads", value(&o.loader_threads)->default_value(o.loader_threads)->value_name("N"),
      "threads that decode and augment --dataset folder's images, two batches ahead of the step")(
      "device", value(&o.device)->default_value(o.device)->value_name("D"),
      "auto (a CUDA device when usable, else the CPU), cpu, cuda or cuda:N")(
      "threads", value(&o.threads)->value_name("N"),
      "CPU threads for the kernels (default: every core this process may use)")(
      "cuda-graph", value(&o.cuda_graph)->default_value(o.cuda_graph)->value_name("auto|on|off"),
      "replay the training step as a CUDA graph after warm-up (auto: where it can be captured). "
      "Data parallelism over NCCL captures its gradient and buffer collectives in the graph; "
      "over Gloo the step stays eager (auto) or --cuda-graph on is a usage error")(
      "recompute", value(&o.recompute)->default_value(o.recompute)->value_name("none|blocks"),
      "blocks: keep only each block's input (the resnets' residual blocks, a GPT's transformer "
      "blocks) and run its forward again in backward: less activation memory, the same bits, "
      "one more forward")(
      "layout", value(&o.layout)->default_value(o.layout)->value_name("auto|nchw|nhwc"),
      "memory order of the activations in the model's layout region (resnet18); auto: nhwc "
      "(channels last) on CUDA when convolutions compute in half precision (O1-O3)")(
      "conv-algorithms",
      value(&o.conv_algorithms)->default_value(o.conv_algorithms)->value_name("heuristic|measured"),
      "cuDNN convolution algorithms: measured (time them once, keep the fastest deterministic "
      "ones in $ALLOY_CACHE_DIR/conv_algorithms.txt and the checkpoints) or cuDNN's heuristic "
      "pick; ignored on the CPU")(
      "allow-tf32",
      value(&o.allow_tf32)
          ->default_value(false, "false")
          ->implicit_value(true, "true")
          ->value_name("BOOL"),
      "let fp32 matrix products and convolutions on CUDA run on TF32 tensor cores (10-bit "
      "mantissa inputs, fp32 accumulation), as PyTorch's allow_tf32; off keeps fp32 IEEE fp32. "
      "Half-precision ops use tensor cores either way; a no-op on the CPU")(
      "attention-kernel",
      value(&o.attention_kernel)->default_value(o.attention_kernel)->value_name("auto|alloy|cudnn"),
      "causal attention on CUDA: cudnn (cuDNN's fused flash attention, deterministic backward), "
      "alloy (Alloy's own kernels) or auto (cudnn where it runs the shape and dtype, with no "
      "attention dropout; fp32 always alloy); a no-op on the CPU")(
      "seed", value(&o.seed)->default_value(o.seed)->value_name("N"),
      "seed of the weight initialisation, the shuffling and the synthetic data");

  auto precision = make_group("Mixed precision (defaults follow the opt level)");
  precision.add_options()("opt-level",
                          value<std::string>()->default_value("O0")->value_name("O0|O1|O2|O3"),
                          "O0 fp32; O1 per-op casts; O2 half model + fp32 masters; O3 pure half")(
      "half-dtype", value<std::string>()->value_name("fp16|bf16"),
      "the half type of O1-O3 (default fp16)")(
      "loss-scale", value<std::string>()->value_name("dynamic|X"),
      "dynamic, or a static scale (default: dynamic at O1/O2 with fp16, else 1)")(
      "init-loss-scale", value<float>()->value_name("X"), "first dynamic scale (default 65536)")(
      "scale-window", value<std::int64_t>()->value_name("N"),
      "finite steps before the dynamic scale doubles (default 2000)")(
      "min-loss-scale", value<float>()->value_name("X"), "lowest dynamic scale (default 1)")(
      "max-loss-scale", value<float>()->value_name("X"), "highest dynamic scale (default 2^24)")(
      "keep-batchnorm-fp32", value<std::string>()->value_name("true|false"),
      "batch-norm parameters stay fp32 in a half model (default: true at O2, false at O3)")(
      "master-weights", value<std::string>()->value_name("true|false"),
      "keep fp32 master weights for a half model (default: true at O2, false at O3)")(
      "stochastic-rounding",
      value(&o.stochastic_rounding)
          ->default_value(false, "false")
          ->implicit_value(true, "true")
          ->value_name("BOOL"),
      "round half weights that have no fp32 master (O3, or O2 with --master-weights false) "
      "stochastically in each update, unbiased, the random bits keyed by (seed, step, "
      "parameter, element), the same on the CPU and CUDA; weights with fp32 masters are "
      "unaffected")(
      "max-consecutive-skips", value(&o.max_consecutive_skips)->value_name("N"),
      "stop (exit 1) after N overflowing steps in a row at any scale; 0: never (default: stop "
      "after 20 in a row at the minimum scale)");

  auto optimizer = make_group("Optimizer");
  optimizer.add_options()("optimizer",
                          value(&o.optimizer)->default_value(o.optimizer)->value_name("NAME"),
                          "sgd or adamw")(
      "lr", value(&o.lr)->default_value(o.lr, "0.1")->value_name("X"), "learning rate")(
      "momentum", value(&o.momentum)->default_value(o.momentum, "0")->value_name("X"),
      "SGD momentum, in [0, 1)")(
      "weight-decay", value(&o.weight_decay)->default_value(o.weight_decay, "0")->value_name("X"),
      "L2 penalty for sgd, decoupled decay for adamw")(
      "lr-schedule", value(&o.lr_schedule)->default_value(o.lr_schedule)->value_name("NAME"),
      "constant, linear or cosine: the rate's decay from --lr to --min-lr over the run's steps "
      "after the warm-up")(
      "warmup-steps", value(&o.warmup_steps)->default_value(o.warmup_steps)->value_name("N"),
      "raise the rate linearly from lr/N to lr over the first N optimizer steps")(
      "min-lr", value(&o.min_lr)->default_value(o.min_lr, "0")->value_name("X"),
      "the rate a linear or cosine schedule ends at")(
      "clip-grad-norm",
      value(&o.clip_grad_norm)->default_value(o.clip_grad_norm, "0")->value_name("X"),
      "scale the unscaled gradients down so their total L2 norm is at most X, as "
      "torch.nn.utils.clip_grad_norm_ after the loss scaler's unscale (0: off)")(
      "label-smoothing",
      value(&o.label_smoothing)->default_value(o.label_smoothing, "0")->value_name("X"),
      "train against (1 - X) * onehot + X / classes, as PyTorch's "
      "CrossEntropyLoss(label_smoothing=X) (0: off)")(
      "ema-decay", value(&o.ema_decay)->default_value(o.ema_decay, "0")->value_name("D"),
      "keep an exponential moving average of the weights, average = D * average + (1 - D) * "
      "weights after each step, and report its test accuracy too (0: off; D in [0, 1))")(
      "ema-warmup",
      value(&o.ema_warmup)
          ->default_value(false, "false")
          ->implicit_value(true, "true")
          ->value_name("BOOL"),
      "use min(D, (1 + n) / (10 + n)) as the decay of the update after n steps, so the "
      "averages soon leave the initial weights behind")(
      "epochs", value(&o.epochs)->default_value(o.epochs)->value_name("N"),
      "passes over the training set")(
      "steps", value(&o.steps)->default_value(o.steps)->value_name("N"),
      "stop after N optimizer steps in total, mid-epoch if need be, then evaluate (0: no bound; "
      "--epochs bounds the run too)")(
      "batch-size", value(&o.batch_size)->default_value(o.batch_size)->value_name("N"),
      "global minibatch size, split evenly across ranks")(
      "accumulation-steps",
      value(&o.accumulation_steps)->default_value(o.accumulation_steps)->value_name("N"),
      "process each rank's share of a batch as N micro-batches, accumulating their gradients "
      "into one optimizer step (the share must divide by N)");

  auto checkpoints = make_group("Checkpoints");
  checkpoints.add_options()("checkpoint-dir", value(&o.checkpoint_dir)->value_name("DIR"),
                            "write checkpoints here (default: none)")(
      "checkpoint-every",
      value(&o.checkpoint_every)->default_value(o.checkpoint_every)->value_name("N"),
      "also checkpoint every N steps (0: only at each epoch end)")(
      "keep-checkpoints",
      value(&o.keep_checkpoints)->default_value(o.keep_checkpoints)->value_name("K"),
      "keep the newest K checkpoints")(
      "resume", value(&o.resume)->value_name("FILE|DIR|auto"),
      "continue from a checkpoint file, or the newest one in DIR; auto: the newest readable one "
      "in --checkpoint-dir if there is one, else start fresh")(
      "async-checkpoint",
      value(&o.async_checkpoint)
          ->default_value(false, "false")
          ->implicit_value(true, "true")
          ->value_name("BOOL"),
      "write checkpoints on a background thread from a snapshot while training goes on");

  auto distributed = make_group("Distributed");
  distributed.add_options()("nodes", value(&o.nodes)->default_value(o.nodes)->value_name("N"),
                            "number of nodes")(
      "gpus", value(&o.gpus)->default_value(o.gpus)->value_name("G"),
      "processes per node, one per device (worker processes on the CPU)")(
      "nproc-per-node", value<int>()->value_name("G"), "same as --gpus")(
      "nr", value(&o.nr)->default_value(o.nr)->value_name("R"),
      "this node's rank, in [0, --nodes)")(
      "master-addr", value(&o.master_addr)->default_value(o.master_addr)->value_name("A"),
      "rendezvous address (rank 0's host)")(
      "master-port", value(&o.master_port)->default_value(o.master_port)->value_name("P"),
      "rendezvous port")("allreduce-fp32",
                         value(&o.allreduce_fp32)
                             ->default_value(false, "false")
                             ->implicit_value(true, "true")
                             ->value_name("BOOL"),
                         "reduce gradients in fp32 instead of the half type")(
      "bucket-cap-mb",
      value(&o.bucket_cap_mb)->default_value(o.bucket_cap_mb, "25")->value_name("MB"),
      "gradient bucket size in MiB: each bucket's reduction starts once its gradients are "
      "final, while backward goes on; the first bucket is capped at 1 MiB so that the first "
      "reduction starts early")(
      "zero", value(&o.zero)->default_value(o.zero)->value_name("0|1"),
      "ZeRO stage: 0 plain data parallelism (every rank holds the fp32 master weights and the "
      "optimizer's state); 1 shards them over the ranks: gradients are reduced to their "
      "owners, each rank updates its shard and the weights are all-gathered")(
      "dist-backend", value(&o.dist_backend)->value_name("nccl|gloo"),
      "collectives: nccl (GPU tensors, one rank per device) or gloo (CPU, or GPU buckets "
      "staged through host memory; ranks may share a device). Default: nccl on a CUDA device, "
      "gloo on the CPU. Given, a world of one rank joins a process group too")(
      "max-restarts", value(&o.max_restarts)->default_value(o.max_restarts)->value_name("N"),
      "restart this node's workers up to N times after a failure, from the newest readable "
      "checkpoint in --checkpoint-dir (needed with N > 0)");

  auto output = make_group("Output");
  output.add_options()(
      "log-json", value(&o.log_json)->value_name("FILE|-"),
      "write start/epoch/end events, one JSON object per line ('-': standard output)")(
      "config", value(&o.config)->value_name("FILE"),
      "read flags from FILE, one per line as 'key value' or 'key=value' ('#' comments); "
      "the command line wins")("help,h", "print this help and exit");

  po::options_description all;
  all.add(model)
      .add(sequence_options_description(o.text))
      .add(precision)
      .add(optimizer)
      .add(checkpoints)
      .add(distributed)
      .add(output);
  return all;
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  TrainOptions o;
  const auto description = train_options_description(o);
  po::variables_map values;
  parse_arguments(args, description, values);
  if (values.count("config")) {
    const std::string path = values["config"].as<std::string>();
    for (const ConfigLine& line : read_config_file(path)) {
      if (line.key == "config" || line.key == "help") {
        usage_fail(path, ":", line.number, ": '", line.key, "' cannot be set in a config file");
      }
      try {
        parse_arguments({line.word}, description, values);
      } catch (const po::unknown_option&) {
        usage_fail(path, ":", line.number, ": unknown key '", line.key, "' (the keys are the ",
                   "long flag names of 'alloy train --help', without the dashes)");
      } catch (const po::error& e) {
        usage_fail(path, ":", line.number, ": ", e.what());
      }
    }
  }
  po::notify(values);
  for (const auto& [key, value] : values) {
    if (!value.defaulted()) o.explicitly_set.insert(setting_of_flag(key));
  }
  validate(o, values);
  return o;
}

bool TrainOptions::was_given(const std::string& flag) const {
  return is_set(setting_of_flag(flag));
}

void print_train_help() {
  TrainOptions defaults;
  print_help("alloy train [options]",
             "Trains a model on an image classification dataset and prints one line per epoch.\n"
             "Flags of features that have not landed yet are accepted and answered with an\n"
             "error that says so.",
             train_options_description(defaults));
}

}  // namespace alloy::app
