// Activation recomputation on the CPU (tests/core/nn/recompute.h), and which modules
// recompute_blocks marks.
#include <boost/test/unit_test.hpp>

#include "core/models/models.h"
#include "core/nn/residual_block.h"
#include "tests/core/nn/recompute.h"

using namespace alloy;

namespace {

Tensor on_host(const Tensor& tensor) {
  return tensor;
}

std::int64_t activation_bytes() {
  return memory_stats(Device::cpu()).snapshot().current_of(MemoryCategory::activations);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(recompute)

BOOST_AUTO_TEST_CASE(recomputed_blocks_change_no_bit_at_every_level) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_recompute_changes_no_bit(level, Device::cpu(), on_host);
}

BOOST_AUTO_TEST_CASE(recomputed_residual_blocks_change_no_bit_at_every_level) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_recompute_changes_no_bit(level, Device::cpu(), on_host,
                                         test::residual_recompute_net());
}

BOOST_AUTO_TEST_CASE(recomputed_dropout_draws_the_same_masks_at_every_level) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_recompute_changes_no_bit(level, Device::cpu(), on_host,
                                         test::conv_recompute_net(0.5f));
}

BOOST_AUTO_TEST_CASE(recompute_blocks_marks_the_blocks_a_sequential_holds) {
  Generator generator(1);
  BOOST_TEST(models::make_model("resnet18", generator)->recompute_blocks(true) == 8);
  BOOST_TEST(models::make_model("lenet", generator)->recompute_blocks(true) == 0);
  BOOST_TEST(models::make_model("mlp", generator)->recompute_blocks(true) == 0);

  auto net = test::make_recompute_net(generator);
  BOOST_TEST(net->recompute_blocks(true) == 3);
  BOOST_TEST(!net->recomputes(0));
  BOOST_TEST(net->recomputes(2));
  BOOST_TEST(net->recomputes(3));
  BOOST_TEST(!net->recomputes(4));  // the Sequential is no block; its own block is marked
  BOOST_TEST(static_cast<nn::Sequential&>((*net)[4]).recomputes(0));
  BOOST_TEST(net->recompute_blocks(false) == 3);
  BOOST_TEST(!net->recomputes(2));
  BOOST_TEST(!static_cast<nn::Sequential&>((*net)[4]).recomputes(0));
  BOOST_CHECK_THROW(net->set_recompute(net->size(), true), Error);

  // nn::Residual is a block; one inside a marked one's body is left to its recomputation.
  auto mlp = test::make_residual_mlp(generator);
  BOOST_TEST(mlp->recompute_blocks(true) == 3);
  BOOST_TEST(!mlp->recomputes(0));
  BOOST_TEST(mlp->recomputes(1));
  BOOST_TEST(mlp->recomputes(2));
  BOOST_TEST(static_cast<nn::Sequential&>((*mlp)[3]).recomputes(0));
  auto inner = std::make_unique<nn::Sequential>();
  inner->emplace<nn::Residual>(std::make_unique<nn::Linear>(4, 4));
  nn::Sequential outer;
  outer.emplace<nn::Residual>(std::move(inner));
  BOOST_TEST(outer.recompute_blocks(true) == 1);
  BOOST_TEST(outer.recomputes(0));
  // Below a Residual that no Sequential holds, its body's blocks are marked.
  nn::Residual root(test::make_residual_mlp(generator));
  BOOST_TEST(root.recompute_blocks(true) == 3);
}

BOOST_AUTO_TEST_CASE(an_evaluation_forward_keeps_nothing) {
  Generator generator(2);
  auto net = test::make_recompute_net(generator);
  net->recompute_blocks(true);
  const Tensor images = test::random_tensor({6, 1, 14, 14}, DType::f32, generator);
  const std::int64_t before = activation_bytes();
  net->set_training(false);
  net->forward(images);
  BOOST_TEST(activation_bytes() == before);
  // A training forward keeps the blocks' inputs; an evaluation forward after it lets them go.
  net->set_training(true);
  net->forward(images);
  BOOST_TEST(activation_bytes() > before);
  net->set_training(false);
  net->forward(images);
  BOOST_TEST(activation_bytes() == before);
}

BOOST_AUTO_TEST_CASE(a_backward_releases_what_the_forward_kept) {
  Generator generator(3);
  auto net = test::make_recompute_net(generator);
  net->recompute_blocks(true);
  net->set_training(true);
  const Tensor images = test::random_tensor({6, 1, 14, 14}, DType::f32, generator);
  const Tensor dy = test::random_tensor({6, 10}, DType::f32, generator);
  const std::int64_t before = activation_bytes();
  net->zero_grad();
  net->forward(images);
  net->backward(dy);
  BOOST_TEST(activation_bytes() == before);
}

BOOST_AUTO_TEST_SUITE_END()
