// nn::GELU: the op's results bit for bit, its name and options, the input kept for backward
// only when the forward keeps activations (and released by backward), and O1's follow_input.
#include "core/nn/gelu.h"

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/nn/cast_policy.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using alloy::test::same_bits;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const GeluApproximation kApproximations[] = {GeluApproximation::none, GeluApproximation::tanh};

std::int64_t activation_bytes() {
  return memory_stats(Device::cpu()).snapshot().current_of(MemoryCategory::activations);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_gelu)

BOOST_AUTO_TEST_CASE(forward_and_backward_are_the_ops) {
  Generator generator(1);
  for (const GeluApproximation approximation : kApproximations) {
    for (const DType dtype : kFloatTypes) {
      BOOST_TEST_CONTEXT(gelu_approximation_name(approximation) << " " << dtype_name(dtype)) {
        nn::GELU gelu(approximation);
        const Tensor x = test::random_tensor({4, 33}, dtype, generator, -4.0f, 4.0f);
        const Tensor dy = test::random_tensor({4, 33}, dtype, generator);
        const Tensor y = gelu.forward(x);
        BOOST_TEST(same_bits(y, gelu_forward(x, approximation)));
        BOOST_TEST(same_bits(gelu.backward(dy), gelu_backward(x, dy, approximation)));
        // The two forms differ: the module passes its approximation on.
        const GeluApproximation other = approximation == GeluApproximation::none
                                            ? GeluApproximation::tanh
                                            : GeluApproximation::none;
        if (dtype == DType::f32) BOOST_TEST(!same_bits(y, gelu_forward(x, other)));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(name_and_options) {
  BOOST_TEST(nn::GELU().type_name() == "GELU");
  BOOST_TEST(nn::GELU().options() == "approximate=none");
  BOOST_TEST((nn::GELU().approximation() == GeluApproximation::none));
  BOOST_TEST(nn::GELU(GeluApproximation::tanh).options() == "approximate=tanh");
  BOOST_TEST(nn::GELU(GeluApproximation::tanh).describe() == "GELU(approximate=tanh)\n");
}

BOOST_AUTO_TEST_CASE(keeps_its_input_only_for_a_backward) {
  Generator generator(2);
  nn::GELU gelu;
  const std::int64_t before = activation_bytes();
  {
    const Tensor x = test::random_tensor({64, 64}, DType::f32, generator);
    gelu.forward(x);
    // Evaluation: nothing kept (the input's bytes go with x), and no backward.
    gelu.set_training(false);
    gelu.forward(x);
  }
  BOOST_TEST(activation_bytes() == before);
  BOOST_CHECK_THROW(gelu.backward(Tensor::zeros({64, 64}, DType::f32)), Error);

  // A training forward that must not keep activations (a recomputed block's first pass).
  gelu.set_training(true);
  gelu.set_forward_mode(nn::ForwardMode{/*keep_activations=*/false, true});
  { gelu.forward(test::random_tensor({64, 64}, DType::f32, generator)); }
  BOOST_TEST(activation_bytes() == before);
  BOOST_CHECK_THROW(gelu.backward(Tensor::zeros({64, 64}, DType::f32)), Error);

  // Kept until backward, released by it.
  gelu.set_forward_mode(nn::ForwardMode{});
  { gelu.forward(test::random_tensor({64, 64}, DType::f32, generator)); }
  BOOST_TEST(activation_bytes() == before + 64 * 64 * 4);
  { gelu.backward(Tensor::zeros({64, 64}, DType::f32)); }
  BOOST_TEST(activation_bytes() == before);
  BOOST_CHECK_THROW(gelu.backward(Tensor::zeros({64, 64}, DType::f32)), Error);
}

BOOST_AUTO_TEST_CASE(computes_in_its_inputs_dtype_under_o1) {
  nn::CastPolicy policy;
  policy.enabled = true;
  nn::set_cast_policy(policy);
  Generator generator(3);
  for (const DType dtype : kFloatTypes) {
    nn::GELU gelu;
    const Tensor x = test::random_tensor({3, 8}, dtype, generator);
    const Tensor y = gelu.forward(x);
    BOOST_TEST((y.dtype() == dtype));
    BOOST_TEST(same_bits(y, gelu_forward(x, GeluApproximation::none)));
  }
  nn::set_cast_policy(nn::CastPolicy{});
}

BOOST_AUTO_TEST_SUITE_END()
