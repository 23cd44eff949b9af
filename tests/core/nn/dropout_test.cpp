// nn::Dropout: the op with the layer's key and the stream in scope; evaluation and p = 0 are the
// identity; backward uses its forward's stream; no stream in scope is an error.
#include "core/nn/dropout.h"

#include <boost/test/unit_test.hpp>
#include <string>

#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

Tensor step_count(int step) {
  return Tensor::from_floats({2}, {static_cast<float>(step), 0.0f}, DType::i32);
}

bool says(const Error& e, const std::string& part) {
  return std::string(e.what()).find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_dropout)

BOOST_AUTO_TEST_CASE(the_key_comes_from_the_generator) {
  Generator generator(21), copy(21);
  const nn::Dropout dropout(0.1f, generator);
  BOOST_TEST(dropout.key() == copy.next_u64());
  BOOST_TEST(generator.next_u64() == copy.next_u64());  // exactly one draw
  BOOST_TEST(dropout.type_name() == "Dropout");
  BOOST_TEST(dropout.options() == "p=0.1");
}

BOOST_AUTO_TEST_CASE(a_training_forward_and_backward_draw_the_ops_mask_from_the_stream) {
  Generator generator(22);
  nn::Dropout dropout(0.3f, generator);
  const Tensor x = random_tensor({6, 4, 5}, DType::f16, generator, 0.5f, 1.0f);
  const Tensor dy = random_tensor({6, 4, 5}, DType::f16, generator, 0.5f, 1.0f);
  const Tensor step = step_count(12);
  const DropoutMask mask = make_dropout_mask("test", 0.3f, dropout.key(), 5, 3);
  Tensor y;
  {
    const nn::DropoutStreamScope scope({&step, 5, 3});
    y = dropout.forward(x);
  }
  BOOST_TEST(same_bits(y, dropout_forward(x, mask, step)));
  BOOST_TEST(!same_bits(y, x));
  // Backward outside the scope, and inside another one: the forward's stream.
  BOOST_TEST(same_bits(dropout.backward(dy), dropout_backward(dy, mask, step)));
  {
    const nn::DropoutStreamScope scope({&step, 5, 3});
    dropout.forward(x);
  }
  const Tensor other = step_count(13);
  const nn::DropoutStreamScope scope({&other, 0, 1});
  BOOST_TEST(same_bits(dropout.backward(dy), dropout_backward(dy, mask, step)));
}

BOOST_AUTO_TEST_CASE(scopes_nest) {
  Generator generator(23);
  nn::Dropout dropout(0.5f, generator);
  const Tensor x = random_tensor({4, 64}, DType::f32, generator, 0.5f, 1.0f);
  const Tensor outer_step = step_count(1), inner_step = step_count(2);
  const nn::DropoutStreamScope outer({&outer_step, 0, 1});
  {
    const nn::DropoutStreamScope inner({&inner_step, 0, 1});
    BOOST_TEST(nn::active_dropout_stream()->step_count == &inner_step);
  }
  BOOST_TEST(nn::active_dropout_stream()->step_count == &outer_step);
  BOOST_TEST(same_bits(
      dropout.forward(x),
      dropout_forward(x, make_dropout_mask("test", 0.5f, dropout.key(), 0, 1), outer_step)));
}

BOOST_AUTO_TEST_CASE(evaluation_and_p_zero_are_the_identity_without_a_stream) {
  Generator generator(24);
  const Tensor x = random_tensor({3, 7}, DType::bf16, generator);
  nn::Dropout dropout(0.5f, generator);
  dropout.set_training(false);
  BOOST_TEST(nn::active_dropout_stream() == nullptr);
  BOOST_TEST(dropout.forward(x).raw() == x.raw());  // the input itself
  nn::Dropout none(0.0f, generator);
  BOOST_TEST(none.forward(x).raw() == x.raw());
  BOOST_TEST(none.backward(x).raw() == x.raw());
}

BOOST_AUTO_TEST_CASE(misuse_is_an_error) {
  Generator generator(25);
  nn::Dropout dropout(0.5f, generator);
  const Tensor x = Tensor::from_floats({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
  BOOST_CHECK_EXCEPTION(dropout.forward(x), Error, [](const Error& e) {
    return says(e, "Dropout (p=0.5): a training forward needs the step's random stream") &&
           says(e, "app::train_step") && says(e, "nn::DropoutStreamScope");
  });
  BOOST_CHECK_EXCEPTION(dropout.backward(x), Error, [](const Error& e) {
    return says(e, "backward without a training forward");
  });
  for (const float p : {-0.5f, 1.0f})
    BOOST_CHECK_EXCEPTION(nn::Dropout(p, generator), UsageError,
                          [](const Error& e) { return says(e, "must be in [0, 1)"); });
  BOOST_CHECK_EXCEPTION(nn::DropoutStreamScope({nullptr, 0, 1}), Error,
                        [](const Error& e) { return says(e, "step count"); });
}

BOOST_AUTO_TEST_SUITE_END()
