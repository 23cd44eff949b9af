// What a training run is: the model, the data, the precision, the optimizer and its schedule,
// checkpoints and data parallelism, as plain values that a program fills in (the `alloy train`
// command fills them from its flags, apps/cli/train_options.h). Errors about them name the
// settings by these field names.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "amp/opt_level.h"
#include "apps/train/sequence_options.h"
#include "core/data/dataset.h"

namespace alloy::app {

struct TrainConfig {
  // Model and data.
  std::string model = "lenet";
  std::string dataset = "fashion-mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // Images: 0 keeps the data's own (synthetic: 28x28, 1 channel, 10 classes, kSyntheticTrainSize
  // training examples). channels converts (apps/image_data.h); image_size and num_classes must
  // match real data, and shape the synthetic kind.
  int image_size = 0;
  int channels = 0;
  int num_classes = 0;
  std::int64_t synthetic_size = 0;
  // auto (imagenet for 3 channels, none for 1) | none (pixels / 255) | imagenet | M,../S,..
  std::string normalize = "auto";
  // --dataset folder: default (random resized crops and flips of the training images) | none
  // (the centre crop of evaluation), and the threads that decode each batch.
  std::string augment = "default";
  int loader_threads = 4;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int threads = 0;              // resolved to the cores this process may use when not given
  std::int64_t seed = 1;
  std::string cuda_graph = "auto";  // auto | on | off (apps/train/step_graph.h)
  // none | blocks: activation recomputation (apps/train/recompute.h).
  std::string recompute = "none";
  std::string layout =
      "auto";  // auto | nchw | nhwc: the activations' order (apps/train/layout_choice.h)
  // heuristic | measured: how conv2d picks cuDNN's algorithms on a GPU (apps/train/trainer.cpp sets
  // the process-wide choice, core/ops/conv2d_algorithm_db.h).
  std::string conv_algorithms = "measured";
  // fp32 GEMMs and convolutions on CUDA may use TF32 tensor cores (core/ops/allow_tf32.h).
  bool allow_tf32 = false;
  // auto | alloy | cudnn: the kernel of causal attention on CUDA (core/ops/attention_kernel.h).
  std::string attention_kernel = "auto";

  // Precision: the opt level's properties after the overrides (--half-dtype, --loss-scale...).
  amp::AmpProperties precision;
  // Round half weights without fp32 masters stochastically in the optimizer's update
  // (core/stochastic_rounding.h), keyed by the seed.
  bool stochastic_rounding = false;

  // Optimizer and schedule.
  std::string optimizer = "sgd";
  double lr = 0.1;
  double momentum = 0.0;
  double weight_decay = 0.0;
  // Gradient-norm clipping of the unscaled gradients (amp::MixedPrecision::set_clip_grad_norm);
  // 0: off.
  double clip_grad_norm = 0.0;
  // Weight averaging (amp::MixedPrecision::set_ema_decay); 0: off.
  double ema_decay = 0.0;
  bool ema_warmup = false;  // warm the averages' decay up over the first steps
  // The loss's label smoothing (core/ops/softmax_cross_entropy.h); 0: none.
  double label_smoothing = 0.0;
  std::int64_t epochs = 10;
  // A bound on the run's optimizer steps in total; 0: none (epochs decide). Sequence models
  // train in steps.
  std::int64_t steps = 0;
  std::int64_t batch_size = 256;  // global: split across ranks
  // The rate's course over the run (core/ops/lr_schedule.h): linear warm-up over warmup_steps
  // optimizer steps, then constant, linear or cosine decay to min_lr at the last step.
  std::string lr_schedule = "constant";
  std::int64_t warmup_steps = 0;
  double min_lr = 0.0;
  // Micro-batches each rank's share of a step is processed in (apps/train/train_step.h).
  std::int64_t accumulation_steps = 1;

  // Sequence models (--model gpt...): apps/train/sequence_options.h.
  SequenceOptions text;

  // Checkpoints.
  std::string checkpoint_dir;         // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // steps; 0: at epoch ends only
  int keep_checkpoints = 3;
  std::string resume;  // empty: start fresh; "auto": the newest readable in checkpoint_dir, if any
  bool async_checkpoint = false;  // save on a writer thread (apps/train/checkpointer.h)

  // Distributed.
  int nodes = 1;
  int gpus = 1;  // processes per node
  int nr = 0;    // this node's rank
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool allreduce_fp32 = false;
  // Gradient bucket size in MiB (PyTorch's bucket_cap_mb); the first bucket is 1 MiB at most.
  double bucket_cap_mb = 25;
  // nccl | gloo (PyTorch's names); empty: nccl on a CUDA device, gloo on the CPU. Given
  // explicitly, it also makes a world of one rank join a process group (DDP at world size 1).
  std::string dist_backend;
  // ZeRO stage: 0 plain data parallelism; 1 the fp32 masters and the optimizer's state sharded
  // over the ranks (apps/train/zero.h).
  int zero = 0;

  int max_restarts = 0;  // restarts of this node's workers after a failure (apps/train/elastic.h)

  // Divergence: overflowing steps in a row that stop training; -1: the default rule (the scale
  // stuck at its minimum, apps/train/overflow_monitor.h), 0: never.
  std::int64_t max_consecutive_skips = -1;

  // The settings a program set on purpose, by name ("batch_size"): where one is not, another
  // source may fill it in - the launch environment (nodes, gpus, nr, master_addr, master_port,
  // dist_backend, threads), a checkpoint resumed from (apply_checkpoint_defaults), a model's
  // preset (vocab_size).
  std::set<std::string> explicitly_set;
  bool is_set(const std::string& setting) const { return explicitly_set.count(setting) != 0; }
};

// Loads config.dataset from config.data_dir (synthetic: shaped by image_size, channels,
// num_classes and synthetic_size), converts it to config.channels, and checks it suits the run:
// both sets hold examples, the images are square and of image_size when set, the model takes
// them, and one global batch fits in the training set (else every epoch would have no step).
// Throws Error for unsuitable data, SettingError for a batch_size larger than the training set.
data::DatasetPair load_training_data(const TrainConfig& config);

}  // namespace alloy::app
