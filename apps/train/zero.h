// ZeRO stage 1 (`alloy train --zero 1`): the optimizer's side of sharded data parallelism.
//
// The canonical weights form one flat space (parallel/zero_shards.h) and each rank owns one
// contiguous shard of it: the fp32 master weights of that shard (at O2) and the optimizer's
// state live on that rank only. The step, after DDP reduced each gradient element to its owner
// (DdpOptions::reduce_to_owners, parallel/ddp.h):
//   1. unscale the owned stretch of each gradient (into fp32 shard gradients where masters are
//      kept, in place otherwise), found_inf on the device;
//   2. found_inf is all-reduced (max) so that every rank takes the same skip decision, and a
//      dynamic scaler updates from that agreed verdict;
//   3. the fused optimizer update runs over the shard's per-parameter pieces (views into the
//      shard's buffers, so weight-decay groups still follow each parameter's dimensions), and
//      rounds the updated masters into the rank's part of the model weights;
//   4. the model weights are all-gathered from their owners, in the model's own dtypes (half at
//      O2/O3, f32 at O0/O1): every rank holds the full model for the next forward.
// To gather without copies the model's parameters become views into one buffer laid out in flat
// order (each parameter at a 16-byte aligned offset), so each rank's part of it is one stretch.
//
// Nothing here reads a value on the host during a step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "apps/train/sharded_state.h"
#include "apps/train/train_config.h"
#include "core/nn/module.h"
#include "parallel/process_group.h"
#include "parallel/zero_shards.h"

namespace alloy::app {

// The settings --zero allows, each refusal a UsageError naming the settings: zero is 0 or 1, and
// zero 1 does not yet combine with weight averages, gradient clipping, stochastic rounding,
// a CUDA graph asked for with cuda_graph on, or a language model.
void check_zero_options(const TrainConfig& options);

class ZeroShard {
 public:
  // Takes this rank's shard of `precision`'s canonical weights (call it once every rank holds
  // rank 0's weights) and hands the amp step over to this object
  // (amp::MixedPrecision::hand_over_step). `group`, `model` and `precision` must outlive it.
  ZeroShard(parallel::ProcessGroup& group, nn::Module& model, amp::MixedPrecision& precision);
  ZeroShard(const ZeroShard&) = delete;
  ZeroShard& operator=(const ZeroShard&) = delete;

  std::int64_t total() const { return total_; }
  const parallel::ShardRange& range() const { return range_; }

  // The sharded step (above); runs as precision.step().
  void step();

  // The rank's shard: see apps/train/sharded_state.h.
  ShardedState sharded_state();
  // Overwrites the rank's shard from `state` (same total and range, the kinds sharded_state()
  // gives, tensors on any device) and all-gathers the model weights from every rank's shard: a
  // collective. Error naming the kind that is missing or of the wrong size.
  void load_sharded_state(const ShardedState& state);

  // core/digest.h's params_digest of the full canonical weights, gathered from the shards: a
  // collective; every rank gets the same digest.
  std::string params_digest();

 private:
  struct Piece {
    std::size_t param = 0;           // index in registration order
    std::int64_t first = 0;          // its first element in the parameter
    std::int64_t count = 0;          // elements
    bool master = false;             // its canonical weight is an fp32 master (the shard's buffer)
    std::int64_t master_offset = 0;  // where, in the master shard's elements
    std::unique_ptr<nn::Parameter> shard;  // the optimizer's view of it
    Tensor model_copy;  // where a master piece's update writes the model's weight
  };
  Tensor model_piece(const Piece& piece, const Tensor& tensor) const;
  void gather_model();

  parallel::ProcessGroup& group_;
  amp::MixedPrecision& precision_;
  std::vector<nn::Parameter*> model_params_;
  // The canonical weights' names, shapes and dtypes, taken before the masters are released.
  std::vector<std::string> names_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
  std::vector<std::int64_t> starts_;  // flat offsets, one more at the end (total)
  std::int64_t total_ = 0;
  parallel::ShardRange range_;
  Device device_ = Device::cpu();
  Tensor model_storage_;                     // u8: every model parameter is a view into it
  std::vector<std::int64_t> gather_counts_;  // bytes of model_storage_ owned by each rank
  Tensor masters_;                           // f32: the shard's master weights, or undefined
  std::int64_t master_count_ = 0;
  bool needs_unscale_ = false;  // as the amp layer's: masters, or a scale other than 1
  Tensor nothing_;              // f32 [0]: the unscale pass's entry for a parameter not owned
  std::vector<Piece> pieces_;
};

}  // namespace alloy::app
