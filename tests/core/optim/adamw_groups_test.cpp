// AdamW's decay_matrices_only (nanoGPT's two parameter groups): matrices decay, vectors do not,
// and both groups' bias corrections use the same step, which advances once per update.
#include <boost/test/unit_test.hpp>
#include <memory>
#include <vector>

#include "core/optim/optimizer.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

struct Params {
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  std::vector<nn::Parameter*> list;
  explicit Params(std::uint64_t seed) {
    Generator generator(seed);
    for (const Shape& shape : {Shape{3, 4}, Shape{4}, Shape{2, 2, 2}}) {
      auto p = std::make_unique<nn::Parameter>();
      p->name = "p" + std::to_string(owned.size());
      p->value = random_tensor(shape, DType::f32, generator);
      p->grad = random_tensor(shape, DType::f32, generator);
      list.push_back(p.get());
      owned.push_back(std::move(p));
    }
  }
};

optim::OptimizerConfig adamw(float weight_decay, bool matrices_only) {
  optim::OptimizerConfig config;
  config.kind = "adamw";
  config.lr = 0.01f;
  config.weight_decay = weight_decay;
  config.decay_matrices_only = matrices_only;
  return config;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(adamw_groups)

BOOST_AUTO_TEST_CASE(matrices_decay_vectors_do_not_and_the_step_advances_once) {
  Params grouped(1), decayed(1), undecayed(1);
  const auto grouped_opt = optim::make_optimizer(adamw(0.5f, true), grouped.list);
  const auto decayed_opt = optim::make_optimizer(adamw(0.5f, false), decayed.list);
  const auto undecayed_opt = optim::make_optimizer(adamw(0.0f, false), undecayed.list);
  for (int step = 0; step < 3; ++step) {
    grouped_opt->step();
    decayed_opt->step();
    undecayed_opt->step();
  }
  BOOST_TEST(grouped_opt->steps() == 3);
  // The matrix and the 3-d tensor as with decay everywhere, the vector as with none.
  BOOST_TEST(same_bits(grouped.list[0]->value, decayed.list[0]->value));
  BOOST_TEST(same_bits(grouped.list[2]->value, decayed.list[2]->value));
  BOOST_TEST(same_bits(grouped.list[1]->value, undecayed.list[1]->value));
  BOOST_TEST(!same_bits(grouped.list[1]->value, decayed.list[1]->value));
}

BOOST_AUTO_TEST_SUITE_END()
