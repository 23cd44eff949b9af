// A fully populated CheckpointState whose every field depends on `step`, a field-by-field
// comparison, and the message of an error, for the checkpoint tests.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/random.h"

namespace alloy::checkpoint::test {

inline NamedTensor sample_tensor(const std::string& name, DType dtype, const Shape& shape,
                                 Generator& random) {
  NamedTensor tensor;
  tensor.name = name;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.data.resize(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  for (std::size_t i = 0; i < tensor.data.size(); i += 4) {
    if (dtype == DType::f32) {
      const float value = static_cast<float>(random.normal());
      std::memcpy(&tensor.data[i], &value, 4);
    } else {
      const std::uint64_t word = random.next_u64();
      std::memcpy(&tensor.data[i], &word, std::min<std::size_t>(4, tensor.data.size() - i));
    }
  }
  return tensor;
}

// `weights` sets the size of the largest parameter (in floats).
inline CheckpointState sample_state(std::int64_t step, std::int64_t weights = 96) {
  Generator random(static_cast<std::uint64_t>(step) * 7919 + 1);
  CheckpointState state;
  state.alloy_version = "0.1.0-test";
  state.model = "lenet";
  state.model_description = "LeNet: conv 1->20 3x3, relu, avgpool 2; step " + std::to_string(step);
  state.amp.opt_level = "O2";
  state.amp.half_dtype = "bf16";
  state.amp.model_dtype = "f16";
  state.amp.cast_policy = true;
  state.amp.keep_batchnorm_fp32 = true;
  state.amp.master_weights = true;
  state.amp.dynamic_loss_scale = true;
  state.amp.static_scale = 128.0f;
  state.amp.init_scale = 1024.0f;
  state.amp.scale_window = 500 + step;
  state.amp.growth_factor = 4.0f;
  state.amp.backoff_factor = 0.25f;
  state.amp.min_scale = 2.0f;
  state.amp.max_scale = 1048576.0f;
  state.epoch = 3 + step / 100;
  state.step = step;
  state.step_in_epoch = step % 100;
  state.world_size = 4;
  state.seed = 0xfeedface12345678ull;
  state.batch_size = 256;
  state.rng_states = {{"init", {1, 2, 3, random.next_u64()}},
                      {"sampler", {random.next_u64(), 5, 6, 0xffffffffffffffffull}}};
  state.scaler.scale = 32768.0f;
  state.scaler.clean_steps = 17;
  state.scaler.skipped_steps = 3;
  state.scaler.at_min_streak = 1;
  state.optimizer.kind = "adamw";
  state.optimizer.lr = 0.003f;
  state.optimizer.momentum = 0.9f;
  state.optimizer.weight_decay = 0.01f;
  state.optimizer.nesterov = true;
  state.optimizer.beta1 = 0.8f;
  state.optimizer.beta2 = 0.99f;
  state.optimizer.eps = 1e-6f;
  state.optimizer.steps = step;
  state.parameters = {sample_tensor("fc.weight", DType::f32, {weights / 4, 4}, random),
                      sample_tensor("fc.bias", DType::f32, {10}, random),
                      sample_tensor("scalar", DType::f32, {}, random),
                      sample_tensor("empty", DType::f32, {0, 3}, random)};
  state.buffers = {sample_tensor("bn.running_mean", DType::f32, {6}, random),
                   sample_tensor("bn.num_batches", DType::i32, {1}, random)};
  state.optimizer_state = {sample_tensor("fc.weight.exp_avg", DType::f32, {weights / 4, 4}, random),
                           sample_tensor("fc.bias.half_state", DType::f16, {5}, random),
                           sample_tensor("flags", DType::u8, {3}, random)};
  state.params_digest = "sha256:" + std::to_string(random.next_u64());
  state.run.dataset = "fashion-mnist";
  state.extra = {{"note", std::string("binary\0value", 12)}};
  return state;
}

inline void check_same_tensors(const std::vector<NamedTensor>& a,
                               const std::vector<NamedTensor>& b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST(a[i].name == b[i].name);
    BOOST_TEST(static_cast<int>(a[i].dtype) == static_cast<int>(b[i].dtype));
    BOOST_TEST(a[i].shape == b[i].shape);
    BOOST_TEST((a[i].data == b[i].data), "data of tensor " << a[i].name << " differs");
  }
}

inline void check_same_state(const CheckpointState& a, const CheckpointState& b) {
  BOOST_TEST(a.alloy_version == b.alloy_version);
  BOOST_TEST(a.model == b.model);
  BOOST_TEST(a.model_description == b.model_description);
  BOOST_TEST(a.amp.opt_level == b.amp.opt_level);
  BOOST_TEST(a.amp.half_dtype == b.amp.half_dtype);
  BOOST_TEST(a.amp.model_dtype == b.amp.model_dtype);
  BOOST_TEST(a.amp.cast_policy == b.amp.cast_policy);
  BOOST_TEST(a.amp.keep_batchnorm_fp32 == b.amp.keep_batchnorm_fp32);
  BOOST_TEST(a.amp.master_weights == b.amp.master_weights);
  BOOST_TEST(a.amp.dynamic_loss_scale == b.amp.dynamic_loss_scale);
  BOOST_TEST(a.amp.static_scale == b.amp.static_scale);
  BOOST_TEST(a.amp.init_scale == b.amp.init_scale);
  BOOST_TEST(a.amp.scale_window == b.amp.scale_window);
  BOOST_TEST(a.amp.growth_factor == b.amp.growth_factor);
  BOOST_TEST(a.amp.backoff_factor == b.amp.backoff_factor);
  BOOST_TEST(a.amp.min_scale == b.amp.min_scale);
  BOOST_TEST(a.amp.max_scale == b.amp.max_scale);
  BOOST_TEST(a.epoch == b.epoch);
  BOOST_TEST(a.step == b.step);
  BOOST_TEST(a.step_in_epoch == b.step_in_epoch);
  BOOST_TEST(a.world_size == b.world_size);
  BOOST_TEST(a.seed == b.seed);
  BOOST_TEST(a.batch_size == b.batch_size);
  BOOST_TEST_REQUIRE(a.rng_states.size() == b.rng_states.size());
  for (std::size_t i = 0; i < a.rng_states.size(); ++i) {
    BOOST_TEST(a.rng_states[i].name == b.rng_states[i].name);
    BOOST_TEST(a.rng_states[i].state == b.rng_states[i].state);
  }
  BOOST_TEST(a.scaler.scale == b.scaler.scale);
  BOOST_TEST(a.scaler.clean_steps == b.scaler.clean_steps);
  BOOST_TEST(a.scaler.skipped_steps == b.scaler.skipped_steps);
  BOOST_TEST(a.scaler.at_min_streak == b.scaler.at_min_streak);
  BOOST_TEST(a.optimizer.kind == b.optimizer.kind);
  BOOST_TEST(a.optimizer.lr == b.optimizer.lr);
  BOOST_TEST(a.optimizer.momentum == b.optimizer.momentum);
  BOOST_TEST(a.optimizer.weight_decay == b.optimizer.weight_decay);
  BOOST_TEST(a.optimizer.nesterov == b.optimizer.nesterov);
  BOOST_TEST(a.optimizer.beta1 == b.optimizer.beta1);
  BOOST_TEST(a.optimizer.beta2 == b.optimizer.beta2);
  BOOST_TEST(a.optimizer.eps == b.optimizer.eps);
  BOOST_TEST(a.optimizer.steps == b.optimizer.steps);
  check_same_tensors(a.parameters, b.parameters);
  check_same_tensors(a.buffers, b.buffers);
  check_same_tensors(a.optimizer_state, b.optimizer_state);
  BOOST_TEST(a.params_digest == b.params_digest);
  BOOST_TEST((a.extra == b.extra), "extra maps differ");
  BOOST_TEST((extra_entries(a) == extra_entries(b)), "records differ");
}

// The message of the alloy::Error that `action` throws; fails the test when it throws nothing.
template <class Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  BOOST_ERROR("no alloy::Error was thrown");
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace alloy::checkpoint::test
